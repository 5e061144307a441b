"""The machinery under `Memory`: the store, the models, the live spaces and their locks.

`Engine` opens the store (SQLite directory, PostgreSQL URL or in memory), loads the models
lazily (all injectable), and keeps each space as a `LiveSpace`: writes update its views and
indexes in place (never a rebuild per write) under its write lock; searches share its read
lock; writers of one space are serialised by a mutex and, across processes, a file lock
(`SpaceFileLock`; on PostgreSQL an advisory lock), held while models and the LLM run, which
blocks neither searches nor other spaces. A space whose store stamp moved (another process
wrote, or deleted the space) is opened again from the store before it is read or written.
Live spaces are kept under a budget (`Config.max_live_spaces`, `max_live_bytes`;
`etamem.live.residency`): after an open past it, the least recently used spaces that no search or
write is using have their indexes saved as derived files and are dropped; they reopen on next
use. A search that took a space just before it was dropped finishes on that (unchanged) state.
Calls for a space run in its cache scope (`etamem.models.cache_scope`). What is done with the units,
how they are built and searched, is the method's (`etamem.method`); the public API is
`etamem.Memory`'s.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterable, Mapping

from etamem import tenancy
from etamem.config import Config
from etamem.ingest.inputs import space_as_stored
from etamem.live import derived
from etamem.live.residency import FreedPages, LiveTable, ResidencyStats
from etamem.live.space import LiveSpace
from etamem.method import make_method
from etamem.models import cache_scope
from etamem.models.encoders import CachedEncoder, make_text_encoder
from etamem.records import Turn, UnknownSpaceError
from etamem.store.sqlite import open_store
from etamem.views import LLMSummariser

log = logging.getLogger(__name__)

LLM_CACHE_FILE = "llm_cache.sqlite"
# the engine's interface to the methods (`etamem.method`), the write path (`etamem.writing`,
# `etamem.facts.revisions`) and the answer helpers (`etamem.answering`): public for them, not part of
# `Memory`'s documented API (`AsyncMemory` has no twins of them)
ENGINE_INTERFACE = frozenset({
    "space_name", "known_space", "live_space", "readable_space", "writing_to", "scoped", "timed",
    "encode_query", "encode_queries", "turns_by_id", "summariser", "count_extraction", "llm_queue",
})


class Engine:
    """The store, models and live spaces of a `Memory` (its base class; see the module
    docstring). `method`: the `etamem.method.Method` the config chose. The methods and the write
    path use the calls named in `ENGINE_INTERFACE` (spaces by name, live or checked readable, the
    write locks, cache scopes, stage timing, query vectors, stored turns by id)."""

    def __init__(self, path: str | os.PathLike | None = None, config: Config | Mapping[str, Any] | None = None,
                 *, text_encoder=None, affect_tagger=None, llm=None, extractor=None):
        self.config = config if isinstance(config, Config) else Config.from_dict(config)
        # the store, its writer lock across processes, and the directory of derived files (None:
        # a database URL or in memory; then indexes are built from the stored vectors on open)
        self.store, self._file_lock, self.path = open_store(path)
        self._lock = threading.RLock()  # lazy model loading and the table of live spaces only
        self._text_encoder = text_encoder
        self._affect_tagger = affect_tagger
        self._llm = llm
        self._llm_resolved = llm is not None
        self._extractor = extractor
        self._live: LiveTable[LiveSpace] = LiveTable(self.config.max_live_spaces, self.config.max_live_bytes,
                                                     size=LiveSpace.nbytes)
        self._residency_counts = {"opens": 0, "opens_from_files": 0, "follows": 0, "evictions": 0,
                                  "saved_on_eviction": 0}
        self._freed = FreedPages(32)  # cycles collected, free pages handed back, every 32 evictions
        self._no_files: set[str] = set()  # spaces to open without their derived files (they failed a search)
        self._opening: dict[str, threading.Lock] = {}  # space -> lock held while it is opened
        self._writers: dict[str, threading.Lock] = {}  # space -> mutex held across a whole write
        self._identity_checked: set[str] = set()  # "text", "affect": model identity checked against the store
        self.extraction_stats = {"turns": 0, "amus": 0}  # + "unavailable" (deferrals); fallbacks: the extractor's stats
        # accumulated seconds per write stage: extract, encode, tag, views (views, indexes and
        # the store commit, under the write lock), store (raw turns)
        self.stage_seconds: dict[str, float] = {}
        self.method = make_method(self.config)  # ETAMem's views or FTA-Mem (`etamem.method`), chosen once
        self._queue, self._queue_resolved = None, False
        self._warn_preset()
        if self._may_queue() and (llm is not None or self.config.resolved_llm_model()):
            queue = self.llm_queue  # turns a previous process left queued are taken up again
            if queue is not None:
                queue.resume()

    def _warn_preset(self) -> None:
        """Record the config's preset in a new store; warn when the store was built under another."""
        from etamem.presets import check_store_preset

        built = check_store_preset(self.store, self.config.preset_name)
        if built is not None:
            log.warning("the store %s was built with preset %r, this Memory uses %r: results differ from that "
                        "preset's (etamem/presets.py; docs/presets.md)", self.path or "(in memory)", built,
                        self.config.preset_name)

    @property
    def text_encoder(self):
        with self._lock:
            if self._text_encoder is None:
                self._text_encoder = make_text_encoder(self.config, persist=self.store)
            self._check_identity("text", self._text_encoder)
            return self._text_encoder

    @property
    def affect_tagger(self):
        with self._lock:
            if self._affect_tagger is None:
                from etamem.models.affect import make_affect_tagger

                self._affect_tagger = make_affect_tagger(self.config, self.text_encoder,
                                                         recorded=self.store.models().get("affect_tagger"))
            self._check_identity("affect", self._affect_tagger)
            return self._affect_tagger

    def _check_identity(self, kind: str, model) -> None:
        """Once per model kind: `etamem.live.reindex.check_identity` (records or compares; raises)."""
        if kind not in self._identity_checked:
            from etamem.live.reindex import check_identity

            check_identity(self.store, kind, model)
            self._identity_checked.add(kind)

    @property
    def llm(self):
        """The LLM client, or None when no model is configured (the embedded default)."""
        with self._lock:
            if not self._llm_resolved:
                from etamem.models.llm import LLMClient

                self._llm = LLMClient.from_config(self.config, cache_path=self._llm_cache_path())
                self._llm_resolved = True
            return self._llm

    @property
    def extractor(self):
        with self._lock:
            if self._extractor is None:
                from etamem.extraction.extractors import LLMExtractor, RuleExtractor

                rule = RuleExtractor.from_config(self.config)
                use_llm = self.config.extractor == "llm" or (self.config.extractor == "auto" and self.llm is not None)
                if use_llm:
                    if self.llm is None:
                        raise ValueError("config extractor='llm' needs an LLM: set llm_model or ETAMEM_LLM_MODEL")
                    self._extractor = LLMExtractor(self.llm, style=self.config.extraction_style, fallback=rule)
                else:
                    self._extractor = rule
                log.info("AMU extractor: %s", type(self._extractor).__name__)
            return self._extractor

    def _may_queue(self) -> bool:
        return (self.config.llm_background and self.config.unit_kind() == "amu"
                and self.config.extractor != "rule")

    @property
    def llm_queue(self):
        """The LLM extraction queue behind writes (`etamem.extraction.background.LLMQueue`), or
        None: writes extract with the LLM themselves (`Config.llm_background` off, FTA units) or
        there is no LLM extractor."""
        with self._lock:
            if not self._queue_resolved:
                from etamem.extraction.background import LLMQueue
                from etamem.extraction.extractors import LLMExtractor

                if self._may_queue() and isinstance(self.extractor, LLMExtractor):
                    c = self.config
                    self._queue = LLMQueue(self, workers=c.llm_concurrency, backoff_s=c.llm_backoff_s,
                                           backoff_max_s=c.llm_backoff_max_s)
                self._queue_resolved = True
            return self._queue

    @contextmanager
    def timed(self, stage: str):
        """Add the seconds the block takes to `stage_seconds[stage]` (a write stage)."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            with self._lock:
                self.stage_seconds[stage] = self.stage_seconds.get(stage, 0.0) + time.perf_counter() - t0

    @contextmanager
    def _held(self, table: dict[str, threading.Lock], space: str):
        """Hold the space's lock in `table` (`_writers`, `_opening`; made on first use). An
        eviction deletes unheld entries: a lock found deleted once taken is let go and the current
        one taken, so two threads never hold different locks of one space."""
        while True:
            with self._lock:
                lock = table.setdefault(space, threading.Lock())
            lock.acquire()
            with self._lock:
                if table.get(space) is lock:
                    break
            lock.release()
        try:
            yield
        finally:
            lock.release()

    @contextmanager
    def _locked(self, space: str):
        """The space's writer mutex, then its file lock (other processes)."""
        tenancy.check(space)  # every write path passes here: the caller's scope, once more
        with self._held(self._writers, space), self._file_lock.hold(space):
            yield

    @contextmanager
    def scoped(self, space: str):
        """Calls inside belong to `space`: LLM cache entries are tagged with it (`cache_refs`,
        found again when it is deleted) and cache keys are scoped to it (`etamem.models.cache_scope`)
        unless `Config.shared_caches`."""
        from etamem.models.llm import cache_refs

        with cache_refs(f"space:{space}"), cache_scope.scope(None if self.config.shared_caches else space):
            yield

    @contextmanager
    def writing_to(self, space: str):
        """Hold the space's write locks and yield its live state, current with the store (opened
        again if another process wrote, a write failed, or an open could not save a repair)."""
        with self._locked(space), self.scoped(space):
            yield self.live_space(space, writing=True)

    def _forget_vectors(self, space: str, keys: list[str] | None = None) -> None:
        """Drop the encoder's in-process cache entries of the space (all, or those of `keys`)."""
        enc = self._text_encoder
        if isinstance(enc, CachedEncoder):
            enc.forget(None if self.config.shared_caches else space, keys)

    def _current(self, live: LiveSpace | None) -> bool:
        """Usable as is: not broken and at the store's stamp, its epoch and generation (checked
        under its read lock, so a write of this process between its commit and its state update
        is never mistaken for another process's)."""
        if live is None or live.broken:
            return False
        with live.rw.read():
            return live.stamp == self.store.stamp(live.name)

    def live_space(self, space: str, *, writing: bool = False) -> LiveSpace:
        """The live space, opened from the store on first use and again whenever it is not
        current; `writing`: the caller holds the write locks (repairs found on open are saved)."""
        tenancy.check(space)  # every read path passes here: the caller's scope, once more
        live = self._live.get(space)
        if self._current(live) and not (writing and live.unsaved_repair):
            return live
        with self._held(self._opening, space):
            live = self._live.get(space)
            if not self._current(live) or (writing and live.unsaved_repair):
                if (live is not None and not live.broken and not live.unsaved_repair
                        and self.config.follow_changes and live.follow(self.store)):
                    with self._lock:
                        self._residency_counts["follows"] += 1
                    log.debug("space %s: followed another process's writes to generation %d", space, live.generation)
                    return live
                if live is not None and not live.broken:
                    epoch, generation = self.store.stamp(space)
                    if epoch != live.stamp[0]:  # deleted (and perhaps recreated) by another process
                        log.info("space %s was deleted by another process; reloading", space)
                        self._forget_vectors(space)
                    else:
                        log.info("space %s: the store moved to generation %d (another process wrote); reloading",
                                 space, generation)
                text_dim = self.store.get_space_meta(space, "text_dim")
                affect_dim = self.store.get_space_meta(space, "affect_dim")
                text_dim = int(text_dim) if text_dim else self.text_encoder.dim
                affect_dim = int(affect_dim) if affect_dim else self.affect_tagger.dim
                with self._lock:
                    root = None if space in self._no_files else self.path
                live = LiveSpace.open(self.store, space, self.config, text_dim, affect_dim,
                                      lambda texts: self.text_encoder.encode(texts), root=root, repair=writing)
                with self._lock:
                    self._live[space] = live
                    self._no_files.discard(space)
                    self._residency_counts["opens"] += 1
                    self._residency_counts["opens_from_files"] += live.from_files
                log.debug("space %s opened%s (%d live)", space, " from derived files" * live.from_files,
                          len(self._live))
        if self._live.bounded:
            self._evict(keep=space)
        return live

    def _evict(self, keep: str) -> None:
        """Drop least recently used live spaces while over the budget, never `keep` nor one in use."""
        dropped = sum(self._evict_one(name, live) for name, live in self._live.eviction_order(keep))
        self._freed.evicted(dropped)

    def _evict_one(self, space: str, live: LiveSpace) -> bool:
        """Save the space's indexes (store directory, stale files) and drop it from the live table,
        unless a writer holds its mutex, or a search or write its lock; False if it stays."""
        with self._lock:
            writer = self._writers.setdefault(space, threading.Lock())
        if not writer.acquire(blocking=False):
            return False  # a write (or a checkpoint) of this space is under way
        try:
            with self._lock:
                if self._writers.get(space) is not writer or self._live.peek(space) is not live:
                    return False  # taken meanwhile by another eviction, or reopened
            if live.in_use():
                return False
            saved = False
            if self.path is not None and not live.broken and live.saved_stamp != live.stamp:
                with self._file_lock.try_hold(space) as held:  # another process writing it: not now
                    if not held:
                        return False
                    try:
                        saved = live.save_derived(self.path, self.store)
                    except Exception as exc:  # noqa: BLE001 - a cache: the space reopens from the store
                        log.warning("space %s: could not save its indexes before dropping it (%s: %s)", space,
                                    type(exc).__name__, exc)
            with self._lock:
                if live.in_use() or not self._live.pop_if(space, live):
                    return False
                self._residency_counts["evictions"] += 1
                self._residency_counts["saved_on_eviction"] += saved
                opening = self._opening.get(space)
                if opening is not None and not opening.locked():
                    del self._opening[space]
                del self._writers[space]  # held by us: a thread waiting for it takes a new one (`_held`)
            if not self.config.shared_caches:  # its vectors stay in the store's cache, read on reopen
                self._forget_vectors(space)
            log.debug("space %s evicted (least recently used%s; %d live)", space,
                      ", indexes saved" * saved, len(self._live))
            return True
        finally:
            writer.release()

    def residency(self) -> ResidencyStats:
        """Live spaces against the budget, with open and eviction counts (`etamem.live.residency`).

        Returns:
            A `ResidencyStats`: live spaces, the budget (`max_live_spaces`, `max_live_bytes`), the
                live bytes (None without a byte bound) and the open, follow and eviction counters.
        """
        with self._lock:
            counts = dict(self._residency_counts)
        return ResidencyStats(live=len(self._live), max_live_spaces=self.config.max_live_spaces,
                              max_live_bytes=self.config.max_live_bytes,
                              live_bytes=self._live.nbytes() if self.config.max_live_bytes else None, **counts)

    def spaces(self) -> list[str]:
        """The store's spaces (those the caller's scope allows, see `etamem.tenancy`).

        Returns:
            The space names.
        """
        return tenancy.visible(self.store.spaces())

    def space_name(self, space: str) -> str:
        """The validated space name (`space_as_stored`: a name an earlier version stored keeps its
        spelling), if the caller's scope allows it (`etamem.tenancy`)."""
        return tenancy.check(space_as_stored(space, self.store.has_space))

    def known_space(self, space: str) -> str:
        """The validated name of a space the store holds (`space_name`); UnknownSpaceError otherwise."""
        space = self.space_name(space)
        if not self.store.has_space(space):
            raise UnknownSpaceError(f"space: unknown space {space!r} (known: {self.spaces()[:10]})")
        return space

    def readable_space(self, space: str):
        """The live space, after checking that this config's method can read the kind of units
        it holds (ValueError naming the setting to use otherwise)."""
        live = self.live_space(self.known_space(space))
        self.method.check_readable(live.name, self.store.get_space_meta(live.name, "units"))
        return live

    def _distrust_files(self, space: str, exc: Exception) -> bool:
        """A search failed on indexes just loaded from derived files: drop them (the space is
        rebuilt from the store on its next use, the files rewritten at the next checkpoint) and
        say so; False when the live space was not loaded from files (the error is not theirs)."""
        with self._lock:
            live = self._live.get(space)
            if live is None or not live.from_files:
                return False
            self._live.pop(space)
            self._no_files.add(space)
        live.broken = True
        log.warning("space %s: searching the indexes loaded from derived files failed (%s: %s); rebuilding them "
                    "from the store", space, type(exc).__name__, exc)
        return True

    def encode_query(self, query: str):
        """(d,) float32 query vector; a query's vector is not written to the store's cache."""
        return self.encode_queries([query])[0]

    def encode_queries(self, texts: list[str]):
        """(n, d) float32 vectors of query texts, not written to the store's cache."""
        enc = self.text_encoder
        return enc.encode(texts, persist=False) if isinstance(enc, CachedEncoder) else enc.encode(texts)

    def turns_by_id(self, space: str, turn_ids: Iterable[str]) -> dict[str, Turn]:
        """Stored turns by id: from the live raw-turn index, the others (pending) from the store."""
        live = self._live.get(self.space_name(space))
        found: dict[str, Turn] = {}
        if live is not None:
            with live.rw.read():
                found = {t: turn for t in turn_ids if (turn := live.turns.turn(t)) is not None}
        missing = [t for t in turn_ids if t not in found]
        if missing:
            found.update((t.turn_id, t) for t in self.store.turns(self.space_name(space), turn_ids=missing))
        return found

    def summariser(self):
        """The node summariser of session-end maintenance: the LLM's, None without an LLM or with
        `Config.llm_summaries` off (then the extractive summaries)."""
        return None if self.llm is None or not self.config.llm_summaries else LLMSummariser(self.llm)

    def count_extraction(self, **counts: int) -> None:
        """Add `counts` (turns, amus, unavailable) to `extraction_stats`, under the engine's lock."""
        with self._lock:
            for key, n in counts.items():
                self.extraction_stats[key] = self.extraction_stats.get(key, 0) + n

    def _after_forget(self, space: str, texts: list[str] | None, turn_ids: list[str] | None) -> None:
        """The copies outside the store's rows: derived files (rewritten at the next checkpoint),
        LLM cache entries (all of the space's when `texts` is None), the WAL files."""
        if self.path is not None:
            derived.drop(self.path, space, self.store.name_salt())
        from etamem.models.llm import forget_cached

        cache = self._llm_cache_path()
        if cache is not None:
            n = forget_cached(cache, space, texts, turn_ids)
            log.info("space %s: %d LLM cache entries forgotten", space, n)
        if not self.store.truncate_wal():
            log.warning("the store's write-ahead log could not be truncated now (another connection is "
                        "reading); deleted text leaves it at the next checkpoint")

    def _llm_cache_path(self) -> str | None:
        if self.config.llm_cache_path:
            return self.config.llm_cache_path
        return None if self.path is None else str(self.path / LLM_CACHE_FILE)

    def checkpoint(self) -> list[str]:
        """Save the search indexes of the spaces changed since they were last saved.

        They are written as derived files beside the store (see `etamem.live.derived`), so the next
        open loads them instead of re-indexing. `close` calls it. An in-memory or PostgreSQL store
        has no directory for them: nothing is written.

        Returns:
            The spaces written.
        """
        if self.path is None:
            return []
        written = []
        for live in list(self._live.values()):
            with self._locked(live.name):
                if live.save_derived(self.path, self.store):
                    written.append(live.name)
        return written

    def close(self) -> None:
        """Save the changed spaces' indexes (`checkpoint`), then close the LLM client and the store.

        A failure to save the indexes is logged, not raised: they are a cache, rebuilt on the next
        open.
        """
        if self._queue is not None:  # first: a worker's write in progress ends, none starts
            self._queue.close()
        try:
            self.checkpoint()
        except Exception as exc:  # noqa: BLE001 - derived files are a cache: the store is complete without them
            log.warning("could not save the search indexes (%s: %s); they are rebuilt on the next open",
                        type(exc).__name__, exc)
        with self._lock:
            if self._llm is not None and hasattr(self._llm, "close"):
                self._llm.close()
            self.store.close()
            self._file_lock.close()

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
