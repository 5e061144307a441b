"""The cost of one unit built through `Memory.add` as a space grows (hashing encoder, no model).

    python -m benchmarks.build_cost N DIR [--per-add 100] [--profile-at 30000 90000]

Adds `benchmarks.open_snapshot`'s synthetic chat turns (one stream of a seeded generator,
`--per-add` turns per `add`, `end_session` every 10 adds) to a new store in DIR until it holds N
units, and prints one JSON line per 5,000 units: wall and CPU (process time) milliseconds per unit
over that window, and the 1-minute load average. `--profile-at K ...`: a cProfile of the adds of
about 2,000 units from K on, written to DIR/../profile-K.txt (cumulative and own time).
"""
from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import random
import time
from pathlib import Path

from benchmarks.open_snapshot import SPACE, memory

NAMES = ["Ana", "Ben", "Caro", "Dev"]
OBJECTS = ["cat", "marathon", "sourdough", "Lisbon", "novel", "cello", "garden", "guitar", "chess", "sailing",
           "coffee", "opera"]
VERBS = ["love", "hate", "started", "finished", "planned", "miss", "bought"]
ADJECTIVES = ["great", "awful", "calm", "busy", "new"]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("n", type=int)
    ap.add_argument("dir")
    ap.add_argument("--per-add", type=int, default=100)
    ap.add_argument("--profile-at", type=int, nargs="*", default=[])
    args = ap.parse_args(argv)
    path, prof_at = Path(args.dir), sorted(args.profile_at)
    rng = random.Random(0)
    mem = memory(path)
    units = batch_no = window_start = 0
    window: list[tuple[int, float, float]] = []
    prof, prof_start, t0 = None, 0, time.perf_counter()
    while units < args.n:
        turns = [{"turn_id": f"b{batch_no}-{i}", "session_id": f"s{batch_no // 10}", "speaker": NAMES[i % 4],
                  "text": f"I {rng.choice(VERBS)} my {rng.choice(OBJECTS)} and the {rng.choice(ADJECTIVES)} "
                          f"{rng.choice(OBJECTS)} number {rng.randrange(10 ** 6)}.",
                  "timestamp": f"2023-{1 + batch_no // 300 % 12:02d}-{1 + batch_no % 28:02d}T10:{i % 60:02d}"}
                 for i in range(args.per_add)]
        if prof_at and units >= prof_at[0] and prof is None:
            prof, prof_start = cProfile.Profile(), units
            prof.enable()
        t, c = time.perf_counter(), time.process_time()
        made = len(mem.add(turns, space=SPACE))
        batch_no += 1
        if batch_no % 10 == 0:
            mem.end_session(SPACE)
        window.append((made, time.perf_counter() - t, time.process_time() - c))
        units += made
        if prof is not None and units - prof_start >= 2000:
            prof.disable()
            with open(path.parent / f"profile-{prof_at.pop(0)}.txt", "w") as fh:
                stats = pstats.Stats(prof, stream=fh)
                stats.sort_stats("cumulative").print_stats(60)
                stats.sort_stats("tottime").print_stats(40)
            prof = None
        if units - window_start >= 5000 or units >= args.n:
            made_w = sum(w[0] for w in window)
            print(json.dumps({"units": units, "ms_per_unit": 1000 * sum(w[1] for w in window) / made_w,
                              "cpu_ms_per_unit": 1000 * sum(w[2] for w in window) / made_w,
                              "ms_per_add": 1000 * sum(w[1] for w in window) / len(window),
                              "elapsed_s": time.perf_counter() - t0, "load": os.getloadavg()[0]}), flush=True)
            window, window_start = [], units
    mem.close()


if __name__ == "__main__":
    main()
