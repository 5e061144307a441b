"""The systems a benchmark run compares, by name, and what each returns for a question: a
ranked list of `Unit`s (source turn ids + text), best first.

Flat baselines rank raw turns (BM25, dense, hybrid by reciprocal-rank fusion with k 10; turn
text `speaker: text`, plus the date for BM25) or AMUs ((1 - beta) * cos + beta * BM25n, no
hierarchy). ETAMem systems call `Memory.retrieve` on a store built once per construction
(`amu`: the configured extractor; `turn`: turns as units; `shared_text` / `shared_affect`:
one representation for both semantic views; `unified_semantic` / `unified_affective`: every
AMU in one semantic tree); retrieval-time ablations (views, routing, fallback, beta, beam)
share the `amu` store. A system with a `time_store` takes its Event and Affect views from its
construction and its Time view, merge scoring and raw turns from that store (`composite.py`).
`full-context` puts the whole conversation in the answer prompt (LLM only). FTA-Mem systems
(`fta*`) call `Memory.retrieve` on an FTA store (`Config(method="fta")`, one per segmentation
mode or anchor set, `ablations.FTA_CONSTRUCTIONS`); `fta-no-links` / `fta-no-cue` / `fta-no-bm25`
(the paper's score, no lexical term) / `fta-flat-packet` / `fta-no-aux` / `fta-no-rewrite` /
`fta-question-only` change only the query-time config, and
`etamem-over-fta` runs ETAMem's routed retrieval over the `fta` store's units (the two combined).
`etamem-as-turns` ranks as `etamem` and gives the reader that ranking's source turns only, in rank
order and formatted as the flat systems' turns (no unit lines, no Time context), whatever
`Config.answer_context` says; `etamem-packet` gives it the paper's packet (unit lines, their source
turns, the Time context): with a reader, the two tell the packet's format from the ranking (group
`packet`). `etamem` follows `Config.answer_context` (default "turns", as `etamem-as-turns`).
Group `fta-paper`: the systems of the FTA-Mem paper's Tables 6-8 and Fig. 3. Without an LLM,
`fta-no-rewrite` ranks as `fta` (there is no rewrite to leave out) and `fta-question-only`
retrieves nothing (its row is empty; with an LLM it answers from an empty packet).

Table 5 of the paper: Unified Semantic = `unified-semantic`, Unified Affective =
`unified-affective`, Unified Temporal = `time-only`; Shared Text / Shared Affect (§4.3.2) =
`shared-text` / `shared-affect`.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

ALL_VIEWS = ("event", "affect", "time")


@dataclass(frozen=True)
class SystemSpec:
    key: str
    label: str
    kind: str  # full_context | bm25_turns | dense_turns | hybrid_turns | flat_amus | etamem | fta
    construction: str | None = None  # store read by the system (None: raw turns only)
    overrides: tuple[tuple[str, Any], ...] = ()  # Config changes applied at query time
    views: tuple[str, ...] = ALL_VIEWS
    routing: str | None = None  # None: the config's
    fallback: bool = True
    time_store: str | None = None  # construction serving the Time view, merge and raw turns
    packet: str = "units"  # answer prompt: "units" (memory lines, source turns, Time context) | "turns" (source turns only)

    @property
    def needs_llm(self) -> bool:
        return self.kind == "full_context"

    def turns_only(self, config) -> bool:
        """Whether the reader gets the source turns only: packet "turns", or an ETAMem system whose
        `answer_context` (its override, else the run's config) is "turns", as `Memory.answer` under it."""
        context = dict(self.overrides).get("answer_context", config.answer_context)
        return self.packet == "turns" or (self.kind == "etamem" and context == "turns")

    @property
    def constructions(self) -> tuple[str, ...]:
        """The stores the system reads (built before it runs)."""
        return tuple(c for c in (self.construction, self.time_store) if c)


def _eta(key: str, label: str, **kw) -> SystemSpec:
    return SystemSpec(key, label, "etamem", kw.pop("construction", "amu"), **kw)


def _fta(key: str, label: str, **kw) -> SystemSpec:
    return SystemSpec(key, label, "fta", kw.pop("construction", "fta"), **kw)


SYSTEMS: tuple[SystemSpec, ...] = (
    SystemSpec("full-context", "Full context (LLM only)", "full_context"),
    SystemSpec("bm25-turns", "flat BM25 (turns)", "bm25_turns"),
    SystemSpec("dense-turns", "flat dense (turns)", "dense_turns"),
    SystemSpec("hybrid-turns", "flat hybrid RRF (turns)", "hybrid_turns"),
    SystemSpec("flat-amus", "flat hybrid (AMUs, no hierarchy)", "flat_amus", "amu"),
    _eta("etamem", "ETAMem full"),
    _eta("no-amus", "w/o AMUs (turns as units)", construction="turn"),
    _eta("no-hierarchy", "w/o hierarchy (exhaustive beam)", overrides=(("beam_width", 1_000_000),)),
    _eta("no-fallback", "w/o fallback", fallback=False),
    _eta("event-only", "Event view only", views=("event",)),
    _eta("affect-only", "Affect view only", views=("affect",)),
    _eta("time-only", "Time view only", views=("time",)),
    _eta("event+affect", "Event + Affect", views=("event", "affect")),
    _eta("event+time", "Event + Time", views=("event", "time")),
    _eta("affect+time", "Affect + Time", views=("affect", "time")),
    _eta("mean-routing", "mean routing", routing="mean"),
    _eta("no-bm25", "no BM25 (beta = 0)", overrides=(("bm25_weight", 0.0),)),
    _eta("shared-text", "shared text representation", construction="shared_text"),
    _eta("shared-affect", "shared affect representation", construction="shared_affect", time_store="amu"),
    _eta("unified-semantic", "unified semantic view", construction="unified_semantic", views=("event",)),
    _eta("unified-affective", "unified affective view", construction="unified_affective", views=("affect",)),
    _eta("etamem-rrf", "ETAMem full + raw-turn RRF (always)",
         overrides=(("fallback_threshold", 2.0), ("fallback_turns", 40), ("fallback_fusion", "rrf"))),
    # one switch at a time against the defaults (the diagnosis table of docs/benchmarks.md)
    _eta("previous-defaults", "ETAMem, the defaults before 'Beyond LoCoMo'",
         overrides=(("bm25_weight", 0.2), ("context_share", 0.5), ("flat_candidates", 0), ("context_impute", False),
                    ("self_boost", 0.0))),
    _eta("no-flat-candidates", "w/o exact candidates beside the beams", overrides=(("flat_candidates", 0),)),
    _eta("no-context-impute", "missing neighbours count 0", overrides=(("context_impute", False),)),
    _eta("long-turns-40", "units of long turns scored as their turn (40 words)", overrides=(("long_turn_words", 40),)),
    _eta("no-context", "w/o turn context (unit text only)", overrides=(("context_share", 0.0),)),
    _eta("turn-context-only", "turn context only (no unit text)", overrides=(("context_share", 1.0),)),
    _eta("no-dialogue", "w/o dialogue terms", overrides=(("query_name_mix", 0.0), ("question_penalty", 0.0),
                                                          ("follow_replies", False), ("speaker_boost", 0.0),
                                                          ("self_boost", 0.0))),
    _eta("no-speaker-boost", "w/o speaker boosts", overrides=(("speaker_boost", 0.0), ("self_boost", 0.0))),
    _eta("no-self-boost", "w/o self-statement boost", overrides=(("self_boost", 0.0),)),
    _eta("bm25-ceiling", "BM25 as share of its ceiling", overrides=(("bm25_norm", "ceiling"),)),
    _eta("wide-beam", "beam 30, budget 200", overrides=(("beam_width", 30), ("route_budget", 200))),
    _eta("narrow-beam", "beam 10, budget 80 (the defaults before 2026-12-03)",
         overrides=(("beam_width", 10), ("route_budget", 80))),
    _fta("fta", "FTA-Mem (BWS)"),
    _fta("fta-fixed-window", "FTA-Mem, fixed windows with the detector", construction="fta_fixed"),
    _fta("fta-plain-windows", "FTA-Mem, plain fixed windows (no detector)", construction="fta_plain_fixed"),
    _fta("fta-session", "FTA-Mem, session units", construction="fta_session"),
    _fta("fta-turn-pair", "FTA-Mem, turn-pair units", construction="fta_turn_pair"),
    _fta("fta-no-links", "FTA-Mem w/o links", overrides=(("fta_links", False),)),
    _fta("fta-no-time", "FTA-Mem w/o time anchor", construction="fta_no_time"),
    _fta("fta-no-affect", "FTA-Mem w/o affect anchor", construction="fta_no_affect"),
    _fta("fta-fact-only", "FTA-Mem, fact-only units", construction="fta_fact_only"),
    _fta("fta-question-only", "question only (no memory)", overrides=(("fta_question_only", True),)),
    _fta("fta-no-rewrite", "FTA-Mem w/o query rewrite", overrides=(("fta_rewrite", False),)),
    _fta("fta-no-cue", "FTA-Mem w/o cue (plain embedding)", overrides=(("fta_cue", False),)),
    _fta("fta-no-aux", "FTA-Mem w/o auxiliary memory", overrides=(("fta_auxiliary", False),)),
    _fta("fta-no-bm25", "FTA-Mem w/o BM25 (the paper's score)", overrides=(("fta_bm25_weight", 0.0),)),
    _fta("fta-flat-packet", "FTA-Mem, flat packet", overrides=(("fta_packet", "flat"),)),
    _eta("etamem-as-turns", "ETAMem's ranking read as its source turns (no unit lines, no Time context)",
         packet="turns"),
    _eta("etamem-packet", "ETAMem's ranking read as the paper's packet (unit lines, source turns, Time context)",
         overrides=(("answer_context", "packet"),)),
    _eta("etamem-over-fta", "ETAMem views over FTA units", construction="fta",
         overrides=(("method", "etamem"), ("units", "fta"))),
)


def _ladder() -> tuple[SystemSpec, ...]:
    """`ladder-0` .. `ladder-n`: the run's config with the project's query-time additions over the
    paper (etamem/presets.py `ADDITIONS`) switched on one at a time, in order: `ladder-0` is the
    paper's query-time settings, the last one the run's own (under the default preset, the
    default). Paired gains of each step: the report's 'From the paper to the default' table."""
    from etamem.presets import ADDITIONS

    steps = [a for a in ADDITIONS if a.query_time]
    specs = []
    for i in range(len(steps) + 1):
        off = tuple(kv for a in steps[i:] for kv in a.paper)
        label = "paper (query-time settings)" if i == 0 else f"+ {steps[i - 1].name}"
        specs.append(_eta(f"ladder-{i}", label, overrides=off))
    return tuple(specs)


LADDER = _ladder()
SYSTEMS = SYSTEMS + LADDER
BY_KEY = {s.key: s for s in SYSTEMS}
FTA_PAPER = ["fta", "fta-session", "fta-turn-pair", "fta-fixed-window", "fta-no-rewrite", "fta-no-cue",
             "fta-flat-packet", "fta-no-aux", "fta-no-time", "fta-no-links", "fta-no-affect", "fta-fact-only",
             "fta-question-only"]
GROUPS = {
    "baselines": ["full-context", "bm25-turns", "dense-turns", "hybrid-turns", "flat-amus"],
    "views": ["event-only", "affect-only", "time-only", "event+affect", "event+time", "affect+time"],
    "ablations": ["no-amus", "no-hierarchy", "no-fallback", "mean-routing", "no-bm25", "shared-text",
                  "shared-affect", "unified-semantic", "unified-affective"],
    "diagnosis": ["dense-turns", "hybrid-turns", "etamem", "previous-defaults", "no-flat-candidates", "no-context-impute", "long-turns-40",
                  "no-context", "turn-context-only", "no-dialogue", "no-speaker-boost", "no-self-boost", "no-bm25", "bm25-ceiling",
                  "mean-routing", "wide-beam", "narrow-beam", "no-hierarchy", "no-fallback", "etamem-rrf", "event-only",
                  "affect-only", "time-only"],
    "packet": ["hybrid-turns", "etamem-packet", "etamem-as-turns"],
    "unified": ["unified-semantic", "unified-affective", "time-only"],
    "fta-all": ["hybrid-turns", "etamem", "fta", "fta-fixed-window", "fta-session", "fta-turn-pair", "fta-no-links",
                "fta-no-cue", "fta-no-bm25", "fta-flat-packet", "etamem-over-fta"],
    # the FTA-Mem paper's Table 6 (granularity), Table 7 (fixed window), Table 8 and Fig. 3 (ablations)
    "fta-paper": FTA_PAPER,
    "paper-to-default": [s.key for s in LADDER],
    # etamem-as-turns, etamem-packet: a reader's diagnosis
    "all": [s.key for s in SYSTEMS if s not in LADDER and s.packet == "units" and s.key != "etamem-packet"],
}
DEFAULT_SYSTEMS = GROUPS["all"]
SWEEP_ALIASES = {"beta": "bm25_weight", "K": "top_k", "B": "beam_width", "budget": "route_budget",
                 "lambda": "fta_lambda", "tau": "fta_tau"}


def sweep_specs(items: list[str] | None, method: str = "etamem") -> list[SystemSpec]:
    """Systems of `--sweep NAME=V1,V2,...` (NAME a Config field or an alias: beta, K, B, budget,
    lambda, tau; values JSON): the run's ETAMem (or, for method "fta", FTA-Mem) system with that
    one query-time value changed, key `sweep:<field>=<value>`."""
    import json

    from etamem.config import Config

    specs: list[SystemSpec] = []
    fields = Config().to_dict()
    for item in items or []:
        name, sep, values = item.partition("=")
        field = SWEEP_ALIASES.get(name.strip(), name.strip())
        if not sep or field not in fields or not values.strip():
            raise ValueError(f"--sweep {item!r}: expected NAME=V1,V2,... with NAME a Config field or one of "
                             f"{', '.join(SWEEP_ALIASES)}")
        for raw in values.split(","):
            try:
                value = json.loads(raw)
            except json.JSONDecodeError:
                value = raw.strip()
            Config.from_dict({field: value})  # a bad value fails here, naming the field
            key = f"sweep:{field}={raw.strip()}"
            maker = _fta if method == "fta" else _eta
            specs.append(maker(key, f"{name.strip()} = {raw.strip()}", overrides=((field, value),)))
    return specs


def resolve_systems(names: list[str] | None) -> list[SystemSpec]:
    """Specs for system keys or group names (baselines, views, ablations, unified, paper-to-default, all), in order,
    without repeats; ValueError naming unknown ones."""
    keys: list[str] = []
    for name in names or DEFAULT_SYSTEMS:
        for key in GROUPS.get(name, [name]):
            if key not in BY_KEY:
                raise ValueError(f"unknown system {key!r}; known: {', '.join(BY_KEY)} "
                                 f"or groups {', '.join(GROUPS)}")
            if key not in keys:
                keys.append(key)
    return [BY_KEY[k] for k in keys]


@dataclass(frozen=True)
class Unit:
    """One ranked retrieval unit: an AMU (or a raw turn) with its source turns."""

    sources: tuple[str, ...]
    text: str
    timestamp: datetime
    views: tuple[str, ...]
