"""LLM extraction behind the write (see docs/llm.md, 'The agent never waits for the model').

With an LLM extractor and `Config.llm_background` (AMU units), `Memory.add` stores each turn and
makes it searchable at once through the rule extractor's units (its supersession links by the
rules), and marks the turn *queued* in the store (`turns.extracted` = 2, `etamem.store.schema`).
`LLMQueue` works that durable queue in the process's worker threads (`Config.llm_concurrency`):
for each queued turn, oldest first, one LLM extraction (outside every lock; the turn's context
read from the store), then its units encoded and tagged, their `supersedes` links found by the
full classifier (an LLM's when configured), and under the space's write locks the turn's rule
units replaced by the LLM's in one store transaction (`LiveSpace.replace_units`). A reply the
extractor cannot use, or one it rejects as ungrounded, keeps the rule units (the turn is marked
done). No reply (`ExtractionUnavailable`: the server down, timeouts) leaves the turn queued and
pauses the workers with a doubling delay (`Config.llm_backoff_s` .. `llm_backoff_max_s`).

The queue is the store's: a crash or a kill loses nothing (a turn is queued in the transaction
that writes its rule units, and leaves the queue in the one that swaps them), and the next
process that opens the store with an LLM resumes it (`resume`). Two processes may both extract
one turn; the first swap wins, the second finds the turn no longer queued and drops its units.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from etamem.construction import CONTEXT_TURNS, encode_units, supersession_links
from etamem.live.space import summarise
from etamem.models.llm import LLMUnavailable, cache_refs
from etamem.records import Turn

if TYPE_CHECKING:
    from etamem.engine import Engine

log = logging.getLogger(__name__)

LLM_INFIX = "m"  # LLM units of a queued turn are `<turn id>#m<k>` (its rule units `<turn id>#<k>`)
BATCH = 8  # queued turns a worker reads at a time
MAX_ERRORS = 3  # unexpected failures of one turn before its rule units are kept for good


class LLMQueue:
    """Worker threads over the store's queued turns (see the module docstring). `wake(space)`
    after a write queued turns; `wait(space)` until the space's queue is empty or the LLM gives
    no reply; `close()` stops the workers (the queue stays in the store)."""

    def __init__(self, engine: Engine, *, workers: int = 1, backoff_s: float = 1.0, backoff_max_s: float = 30.0):
        self._engine = engine
        self._workers = max(1, int(workers))
        self._backoff = (float(backoff_s), float(backoff_max_s))
        self._cond = threading.Condition()
        self._ready: dict[str, None] = {}  # spaces to look at, in arrival order
        self._busy: set[str] = set()  # spaces a worker is on: one at a time, so turns land in order
        self._threads: list[threading.Thread] = []
        self._stopped = False
        self._landing = threading.Lock()  # held while a worker writes: `close` waits for it
        self._paused_until = 0.0  # after no reply: when to ask the LLM again
        self._delay = 0.0
        self._errors: dict[tuple[str, str], int] = {}
        self._summaries: dict[str, list[list]] = {}  # space -> summary requests, in order (not durable)
        self.counts = {"landed": 0, "kept_rules": 0, "gone": 0, "unavailable": 0, "errors": 0, "summaries": 0}
        self.last_error: str | None = None

    # --- the callers' side -------------------------------------------------------------
    def wake(self, space: str) -> None:
        """`space` has queued turns: a worker will take them (workers start on first use)."""
        with self._cond:
            if self._stopped:
                return
            self._ready[space] = None
            self._start()
            self._cond.notify()

    def summarise(self, space: str, requests: list) -> None:
        """Ask the LLM for the summaries of `LiveSpace.summary_requests()` after the space's
        queued turns (the nodes keep their extractive summaries meanwhile, and for good if the
        process ends first: summary requests are not kept in the store)."""
        if not requests:
            return
        with self._cond:
            if self._stopped:
                return
            self._summaries.setdefault(space, []).append(requests)
        self.wake(space)

    def resume(self) -> None:
        """Wake every space whose turns a previous process left queued (in a thread: one pass
        over the store's index, off the caller's path)."""
        def run() -> None:
            try:
                for space in self._engine.store.queued_spaces():
                    self.wake(space)
            except Exception as exc:  # noqa: BLE001 - the next write or flush wakes the space again
                log.warning("LLM queue: could not read the queued spaces (%s: %s)", type(exc).__name__, exc)

        threading.Thread(target=run, name="etamem-llm-resume", daemon=True).start()

    def wait(self, space: str, timeout: float | None = None) -> bool:
        """Block until `space` has no queued turn nor summary (True), or the LLM gave no reply after the
        call began, or `timeout` seconds passed, or the queue was closed (False)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            unavailable = self.counts["unavailable"]
        self.wake(space)
        while True:
            with self._cond:
                summaries = space in self._summaries
            if not summaries and self._engine.store.count_queued(space) == 0:
                return True
            with self._cond:
                if self._stopped or self.counts["unavailable"] > unavailable:
                    return False
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(0.5 if left is None else min(0.5, left))

    def stats(self) -> dict[str, Any]:
        """Counters since this queue started: turns `landed` (LLM units in place), `kept_rules`
        (the reply was unusable or ungrounded), `gone` (deleted or revised meanwhile), `summaries`
        (LLM summaries committed),
        `unavailable` (no reply: the workers paused), `errors`; `retry_in_s` (0: not paused),
        `last_error`, `workers`."""
        with self._cond:
            left = max(0.0, self._paused_until - time.monotonic())
            return {**self.counts, "retry_in_s": round(left, 3), "last_error": self.last_error,
                    "workers": len(self._threads)}

    def close(self, timeout: float = 5.0) -> None:
        """Stop the workers: none starts another turn, a write in progress ends first; a worker
        waiting on the LLM finds the queue closed when the reply comes and drops it."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        with self._landing:
            pass
        end = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, end - time.monotonic()))

    # --- the workers --------------------------------------------------------------------
    def _start(self) -> None:
        while len(self._threads) < self._workers:  # under self._cond
            thread = threading.Thread(target=self._run, name=f"etamem-llm-{len(self._threads)}", daemon=True)
            self._threads.append(thread)
            thread.start()

    def _next_space(self) -> str | None:
        """A ready space no other worker holds, once the LLM may be asked; None when closed."""
        with self._cond:
            while True:
                if self._stopped:
                    return None
                pause = self._paused_until - time.monotonic()
                free = next((s for s in self._ready if s not in self._busy), None)
                if free is not None and pause <= 0:
                    del self._ready[free]
                    self._busy.add(free)
                    return free
                self._cond.wait(pause if free is not None else None)

    def _run(self) -> None:
        while (space := self._next_space()) is not None:
            more = False
            try:
                more = self._work(space)
            except Exception as exc:  # noqa: BLE001 - the turns stay queued; the next wake tries again
                if self._stopped:  # closed under a request in flight (the client closed too): not an error
                    log.debug("LLM queue: closed while working on space %s (%s)", space, exc)
                    continue
                self._note_error(f"{type(exc).__name__}: {exc}")
                log.warning("LLM queue: space %s: %s: %s", space, type(exc).__name__, exc)
            finally:
                with self._cond:
                    self._busy.discard(space)
                    if more:
                        self._ready[space] = None
                    self._cond.notify_all()

    def _work(self, space: str) -> bool:
        """Refine a batch of the space's queued turns; True when more may be queued."""
        turns = self._engine.store.queued_turns(space, BATCH)
        for turn in turns:
            if self._stopped:
                return False
            try:
                self._refine(space, turn)
            except LLMUnavailable as exc:  # the server is down or too slow: pause, keep the turn queued
                with self._cond:
                    self.counts["unavailable"] += 1
                    self.last_error = str(exc)
                    self._delay = min(self._backoff[1], max(self._backoff[0], self._delay * 2))
                    self._paused_until = time.monotonic() + self._delay
                    self._cond.notify_all()
                log.warning("LLM queue: no reply for space %s (%s); asking again in %.1f s", space, exc, self._delay)
                return True
            except Exception as exc:  # noqa: BLE001 - after MAX_ERRORS the rule units stay
                key = (space, turn.turn_id)
                self._errors[key] = self._errors.get(key, 0) + 1
                self._note_error(f"{type(exc).__name__}: {exc}")
                if self._errors[key] < MAX_ERRORS:
                    raise
                log.warning("LLM queue: turn %s of space %s failed %d times (%s: %s); its rule units stay",
                            turn.turn_id, space, MAX_ERRORS, type(exc).__name__, exc)
                self._engine.store.mark_extracted(space, [turn.turn_id])
                self._errors.pop(key, None)
            else:
                with self._cond:
                    self._delay = 0.0
        if len(turns) == BATCH or self._engine.store.count_queued(space):
            return True  # summaries after the units below them landed (a swap refreshes them extractively)
        self._summarise(space)
        return False

    def _summarise(self, space: str) -> None:
        """The space's summary requests, oldest first (the LLM asked outside every lock)."""
        engine = self._engine
        summariser = engine.summariser()
        while True:
            with self._cond:
                jobs = self._summaries.get(space)
                if not jobs or self._stopped:
                    self._summaries.pop(space, None)
                    return
                requests = jobs[0]
            with engine.scoped(space):  # cache entries tagged with the space (forgetting finds them)
                texts = {} if summariser is None else summarise(requests, summariser)
            with self._landing:
                if self._stopped:
                    return
                if engine.store.has_space(space):  # else deleted meanwhile: nothing to summarise
                    with engine.writing_to(space) as live:
                        live.set_summaries(engine.store, texts)
            with self._cond:
                jobs.pop(0)
                if not jobs:
                    self._summaries.pop(space, None)
                self.counts["summaries"] += len(texts)
                self._cond.notify_all()

    def _note_error(self, text: str) -> None:
        with self._cond:
            self.counts["errors"] += 1
            self.last_error = text

    def _refine(self, space: str, turn: Turn) -> None:
        """One queued turn: the LLM's units in place of its rule units (or the rule units kept)."""
        engine = self._engine
        extractor = engine.extractor
        context = engine.store.turns_before(space, turn.turn_id, CONTEXT_TURNS)
        with engine.scoped(space), cache_refs(*(f"turn:{space}/{t.turn_id}" for t in [*context, turn])):
            with engine.timed("extract"):
                result = extractor.extract_result(turn, context)  # ExtractionUnavailable: stays queued
            if result.fallback:  # unusable or ungrounded: the rule units are the turn's units
                self._count("kept_rules" if engine.store.mark_extracted(space, [turn.turn_id]) else "gone")
                return
            units, text_vecs, affect_vecs, _ = encode_units([(turn, result.units)], space, engine.text_encoder,
                                                            engine.affect_tagger, engine.timed, infix=LLM_INFIX)
            old = [a.amu_id for a in engine.store.amus_of_turns(space, [turn.turn_id])]
            extras = self._links(space, units, text_vecs, set(old))
            if not self._still_queued(space, turn):
                self._count("gone")
                return
            with self._landing:
                if self._stopped:
                    return
                with engine.writing_to(space) as live:
                    old = [a.amu_id for a in engine.store.amus_of_turns(space, [turn.turn_id])]
                    landed = live.replace_units(engine.store, turn, old, units, text_vecs, affect_vecs, extras)
        self._count("landed" if landed else "gone")
        log.debug("LLM queue: turn %s of space %s: %d rule units -> %d LLM units", turn.turn_id, space,
                  len(old), len(units))

    def _links(self, space: str, units, text_vecs, old: set[str]):
        """The `supersedes` links of the LLM units by the full classifier, none to the units they
        replace; None without a classifier."""
        from etamem.store.schema import UnitExtras

        engine = self._engine
        classifier = engine.method.units.supersession(engine)
        if classifier is None or not units:
            return None
        with engine.timed("links"):
            links = supersession_links(engine.live_space(space), units, text_vecs, classifier,
                                       engine.config.supersession_floor)
        links = [link for link in links if link[1] not in old]
        return UnitExtras(links=links) if links else None

    def _still_queued(self, space: str, turn: Turn) -> bool:
        """The turn is stored with this text (`SqlStore.replace_units` checks it is queued)."""
        now = self._engine.store.turns(space, turn_ids=[turn.turn_id])
        return bool(now) and now[0].text == turn.text

    def _count(self, key: str) -> None:
        with self._cond:
            self.counts[key] += 1
            self._cond.notify_all()
