"""Hierarchical beam search over one view (see docs/design.md, 'Hierarchical beam search').

Node and AMU score: (1 - beta) * cos + beta * BM25n, where BM25n is BM25 over node texts
(leaf = its AMU texts, inner node = its summary) or AMU texts, min-max normalised over the
candidates being compared. Starting from the root's children, each step expands the inner
nodes of the beam, scores the candidates and keeps the best `beam`; when the beam holds only
leaves, the AMUs of those leaves are scored and the best `k` returned. With `beam` at least
the number of leaves nothing is ever pruned, so the result equals exhaustive search.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from etamem.kernels import topk
from etamem.retrieval.lexical import LexicalIndex, minmax


@dataclass
class BeamTrace:
    """What the search looked at: per level the candidates with their scores, and the leaves."""

    levels: list[list[tuple[str, float, float, float]]] = field(default_factory=list)  # (node, score, cos, bm25n)
    leaves: list[str] = field(default_factory=list)
    nodes_scored: int = 0  # nodes scored at every level (children of the beam)
    units_scored: int = 0  # AMUs of the final leaves scored by text
    context_scored: int = 0  # of those, the ones scored with their source turns in context


@dataclass(frozen=True)
class Scored:
    key: str  # AMU id
    score: float
    cos: float
    bm25: float


Normalise = Callable[[np.ndarray], np.ndarray]  # raw BM25 (n,) -> [0, 1] (n,) float32; default `minmax`


def hybrid(cos: np.ndarray, bm25_raw: np.ndarray, beta: float, norm: Normalise = minmax
           ) -> tuple[np.ndarray, np.ndarray]:
    """(score, bm25n) with bm25n = norm(bm25_raw) (min-max over these candidates by default)."""
    bm = norm(bm25_raw) if beta > 0 else np.zeros_like(cos, dtype=np.float32)
    return (1.0 - beta) * cos + beta * bm, bm


# AMU ids -> (dense, raw BM25) of their turns in context; a context function may carry its own
# BM25 normaliser as attribute `norm` (else min-max over the candidates) and, as attribute
# `shares`, a function (ids, share) -> (n,) float32 per-unit context shares (else `share` for all)
ContextFn = Callable[[list[str]], tuple[np.ndarray, np.ndarray]]


def contextual(cos: np.ndarray, bm25_raw: np.ndarray, ids: list[str], context: ContextFn | None, share: float,
               beta: float, norm: Normalise = minmax) -> tuple[np.ndarray, np.ndarray]:
    """`hybrid` with each AMU's source turn in its dialogue context mixed in: (1 - beta) * ((1 -
    share) * cos + share * ctx_cos) + beta * ((1 - share) * bm25n + share * ctx_bm25n), the unit's
    BM25 normalised by `norm`, the context's by `context.norm` (both min-max over these
    candidates by default), `share` per unit from `context.shares` when it has one; `context(ids)`
    gives ctx_cos and the raw ctx_bm25. Returns (score, the unit's own bm25n); plain `hybrid`
    when `context` is None."""
    if context is None or share <= 0 or not len(ids):
        return hybrid(cos, bm25_raw, beta, norm)
    ctx_cos, ctx_bm = context(ids)
    shares = getattr(context, "shares", None)
    if shares is not None:
        share = shares(ids, share)
    bm = norm(bm25_raw) if beta > 0 else np.zeros_like(cos, dtype=np.float32)
    lexical = (1.0 - share) * bm + share * getattr(context, "norm", minmax)(ctx_bm) if beta > 0 else bm
    return (1.0 - beta) * ((1.0 - share) * cos + share * ctx_cos) + beta * lexical, bm


@dataclass
class HierarchyView:
    """A read-only adapter giving beam search what it needs from a tree or the time forest.

    children(node) -> child keys; is_leaf(key); centroids(keys) -> (n, d); node_row(key) ->
    row in `node_lex`; members(leaf) -> AMU rows; amu_vectors(rows) -> (n, d); amu_ids(rows).
    """

    roots: Callable[[], Sequence]
    children: Callable[[object], Sequence]
    is_leaf: Callable[[object], bool]
    centroids: Callable[[Sequence], np.ndarray]
    node_row: Callable[[object], int]
    members: Callable[[object], Sequence[int]]
    amu_vectors: Callable[[Sequence[int]], np.ndarray]
    amu_ids: Callable[[Sequence[int]], list[str]]
    node_lex: LexicalIndex
    amu_lex: LexicalIndex
    leaf_filter: Callable[[object], bool] | None = None  # e.g. sessions inside a time window


def beam_search(view: HierarchyView, qvec: np.ndarray, query_tokens_nodes: np.ndarray,
                query_tokens_amus: np.ndarray, *, beam: int, k: int, beta: float,
                trace: BeamTrace | None = None, context: ContextFn | None = None,
                context_share: float = 0.0, node_norm: Normalise = minmax, amu_norm: Normalise = minmax,
                context_rows: int = 16384) -> list[Scored]:
    """Best `k` AMUs of the view for the query (qvec: (d,) float32 unit), best first. The AMUs
    of the final leaves are scored by `contextual` (`context`, `context_share`); node and AMU
    BM25 are normalised by `node_norm` and `amu_norm`. When the final leaves hold more than
    `context_rows` AMUs (a Time-view session of thousands of turns), only the best
    `context_rows` of them by plain `hybrid` score are scored in context (the context costs a
    neighbour lookup per unit); at or below it every member is, as before."""
    if k <= 0:
        return []
    frontier = [n for n in view.roots() if not (view.is_leaf(n) and view.leaf_filter and not view.leaf_filter(n))]
    while frontier:
        cand: list = []
        for n in frontier:
            if view.is_leaf(n):
                cand.append(n)
            else:
                cand.extend(c for c in view.children(n)
                            if not (view.leaf_filter and view.is_leaf(c) and not view.leaf_filter(c)))
        if not cand:
            return []
        cos = view.centroids(cand) @ qvec
        bm_raw = view.node_lex.scores_for([view.node_row(c) for c in cand], query_tokens_nodes)
        score, bm = hybrid(cos, bm_raw, beta, node_norm)
        order = topk(score, beam)
        if trace is not None:
            trace.nodes_scored += len(cand)
            trace.levels.append([(str(cand[i]), float(score[i]), float(cos[i]), float(bm[i])) for i in order])
        done = all(view.is_leaf(cand[i]) for i in order)
        frontier = [cand[i] for i in order]
        if done:
            break
    if not frontier:
        return []
    if trace is not None:
        trace.leaves = [str(n) for n in frontier]
    rows = [r for leaf in frontier for r in view.members(leaf)]
    if not rows:
        return []
    cos = view.amu_vectors(rows) @ qvec
    bm_raw = view.amu_lex.scores_for(rows, query_tokens_amus)
    if trace is not None:
        trace.units_scored = len(rows)
    if context is not None and context_share > 0 and len(rows) > max(context_rows, k):
        plain, _ = hybrid(cos, bm_raw, beta, amu_norm)
        keep = np.sort(topk(plain, max(context_rows, k)))
        rows, cos, bm_raw = [rows[i] for i in keep], cos[keep], bm_raw[keep]
    ids = view.amu_ids(rows)
    if trace is not None:
        trace.context_scored = len(rows) if context is not None and context_share > 0 else 0
    score, bm = contextual(cos, bm_raw, ids, context, context_share, beta, amu_norm)
    order = np.lexsort((np.array(ids), -score))[:k]
    return [Scored(ids[i], float(score[i]), float(cos[i]), float(bm[i])) for i in order]
