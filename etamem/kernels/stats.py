"""Small statistics used by routing and calibration: softmax entropy, Otsu, cohesion, EMA."""
from __future__ import annotations

import math

import numpy as np

from etamem.kernels.backend import resolve_backend


def softmax_entropy(scores: np.ndarray, temperature: float = 0.05, *, backend: str = "auto") -> float:
    """Normalised entropy H / log(n) of p = softmax(scores / temperature), in [0, 1].

    scores: (n,) float. Computed in float64 with the max subtracted (stable for any T > 0).
    n <= 1 returns 0.0 (one leaf: fully concentrated). 0 = all mass on one item, 1 = uniform.
    """
    s = np.asarray(scores, dtype=np.float64).reshape(-1)
    if not temperature > 0:
        raise ValueError(f"temperature={temperature!r}: must be > 0")
    n = s.size
    if n <= 1:
        return 0.0
    if not np.all(np.isfinite(s)):
        raise ValueError("scores must be finite")
    kind = resolve_backend(backend, size=n)
    if kind == "numpy":
        z = s / temperature
        z = z - z.max()
        log_p = z - math.log(float(np.exp(z).sum()))  # log-softmax
        h = float(-(np.exp(log_p) * log_p).sum())
    else:
        import torch

        device = "cuda" if kind == "torch-cuda" else "cpu"
        z = torch.from_numpy(s).to(device) / temperature
        log_p = torch.log_softmax(z, dim=0)
        h = float(-(log_p.exp() * log_p).sum().item())
    return min(max(h / math.log(n), 0.0), 1.0)


def _otsu_from_hist(counts: np.ndarray, bin_centers: np.ndarray) -> float:
    """skimage's Otsu step on a histogram (same dtypes and formula, so the same argmax)."""
    counts = counts.astype("float32", copy=False)
    weight1 = np.cumsum(counts)
    weight2 = np.cumsum(counts[::-1])[::-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        mean1 = np.cumsum(counts * bin_centers) / weight1
        mean2 = (np.cumsum((counts * bin_centers)[::-1]) / weight2[::-1])[::-1]
    variance12 = weight1[:-1] * weight2[1:] * (mean1[:-1] - mean2[1:]) ** 2
    return float(bin_centers[int(np.argmax(variance12))])


def otsu_threshold(values: np.ndarray, nbins: int = 256, *, backend: str = "auto") -> float:
    """Otsu threshold of `values` (any shape, flattened); equals
    `skimage.filters.threshold_otsu(values, nbins=nbins)`.

    Float input: `nbins` equal bins over [min, max] binned exactly as `np.histogram`, the
    threshold is the bin centre maximising the between-class variance. Integer input: one
    bin per integer value (nbins ignored), as skimage does. Constant input returns that
    value; empty input raises ValueError. The torch path bins on the device; the 256-bin
    argmax runs in NumPy so both paths return the same bin centre.
    """
    a = np.asarray(values)
    if a.size == 0:
        raise ValueError("otsu_threshold of an empty array")
    a = a.reshape(-1)
    if a.dtype == np.bool_:
        a = a.astype(np.uint8)
    first = a[0]
    if np.all(a == first):
        return float(first)
    counts, centers = _histogram(a, int(nbins), resolve_backend(backend, size=a.size))
    return _otsu_from_hist(counts, centers)


def _histogram(a: np.ndarray, nbins: int, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """skimage's histogram of a non-empty 1-D array: (counts (m,) int64, bin centres (m,)).

    Integers: one bin per value from min to max. Floats: bins identical to `np.histogram`
    (its edges, arithmetic and +-1 edge corrections, replayed in torch on that path).
    """
    if np.issubdtype(a.dtype, np.integer):
        lo, hi = int(a.min().astype(np.int64)), int(a.max().astype(np.int64))
        centers = np.arange(lo, hi + 1)
        if kind == "numpy":
            return np.bincount(a.astype(np.int64) - lo, minlength=hi - lo + 1), centers
        import torch

        device = "cuda" if kind == "torch-cuda" else "cpu"
        t = torch.from_numpy(a.astype(np.int64)).to(device) - lo
        return torch.bincount(t, minlength=hi - lo + 1).cpu().numpy(), centers
    if not np.issubdtype(a.dtype, np.floating):
        a = a.astype(np.float64)
    if kind == "numpy":
        counts, edges = np.histogram(a, bins=nbins)  # raises like skimage on non-finite
    else:
        import torch

        edges = np.histogram_bin_edges(a, bins=nbins)  # same edges (and errors)
        first_edge, last_edge = a.min(), a.max()
        device = "cuda" if kind == "torch-cuda" else "cpu"
        x = torch.from_numpy(a.astype(edges.dtype, copy=False)).to(device)
        te = torch.from_numpy(edges).to(device)
        first = torch.tensor(first_edge, dtype=x.dtype, device=device)
        denom = torch.tensor(last_edge - first_edge, dtype=x.dtype, device=device)
        idx = (((x - first) / denom) * nbins).to(torch.int64)
        idx[idx == nbins] -= 1
        idx[x < te[idx]] -= 1
        idx[(x >= te[idx + 1]) & (idx != nbins - 1)] += 1
        counts = torch.bincount(idx, minlength=nbins).cpu().numpy()
    return counts, (edges[:-1] + edges[1:]) / 2.0


def cohesion_from_sum(total: np.ndarray, n: int) -> float:
    """Cohesion of n unit vectors from their sum alone: (‖Σx‖² − n) / (n(n−1)) in O(d).

    total: (d,) float64 sum of the vectors (a tree node keeps it anyway). n < 2 → 1.0.
    """
    if n < 2:
        return 1.0
    t = np.asarray(total, dtype=np.float64)
    return (float(t @ t) - n) / (n * (n - 1))


def cohesion(vectors: np.ndarray, *, backend: str = "auto") -> float:
    """Mean pairwise cosine (i != j) of unit rows in O(n·d): (‖Σx‖² − Σ‖x_i‖²) / (n(n−1)).

    vectors: (n, d) float, rows assumed unit length (then Σ‖x_i‖² = n, the design's formula;
    using the actual norms keeps float32 rounding out). Accumulates in float64. n < 2 → 1.0.
    """
    x = np.atleast_2d(np.asarray(vectors))
    n = x.shape[0]
    if n < 2:
        return 1.0
    kind = resolve_backend(backend, size=x.size)
    if kind == "numpy":
        x64 = x.astype(np.float64, copy=False)
        total = x64.sum(axis=0)
        sq = float(np.einsum("ij,ij->", x64, x64))
        s2 = float(total @ total)
    else:
        import torch

        device = "cuda" if kind == "torch-cuda" else "cpu"
        t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64)).to(device)
        total = t.sum(dim=0)
        s2 = float((total @ total).item())
        sq = float((t * t).sum().item())
    return (s2 - sq) / (n * (n - 1))


def ema(old, target, alpha: float):
    """Exponential moving average (1 − alpha)·old + alpha·target.

    Scalars give a float; arrays (or lists) give an ndarray. alpha must be in [0, 1].
    """
    if not 0.0 <= alpha <= 1.0:  # also rejects NaN
        raise ValueError(f"alpha={alpha!r}: must be in [0, 1]")
    if np.ndim(old) == 0 and np.ndim(target) == 0 and not isinstance(old, np.ndarray) \
            and not isinstance(target, np.ndarray):
        return float((1.0 - alpha) * float(old) + alpha * float(target))
    return (1.0 - alpha) * np.asarray(old) + alpha * np.asarray(target)
