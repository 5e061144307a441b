"""Paired comparisons of two systems over the same questions, with uncertainty.

A difference between two systems is the mean over the questions both answered of (after -
before) on one metric, with three measures of how far to trust it: a 95% bootstrap interval
over questions, a 95% bootstrap interval clustered by conversation (whole conversations
resampled: questions of one conversation are not independent) and a two-sided sign-flip
p-value flipping whole conversations (`metrics.paired_p_value`). Used by the report's 'From the
paper to the default' table (`ladder-*` systems) and by `benchmarks/compare_runs.py`.
"""
from __future__ import annotations

from typing import Mapping

import numpy as np

from etamem.bench.metrics import bootstrap_interval, clustered_bootstrap_interval, paired_p_value


def main_metric(dataset: str, ks) -> str:
    """The metric a run's headline figures use: evidence recall@20 (or the largest k) on LoCoMo
    and PrefEval, recall_any@k on LoCoMo-Plus, current_first on updates, session recall_all@10
    on LongMemEval."""
    k = 20 if 20 in ks else max(ks)
    return {"locomo-plus": f"recall_any@{k}", "longmemeval": "session_recall_all@10",
            "updates": "current_first"}.get(dataset, f"recall@{k}")


def question_values(records: Mapping, system: str, metric: str) -> dict[str, tuple[str, float]]:
    """qid -> (space, value of `metric`) over `system`'s retrieval records that carry it."""
    out = {}
    for key, rec in records.items():
        if key[0] == "retrieval" and key[1] == system and rec["metrics"].get(metric) is not None:
            out[rec["qid"]] = (rec["space"], float(rec["metrics"][metric]))
    return out


def paired(before: Mapping[str, tuple[str, float]], after: Mapping[str, tuple[str, float]], *,
           resamples: int = 2000, seed: int = 0) -> dict:
    """Difference (after - before) over the questions in both, its intervals (questions;
    clustered by space), the clustered sign-flip p-value, and questions up / down."""
    qids = sorted(set(before) & set(after))
    if not qids:
        return {"questions": 0}
    d = np.array([after[q][1] - before[q][1] for q in qids], np.float64)
    spaces = [before[q][0] for q in qids]
    return {"questions": len(qids), "before": float(np.mean([before[q][1] for q in qids])),
            "after": float(np.mean([after[q][1] for q in qids])), "difference": float(d.mean()),
            "interval": bootstrap_interval(d, resamples=resamples, seed=seed),
            "clustered_interval": clustered_bootstrap_interval(d, spaces, resamples=resamples, seed=seed),
            "p_value": paired_p_value(d, spaces, seed=seed), "p_value_questions": paired_p_value(d, seed=seed),
            "conversations": len(set(spaces)),
            "up": int((d > 0).sum()), "down": int((d < 0).sum())}


def ladder(records: Mapping, keys: list[str], labels: Mapping[str, str], metric: str) -> list[dict]:
    """One row per present `ladder-*` system, in order: its mean and the paired gain over the
    step before it."""
    rows, prev = [], None
    for key in keys:
        values = question_values(records, key, metric)
        if not values:
            continue
        row = {"system": key, "label": labels[key], "mean": float(np.mean([v for _, v in values.values()]))}
        if prev is not None:
            row["step"] = paired(prev, values)
        rows.append(row)
        prev = values
    return rows


def qa_values(records: Mapping, system: str, metric: str, qids) -> dict[str, tuple[str, float]]:
    """qid -> (space, value) over `system`'s answer records of `qids`: metric "judge" (1 / 0 by
    the judge's verdict; answers without a verdict left out) or a record field such as "f1"."""
    out = {}
    for q in qids:
        rec = records.get(("qa", system, q))
        if rec is None:
            continue
        value = rec.get("correct") if metric == "judge" else rec.get(metric)
        if value is not None:
            out[q] = (rec["space"], float(value))
    return out


def qa_against(records: Mapping, systems, qids, baseline: str = "hybrid-turns",
               metrics=("judge", "f1")) -> dict[str, dict[str, dict]]:
    """system -> metric -> `paired(baseline, system)` over the answers both have; {} without the
    baseline's answers."""
    base = {m: qa_values(records, baseline, m, qids) for m in metrics}
    if not any(base.values()):
        return {}
    return {s: {m: paired(base[m], qa_values(records, s, m, qids)) for m in metrics}
            for s in systems if s != baseline and qa_values(records, s, metrics[0], qids)}


def clustered(records: Mapping, system: str, metric: str) -> tuple[float, float] | None:
    """`system`'s 95% interval of `metric` over all questions, conversations resampled."""
    values = question_values(records, system, metric)
    return clustered_bootstrap_interval([v for _, v in values.values()], [s for s, _ in values.values()])


def _pts(x: float) -> str:
    return f"{100 * x:+.1f}"


def step_cell(step: dict | None) -> list[str]:
    """Gain (points), its two intervals, the two p-values, up/down, as report cells ("–" without a step)."""
    if not step or not step.get("questions"):
        return ["–"] * 4
    ci, cc = step["interval"], step["clustered_interval"]
    return [_pts(step["difference"]), f"[{_pts(ci[0])}, {_pts(ci[1])}] / [{_pts(cc[0])}, {_pts(cc[1])}]",
            f"{step['p_value_questions']:.3f} / {step['p_value']:.3f}", f"{step['up']} / {step['down']}"]
