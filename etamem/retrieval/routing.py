"""Entropy-based routing of a retrieval budget across views (see docs/design.md, 'Entropy routing')."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from etamem.kernels import softmax_entropy

EPS = 1e-3  # keeps a view with a flat similarity profile in the running


@dataclass(frozen=True)
class Routing:
    """Budgets per view (sum to K over non-empty views), with what produced them."""

    budgets: dict[str, int]
    weights: dict[str, float]  # normalised concentration g_v / sum g
    entropies: dict[str, float]  # normalised entropy H_v in [0, 1] (None-empty views only)
    mode: str


def largest_remainder(weights: dict[str, float], total: int) -> dict[str, int]:
    """Integer shares of `total` proportional to non-negative `weights` (Hamilton's method;
    ties go to the view named first). Zero weight -> zero share."""
    names = list(weights)
    w = np.array([max(0.0, weights[n]) for n in names], dtype=np.float64)
    if total <= 0 or w.sum() <= 0:
        return {n: 0 for n in names}
    exact = w / w.sum() * total
    base = np.floor(exact).astype(int)
    rest = total - int(base.sum())
    order = sorted(range(len(names)), key=lambda i: (-(exact[i] - base[i]), i))
    for i in order[:rest]:
        base[i] += 1
    return {n: int(b) for n, b in zip(names, base)}


def route(similarities: dict[str, np.ndarray], k: int, *, mode: str = "entropy",
          temperature: float = 0.05) -> Routing:
    """Share budget `k` across views from each view's query-to-leaf cosines.

    similarities: view -> (n_v,) cosines of the query to that view's leaves (Time: sessions),
    or to its n_v best leaves (the retriever passes at most `routing_candidates`, so routing
    does not grow with the view); an empty array means an empty view, which gets 0.
    "entropy": p = softmax(s / T), g_v = 1 - H(p)/log(n_v) + EPS, budgets proportional to g_v;
    "mean": equal shares.
    """
    if mode not in ("entropy", "mean"):
        raise ValueError(f"routing mode {mode!r}: expected 'entropy' or 'mean'")
    entropies, conc = {}, {}
    for view, sims in similarities.items():
        sims = np.asarray(sims, dtype=np.float64)
        if sims.size == 0:
            conc[view] = 0.0
            continue
        h = softmax_entropy(sims, temperature) if sims.size > 1 else 0.0
        entropies[view] = float(h)
        conc[view] = 1.0 if mode == "mean" else 1.0 - float(h) + EPS
    total = sum(conc.values())
    weights = {v: (c / total if total > 0 else 0.0) for v, c in conc.items()}
    return Routing(largest_remainder(conc, k), weights, entropies, mode)
