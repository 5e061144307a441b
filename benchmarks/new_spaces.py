"""RSS against spaces created: one process adds two turns to, and searches, each of N new spaces
under a residency budget.

    python -m benchmarks.new_spaces [--spaces 1500] [--budget 100] [--encoder minilm|hashing]
        [--every 100] [--out FILE.json]

An agent server creates spaces (one per new user), not only reopens them: this measures the
memory such a process keeps per space created once the budget is full, where an evicted space
should leave nothing behind. A fresh `Memory` (`max_live_spaces=--budget`, the rest the default
`Config()`) on a store in a temporary directory; `--encoder minilm` is the default offline
encoder (the models are loaded before the baseline RSS is read), `hashing` the hashed
bag-of-words of `benchmarks/many_spaces.py` (the engine measured, not the model; fast enough for
10,000 spaces). Space k gets two turns (add, one call) and one search. RSS (VmRSS) is read
before the first space, at the budget, and every `--every` spaces. Reported: the growth over the
first `--budget` spaces, the growth from the budget to the end, its per-space figure, and the
ratio (target: growth from space 100 to 1,500 <= half of the first 100's). The machine
is shared with other work (its CPU, not its memory, varies).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

try:  # python -m benchmarks.new_spaces, or with benchmarks/ on sys.path
    from .many_spaces import BagOfWordsEncoder, rss_mb
except ImportError:
    from many_spaces import BagOfWordsEncoder, rss_mb

OUT = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "new_spaces.json"


def two_turns(k: int) -> list[dict]:
    return [{"speaker": "Ana", "session_id": "s1", "timestamp": "2024-01-01T10:00",
             "text": f"I adopted a cat named Miso{k} last week and she loves tuna."},
            {"speaker": "Ben", "session_id": "s1", "timestamp": "2024-01-01T10:01",
             "text": f"That's lovely! My dog Rex{k} prefers chicken and long walks."}]


def memory(path: Path, budget: int, encoder: str):
    from etamem import Config, Memory
    from etamem.models.affect import VaderAffectTagger

    if encoder == "hashing":
        enc = BagOfWordsEncoder()
        return Memory(path, Config(max_live_spaces=budget), text_encoder=enc, affect_tagger=VaderAffectTagger(enc))
    mem = Memory(path, Config(max_live_spaces=budget))
    mem.warm()
    return mem


def run(work: Path, spaces: int, budget: int, encoder: str, every: int) -> dict:
    mem = memory(work / "store", budget, encoder)
    points = [(0, round(rss_mb(), 1))]
    t0 = time.perf_counter()
    for k in range(spaces):
        mem.add(two_turns(k), space=f"user{k:05d}")
        mem.search("What does the cat eat?", space=f"user{k:05d}")
        if k + 1 == budget or (k + 1) % every == 0 or k + 1 == spaces:
            points.append((k + 1, round(rss_mb(), 1)))
            print(f"{k + 1} spaces: RSS {points[-1][1]} MB ({time.perf_counter() - t0:.0f} s)", file=sys.stderr,
                  flush=True)
    seconds = time.perf_counter() - t0
    stats = mem.residency()
    mem.close()
    at = dict(points)
    first, rest = at[budget] - at[0], at[spaces] - at[budget]
    return {"spaces": spaces, "budget": budget, "encoder": encoder, "rss_mb": points,
            "growth_first_budget_mb": round(first, 1), "growth_after_mb": round(rest, 1),
            "kb_per_space_after": round(rest * 1024 / max(1, spaces - budget), 1),
            "ratio_after_to_first": round(rest / first, 2) if first > 0 else None,
            "live": stats.live, "evictions": stats.evictions, "seconds": round(seconds, 1),
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (shared), Python {platform.python_version()}"}


def table(r: dict) -> str:
    rows = ["| spaces created | RSS MB |", "|---|---|"] + [f"| {n} | {mb} |" for n, mb in r["rss_mb"]]
    return "\n".join(rows + [
        f"\nencoder {r['encoder']}, budget {r['budget']}: +{r['growth_first_budget_mb']} MB over the first "
        f"{r['budget']} spaces, +{r['growth_after_mb']} MB from {r['budget']} to {r['spaces']} "
        f"({r['kb_per_space_after']} KB per space), ratio **{r['ratio_after_to_first']}** (target <= 0.5); "
        f"{r['evictions']} evictions, {r['seconds']} s; {r['machine']}"])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--spaces", type=int, default=1500)
    p.add_argument("--budget", type=int, default=100)
    p.add_argument("--encoder", choices=["minilm", "hashing"], default="minilm")
    p.add_argument("--every", type=int, default=100, help="RSS read every this many spaces")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    with tempfile.TemporaryDirectory() as tmp:
        result = run(Path(tmp), args.spaces, args.budget, args.encoder, args.every)
    print(table(result))
    out = args.out or OUT.with_name(f"new_spaces_{args.encoder}_{args.spaces}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
