"""A bench run's results without the datasets' text, to keep in the repository and resume from.

    python -m benchmarks.strip_results OUT/results.jsonl benchmarks/results/NAME/results.jsonl
    # later, on a fresh machine: copy it (and settings.json) into a new --out and rerun the same
    # command; the runner skips every (system, question) the file holds and answers the rest

Answer records keep their numbers (verdict, F1, BLEU-1, tokens, times, evidence recall) and lose
the reader's prediction, the gold answer and a first prediction (text from or about the data
set, which the repository never holds); retrieval and build records have no such text and are
kept whole. A record cut by an interrupted run is dropped.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

TEXT_FIELDS = ("prediction", "gold", "first_prediction")


def strip(records: list[dict]) -> list[dict]:
    """The records with `TEXT_FIELDS` removed from answer records."""
    return [{k: v for k, v in r.items() if k not in TEXT_FIELDS} if r.get("type") == "qa" else r for r in records]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.strip_results", description=__doc__.split("\n\n")[0])
    p.add_argument("results", help="a bench run's results.jsonl")
    p.add_argument("out", help="where to write the stripped copy (its settings.json is copied beside it)")
    args = p.parse_args(argv)
    records = []
    for line in Path(args.results).read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in strip(records)), encoding="utf-8")
    settings = Path(args.results).parent / "settings.json"
    if settings.exists():
        (out.parent / "settings.json").write_text(settings.read_text(encoding="utf-8"), encoding="utf-8")
    print(f"{len(records)} records -> {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
