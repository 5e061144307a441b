"""Named presets: the seed papers' methods and the project's own defaults (docs/presets.md).

`Config.preset("paper")` is ETAMem as its paper describes it, `Config.preset("paper",
method="fta")` FTA-Mem as its paper does, and `Config.preset("default")` the project's best
(the `Config` defaults). The project's additions over the paper are listed one by one in
`ADDITIONS`: each is a named switch, with the values that turn it off (the paper's behaviour);
the ETAMem paper preset is every addition switched off. Values the seeds leave open are chosen
in `CHOICES` (what the seed says, what we chose, why), which docs/presets.md renders as its
table (tests/test_presets.py checks the page against these tables).

Offline substitutes the presets cannot remove: the rule extractor stands in for the LLM
extraction, VADER for the RoBERTa sentiment classifier; with an LLM endpoint configured
(`llm_model`, `$ETAMEM_LLM_MODEL`) the paper presets extract and answer with the LLM, as the
papers do (`extractor="auto"`, `fta_detector="auto"`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

PRESETS = ("default", "paper")
METHODS = ("etamem", "fta")
META_KEY = "preset"  # store meta key naming the preset that built the store


@dataclass(frozen=True)
class Addition:
    """One of the project's additions over the paper: `name` (a switch), what it does,
    `paper` (the Config values that turn it off), and whether it acts at query time only
    (`query_time`; otherwise a store must be built with it off)."""

    name: str
    what: str
    paper: tuple[tuple[str, Any], ...]
    query_time: bool = True


# ETAMem: from the paper towards the project's default, in the order the ladder of
# `etamem bench --systems paper-to-default` switches them on (docs/presets.md).
ADDITIONS: tuple[Addition, ...] = (
    Addition("wide-search", "beam 30 and a routed pool of 200 units cut to K (paper: B = 10, the view budgets sum to K)",
             (("beam_width", 10), ("route_budget", 20))),
    Addition("text-merge", "the union of the views re-scored by text cosine (paper: each unit keeps the best "
             "score of the views that found it, affective cosine for the Affect view)",
             (("merge_scoring", "view"),)),
    Addition("routing-cap", "entropy over each view's 256 best leaves (paper: every leaf)",
             (("routing_candidates", 1_000_000),)),
    Addition("turn-context", "a unit scored with its source turn and the turns around it (paper: the unit's text)",
             (("context_share", 0.0),)),
    Addition("dialogue-terms", "speaker names out of the query vector, questions penalised, replies followed, "
             "speaker boosts (paper: none)",
             (("query_name_mix", 0.0), ("question_penalty", 0.0), ("follow_replies", False),
              ("speaker_boost", 0.0), ("self_boost", 0.0))),
    Addition("exact-candidates", "the best units of one exact search join the beams' candidates (paper: beams only)",
             (("flat_candidates", 0),)),
    Addition("turn-diversity", "hits citing a turn already cited go after the others (paper: dedupe by unit only)",
             (("turn_diverse", False),)),
    Addition("agreement-fallback", "raw turns join unless the views and the raw-turn index agree (paper: when the "
             "best score is below a threshold)",
             (("fallback_confidence", "score"), ("fallback_threshold", 0.6))),
    Addition("time-boost", "a score bonus inside a time window parsed from the query (paper: none)",
             (("time_boost", 0.0),)),
    Addition("current-first", "a superseded fact ranks after what replaced it (facts that change; paper: none)",
             (("current_first", False),)),
    Addition("turns-answer", "an LLM answer reads the evidence's source turns only (paper: memory lines, their "
             "source turns and the Time context)", (("answer_context", "packet"),)),
    Addition("supersession", "`supersedes` links made at write time (paper: none)",
             (("supersession", "off"),), query_time=False),
    Addition("batch-insert", "the units of one add() inserted with one descent per tree (paper: unit by unit)",
             (("insert_batch", 1),), query_time=False),
)

# FTA-Mem: the paper's settings over the project's defaults (etamem/fta; docs/fta-paper.md)
FTA_PAPER: dict[str, Any] = {
    "method": "fta",
    "fta_segmentation": "bws",  # Algorithm 1, W = 20
    "fta_window": 20,
    "fta_detector": "auto",  # the LLM detector with an endpoint, the offline detector as its substitute
    "fta_qa_veto": "offline",  # the LLM detector's segments taken as returned
    "fta_links": True,  # temporal-link maintenance
    "fta_link_candidates": "similarity",  # candidate neighbours by embedding similarity
    "fta_lambda": 0.8,  # eq. 8
    "fta_tau": 0.35,
    "fta_cue": True,
    "fta_bm25_weight": 0.0,  # eq. 8 has no lexical term (0.1 is ours)
    "fta_neighbours": True,  # one linked neighbour per retrieved unit
    "fta_neighbour_order": "after-hit",  # eq. 10
    "fta_packet": "sections",  # primary units, neighbours, source spans, auxiliary memory
    "fta_auxiliary": True,
    "fta_rewrite": True,  # query rewriting enabled (an LLM; offline the query as is)
    "fta_anchors": "all",  # the full Fact-Time-Affect unit
    "fta_question_only": False,
    "fta_construction_temperature": 0.7,  # construction at 0.7, answers at 0
    "text_encoder": "minilm",  # all-MiniLM-L6-v2
    "supersession": "off",  # facts that change: ours, not the seed's
    "current_first": False,
}
FTA_TOP_K = {"locomo": 25, "default": 10}  # K: 25 on LoCoMo, 10 on ES-MemEval (the paper's ablations)
# (the answer packet's size follows K: `context_top_k` is set to the same value)

# values the seeds leave open or fix: (setting, what the seed says, our choice, why)
CHOICES: tuple[tuple[str, str, str, str], ...] = (
    ("bm25_weight", "beta = 0.1 is best (Fig. 4)", "0.1", "the paper's"),
    ("top_k", "K = 20 is best (Fig. 4)", "20", "the paper's"),
    ("beam_width", "B = 10 is best (Fig. 4)", "10", "the paper's"),
    ("route_budget", "entropy routing splits the retrieval budget across the views", "20 (= K)",
     "the views' budgets sum to K"),
    ("routing_temperature", "softmax over query-to-leaf similarities; no temperature given", "0.05",
     "sharp enough to tell a concentrated view from a flat one with cosines in [0.2, 0.6]"),
    ("bm25_norm", "BM25 combined with similarity; normalisation not given", "minmax over the candidates",
     "keeps (1 - beta) * cos + beta * BM25 on one scale"),
    ("fallback_threshold", "raw turns when the memories are insufficient; threshold not given", "0.6 (best score)",
     "the best score of 180 LoCoMo dev questions under the preset falls below 0.6 for about a tenth of them "
     "(5th / 10th / 50th percentile 0.59 / 0.62 / 0.75); 0.3 never fired"),
    ("fallback_turns", "not given", "40", "the same number as the project's default"),
    ("b_max, m_max_init, m_min, b_ins, tau_*_init", "capacities and thresholds calibrated online; initial values "
     "not given", "8, 12, 2, 3, 0.35 / 0.25 / 0.90", "the project's (docs/design.md, 'Semantic trees')"),
    ("calibration_low_pct / high_pct / ema_alpha", "Otsu, percentiles, EMA; values not given", "10 / 90 / 0.3",
     "the project's"),
    ("affect_backend", "RoBERTa sentiment (cardiffnlp)", "auto: RoBERTa when its weights are local, else VADER",
     "no PyPI package carries the weights: VADER offline"),
    ("extractor", "an LLM extracts the AMUs", "auto: the LLM when configured, else the rule extractor",
     "offline substitute"),
    ("text_encoder", "text-embedding-3-small (CloneMem) / not stated for LoCoMo", "all-MiniLM-L6-v2",
     "offline; `openai:<model>` with an endpoint"),
    ("fta top_k", "K = 25 on LoCoMo, 10 on ES-MemEval", "25 for LoCoMo runs, else 10", "the paper's"),
    ("fta_bm25_weight", "R = lambda * cos + (1 - lambda) * cue", "0", "the paper's score"),
    ("fta_link_top / fta_link_floor", "candidate neighbours by similarity; how many and how close not given",
     "5 / cosine 0.5", "the project's"),
)


def additions_off(names: list[str] | tuple[str, ...] | None = None, *, query_time_only: bool = False) -> dict[str, Any]:
    """The Config values turning off the named additions (None: all of them)."""
    known = {a.name for a in ADDITIONS}
    unknown = sorted(set(names or ()) - known)
    if unknown:
        raise ValueError(f"unknown addition(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    out: dict[str, Any] = {}
    for a in ADDITIONS:
        if (names is None or a.name in names) and (a.query_time or not query_time_only):
            out.update(a.paper)
    return out


def preset_values(name: str, method: str | None = None, dataset: str | None = None) -> dict[str, Any]:
    """Config values of a preset (on top of the defaults). `method`: "etamem" (default) or
    "fta"; `dataset`: sets FTA-Mem's K as the paper does per dataset ("locomo": 25, else 10).
    Includes `preset_name`."""
    if name not in PRESETS:
        raise ValueError(f"preset {name!r}: expected one of {', '.join(PRESETS)}")
    method = method or "etamem"
    if method not in METHODS:
        raise ValueError(f"preset method {method!r}: expected one of {', '.join(METHODS)}")
    values: dict[str, Any] = {"preset_name": name}
    if method == "fta":
        values["method"] = "fta"
    if name == "paper":
        if method == "etamem":
            values.update(additions_off())
        else:
            values.update(FTA_PAPER)
            values["top_k"] = values["context_top_k"] = FTA_TOP_K.get(dataset or "default", FTA_TOP_K["default"])
    return values


def differences(config_values: Mapping[str, Any], base_values: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """field -> (base, config) for every field whose value differs (secrets and paths left out)."""
    skip = {"llm_api_key", "llm_cache_path", "preset_name"}
    return {k: (base_values.get(k), v) for k, v in config_values.items()
            if k not in skip and _norm(v) != _norm(base_values.get(k))}


def _norm(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def check_store_preset(store, name: str) -> str | None:
    """Record `name` in a store that has no preset and no spaces yet (the preset that builds it);
    return the recorded preset when it differs from `name` (the caller warns), else None. A store
    made before presets existed records nothing (it was built by that day's defaults)."""
    saved = store.get_meta(META_KEY)
    if saved is None:
        if not store.spaces():
            store.set_meta(META_KEY, name)
        return None
    return saved if saved != name else None
