"""Top-k of a score vector or matrix, in the order of a stable sort of -scores."""
from __future__ import annotations

import numpy as np

from etamem.kernels.backend import resolve_backend

# below this share of k in n, a partition then a sort of the k best beats one full stable sort
_PARTITION_SHARE = 4


def topk(scores, k: int, *, backend: str = "auto") -> np.ndarray:
    """Indices of the `k` best scores, best first: exactly `np.argsort(-scores, kind="stable")[:k]`
    along the last axis (ties by lower index; -inf after every finite score, NaN last).

    scores: (n,) or (rows, n) numbers. Returns int64 (k',) or (rows, k') with k' = min(max(k, 0), n).
    With k much smaller than n the NumPy path partitions then sorts the k best (O(n + k log k)).
    """
    s = np.asarray(scores)
    if s.ndim not in (1, 2):
        raise ValueError(f"scores: expected 1-D or 2-D, got shape {s.shape}")
    n = s.shape[-1]
    k = min(max(int(k), 0), n)
    if k == 0 or s.size == 0:
        return np.zeros(s.shape[:-1] + (k,), np.int64)
    neg = -s
    kind = resolve_backend(backend, size=s.size)
    if kind != "numpy":
        return _stable_head_torch(neg, k, "cuda" if kind == "torch-cuda" else "cpu")
    if k * _PARTITION_SHARE >= n:
        return np.argsort(neg, axis=-1, kind="stable")[..., :k].astype(np.int64, copy=False)
    rows = neg.reshape(-1, n)
    part = np.argpartition(rows, k - 1, axis=1)
    kth = np.take_along_axis(rows, part[:, k - 1:k], axis=1)
    head = part[:, :k]
    out = np.take_along_axis(head, np.lexsort((head, np.take_along_axis(rows, head, axis=1)), axis=1), axis=1)
    # a row whose k-th key ties with keys left outside (or is NaN) is sorted whole: the partition
    # keeps any of the tied ones, the stable sort the lowest indices
    redo = np.flatnonzero(np.count_nonzero(rows <= kth, axis=1) != k)
    for r in redo.tolist():
        out[r] = np.argsort(rows[r], kind="stable")[:k]
    return out.astype(np.int64, copy=False).reshape(s.shape[:-1] + (k,))


def _stable_head_torch(neg: np.ndarray, k: int, device: str) -> np.ndarray:
    import torch

    t = torch.from_numpy(np.ascontiguousarray(neg)).to(device)
    return stable_head(t, k).cpu().numpy().astype(np.int64, copy=False)


def stable_head(neg, k: int):
    """First `k` indices of a stable ascending sort of the torch tensor `neg` along its last
    axis (NaN last): the torch side of `topk`, for keys already on a device."""
    import torch

    return torch.sort(neg, dim=-1, stable=True).indices[..., :k]
