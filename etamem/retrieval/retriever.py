"""Retrieval over the three views of one space (DESIGN §8).

A `SpaceIndex` is built from the views and the active AMUs whenever they changed (never per
query): leaf-centroid matrices for routing (scored through FAISS), BM25 over node texts per
view and over AMU texts (with their dates). A query is encoded per view (text for Event and
Time, affective for Affect), its budget is routed across the views (from the similarities of
its best leaves per view, found through FAISS: exact up to `exact_max` leaves, HNSW above), each view runs a
hierarchical beam search, and the union is deduplicated (best score, every view recorded),
re-scored on one common scale and, for "when" questions or parsed time windows, boosted by
time. Beam steps score at most B * b_max candidates with a NumPy dot product.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from ..timeparse import format_date
from ..types import AMU
from ..views import SpaceViews
from .beam import BeamTrace, HierarchyView, Scored, beam_search, hybrid
from .flat import import_faiss
from .lexical import LexicalIndex, minmax
from .routing import Routing, route
from .temporal import TimeWindow, is_when_question, parse_time_window

SEMANTIC = ("event", "affect")
# an AMU "has a date" for "when" questions if its own text carries a time word (cheap scan)
TIME_WORDS = re.compile(
    r"\b(yesterday|today|tonight|tomorrow|ago|last (?:night|week|month|year|weekend)|next (?:week|month|year)|"
    r"this (?:week|month|year|weekend)|monday|tuesday|wednesday|thursday|friday|saturday|sunday|"
    r"january|february|april|june|july|august|september|october|november|december|"
    r"(?:in|since) (?:19|20)\d\d|\d{1,2}(?:st|nd|rd|th)? (?:of )?(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec))\b",
    re.IGNORECASE)


def amu_search_text(amu: AMU) -> str:
    """What BM25 sees of an AMU: speaker, text and date (the date helps "when" questions)."""
    return f"{amu.speaker}: {amu.text} {format_date(amu.timestamp)}"


def leaf_index(vectors: np.ndarray, exact_max: int = 16384):
    """FAISS inner-product index over leaf centroids ((n, d) float32 unit rows), or None if n = 0.

    Exact (`IndexFlatIP`, on the GPU when faiss-gpu sees one) up to `exact_max` rows; above
    that an HNSW graph (M 32), so routing cost grows about logarithmically with the leaves.
    """
    n = vectors.shape[0]
    if n == 0:
        return None
    faiss = import_faiss()
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    if n <= exact_max:
        index = faiss.IndexFlatIP(vectors.shape[1])
        if hasattr(faiss, "get_num_gpus") and faiss.get_num_gpus() > 0:  # pragma: no cover - no GPU here
            index = faiss.index_cpu_to_all_gpus(index)
    else:
        index = faiss.IndexHNSWFlat(vectors.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = 64
    index.add(vectors)
    return index


def top_similarities(index, q: np.ndarray, n: int, top: int) -> np.ndarray:
    """Cosines of q to its `top` nearest of the n indexed vectors, best first: (min(top, n),) float32."""
    if index is None or n == 0:
        return np.zeros(0, np.float32)
    k = min(top, n)
    if hasattr(index, "hnsw"):
        index.hnsw.efSearch = max(k, 64)
    sims, ids = index.search(q.reshape(1, -1).astype(np.float32), k)
    return sims[0][ids[0] >= 0]


@dataclass
class ViewTrace:
    entropy: float | None
    budget: int
    weight: float
    beam: BeamTrace
    found: list[tuple[str, float]]


@dataclass
class RetrievalResult:
    """Ranked (amu_id, score, views) and how they were found."""

    ranked: list[tuple[str, float, tuple[str, ...]]]
    routing: Routing
    window: TimeWindow | None
    traces: dict[str, ViewTrace] = field(default_factory=dict)


class SpaceIndex:
    """Everything a query needs for one space, derived from the views and active AMUs."""

    def __init__(self, views: SpaceViews, amus: list[AMU], text_vecs: np.ndarray, affect_vecs: np.ndarray, *,
                 exact_max: int = 16384):
        self.views = views
        self.exact_max = exact_max  # leaf indexes above this size are HNSW (see `leaf_index`)
        self.amus = amus
        self.ids = [a.amu_id for a in amus]
        self.row_of = {a: i for i, a in enumerate(self.ids)}
        self.text_vecs = np.ascontiguousarray(text_vecs, dtype=np.float32)
        self.affect_vecs = np.ascontiguousarray(affect_vecs, dtype=np.float32)
        self.times = np.array([a.timestamp.timestamp() for a in amus], dtype=np.float64)
        self.has_time_words = np.array([bool(TIME_WORDS.search(a.text)) for a in amus], dtype=bool)
        self.amu_lex = LexicalIndex([amu_search_text(a) for a in amus])
        self.hierarchies: dict[str, HierarchyView] = {}
        self.leaf_keys: dict[str, list] = {}
        self.leaf_index: dict[str, object] = {}
        for name in SEMANTIC:
            self._index_tree(name)
        self._index_time()

    def _index_tree(self, name: str) -> None:
        tree = self.views.tree(name)
        alive = [int(n) for n in np.flatnonzero(tree.alive[: tree.n_nodes])]
        node_row = {n: i for i, n in enumerate(alive)}
        members = {n: [self.row_of[tree.amu_ids[r]] for r in tree.members[n] if tree.amu_ids[r] in self.row_of]
                   for n in alive if tree.leaf_flag[n]}
        node_texts = [tree.node_text(n) for n in alive]
        vecs = self.text_vecs if name == "event" else self.affect_vecs
        self.hierarchies[name] = HierarchyView(
            roots=lambda tree=tree: [tree.root], children=lambda n, tree=tree: tree.children[n],
            is_leaf=lambda n, tree=tree: tree.leaf_flag[n], centroids=lambda ns, tree=tree: tree.cent[list(ns)],
            node_row=node_row.__getitem__, members=members.__getitem__, amu_vectors=lambda rows, v=vecs: v[rows],
            amu_ids=lambda rows: [self.ids[r] for r in rows], node_lex=LexicalIndex(node_texts), amu_lex=self.amu_lex)
        leaves = [n for n in alive if tree.leaf_flag[n]]
        self.leaf_keys[name] = leaves
        self.leaf_index[name] = leaf_index(tree.cent[leaves], self.exact_max) if leaves else None

    def _index_time(self) -> None:
        forest = self.views.time
        keys = sorted(forest.nodes)
        node_row = {k: i for i, k in enumerate(keys)}
        cents = {k: forest.nodes[k].centroid() for k in keys}
        members = {k: [self.row_of[a] for a in forest.nodes[k].members if a in self.row_of]
                   for k in keys if forest.nodes[k].level == "session"}
        self.hierarchies["time"] = HierarchyView(
            roots=lambda: forest.roots, children=lambda k: forest.nodes[k].children,
            is_leaf=lambda k: forest.nodes[k].level == "session",
            centroids=lambda ks: np.stack([cents[k] for k in ks]), node_row=node_row.__getitem__,
            members=members.__getitem__, amu_vectors=lambda rows: self.text_vecs[rows],
            amu_ids=lambda rows: [self.ids[r] for r in rows],
            node_lex=LexicalIndex([forest.node_text(k) for k in keys]), amu_lex=self.amu_lex)
        sessions = [k for k in keys if forest.nodes[k].level == "session"]
        self.leaf_keys["time"] = sessions
        self.leaf_index["time"] = leaf_index(np.stack([cents[k] for k in sessions]), self.exact_max) if sessions else None

    # --- query ------------------------------------------------------------------------------
    def search(self, query: str, q_text: np.ndarray, q_affect: np.ndarray, k: int, *, beam: int, beta: float,
               routing: str = "entropy", temperature: float = 0.05, now: datetime | None = None,
               views: tuple[str, ...] = ("event", "affect", "time"), time_boost: float = 0.1,
               routing_candidates: int = 256, trace: bool = False) -> RetrievalResult:
        """Route `k` across `views` (entropy over each view's `routing_candidates` best leaves),
        beam-search each, merge, re-score and rank."""
        window = parse_time_window(query, now)
        qv = {"event": q_text, "affect": q_affect, "time": q_text}
        sims = {v: top_similarities(self.leaf_index[v], qv[v], len(self.leaf_keys[v]), routing_candidates)
                for v in views}
        plan = route(sims, k, mode=routing, temperature=temperature)
        q_nodes = {v: self.hierarchies[v].node_lex.query_ids(query) for v in views}
        q_amus = self.amu_lex.query_ids(query)
        found: dict[str, list[Scored]] = {}
        traces: dict[str, ViewTrace] = {}
        for v in views:
            h = self.hierarchies[v]
            if v == "time" and window is not None and window.kind not in ("first", "latest"):
                inside = {key for key in self.leaf_keys["time"] if self._session_overlaps(key, window)}
                if inside:
                    h = HierarchyView(**{**h.__dict__, "leaf_filter": inside.__contains__})
            bt = BeamTrace() if trace else None
            found[v] = beam_search(h, qv[v], q_nodes[v], q_amus, beam=beam, k=plan.budgets.get(v, 0), beta=beta,
                                   trace=bt) if plan.budgets.get(v, 0) else []
            if trace:
                traces[v] = ViewTrace(plan.entropies.get(v), plan.budgets.get(v, 0), plan.weights.get(v, 0.0),
                                      bt or BeamTrace(), [(s.key, s.score) for s in found[v]])
        ranked = self._merge(found, q_text, q_amus, beta, window, is_when_question(query), time_boost)
        return RetrievalResult(ranked, plan, window, traces)

    def _session_overlaps(self, key: str, window: TimeWindow) -> bool:
        node = self.views.time.nodes[key]
        return node.start < window.end and node.end >= window.start

    def _merge(self, found: dict[str, list[Scored]], q_text: np.ndarray, q_amus: np.ndarray, beta: float,
               window: TimeWindow | None, when: bool, time_boost: float) -> list[tuple[str, float, tuple[str, ...]]]:
        """Union of the views' hits on one scale: (1 - beta) * text cos + beta * BM25n over the
        union, plus `time_boost` inside a parsed window (scaled down with distance outside it)
        and half of it for AMUs with their own time words on "when" questions."""
        views_of: dict[str, list[str]] = {}
        for v, hits in found.items():
            for s in hits:
                views_of.setdefault(s.key, []).append(v)
        if not views_of:
            return []
        keys = list(views_of)
        rows = np.array([self.row_of[a] for a in keys])
        score, _ = hybrid(self.text_vecs[rows] @ q_text, self.amu_lex.scores_for(rows, q_amus), beta)
        if window is not None and window.kind not in ("first", "latest"):
            lo, hi = window.start.timestamp(), window.end.timestamp()
            t = self.times[rows]
            gap_days = np.maximum(0.0, np.maximum(lo - t, t - hi)) / 86400.0
            score = score + time_boost / (1.0 + gap_days / 7.0)
        elif window is not None:  # first / latest: order preference by time
            t = minmax(self.times[rows])
            score = score + time_boost * (t if window.kind == "latest" else 1.0 - t)
        if when:
            score = score + 0.5 * time_boost * self.has_time_words[rows]
        order = np.lexsort((np.array(keys), -score))
        return [(keys[i], float(score[i]), tuple(views_of[keys[i]])) for i in order]
