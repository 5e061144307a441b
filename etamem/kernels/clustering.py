"""Clustering for tree maintenance: spherical k-means, capacity-bounded assignment, balanced split."""
from __future__ import annotations

import math

import numpy as np

from etamem.kernels.backend import resolve_backend


def _kmeanspp_init(x: np.ndarray, k: int, seed: int) -> np.ndarray:
    """k-means++ seeding for unit rows (D² = 2 − 2·cos): (k,) int64 row indices, distinct."""
    n = x.shape[0]
    rng = np.random.default_rng(seed)
    chosen = [int(rng.integers(n))]
    best = (x @ x[chosen[0]]).astype(np.float64)
    taken = np.zeros(n, dtype=bool)
    taken[chosen[0]] = True
    for _ in range(1, k):
        d2 = np.clip(2.0 - 2.0 * best, 0.0, None)
        d2[taken] = 0.0
        cum = np.cumsum(d2)
        if cum[-1] > 0:
            idx = int(np.searchsorted(cum, rng.random() * cum[-1], side="right"))
            idx = min(idx, int(np.flatnonzero(d2 > 0)[-1]))
        else:  # every remaining row duplicates a chosen one
            idx = int(rng.choice(np.flatnonzero(~taken)))
        chosen.append(idx)
        taken[idx] = True
        best = np.maximum(best, x @ x[idx])
    return np.asarray(chosen, dtype=np.int64)


