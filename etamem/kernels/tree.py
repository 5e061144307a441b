"""Batched beam search down a tree held in arrays (the insertion descent of the semantic trees)."""
from __future__ import annotations

import numpy as np

from etamem.kernels.backend import resolve_backend


def beam_descend(centroids: np.ndarray, child_table: np.ndarray, start: np.ndarray, queries: np.ndarray,
                 beam: int, *, backend: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """Beam search by cosine for a batch of queries, all queries one level per step.

    centroids: (N, d) float32 unit rows, one per node id. child_table: (N, K) integers, row n =
    the children of node n padded with -1; a leaf's row is [n, -1, ...] (it expands to itself).
    start: (S,) int64, distinct node ids, the first frontier (the root's children, or a wider
    level; scored for all queries in one product). queries: (B, d) float32.
    Per query: score the frontier, keep the best `beam`, replace each kept node by its
    children, until every kept node is a leaf. Returns (nodes (B, beam) int64, scores (B, beam)
    float32), best first per row (ties: lower node id), padded with -1 / -inf where fewer
    leaves were reached. `backend="auto"` is NumPy (the centroid table would have to cross to
    the GPU on every call); "torch" / "torch-cuda" on request.
    """
    beam = int(beam)
    if beam < 1:
        raise ValueError(f"beam={beam!r}: must be >= 1")
    q = np.atleast_2d(np.asarray(queries, dtype=np.float32))
    table = np.asarray(child_table)  # int32 or int64, used as given (no copy of the table)
    if not np.issubdtype(table.dtype, np.integer):
        raise ValueError(f"child_table must hold integers, got {table.dtype}")
    start = np.asarray(start, dtype=np.int64).reshape(-1)
    B = q.shape[0]
    if B == 0 or start.size == 0:
        return np.full((B, beam), -1, np.int64), np.full((B, beam), -np.inf, np.float32)
    # "auto" stays on NumPy: the whole centroid table would cross to the GPU on every call
    kind = resolve_backend(backend, size=0)
    if kind == "numpy":
        return _descend_numpy(np.asarray(centroids, dtype=np.float32), table, start, q, beam)
    return _descend_torch(centroids, table, start, q, beam, "cuda" if kind == "torch-cuda" else "cpu")


def _descend_numpy(cent, table, start, q, beam):
    B = q.shape[0]
    frontier = np.broadcast_to(start, (B, start.size)).copy()
    valid, safe = np.ones(frontier.shape, bool), frontier
    s = q @ cent.take(start, axis=0).T  # (B, S): the shared first frontier is one product
    qcol = q[:, :, None]
    while True:
        if frontier.shape[1] > beam:
            top = np.argpartition(-s, beam - 1, axis=1)[:, :beam]
            frontier, s = np.take_along_axis(frontier, top, 1), np.take_along_axis(s, top, 1)
            valid, safe = frontier >= 0, np.take_along_axis(safe, top, 1)
        kids = table[safe]  # (B, W, K)
        if ((kids[:, :, 0] == frontier) | ~valid).all():  # only leaves (or padding) kept
            break
        kids[~valid] = -1
        frontier = -np.sort(-kids.reshape(B, -1), axis=1)  # padding last
        width = int((frontier >= 0).sum(axis=1).max())
        frontier = frontier[:, :max(width, 1)]
        valid = frontier >= 0
        safe = np.where(valid, frontier, 0)
        s = np.matmul(cent.take(safe, axis=0), qcol)[:, :, 0]  # (B, W); take: faster than fancy indexing
        s[~valid] = -np.inf
    return _finish(frontier, s, beam)


def _descend_torch(cent, table, start, q, beam, device):
    import torch

    tc = torch.as_tensor(np.asarray(cent, dtype=np.float32), device=device)
    tt = torch.as_tensor(table, device=device).long()
    tq = torch.as_tensor(q, device=device)
    B = tq.shape[0]
    tstart = torch.as_tensor(start, device=device)
    frontier = tstart.expand(B, -1).clone()
    valid, safe = torch.ones_like(frontier, dtype=torch.bool), frontier
    s = tq @ tc[tstart].T  # (B, S): the shared first frontier is one product
    while True:
        if frontier.shape[1] > beam:
            s, top = torch.topk(s, beam, dim=1)
            frontier, safe = torch.gather(frontier, 1, top), torch.gather(safe, 1, top)
            valid = frontier >= 0
        kids = tt[safe]
        if bool(((kids[:, :, 0] == frontier) | ~valid).all()):
            break
        kids[~valid] = -1
        frontier = torch.sort(kids.reshape(B, -1), dim=1, descending=True).values
        width = int((frontier >= 0).sum(dim=1).max())
        frontier = frontier[:, :max(width, 1)]
        valid = frontier >= 0
        safe = torch.where(valid, frontier, torch.zeros_like(frontier))
        s = torch.bmm(tc[safe], tq[:, :, None])[:, :, 0]
        s = s.masked_fill(~valid, float("-inf"))
    return _finish(frontier.cpu().numpy(), s.cpu().numpy(), beam)


def _finish(frontier, s, beam):
    """Sort each row best first (ties: lower node id) and pad to `beam` columns."""
    order = np.lexsort((frontier, -s), axis=1)
    nodes, scores = np.take_along_axis(frontier, order, 1), np.take_along_axis(s, order, 1).astype(np.float32)
    nodes[~np.isfinite(scores)] = -1
    B, w = nodes.shape
    if w < beam:
        nodes = np.concatenate([nodes, np.full((B, beam - w), -1, np.int64)], axis=1)
        scores = np.concatenate([scores, np.full((B, beam - w), -np.inf, np.float32)], axis=1)
    return nodes.astype(np.int64), scores
