"""`Memory`: the one entry class, a facade over the engine and the chosen method.

    mem = Memory("store_dir")            # or Memory() in memory, or Memory("postgresql://...")
    mem.add(turns, space="user-42")      # raw turns stored first, then units made and indexed
    hits = mem.search("question", space="user-42")
    ans = mem.answer("question", space="user-42", now="2023-06-01")

Models (text encoder, affect tagger, LLM) load lazily on first use and can be injected. All
public methods are thread-safe, and several processes may use one store (see
`etamem.engine`: live spaces, locks, store stamps). Writes go through `etamem.writing`;
building units, search, answers and context are the method's (`etamem.method`: ETAMem's views
or FTA-Mem, chosen once by the config).
"""
from __future__ import annotations

import logging
from dataclasses import asdict, replace
from datetime import datetime
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from etamem import tenancy, writing
from etamem.arg_order import resolve_delete, resolve_update
from etamem.context import with_sources
from etamem.engine import LLM_CACHE_FILE, Engine  # noqa: F401 - LLM_CACHE_FILE: the LLM cache's file name
from etamem.extraction.extractors import REJECTION_STATS
from etamem.filters import Filters, resolve_filters
from etamem.ingest.inputs import check_id, validate_query, validate_top_k
from etamem.ingest.timeparse import parse_timestamp
from etamem.live import derived
from etamem.live.space import LiveSpace
from etamem.method import stored_units
from etamem.records import (
    AMU,
    Answer,
    Hit,
    Link,
    MemoryContext,
    SearchResult,
    Turn,
    UnknownIdError,
    UnknownSpaceError,
)
from etamem.retrieval.rank_scores import rank_scores, with_similarity
from etamem.retrieval.slot_queries import expand_query
from etamem.store.sqlite import STORE_FILE  # noqa: F401 - STORE_FILE: the store's file name
from etamem.threads import blas_threads
from etamem.views import SpaceViews
from etamem.writing import REPLACED_KEY, SKIPPED_KEY

log = logging.getLogger(__name__)
_UNKNOWN_SPACE_WARNED: set[str] = set()  # a search of a space the store does not hold: warned once per process


def unknown_space_once(space: str) -> None:
    """One WARNING per process for a search of a space the store does not hold (then DEBUG)."""
    level = logging.DEBUG if _UNKNOWN_SPACE_WARNED else logging.WARNING
    _UNKNOWN_SPACE_WARNED.add(space)
    log.log(level, "search: no space %r in the store: nothing found. A new space is made by its first add; "
            "if the name is mistyped, search(..., strict=True) raises (reported once per process)", space)


