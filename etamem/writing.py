"""The write path of `Memory`: turns read and validated (`etamem.ingest.inputs`), stored raw first,
then made into units by the method's builder (`etamem.method.Units`) session by session and
handed to the live space, with session-end maintenance. Functions over the `etamem.engine.Engine`
(`mem`) whose space the caller names; `Memory.add` / `check` / `flush` / `end_session` call them.
"""
from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone
from itertools import groupby
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from etamem.construction import UNITS_KEY, check_units_kind
from etamem.ingest.inputs import SessionClock, TurnBatch, check_same_content, given_ids, read_turns, turn_items
from etamem.live.space import LiveSpace
from etamem.records import AMU, Turn
from etamem.retrieval.vector_index import import_faiss
from etamem.threads import blas_threads

if TYPE_CHECKING:
    from etamem.engine import Engine

log = logging.getLogger(__name__)

REPLACED_KEY, SKIPPED_KEY = "control_chars_replaced", "messages_skipped"  # space meta: input counts


def add(mem: Engine, turns: Iterable[Turn | Mapping[str, Any]] | Turn | Mapping[str, Any],
        space: str = "default") -> list[AMU]:
    """`Memory.add`."""
    space = mem.space_name(space)
    items = turn_items(turns)
    if not items:
        return []
    now = datetime.now(timezone.utc)  # the time of turns given without one: the same in both reads
    read(mem, items, space, now=now)  # bad input fails here, before any lock or store access
    _ = mem.text_encoder, mem.affect_tagger  # and models that do not match the store's (model identity)
    import_faiss()  # and a missing FAISS (the vector indexes'): a failed first add stores nothing
    check_units_kind(mem.store, space, mem.method.units.kind)  # and a space holding the other kind of units
    with mem.writing_to(space) as live:
        with mem.timed("store"):
            next_seq = mem.store.next_turn_seq(space)
            batch = read(mem, items, space, now=now, next_seq=next_seq, from_store=True)
            clean = batch.turns
            stored = stored_same(mem, space, batch)
            fresh = [t for t in clean if t.turn_id not in stored]
            if fresh:
                mem.store.insert_turns(fresh, first_seq=next_seq)
                count_input(mem, space, batch)
            if check_units_kind(mem.store, space, mem.method.units.kind):
                mem.store.set_space_meta(space, UNITS_KEY, mem.method.units.kind)
        new = process_pending(mem, space, live)
        # a restatement joined a stored unit (`etamem.facts.mentions`): that unit is its turn's
        said = {s for a in new for s in a.source_turn_ids}
        repeated = [t.turn_id for t in fresh if t.turn_id not in said]
        if len(fresh) == len(clean) and not repeated:
            return new
        # a retry: the turns already stored give their units back, in the order given
        order = {t.turn_id: i for i, t in enumerate(clean)}
        made = {a.amu_id for a in new}
        old = [a for a in mem.store.amus_of_turns(space, [*stored, *repeated]) if a.amu_id not in made]
        return sorted(old + new, key=lambda a: min((order.get(s, len(order)) for s in a.source_turn_ids)))


def check(mem: Engine, turns: Iterable[Turn | Mapping[str, Any]] | Turn | Mapping[str, Any], space: str = "default",
          *, labels: Sequence[str] | None = None, new_space: bool = False) -> list[Turn]:
    """`Memory.check`."""
    space = mem.space_name(space)
    items = turn_items(turns)
    batch = read(mem, items, space, now=datetime.now(timezone.utc), labels=labels, from_store=not new_space,
                 next_seq=0 if new_space else mem.store.next_turn_seq(space))
    if new_space:
        return batch.turns
    stored = stored_same(mem, space, batch)
    return [t for t in batch.turns if t.turn_id not in stored]


def read(mem: Engine, items: list, space: str, *, now: datetime, next_seq: int = 0, labels: Sequence[str] | None = None,
         from_store: bool = False) -> TurnBatch:
    """`etamem.ingest.inputs.read_turns` with this config; `from_store`: defaults (session, and the
    time and session of turns already stored) continue the space's stored state."""
    known, clock = None, SessionClock(timedelta(minutes=mem.config.session_gap_minutes))
    if from_store:
        known = {t.turn_id: t for t in mem.store.turns(space, turn_ids=given_ids(items))}
        last = mem.store.last_turn(space)
        if last is not None and mem.store.session_state(space, last.session_id):
            clock.last_session, clock.last_time = last.session_id, last.timestamp
        clock.taken = lambda sid: mem.store.session_state(space, sid) is not None
    return read_turns(items, space, default_tz=mem.config.default_timezone, labels=labels, now=now,
                      max_turn_chars=mem.config.max_turn_chars, next_seq=next_seq, sessions=clock,
                      keep_system=mem.config.keep_system_messages, known=known, is_stored=mem.store.has_space)


