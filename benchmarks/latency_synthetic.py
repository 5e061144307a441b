"""`Memory.search` on a large synthetic space (`latency.py --synthetic-encoder`): the space is
built through `Memory.add` by `benchmarks.synthetic_space` (hashing encoder, VADER; resumable,
optionally within a time budget), then, in a fresh process, opened and searched.

Reported per size: the units the space holds (fewer than asked when the build budget ran out:
`build.finished` false), open -> first search (a fresh `Memory` on the store: the open reads the
derived files' snapshot), RSS after that first search and after the timed queries (VmRSS) and the
peak (`ru_maxrss`), then `--queries` distinct synthetic questions: `Memory.search` wall and CPU
p50/p95 (default `Config()`, top_k 20), the hashing encoder's time for the same query texts and
the difference, the same run's flat baselines over the raw turns (`benchmarks.flat_baselines`:
exact hybrid and approximate hybrid with an HNSW graph, the same questions) and the recall@20 of
each and of `Memory.search` on the space's recall probes (`synthetic_space.probes`: up to 100
planted facts, each found only by its made-up name). The encoder is not MiniLM: `latency.py` measures MiniLM query encoding apart in the
same run, and `search_minus_encoding + MiniLM p50` is the end-to-end estimate.
"""
from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from benchmarks.latency_timing import percentiles, timed_search
from benchmarks.many_spaces import rss_mb

TOP_K = 20


def measure(path: Path, queries: int, seed: int) -> dict:
    """Open -> first search, then timed searches, in this (fresh) process."""
    from benchmarks import flat_baselines
    from benchmarks.agent_loop import uncached
    from benchmarks.synthetic_space import MARKER, SPACE, memory, probes, questions

    qs = questions(queries + 4, seed)
    rss0 = rss_mb()
    t, c = time.perf_counter(), time.process_time()
    mem = memory(path)
    mem.search(qs[0], SPACE, top_k=TOP_K)
    first = {"open_to_first_search_s": time.perf_counter() - t, "cpu_s": time.process_time() - c,
             "rss_before_open_mb": rss0, "rss_after_mb": rss_mb(), "load_avg_1m": os.getloadavg()[0]}
    for q in qs[1:4]:  # warm-up
        mem.search(q, SPACE, top_k=TOP_K)
    model = uncached(mem.text_encoder)
    total, cpu, enc, hits = [], [], [], []
    for q in qs[4:]:
        for out, value in zip((total, cpu, enc, hits), timed_search(mem, q, model, SPACE, TOP_K)):
            out.append(value)
    info = mem.index_info(SPACE)
    marker = path / MARKER
    per_add = json.loads(marker.read_text())["key"]["per_add"] if marker.is_file() else 500
    planted = probes(info["turns"] // per_add, per_add)
    found = [tid in {t for h in mem.search(q, SPACE, top_k=TOP_K) for t in h.source_turn_ids} for q, tid in planted]
    out = {"amus": info["amus"], "turns": info["turns"], "routing_modes": info["routing_modes"],
           "turn_index_mode": info.get("turn_index_mode"), **first,
           "queries": len(total), "mean_hits": float(np.mean(hits)), "search": percentiles(total),
           "search_cpu": percentiles(cpu), "hashing_encoding": percentiles(enc),
           "search_minus_encoding": percentiles([a - b for a, b in zip(total, enc)]),
           "rss_end_mb": rss_mb(), "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
           "load_avg_1m_end": os.getloadavg()[0],
           "probe_recall": float(np.mean(found)) if found else None, "probes": len(found)}
    out["flat_baselines"] = flat_baselines.measure(path, qs[4:], planted, model, TOP_K)
    mem.store.close()  # no checkpoint: the files stay as they are
    return out


def run(n: int, work: Path, *, queries: int, seed: int, per_add: int, budget_s: float | None, env: dict,
        cwd: Path) -> dict:
    """Build (or resume, within `budget_s`) the space of n units under `work`, then measure it in
    a fresh process; one row."""
    path = work / f"latency-synthetic-{n}"
    cmd = [sys.executable, "-m", "benchmarks.synthetic_space", str(path), str(n), "--per-add", str(per_add),
           *(["--stop-after-s", str(budget_s)] if budget_s is not None else [])]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True, env=env, cwd=cwd).stdout
    build = json.loads(out.strip().splitlines()[-1])
    cmd = [sys.executable, "-m", "benchmarks.latency_synthetic", str(path), str(queries), str(seed)]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True, env=env, cwd=cwd).stdout
    return {"n": n, "build": build, **json.loads(out.strip().splitlines()[-1])}


def report(rows: list[dict], minilm_p50: float | None) -> None:
    print("\nMemory.search on a synthetic space built through Memory.add (hashing encoder; default Config, "
          "top_k 20), the flat baselines of the same run over its raw turns, and recall@20 on the planted "
          "probes:\n")
    print("| N asked | units | build finished | search p50 / p95 ms | search - hashing enc. p50 ms | "
          "+ MiniLM enc. p50 ms | flat exact hybrid p50 ms (search ÷) | flat HNSW hybrid p50 ms (search ÷) | "
          "probe recall@20 search / exact / HNSW | open -> first search s | peak RSS MB | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        s, m, f = r["search"], r["search_minus_encoding"], r.get("flat_baselines") or {}
        est = "n/a" if minilm_p50 is None else f"{m['p50_ms'] + minilm_p50:.2f}"
        flat = {name: "n/a" if name not in f else f"{f[name]['p50_ms']:.2f} (x{s['p50_ms'] / f[name]['p50_ms']:.2f})"
                for name in ("exact", "approximate")}
        recall = " / ".join("n/a" if x is None else f"{x:.2f}" for x in (
            r.get("probe_recall"), *(f.get(name, {}).get("probe_recall") for name in ("exact", "approximate"))))
        print(f"| {r['n']:,} | {r['amus']:,} | {r['build']['finished']} | {s['p50_ms']:.2f} / {s['p95_ms']:.2f} | "
              f"{m['p50_ms']:.2f} | {est} | {flat['exact']} | {flat['approximate']} | {recall} ({r.get('probes')}) | "
              f"{r['open_to_first_search_s']:.2f} | {r['peak_rss_mb']:,.0f} | {r['load_avg_1m']:.1f} |")


if __name__ == "__main__":
    print(json.dumps(measure(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]))), flush=True)
