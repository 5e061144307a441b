"""How often insertion opens a leaf although a leaf at >= tau_new exists (a routing miss).

    python -m benchmarks.routing_misses [LOCOMO_JSON] [--widths 512 0] [--synthetic]
        [--session 50] [--out FILE.json]

Data: every AMU the embedded rule extractor makes from the LoCoMo file's turns (all
conversations pooled, in file order), embedded with all-MiniLM-L6-v2 (offline); with
`--synthetic` also the construction benchmark's flat and nested data at the same size. For
each `insert_top_width` in `--widths`: one `SemanticTree` (default `Config`), AMU by AMU, with
`maintain()` every `--session` AMUs. Before each insertion the best live leaf is found by brute
force; over the second half of the stream (the tree has grown by then) the table gives the
share of AMUs that opened a leaf and the share that opened one although that brute-force best
leaf reached `tau_new`. Needs the LoCoMo file (default ../shared/data/locomo/locomo10-dev.json).
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

from .locomo_retrieval import DEFAULT_FILE

log = logging.getLogger("benchmarks.routing_misses")


def locomo_amus(path: str | Path) -> list[str]:
    """AMU texts of the rule extractor over every turn of the file, in order."""
    from etamem.extraction.extractors import RuleExtractor
    from etamem.ingest.datasets import read_locomo
    from etamem.ingest.inputs import normalise_turns

    ex, texts = RuleExtractor(), []
    for conv in read_locomo(path):
        for turn in normalise_turns(conv.turns, conv.space, default_tz="UTC"):
            texts.extend(ex.extract(turn))
    return texts


def measure(X: np.ndarray, width: int, session: int) -> dict:
    """Insert the rows of X (n, d) one by one into a fresh tree; count (needless) new leaves."""
    from etamem.config import Config
    from etamem.views.semantic_tree import SemanticTree

    tree = SemanticTree.from_config(X.shape[1], Config(insert_top_width=width))
    half, opened, needless = len(X) // 2, 0, 0
    t0 = time.perf_counter()
    for i, x in enumerate(X):
        leaves = tree.leaves()
        best = float((tree.cent[leaves] @ x).max()) if len(leaves) else -1.0
        tau, before = tree.calibrator.current.tau_new, tree.stats["new_leaves"]
        tree.insert(f"a{i}", x)
        if i >= half and tree.stats["new_leaves"] > before:
            opened += 1
            needless += best >= tau
        if i % session == session - 1:
            tree.maintain()
    tree.maintain()
    shape = tree.shape()
    return {"amus": len(X), "top_width": width, "opened_share": opened / (len(X) - half),
            "needless_share": needless / (len(X) - half), "leaves": shape["leaves"], "depth": shape["depth"],
            "leaf_size_mean": shape["leaf_size_mean"], "tau_new": tree.calibrator.current.tau_new,
            "seconds_with_brute_force": time.perf_counter() - t0}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("locomo", nargs="?", default=str(DEFAULT_FILE))
    ap.add_argument("--widths", type=int, nargs="+", default=[512, 0])
    ap.add_argument("--synthetic", action="store_true", help="also flat and nested synthetic data of the same size")
    ap.add_argument("--session", type=int, default=50)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if not Path(args.locomo).exists():
        raise SystemExit(f"LoCoMo file not found: {args.locomo}")
    from etamem.models.encoders import SentenceTransformerEncoder

    texts = locomo_amus(args.locomo)
    log.info("%d AMUs from %s; embedding with all-MiniLM-L6-v2", len(texts), args.locomo)
    data = {"LoCoMo dev AMUs (MiniLM)": SentenceTransformerEncoder().encode(texts)}
    if args.synthetic:
        from .construction import generate

        for structure in ("flat", "nested"):
            data[f"synthetic {structure}"] = generate(len(texts), 384, 50, 0.6, 0, structure)
    rows = []
    for name, X in data.items():
        for width in args.widths:
            log.info("%s, insert_top_width %d", name, width)
            rows.append({"data": name, **measure(X, width, args.session)})
    head = ["data", "insert_top_width", "AMUs", "opened a leaf (2nd half)", "needless (a leaf >= tau_new existed)",
            "leaves", "depth", "mean leaf", "tau_new"]
    print("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
    for r in rows:
        print(f"| {r['data']} | {r['top_width']} | {r['amus']:,} | {r['opened_share']:.1%} | {r['needless_share']:.1%} "
              f"| {r['leaves']:,} | {r['depth']} | {r['leaf_size_mean']:.1f} | {r['tau_new']:.3f} |")
    if args.out:
        command = "python -m benchmarks.routing_misses " + " ".join(sys.argv[1:] if argv is None else argv)
        Path(args.out).write_text(json.dumps({"command": command.strip(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
