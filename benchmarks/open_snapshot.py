"""Open -> first search of a large space: from the store (today's path before the snapshot) against
from the snapshot in its derived files, in fresh processes, same run, same machine.

    python -m benchmarks.open_snapshot --sizes 10000 100000 [--work DIR] [--repeat 3] [--out FILE.json]

Per size N, a space of N units is built once under `--work` (kept and reused: `space-N`) from
synthetic chat turns (100 sessions' worth of short messages, `Memory.add` in batches) with a
text-dependent hashing encoder (384 dimensions) and the VADER affect tagger, so that the build
takes minutes, not hours, and no model is loaded (the figures are the engine's, models apart).
Then, `--repeat` times each, alternating, a fresh process opens the space and runs one search:
"store" reads units, vectors, view rows and turns from SQLite (the snapshot is hidden from it;
the indexes still come from the derived files), "snapshot" opens from the derived files'
snapshot (`etamem.live.snapshot`). Reported: wall and CPU seconds of open -> first search, of
the open alone, and the 1-minute load average (the machine may be shared).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.many_spaces import BagOfWordsEncoder

SPACE = "u"
QUESTION = "what about my sourdough and the cat?"


class HashingEncoder(BagOfWordsEncoder):
    """`benchmarks.many_spaces`' hashed bag of words under this benchmark's own model identity
    (the stores it kept record that name)."""

    name = "benchmark-hashing-encoder"


def memory(path):
    from etamem import Memory
    from etamem.models.affect import VaderAffectTagger

    enc = HashingEncoder()
    return Memory(path, text_encoder=enc, affect_tagger=VaderAffectTagger(enc))


def build(path: Path, n: int) -> float:
    """A space of about n units (one per turn) in ~100 sessions; seconds taken."""
    rng = random.Random(0)
    names, objects = ["Ana", "Ben", "Caro", "Dev"], ["cat", "marathon", "sourdough", "Lisbon", "novel", "cello",
                                                     "garden", "guitar", "chess", "sailing", "coffee", "opera"]
    verbs, adjectives = ["love", "hate", "started", "finished", "planned", "miss", "bought"], ["great", "awful",
                                                                                              "calm", "busy", "new"]
    t, units, batch_no = time.perf_counter(), 0, 0
    per_add = max(10, n // 1000)
    mem = memory(path)
    while units < n:
        turns = [{"turn_id": f"b{batch_no}-{i}", "session_id": f"s{batch_no // 10}", "speaker": names[i % 4],
                  "text": f"I {rng.choice(verbs)} my {rng.choice(objects)} and the {rng.choice(adjectives)} "
                          f"{rng.choice(objects)} number {rng.randrange(10 ** 6)}.",
                  "timestamp": f"2023-{1 + batch_no // 300 % 12:02d}-{1 + batch_no % 28:02d}T10:{i % 60:02d}"}
                 for i in range(per_add)]
        units += len(mem.add(turns, space=SPACE))
        batch_no += 1
        if batch_no % 10 == 0:
            mem.end_session(SPACE)
    mem.end_session(SPACE)
    mem.close()  # writes the derived files with their snapshot
    return time.perf_counter() - t


def child(path: str, mode: str) -> dict:
    """Open -> first search in this fresh process; `mode` "store" hides the snapshot."""
    from etamem.live import snapshot as space_snapshot

    if mode == "store":
        space_snapshot.exists = lambda directory: False
    import bm25s  # noqa: F401 - a library import, paid by any process before its first open

    mem = memory(path)
    t, c = time.perf_counter(), time.process_time()
    mem.views(SPACE)
    open_s = time.perf_counter() - t
    hits = mem.search(QUESTION, space=SPACE, top_k=20)
    total, cpu = time.perf_counter() - t, time.process_time() - c
    info = mem.index_info(SPACE)
    out = {"mode": mode, "units": info["amus"], "open_to_first_search_s": total, "cpu_s": cpu, "open_s": open_s,
           "hits": [[h.amu.amu_id, h.score] for h in hits], "load_avg_1m": os.getloadavg()[0]}
    mem.store.close()  # no checkpoint: the files stay as they are
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    ap.add_argument("--work", default=None, help="directory for the stores (kept and reused)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=None)
    ap.add_argument("--child", nargs=2, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child)), flush=True)
        return
    work = Path(args.work or tempfile.mkdtemp(prefix="open-snapshot-"))
    rows = []
    for n in args.sizes:
        path = work / f"space-{n}"
        built = None if path.exists() else build(path, n)
        runs = []
        for _ in range(args.repeat):
            for mode in ("store", "snapshot"):
                out = subprocess.run([sys.executable, "-m", "benchmarks.open_snapshot", "--child", str(path), mode],
                                     capture_output=True, text=True, check=True)
                runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
        same = all(r["hits"] == runs[0]["hits"] for r in runs)
        row = {"n": n, "build_s": built, "same_hits": same, "runs": [{k: v for k, v in r.items() if k != "hits"}
                                                                      for r in runs]}
        for mode in ("store", "snapshot"):
            mine = [r for r in runs if r["mode"] == mode]
            row[mode] = {"median_s": float(np.median([r["open_to_first_search_s"] for r in mine])),
                         "median_cpu_s": float(np.median([r["cpu_s"] for r in mine]))}
        rows.append(row)
        print(f"N={n:>7,}: open -> first search, store {row['store']['median_s']:.2f} s "
              f"(cpu {row['store']['median_cpu_s']:.2f}), snapshot {row['snapshot']['median_s']:.2f} s "
              f"(cpu {row['snapshot']['median_cpu_s']:.2f}); same hits: {same}", flush=True)
    doc = {"command": "python -m benchmarks.open_snapshot " + " ".join(argv if argv is not None else sys.argv[1:]),
           "cpu_count": os.cpu_count(), "rows": rows}
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
