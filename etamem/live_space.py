"""A space held live in memory (DESIGN §11): its views, its search indexes over units, nodes
and raw turns, and its locks, kept in step with the store by every write.

Writes change the views and every index in place (work proportional to the batch, never a
rebuild) under the space's write lock, together with the store commit; searches hold the read
lock. Writers of the space are serialised by `writer`, held by `Memory` across the whole
write, so model inference and LLM calls never hold the read/write lock.
"""
from __future__ import annotations

import logging
import threading
from typing import Callable

import numpy as np

from . import derived
from .locks import RWLock
from .retrieval import SpaceIndex, TurnIndex, turn_text
from .types import AMU, Turn
from .views import SpaceViews

log = logging.getLogger(__name__)


class LiveSpace:
    """Views, `SpaceIndex` and `TurnIndex` of one space with its locks.

    `broken` is set when a write failed half way (memory and store may disagree): the owner then
    drops this object and opens the space again from the store.
    """

    def __init__(self, name: str, views: SpaceViews, index: SpaceIndex, turns: TurnIndex, generation: int = 0,
                 saved: bool = False):
        self.name, self.views, self.index, self.turns = name, views, index, turns
        self.writer = threading.Lock()
        self.rw = RWLock()
        self.broken = False
        self.generation = generation  # the store generation this state reflects
        self.saved_generation = generation if saved else None  # the one the derived files hold

    @classmethod
    def open(cls, store, space: str, config, text_dim: int, affect_dim: int,
             encode: Callable[[list[str]], np.ndarray], root=None) -> "LiveSpace":
        """Load the views, then the indexes: from the derived files under `root` when they hold
        this generation of the space, else built from the stored vectors (`encode` is used once
        for turns stored before turn vectors were, format 2 stores, and the vectors kept)."""
        amus = store.amus(space)
        ids = [a.amu_id for a in amus]
        if ids:
            tv, av = store.amu_vector_pair(space, ids)
        else:
            tv, av = np.zeros((0, text_dim), np.float32), np.zeros((0, affect_dim), np.float32)
        views = SpaceViews.load(store, space, config, amus, tv, av, text_dim, affect_dim)
        payload, _ = views.pop_changes()
        if any(p[1] or p[2] for p in payload):  # load repaired the views (changed or removed nodes)
            store.save_views(space, payload)
        generation = store.generation(space)
        turns = store.turns(space, extracted_only=True)
        found = None if root is None else derived.find(root, space, generation)
        if found is not None:
            try:
                index = SpaceIndex.load(found / "index", views, amus, tv, av, exact_max=config.routing_exact_max)
                return cls(space, views, index, TurnIndex.load(found / "turns", turns), generation, saved=True)
            except Exception as exc:  # noqa: BLE001 - a cache: whatever is wrong with it, rebuild
                log.warning("space %s: derived files in %s not usable (%s); rebuilding the indexes", space, found, exc)
        index = SpaceIndex(views, amus, tv, av, exact_max=config.routing_exact_max)
        vecs = store.turn_vectors(space)
        missing = [t for t in turns if t.turn_id not in vecs]
        if missing:
            log.info("space %s: encoding %d raw turns stored without vectors (once)", space, len(missing))
            new = encode([turn_text(t) for t in missing])
            store.put_turn_vectors(space, [t.turn_id for t in missing], new)
            vecs.update(zip((t.turn_id for t in missing), new))
        matrix = np.stack([vecs[t.turn_id] for t in turns]) if turns else np.zeros((0, text_dim), np.float32)
        return cls(space, views, index, TurnIndex(text_dim, turns, matrix), generation)

    def save_derived(self, root, store) -> bool:
        """Write the indexes as derived files if the store is still at the generation this state
        reflects and they are not saved yet (the caller holds `writer`). True if written."""
        if self.broken or self.saved_generation == self.generation or store.generation(self.name) != self.generation:
            return False
        with self.rw.write():  # saving merges BM25 postings in place
            derived.save(root, self.name, self.generation, self.index, self.turns)
        self.saved_generation = self.generation
        return True

    def add_units(self, store, turns: list[Turn], turn_vecs: np.ndarray, amus: list[AMU], text_vecs: np.ndarray,
                  affect_vecs: np.ndarray) -> None:
        """Insert the units of `turns` into the views, commit units, turn vectors and changed view
        rows in one store transaction, then update the indexes (the caller holds `writer`)."""
        with self.rw.write():
            try:
                self.views.add(amus, text_vecs, affect_vecs)
                payload, changes = self.views.pop_changes()
                store.write_amus(self.name, amus, text_vecs, affect_vecs, [t.turn_id for t in turns],
                                 dims={"text_dim": self.views.event.dim, "affect_dim": self.views.affect.dim},
                                 turn_vecs=turn_vecs, views=payload)
                self.index.add_amus(amus, text_vecs, affect_vecs)
                self.index.sync(changes)
                self.turns.add(turns, turn_vecs)
            except BaseException:
                self.broken = True
                raise

    def remove_unit(self, store, amu_id: str) -> int:
        """Delete one unit from the store, the views and the indexes; 1 if it was active."""
        with self.rw.write():
            try:
                self.views.remove(amu_id)
                payload, changes = self.views.pop_changes()
                removed = int(store.delete_amu(self.name, amu_id, views=payload))
                self.index.remove_amus([amu_id])
                self.index.sync(changes)
            except BaseException:
                self.broken = True
                raise
        return removed

    def maintain(self, store, summariser=None) -> dict:
        """Session-end maintenance of the views, saved, with the indexes updated (the caller
        holds `writer`). The structural pass runs under the write lock with extractive
        summaries and is committed; an LLM `summariser` is then called for the refreshed nodes
        outside the lock (deepest first, a parent seeing its children's new summaries) and the
        summaries are committed in a second short write."""
        with self.rw.write():
            try:
                report = self.views.maintain(None)
                self.index.sync(self.views.save(store, self.name))
            except BaseException:
                self.broken = True
                raise
        if summariser is None:
            return report
        texts: dict = {}
        for view, node, children, reps in self.views.summary_requests():  # only readers run meanwhile
            child_texts = [texts.get((view, c)) or self.views.node_text(view, c) for c in children]
            texts[(view, node)] = summariser(child_texts, reps)
        if texts:
            with self.rw.write():
                try:
                    self.views.set_summaries(texts)
                    self.index.sync(self.views.save(store, self.name))
                except BaseException:
                    self.broken = True
                    raise
        return report
