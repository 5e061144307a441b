"""A space held live in memory (see docs/design.md, 'Invariants'): its views, its search indexes over units, nodes
and raw turns, and its locks, kept in step with the store by every write.

Writes change the views and every index in place (work proportional to the batch, never a
rebuild) under the space's write lock, together with the store commit; searches hold the read
lock. Writers of the space are serialised by the owner (`Memory` holds a mutex and a file
lock across the whole write), so model inference and LLM calls never hold the read/write lock.
"""
from __future__ import annotations

import logging
from typing import Callable

import numpy as np

from etamem.live import change_log, derived
from etamem.live import snapshot as space_snapshot
from etamem.live.residency import array_bytes
from etamem.records import AMU, Turn
from etamem.retrieval import SpaceIndex, TurnIndex, turn_text
from etamem.store.locks import RWLock
from etamem.views import SpaceViews

log = logging.getLogger(__name__)


def _same_vectors(index: TurnIndex, turns: list[Turn], vecs: dict) -> None:
    """ValueError unless the loaded raw-turn index holds the store's vector of every turn in
    the turn's slot (one pass over vectors the open reads anyway)."""
    have = [t.turn_id for t in turns if t.turn_id in vecs]
    if have:
        saved = index.index.vectors([index.slot_of[t] for t in have])
        if not np.allclose(saved, np.stack([vecs[t] for t in have]), atol=1e-5):
            raise ValueError("saved raw-turn vectors do not match the stored ones")


class _Sample:
    """A random sample of a space's units and extracted turns as the store holds them, read in the
    open's snapshot of the store, to compare with the derived snapshot (`check`) and the saved
    raw-turn index (`turn_vecs`, for `_same_vectors`): files rewritten with a matching checksum
    (by someone who can write the database) but wrong rows are caught with high probability when
    more than a few rows are wrong; a lone wrong row may pass until a search fails on it, which
    rebuilds (`etamem.engine`)."""

    SIZE = 48  # units and turns each: ~10 ms of reads by key at 100k units

    def __init__(self, amus: list[AMU], text: np.ndarray, affect: np.ndarray, turns: list[Turn], turn_vecs: dict):
        self.amus, self.text, self.affect, self.turns, self.turn_vecs = amus, text, affect, turns, turn_vecs

    @classmethod
    def read(cls, store, space: str, amu_ids: list[str], turn_ids: list[str]) -> "_Sample":
        rng = np.random.default_rng()
        pick = lambda ids: [ids[i] for i in sorted(rng.choice(len(ids), min(cls.SIZE, len(ids)), replace=False))]
        some_units, some_turns = pick(amu_ids), pick(turn_ids)
        amus = store.amus(space, amu_ids=some_units)
        text, affect = store.amu_vector_pair(space, [a.amu_id for a in amus]) if amus else (None, None)
        return cls(amus, text, affect, store.turns(space, turn_ids=some_turns), store.turn_vectors(space, some_turns))

    def check(self, snap) -> None:
        """ValueError unless the snapshot's rows and unit vectors equal the sampled store rows."""
        if not self.amus and not self.turns:
            return
        at = {a.amu_id: i for i, a in enumerate(snap.amus)}
        rows = [at.get(a.amu_id) for a in self.amus]
        if any(r is None or snap.amus[r] != a for r, a in zip(rows, self.amus)):
            raise ValueError("snapshot units differ from the store's")
        if rows and not (np.allclose(snap.text_vecs[rows], self.text, atol=1e-5)
                         and np.allclose(snap.affect_vecs[rows], self.affect, atol=1e-5)):
            raise ValueError("snapshot unit vectors differ from the store's")
        by_id = {t.turn_id: t for t in snap.turns}
        if any(by_id.get(t.turn_id) != t for t in self.turns):
            raise ValueError("snapshot turns differ from the store's")