def _renumber(labels: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Drop unused labels in [0, k): (new labels (n,) int64, kept old ids (k',) int64)."""
    used = np.bincount(labels, minlength=k) > 0
    mapping = np.cumsum(used) - 1
    return mapping[labels].astype(np.int64), np.flatnonzero(used)


def spherical_kmeans(vectors: np.ndarray, k: int, *, n_iter: int = 25, seed: int = 0,
                     backend: str = "auto") -> tuple[np.ndarray, np.ndarray]:
    """Cosine k-means of unit rows.

    vectors: (n, d) float32, rows assumed unit length. Rows go to the centroid of largest dot
    product (ties → lower index); a centroid is the normalised mean of its rows (sums in
    float64). Seeding is k-means++ from `np.random.default_rng(seed)`, computed in NumPy for
    every backend, so paths agree. Stops when labels stop changing or after `n_iter` updates.
    k is clipped to n; clusters that end empty are dropped and labels renumbered 0..k'-1.
    Returns (labels (n,) int64, centroids (k', d) float32 unit rows).
    """
    x = np.ascontiguousarray(np.atleast_2d(np.asarray(vectors, dtype=np.float32)))
    n, d = x.shape
    if int(k) < 1 and n > 0:
        raise ValueError(f"k={k!r}: must be >= 1")
    k = min(int(k), n)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros((0, d), np.float32)
    centroids = x[_kmeanspp_init(x, k, seed)].copy()
    kind = resolve_backend(backend, size=n * k * d)
    if kind == "numpy":
        labels, centroids = _kmeans_numpy(x, centroids, n_iter)
    else:
        labels, centroids = _kmeans_torch(x, centroids, n_iter, "cuda" if kind == "torch-cuda" else "cpu")
    labels, kept = _renumber(labels, k)
    return labels, np.ascontiguousarray(centroids[kept], dtype=np.float32)


def _update_numpy(x: np.ndarray, labels: np.ndarray, old: np.ndarray, x64: np.ndarray | None = None) -> np.ndarray:
    k = old.shape[0]
    n = x.shape[0]
    if x64 is not None and k * n <= 1_000_000:  # small problems (tree splits): one-hot product
        onehot = np.zeros((k, n), np.float64)
        onehot[labels, np.arange(n)] = 1.0
        sums = onehot @ x64
    else:
        counts = np.bincount(labels, minlength=k)
        order = np.argsort(labels, kind="stable")
        nonempty = counts > 0
        starts = (np.cumsum(counts) - counts)[nonempty]
        sums = np.zeros(old.shape, np.float64)
        sums[nonempty] = np.add.reduceat(x[order], starts, axis=0, dtype=np.float64)
    norms = np.sqrt(np.einsum("ij,ij->i", sums, sums))
    ok = norms > 1e-12  # empty (or cancelling) clusters keep their previous centroid
    new = old.copy()
    new[ok] = (sums[ok] / norms[ok, None]).astype(np.float32)
    return new


def _kmeans_numpy(x, centroids, n_iter):
    x64 = x.astype(np.float64) if x.shape[0] * centroids.shape[0] <= 1_000_000 else None
    labels = np.argmax(x @ centroids.T, axis=1)
    for _ in range(max(int(n_iter), 1)):
        centroids = _update_numpy(x, labels, centroids, x64)
        new = np.argmax(x @ centroids.T, axis=1)
        if np.array_equal(new, labels):
            break
        labels = new
    else:  # not converged: make the centroids the means of the returned labels
        centroids = _update_numpy(x, labels, centroids, x64)
    return labels.astype(np.int64), centroids


def _kmeans_torch(x, centroids, n_iter, device):
    import torch

    tx = torch.from_numpy(x).to(device)
    tx64 = tx.to(torch.float64)
    c = torch.from_numpy(centroids).to(device)
    k = c.shape[0]

    def update(labels, old):
        sums = torch.zeros((k, tx.shape[1]), dtype=torch.float64, device=device)
        sums.index_add_(0, labels, tx64)
        norms = sums.norm(dim=1)
        ok = norms > 1e-12
        new = old.clone()
        new[ok] = (sums[ok] / norms[ok, None]).to(torch.float32)
        return new

    labels = torch.argmax(tx @ c.T, dim=1)
    for _ in range(max(int(n_iter), 1)):
        c = update(labels, c)
        new = torch.argmax(tx @ c.T, dim=1)
        if torch.equal(new, labels):
            break
        labels = new
    else:
        c = update(labels, c)
    return labels.cpu().numpy().astype(np.int64), c.cpu().numpy()


def capacity_assign(similarities: np.ndarray, capacity: int, *, backend: str = "auto") -> np.ndarray:
    """Assign each row to a cluster, no cluster above `capacity`, greedily.

    similarities: (n, k) float. (row, cluster) pairs are taken by descending similarity
    (ties: lower row, then lower cluster); a pair is used when its row is still free and its
    cluster has room. Needs k·capacity >= n (else ValueError). Returns labels (n,) int64.
    Greedy and sequential, so NumPy only; `backend` is validated and otherwise ignored.
    """
    resolve_backend(backend)
    s = np.asarray(similarities, dtype=np.float64)
    if s.ndim != 2:
        raise ValueError(f"similarities must be (n, k), got shape {s.shape}")
    n, k = s.shape
    capacity = int(capacity)
    if n == 0:
        return np.zeros(0, np.int64)
    if capacity < 1 or k * capacity < n:
        raise ValueError(f"k*capacity = {k}*{capacity} < n = {n}: cannot assign every row")
    if np.isnan(s).any():
        raise ValueError("similarities contain NaN")
    best = np.argmax(s, axis=1)  # ties -> lower cluster, as in the greedy order
    if np.bincount(best, minlength=k).max() <= capacity:
        return best.astype(np.int64)  # every row's first pair in the greedy order fits: same result
    rows, cols = np.divmod(np.arange(n * k), k)
    order = np.lexsort((cols, rows, -s.reshape(-1)))
    labels = [-1] * n
    room = [capacity] * k
    left = n
    for r, c in zip(rows[order].tolist(), cols[order].tolist()):
        if labels[r] < 0 and room[c] > 0:
            labels[r] = c
            room[c] -= 1
            left -= 1
            if left == 0:
                break
    return np.asarray(labels, dtype=np.int64)


def balanced_split(vectors: np.ndarray, capacity: int, *, seed: int = 0, min_groups: int = 2,
                   n_iter: int = 25, backend: str = "auto") -> np.ndarray:
    """Split unit rows into groups of at most `capacity` rows.

    vectors: (n, d) float32 unit rows. k = max(min_groups, ceil(n / capacity)) clipped to n;
    spherical k-means gives centroids, then `capacity_assign` on the row-centroid cosines
    enforces the capacity (if k-means drops clusters below ceil(n / capacity), the largest
    clusters' centroids are repeated to make room). Returns labels (n,) int64, contiguous
    0..g-1 with no empty group.
    """
    x = np.atleast_2d(np.asarray(vectors, dtype=np.float32))
    n = x.shape[0]
    capacity = int(capacity)
    if capacity < 1:
        raise ValueError(f"capacity={capacity!r}: must be >= 1")
    if n == 0:
        return np.zeros(0, np.int64)
    need = math.ceil(n / capacity)
    k = min(max(int(min_groups), need, 1), n)
    labels, cents = spherical_kmeans(x, k, n_iter=n_iter, seed=seed, backend=backend)
    if cents.shape[0] < need:
        by_size = np.argsort(-np.bincount(labels, minlength=cents.shape[0]), kind="stable")
        extra = by_size[np.arange(need - cents.shape[0]) % cents.shape[0]]
        cents = np.concatenate([cents, cents[extra]], axis=0)
    sims = x @ cents.T
    labels = capacity_assign(sims, capacity)
    return _renumber(labels, cents.shape[0])[0]
