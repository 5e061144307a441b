"""FAISS-GPU for the large exact vector indexes (the design's "FAISS-GPU similarity"): which index
searches on the GPU, and the GPU copy it searches.

A `VectorIndex` in exact mode answers with one product over its rows. With `device` "auto" (the
default, `Config.index_device`) an index of at least `min_rows` rows (`Config.gpu_min_rows`)
searches a `faiss.GpuIndexFlatIP` copy of its rows instead when FAISS was built with GPU support
(`pip install -e ".[gpu]"`, faiss-gpu) and sees a GPU; "cpu" never does; "gpu" requires it
(ImportError naming the extra otherwise). The copy (`GpuFlat`) follows the rows: appended rows are
added, an overwritten row or a compaction rebuilds it on the next search. Removed rows stay in it
and are filtered: a search fetches k plus the dead rows' count, drops the dead and orders the rest
as the exact NumPy search does (similarity, then slot), so the keys equal the CPU path's up to
float rounding of the products. The selection is tested on CPU with a stand-in FAISS module.
"""
from __future__ import annotations

import logging

import numpy as np

from etamem.install_hints import install_hint

log = logging.getLogger(__name__)

DEVICES = ("auto", "cpu", "gpu")
MAX_FETCH = 2048  # the most neighbours one FAISS-GPU flat search returns; a larger fetch runs on CPU
_GPUS: dict[int, int] = {}  # id(faiss module) -> GPUs it sees (asked once)


def gpu_count(faiss) -> int:
    """GPUs the FAISS module can use (0 for a CPU-only build)."""
    key = id(faiss)
    if key not in _GPUS:
        try:
            _GPUS[key] = int(faiss.get_num_gpus()) if hasattr(faiss, "StandardGpuResources") else 0
        except Exception:  # noqa: BLE001 - a broken driver is no GPU
            _GPUS[key] = 0
    return _GPUS[key]


def use_gpu(device: str, rows: int, min_rows: int, faiss) -> bool:
    """Whether an exact index of `rows` rows searches on the GPU under `device` ("auto" | "cpu" |
    "gpu"); ImportError for "gpu" without a GPU-enabled FAISS and a visible GPU."""
    if device not in DEVICES:
        raise ValueError(f"device: expected one of {DEVICES}, got {device!r}")
    if device == "cpu":
        return False
    if device == "gpu":
        if not gpu_count(faiss):
            raise ImportError('index_device="gpu" needs FAISS with GPU support and a visible GPU: '
                              f'{install_hint("gpu")} (faiss-gpu), or use index_device="auto"')
        return True
    return rows >= min_rows and gpu_count(faiss) > 0


class GpuFlat:
    """A `faiss.GpuIndexFlatIP` copy of the first `n` rows of a (capacity, dim) float32 matrix whose
    ids are the slots. `sync` brings it up to date; `stale` forces a rebuild (rows overwritten or
    moved)."""

    def __init__(self, faiss, dim: int):
        self.faiss, self.dim = faiss, int(dim)
        self.resources = faiss.StandardGpuResources()
        self.index = faiss.GpuIndexFlatIP(self.resources, self.dim)
        self.n = 0
        self.rebuilds = 0

    def sync(self, vecs: np.ndarray, n: int, stale: bool) -> None:
        if stale or n < self.n:
            self.index.reset()
            self.n = 0
            self.rebuilds += 1
        if n > self.n:
            self.index.add(np.ascontiguousarray(vecs[self.n:n], np.float32))
            self.n = n

    def search(self, q: np.ndarray, k: int, live: np.ndarray, n_live: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(slots, sims) of the top-k live rows (`live`: (n,) bool), ordered as the exact search;
        None when that needs more than `MAX_FETCH` neighbours (the caller searches on CPU)."""
        fetch = min(self.n, k + (self.n - n_live))
        if fetch > MAX_FETCH:
            return None
        sims, ids = self.index.search(np.ascontiguousarray(q.reshape(1, -1), np.float32), fetch)
        sims, ids = sims[0], ids[0].astype(np.int64)
        keep = ids >= 0
        keep[keep] = live[ids[keep]]
        ids, sims = ids[keep], sims[keep]
        order = np.lexsort((ids, -sims))[:k]  # not kernels.topk: ties go by slot, not by FAISS order
        return ids[order], sims[order]


__all__ = ["DEVICES", "MAX_FETCH", "GpuFlat", "gpu_count", "use_gpu"]