class Memory(Engine):
    """Long-term memory of multi-session conversations, partitioned by `space`.

    The one entry class: `add` stores turns and makes their units, `search` / `retrieve` find them,
    `context` renders them for a prompt, `answer` answers from them, `delete` / `update` forget or
    revise them. Models load lazily on first use (`warm` loads them now). A context manager:
    leaving `with` calls `close`. Every public method is thread-safe, and several processes may
    use one store (see `etamem.engine`). Inside an `etamem.tenancy.scope`, a space the scope does
    not allow raises `SpaceForbidden` (a PermissionError); a bad space name raises ValueError.

    Args:
        path: Where the store lives. A directory holding `memory.sqlite` (and the LLM cache);
            a PostgreSQL URL (`postgresql://...`: the store in that database, see
            `etamem.store.postgres`; the LLM cache only at `config.llm_cache_path`); None
            (default): in memory.
        config: A `Config`, or a dict for `Config.from_dict`; None (default): `Config()`.
        text_encoder (etamem.models.encoders.TextEncoder | None): An injected text encoder (tests, custom models); None (default): built from
            `config.text_encoder` on first use.
        affect_tagger (etamem.models.affect.AffectTagger | None): An injected affect tagger; None (default): built from `config.affect_backend`
            on first use.
        llm (etamem.models.llm.LLMClient | None): An injected LLM client; None (default): built from `config.llm_model` (else
            `$ETAMEM_LLM_MODEL`); with neither, no LLM is used.
        extractor (etamem.extraction.extractors.RuleExtractor | None): An injected unit extractor (a
            `RuleExtractor`, an `LLMExtractor` or one with their `extract` method); None
            (default): chosen by `config.extractor` (the LLM extractor when an LLM is configured,
            else the rule extractor).

    Raises:
        ValueError: An unknown config key or a bad config value (`Config.from_dict`), or a `path`
            that exists and is not a directory.
    """

    def views(self, space: str = "default") -> SpaceViews:
        """The Event / Affect / Time views of a space (loaded from the store on first use).

        Args:
            space: The space name (default "default").

        Returns:
            The live `SpaceViews` of the space (shared with the engine: read it, do not change it).
        """
        return self.live_space(self.space_name(space)).views

    def add(self, turns: Iterable[Turn | Mapping[str, Any]] | Turn | Mapping[str, Any],
            space: str = "default") -> list[AMU]:
        """Store turns, then extract, tag and index their AMUs; returns the new AMUs.

        Idempotent: a turn whose `turn_id` is already stored with the same content is not
        stored again and its units are returned (a retry after a network error is safe). Turns
        without an id get a new one (`t<seq>`) each time: give ids to make retries safe.
        Raw turns are durable before extraction: when the LLM gives no reply they stay pending and
        `add` returns the units it made (see `etamem.writing.process_pending`); any other model
        failure raises, the turns pending likewise; the next `add`/`flush` processes them. A new
        session id ends the space's open sessions.

        Args:
            turns: One turn or an iterable of turns, each a `Turn`, a turn dict (`speaker`, `text`,
                optional `session_id`, `timestamp`, `turn_id`, `extra`, `metadata`) or a chat message
                (`role`, `content`, ...). Missing fields get defaults: the space's open session (a new
                one after `Config.session_gap_minutes` of silence), the time of the call, a new id.
            space: The space to add to (default "default"); made on its first turn.

        Returns:
            The AMUs made from the new turns (and from pending turns processed with them), or the
                stored units of turns that were already stored; [] for no turns.

        Raises:
            ValueError: Bad input, naming the field (e.g. `turns[2].timestamp`), with nothing from the
                call stored; a `turn_id` already stored with other content (naming both); models other
                than the store's; a bad space name.
        """
        return writing.add(self, turns, space)

    def check(self, turns: Iterable[Turn | Mapping[str, Any]] | Turn | Mapping[str, Any], space: str = "default",
              *, labels: Sequence[str] | None = None, new_space: bool = False) -> list[Turn]:
        """Validate turns as `add` would, storing nothing.

        Args:
            turns: As `add`'s: one turn or an iterable of `Turn`s, turn dicts or chat messages.
            space: The space the turns would go to (default "default").
            labels: Names for the turns in error messages, one per turn (e.g. a file and line); None
                (default): `turns[i]`.
            new_space: Check as if the space were empty (before replacing it); default False.

        Returns:
            The turns `add` would store now: those not already stored, with the defaults `add` would
                give them now.

        Raises:
            ValueError: The first bad field (named as `labels[i]` when given), or a turn id stored with
                other content.
        """
        return writing.check(self, turns, space, labels=labels, new_space=new_space)

    def flush(self, space: str = "default", *, timeout: float | None = None) -> list[AMU]:
        """Process the space's pending turns (after the LLM was unreachable or a model failed),
        then wait for its queued LLM extraction (`Config.llm_background`) to land.

        Args:
            space: The space (default "default").
            timeout: Most seconds to wait for the queue (None, the default: until it is empty or
                the LLM gives no reply; then the turns stay queued, searchable by their rule units,
                and `stats(space)["extraction"]["queued_turns"]` counts them).

        Returns:
            The new units (AMUs) made from pending turns, and the units now in place of the turns
                that were queued when the call began.

        Raises:
            UnknownSpaceError: The store holds no such space (a ValueError).
        """
        with self.writing_to(self.known_space(space)) as live:
            new = writing.process_pending(self, live.name, live)
        queue = self.llm_queue
        if queue is None:
            return new
        queued = [t.turn_id for t in self.store.queued_turns(live.name, 1 << 62)]
        if queued and not queue.wait(live.name, timeout):
            log.warning("space %s: %d turns still queued for the LLM (%s); their rule units stay searchable",
                        live.name, self.store.count_queued(live.name), queue.stats()["last_error"] or "timeout")
        made = {a.amu_id for a in new}
        return new + [a for a in self.store.amus_of_turns(live.name, queued) if a.amu_id not in made]

    def end_session(self, space: str = "default") -> list[str]:
        """Close the space's open sessions (session-end maintenance).

        Pending turns are processed first; a session whose turns are still pending (e.g. the LLM is
        down) stays open.

        Args:
            space: The space (default "default").

        Returns:
            The ids of the sessions closed.

        Raises:
            UnknownSpaceError: The store holds no such space (a ValueError).
        """
        with self.writing_to(self.known_space(space)) as live:
            writing.process_pending(self, live.name, live, complete=set(self.store.open_sessions(live.name)))
            waiting = {t.session_id for t in self.store.turns(live.name, pending_only=True)}  # e.g. LLM down
            open_ids = [s for s in self.store.open_sessions(live.name) if s not in waiting]
            writing.end_sessions(self, live, open_ids)
            return open_ids

    def stats(self, space: str = "default") -> dict:
        """Per-view shape of a space, with turn and AMU counts and the extraction counters.

        Args:
            space: The space (default "default").

        Returns:
            A dict: `space`, `turns`, `amus`; `views`: per view AMUs, nodes, leaves, depth, fan-out,
                thresholds (event, affect), months/weeks/days/sessions (time); `construction`: turns and
                summary counters; `extraction`: the extractor's class (None if it cannot be built), its
                counters since this Memory opened (all spaces: `turns` extracted — again after a
                deferral —, `llm_units`, `fallback_turns` / `fallback_units` made by the rule fallback for
                unusable LLM replies (those turns also in `unusable_turns`) and for replies with units their
                turn does not support,
                `rejected_units` — those units — and per reason `rejected_copied_example` /
                `rejected_invented_entity` / `rejected_swapped_speaker` (see
                `etamem.extraction.grounding`); zeros for extractors without counters), `unavailable` (times
                extraction was deferred because the LLM gave no reply), this space's `pending_turns` and
                `queued_turns` (searchable by their rule units, their LLM extraction queued: see
                `Config.llm_background`), `queue` (None without the queue, else `LLMQueue.stats()` of
                `etamem.extraction.background`: turns landed, kept by the rules, gone, unavailable,
                errors, `retry_in_s`, `last_error`, workers) and, with an LLM, `llm`: per stage
                (extract, supersession, summarise, answer, ...) the calls, cached calls, prompt and
                completion tokens and seconds of this Memory's client;
                `input`: control characters replaced in the space's turn texts and chat messages skipped
                (no text, system roles), since the space was made.

        Raises:
            UnknownSpaceError: The store holds no such space (a ValueError).
        """
        live = self.live_space(self.known_space(space))
        try:
            extractor = self.extractor  # the one writes use (built if needed: no model call)
        except ValueError:  # extractor="llm" without a model: writes would raise the same
            extractor = None
        with self._lock:
            unavailable = self.extraction_stats.get("unavailable", 0)
        counts = dict(getattr(extractor, "stats", None) or {})
        extraction = {"extractor": None if extractor is None else type(extractor).__name__,
                      **{k: int(counts.get(k, 0)) for k in ("turns", "llm_units", "fallback_turns", "fallback_units",
                                                            "unusable_turns", *REJECTION_STATS)},
                      "unavailable": unavailable, "pending_turns": self.store.count_pending(live.name),
                      "queued_turns": self.store.count_queued(live.name)}
        queue = None if extractor is None else self.llm_queue
        extraction["queue"] = None if queue is None else queue.stats()
        if self.llm is not None:
            extraction["llm"] = {stage: asdict(cost) for stage, cost in sorted(self.llm.usage().items())}
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
                    "input": {k: int(self.store.get_space_meta(live.name, k) or 0)
                              for k in (REPLACED_KEY, SKIPPED_KEY)}}

    def index_info(self, space: str = "default") -> dict:
        """The space's live indexes.

        Args:
            space: The space (default "default").

        Returns:
            A dict: `generation` (the store write they reflect), `saved` (the generation the derived
                files on disk hold, None if not written or stale), their sizes (`amus`, `turns`),
                `routing_modes` / `turn_index_mode` ("exact" or "hnsw") and `bm25_stemmer`, the stemmer
                their BM25 tokens were built with.

        Raises:
            UnknownSpaceError: The store holds no such space (a ValueError).
        """
        live = self.live_space(self.known_space(space))
        with live.rw.read():
            return {"generation": live.generation, "saved": live.saved_generation,
                    "amus": len(live.index.amu_of), "turns": len(live.turns),
                    "routing_modes": {v: ix.mode for v, ix in live.index.routing.items()},
                    "turn_index_mode": live.turns.index.dense.mode,
                    "bm25_stemmer": live.index.amu_lex.stemmer}

    def get(self, amu_id: str, space: str = "default") -> AMU:
        """One AMU by id, with its status ("superseded" when a newer unit replaces it).

        Args:
            amu_id: The unit's id.
            space: The space (default "default").

        Returns:
            The `AMU`.

        Raises:
            UnknownIdError: The space holds no such unit (a KeyError).
            UnknownSpaceError: The store holds no such space (a ValueError).
        """
        from etamem.facts.current_first import with_status

        space = self.known_space(space)
        found = self.store.amus(space, status=None, amu_ids=[check_id(amu_id, "amu_id")])
        if not found:
            raise UnknownIdError(f"no AMU {amu_id!r} in space {space!r}")
        return with_status(found, self.store.unit_links(space, [amu_id]))[0]

    def list(self, space: str = "default", status: str | None = None) -> list[AMU]:
        """AMUs of a space in insertion order, each with its status.

        Superseded units stay stored, indexed and retrievable like the others.

        Args:
            space: The space (default "default").
            status: None (default): all of them; "active": the current ones; "superseded": those a
                newer unit replaces.

        Returns:
            The `AMU`s.

        Raises:
            ValueError: Another `status`.
            UnknownSpaceError: The store holds no such space (a ValueError).
        """
        from etamem.facts.current_first import with_status

        space = self.known_space(space)
        if status not in (None, "active", "superseded"):
            raise ValueError(f"status: expected 'active', 'superseded' or None, got {status!r}")
        units = with_status(self.store.amus(space), self.store.unit_links(space))
        return units if status is None else [u for u in units if u.status == status]

    def turns(self, space: str = "default", turn_ids: list[str] | None = None) -> list[Turn]:
        """Raw stored turns of a space in arrival order.

        Args:
            space: The space (default "default").
            turn_ids: Only these turns (None, the default: all of them).

        Returns:
            The `Turn`s.

        Raises:
            UnknownSpaceError: The store holds no such space (a ValueError).
        """
        return self.store.turns(self.known_space(space), turn_ids=turn_ids)

    def delete(self, amu_id: str | None = None, space: str = "default", *, turn_id: str | None = None) -> int:
        """Forget one unit, one turn and every unit drawn from it, or the whole space.

        The text leaves every copy (see docs/design.md, 'Invariants'): unit and turn rows and
        vectors, the vector caches (the store's and this process's), LLM cache entries built from
        it, every node summary and representative list that may quote the units, wherever they sit
        now (recomputed), the search indexes and their derived files; deleted rows are zeroed
        (`secure_delete`) and the write-ahead log is truncated. A unit's sentences are also cut from
        its source turn (see `etamem.forget`): when they cannot be told apart, the whole turn goes
        with its units. The old order `delete(space, amu_id)` is still read as meant, with a
        DeprecationWarning (see `etamem.arg_order`).

        Args:
            amu_id: The unit to forget. With neither `amu_id` nor `turn_id` (the default), the whole
                space goes: `delete(space="user-42")`.
            space: The space (default "default").
            turn_id: The turn to forget, with every unit drawn from it (keyword only).

        Returns:
            How many units went.

        Raises:
            ValueError: Both `amu_id` and `turn_id` given, or either is `.` or `..`.
            UnknownIdError: The unit or turn is not there (a KeyError).
            UnknownSpaceError: The store holds no such space (a ValueError).
        """
        from etamem.forget import forget_targets, plan_forget
        from etamem.retrieval import turn_text

        amu_id, space = resolve_delete(self, amu_id, space, turn_id)
        if amu_id is not None and turn_id is not None:
            raise ValueError("delete: give amu_id or turn_id, not both")
        check_id(amu_id, "amu_id")
        check_id(turn_id, "turn_id")
        space = self.known_space(space)
        with self.writing_to(space) as live:
            if amu_id is None and turn_id is None:
                return self._delete_space(live)
            units, sources = forget_targets(self.store, space, amu_id, turn_id)
            units_kind = stored_units(self.method, self.store, space)  # what the space holds decides
            plan = plan_forget(self.store, space, units, sources, whole_turns=turn_id is not None,
                               keep_mentioned=units_kind.kind == "amu")
            vecs = (self.text_encoder.encode([turn_text(t) for t in plan.rewritten]) if plan.rewritten
                    else np.zeros((0, 0), np.float32))
            extras = units_kind.forget_extras(self.store, space, plan.units, plan.dropped, plan.rewritten)
            with blas_threads(self.config.blas_threads):
                gone = live.forget(self.store, [u.amu_id for u in plan.units], plan.dropped, plan.rewritten, vecs,
                                   plan.cache_keys, extras)
            self._forget_vectors(space, plan.cache_keys)
            self._after_forget(space, plan.quoted, [t.turn_id for t in sources])
            return gone

    def update(self, turn_id: str, text: str, space: str = "default", *, forget_old: bool = False,
               timestamp: datetime | str | None = None):
        """Replace a turn's text, the old version kept as history (or forgotten).

        The new text is stored as a new turn (same session and speaker) and extracted; its units
        supersede the old turn's units, so `history(unit)` lists old -> new. Any version's id names
        the current one; the current text again is a no-op. AMU spaces only. The old order
        `update(space, turn_id, text)` is still read as meant, with a DeprecationWarning.

        Args:
            turn_id: The turn to revise (any of its versions' ids).
            text: The new text (non-empty).
            space: The space holding the turn (default "default").
            forget_old: Delete the old turn and the earlier versions it revised, as
                `delete(turn_id=..., space=...)` does (keyword only; default False: kept as history).
            timestamp: The new turn's time (a datetime or a timestamp string; default None: now).

        Returns:
            (etamem.facts.revisions.Update): the current turn's id, its units' ids, the ids of the
                units they supersede and whether anything `changed`.

        Raises:
            UnknownSpaceError: The store holds no such space (a ValueError).
            UnknownIdError: The space holds no such turn (a KeyError).
            ValueError: An empty `text` or `turn_id`, a bad `timestamp`, or a space of FTA units.
        """
        from etamem.facts.revisions import update

        turn_id, text, space = resolve_update(self, turn_id, text, space)
        return update(self, space, turn_id, text, forget_old=forget_old, timestamp=timestamp)

    def _delete_space(self, live: LiveSpace) -> int:
        from etamem.forget import cache_keys

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

    def search(self, query: str, space: str = "default", top_k: int | None = None,
               now: datetime | str | None = None, *, filters: Filters | Mapping[str, Any] | None = None,
               strict: bool = False) -> list[Hit]:
        """Best AMUs of the space for the query, best first (`retrieve`'s hits).

        A space with nothing stored yet gives [] (not an error; a WARNING the first time in a
        process, naming it: a mistyped space looks the same), or with `strict` UnknownSpaceError.

        Args:
            query: The question or text to search for (non-empty; at most `Config.max_turn_chars`).
            space: The space (default "default").
            top_k: How many hits, 1..10,000 (default None: `Config.top_k`).
            now: The question date, for temporal expressions ("last week"): a datetime or a
                timestamp string (default None: none).
            filters: A `Filters` or its dict form (speaker / role, session_id, since, until,
                metadata), applied inside the search (keyword only; default None: no filter).
            strict: Raise UnknownSpaceError for a space the store does not hold (keyword only;
                default False: [] and a WARNING once per process).

        Returns:
            The `Hit`s, each with its AMU, score, views and source turns.

        Raises:
            ValueError: A bad argument, naming it (`query`, `top_k`, `now`, `filters.since`, ...).
            UnknownSpaceError: With `strict`, a space the store does not hold (a ValueError).
        """
        return self.retrieve(query, space, top_k=top_k, now=now, filters=filters, strict=strict).hits

    def retrieve(self, query: str, space: str = "default", *, top_k: int | None = None,
                 now: datetime | str | None = None, views: tuple[str, ...] = ("event", "affect", "time"),
                 routing: str | None = None, fallback: bool = True, trace: bool = False,
                 filters: Filters | Mapping[str, Any] | None = None, strict: bool = False) -> SearchResult:
        """Entropy-routed hierarchical retrieval with its routing weights.

        See docs/design.md, 'Query path'. `top_k` AMUs are shared across `views` by `routing`, found
        by beam search (width `beam_width`, score (1 - beta) * cos + beta * BM25n), merged and
        ranked. When `fallback` is on and the retrieval confidence (`fallback_confidence`: best score
        or agreement with the raw-turn index) is below `fallback_threshold`, or nothing is found, the
        best raw turns are added as hits with `views == ("raw",)` (or fused, see `fallback_fusion`).
        A read: turns still pending (see `flush`) are not processed, only counted in
        `SearchResult.pending_turns`. Every hit carries its `source_turns`. A space with nothing
        stored yet gives an empty result (not an error; a WARNING naming it the first time in a
        process, as a mistyped space looks the same), or with `strict` UnknownSpaceError.

        Args:
            query: The question or text to search for (non-empty; at most `Config.max_turn_chars`).
            space: The space (default "default").
            top_k: How many hits, 1..10,000 (keyword only; default None: `Config.top_k`).
            now: The question date for temporal expressions: a datetime or a timestamp string
                (default None: none).
            views: The views searched, a non-empty subset of ("event", "affect", "time") (default:
                all three).
            routing: "entropy" or "mean" (default None: `Config.routing`).
            fallback: Allow the raw-turn fallback (default True).
            trace: Record a per-view trace of the beam search in `SearchResult.traces` (default False).
            filters: A `Filters` or its dict form (speaker / role, session_id, since, until,
                metadata), applied inside the search: only matching units and raw turns are
                candidates, so `top_k` hits come back whenever that many units match (see
                docs/python-api.md, 'Metadata and filters'). Default None: no filter.
            strict: Raise UnknownSpaceError for a space the store does not hold (default False:
                an empty result, and a WARNING once per process).

        Returns:
            A `SearchResult`: the hits, best first, with the per-view weights, budgets and entropies,
                the parsed time window, the fallback confidence and whether it was used.

        Raises:
            ValueError: A bad argument, naming it (`query`, `top_k`, `views`, `now`, `filters.since`,
                ...).
            UnknownSpaceError: With `strict`, a space the store does not hold (a ValueError).
        """
        query = validate_query(query, self.config.max_turn_chars)
        k = self.config.top_k if top_k is None else validate_top_k(top_k)
        bad = [v for v in views if v not in ("event", "affect", "time")]
        if bad or not views:
            raise ValueError(f"views: expected a non-empty subset of event, affect, time; got {views!r}")
        when = None if now is None else parse_timestamp(now, self.config.default_timezone, field="now")
        unit_filter = resolve_filters(filters, self.config.default_timezone)
        name = self.space_name(space)

        searched = expand_query(query) if self.config.slot_queries else query  # "Where do I live?" widened

        def run() -> SearchResult:
            with self.scoped(name):
                return self.method.search(self, searched, space, k, when, views=views, routing=routing,
                                          fallback=fallback, trace=trace, filters=unit_filter)

        try:
            try:
                result = run()
            except (UnknownSpaceError, UnknownIdError):
                raise
            except Exception as exc:  # noqa: BLE001 - re-raised unless the derived files are to blame
                if not self._distrust_files(name, exc):
                    raise
                result = run()
            copies = self._collapse(name, result)
            if copies and len(result.hits) + copies >= k:  # two units of one fact (a store written before
                k += copies  # repeats were folded at write time): one kept, the ranking refilled
                result = run()
                self._collapse(name, result)
                k -= copies
                result = replace(result, hits=result.hits[:k])
        except UnknownSpaceError:  # nothing stored yet: nothing found (an agent's first turn), or a typo
            if strict:
                raise
            unknown_space_once(name)
            return SearchResult([], {}, {}, {})
        live = self._live.get(name)
        if live is not None:
            live.from_files = False  # its first search went well: later errors are not the files'
        hits = with_similarity(result.hits)  # the method's scores, before any re-ordering
        if self.config.current_first and hits:  # facts that changed: the current version first
            from etamem.facts.current_first import current_first

            def links(ids: list[str]) -> list:  # under a filter, only versions it lets through
                rows = self.store.unit_links(name, ids)
                if unit_filter is None or not rows:
                    return rows
                passing = self._passing(name, unit_filter, [r[0] for r in rows])
                return [r for r in rows if r[0] in passing]

            hits = current_first(hits, query, links,
                                 lambda ids: {a.amu_id: a for a in self.store.amus(name, amu_ids=ids)},
                                 windowed=result.window is not None,
                                 turn_units=lambda ids: self._turn_units(name, ids))
        hits = rank_scores(hits)  # Hit.score follows the ranking (docs/concepts.md, 'Scores')
        return replace(result, hits=with_sources(hits, lambda ids: self.turns_by_id(space, ids)))

    def _collapse(self, space: str, result: SearchResult) -> int:
        """Drop from `result.hits` (in place) the unit hits that restate a hit ranked above them
        (`etamem.facts.restatements.collapse_repeats`); how many went."""
        from etamem.facts.restatements import collapse_repeats

        live = self._live.get(space)
        if live is None or len(result.hits) < 2:
            return 0
        index = live.index

        def vector_of(unit_id: str):
            row = index.row_of.get(unit_id)
            return None if row is None else index.text_vecs[row]

        kept = collapse_repeats(result.hits, vector_of)
        gone = len(result.hits) - len(kept)
        if gone:
            result.hits[:] = kept
        return gone

    def _passing(self, space: str, unit_filter, unit_ids: list[str]) -> set[str]:
        """The ids among `unit_ids` of stored units that `unit_filter` lets through."""
        units = self.store.amus(space, status=None, amu_ids=list(dict.fromkeys(unit_ids))) if unit_ids else []
        turns = self.turns_by_id(space, list(dict.fromkeys(t for u in units for t in u.source_turn_ids)))
        return {u.amu_id for u in units if unit_filter.unit(u, turns.get)}

    def _turn_units(self, space: str, turn_ids: list[str]) -> dict[str, list[str]]:
        """turn id -> ids of the units drawn from it (`LiveSpace.units_of_turns`; {} if not live)."""
        live = self._live.get(space)
        return {} if live is None else live.units_of_turns(turn_ids)

    def history(self, unit_id: str, space: str = "default") -> list:
        """The versions of a fact, oldest first, `unit_id` included.

        Args:
            unit_id: Any version's id.
            space: The space (default "default").

        Returns:
            For AMUs, the units joined to it by `supersedes` links (either way, any distance), each an
                `AMU` whose status says whether it is current ("active") or "superseded". FTA units: the
                units joined by supersedes / updates / contradicts / followup_of links, each an
                `etamem.fta.FTAUnit` with its lifecycle status.

        Raises:
            UnknownIdError: The space holds no unit `unit_id` (a KeyError).
            UnknownSpaceError: The store holds no such space (a ValueError).
        """
        space = self.known_space(space)
        check_id(unit_id, "unit_id")
        own = stored_units(self.method, self.store, space).history(self.store, space, unit_id)
        if own is not None:  # FTA units: their relation links
            return own
        from etamem.facts.current_first import versions

        try:
            return versions(unit_id, lambda ids: self.store.unit_links(space, ids),
                            lambda ids: {a.amu_id: a for a in self.store.amus(space, status=None, amu_ids=ids)})
        except KeyError:
            raise UnknownIdError(f"no unit {unit_id!r} in space {space!r}") from None

    def links(self, space: str = "default", unit_id: str | None = None) -> list:
        """The relation links of the space, oldest first.

        FTA-Mem's relations, and `supersedes` between AMUs.

        Args:
            space: The space (default "default").
            unit_id: Only the links touching this unit (default None: all of them).

        Returns:
            `etamem.records.Link`s (also `etamem.fta.Link`: from the newer unit `source` to the older one `target`, with the
                `relation` and a confidence).

        Raises:
            UnknownSpaceError: The store holds no such space (a ValueError).
        """
        space = self.known_space(space)
        return [Link(*row) for row in self.store.unit_links(space, None if unit_id is None else [unit_id])]

    def answer(self, question: str, space: str = "default", now: datetime | str | None = None,
               top_k: int | None = None, *, filters: Filters | Mapping[str, Any] | None = None) -> Answer:
        """Answer from memory.

        An LLM answer grounded in the evidence's source turns (`Config.answer_context` "turns"; "packet":
        the evidence AMUs with dates and views, their source turns, Time summaries) when an LLM is
        configured, else the best evidence sentences with a note
        saying no LLM is configured. If the LLM says the memories lack the answer, it is asked once
        more with raw turns added (those `filters` lets through: the evidence is the filtered
        retrieval's, see `retrieve`).

        Args:
            question: The question (non-empty; at most `Config.max_turn_chars`).
            space: The space (default "default").
            now: The question date: a datetime or a timestamp string (default None: none).
            top_k: Evidence hits retrieved, 1..10,000 (default None: `Config.top_k`).
            filters: As `retrieve`'s (keyword only; default None: no filter).

        Returns:
            An `Answer`: its text, the evidence hits, whether an LLM was used, a note and the LLM
                cost; "No memories found." when nothing is stored in the space yet.

        Raises:
            ValueError: A bad argument, naming it (as `retrieve`).
        """
        with self.scoped(self.space_name(space)):  # the answer's LLM cache entries belong to the space
            return self._answer(question, space, now, top_k, filters)

    def _answer(self, question: str, space: str, now, top_k: int | None, filters=None) -> Answer:
        when = None if now is None else parse_timestamp(now, self.config.default_timezone, field="now")
        result = self.retrieve(question, space=space, top_k=top_k, now=when, filters=filters)
        if not result.hits and not self.store.has_space(self.space_name(space)):
            return Answer("No memories found.", [], False, "nothing is stored in this space yet")
        return self.method.answer(self, question, self.known_space(space), result, when)

    def with_raw_turns(self, question: str, hits: list[Hit], space: str = "default") -> list[Hit]:
        """`hits` with the space's best raw turns fused in, whatever the confidence.

        By the fallback policy (`fallback_fusion`): what `answer` asks again with when the LLM says
        the memories lack the answer.

        Args:
            question: The question the raw turns are searched for.
            hits: The hits to complement.
            space: The space (default "default").

        Returns:
            As many hits as `hits`, raw turns fused in.
        """
        from etamem.answering import with_raw_turns

        return with_raw_turns(self, question, hits, space)

    def context(self, query: str, space: str = "default", *, top_k: int | None = None,
                now: datetime | str | None = None, filters: Filters | Mapping[str, Any] | None = None) -> str:
        """The prompt-ready memory an agent puts in its system prompt for `query`.

        The best `top_k` memories, best first, each with the date it was said and its source message
        (`etamem.context.render_context`; FTA-Mem: its four-section packet). A space with nothing
        stored yet renders as an empty memory.

        Args:
            query: The text to find memories for (usually the user's latest message).
            space: The space (default "default").
            top_k: How many memories, 1..10,000 (keyword only; default None: `Config.context_top_k`).
            now: The question date: a datetime or a timestamp string (default None: none).
            filters: As `retrieve`'s (default None: no filter).

        Returns:
            The rendered text.

        Raises:
            ValueError: A bad argument, naming it (as `retrieve`).
        """
        return self.context_packet(query, space, top_k=top_k, now=now, filters=filters).text

    def context_packet(self, query: str, space: str = "default", *, top_k: int | None = None,
                       now: datetime | str | None = None,
                       filters: Filters | Mapping[str, Any] | None = None) -> MemoryContext:
        """`context`'s text with the hits it renders (one retrieval for both).

        Args:
            query: As `context`'s.
            space: The space (default "default").
            top_k: How many memories, 1..10,000 (keyword only; default None: `Config.context_top_k`).
            now: The question date: a datetime or a timestamp string (default None: none).
            filters: As `retrieve`'s (default None: no filter).

        Returns:
            A `MemoryContext`: `text` and `hits`, best first.

        Raises:
            ValueError: A bad argument, naming it (as `retrieve`).
        """
        k = self.config.context_top_k if top_k is None else validate_top_k(top_k)
        when = None if now is None else parse_timestamp(now, self.config.default_timezone, field="now")
        hits = self.retrieve(query, space, top_k=k, now=when, filters=filters).hits
        return MemoryContext(self.method.context(self, self.space_name(space), hits, when), hits)

    def warm(self) -> "Memory":
        """Load the models now, so the first request does not pay for them.

        The text encoder, affect tagger, extractor and LLM client, the BM25 tokeniser (bm25s:
        0.5 s of imports), what the units' writes load on first use (`Units.warm`: the attribute
        slots' prototype vectors, which the first write that compares a new fact with a stored
        one paid, 3.3 s), FAISS and the BLAS thread limiter (the first add's imports); then every object alive now is moved out of the cyclic garbage
        collector's reach (`gc.freeze()`, once per process): the models' hundreds of thousands of
        long-lived objects made each full collection hold the interpreter for about 0.2 s, which an
        event loop serving other requests saw as a stall (`benchmarks/async_load.py`).

        Returns:
            This Memory.
        """
        import gc

        from etamem.retrieval.lexical import splitter
        from etamem.retrieval.vector_index import import_faiss

        self.encode_queries(["warm up"])
        self.affect_tagger.tag(["warm up"])
        splitter(self.config.bm25_stemmer)("warm up")
        _ = self.extractor
        self.method.units.warm(self)
        import_faiss()  # the vector indexes' library (0.1 s of imports; missing: ImportError now, not at an add)
        with blas_threads(self.config.blas_threads):  # threadpoolctl's controller (it scans the loaded libraries)
            pass
        gc.collect()
        gc.freeze()
        return self

    def time_summaries(self, space: str, hits: list[Hit]) -> str:
        """Summaries of the day and week nodes the hits' sessions hang under, oldest first.

        The Time view's part of an answer prompt.

        Args:
            space: The space.
            hits: The hits whose sessions are summarised.

        Returns:
            The summaries as text.
        """
        from etamem.answering import space_time_summaries

        return space_time_summaries(self, space, hits)

    def reindex(self) -> dict[str, dict]:
        """Re-encode every space with this Memory's text encoder and affect tagger.

        See `etamem.live.reindex`; the models are then recorded as the store's. The store must not
        be in use by another process meanwhile for searches to stay right.

        Returns:
            Counts per space (space name -> dict).

        Raises:
            SpaceForbidden: Called inside a restricted `etamem.tenancy.scope` (a PermissionError).
        """
        from etamem.live.reindex import reindex_space, reindex_store

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
