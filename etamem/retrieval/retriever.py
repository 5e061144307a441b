"""Retrieval over the three views of one space (see docs/design.md, 'Query path').

A `SpaceIndex` holds what a query needs besides the views: routing indexes over leaf centroids,
BM25 over node texts per view and over AMU texts (with their dates), the AMU rows. It is built
once (or loaded from derived files) and then kept in step with the views by every write, in
place. A query is encoded per view (text for Event and Time, affective for Affect), its budget
is routed across the views (from the similarities of its best leaves per view: exact up to
`exact_max` leaves, FAISS HNSW above), each view runs a hierarchical beam search, and the union is deduplicated (best score, every view recorded),
re-scored on one common scale and, for "when" questions or parsed time windows, boosted by
time. Beam steps score at most B * b_max candidates with a NumPy dot product.
"""
from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import numpy as np

from etamem.ingest.timeparse import format_date
from etamem.records import AMU
from etamem.retrieval.beam import BeamTrace, ContextFn, HierarchyView, Scored, beam_search, contextual
from etamem.retrieval.dialogue import DialogueScoring, is_question, named_speakers
from etamem.retrieval.index_rows import NodeTexts, Rows
from etamem.retrieval.lexical import LexicalIndex, minmax, share_of_ceiling
from etamem.retrieval.merge import calibrated_views, check_scoring, fuse_views, hand_out, view_dense, with_additions
from etamem.retrieval.options import SearchOptions
from etamem.retrieval.routing import Routing, route
from etamem.retrieval.temporal import TimeWindow, is_when_question, parse_time_window
from etamem.retrieval.vector_index import VectorIndex
from etamem.views import SpaceViews

SEMANTIC = ("event", "affect")
WIDEN = 4  # a filtered search short of units searches its beams this many times wider
VIEWS = ("event", "affect", "time")
# an AMU "has a date" for "when" questions if its own text carries a time word (cheap scan)
TIME_WORDS = re.compile(
    r"\b(yesterday|today|tonight|tomorrow|ago|last (?:night|week|month|year|weekend)|next (?:week|month|year)|"
    r"this (?:week|month|year|weekend)|monday|tuesday|wednesday|thursday|friday|saturday|sunday|"
    r"january|february|april|june|july|august|september|october|november|december|"
    r"(?:in|since) (?:19|20)\d\d|\d{1,2}(?:st|nd|rd|th)? (?:of )?(?:jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec))\b",
    re.IGNORECASE)


def _distinct(found: dict[str, list[Scored]]) -> int:
    """How many distinct units the views' lists hold."""
    return len({s.key for hits in found.values() for s in hits})


def amu_search_text(amu: AMU) -> str:
    """What BM25 sees of an AMU: speaker, text and date (the date helps "when" questions)."""
    return f"{amu.speaker}: {amu.text} {format_date(amu.timestamp)}"


def leaf_index(vectors: np.ndarray, exact_max: int | None = 16384, keys: list | None = None) -> VectorIndex:
    """A `VectorIndex` over leaf centroids ((n, d) float32 unit rows, keyed by `keys`, default
    0..n-1): exact up to `exact_max` live rows, HNSW (M 32) above, so routing cost grows about
    logarithmically with the leaves."""
    index = VectorIndex(vectors.shape[1], exact_max=exact_max)
    if vectors.shape[0]:
        index.upsert(list(range(vectors.shape[0])) if keys is None else list(keys), vectors)
    return index


