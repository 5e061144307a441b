"""Adversarial text against ordinary text of the same length, through the write and query paths.

    python benchmarks/adversarial_text.py [--sizes 10000 30000 100000] [--repeat 1]
                                          [--out benchmarks/results/adversarial_text.json]

A hostile user can send turns and queries of up to `max_turn_chars` (100,000) characters made
to stall a regular expression: runs of spaces, of "!" or ".", repeated interjections, digits
and date-like fragments, one long word, repeated names and "I I I". Each kind of input, at
each size, is timed through the functions the write and query paths call, and compared with
ordinary text of the same length (sentences of the bundled demo conversation, cycled):

- extract: the rule extractor on one turn (`RuleExtractor.extract`);
- fta: the FTA rule units of a one-turn segment (`RuleUnitExtractor.extract`);
- query: the query features (`query_features`: time window, question form, names) and
  `is_when_question`;
- bm25: the BM25 tokeniser (`lexical.splitter`);
- affect: the VADER tagger on the text (pure Python);
- memory: `Memory.add` of the turn, then `Memory.search` with the text as the query, on the
  real store and indexes with the fast hashing encoder (`tests/reliability/rel_common.py`).

The table gives, per kind and size, the seconds of each step, their total and the ratio of
the total to ordinary text's; "worst step" is the largest ratio of one step (against at least
10 ms of ordinary text, so that a step of a few milliseconds does not read as a blow-up). The
target is a ratio of at most 2. `run(work)` returns the summary that `benchmarks/reliability.py`
can report. Timings are wall-clock seconds of one process; on a shared machine they vary.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "reliability"), str(ROOT / "tests")]

SIZES = (10_000, 30_000, 100_000)
NOW = datetime(2024, 3, 2, 18, 10, tzinfo=timezone.utc)
STEPS = ("extract", "fta", "query", "bm25", "affect", "memory")
FLOOR_S = 0.010  # a step's ratio is taken against at least this many seconds of ordinary text
OUT = ROOT / "benchmarks" / "results" / "adversarial_text.json"


def _fill(unit: str, n: int) -> str:
    return (unit * (n // len(unit) + 1))[:n]


def _mixed(n: int) -> str:
    """Pieces of every other kind, shuffled (seeded)."""
    rng = random.Random(7)
    pieces = ["lol " * 20, " " * 500, "!" * 300, "." * 300, "hahaha " * 10, "1" * 200, "12 May 2023, " * 5,
              "2023-05-" * 10, "x" * 400, "Maya " * 20, "I I I ", "\t" * 100, "my wife and I go ", "how did ",
              "yesterday ", "A-" * 50, ", Maya ", "? "]
    out, size = [], 0
    while size < n:
        p = rng.choice(pieces)
        out.append(p)
        size += len(p)
    return "".join(out)[:n]


KINDS = {
    "spaces": lambda n: "a" + " " * (n - 2) + "b",
    "spaces_lol": lambda n: "hello" + " " * (n - 10) + "lol!",
    "tabs_newlines": lambda n: "a" + _fill("\t \n", n - 2) + "b",
    "bangs": lambda n: "!" * n,
    "dots": lambda n: "." * n,
    "punct_mix": lambda n: _fill("?!.\u2026", n),
    "lol": lambda n: _fill("lol ", n - 1) + "x",
    "hahaha": lambda n: _fill("hahaha ", n - 1) + "x",
    "digits": lambda n: "1" * n,
    "dates": lambda n: _fill("12 May 2023, ", n),
    "date_fragments": lambda n: _fill("2023-05-", n),
    "long_word": lambda n: "a" * n,
    "hyphen_names": lambda n: _fill("A-", n),
    "names": lambda n: _fill("Maya ", n),
    "I_I_I": lambda n: _fill("I ", n - 1) + "x",
    "my_me": lambda n: _fill("my me ", n),
    "and_I": lambda n: _fill("my wife and I go ", n),
    "how_did": lambda n: _fill("how did ", n),
    "mixed": _mixed,
}


def ordinary(n: int) -> str:
    """`n` characters of the demo conversation's sentences, cycled."""
    from benchmarks.long_turns import long_text

    return long_text(n + 200)[:n]


