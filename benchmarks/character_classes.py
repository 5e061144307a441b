"""Cost of `add` and `search` per character class against ordinary text of the same length.

    python benchmarks/character_classes.py [--sizes 2000 20000] [--repeat 3] [--encoder default|hashing]
                                           [--out benchmarks/results/character_classes.json]

Issue 46 (N1): VADER replaced each emoji by its description (~6 words) and its per-word checks
went quadratic: a search of 2,000 emoji took 12 s against 0.15 s for ordinary text. Here each
kind of text (`tests/reliability/rel_chars.py`: emoji, emoji between words, CJK, combining
marks, right-to-left with bidi controls, symbols, whitespace runs, a mix of all) is one turn
`Memory.add`-ed to a fresh space, then `Memory.search`-ed with the text itself as the query,
through `Memory` as users call it (`--encoder default`: `Memory(path)`, the default config, the
MiniLM encoder and the affect tagger `auto` picks; `hashing`: the suite's fast encoder + VADER).
Each case runs `--repeat` times on fresh texts (other seeds, so no cache serves them); the
fastest counts. The ratio is to ordinary text's time at the same size in the same run;
acceptance: at most 3x. `run(work)` returns the summary `benchmarks/reliability.py` reports.
Timings are wall-clock seconds of one process; on a shared machine they vary.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "reliability"), str(ROOT / "tests")]

SIZES = (2_000, 20_000)
NOW = datetime(2024, 3, 2, 18, 10, tzinfo=timezone.utc)
OUT = ROOT / "benchmarks" / "results" / "character_classes.json"
TARGET = 3.0


def open_memory(path: Path, encoder: str):
    """`Memory(path)` as users open it, or the suite's fast memory (hashing encoder + VADER)."""
    from etamem import Memory

    if encoder == "hashing":
        from rel_common import fast_memory

        return fast_memory(path)
    return Memory(path)


class Cases:
    """One store; each case a fresh space holding one turn."""

    def __init__(self, memory) -> None:
        self.memory = memory
        self.n = 0

    def run(self, text: str) -> tuple[float, float]:
        """Seconds of `add` of `text` as one turn, then of `search` with `text` as the query."""
        self.n += 1
        space = f"chars{self.n}"
        turn = {"turn_id": f"t{self.n}", "session_id": "s1", "speaker": "Maya", "text": text,
                "timestamp": NOW.isoformat()}
        t = time.perf_counter()
        self.memory.add([turn], space=space)
        added = time.perf_counter() - t
        t = time.perf_counter()
        self.memory.search(text, space=space, top_k=10)
        return added, time.perf_counter() - t


def _best(cases: Cases, kind: str, n: int, repeat: int) -> tuple[float, float]:
    from rel_chars import class_text

    runs = [cases.run(class_text(kind, n, seed)) for seed in range(1, repeat + 1)]
    return min(a for a, _ in runs), min(s for _, s in runs)


def measure(work: Path, sizes=SIZES, kinds=None, repeat: int = 3, encoder: str = "default", log=None) -> dict:
    """add / search seconds and ratios to ordinary text for each kind at each size."""
    from rel_chars import KINDS, class_text

    t = time.perf_counter()
    memory = open_memory(work / "character-classes", encoder)
    cases = Cases(memory)
    cases.run(class_text("ordinary", 2000, 0))  # warm-up: models, first writes of the store
    cases.run(class_text("emoji", 200, 0))
    load_s = time.perf_counter() - t
    rows = []
    for n in sizes:
        base_add, base_search = _best(cases, "ordinary", n, repeat)
        rows.append({"kind": "ordinary", "chars": n, "add_s": base_add, "search_s": base_search,
                     "add_ratio": 1.0, "search_ratio": 1.0})
        for kind in kinds or KINDS:
            add_s, search_s = _best(cases, kind, n, repeat)
            row = {"kind": kind, "chars": n, "add_s": add_s, "search_s": search_s,
                   "add_ratio": add_s / base_add, "search_ratio": search_s / base_search}
            rows.append(row)
            if log:
                log(row)
    tagger = getattr(memory.affect_tagger, "name", type(memory.affect_tagger).__name__)
    memory.close()
    others = [r for r in rows if r["kind"] != "ordinary"]
    worst_add = max(others, key=lambda r: r["add_ratio"])
    worst_search = max(others, key=lambda r: r["search_ratio"])
    return {"cases": len(others), "encoder": encoder, "affect_tagger": tagger, "repeat": repeat,
            "sizes": list(sizes), "load_s": round(load_s, 2),
            "worst_add_ratio": round(worst_add["add_ratio"], 3),
            "worst_add_case": f"{worst_add['kind']} {worst_add['chars']} chars",
            "worst_search_ratio": round(worst_search["search_ratio"], 3),
            "worst_search_case": f"{worst_search['kind']} {worst_search['chars']} chars",
            "within_target": all(max(r["add_ratio"], r["search_ratio"]) <= TARGET for r in others),
            "rows": rows}


def run(work: Path) -> dict:
    """The benchmark at the default sizes in `work`: {"cases", "worst_add_ratio", ...}."""
    return measure(Path(work))


def table(result: dict) -> str:
    lines = ["| text | chars | add s | add ratio | search s | search ratio |", "|---|---|---|---|---|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['kind']} | {r['chars']:,} | {r['add_s']:.3f} | {r['add_ratio']:.2f}x | "
                     f"{r['search_s']:.3f} | {r['search_ratio']:.2f}x |")
    return "\n".join(lines)


def main(argv=None) -> int:
    from rel_chars import KINDS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    ap.add_argument("--kinds", default="", help=f"comma-separated, of: {','.join(KINDS)} (default: all)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per case on fresh texts; the fastest counts")
    ap.add_argument("--encoder", choices=("default", "hashing"), default="default")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()] or None
    unknown = [k for k in kinds or () if k not in KINDS]
    if unknown:
        ap.error(f"--kinds: unknown {unknown}")
    with tempfile.TemporaryDirectory() as tmp:
        result = measure(Path(tmp), args.sizes, kinds, args.repeat, args.encoder,
                         log=lambda r: print(f"{r['kind']:>12} {r['chars']:>7,}: add {r['add_s']:.3f} s "
                                             f"({r['add_ratio']:.2f}x), search {r['search_s']:.3f} s "
                                             f"({r['search_ratio']:.2f}x)", file=sys.stderr, flush=True))
    print(table(result))
    print(f"\n{result['cases']} cases ({result['encoder']} encoder, {result['affect_tagger']}); worst add "
          f"{result['worst_add_ratio']}x ({result['worst_add_case']}), worst search {result['worst_search_ratio']}x "
          f"({result['worst_search_case']}); target <= {TARGET:g}x: {'met' if result['within_target'] else 'NOT met'}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