def top_similarities(index: VectorIndex | None, q: np.ndarray, n: int | None = None, top: int = 256) -> np.ndarray:
    """Cosines of q to its `top` nearest indexed vectors, best first: (min(top, live),) float32."""
    if index is None or not len(index):
        return np.zeros(0, np.float32)
    return index.search(q, top)[0]


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
    """Everything a query needs for one space, kept in step with the views and the active AMUs
    by `add_amus`, `remove_amus` and `sync` (work proportional to what changed, never a rebuild):

    - AMU slots: text (n, d_t) and affective (n, d_a) float32 vectors, times, time-word flags
      and BM25 over `amu_search_text`; a deleted AMU's slot is a tombstone, slots are compacted
      when half are dead (amortised O(1) per delete);
    - per view, BM25 over node texts (`NodeTexts`) and a `VectorIndex` over leaf centroids
      (tree leaves; sessions for Time) for routing, updated for the nodes a write changed.
    Built from scratch (the constructor) it equals what the incremental updates produce.
    """

    def __init__(self, views: SpaceViews, amus: list[AMU] = (), text_vecs: np.ndarray | None = None,
                 affect_vecs: np.ndarray | None = None, *, exact_max: int | None = 16384,
                 stemmer: str = "english"):
        self._empty(views, exact_max, stemmer)
        if len(amus):
            self.add_amus(list(amus), text_vecs, affect_vecs)
        self.sync({name: ([int(n) for n in np.flatnonzero(views.tree(name).alive[: views.tree(name).n_nodes])], [])
                   for name in SEMANTIC} | {"time": (list(views.time.nodes), [])})

    def _empty(self, views: SpaceViews, exact_max: int | None, stemmer: str) -> None:
        self.views = views
        self.exact_max = exact_max  # routing indexes above this many leaves are HNSW
        d_t, d_a = views.event.dim, views.affect.dim
        self.rows = Rows(text=((d_t,), np.float32), affect=((d_a,), np.float32), time=((), np.float64),
                          time_words=((), bool), question=((), bool), alive=((), bool))
        self.ids: list[str | None] = []
        self.row_of: dict[str, int] = {}
        self.amu_of: dict[str, AMU] = {}
        self.units_of_turn: dict[str, list[str]] = {}  # source turn id -> active AMU ids citing it
        self.speakers: Counter = Counter()  # speaker -> active AMUs
        self.amu_lex = LexicalIndex([], stemmer=stemmer)  # BM25 tokens stemmed by `stemmer` (lexical.STEMMERS)
        self.node_texts = {v: NodeTexts(stemmer) for v in VIEWS}
        self.routing = {v: VectorIndex(d_a if v == "affect" else d_t, exact_max=exact_max) for v in VIEWS}
        self.time_centroids = VectorIndex(d_t, exact_max=None)  # every Time node's centroid, for beam steps
        self.hierarchies = {name: self._tree_view(name) for name in SEMANTIC}
        self.hierarchies["time"] = self._time_view()

    # --- files --------------------------------------------------------------------------------
    def save(self, directory) -> None:
        """Write the BM25 indexes, routing indexes and slot maps into `directory` (plain .npy
        and JSON; the AMU vectors are the store's and are not copied)."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        self.amu_lex.save(d / "amus")
        n = self.rows.n
        np.save(d / "amu_time.npy", np.ascontiguousarray(self.rows["time"][:n]), allow_pickle=False)
        np.save(d / "amu_time_words.npy", np.ascontiguousarray(self.rows["time_words"][:n]), allow_pickle=False)
        slots = {"ids": self.ids, "exact_max": self.exact_max}
        for v in VIEWS:
            self.node_texts[v].lex.save(d / f"nodes_{v}")
            self.routing[v].save(d / f"routing_{v}")
            slots[v] = [list(self.node_texts[v].slot), list(self.node_texts[v].slot.values())]
        (d / "slots.json").write_text(json.dumps(slots))

    @classmethod
    def load(cls, directory, views: SpaceViews, amus: list[AMU], text_vecs: np.ndarray, affect_vecs: np.ndarray,
             *, exact_max: int | None = 16384, stemmer: str = "english") -> "SpaceIndex":
        """The index `save` wrote for these views and active AMUs (mmap'd, nothing re-tokenised);
        ValueError when the files do not describe them or were tokenised with another stemmer."""
        d = Path(directory)
        slots = json.loads((d / "slots.json").read_text())
        if slots["exact_max"] != exact_max:
            raise ValueError("saved with another routing_exact_max")
        self = cls.__new__(cls)
        self._empty(views, exact_max, stemmer)
        ids = slots["ids"]
        by_id = {a.amu_id: i for i, a in enumerate(amus)}
        live = [(s, a) for s, a in enumerate(ids) if a is not None]
        if len(live) != len(amus) or any(a not in by_id for _, a in live):
            raise ValueError("saved AMU slots do not match the active AMUs")
        order = np.fromiter((by_id[a] for _, a in live), np.int64, len(live))
        where = np.fromiter((s for s, _ in live), np.int64, len(live))
        n = len(ids)
        times, words = np.load(d / "amu_time.npy"), np.load(d / "amu_time_words.npy")
        if times.shape != (n,) or words.shape != (n,):
            raise ValueError("saved AMU times do not match the slots")
        stored_times = np.fromiter((amus[i].timestamp.timestamp() for i in order.tolist()), np.float64, len(order))
        if not np.allclose(np.asarray(times, np.float64)[where], stored_times, rtol=0, atol=1e-3):
            raise ValueError("saved AMU slots do not match the stored units (their times differ)")
        alive = np.zeros(n, bool)
        alive[where] = True
        question = np.zeros(n, bool)
        question[where] = [is_question(amus[i].text) for i in order.tolist()]
        if len(live) == n and np.array_equal(order, where):  # no tombstones, store order: no gather
            text, affect = text_vecs, affect_vecs
        else:
            text, affect = np.zeros((n, views.event.dim), np.float32), np.zeros((n, views.affect.dim), np.float32)
            text[where], affect[where] = text_vecs[order], affect_vecs[order]
        self.rows.adopt(text=text, affect=affect, time=times, time_words=words, question=question, alive=alive)
        self.ids = ids
        self.row_of = {a: s for s, a in live}
        self.amu_of = {a.amu_id: a for a in amus}
        self._cite(amus)
        self.amu_lex = LexicalIndex.load(d / "amus")
        if self.amu_lex.stemmer != stemmer:
            raise ValueError(f"saved BM25 was stemmed with {self.amu_lex.stemmer!r}, not {stemmer!r}")
        if self.amu_lex.n != n:
            raise ValueError("saved BM25 over AMUs does not match the slots")
        for v in VIEWS:
            nt = self.node_texts[v]
            nt.lex = LexicalIndex.load(d / f"nodes_{v}")
            keys, node_slots = slots[v]
            nt.slot.update(zip(keys, node_slots))
            self.routing[v] = VectorIndex.load(d / f"routing_{v}")
        nodes = list(views.time.nodes)
        if nodes:
            self.time_centroids.upsert(nodes, np.stack([views.time.nodes[k].centroid() for k in nodes]))
        self._check_routing()
        self.hierarchies = {name: self._tree_view(name) for name in SEMANTIC}
        self.hierarchies["time"] = self._time_view()
        return self

    def _check_routing(self) -> None:
        """ValueError unless each view's loaded routing index holds exactly the centroids of the
        view's leaves (Time: sessions), as a rebuild would."""
        for name in VIEWS:
            if name == "time":
                leaves = [k for k, node in self.views.time.nodes.items() if node.level == "session"]
                want = self.time_centroids.rows(leaves) if leaves else np.zeros((0, self.routing[name].dim))
            else:
                tree = self.views.tree(name)
                leaves = [int(n) for n in tree.leaves()]
                want = tree.cent[leaves]
            routing = self.routing[name]
            try:
                same = len(routing) == len(leaves) and np.allclose(routing.rows(leaves), want, atol=1e-5)
            except KeyError:
                same = False
            if not same:
                raise ValueError(f"saved {name} routing index does not match the view's leaves")

    # --- AMU slots ----------------------------------------------------------------------------
    @property
    def amus(self) -> list[AMU]:
        """Active AMUs in slot order."""
        return [self.amu_of[a] for a in self.ids if a is not None]

    @property
    def text_vecs(self) -> np.ndarray:
        """(slots, d_t) float32 text vectors (rows of removed AMUs included until compaction)."""
        return self.rows["text"]

    @property
    def affect_vecs(self) -> np.ndarray:
        """(slots, d_a) float32 affective vectors."""
        return self.rows["affect"]

    def add_amus(self, amus: list[AMU], text_vecs: np.ndarray, affect_vecs: np.ndarray) -> None:
        """Append AMUs with their text (n, d_t) and affective (n, d_a) float32 vectors."""
        if not amus:
            return
        slots = self.rows.append(text=text_vecs, affect=affect_vecs,
                                 time=[a.timestamp.timestamp() for a in amus],
                                 time_words=[bool(TIME_WORDS.search(a.text)) for a in amus],
                                 question=[is_question(a.text) for a in amus], alive=True)
        lex_slots = self.amu_lex.add([amu_search_text(a) for a in amus])
        assert lex_slots[0] == slots[0], "AMU slots and BM25 slots out of step"
        for a, s in zip(amus, slots.tolist()):
            self.ids.append(a.amu_id)
            self.row_of[a.amu_id] = s
            self.amu_of[a.amu_id] = a
        self._cite(amus)

    def replace_sources(self, amus: list[AMU]) -> None:
        """Stored units whose source turns changed (a restatement joined, a mention's turn went;
        `etamem.facts.mentions`): their records and citations updated; ids not indexed are left."""
        for a in amus:
            old = self.amu_of.get(a.amu_id)
            if old is None or a.amu_id not in self.row_of:
                continue
            self._uncite(old)
            self.amu_of[a.amu_id] = a
            self._cite([a])

    def _cite(self, amus: list[AMU]) -> None:
        """Record the AMUs' source turns and speakers (`units_of_turn`, `speakers`)."""
        for a in amus:
            for t in dict.fromkeys(a.source_turn_ids):
                self.units_of_turn.setdefault(t, []).append(a.amu_id)
        self.speakers.update(a.speaker for a in amus)

    def _uncite(self, amu: AMU) -> None:
        for t in dict.fromkeys(amu.source_turn_ids):
            cited = self.units_of_turn.get(t, [])
            if amu.amu_id in cited:
                cited.remove(amu.amu_id)
            if not cited:
                self.units_of_turn.pop(t, None)
        self.speakers[amu.speaker] -= 1
        if self.speakers[amu.speaker] <= 0:
            del self.speakers[amu.speaker]

    def named_speakers(self, query: str) -> tuple[str, ...]:
        """Speakers of this space's AMUs that the query names (`dialogue.named_speakers`)."""
        return named_speakers(query, self.speakers)

    def remove_amus(self, amu_ids: list[str]) -> None:
        slots = [self.row_of.pop(a) for a in amu_ids if a in self.row_of]
        if not slots:
            return
        for s in slots:
            gone = self.amu_of.pop(self.ids[s], None)
            if gone is not None:
                self._uncite(gone)
            self.ids[s] = None
        self.rows["alive"][slots] = False
        self.amu_lex.remove(np.asarray(slots, np.int64))
        if self.rows.n > 1024 and self.amu_lex.dead_share > 0.5:
            keep = np.flatnonzero(self.rows["alive"][: self.rows.n])
            self.rows.keep(keep)
            self.amu_lex.compact(keep)
            self.ids = [self.ids[i] for i in keep.tolist()]
            self.row_of = {a: i for i, a in enumerate(self.ids)}

    def set_device(self, device: str, min_rows: int = 20_000) -> None:
        """Where the routing and Time-centroid indexes search in exact mode (`VectorIndex.set_device`;
        above `exact_max` leaves routing is an HNSW graph on the CPU)."""
        for index in (*self.routing.values(), self.time_centroids):
            index.set_device(device, min_rows)

    # --- nodes ---------------------------------------------------------------------------------
    def sync(self, changes: dict[str, tuple[list, list]]) -> None:
        """Bring node texts and routing entries up to date for (changed, removed) node ids per
        view (as returned by `SpaceViews.pop_changes`)."""
        for name in SEMANTIC:
            changed, removed = changes.get(name, ([], []))
            tree = self.views.tree(name)
            live = [int(n) for n in changed if tree.alive[int(n)]]
            gone = [int(n) for n in removed] + [int(n) for n in changed if not tree.alive[int(n)]]
            self._sync_nodes(name, live, gone, [tree.node_text(n) for n in live],
                             [n for n in live if tree.leaf_flag[n]], lambda ks, t=tree: t.cent[ks])
        changed, removed = changes.get("time", ([], []))
        forest = self.views.time
        live = [k for k in changed if k in forest.nodes]
        gone = list(removed) + [k for k in changed if k not in forest.nodes]
        cents = np.stack([forest.nodes[k].centroid() for k in live]) if live else None
        self.time_centroids.remove(gone)
        if live:
            self.time_centroids.upsert(live, cents)
        self._sync_nodes("time", live, gone, [forest.node_text(k) for k in live],
                         [k for k in live if forest.nodes[k].level == "session"], self.time_centroids.rows)

    def _sync_nodes(self, name: str, live: list, gone: list, texts: list[str], leaves: list, centroids) -> None:
        self.node_texts[name].drop(gone)
        self.node_texts[name].set(live, texts)
        leaf_set = set(leaves)
        self.routing[name].remove(gone + [k for k in live if k not in leaf_set])
        if leaves:
            self.routing[name].upsert(leaves, np.asarray(centroids(leaves), np.float32))

    def _members(self, amu_ids) -> list[int]:
        row_of = self.row_of
        return [row_of[a] for a in amu_ids if a in row_of]

    def _tree_view(self, name: str) -> HierarchyView:
        tree, nt = self.views.tree(name), self.node_texts[name]
        col = "text" if name == "event" else "affect"
        return HierarchyView(
            roots=lambda: [tree.root], children=lambda n: tree.children[n], is_leaf=lambda n: tree.leaf_flag[n],
            centroids=lambda ns: tree.cent[list(ns)], node_row=lambda n: nt.slot[n],
            members=lambda n: self._members([tree.amu_ids[r] for r in tree.members[n]]),
            amu_vectors=lambda rows: self.rows[col][rows], amu_ids=lambda rows: [self.ids[r] for r in rows],
            node_lex=nt.lex, amu_lex=self.amu_lex)

    def _time_view(self) -> HierarchyView:
        forest, nt = self.views.time, self.node_texts["time"]
        return HierarchyView(
            roots=lambda: forest.roots, children=lambda k: forest.nodes[k].children,
            is_leaf=lambda k: forest.nodes[k].level == "session",
            centroids=self.time_centroids.rows, node_row=lambda k: nt.slot[k],
            members=lambda k: self._members(forest.nodes[k].members), amu_vectors=lambda rows: self.rows["text"][rows],
            amu_ids=lambda rows: [self.ids[r] for r in rows], node_lex=nt.lex, amu_lex=self.amu_lex)

    # --- query ------------------------------------------------------------------------------
    def search(self, query: str, q_text: np.ndarray, q_affect: np.ndarray, k: int,
               options: SearchOptions | None = None, *, now: datetime | None = None, trace: bool = False,
               context: ContextFn | None = None, dialogue: DialogueScoring | None = None,
               allowed: np.ndarray | None = None, complete: int = 0) -> RetrievalResult:
        """Route `k` across the options' `views` (entropy over each view's `routing_candidates`
        best leaves), beam-search each, merge, re-score and rank (`options`: the knobs,
        `etamem.retrieval.options.SearchOptions`; None: its defaults). `context` / `context_share`: AMUs are scored
        with their source turns in context (`beam.contextual`), in the beams and the merge.
        `dialogue`: the replies to the questions a view found join that view's hits, and the
        merge applies its question penalty and speaker boost (`dialogue.DialogueScoring`).
        `flat`: the best `flat` units of one exact cosine search over every active unit join
        the candidates beside the views' beams (view "flat" when no view found them), so what the hierarchy
        pruned can still be ranked (exact up to `flat_exact_max` units, see `flat_candidates`). `lexical`: how BM25 is put on [0, 1] — "minmax" over the
        candidates compared, or "ceiling" (`lexical.share_of_ceiling`: the share of the query's
        BM25 ceiling in each index, so a weak best match stays weak).

        `allowed`: a bool mask over the unit slots (a filter, `etamem.filters`): only those units
        are candidates (beam members, flat candidates, replies). When the views then find fewer
        than `complete` units, the beams are searched again `WIDEN` times wider, and if that is
        still short the best allowed units of an exact scan (`exact_hybrid`) join the candidates,
        so `complete` units come back whenever that many are allowed.

        `merge_scoring`: how the merge scores the union ("text" | "view" | "rrf", with `rrf_k`
        the fusion constant of "rrf"; `etamem.retrieval.merge`)."""
        o = options or SearchOptions()
        views, flat, beta = o.views, o.flat, o.beta
        check_scoring(o.merge_scoring)
        window = parse_time_window(query, now)
        qv = {"event": q_text, "affect": q_affect, "time": q_text}
        sims = {v: top_similarities(self.routing[v], qv[v], top=o.routing_candidates) for v in views}
        plan = route(sims, k, mode=o.routing, temperature=o.temperature)
        q_nodes = {v: self.hierarchies[v].node_lex.query_ids(query) for v in views}
        q_amus = self.amu_lex.query_ids(query)
        norms = {v: self.lexical_normaliser(o.lexical, self.hierarchies[v].node_lex, q_nodes[v]) for v in views}
        amu_norm = self.lexical_normaliser(o.lexical, self.amu_lex, q_amus)
        forest = self.views.time
        traces: dict[str, ViewTrace] = {}

        def beams(width: int) -> dict[str, list[Scored]]:
            found: dict[str, list[Scored]] = {}
            for v in views:
                h = self.hierarchies[v]
                if v == "time" and window is not None and window.kind not in ("first", "latest"):
                    inside = {key for key, node in forest.nodes.items()
                              if node.level == "session" and node.start < window.end and node.end >= window.start}
                    if inside:
                        h = HierarchyView(**{**h.__dict__, "leaf_filter": inside.__contains__})
                if allowed is not None:  # a filter: only the allowed members of a leaf are scored
                    h = HierarchyView(**{**h.__dict__, "members": lambda n, m=h.members: [
                        r for r in m(n) if allowed[r]]})
                bt = BeamTrace() if trace else None
                found[v] = beam_search(h, qv[v], q_nodes[v], q_amus, beam=width, k=plan.budgets.get(v, 0),
                                       beta=beta, trace=bt, context=context, context_share=o.context_share,
                                       node_norm=norms[v], amu_norm=amu_norm, context_rows=o.context_rows) \
                    if plan.budgets.get(v, 0) else []
                if trace:
                    traces[v] = ViewTrace(plan.entropies.get(v), plan.budgets.get(v, 0), plan.weights.get(v, 0.0),
                                          bt or BeamTrace(), [(s.key, s.score) for s in found[v]])
            if flat > 0:
                found["flat"] = self.flat_candidates(q_text, flat, o.flat_exact_max, allowed=allowed)
            found = self.with_replies(found, dialogue)
            if allowed is not None:  # replies of allowed units may not be allowed
                found = {v: [s for s in hits if allowed[self.row_of[s.key]]] for v, hits in found.items()}
            return found

        found = beams(o.beam)
        if allowed is not None and complete > 0 and _distinct(found) < complete:
            found = beams(o.beam * WIDEN)  # widen: the allowed units may sit in leaves the beam pruned
            if _distinct(found) < complete:  # complete from an exact scan over the allowed units
                have = {s.key for hits in found.values() for s in hits}
                found["flat"] = found.get("flat", []) + [
                    s for s in self.exact_hybrid(q_text, q_amus, complete, allowed, beta) if s.key not in have]
        ranked = self.merge_found(found, q_text, q_amus, beta, window, is_when_question(query), o.time_boost, context,
                             o.context_share, dialogue, amu_norm, q_affect=q_affect, scoring=o.merge_scoring,
                             rrf_k=o.rrf_k)
        return RetrievalResult(ranked, plan, window, traces)

    @staticmethod
    def lexical_normaliser(lexical: str, lex: LexicalIndex, q_ids: np.ndarray):
        """The BM25 normaliser `lexical` names for this index and query."""
        if lexical == "minmax":
            return minmax
        if lexical != "ceiling":
            raise ValueError(f"lexical: expected 'minmax' or 'ceiling', got {lexical!r}")
        ceiling = lex.ceiling(q_ids)
        return lambda raw: share_of_ceiling(raw, ceiling)

    def flat_candidates(self, q_text: np.ndarray, n: int, exact_max: int = 20_000, leaves: int = 64,
                        allowed: np.ndarray | None = None) -> list[Scored]:
        """The `n` units nearest the query by cosine (q_text: (d_t,) float32 unit), best first:
        `exact_candidates` over every active unit up to `exact_max` of them; above, the same
        product over the members of the Event view's `leaves` best leaves and of the Time view's
        best sessions with at most 256 units, by centroid (their routing indexes: exact or HNSW),
        so the cost stays about logarithmic in the units (non-neutral units in big sessions are
        then left to the views' beams). `allowed`: a bool mask over slots; only those units."""
        if allowed is not None:
            count = int(allowed[: self.rows.n].sum())
            if count <= exact_max:
                return self.exact_candidates(q_text, n, np.flatnonzero(allowed[: self.rows.n]))
        if allowed is None and len(self.row_of) <= exact_max:
            return self.exact_candidates(q_text, n)
        rows: set[int] = set()
        tree = self.views.event
        for leaf in self.routing["event"].search(q_text, leaves)[1] if len(self.routing["event"]) else []:
            rows.update(self._members([tree.amu_ids[r] for r in tree.members[int(leaf)]]))
        forest = self.views.time
        for key in self.routing["time"].search(q_text, leaves)[1] if len(self.routing["time"]) else []:
            if len(forest.nodes[key].members) <= 256:  # a big session is the Event leaves' to cover
                rows.update(self._members(forest.nodes[key].members))
        if allowed is not None:
            rows = {r for r in rows if allowed[r]}
        return self.exact_candidates(q_text, n, np.fromiter(sorted(rows), np.int64, len(rows)))

    def exact_hybrid(self, q_text: np.ndarray, q_amus: np.ndarray, n: int, allowed: np.ndarray,
                     beta: float) -> list[Scored]:
        """The `n` best allowed units (bool mask over slots) by an exact scan, scored as the flat
        path scores (`flat.FlatHybridIndex`): (1 - beta) * cos + beta * BM25 / the best BM25 among
        them; best first, ties by unit id. O(allowed * d) per call."""
        rows = np.flatnonzero(allowed[: self.rows.n] & self.rows["alive"][: self.rows.n])
        if n <= 0 or not len(rows):
            return []
        cos = self.rows["text"][rows] @ q_text
        bm = np.asarray(self.amu_lex.scores_for(rows, q_amus), np.float32) if beta > 0 else np.zeros(len(rows))
        top = float(bm.max()) if len(bm) else 0.0
        bm = bm / top if top > 0 else np.zeros_like(bm)
        score = (1.0 - beta) * cos + beta * bm
        ids = [self.ids[r] for r in rows.tolist()]
        order = np.lexsort((np.array(ids), -score))[:n]
        return [Scored(ids[i], float(score[i]), float(cos[i]), float(bm[i])) for i in order.tolist()]

    def exact_candidates(self, q_text: np.ndarray, n: int, rows: np.ndarray | None = None) -> list[Scored]:
        """The `n` active units nearest the query by exact cosine over their text vectors
        (q_text: (d_t,) float32 unit), best first, ties by unit id (the same whatever the slot
        layout); among `rows` (slots) only when given. O(units * d) per query."""
        m = self.rows.n
        if n <= 0 or not m:
            return []
        rows = np.arange(m) if rows is None else np.asarray(rows, np.int64)
        cos = self.rows["text"][rows] @ q_text if len(rows) < m else self.rows["text"][:m] @ q_text
        alive = self.rows["alive"][rows]
        cos = np.where(alive, cos, -np.inf)
        n = min(n, int(alive.sum()))
        if not n:
            return []
        kth = -np.partition(-cos, n - 1)[n - 1]
        top = np.flatnonzero(cos >= kth)  # every unit tied with the n-th too, so ties go by id
        ids = [self.ids[r] for r in rows[top].tolist()]
        order = np.lexsort((np.array(ids), -cos[top]))[:n]
        return [Scored(ids[i], float(cos[top[i]]), float(cos[top[i]]), 0.0) for i in order.tolist()]

    def with_replies(self, found: dict[str, list[Scored]], dialogue: DialogueScoring | None
                     ) -> dict[str, list[Scored]]:
        """Each view's hits followed by unscored entries for the AMUs of the replies to the
        questions among them (`dialogue.replies`; the merge scores them); `found` itself when
        `dialogue` follows no replies."""
        if dialogue is None or dialogue.replies is None:
            return found
        return {v: hits + self._replies(hits, dialogue.replies) for v, hits in found.items()}

    def _replies(self, hits: list[Scored], replies) -> list[Scored]:
        """Unscored entries for the AMUs of the replies to the questions among `hits` that are
        not hits already."""
        question = self.rows["question"]
        asked = [s.key for s in hits if question[self.row_of[s.key]]]
        if not asked:
            return []
        have = {s.key for s in hits}
        return [Scored(a, 0.0, 0.0, 0.0) for a in dict.fromkeys(replies(asked)) if a not in have and a in self.row_of]

    def merge_found(self, found: dict[str, list[Scored]], q_text: np.ndarray, q_amus: np.ndarray, beta: float,
                    window: TimeWindow | None, when: bool, time_boost: float, context: ContextFn | None = None,
                    context_share: float = 0.0, dialogue: DialogueScoring | None = None, norm=minmax, *,
                    q_affect: np.ndarray | None = None, scoring: str = "text", rrf_k: float = 10,
                    keyed_by: dict[str, str] | None = None) -> list[tuple[str, float, tuple[str, ...]]]:
        """Union of the views' hits on one scale: (1 - beta) * dense + beta * BM25n over the
        union (with the source turns' context, `beam.contextual`), plus `time_boost` inside a
        parsed window (scaled down with distance outside it) and half of it for AMUs with their
        own time words on "when" questions; with `dialogue`, minus its question penalty for AMUs
        that are questions and plus its speaker boost for AMUs of the one speaker the query names (and
        its self boost for those whose text names that speaker).

        `scoring` (`merge.MERGE_SCORING`): dense = text cosine ("text"), or the calibrated
        similarity of the view that found the unit ("view"), or the views' rankings fused ("rrf");
        see `etamem.retrieval.merge`. A view's similarity is the cosine of the unit's
        `keyed_by[view]` vectors ("text" or "affect"; default: "affect" for the Affect view,
        "text" for the others) with the query's (`q_affect` for "affect")."""
        check_scoring(scoring)
        views_of: dict[str, list[str]] = {}
        for v, hits in found.items():
            if v == "flat":
                continue
            for s in hits:
                views_of.setdefault(s.key, []).append(v)
        for s in found.get("flat", ()):  # "flat": found by the exact search only
            views_of.setdefault(s.key, ["flat"])
        if not views_of:
            return []
        keys = list(views_of)
        rows = np.array([self.row_of[a] for a in keys])
        text_cos = self.rows["text"][rows] @ q_text
        bm_raw = self.amu_lex.scores_for(rows, q_amus)

        def scored(dense: np.ndarray) -> np.ndarray:
            base, _ = contextual(dense, bm_raw, keys, context, context_share, beta, norm)
            return with_additions(base, self.rows["time"][rows], self.rows["time_words"][rows],
                                  self.rows["question"][rows], [self.amu_of[a] for a in keys], window, when,
                                  time_boost, dialogue)
        if scoring == "text":
            score = scored(text_cos)
        else:
            names, calibrated = self._calibrated(found, keys, rows, text_cos, q_text, q_affect, keyed_by)
            score = scored(view_dense(calibrated, text_cos).astype(text_cos.dtype))
            if scoring == "rrf" and len(names):
                per_view = np.stack([scored(np.nan_to_num(c, nan=0.0).astype(text_cos.dtype)) for c in calibrated])
                tiebreak = np.argsort(np.argsort(np.array(keys)))
                order, score = hand_out(fuse_views(per_view, ~np.isnan(calibrated), tiebreak, rrf_k), score, tiebreak)
                return [(keys[i], float(score[i]), tuple(views_of[keys[i]])) for i in order]
        order = np.lexsort((np.array(keys), -score))
        return [(keys[i], float(score[i]), tuple(views_of[keys[i]])) for i in order]

    def _calibrated(self, found: dict[str, list[Scored]], keys: list[str], rows: np.ndarray, text_cos: np.ndarray,
                    q_text: np.ndarray, q_affect: np.ndarray | None, keyed_by: dict[str, str] | None
                    ) -> tuple[list[str], np.ndarray]:
        """(views, (V, n) calibrated similarities, NaN where the view did not find the unit) of the
        views with hits, each similarity the cosine of the column the view is keyed by."""
        keyed = {"affect": "affect"} | dict(keyed_by or {})
        at = {a: i for i, a in enumerate(keys)}
        names = [v for v, hits in found.items() if hits]
        sims = np.zeros((len(names), len(keys)))
        members = np.zeros((len(names), len(keys)), bool)
        for j, v in enumerate(names):
            members[j, [at[s.key] for s in found[v]]] = True
            column = keyed.get(v, "text")
            if column == "text":
                sims[j] = text_cos
            else:
                if q_affect is None:
                    raise ValueError(f"merge scoring: the {v} view is keyed by {column} vectors; pass q_affect")
                sims[j] = self.rows[column][rows] @ q_affect
        return names, calibrated_views(sims, text_cos, members)
