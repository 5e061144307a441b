"""A search right after another process's write, on a large space: following the store's change log
(`etamem/live/change_log.py`) against opening the space again (the path before the log), same run,
same machine.

    python -m benchmarks.follow_writes --size 100000 [--work DIR] [--repeat 5] [--turns 4] [--out FILE.json]

A space of `--size` units is built once under `--work` (kept and reused: `space-N`, the same
synthetic space as `benchmarks/open_snapshot.py`: hashing encoder, VADER, models apart). Two
processes hold it live, as two server processes without space affinity would: a writer
(a child process that adds `--turns` chat turns per request and never checkpoints, like a busy
server) and this process, the reader. Per mode, `--repeat` times: the writer adds, then the
reader's next `Memory.search` is timed (it finds the newer generation: "follow" applies the log,
"reopen" has `Config.follow_changes` off and opens the space again from the store, as before the
log), then a second search (warm) is timed. Reported: median and max seconds of the first search
after a write per mode, the warm search, the ratio reopen / follow, and whether the reader's
hits after the last write equal those of a fresh open.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.open_snapshot import SPACE, build, memory

QUESTION = "what about my sourdough and the cat?"


def writer_loop(path: str, turns_per_add: int) -> None:
    """The writer process: one add of `turns_per_add` turns per line on stdin, 'ok <generation>'
    after each commit; never checkpoints (the derived files stay behind, like a busy server's)."""
    mem = memory(path)
    mem.views(SPACE)
    print("ready", flush=True)
    for n, _ in enumerate(sys.stdin):
        turns = [{"turn_id": f"w{os.getpid()}-{n}-{i}", "session_id": f"w{os.getpid()}-{n}", "speaker": "Ana",
                  "text": f"I baked sourdough again today, batch {n}-{i}, and the cat watched.",
                  "timestamp": f"2024-06-{1 + n % 28:02d}T10:{i:02d}"} for i in range(turns_per_add)]
        mem.add(turns, space=SPACE)
        print(f"ok {mem.store.stamp(SPACE)[1]}", flush=True)
    mem.store.close()


def hits(mem) -> list:
    return [(h.amu.amu_id, round(h.score, 5)) for h in mem.search(QUESTION, space=SPACE, top_k=20)]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--work", default=None, help="directory for the store (kept and reused)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--turns", type=int, default=4, help="turns per write of the other process")
    ap.add_argument("--out", default=None)
    ap.add_argument("--writer", nargs=2, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.writer:
        writer_loop(args.writer[0], int(args.writer[1]))
        return
    work = Path(args.work or tempfile.mkdtemp(prefix="follow-writes-"))
    path = work / f"space-{args.size}"
    built = None if path.exists() else build(path, args.size)
    writer = subprocess.Popen([sys.executable, "-m", "benchmarks.follow_writes", "--writer", str(path),
                               str(args.turns)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert writer.stdout.readline().strip() == "ready"
    reader = memory(path)
    t = time.perf_counter()
    hits(reader)
    first_open = time.perf_counter() - t
    runs = []
    try:
        for mode in ("follow", "reopen"):
            reader.config.follow_changes = mode == "follow"
            for _ in range(args.repeat):
                writer.stdin.write("add\n")
                writer.stdin.flush()
                generation = int(writer.stdout.readline().split()[1])
                t = time.perf_counter()
                hits(reader)
                after = time.perf_counter() - t
                t = time.perf_counter()
                last = hits(reader)
                warm = time.perf_counter() - t
                assert reader.index_info(SPACE)["generation"] == generation
                runs.append({"mode": mode, "search_after_write_s": after, "warm_search_s": warm,
                             "load_avg_1m": os.getloadavg()[0]})
                print(f"{mode:>6}: search right after the write {after:.3f} s, warm {warm * 1000:.1f} ms", flush=True)
    finally:
        writer.stdin.close()
        writer.wait(timeout=600)
    residency = reader.residency()
    reader.store.close()
    check = memory(path)
    same = hits(check) == last
    check.store.close()
    summary = {}
    for mode in ("follow", "reopen"):
        xs = [r["search_after_write_s"] for r in runs if r["mode"] == mode]
        summary[mode] = {"median_s": float(np.median(xs)), "max_s": float(np.max(xs))}
    warm = float(np.median([r["warm_search_s"] for r in runs]))
    ratio = summary["reopen"]["median_s"] / summary["follow"]["median_s"]
    print(f"N={args.size:,}: search after another process's write: follow {summary['follow']['median_s']:.3f} s, "
          f"reopen {summary['reopen']['median_s']:.2f} s (x{ratio:.0f}); warm search {warm * 1000:.1f} ms; "
          f"same hits as a fresh open: {same}", flush=True)
    doc = {"command": "python -m benchmarks.follow_writes " + " ".join(argv if argv is not None else sys.argv[1:]),
           "cpu_count": os.cpu_count(), "size": args.size, "build_s": built, "first_open_s": first_open,
           "turns_per_write": args.turns, "runs": runs, "summary": summary, "warm_search_median_s": warm,
           "reopen_over_follow": ratio, "same_hits_as_fresh_open": same,
           "reader_follows": residency.follows, "reader_opens": residency.opens}
    if args.out:
        Path(args.out).write_text(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main()
