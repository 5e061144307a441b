"""Token F1 of the answer without an LLM on the LoCoMo dev file: the best statement for the
question's kind (`etamem.offline_answer.kind_answer`) against the first three hits joined (the
answer before issue 49, `join_answer`), on the same hits (docs/benchmarks.md, 'Answers without an LLM').

    python -m benchmarks.offline_answers [FILE] [--store DIR] [--tune] [--out FILE.json]

The conversations are split by sample id: the first half sorted ("tune") is where the weights of
`etamem.offline_answer.Weights` were chosen (`--tune` prints the grid's figures there); the rest
("held-out") was not looked at while choosing them. Questions of categories 1-4 (5, adversarial,
has no answer); per part and overall: mean token F1 of each answer, the paired difference with
its 95% bootstrap intervals (questions; conversations) and sign-flip p-value
(`etamem.bench.paired.paired`). The store is built once with the default config and reused.
Skips, saying why, when the LoCoMo file is absent.
"""
from __future__ import annotations

import argparse
import itertools
import json
import logging
import sys
from pathlib import Path

from .locomo_retrieval import DEFAULT_FILE, build_store

log = logging.getLogger(__name__)


def questions(conversations) -> list[tuple[str, str, str, str]]:
    """(qid, space, question, gold answer) of categories 1-4."""
    out = []
    for conv in conversations:
        for i, q in enumerate(conv.questions):
            if q.get("category") in (1, 2, 3, 4) and q.get("answer") is not None:
                out.append((f"{conv.space}:{i}", conv.space, q["question"], str(q["answer"])))
    return out


def scores(items, hits_of, answer) -> dict[str, tuple[str, float]]:
    from etamem.bench.metrics import token_f1

    return {qid: (space, token_f1(answer(question, hits_of[qid]), gold)) for qid, space, question, gold in items}


def summary(before, after) -> dict:
    from etamem.bench.paired import paired

    return paired(before, after)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("file", nargs="?", default=str(DEFAULT_FILE))
    ap.add_argument("--store", default="stores/locomo-dev", help="store directory (built once, then reused)")
    ap.add_argument("--tune", action="store_true", help="print the weight grid's F1 on the tune half")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    if not Path(args.file).is_file():
        print(f"skipped: LoCoMo dev file not found at {args.file} (needs ../shared beside the checkout)")
        return {"skipped": f"no file {args.file}"}

    from etamem import Memory
    from etamem.ingest.datasets import read_locomo
    from etamem.offline_answer import DEFAULT_WEIGHTS, Weights, join_answer, kind_answer

    conversations = sorted(read_locomo(args.file), key=lambda c: c.space)
    tune_spaces = {c.space for c in conversations[: len(conversations) // 2]}
    mem = Memory(args.store)
    build_store(mem, conversations, log.info)
    items = questions(conversations)
    hits_of = {qid: mem.retrieve(question, space).hits for qid, space, question, _ in items}
    n = mem.config.answer_evidence_sentences
    parts = {"tune": [q for q in items if q[1] in tune_spaces],
             "held-out": [q for q in items if q[1] not in tune_spaces], "all": items}
    out: dict = {"file": args.file, "tune_spaces": sorted(tune_spaces), "weights": vars(DEFAULT_WEIGHTS) | {}}

    if args.tune:
        grid = []
        for rank, kind, overlap, session in itertools.product((1.0,), (0.0, 0.5, 1.0, 2.0), (0.0, 0.5, 1.0),
                                                              (0.0, 0.25, 0.5, 1.0)):
            w = Weights(rank=rank, kind=kind, overlap=overlap, session=session)
            f1 = scores(parts["tune"], hits_of, lambda q, h, w=w: kind_answer(q, h, n, w))
            grid.append((sum(v for _, v in f1.values()) / len(f1), vars(w)))
        grid.sort(key=lambda g: -g[0])
        out["grid_tune"] = [{"f1": f, **w} for f, w in grid]
        for f, w in grid[:5]:
            print(f"tune F1 {f:.4f}  {w}")

    for name, part in parts.items():
        before = scores(part, hits_of, lambda q, h: join_answer(h, n))
        after = scores(part, hits_of, lambda q, h: kind_answer(q, h, n))
        res = summary(before, after)
        out[name] = res
        ci, cci = res["interval"], res["clustered_interval"]
        print(f"{name:8s} n={res['questions']:4d}  join-three F1 {res['before']:.3f}  kind F1 {res['after']:.3f}  "
              f"diff {res['difference']:+.3f} [{ci[0]:+.3f}, {ci[1]:+.3f}] (conversations [{cci[0]:+.3f}, "
              f"{cci[1]:+.3f}]) p={res['p_value']:.4f}")
    mem.close()
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1), encoding="utf-8")
    return out


if __name__ == "__main__":
    main()
