"""Cosine top-k and score normalisation."""
from __future__ import annotations

import numpy as np

from etamem.kernels.backend import resolve_backend
from etamem.kernels.ranking import stable_head, topk


def cosine_topk(queries: np.ndarray, keys: np.ndarray, k: int, *, backend: str = "auto",
                normalised: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Top-k keys by cosine similarity for each query.

    queries: (q, d) float32; keys: (n, d) float32. With `normalised=True` rows are assumed
    unit length (cosine = dot product). Returns (scores (q, k') float32, indices (q, k') int64)
    with k' = min(k, n), each row sorted by descending score; ties broken by lower index.
    """
    q = np.atleast_2d(np.asarray(queries, dtype=np.float32))
    x = np.atleast_2d(np.asarray(keys, dtype=np.float32))
    n = x.shape[0]
    k = min(int(k), n)
    if k <= 0 or q.shape[0] == 0:
        return np.zeros((q.shape[0], 0), np.float32), np.zeros((q.shape[0], 0), np.int64)
    if not normalised:
        q = q / np.maximum(np.linalg.norm(q, axis=1, keepdims=True), 1e-12)
        x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    kind = resolve_backend(backend, size=q.shape[0] * n * x.shape[1])
    if kind == "numpy":
        sims = q @ x.T
        idx = topk(sims, k, backend="numpy")
        return np.take_along_axis(sims, idx, axis=1).astype(np.float32), idx
    import torch

    device = "cuda" if kind == "torch-cuda" else "cpu"
    sims = torch.from_numpy(q).to(device) @ torch.from_numpy(x).to(device).T
    idx = stable_head(-sims, k)
    scores = torch.gather(sims, 1, idx)
    return scores.cpu().numpy().astype(np.float32), idx.cpu().numpy().astype(np.int64)


def max_normalise(scores: np.ndarray) -> np.ndarray:
    """Divide non-negative scores (n,) by their maximum (all-zero input stays zero): (n,) float32."""
    s = np.asarray(scores, dtype=np.float32)
    top = float(s.max()) if s.size else 0.0
    return s / top if top > 0 else np.zeros_like(s)
