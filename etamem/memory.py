"""`Memory`: the one entry class (DESIGN §1, §4, §11).

    mem = Memory("store_dir")            # or Memory() in memory, or Memory("postgresql://...")
    mem.add(turns, space="user-42")      # raw turns stored first, then AMUs extracted
    hits = mem.search("question", space="user-42")
    ans = mem.answer("question", space="user-42", now="2023-06-01")

Models (text encoder, affect tagger, LLM) load lazily on first use and can be injected.
All public methods are thread-safe, and several processes may use one store. Each space is a
`LiveSpace`: writes update its views and indexes in place (never a rebuild per write) under
its write lock; searches share its read lock; writers of one space are serialised by a mutex
and, across processes, a file lock (`SpaceFileLock`; on PostgreSQL an advisory lock), held
while models and the LLM run, which blocks neither searches nor other spaces. A space whose
store generation moved (another process wrote) is opened again from the store before it is
read or written.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from itertools import groupby
from typing import Any, Iterable, Mapping, Sequence

import numpy as np


from . import cache_scope, derived
from .config import Config
from .encoders import CachedEncoder, make_text_encoder
from . import tenancy
from .inputs import (SessionClock, TurnBatch, check_same_content, given_ids, read_turns, turn_items, validate_query,
                     validate_space, validate_top_k)
from .live_space import LiveSpace
from .store import STORE_FILE, open_store  # noqa: F401 - STORE_FILE: the store's file name
from .threads import blas_threads
from .timeparse import parse_timestamp
from .types import AMU, Answer, Hit, MemoryContext, SearchResult, StageCost, Turn, UnknownIdError, UnknownSpaceError
from .context import render_context, with_sources
from .views import LLMSummariser, SpaceViews

log = logging.getLogger(__name__)

LLM_CACHE_FILE = "llm_cache.sqlite"
REPLACED_KEY, SKIPPED_KEY = "control_chars_replaced", "messages_skipped"  # space meta: input counts


class Memory:
    """Long-term memory of multi-session conversations, partitioned by `space`.

    path: a directory holding `memory.sqlite` (and the LLM cache); a PostgreSQL URL
    (`postgresql://...`: the store in that database, see `etamem.store_pg`; the LLM cache only
    at `config.llm_cache_path`); None = in memory.
    config: a `Config` or a dict for `Config.from_dict`. text_encoder / affect_tagger /
    llm / extractor: optional injected components (tests, custom models).
    """

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
        self._fta = None  # etamem.fta.engine.FTABuilder, built on the first FTA write
        self._live: dict[str, LiveSpace] = {}
        self._no_files: set[str] = set()  # spaces to open without their derived files (they failed a search)
        self._opening: dict[str, threading.Lock] = {}  # space -> lock held while it is opened
        self._writers: dict[str, threading.Lock] = {}  # space -> mutex held across a whole write
        self._identity_checked: set[str] = set()  # "text", "affect": model identity checked against the store
        self.extraction_stats = {"turns": 0, "amus": 0}  # + "unavailable" (deferrals); fallbacks: the extractor's stats
        # accumulated seconds per write stage: extract, encode, tag, views (views, indexes and
        # the store commit, under the write lock), store (raw turns)
        self.stage_seconds: dict[str, float] = {}

    # --- lazily built components ----------------------------------------------------------
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
                from .affect import make_affect_tagger

                self._affect_tagger = make_affect_tagger(self.config, self.text_encoder,
                                                         recorded=self.store.models().get("affect_tagger"))
            self._check_identity("affect", self._affect_tagger)
            return self._affect_tagger

    def _check_identity(self, kind: str, model) -> None:
        """Once per model kind: `etamem.reindex.check_identity` (records or compares; raises)."""
        if kind not in self._identity_checked:
            from .reindex import check_identity

            check_identity(self.store, kind, model)
            self._identity_checked.add(kind)

    @property
    def llm(self):
        """The LLM client, or None when no model is configured (the embedded default)."""
        with self._lock:
            if not self._llm_resolved:
                from .llm import LLMClient

                self._llm = LLMClient.from_config(self.config, cache_path=self._llm_cache_path())
                self._llm_resolved = True
            return self._llm

    @property
    def extractor(self):
        with self._lock:
            if self._extractor is None:
                from .extraction import LLMExtractor, RuleExtractor

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

    @property
    def fta(self):
        """The FTA-Mem construction components (`etamem.fta.engine.FTABuilder`) of this Memory."""
        with self._lock:
            if self._fta is None:
                from .fta.engine import FTABuilder

                self._fta = FTABuilder(self.config, self.text_encoder, self.affect_tagger, self.llm)
            return self._fta

    # --- live spaces ----------------------------------------------------------------------
    @contextmanager
    def _timed(self, stage: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            with self._lock:
                self.stage_seconds[stage] = self.stage_seconds.get(stage, 0.0) + time.perf_counter() - t0

    @contextmanager
    def _locked(self, space: str):
        """The space's writer mutex, then its file lock (other processes)."""
        tenancy.check(space)  # every write path passes here: the caller's scope, once more
        with self._lock:
            writer = self._writers.setdefault(space, threading.Lock())
        with writer, self._file_lock.hold(space):
            yield

    @contextmanager
    def _scoped(self, space: str):
        """Calls inside belong to `space`: LLM cache entries are tagged with it (`cache_refs`,
        found again when it is deleted) and cache keys are scoped to it (`etamem.cache_scope`)
        unless `Config.shared_caches`."""
        from .llm import cache_refs

        with cache_refs(f"space:{space}"), cache_scope.scope(None if self.config.shared_caches else space):
            yield

    @contextmanager
    def _writing(self, space: str):
        """Hold the space's write locks and yield its live state, current with the store (opened
        again if another process wrote, a write failed, or an open could not save a repair)."""
        with self._locked(space), self._scoped(space):
            yield self._space(space, writing=True)

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

    def _space(self, space: str, *, writing: bool = False) -> LiveSpace:
        """The live space, opened from the store on first use and again whenever it is not
        current; `writing`: the caller holds the write locks (repairs found on open are saved)."""
        tenancy.check(space)  # every read path passes here: the caller's scope, once more
        live = self._live.get(space)
        if self._current(live) and not (writing and live.unsaved_repair):
            return live
        with self._lock:
            opening = self._opening.setdefault(space, threading.Lock())
        with opening:
            live = self._live.get(space)
            if not self._current(live) or (writing and live.unsaved_repair):
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
            return live

    def views(self, space: str = "default") -> SpaceViews:
        """The Event / Affect / Time views of a space (loaded from the store on first use)."""
        return self._space(self._name(space)).views

    # --- writing --------------------------------------------------------------------------
    def add(self, turns: Iterable[Turn | Mapping[str, Any]] | Turn | Mapping[str, Any],
            space: str = "default") -> list[AMU]:
        """Store turns, then extract, tag and index their AMUs; returns the new AMUs.

        Idempotent: a turn whose `turn_id` is already stored with the same content is not
        stored again and its units are returned (a retry after a network error is safe); the
        same id with other content raises ValueError naming both. Turns without an id get a new
        one (`t<seq>`) each time: give ids to make retries safe.
        Bad input (or models other than the store's) raises ValueError naming the field (e.g.
        `turns[2].timestamp`) and stores nothing from the call. Raw turns are durable before
        extraction: when the LLM gives no reply they stay pending and `add` returns the units
        it made (see `_process_pending`); any other model failure raises, the turns pending
        likewise; the next `add`/`flush` processes them. A new session id ends the space's open
        sessions.
        """
        space = self._name(space)
        items = turn_items(turns)
        if not items:
            return []
        now = datetime.now(timezone.utc)  # the time of turns given without one: the same in both reads
        self._read(items, space, now=now)  # bad input fails here, before any lock or store access
        _ = self.text_encoder, self.affect_tagger  # and models that do not match the store's (model identity)
        from .construction import UNITS_KEY, check_units_kind

        check_units_kind(self.store, space, self.config.unit_kind())  # and a space holding the other kind of units
        with self._writing(space) as live:
            with self._timed("store"):
                next_seq = self.store.next_turn_seq(space)
                batch = self._read(items, space, now=now, next_seq=next_seq, from_store=True)
                clean = batch.turns
                stored = self._stored_same(space, batch)
                fresh = [t for t in clean if t.turn_id not in stored]
                if fresh:
                    self.store.insert_turns(fresh, first_seq=next_seq)
                    self._count_input(space, batch)
                if check_units_kind(self.store, space, self.config.unit_kind()):
                    self.store.set_space_meta(space, UNITS_KEY, self.config.unit_kind())
            new = self._process_pending(space, live)
            if len(fresh) == len(clean):
                return new
            # a retry: the turns already stored give their units back, in the order given
            order = {t.turn_id: i for i, t in enumerate(clean)}
            made = {a.amu_id for a in new}
            old = [a for a in self.store.amus_of_turns(space, list(stored)) if a.amu_id not in made]
            return sorted(old + new, key=lambda a: min((order.get(s, len(order)) for s in a.source_turn_ids)))

    def check(self, turns: Iterable[Turn | Mapping[str, Any]] | Turn | Mapping[str, Any], space: str = "default",
              *, labels: Sequence[str] | None = None, new_space: bool = False) -> list[Turn]:
        """Validate turns as `add` would, storing nothing: ValueError naming the first bad field
        (as `labels[i]` when given, e.g. a file and line) or a turn id stored with other content.
        Returns the turns `add` would store now (those not already stored, with the defaults `add`
        would give them now); with `new_space`, checked as if the space were empty (before
        replacing it)."""
        space = self._name(space)
        items = turn_items(turns)
        batch = self._read(items, space, now=datetime.now(timezone.utc), labels=labels, from_store=not new_space,
                           next_seq=0 if new_space else self.store.next_turn_seq(space))
        if new_space:
            return batch.turns
        stored = self._stored_same(space, batch)
        return [t for t in batch.turns if t.turn_id not in stored]

    def _read(self, items: list, space: str, *, now: datetime, next_seq: int = 0, labels: Sequence[str] | None = None,
              from_store: bool = False) -> TurnBatch:
        """`etamem.inputs.read_turns` with this config; `from_store`: defaults (session, and the
        time and session of turns already stored) continue the space's stored state."""
        known, clock = None, SessionClock(timedelta(minutes=self.config.session_gap_minutes))
        if from_store:
            known = {t.turn_id: t for t in self.store.turns(space, turn_ids=given_ids(items))}
            last = self.store.last_turn(space)
            if last is not None and self.store.session_state(space, last.session_id):
                clock.last_session, clock.last_time = last.session_id, last.timestamp
            clock.taken = lambda sid: self.store.session_state(space, sid) is not None
        return read_turns(items, space, default_tz=self.config.default_timezone, labels=labels, now=now,
                          max_turn_chars=self.config.max_turn_chars, next_seq=next_seq, sessions=clock,
                          keep_system=self.config.keep_system_messages, known=known)

    def _count_input(self, space: str, batch: TurnBatch) -> None:
        """Add a write's replaced control characters and skipped messages to the space's counts
        (space meta, reported by `stats`), with a log line."""
        for key, n in ((REPLACED_KEY, batch.replaced), (SKIPPED_KEY, batch.skipped)):
            if n:
                self.store.set_space_meta(space, key, str(int(self.store.get_space_meta(space, key) or 0) + n))
        if batch.replaced:
            log.warning("space %s: %d control characters replaced in the text of the turns added", space,
                        batch.replaced)

    def _stored_same(self, space: str, clean: TurnBatch) -> dict[str, Turn]:
        """The stored turns among `clean` by id; ValueError when one has other content."""
        stored = {t.turn_id: t for t in self.store.turns(space, turn_ids=[t.turn_id for t in clean.turns])}
        check_same_content(clean, stored, space)
        return stored

    def flush(self, space: str = "default") -> list[AMU]:
        """Process the space's pending turns (after the LLM was unreachable or a model failed);
        returns the new units."""
        with self._writing(self._known_space(space)) as live:
            return self._process_pending(live.name, live)

    def end_session(self, space: str = "default") -> list[str]:
        """Close the space's open sessions (session-end maintenance); returns their ids."""
        with self._writing(self._known_space(space)) as live:
            self._process_pending(live.name, live, complete=set(self.store.open_sessions(live.name)))
            waiting = {t.session_id for t in self.store.turns(live.name, pending_only=True)}  # e.g. LLM down
            open_ids = [s for s in self.store.open_sessions(live.name) if s not in waiting]
            self._end_sessions(live, open_ids)
            return open_ids

    def _end_sessions(self, live: LiveSpace, session_ids: list[str]) -> None:
        """Mark sessions ended and run session-end maintenance (trees, calibration, summaries)."""
        if session_ids:
            with self._timed("views"), blas_threads(self.config.blas_threads):
                report = live.maintain(self.store, self._summariser())
            self.store.mark_sessions_ended(live.name, session_ids)
            log.debug("space %s: ended sessions %s; maintenance %s", live.name, session_ids, report)

    def _summariser(self):
        return None if self.llm is None else LLMSummariser(self.llm)

    def _process_pending(self, space: str, live: LiveSpace, complete: set[str] = frozenset()) -> list[AMU]:
        """Extract, encode and tag the pending turns session by session, then hand each batch
        to the live space (the caller holds the space's write locks). A session is complete
        when a later one has pending turns or it is in `complete` (FTA units: the provisional
        segment of a running session stays pending).

        When the LLM gives no reply (`ExtractionUnavailable`: unreachable, timeouts, 429/5xx
        after the client's retries, a rejected request) processing stops at that batch: nothing
        of it is written, it and later sessions stay pending (session order is kept), a warning
        is logged and `stats()["extraction"]["unavailable"]` counted; the AMUs made so far are
        returned and the next `add`/`flush` tries again. Other failures propagate."""
        from .extraction import ExtractionUnavailable

        pending = self.store.turns(space, pending_only=True)
        groups = [(sid, list(g)) for sid, g in groupby(pending, key=lambda t: t.session_id)]
        new: list[AMU] = []
        for i, (session_id, group) in enumerate(groups):
            # a session ends when a new one arrives and none of its turns are still to come
            still_pending = {sid for sid, _ in groups[i:]}
            self._end_sessions(live, [s for s in self.store.open_sessions(space) if s not in still_pending])
            try:
                new.extend(self._extract_and_store(live, group, i + 1 < len(groups) or session_id in complete))
            except ExtractionUnavailable as exc:
                with self._lock:
                    self.extraction_stats["unavailable"] = self.extraction_stats.get("unavailable", 0) + 1
                log.warning("space %s: extraction deferred, the LLM gave no reply (%s); %d turns stay pending "
                            "until the next add/flush", space, exc, sum(len(g) for _, g in groups[i:]))
                break
        return new

    def _extract_and_store(self, live: LiveSpace, turns: list[Turn], complete: bool = True) -> list[AMU]:
        from .construction import build_units

        extras = None
        if self.config.unit_kind() == "fta":
            from .fta.engine import build_and_link

            turns, units, text_vecs, affect_vecs, turn_vecs, extras = build_and_link(
                self.fta, self.store, live, turns, complete, self.config, self._timed)
        else:
            units, text_vecs, affect_vecs, turn_vecs = build_units(
                turns, live.name, self.extractor, self.text_encoder, self.affect_tagger, self._timed)
        if not turns:
            return []
        with self._timed("views"), blas_threads(self.config.blas_threads):
            live.add_units(self.store, turns, turn_vecs, units, text_vecs, affect_vecs, extras)
        with self._lock:
            self.extraction_stats["turns"] += len(turns)
            self.extraction_stats["amus"] += len(units)
        return units

    # --- reading --------------------------------------------------------------------------
    def spaces(self) -> list[str]:
        """The store's spaces (those the caller's scope allows, see `etamem.tenancy`)."""
        return tenancy.visible(self.store.spaces())

    def _name(self, space: str) -> str:
        """The validated space name, if the caller's scope allows it (`etamem.tenancy`)."""
        return tenancy.check(validate_space(space))

    def _known_space(self, space: str) -> str:
        space = self._name(space)
        if not self.store.has_space(space):
            raise UnknownSpaceError(f"space: unknown space {space!r} (known: {self.spaces()[:10]})")
        return space

    def stats(self, space: str = "default") -> dict:
        """Per-view shape of a space: AMUs, nodes, leaves, depth, fan-out, thresholds (event,
        affect), months/weeks/days/sessions (time), plus turn and AMU counts, and `extraction`:
        the extractor's class (None if it cannot be built), its counters since this Memory opened (all spaces: `turns`
        extracted — again after a deferral —, `llm_units`, `fallback_turns` / `fallback_units`
        made by the rule fallback for unusable LLM replies; zeros for extractors without
        counters), `unavailable` (times extraction was deferred because the LLM gave no reply)
        and this space's `pending_turns`; `input`: control characters replaced in the space's turn
        texts and chat messages skipped (no text, system roles), since the space was made."""
        live = self._space(self._known_space(space))
        try:
            extractor = self.extractor  # the one writes use (built if needed: no model call)
        except ValueError:  # extractor="llm" without a model: writes would raise the same
            extractor = None
        with self._lock:
            unavailable = self.extraction_stats.get("unavailable", 0)
        counts = dict(getattr(extractor, "stats", None) or {})
        extraction = {"extractor": None if extractor is None else type(extractor).__name__,
                      **{k: int(counts.get(k, 0)) for k in ("turns", "llm_units", "fallback_turns", "fallback_units")},
                      "unavailable": unavailable, "pending_turns": self.store.count_pending(live.name)}
        with live.rw.read():
            views = live.views
            counters = [views.event.stats, views.affect.stats, views.time.stats]
            construction = {
                "turns": self.store.count_turns(live.name),
                "summaries_first": sum(c["summaries_first"] for c in counters),
                "summaries_refresh": sum(c["summaries_refresh"] for c in counters),
                "pending_updates": sum(c.get("pending_updates", 0) for c in counters),
                "summary_delta": self.config.summary_delta,
            }
            return {"space": live.name, "turns": construction["turns"], "amus": self.store.count_amus(live.name),
                    "views": views.shape(), "construction": construction, "extraction": extraction,
                    "input": {k: int(self.store.get_space_meta(live.name, k) or 0) for k in (REPLACED_KEY, SKIPPED_KEY)}}

    def index_info(self, space: str = "default") -> dict:
        """The space's live indexes: `generation` (the store write they reflect), `saved` (the
        generation the derived files on disk hold, None if not written or stale), their sizes and
        `bm25_stemmer`, the stemmer their BM25 tokens were built with."""
        live = self._space(self._known_space(space))
        with live.rw.read():
            return {"generation": live.generation, "saved": live.saved_generation,
                    "amus": len(live.index.amu_of), "turns": len(live.turns),
                    "routing_modes": {v: ix.mode for v, ix in live.index.routing.items()},
                    "bm25_stemmer": live.index.amu_lex.stemmer}

    def get(self, amu_id: str, space: str = "default") -> AMU:
        """One AMU by id (any status); KeyError if absent."""
        found = self.store.amus(self._known_space(space), status=None, amu_ids=[amu_id])
        if not found:
            raise UnknownIdError(f"no AMU {amu_id!r} in space {space!r}")
        return found[0]

    def list(self, space: str = "default", status: str | None = "active") -> list[AMU]:
        """AMUs of a space in insertion order (status=None: all statuses)."""
        return self.store.amus(self._known_space(space), status=status)

    def turns(self, space: str = "default", turn_ids: list[str] | None = None) -> list[Turn]:
        """Raw stored turns of a space in arrival order."""
        return self.store.turns(self._known_space(space), turn_ids=turn_ids)

    def delete(self, space: str = "default", amu_id: str | None = None, *, turn_id: str | None = None) -> int:
        """Forget: one unit (`amu_id`), one turn and every unit drawn from it (`turn_id`), or,
        with neither, the whole space. Returns how many units went. The text leaves every copy
        (DESIGN §11): unit and turn rows and vectors, the vector caches (the store's and this
        process's), LLM cache entries built from it, every node summary and representative list
        that may quote the units, wherever they sit now (recomputed), the search indexes and
        their derived files; deleted rows are zeroed (`secure_delete`) and the write-ahead log
        is truncated. A unit's sentences are also cut from its source turn (see `etamem.forget`):
        when they cannot be told apart, the whole turn goes with its units. KeyError when the
        unit or turn is not there."""
        from .forget import forget_targets, plan_forget
        from .retrieval import turn_text

        if amu_id is not None and turn_id is not None:
            raise ValueError("delete: give amu_id or turn_id, not both")
        space = self._known_space(space)
        with self._writing(space) as live:
            if amu_id is None and turn_id is None:
                return self._delete_space(live)
            units, sources = forget_targets(self.store, space, amu_id, turn_id)
            plan = plan_forget(self.store, space, units, sources, whole_turns=turn_id is not None)
            vecs = (self.text_encoder.encode([turn_text(t) for t in plan.rewritten]) if plan.rewritten
                    else np.zeros((0, 0), np.float32))
            from .fta.engine import forget_extras

            extras = forget_extras(self.store, space, plan.units, plan.dropped, plan.rewritten)
            with blas_threads(self.config.blas_threads):
                gone = live.forget(self.store, [u.amu_id for u in plan.units], plan.dropped, plan.rewritten, vecs,
                                   plan.cache_keys, extras)
            self._forget_vectors(space, plan.cache_keys)
            self._after_forget(space, plan.quoted, [t.turn_id for t in sources])
            return gone

    def _delete_space(self, live: LiveSpace) -> int:
        from .forget import cache_keys

        space = live.name
        with live.rw.write():
            units = self.store.amus(space, status=None)
            self.store.delete_space(space, cache_keys=cache_keys(units, self.store.turns(space)))
            live.broken = True  # any holder of this object must not use it again
            with self._lock:
                self._live.pop(space, None)
        self._forget_vectors(space)
        self._after_forget(space, None, None)
        self._file_lock.remove(space)  # held by this write: a writer waiting for it locks a new file
        return len(units)

    def _after_forget(self, space: str, texts: list[str] | None, turn_ids: list[str] | None) -> None:
        """The copies outside the store's rows: derived files (rewritten at the next checkpoint),
        LLM cache entries (all of the space's when `texts` is None), the WAL files."""
        if self.path is not None:
            derived.drop(self.path, space, self.store.name_salt())
        from .llm import forget_cached

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

    # --- search and answers ----------------------------------------------------------------
    def _encode_query(self, query: str):
        """(d,) float32 query vector; a query's vector is not written to the store's cache."""
        return self._encode_queries([query])[0]

    def _encode_queries(self, texts: list[str]):
        """(n, d) float32 vectors of query texts, not written to the store's cache."""
        enc = self.text_encoder
        return enc.encode(texts, persist=False) if isinstance(enc, CachedEncoder) else enc.encode(texts)

    def search(self, query: str, space: str = "default", top_k: int | None = None,
               now: datetime | str | None = None) -> list[Hit]:
        """Best AMUs of the space for the query, best first (see `retrieve`)."""
        return self.retrieve(query, space, top_k=top_k, now=now).hits

    def retrieve(self, query: str, space: str = "default", *, top_k: int | None = None,
                 now: datetime | str | None = None, views: tuple[str, ...] = ("event", "affect", "time"),
                 routing: str | None = None, fallback: bool = True, trace: bool = False) -> SearchResult:
        """Entropy-routed hierarchical retrieval with its routing weights (DESIGN §8).

        `top_k` AMUs are shared across `views` by `routing` ("entropy" | "mean", default from
        the config), found by beam search (width `beam_width`, score (1 - beta) * cos + beta
        * BM25n), merged and ranked. `now` is the question date for temporal expressions.
        When `fallback` is on and the retrieval confidence (`fallback_confidence`: best score or
        agreement with the raw-turn index) is below `fallback_threshold`, or nothing is found,
        the best raw turns are added as hits with `views == ("raw",)` (or fused, see
        `fallback_fusion`). A read: turns still pending (see `flush`) are not processed, only
        counted in `SearchResult.pending_turns`. Every hit carries its `source_turns`. A space
        with nothing stored yet gives an empty result (not an error).
        """
        query = validate_query(query, self.config.max_turn_chars)
        k = self.config.top_k if top_k is None else validate_top_k(top_k)
        bad = [v for v in views if v not in ("event", "affect", "time")]
        if bad or not views:
            raise ValueError(f"views: expected a non-empty subset of event, affect, time; got {views!r}")
        when = None if now is None else parse_timestamp(now, self.config.default_timezone, field="now")
        name = self._name(space)

        def run() -> SearchResult:
            with self._scoped(name):
                if self.config.method == "fta":
                    return self._retrieve_fta(query, space, k, when, trace)
                return self._retrieve_views(query, space, k, when, views, routing, fallback, trace)

        try:
            try:
                result = run()
            except (UnknownSpaceError, UnknownIdError):
                raise
            except Exception as exc:  # noqa: BLE001 - re-raised unless the derived files are to blame
                if not self._distrust_files(name, exc):
                    raise
                result = run()
        except UnknownSpaceError:  # nothing stored yet: nothing found (an agent's first turn)
            return SearchResult([], {}, {}, {})
        live = self._live.get(name)
        if live is not None:
            live.from_files = False  # its first search went well: later errors are not the files'

        return replace(result, hits=with_sources(result.hits, lambda ids: self._turns_by_id(space, ids)))

    def _turns_by_id(self, space: str, turn_ids: Iterable[str]) -> dict[str, Turn]:
        """Stored turns by id: from the live raw-turn index, the others (pending) from the store."""
        live = self._live.get(self._name(space))
        found: dict[str, Turn] = {}
        if live is not None:
            with live.rw.read():
                found = {t: turn for t in turn_ids if (turn := live.turns.turn(t)) is not None}
        missing = [t for t in turn_ids if t not in found]
        if missing:
            found.update((t.turn_id, t) for t in self.store.turns(self._name(space), turn_ids=missing))
        return found

    def _retrieve_views(self, query: str, space: str, k: int, when: datetime | None, views: tuple[str, ...],
                        routing: str | None, fallback: bool, trace: bool) -> SearchResult:
        """ETAMem retrieval over the views (see `retrieve`)."""
        from .retrieval import query_vector, search_space

        live = self._readable_space(space)
        with live.rw.read():
            named = live.index.named_speakers(query)
        # models run outside the space's locks; the text vector mixes in the query without the names
        q_text = query_vector(self._encode_queries, query, named, self.config.query_name_mix)
        q_affect = self.affect_tagger.tag([query]).embeddings[0] if "affect" in views else q_text
        pending = self.store.count_pending(live.name)
        if pending:
            log.info("space %s: %d turns are pending (not searchable until add/flush processes them)",
                     live.name, pending)
        with live.rw.read(), blas_threads(self.config.blas_threads):
            return search_space(live.index, live.turns, query, q_text, q_affect, k, self.config, live.name,
                                now=when, views=views, routing=routing, fallback=fallback, trace=trace,
                                pending=pending, named=named)

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

    def _readable_space(self, space: str):
        """The live space, after checking that this config's method can read the kind of units
        it holds (ValueError naming the setting to use otherwise)."""
        live = self._space(self._known_space(space))
        units = self.store.get_space_meta(live.name, "units")
        if self.config.method == "fta" and units == "amu":
            raise ValueError(f"space {live.name!r} holds AMUs, not FTA units: search it with method='etamem'")
        if units == "fta" and self.config.unit_kind() != "fta":
            raise ValueError(f"space {live.name!r} holds FTA units: search it with method='fta' "
                             "(or units='fta' for ETAMem's views over them)")
        return live

    def _retrieve_fta(self, query: str, space: str, k: int, when: datetime | None, trace: bool) -> SearchResult:
        """FTA-Mem retrieval (`etamem.fta.search.search_fta`) after the LLM's query rewrite; the
        open session's turns that no unit cites yet are ranked with the units as provisional hits
        (`views == ("provisional",)`, see `etamem.fta.search`)."""
        from .fta.packet import rewrite_query
        from .fta.search import prepare_provisional, search_fta

        live = self._readable_space(space)
        text = rewrite_query(self.llm, query, now=when) if self.llm is not None and self.config.fta_rewrite else query
        q_vec = self._encode_query(text)  # models run outside the space's locks
        polarity = self.affect_tagger.tag([query]).polarities[0]
        provisional = prepare_provisional(self.store, live.name, self.affect_tagger, self._encode_queries)
        pending = self.store.count_pending(live.name)
        with live.rw.read(), blas_threads(self.config.blas_threads):
            return search_fta(live, self.store, text, q_vec, k, self.config, now=when, polarity=polarity,
                              trace=trace, pending=pending, provisional=provisional)

    def history(self, unit_id: str, space: str = "default") -> list:
        """The versions of an FTA unit, oldest first: the units joined to it by updates /
        contradicts / followup_of links (either way, any distance), itself included, each an
        `etamem.fta.FTAUnit` with its lifecycle status. UnknownIdError when the space holds no
        FTA unit `unit_id`."""
        from .fta.engine import unit_history

        return unit_history(self.store, self._known_space(space), unit_id)

    def links(self, space: str = "default", unit_id: str | None = None) -> list:
        """The FTA relation links of the space (those touching `unit_id`), oldest first, as
        `etamem.fta.Link` (from the newer unit to the older one, with a confidence)."""
        from .fta.links import Link

        space = self._known_space(space)
        return [Link(*row) for row in self.store.unit_links(space, None if unit_id is None else [unit_id])]

    def answer(self, question: str, space: str = "default", now: datetime | str | None = None,
               top_k: int | None = None) -> Answer:
        """Answer from memory: an LLM answer grounded in a context packet (evidence AMUs with
        dates and views, their source turns, Time summaries) when an LLM is configured, else
        the best evidence sentences with a note saying no LLM is configured. If the LLM says
        the memories lack the answer, it is asked once more with raw turns added."""
        with self._scoped(self._name(space)):  # the answer's LLM cache entries belong to the space
            return self._answer(question, space, now, top_k)

    def _answer(self, question: str, space: str, now, top_k: int | None) -> Answer:
        from .answering import says_missing

        when = None if now is None else parse_timestamp(now, self.config.default_timezone, field="now")
        result = self.retrieve(question, space=space, top_k=top_k, now=when)
        if not result.hits and not self.store.has_space(self._name(space)):
            return Answer("No memories found.", [], False, "nothing is stored in this space yet")
        live = self._space(self._known_space(space))
        if self.config.method == "fta":
            from .fta.search import answer_fta

            return answer_fta(question, self.store, live.name, result.hits, self.config, self.llm, when)
        ans = self._compose(question, live.name, result.hits, when)
        if ans.llm_used and says_missing(ans.text) and not result.fallback_used:
            hits = self.with_raw_turns(question, result.hits, space)
            retry = self._compose(question, live.name, hits, when)
            cost = {k: ans.cost.get(k, StageCost()) + retry.cost.get(k, StageCost())
                    for k in set(ans.cost) | set(retry.cost)}
            ans = Answer(retry.text, retry.hits, True, "asked again with raw turns (fallback)", cost)
        return ans

    def with_raw_turns(self, question: str, hits: list[Hit], space: str = "default") -> list[Hit]:
        """`hits` (as many) with the space's best raw turns fused in by the fallback policy
        (`fallback_fusion`), whatever the confidence: what `answer` asks again with when the
        LLM says the memories lack the answer."""
        from .retrieval import with_fallback

        live = self._space(self._known_space(space))
        with self._scoped(live.name):
            q_text = self._encode_query(question)  # models run outside the space's locks
        with live.rw.read():
            fused = with_fallback(hits, live.turns, question, q_text, len(hits), self.config, live.name)
        return with_sources(fused, lambda ids: self._turns_by_id(live.name, ids))

    def context(self, query: str, space: str = "default", *, top_k: int | None = None,
                now: datetime | str | None = None) -> str:
        """The prompt-ready memory an agent puts in its system prompt for `query`: the best
        `top_k` (default `Config.context_top_k`) memories, best first, each with the date it was
        said and its source message (`etamem.context.render_context`; FTA-Mem: its four-section
        packet). A space with nothing stored yet renders as an empty memory."""
        return self.context_packet(query, space, top_k=top_k, now=now).text

    def context_packet(self, query: str, space: str = "default", *, top_k: int | None = None,
                       now: datetime | str | None = None) -> MemoryContext:
        """`context`'s text with the hits it renders (one retrieval for both)."""
        k = self.config.context_top_k if top_k is None else validate_top_k(top_k)
        when = None if now is None else parse_timestamp(now, self.config.default_timezone, field="now")
        hits = self.retrieve(query, space, top_k=k, now=when).hits
        if self.config.method == "fta" and hits:
            from .fta.search import packet_for

            return MemoryContext(packet_for(self.store, self._name(space), hits, self.config), hits)
        return MemoryContext(render_context(hits, now=when), hits)

    def warm(self) -> "Memory":
        """Load the models now (text encoder, affect tagger, extractor, the LLM client) and the
        BM25 tokeniser (bm25s: 0.5 s of imports), so the first request does not pay for them;
        returns self."""
        from .retrieval.lexical import splitter

        self._encode_queries(["warm up"])
        self.affect_tagger.tag(["warm up"])
        splitter(self.config.bm25_stemmer)("warm up")
        _ = self.extractor
        return self

    def _compose(self, question: str, space: str, hits: list[Hit], when: datetime | None) -> Answer:
        from .answering import compose_answer

        sources = {t.turn_id: t for h in hits for t in h.source_turns}
        return compose_answer(question, hits, sources, llm=self.llm, style=self.config.answer_style,
                              question_date=when, n_sentences=self.config.answer_evidence_sentences,
                              time_summaries=self.time_summaries(space, hits))

    def time_summaries(self, space: str, hits: list[Hit]) -> str:
        """Summaries of the day and week nodes the hits' sessions hang under, oldest first (the
        Time view's part of an answer prompt)."""
        live = self._space(self._name(space))
        from .answering import time_summaries

        with live.rw.read():
            return time_summaries(live.views.time, hits)

    def reindex(self) -> dict[str, dict]:
        """Re-encode every space of the store with this Memory's text encoder and affect tagger
        (see `etamem.reindex`) and record them as the store's models; returns counts per space.
        The store must not be in use by another process meanwhile for searches to stay right."""
        from .reindex import reindex_space, reindex_store

        tenancy.require_unrestricted("reindex")

        with self._lock:
            self._identity_checked.update(("text", "affect"))  # the point is to change them
        enc, tagger = self.text_encoder, self.affect_tagger

        def one(space: str) -> dict:
            with self._locked(space):
                with blas_threads(self.config.blas_threads):
                    counts = reindex_space(self.store, space, self.config, enc, tagger)
                with self._lock:
                    live = self._live.pop(space, None)
                if live is not None:
                    live.broken = True
                if self.path is not None:
                    derived.drop(self.path, space, self.store.name_salt())
            return counts

        return reindex_store(self.store, enc, tagger, one)

    # --- lifecycle ----------------------------------------------------------------------------
    def checkpoint(self) -> list[str]:
        """Save the search indexes of the spaces changed since they were last saved as derived
        files beside the store (see `etamem.derived`), so the next open loads them instead of
        re-indexing; returns the spaces written. `close` calls it."""
        if self.path is None:
            return []
        written = []
        for live in list(self._live.values()):
            with self._locked(live.name):
                if live.save_derived(self.path, self.store):
                    written.append(live.name)
        return written

    def close(self) -> None:
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

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
