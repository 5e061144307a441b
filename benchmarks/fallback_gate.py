"""Does the raw-turn fallback's confidence gate tell sure from unsure?

    python -m benchmarks.fallback_gate [LOCOMO_JSON] --stores DIR [--set KEY=VALUE ...]
        [--thresholds 0.1 0.2 ...] [--out FILE.json]

For every LoCoMo question with evidence (category 5 excluded) ETAMem full is asked twice
through `Memory.retrieve` (top_k 80, as `etamem bench` does): with the fallback off (the views
alone) and with it always on (threshold 2). The "agreement" confidence of the second call is
the gate's input. A question counts as a view miss when the views alone have evidence recall@20
below 1. For each threshold t the table gives how often the gate fires (confidence < t), its
precision (fired questions that were view misses), its recall (view misses it fired on) and the
recall@20 of the gated system (fused answer where it fires, the views' elsewhere).

`--stores` is an `etamem bench` store directory whose `amu` store holds the file's conversations
(e.g. `<out>/stores` of `etamem bench locomo FILE --no-llm --systems etamem`). Retrieval only,
no LLM; deterministic.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from .locomo_retrieval import DEFAULT_FILE


def measure(path: str, stores: str, overrides: dict, k: int = 20, pool: int = 80) -> list[dict]:
    """Per question: category, views-alone recall@k, always-fused recall@k, agreement confidence."""
    from etamem import Config
    from etamem.bench.data import load
    from etamem.bench.metrics import distinct, evidence_recall
    from etamem.bench.run_stores import Workbench

    config = Config().replace(**overrides)
    wb = Workbench(config, stores, pool=pool)
    rows = []
    try:
        mem = wb.memory("amu")
        always = config.replace(fallback_threshold=2.0)
        for conv in load("locomo", path):
            if not wb.is_built("amu", conv):
                raise SystemExit(f"{stores}: the amu store lacks {conv.space}; build it with etamem bench first")
            for q in conv.questions:
                if not q.gold_turns:
                    continue
                got = {}
                for fallback in (False, True):
                    mem.config = always
                    try:
                        res = mem.retrieve(q.question, conv.space, top_k=pool, now=q.now, fallback=fallback)
                    finally:
                        mem.config = config
                    ranked = distinct(t for h in res.hits for t in h.source_turn_ids)
                    got[fallback] = (evidence_recall(ranked, q.gold_turns, k), res.confidence)
                rows.append({"qid": q.qid, "category": q.category, "views": got[False][0], "fused": got[True][0],
                             "confidence": got[True][1]})
    finally:
        wb.close()
    return rows


def sweep(rows: list[dict], thresholds: list[float]) -> list[dict]:
    views = np.array([r["views"] for r in rows])
    fused = np.array([r["fused"] for r in rows])
    conf = np.array([r["confidence"] for r in rows])
    miss = views < 1.0
    out = []
    for t in thresholds:
        fire = conf < t
        out.append({"threshold": t, "fires": float(fire.mean()),
                    "precision": float((miss & fire).sum() / max(int(fire.sum()), 1)),
                    "recall": float((miss & fire).sum() / max(int(miss.sum()), 1)),
                    "recall@20": float(np.where(fire, fused, views).mean())})
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("file", nargs="?", default=str(DEFAULT_FILE))
    p.add_argument("--stores", required=True)
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="Config override (JSON value)")
    p.add_argument("--thresholds", type=float, nargs="+", default=[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 2.0])
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    from etamem.config import parse_overrides

    overrides = parse_overrides(args.set)
    t0 = time.perf_counter()
    rows = measure(args.file, args.stores, overrides)
    table = sweep(rows, args.thresholds)
    views = float(np.mean([r["views"] for r in rows]))
    base = float(np.mean([r["views"] < 1.0 for r in rows]))
    print(f"{len(rows)} questions; views alone recall@20 {views:.3f}; view misses {base:.0%} of questions")
    print("| gate (agreement <) | fires | precision | recall | recall@20 |")
    print("|---|---|---|---|---|")
    for r in table:
        t = "always" if r["threshold"] > 1 else f"{r['threshold']:.1f}"
        print(f"| {t} | {r['fires']:.0%} | {r['precision']:.2f} | {r['recall']:.2f} | {r['recall@20']:.3f} |")
    if args.out:
        Path(args.out).write_text(json.dumps({"overrides": overrides, "views_recall@20": views, "miss_share": base,
                                              "sweep": table, "wall_s": time.perf_counter() - t0,
                                              "questions": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
