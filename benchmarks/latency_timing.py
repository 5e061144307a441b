"""Timing helpers of `benchmarks.latency` and `benchmarks.latency_synthetic`: the synthetic run
takes them from here, so `latency` -> `latency_synthetic` -> `latency_timing` runs one way."""
from __future__ import annotations

import time

import numpy as np


def percentiles(ms: list[float]) -> dict:
    a = np.asarray(ms)
    return {"p50_ms": float(np.percentile(a, 50)), "p95_ms": float(np.percentile(a, 95)), "mean_ms": float(a.mean())}


def timed_search(mem, q: str, model, space: str, top_k: int) -> tuple[float, float, float, int]:
    """One `Memory.search` of `q`: its wall and CPU ms, then the (uncached) encoder `model` alone
    on the same text in ms, and the number of hits."""
    t, c = time.perf_counter(), time.process_time()
    found = mem.search(q, space, top_k=top_k)
    wall, cpu = 1000 * (time.perf_counter() - t), 1000 * (time.process_time() - c)
    t = time.perf_counter()
    model.encode([q])
    return wall, cpu, 1000 * (time.perf_counter() - t), len(found)