def count_input(mem: Engine, space: str, batch: TurnBatch) -> None:
    """Add a write's replaced control characters and skipped messages to the space's counts
    (space meta, reported by `stats`), with a log line."""
    for key, n in ((REPLACED_KEY, batch.replaced), (SKIPPED_KEY, batch.skipped)):
        if n:
            mem.store.set_space_meta(space, key, str(int(mem.store.get_space_meta(space, key) or 0) + n))
    if batch.replaced:
        log.warning("space %s: %d control characters replaced in the text of the turns added", space,
                    batch.replaced)


def stored_same(mem: Engine, space: str, clean: TurnBatch) -> dict[str, Turn]:
    """The stored turns among `clean` by id; ValueError when one has other content."""
    stored = {t.turn_id: t for t in mem.store.turns(space, turn_ids=[t.turn_id for t in clean.turns])}
    check_same_content(clean, stored, space)
    return stored


def process_pending(mem: Engine, space: str, live: LiveSpace, complete: set[str] = frozenset()) -> list[AMU]:
    """Extract, encode and tag the pending turns session by session, then hand each batch
    to the live space (the caller holds the space's write locks). A session is complete
    when a later one has pending turns or it is in `complete` (FTA units: the provisional
    segment of a running session stays pending).

    When the LLM gives no reply (`ExtractionUnavailable`: unreachable, timeouts, 429/5xx
    after the client's retries, a rejected request) processing stops at that batch: nothing
    of it is written, it and later sessions stay pending (session order is kept), a warning
    is logged and `stats()["extraction"]["unavailable"]` counted; the AMUs made so far are
    returned and the next `add`/`flush` tries again. Other failures propagate."""
    from etamem.extraction.extractors import ExtractionUnavailable

    pending = mem.store.turns(space, pending_only=True)
    groups = [(sid, list(g)) for sid, g in groupby(pending, key=lambda t: t.session_id)]
    new: list[AMU] = []
    for i, (session_id, group) in enumerate(groups):
        # a session ends when a new one arrives and none of its turns are still to come
        still_pending = {sid for sid, _ in groups[i:]}
        end_sessions(mem, live, [s for s in mem.store.open_sessions(space) if s not in still_pending])
        try:
            new.extend(extract_and_store(mem, live, group, i + 1 < len(groups) or session_id in complete))
        except ExtractionUnavailable as exc:
            mem.count_extraction(unavailable=1)
            log.warning("space %s: extraction deferred, the LLM gave no reply (%s); %d turns stay pending "
                        "until the next add/flush", space, exc, sum(len(g) for _, g in groups[i:]))
            break
    return new


def end_sessions(mem: Engine, live: LiveSpace, session_ids: list[str]) -> None:
    """Mark sessions ended and run session-end maintenance (trees, calibration, summaries)."""
    if session_ids:
        queue, summariser = mem.llm_queue, mem.summariser()
        with mem.timed("views"), blas_threads(mem.config.blas_threads):  # with the queue: summaries behind
            report = live.maintain(mem.store, summariser if queue is None else None)
        if queue is not None and summariser is not None:
            queue.summarise(live.name, live.summary_requests())
        mem.store.mark_sessions_ended(live.name, session_ids)
        log.debug("space %s: ended sessions %s; maintenance %s", live.name, session_ids, report)


def extract_and_store(mem: Engine, live: LiveSpace, turns: list[Turn], complete: bool = True) -> list[AMU]:
    """One session's batch made into units by the method's builder and handed to the live space."""
    turns, units, text_vecs, affect_vecs, turn_vecs, extras = mem.method.units.build(mem, live, turns, complete)
    if not turns:
        return []
    queue = mem.llm_queue  # units by the rules now, the LLM's behind the write (`etamem.extraction.background`)
    with mem.timed("views"), blas_threads(mem.config.blas_threads):
        live.add_units(mem.store, turns, turn_vecs, units, text_vecs, affect_vecs, extras, queued=queue is not None)
    mem.count_extraction(turns=len(turns), amus=len(units))
    if queue is not None:
        queue.wake(live.name)
    return units

