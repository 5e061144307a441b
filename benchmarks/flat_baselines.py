"""The flat baselines `benchmarks.latency_synthetic` measures beside `Memory.search`, over the raw
turns a space's derived files hold (the newest generation's `turns` index), each timed per query
and checked on the space's recall probes (`benchmarks.synthetic_space.probes`):

- exact hybrid: every live turn scored, (1 - beta) * cos + beta * BM25 / the best BM25, top k
  (one (turns, d) product and one BM25 pass per query: what flat search costs with no index);
- approximate hybrid: `FlatHybridIndex.search` with an HNSW graph for the dense pool (the 200
  nearest by the graph, union the 200 best by BM25, those scored exactly): the space's own graph
  when its raw turns are past `Config.raw_exact_max`, else one built here over the same vectors
  (its build time reported).
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from benchmarks.latency_timing import percentiles

BETA = 0.1  # Config().bm25_weight


def turn_index(path: Path):
    """(FlatHybridIndex over the raw turns, turn id per slot (None: removed)) from the newest
    derived files under `path`, or None when there are none."""
    from etamem.retrieval.flat import FlatHybridIndex

    found = sorted(path.glob("derived/*/g*/turns/slots.json"), key=lambda p: p.stat().st_mtime)
    if not found:
        return None
    meta = json.loads(found[-1].read_text())
    return FlatHybridIndex.load(found[-1].parent, meta["dim"]), meta["turn_ids"]


def exact_hybrid(vecs: np.ndarray, slots: np.ndarray, index, q: np.ndarray, text: str, k: int) -> np.ndarray:
    """The top-k slots of an exact hybrid scan (vecs: (n, d) float32 rows of `slots`)."""
    from etamem.kernels.ranking import topk
    from etamem.kernels.similarity import max_normalise

    score = (1.0 - BETA) * (vecs @ q) + BETA * max_normalise(index.bm25_scores(text))[slots]
    return slots[topk(score, k)]


def measure(path: Path, queries: list[str], probes: list[tuple[str, str]], model, k: int = 20) -> dict | None:
    """Both baselines' p50/p95 ms on `queries` and recall@k on `probes` ((question, turn id))."""
    from etamem.retrieval.vector_index import VectorIndex

    loaded = turn_index(path)
    if loaded is None:
        return None
    index, turn_ids = loaded
    slots = np.array([s for s, t in enumerate(turn_ids) if t is not None], np.int64)
    slot_of = {t: s for s, t in enumerate(turn_ids) if t is not None}
    vecs = np.ascontiguousarray(index.vectors(slots.tolist()))
    built_s = None
    if index.dense.mode == "hnsw":
        approx = index
    else:
        t = time.perf_counter()
        graph = VectorIndex(index.dim, exact_max=1)
        graph.upsert(slots.tolist(), vecs)
        approx, built_s = index.with_dense(graph), time.perf_counter() - t
    searches = {"exact": lambda v, q: exact_hybrid(vecs, slots, index, v, q, k),
                "approximate": lambda v, q: np.array([r.index for r in approx.search(v, q, k, beta=BETA)], np.int64)}
    qv, pv = model.encode(queries), model.encode([q for q, _ in probes])
    out = {"rows": len(slots), "approximate_graph_built_here_s": built_s}
    for name, search in searches.items():
        ms = []
        for q, v in zip(queries, qv):
            t = time.perf_counter()
            search(v, q)
            ms.append(1000 * (time.perf_counter() - t))
        found = [slot_of[tid] in set(search(v, q).tolist()) for (q, tid), v in zip(probes, pv)]
        out[name] = {**percentiles(ms), "probe_recall": float(np.mean(found)) if found else None,
                     "probes": len(found)}
    return out