class LiveSpace:
    """Views, `SpaceIndex` and `TurnIndex` of one space with its locks.

    `broken` is set when a write failed half way (memory and store may disagree): the owner then
    drops this object and opens the space again from the store. `stamp` is the store's (epoch,
    generation) the state reflects (`SqlStore.stamp`), updated under the write lock right after
    each commit, so a reader holding the read lock that finds another stamp in the store knows
    another process wrote, or deleted the space (a new epoch: never the same stamp again).
    `from_files`: the indexes were loaded from derived files and no search has used them yet.
    `unsaved_repair`: `open` repaired the views in memory but was not allowed to write (a
    reader); a writer must open the space again before writing.
    """

    def __init__(self, name: str, views: SpaceViews, index: SpaceIndex, turns: TurnIndex,
                 stamp: tuple[str, int] = ("", 0), saved: bool = False):
        self.name, self.views, self.index, self.turns = name, views, index, turns
        self.rw = RWLock()
        self.broken = False
        self.stamp = stamp  # the store's (epoch, generation) this state reflects
        self.saved_stamp = stamp if saved else None  # the one the derived files hold
        self.from_files = saved
        self.unsaved_repair = False
        self._measured: tuple[tuple[str, int], int] | None = None  # (stamp, nbytes) of the last estimate

    @property
    def generation(self) -> int:
        return self.stamp[1]

    @property
    def saved_generation(self) -> int | None:
        return None if self.saved_stamp is None else self.saved_stamp[1]

    def in_use(self) -> bool:
        """A search or write holds (or waits for) this state's lock right now."""
        return self.rw.busy()

    def units_of_turns(self, turn_ids: list[str]) -> dict[str, list[str]]:
        """turn id -> ids of the live units drawn from it (read under the state's lock)."""
        with self.rw.read():
            return {t: list(self.index.units_of_turn.get(t, ())) for t in turn_ids}

    def nbytes(self) -> int:
        """Estimated bytes of the arrays this state holds (views, indexes, vectors), measured again
        only after its stamp moved (`etamem.live.residency.array_bytes`). Taken without the lock (a
        caller may hold another space's read lock): a write meanwhile makes it a rougher estimate."""
        stamp, measured = self.stamp, self._measured
        if measured is None or measured[0] != stamp:
            try:
                measured = (stamp, array_bytes((self.views, self.index, self.turns)))
            except RuntimeError:  # a container changed size under the walk: keep the last estimate
                return 0 if measured is None else measured[1]
            self._measured = measured
        return measured[1]

    def _follow(self, store) -> None:
        """Take the store's stamp after a commit of this state's own write."""
        self.stamp = store.stamp(self.name)

    @classmethod
    def open(cls, store, space: str, config, text_dim: int, affect_dim: int,
             encode: Callable[[list[str]], np.ndarray], root=None, *, repair: bool = True) -> "LiveSpace":
        """Open the space from the snapshot in the derived files under `root` when they hold
        this generation of the space (`_from_snapshot`: no unit, vector, view or turn rows read).
        Else load the views from the store, then the indexes: from the derived files when they
        hold this generation, else built from the stored vectors (`encode` is used once
        for turns stored before turn vectors were, format 2 stores). Everything is read in one
        snapshot of the store. Views that fail validation are rebuilt from the units; with
        `repair` (the caller holds the space's write locks) the repaired views and any new turn
        vectors are written back, else they stay in memory and `unsaved_repair` is set."""
        fast = None if root is None else cls._from_snapshot(store, space, config, text_dim, affect_dim, root)
        if fast is not None:
            return fast.on_device(config)
        with store.snapshot():
            stamp = store.stamp(space)
            recorded = store.get_space_meta(space, derived.RECORD_KEY) if root is not None else None
            amus = store.amus(space)
            ids = [a.amu_id for a in amus]
            if ids:
                tv, av = store.amu_vector_pair(space, ids)
            else:
                tv, av = np.zeros((0, text_dim), np.float32), np.zeros((0, affect_dim), np.float32)
            views = SpaceViews.load(store, space, config, amus, tv, av, text_dim, affect_dim)
            turns = store.turns(space, extracted_only=True)
            vecs = store.turn_vectors(space)
        payload, _ = views.pop_changes()
        repaired = any(p[1] or p[2] for p in payload)  # load repaired the views (changed or removed nodes)
        if repaired and repair:
            store.save_views(space, payload)
            stamp = store.stamp(space)
        found = None if root is None or repaired else derived.find(root, space, stamp, recorded, store.name_salt())
        live = cls._indexes(store, space, config, views, amus, tv, av, turns, vecs, text_dim, encode,
                            found, stamp, repair)  # (repaired: the derived files describe the old views)
        live.unsaved_repair = repaired and not repair
        if live.from_files:  # the indexes were current but no snapshot was: the next save writes one
            live.saved_stamp = None
        return live.on_device(config)

    def on_device(self, config) -> "LiveSpace":
        """Place the large exact indexes (raw turns, routing) per `config.index_device` (FAISS-GPU
        when "auto" finds a GPU; `etamem.retrieval.gpu_index`); returns self."""
        self.turns.set_device(config.index_device, config.gpu_min_rows)
        self.index.set_device(config.index_device, config.gpu_min_rows)
        return self

    @classmethod
    def _from_snapshot(cls, store, space, config, text_dim: int, affect_dim: int, root) -> "LiveSpace | None":
        """The space opened from the snapshot in its current derived directory under `root`
        (`etamem.live.snapshot`) without reading its unit rows, vector blobs or turns from the
        store: in the snapshot of the store that reads the stamp, only their ids (for their order),
        the view rows (validated as always) and a random sample of units, turns and vectors, which
        must equal the snapshot's (`_check_sample`). None when there is none, with a warning when
        it was there but not usable (the caller opens from the store). The snapshot's plain files
        are parsed while a thread hashes the directory; the indexes are loaded once it matched."""
        with store.snapshot():  # the store (and its lock) only for what is read here
            stamp = store.stamp(space)
            recorded = store.get_space_meta(space, derived.RECORD_KEY)
            found = derived.find(root, space, stamp, recorded, store.name_salt(), verify=False)
            directory = None if found is None else found / space_snapshot.DIRNAME
            if directory is None or not space_snapshot.exists(directory):
                return None
            ids = store.active_amu_ids(space), store.extracted_turn_ids(space)
            saved_views = store.load_views(space)
            sample = _Sample.read(store, space, *ids)
        check = derived.Verifier(found, space, recorded)  # hashing meanwhile
        try:
            with space_snapshot.gc_paused():
                snap = space_snapshot.read(directory, *ids)
                if snap.text_vecs.shape[1:] != (text_dim,) or snap.affect_vecs.shape[1:] != (affect_dim,):
                    raise ValueError("snapshot vectors of another dimension")
                sample.check(snap)
                views = SpaceViews.load(store, space, config, snap.amus, snap.text_vecs, snap.affect_vecs, text_dim,
                                        affect_dim, saved=saved_views)
                payload, _ = views.pop_changes()
                if any(p[1] or p[2] for p in payload):
                    raise ValueError("its views needed a repair")
                if not check.ok():  # warned: damaged, nothing parsed is kept
                    return None
                index = SpaceIndex.load(found / "index", views, snap.amus, snap.text_vecs, snap.affect_vecs,
                                        exact_max=config.routing_exact_max, stemmer=config.bm25_stemmer)
                turn_index = TurnIndex.load(found / "turns", snap.turns, stemmer=config.bm25_stemmer,
                                            exact_max=config.raw_exact_max or None)
                _same_vectors(turn_index, snap.turns, sample.turn_vecs)
        except Exception as exc:  # noqa: BLE001 - a cache: whatever is wrong with it, open from the store
            if check.ok():  # (else warned as damaged)
                log.warning("space %s: snapshot in %s not usable (%s: %s); opening from the store", space,
                            directory, type(exc).__name__, exc)
            return None
        return cls(space, views, index, turn_index, stamp, saved=True)

    @classmethod
    def _indexes(cls, store, space, config, views, amus, tv, av, turns, vecs, text_dim, encode, found, stamp,
                 repair) -> "LiveSpace":
        if found is not None:
            try:
                index = SpaceIndex.load(found / "index", views, amus, tv, av, exact_max=config.routing_exact_max,
                                        stemmer=config.bm25_stemmer)
                turn_index = TurnIndex.load(found / "turns", turns, stemmer=config.bm25_stemmer,
                                             exact_max=config.raw_exact_max or None)
                _same_vectors(turn_index, turns, vecs)
                return cls(space, views, index, turn_index, stamp, saved=True)
            except Exception as exc:  # noqa: BLE001 - a cache: whatever is wrong with it, rebuild
                log.warning("space %s: derived files in %s not usable (%s); rebuilding the indexes", space, found, exc)
        index = SpaceIndex(views, amus, tv, av, exact_max=config.routing_exact_max, stemmer=config.bm25_stemmer)
        missing = [t for t in turns if t.turn_id not in vecs]
        if missing:
            log.info("space %s: encoding %d raw turns stored without vectors", space, len(missing))
            new = encode([turn_text(t) for t in missing])
            if repair:
                store.put_turn_vectors(space, [t.turn_id for t in missing], new)
            vecs.update(zip((t.turn_id for t in missing), new))
        matrix = np.stack([vecs[t.turn_id] for t in turns]) if turns else np.zeros((0, text_dim), np.float32)
        turn_index = TurnIndex(text_dim, turns, matrix, stemmer=config.bm25_stemmer,
                               exact_max=config.raw_exact_max or None)
        return cls(space, views, index, turn_index, stamp)

    def follow(self, store) -> bool:
        """Catch up with writes another process committed, applying what they changed
        (`etamem.live.change_log`) to the views and indexes under the write lock: work in proportion
        to the change, not to the space. False when the log cannot (a gap, a reset, another
        epoch) or applying failed (then `broken`): the caller opens the space again."""
        catchup = change_log.read(store, self.name, self.stamp)
        if catchup is None:
            return False
        with self.rw.write():
            if self.stamp[1] >= catchup.stamp[1]:
                return True  # caught up meanwhile
            try:
                self._apply(catchup)
            except Exception as exc:  # noqa: BLE001 - the owner reopens from the store
                self.broken = True
                log.warning("space %s: could not follow the change log (%s: %s); reopening", self.name,
                            type(exc).__name__, exc)
                return False
        return True

    def _apply(self, c: "change_log.Catchup") -> None:
        index, turns = self.index, self.turns
        now = {a.amu_id for a in c.amus}
        gone = [u for u in c.units_touched if u in index.row_of and u not in now]
        fresh = [i for i, a in enumerate(c.amus) if a.amu_id not in index.row_of]
        new = [c.amus[i] for i in fresh]
        tv = c.text_vecs[fresh] if fresh else np.zeros((0, self.views.event.dim), np.float32)
        av = c.affect_vecs[fresh] if fresh else np.zeros((0, self.views.affect.dim), np.float32)
        changes = self.views.apply(c.states, c.rows, c.removed, new, tv, av, gone)
        index.remove_amus(gone)
        if new:
            index.add_amus(new, tv, av)
        index.replace_sources([a for a in c.amus if a.amu_id in index.row_of  # mentions rewritten
                               and index.amu_of[a.amu_id].source_turn_ids != a.source_turn_ids])
        index.sync(changes)
        extracted = {t.turn_id for t in c.turns}
        dropped = [t for t in c.turns_touched if t in turns.slot_of and t not in extracted]
        rewritten = [t for t in c.turns if t.turn_id in turns.slot_of and turns.turn(t.turn_id) != t]
        added = [t for t in c.turns if t.turn_id not in turns.slot_of]
        turns.remove(dropped)
        turns.remove([t.turn_id for t in rewritten], keep_rank=True)
        if rewritten or added:
            turns.add(rewritten + added, np.stack([c.turn_vecs[t.turn_id] for t in rewritten + added]))
        self.stamp = c.stamp

    def save_derived(self, root, store) -> bool:
        """Write the indexes as derived files if the store is still at the stamp this state
        reflects and they are not saved yet, then record their stamp and checksum in the store
        (the caller holds the space's write locks). True if written."""
        if self.broken or self.saved_stamp == self.stamp or store.stamp(self.name) != self.stamp:
            return False
        with self.rw.write():  # saving merges BM25 postings in place
            _, check = derived.save(root, self.name, self.stamp, self.index, self.turns, store.name_salt(),
                                    snapshot=not self.unsaved_repair)
        store.set_space_meta(self.name, derived.RECORD_KEY, derived.record(self.stamp, check))
        self.saved_stamp = self.stamp
        return True

    def add_units(self, store, turns: list[Turn], turn_vecs: np.ndarray, amus: list[AMU], text_vecs: np.ndarray,
                  affect_vecs: np.ndarray, extras=None, *, queued: bool = False) -> None:
        """Insert the units of `turns` into the views, commit units, turn vectors, changed view
        rows and the FTA `extras` (`etamem.store.sql.UnitExtras`) in one store transaction (`queued`:
        the turns' LLM extraction queued), then update the indexes (the caller holds the space's
        write locks)."""
        with self.rw.write():
            try:
                self.views.add(amus, text_vecs, affect_vecs)
                payload, changes = self.views.pop_changes()
                store.write_amus(self.name, amus, text_vecs, affect_vecs, [t.turn_id for t in turns],
                                 dims={"text_dim": self.views.event.dim, "affect_dim": self.views.affect.dim},
                                 turn_vecs=turn_vecs, views=payload, extras=extras, queued=queued)
                self._follow(store)
                self.index.add_amus(amus, text_vecs, affect_vecs)
                self._mentions(extras)
                self.index.sync(changes)
                self.turns.add(turns, turn_vecs)
            except BaseException:
                self.broken = True
                raise

    def _mentions(self, extras) -> None:
        """The stored units whose mentions `extras` rewrote, updated in the index."""
        self.index.replace_sources(list(getattr(extras, "mentions", None) or ()))

    def replace_units(self, store, turn: Turn, old_ids: list[str], amus: list[AMU], text_vecs: np.ndarray,
                      affect_vecs: np.ndarray, extras=None) -> bool:
        """A queued turn's LLM units `amus` (text (n, d_t) and affective (n, d_a) vectors) in place of
        its units `old_ids`: the views, the store (one transaction, `SqlStore.replace_units`) and the
        indexes (the caller holds the space's write locks). False, nothing changed, when the store
        no longer holds `turn` queued as it is."""
        with self.rw.write():
            try:
                self.views.forget(old_ids)
                self.views.add(amus, text_vecs, affect_vecs)
                payload, changes = self.views.pop_changes()
                if not store.replace_units(self.name, turn.turn_id, turn.text, old_ids, amus, text_vecs, affect_vecs,
                                           views=payload, extras=extras):
                    self.broken = True  # the views took the change: the owner opens the space again
                    return False
                self._follow(store)
                self.index.remove_amus(old_ids)
                self.index.add_amus(amus, text_vecs, affect_vecs)
                self.index.sync(changes)
            except BaseException:
                self.broken = True
                raise
        return True

    def forget(self, store, amu_ids: list[str], dropped_turns: list[str], rewritten: list[Turn],
               rewritten_vecs: np.ndarray, cache_keys: list[str], extras=None) -> int:
        """Remove units from the views (summaries above them recomputed), the indexes and the
        store; drop turns, or replace them by `rewritten` (same ids, redacted text) with their new
        `turn_text` vectors (n, d); and the vector-cache rows of `cache_keys`: one transaction
        (the caller holds the space's write locks). Returns how many unit rows went."""
        with self.rw.write():
            try:
                self.views.forget(amu_ids)
                payload, changes = self.views.pop_changes()
                turns = {t: None for t in dropped_turns}
                turns.update({t.turn_id: (t.text, t.extra, v) for t, v in zip(rewritten, rewritten_vecs)})
                gone = store.forget(self.name, amu_ids, turns, views=payload, cache_keys=cache_keys, extras=extras)
                self._follow(store)
                self.index.remove_amus(amu_ids)
                self._mentions(extras)
                self.index.sync(changes)
                indexed = [i for i, t in enumerate(rewritten) if t.turn_id in self.turns.slot_of]  # extracted ones
                self.turns.remove(dropped_turns)
                self.turns.remove([t.turn_id for t in rewritten], keep_rank=True)
                self.turns.add([rewritten[i] for i in indexed], np.asarray(rewritten_vecs)[indexed])
            except BaseException:
                self.broken = True
                raise
        return gone

    def maintain(self, store, summariser=None) -> dict:
        """Session-end maintenance of the views, saved, with the indexes updated (the caller
        holds the space's write locks). The structural pass runs under the write lock with extractive
        summaries and is committed; an LLM `summariser` is then called for the refreshed nodes
        outside the lock (deepest first, a parent seeing its children's new summaries) and the
        summaries are committed in a second short write."""
        with self.rw.write():
            try:
                report = self.views.maintain(None)
                self.index.sync(self.views.save(store, self.name))
                self._follow(store)
            except BaseException:
                self.broken = True
                raise
        if summariser is not None:
            self.set_summaries(store, summarise(self.summary_requests(), summariser))
        return report

    def summary_requests(self) -> list[tuple[str, object, list, list[str], list[str]]]:
        """(view, node, child node ids, child texts, representative texts) for every inner node
        the last `maintain` refreshed, deepest first per view (the caller holds the space's writer
        lock, so the texts are those of the views now)."""
        with self.rw.read():
            return [(view, node, children, [self.views.node_text(view, c) for c in children], reps)
                    for view, node, children, reps in self.views.summary_requests()]

    def set_summaries(self, store, texts: dict) -> None:
        """Install and commit summaries ((view, node) -> text) made outside the locks; nodes gone
        meanwhile are skipped (the caller holds the space's writer lock)."""
        if not texts:
            return
        with self.rw.write():
            try:
                self.views.set_summaries(texts)
                self.index.sync(self.views.save(store, self.name))
                self._follow(store)
            except BaseException:
                self.broken = True
                raise


def summarise(requests: list, summariser) -> dict:
    """(view, node) -> summary for `LiveSpace.summary_requests()`, by `summariser(child texts,
    representative texts)`, deepest first: a parent sees its children's new summaries. Takes no
    lock (the LLM is slow)."""
    texts: dict = {}
    for view, node, children, child_texts, reps in requests:
        texts[(view, node)] = summariser([texts.get((view, c)) or t for c, t in zip(children, child_texts)], reps)
    return texts