class Steps:
    """The timed functions, set up once (imports, taggers, one store)."""

    def __init__(self, work: Path) -> None:
        from etamem.extraction.extractors import RuleExtractor
        from etamem.fta.retrieval import query_features
        from etamem.fta.segmentation import segment_session
        from etamem.fta.units import RuleUnitExtractor
        from etamem.records import Turn
        from etamem.retrieval.lexical import splitter
        from etamem.retrieval.temporal import is_when_question
        from rel_common import fast_memory

        self.memory = fast_memory(work / "adversarial-text")
        self.tagger = self.memory.affect_tagger
        self.rules, self.units = RuleExtractor(), RuleUnitExtractor()
        self.segment_session, self.Turn = segment_session, Turn
        self.query_features, self.is_when = query_features, is_when_question
        self.split = splitter("english")
        self.n = 0

    def run(self, text: str) -> dict[str, float]:
        self.n += 1
        turn = self.Turn(turn_id=f"t{self.n}", session_id="s1", speaker="Maya", text=text, timestamp=NOW)
        segment = self.segment_session([turn], mode="session").segments[0]
        calls = {
            "extract": lambda: self.rules.extract(turn),
            "fta": lambda: self.units.extract(segment, [turn]),
            "query": lambda: (self.query_features(text, NOW, ["Maya", "Jonas"]), self.is_when(text)),
            "bm25": lambda: self.split(text),
            "affect": lambda: self.tagger.tag([text]),
            "memory": lambda: self._memory(text),
        }
        out = {}
        for step, call in calls.items():
            t = time.perf_counter()
            call()
            out[step] = time.perf_counter() - t
        return out

    def _memory(self, text: str) -> None:
        space = f"adv{self.n}"
        self.memory.add([{"turn_id": f"t{self.n}", "session_id": "s1", "speaker": "Maya", "text": text,
                          "timestamp": NOW.isoformat()}], space=space)
        self.memory.search(text, space, top_k=5)


def _best(steps: Steps, text: str, repeat: int) -> dict[str, float]:
    runs = [steps.run(text) for _ in range(repeat)]
    return {s: min(r[s] for r in runs) for s in STEPS}


def measure(work: Path, sizes=SIZES, kinds=None, repeat: int = 1, log=None) -> dict:
    """Seconds per step for ordinary text and each adversarial kind at each size."""
    steps = Steps(work)
    steps.run(ordinary(2000))  # warm-up: imports, first writes of the store
    rows = []
    for n in sizes:
        base = _best(steps, ordinary(n), repeat)
        base_total = sum(base.values())
        rows.append({"kind": "ordinary", "chars": n, "steps": base, "total_s": base_total, "ratio": 1.0,
                     "worst_step": "", "worst_step_ratio": 1.0})
        for kind in kinds or KINDS:
            text = KINDS[kind](n)
            got = _best(steps, text, repeat)
            ratios = {s: got[s] / max(base[s], FLOOR_S) for s in STEPS}
            worst = max(ratios, key=ratios.get)
            row = {"kind": kind, "chars": len(text), "steps": got, "total_s": sum(got.values()),
                   "ratio": sum(got.values()) / base_total, "worst_step": worst, "worst_step_ratio": ratios[worst]}
            rows.append(row)
            if log:
                log(row)
    steps.memory.close()
    adversarial = [r for r in rows if r["kind"] != "ordinary"]
    worst = max(adversarial, key=lambda r: r["ratio"])
    return {"cases": len(adversarial), "worst_ratio": round(worst["ratio"], 3),
            "worst_case": f"{worst['kind']} {worst['chars']} chars",
            "worst_step_ratio": round(max(r["worst_step_ratio"] for r in adversarial), 3),
            "sizes": list(sizes), "repeat": repeat, "rows": rows}


def run(work: Path) -> dict:
    """The benchmark at the default sizes in `work`: {"cases", "worst_ratio", "worst_case", ...}."""
    return measure(Path(work))


def table(result: dict) -> str:
    head = "| input | chars | " + " | ".join(f"{s} s" for s in STEPS) + " | total s | ratio | worst step |"
    lines = [head, "|" + "---|" * (len(STEPS) + 5)]
    for r in result["rows"]:
        cells = " | ".join(f"{r['steps'][s]:.3f}" for s in STEPS)
        worst = f"{r['worst_step']} {r['worst_step_ratio']:.2f}x" if r["worst_step"] else ""
        lines.append(f"| {r['kind']} | {r['chars']:,} | {cells} | {r['total_s']:.3f} | {r['ratio']:.2f}x | {worst} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    ap.add_argument("--kinds", default="", help=f"comma-separated, of: {','.join(KINDS)} (default: all)")
    ap.add_argument("--repeat", type=int, default=1, help="runs per case; the fastest counts")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()] or None
    unknown = [k for k in kinds or () if k not in KINDS]
    if unknown:
        ap.error(f"--kinds: unknown {unknown}")
    with tempfile.TemporaryDirectory() as tmp:
        result = measure(Path(tmp), args.sizes, kinds, args.repeat,
                         log=lambda r: print(f"{r['kind']:>15} {r['chars']:>7,}: {r['total_s']:.3f} s "
                                             f"({r['ratio']:.2f}x)", file=sys.stderr, flush=True))
    print(table(result))
    print(f"\n{result['cases']} cases; worst ratio {result['worst_ratio']}x ({result['worst_case']}); "
          f"worst single step {result['worst_step_ratio']}x")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
