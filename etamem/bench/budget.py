"""Evidence within the reader's budget: how many tokens of a system's answer context the reader
must take before the question's evidence is in it (see docs/benchmarks.md, 'Evidence within the
reader's budget').

A system fills the reader's context in rank order. For each gold turn the runner renders the
context of the ranking's first i units, where unit i is the first that carries that turn, exactly
as the answer prompt shows it (ETAMem: its units' source turns under `Config.answer_context`
"turns", else its memory lines, less those that only restate their source turns, and the source
turns; FTA-Mem: its packet's units, neighbours and dialogue spans; flat baselines: the turns), and
counts its tokens with the reader's tokenizer. Supplements
(ETAMem's Time context, FTA-Mem's auxiliary memory) come after the evidence in a context cut to a
budget (`etamem.models.tokens.pack`), so they are not counted. The context cut at B tokens holds
that turn iff this count is <= B: contexts only grow as units are added, so the longest prefix
that fits B holds unit i exactly when the prefix ending at i fits.

Per question the record keeps one count per gold turn (None: not in the system's pool);
`summarise` turns them into shares of questions at each budget (any evidence turn in; all of
them in), evidence recall within the budget, the median tokens to the first evidence turn, and
paired differences against a baseline system.
"""
from __future__ import annotations

import statistics
from typing import Callable, Mapping, Sequence

import numpy as np

from etamem.bench.metrics import bootstrap_interval, clustered_bootstrap_interval
from etamem.bench.paired import paired

BUDGETS = (500, 1000, 2000)
CONTEXT = "evidence-first/2"  # how the counted context is filled (records made otherwise are counted again)
BASELINE = "hybrid-turns"


def context_tag(spec, config) -> str:
    """`CONTEXT`, marked "/turns" for a system whose reader gets its units' source turns only
    (`SystemSpec.turns_only`): a record counted otherwise is counted again."""
    return CONTEXT + ("/turns" if spec.turns_only(config) else "")


def evidence_tokens(sources: Sequence[Sequence[str]], gold: Sequence[str], render: Callable[[int], str],
                    count: Callable[[str], int]) -> list[int | None]:
    """Tokens of the context that first holds each gold turn, in `gold`'s order.

    Args:
        sources: the ranked units' source turn ids, best unit first.
        gold: the question's evidence turn ids.
        render: n -> the context text of the first n units (as the reader sees it).
        count: text -> tokens (the reader's tokenizer).

    Returns:
        One entry per gold turn: count(render(i + 1)) for the first unit i carrying it, None
        when no unit carries it.
    """
    first: dict[str, int] = {}
    for i, turns in enumerate(sources):
        for t in turns:
            first.setdefault(t, i)
    tokens: dict[int, int] = {}
    out: list[int | None] = []
    for t in gold:
        i = first.get(t)
        if i is None:
            out.append(None)
            continue
        if i not in tokens:
            tokens[i] = count(render(i + 1))
        out.append(tokens[i])
    return out


def context_text(wb, spec, space: str, ranking, n: int, turns: Mapping) -> str:
    """The evidence part of the answer context of `ranking`'s first n units, as the reader sees
    it: FTA-Mem's packet without its auxiliary memory; otherwise the answer prompt's memory lines
    and their source turns. The supplements (ETAMem's Time context, FTA-Mem's auxiliary memory)
    are left out: a context cut to a budget fills them after the evidence (`models.tokens.pack`,
    as `Memory.answer` does), so they never hold an evidence turn back. A system whose reader gets
    turns only (`SystemSpec.turns_only`: ETAMem by default) is counted on those turns.

    Args:
        wb: the run's `Workbench`.
        spec: the system.
        space: the conversation's space.
        ranking: the system's `Ranking` (units, with hits for ETAMem / FTA-Mem).
        n: units taken, best first.
        turns: turn id -> `Turn` of the conversation.
    """
    from etamem.bench.qa import format_sources, format_units

    units = ranking.units[:n]
    if spec.kind == "fta":
        return wb.fta_packet(spec, space, ranking.hits[:n], auxiliary=False)
    if spec.turns_only(wb.config):  # the units' source turns, as the answer prompt shows them
        from etamem.bench.qa_context import as_turns

        units = as_turns(units, turns)
    shown = turns if wb.config.answer_memory_lines == "distinct" else None  # as the answer prompt
    return "\n".join([format_units(units, shown), format_sources(units, turns)])


