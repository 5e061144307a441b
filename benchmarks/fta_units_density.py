"""FTA unit density and evidence coverage of the offline rule extractor on a LoCoMo file.

For each conversation the turns of every session are segmented (`--segmentation fixed`:
windows of 20 turns with question-answer pairs kept whole, no model needed; `session`: one
segment per session) and run through `RuleUnitExtractor` with carry-over and fusion. Prints
one table: units, turns, units per turn (the paper: 4,299 / 5,882 = 0.73), and the share of
gold evidence turns (categories 1-4) that some unit cites: a turn no unit cites can never be
retrieved by the FTA views.

    python -m benchmarks.fta_units_density ../shared/data/locomo/locomo10-dev.json [--json OUT]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter

from etamem.bench.data import load_locomo
from etamem.fta.segmentation import segment_session
from etamem.fta.units import RuleUnitExtractor, construct_units
from etamem.ingest.inputs import normalise_turns


def measure(path: str, segmentation: str = "fixed") -> dict:
    """Counts over every conversation of the LoCoMo file at `path` (no tagger: affect is not
    counted here)."""
    extractor = RuleUnitExtractor()
    rows = []
    started = time.perf_counter()
    for conv in load_locomo(path):
        turns = normalise_turns(conv.turns, conv.space, default_tz="UTC")
        by_session: dict[str, list] = {}
        for t in turns:
            by_session.setdefault(t.session_id, []).append(t)
        segments = []
        for session_turns in by_session.values():
            segments.extend(segment_session(session_turns, mode=segmentation).segments)
        built = construct_units(turns, segments, extractor)
        cited = {tid for u in built.units for tid in u.turn_ids}
        gold = {tid for q in conv.questions for tid in q.gold_turns}
        types = Counter(u.content_type for u in built.units)
        rows.append({"space": conv.space, "turns": len(turns), "units": len(built.units),
                     "turns_cited": len(cited & {t.turn_id for t in turns}), "gold_turns": len(gold),
                     "gold_cited": len(gold & cited), "fused": built.fused, "types": dict(types)})
    total = {k: sum(r[k] for r in rows) for k in ("turns", "units", "turns_cited", "gold_turns", "gold_cited",
                                                   "fused")}
    total["units_per_turn"] = round(total["units"] / max(1, total["turns"]), 3)
    total["gold_coverage"] = round(total["gold_cited"] / max(1, total["gold_turns"]), 3)
    total["seconds"] = round(time.perf_counter() - started, 1)
    return {"path": path, "segmentation": segmentation, "rows": rows, "total": total}


def render(result: dict) -> str:
    lines = ["| space | turns | units | units/turn | turns cited | gold turns cited |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in result["rows"] + [dict(result["total"], space="all")]:
        lines.append(f"| {r['space']} | {r['turns']} | {r['units']} | {r['units'] / max(1, r['turns']):.2f} | "
                     f"{r['turns_cited'] / max(1, r['turns']):.3f} | "
                     f"{r['gold_cited']}/{r['gold_turns']} ({r['gold_cited'] / max(1, r['gold_turns']):.3f}) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("path", help="LoCoMo JSON file")
    parser.add_argument("--segmentation", choices=("fixed", "session"), default="fixed")
    parser.add_argument("--json", help="also write the counts here")
    args = parser.parse_args(argv)
    result = measure(args.path, args.segmentation)
    print(render(result))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
