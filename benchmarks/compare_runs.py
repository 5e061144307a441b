"""Per-conversation recall of one system in two `etamem bench` runs (is a gain the same everywhere?)

    python -m benchmarks.compare_runs BEFORE_DIR AFTER_DIR [--systems etamem no-fallback] [--k 20]
        [--metric recall] [--before-system KEY --after-system KEY]

BEFORE_DIR / AFTER_DIR: `--out` folders of `etamem bench` (their `results.jsonl`), e.g. the same
stores searched with `--set` turning a change off and with the defaults. Prints, per system, the
mean recall@k per space (conversation) in both runs and the difference, and how many spaces
gained, then the overall difference with its 95% paired bootstrap interval (questions resampled,
`--resamples` times, seeded), the same interval with whole conversations resampled, the
two-sided sign-flip p-values (flipping questions / whole conversations; etamem/bench/paired.py)
and how many questions went up or down. `--before-system` / `--after-system` pair two different
systems (e.g. the paper run's `etamem` against the default run's `ladder-0`; one folder may be
given twice). Retrieval rows only; a
question is counted where both runs have it. `--metric`: the row's metric before `@k` (`recall`;
LoCoMo-Plus `recall_any`).
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from etamem.bench.metrics import bootstrap_interval, clustered_bootstrap_interval, paired_p_value


def recalls(folder: str | Path, system: str, k: int, metric: str = "recall") -> dict[str, dict[str, float]]:
    """space -> qid -> `metric`@k of `system` in the run's results.jsonl."""
    out: dict[str, dict[str, float]] = defaultdict(dict)
    with open(Path(folder) / "results.jsonl", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            if row.get("type") == "retrieval" and row.get("system") == system and f"{metric}@{k}" in row["metrics"]:
                out[row["space"]][row["qid"]] = float(row["metrics"][f"{metric}@{k}"])
    return out


def compare(before: str, after: str, system: str, k: int = 20, metric: str = "recall",
            after_system: str | None = None) -> list[dict]:
    """One row per space: questions, mean `metric`@k before and after (questions in both runs)."""
    a, b = recalls(before, system, k, metric), recalls(after, after_system or system, k, metric)
    rows = []
    for space in sorted(set(a) & set(b)):
        qids = sorted(set(a[space]) & set(b[space]))
        if qids:
            rows.append({"space": space, "questions": len(qids),
                         "before": sum(a[space][q] for q in qids) / len(qids),
                         "after": sum(b[space][q] for q in qids) / len(qids)})
    return rows


def paired_interval(before: str, after: str, system: str, k: int = 20, resamples: int = 5000,
                    seed: int = 0, metric: str = "recall", after_system: str | None = None) -> dict:
    """Mean recall@k difference (after - before) over the questions in both runs, its 95%
    percentile bootstrap interval (questions resampled with replacement), the interval with whole
    spaces (conversations) resampled, the sign-flip p-values (questions / spaces) and the counts
    of questions whose recall went up / down."""
    a, b = recalls(before, system, k, metric), recalls(after, after_system or system, k, metric)
    pairs = [(s, a[s][q], b[s][q]) for s in sorted(set(a) & set(b)) for q in sorted(set(a[s]) & set(b[s]))]
    diff = np.array([y - x for _, x, y in pairs], np.float64)
    if not diff.size:
        return {"questions": 0}
    spaces = [s for s, _, _ in pairs]
    low, high = bootstrap_interval(diff, resamples=resamples, seed=seed)
    c_low, c_high = clustered_bootstrap_interval(diff, spaces, resamples=resamples, seed=seed)
    return {"questions": int(diff.size), "difference": float(diff.mean()), "low": low,
            "high": high, "clustered_low": c_low, "clustered_high": c_high, "spaces": len(set(spaces)),
            "p_value": paired_p_value(diff, spaces, seed=seed), "p_value_questions": paired_p_value(diff, seed=seed),
            "up": int((diff > 0).sum()), "down": int((diff < 0).sum())}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--systems", nargs="+", default=["etamem", "no-fallback"])
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--metric", default="recall", help="metric name before @k (LoCoMo-Plus: recall_any)")
    ap.add_argument("--resamples", type=int, default=5000, help="bootstrap resamples of the questions")
    ap.add_argument("--before-system", default=None, help="compare this system of BEFORE_DIR ...")
    ap.add_argument("--after-system", default=None, help="... with this system of AFTER_DIR (default: the same)")
    args = ap.parse_args(argv)
    if args.before_system:
        args.systems = [args.before_system]
    for system in args.systems:
        rows = compare(args.before, args.after, system, args.k, args.metric, args.after_system)
        if not rows:
            print(f"{system}: no common questions")
            continue
        print(f"\n{system}: {args.metric}@{args.k} per space\n\n| space | questions | before | after | difference |\n|---|---|---|---|---|")
        for r in rows:
            print(f"| {r['space']} | {r['questions']} | {r['before']:.3f} | {r['after']:.3f} | "
                  f"{100 * (r['after'] - r['before']):+.1f} |")
        print(f"\n{sum(r['after'] > r['before'] for r in rows)} of {len(rows)} spaces gained")
        d = paired_interval(args.before, args.after, system, args.k, args.resamples, metric=args.metric,
                            after_system=args.after_system)
        print(f"overall: {100 * d['difference']:+.2f} points over {d['questions']} questions, 95% paired bootstrap "
              f"interval [{100 * d['low']:+.2f}, {100 * d['high']:+.2f}]; {d['up']} up, {d['down']} down")
        print(f"clustered by space ({d['spaces']} spaces resampled): [{100 * d['clustered_low']:+.2f}, "
              f"{100 * d['clustered_high']:+.2f}]; sign-flip p = {d['p_value_questions']:.4f} (questions), "
              f"{d['p_value']:.4f} (spaces)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