def within(tokens: Sequence[int | None], budget: int) -> tuple[float, float, float]:
    """(any gold turn within `budget`, all within, share within) for one question's counts."""
    inside = [t is not None and t <= budget for t in tokens]
    return float(any(inside)), float(all(inside)), sum(inside) / len(inside)


def first_tokens(tokens: Sequence[int | None]) -> int | None:
    """Tokens to the first evidence turn (None: none in the pool)."""
    seen = [t for t in tokens if t is not None]
    return min(seen) if seen else None


def _values(records: Mapping, system: str, budget: int, which: int) -> dict[str, tuple[str, float]]:
    out = {}
    for key, rec in records.items():
        if key[0] == "retrieval" and key[1] == system and rec.get("evidence_tokens"):
            out[rec["qid"]] = (rec["space"], within(rec["evidence_tokens"], budget)[which])
    return out


def summarise(records: Mapping, systems: Sequence[str], budgets: Sequence[int] = BUDGETS,
              baseline: str = BASELINE) -> dict | None:
    """Per system and budget: share of questions with any / all evidence turns in the context
    (95% intervals over questions and clustered by conversation), evidence recall within it,
    the paired difference in the any-share against `baseline`, and the median tokens to the
    first evidence turn. None when no record carries evidence counts."""
    out: dict[str, dict] = {}
    for system in systems:
        recs = [r for k, r in records.items() if k[0] == "retrieval" and k[1] == system and r.get("evidence_tokens")]
        if not recs:
            continue
        firsts = [first_tokens(r["evidence_tokens"]) for r in recs]
        reached = [f for f in firsts if f is not None]
        row = {"questions": len(recs), "tokenizer": recs[0].get("evidence_tokenizer"),
               "median_first_tokens": statistics.median(reached) if reached else None,
               "reached_in_pool": len(reached) / len(recs), "budgets": {}}
        for b in budgets:
            cell = {}
            for name, which in (("any", 0), ("all", 1), ("recall", 2)):
                vals = _values(records, system, b, which)
                xs = np.array([v for _, v in vals.values()], np.float64)
                cell[name] = float(xs.mean())
                cell[name + "_interval"] = bootstrap_interval(xs)
                if name == "any":
                    cell["any_clustered"] = clustered_bootstrap_interval(xs, [s for s, _ in vals.values()])
            if system != baseline:
                base = _values(records, baseline, b, 0)
                if base:
                    cell["vs_baseline"] = paired(base, _values(records, system, b, 0))
            row["budgets"][str(b)] = cell
        out[system] = row
    return {"budgets": list(budgets), "baseline": baseline, "systems": out} if out else None


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def table(summary: dict, labels: Mapping[str, str]) -> list[str]:
    """Markdown rows: one per system, the any-share at each budget with its interval, the paired
    difference against the baseline, the all-share and the median tokens to first evidence."""
    budgets = summary["budgets"]
    head = (["system"] + [f"any @{b} [95%]" for b in budgets] + [f"vs {summary['baseline']} @{b} [95%]"
                                                                  for b in budgets]
            + [f"all @{b}" for b in budgets] + ["median tokens to 1st evidence", "questions"])
    rows = []
    for system, row in summary["systems"].items():
        cells = [labels.get(system, system)]
        for b in budgets:
            c = row["budgets"][str(b)]
            lo, hi = c["any_interval"]
            cells.append(f"{_pct(c['any'])} [{_pct(lo)}, {_pct(hi)}]")
        for b in budgets:
            d = row["budgets"][str(b)].get("vs_baseline")
            if not d or not d.get("questions"):
                cells.append("–")
                continue
            lo, hi = d["interval"]
            cells.append(f"{100 * d['difference']:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]")
        cells += [_pct(row["budgets"][str(b)]["all"]) for b in budgets]
        med = row["median_first_tokens"]
        cells += ["–" if med is None else f"{med:.0f}", str(row["questions"])]
        rows.append(cells)
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in rows]


__all__ = ["BUDGETS", "evidence_tokens", "context_text", "within", "first_tokens", "summarise", "table"]
