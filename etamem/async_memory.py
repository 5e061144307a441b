"""`AsyncMemory`: `Memory`'s methods as coroutines, for agent frameworks that run on asyncio.

    async with AsyncMemory("store_dir") as mem:
        await mem.add([{"role": "user", "content": "I adopted a cat named Miso."}], space="ana")
        hits = await mem.search("What pet does Ana have?", space="ana")

A thin facade: every call runs the same `Memory` method in a bounded thread pool
(`max_workers` threads, 4 by default) through `loop.run_in_executor`, so the event loop never
waits for a model, the store or the indexes. `Memory` is thread-safe (see `etamem.engine`):
calls for different spaces run side by side, writes of one space are serialised. Each call
runs in a copy of the caller's context, so a `etamem.tenancy.scope` around an `await` applies
to the call. The arguments, results and errors are `Memory`'s.
"""
from __future__ import annotations

import asyncio
import contextvars
import functools
import os
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any, Callable, Iterable, Mapping, Sequence, TypeVar

from etamem.config import Config
from etamem.filters import Filters
from etamem.live.residency import ResidencyStats
from etamem.memory import Memory
from etamem.records import AMU, Answer, Hit, MemoryContext, SearchResult, Turn

T = TypeVar("T")
DEFAULT_WORKERS = 4

Turns = Iterable[Turn | Mapping[str, Any]] | Turn | Mapping[str, Any]


class AsyncMemory:
    """`Memory` with coroutine methods (see the module docstring).

    Every method runs the `Memory` method of the same name in a bounded thread pool, in a copy of
    the caller's context; the arguments, results and errors are `Memory`'s. `views` hands out
    live objects and stays on `self.memory`, the wrapped `Memory`. An async context manager:
    leaving `async with` calls `aclose`.

    Args:
        source: A store path or PostgreSQL URL, opened as `Memory(source, config, **components)`
            (None, the default: in memory), or an existing `Memory` to wrap (then `config` and the
            components must be left out, and `aclose` leaves that Memory open: its owner closes it).
        config: A `Config` or a dict for `Config.from_dict`, for the Memory opened here (default
            None: the defaults).
        max_workers: Threads of the pool the engine work runs in, >= 1 (keyword only; default 4):
            at most this many engine calls run at once, the others wait without blocking the loop.
        **components: `Memory`'s injected components (`text_encoder`, `affect_tagger`, `llm`,
            `extractor`), for the Memory opened here.

    Raises:
        ValueError: `max_workers` not an integer >= 1, or `config` / components given with a
            `Memory`.
    """

    def __init__(self, source: str | os.PathLike | Memory | None = None,
                 config: Config | Mapping[str, Any] | None = None, *, max_workers: int = DEFAULT_WORKERS,
                 **components: Any):
        if isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < 1:
            raise ValueError(f"max_workers: expected an integer >= 1, got {max_workers!r}")
        if isinstance(source, Memory):
            if config is not None or components:
                raise ValueError("AsyncMemory(memory): config and components belong to the Memory given")
            self.memory, self._owns = source, False
        else:
            self.memory, self._owns = Memory(source, config, **components), True
        self.max_workers = max_workers
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="etamem-async")
        self._closed = False

    @property
    def config(self) -> Config:
        """The wrapped Memory's `Config`."""
        return self.memory.config

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)` in the pool, in a copy of the caller's context.

        For several `self.memory` calls that belong together (e.g. an adapter's write and its
        bookkeeping).

        Args:
            fn: The function to run.
            *args: Its positional arguments.
            **kwargs: Its keyword arguments.

        Returns:
            What `fn` returns (its exceptions propagate).

        Raises:
            RuntimeError: This AsyncMemory is closed.
        """
        return await self._run(fn, *args, **kwargs)

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if self._closed:
            raise RuntimeError("AsyncMemory is closed")
        call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    # --- writes -------------------------------------------------------------------
    async def add(self, turns: Turns, space: str = "default") -> list[AMU]:
        """As `Memory.add`: store turns (or chat messages), then make and index their units.

        Args:
            turns: As `Memory.add`'s: one turn or an iterable of `Turn`s, turn dicts or chat messages.
            space: The space to add to (default "default").

        Returns:
            The AMUs made (`Memory.add`).

        Raises:
            RuntimeError: This AsyncMemory is closed; otherwise the errors of `Memory.add`.
        """
        return await self._run(self.memory.add, turns, space)

    async def check(self, turns: Turns, space: str = "default", *, labels: Sequence[str] | None = None,
                    new_space: bool = False) -> list[Turn]:
        """As `Memory.check`: validate turns as `add` would, storing nothing.

        Args:
            turns: As `Memory.add`'s: one turn or an iterable of `Turn`s, turn dicts or chat messages.
            space: The space (default "default").
            labels: Names for the turns in error messages (default None: `turns[i]`).
            new_space: Check as if the space were empty (default False).

        Returns:
            The turns `add` would store now.

        Raises:
            RuntimeError: This AsyncMemory is closed; otherwise the errors of `Memory.check`.
        """
        return await self._run(self.memory.check, turns, space, labels=labels, new_space=new_space)

    async def flush(self, space: str = "default", *, timeout: float | None = None) -> list[AMU]:
        """As `Memory.flush`: process the space's pending turns, then wait for its LLM queue.

        Args:
            space: The space (default "default").
            timeout: Most seconds to wait for the queue (None: until it is empty or the LLM gives
                no reply).

        Returns:
            The new units (AMUs).

        Raises:
            RuntimeError: This AsyncMemory is closed; otherwise the errors of `Memory.flush`.
        """
        return await self._run(self.memory.flush, space, timeout=timeout)

    async def end_session(self, space: str = "default") -> list[str]:
        """As `Memory.end_session`: close the space's open sessions.

        Args:
            space: The space (default "default").

        Returns:
            The ids of the sessions closed.

        Raises:
            RuntimeError: This AsyncMemory is closed; otherwise the errors of `Memory.end_session`.
        """
        return await self._run(self.memory.end_session, space)

    async def delete(self, amu_id: str | None = None, space: str = "default", *, turn_id: str | None = None) -> int:
        """As `Memory.delete`: forget a unit, a turn and its units, or the whole space.

        Args:
            amu_id: The unit to forget (with neither `amu_id` nor `turn_id`: the whole space).
            space: The space (default "default").
            turn_id: The turn to forget, with its units (keyword only).

        Returns:
            How many units went.

        Raises:
            RuntimeError: This AsyncMemory is closed; otherwise the errors of `Memory.delete`.
        """
        return await self._run(self.memory.delete, amu_id, space, turn_id=turn_id)

    async def update(self, turn_id: str, text: str, space: str = "default", *, forget_old: bool = False,
                     timestamp: datetime | str | None = None):
        """As `Memory.update`: replace a turn's text, the old version kept as history (or forgotten).

        Args:
            turn_id: The turn to revise (any of its versions' ids).
            text: The new text (non-empty).
            space: The space holding the turn (default "default").
            forget_old: Delete the old versions as `Memory.delete` does (keyword only; default False).
            timestamp: The new turn's time (default None: now).

        Returns:
            (etamem.facts.revisions.Update): the current turn's id, its units' ids, the ids they supersede
                and whether anything changed.

        Raises:
            RuntimeError: This AsyncMemory is closed; otherwise the errors of `Memory.update`.
        """
        return await self._run(self.memory.update, turn_id, text, space, forget_old=forget_old, timestamp=timestamp)

    async def reindex(self) -> dict[str, dict]:
        """As `Memory.reindex`: re-encode every space with this Memory's models.

        Returns:
            Counts per space.

        Raises:
            RuntimeError: This AsyncMemory is closed; otherwise the errors of `Memory.reindex`.
        """
        return await self._run(self.memory.reindex)

    # --- reads --------------------------------------------------------------------
    async def search(self, query: str, space: str = "default", top_k: int | None = None,
                     now: datetime | str | None = None, *, filters: Filters | Mapping[str, Any] | None = None,
                     strict: bool = False) -> list[Hit]:
        """As `Memory.search`: the best AMUs of the space for the query, best first.

        Args:
            query: The question or text to search for.
            space: The space (default "default").
            top_k: How many hits, 1..10,000 (default None: `Config.top_k`).
            now: The question date: a datetime or a timestamp string (default None: none).
            filters: A `Filters` or its dict form (keyword only; default None: no filter).
            strict: Raise UnknownSpaceError for a space the store does not hold (default False).

        Returns:
            The `Hit`s, best first.

        Raises:
            RuntimeError: This AsyncMemory is closed; otherwise the errors of `Memory.search`.
        """
        return await self._run(self.memory.search, query, space, top_k, now, filters=filters, strict=strict)

    async def retrieve(self, query: str, space: str = "default", *, top_k: int | None = None,
                       now: datetime | str | None = None, views: tuple[str, ...] = ("event", "affect", "time"),
                       routing: str | None = None, fallback: bool = True, trace: bool = False,
                       filters: Filters | Mapping[str, Any] | None = None, strict: bool = False) -> SearchResult:
        """As `Memory.retrieve`: the hits with how they were found.

        Args:
            query: The question or text to search for.
            space: The space (default "default").
            top_k: How many hits, 1..10,000 (keyword only; default None: `Config.top_k`).
            now: The question date: a datetime or a timestamp string (default None: none).
            views: The views searched, a non-empty subset of ("event", "affect", "time") (default: all).
            routing: "entropy" or "mean" (default None: `Config.routing`).
            fallback: Allow the raw-turn fallback (default True).
            trace: Record a per-view trace of the beam search (default False).
            filters: A `Filters` or its dict form (default None: no filter).
            strict: Raise UnknownSpaceError for a space the store does not hold (default False).

        Returns:
            A `SearchResult`.

        Raises:
            RuntimeError: This AsyncMemory is closed; otherwise the errors of `Memory.retrieve`.
        """
        return await self._run(self.memory.retrieve, query, space, top_k=top_k, now=now, views=views,
                               routing=routing, fallback=fallback, trace=trace, filters=filters, strict=strict)

    async def context(self, query: str, space: str = "default", *, top_k: int | None = None,
                      now: datetime | str | None = None, filters: Filters | Mapping[str, Any] | None = None) -> str:
        """As `Memory.context`: the prompt-ready memory for `query`.

        Args:
            query: The text to find memories for (usually the user's latest message).
            space: The space (default "default").
            top_k: How many memories, 1..10,000 (keyword only; default None: `Config.context_top_k`).
            now: The question date: a datetime or a timestamp string (default None: none).
            filters: A `Filters` or its dict form (default None: no filter).

        Returns:
            The rendered text.

        Raises:
            RuntimeError: This AsyncMemory is closed; otherwise the errors of `Memory.context`.
        """
        return await self._run(self.memory.context, query, space, top_k=top_k, now=now, filters=filters)

    async def context_packet(self, query: str, space: str = "default", *, top_k: int | None = None,
                             now: datetime | str | None = None,
                             filters: Filters | Mapping[str, Any] | None = None) -> MemoryContext:
        """As `Memory.context_packet`: `context`'s text with the hits it renders.

        Args:
            query: The text to find memories for.
            space: The space (default "default").
            top_k: How many memories, 1..10,000 (keyword only; default None: `Config.context_top_k`).
            now: The question date: a datetime or a timestamp string (default None: none).
            filters: A `Filters` or its dict form (default None: no filter).

        Returns:
            A `MemoryContext` (`text`, `hits`).

        Raises:
            RuntimeError: This AsyncMemory is closed; otherwise the errors of `Memory.context_packet`.
        """
        return await self._run(self.memory.context_packet, query, space, top_k=top_k, now=now, filters=filters)

    async def answer(self, question: str, space: str = "default", now: datetime | str | None = None,
                     top_k: int | None = None, *, filters: Filters | Mapping[str, Any] | None = None) -> Answer:
        """As `Memory.answer`: an answer grounded in the space's memories.

        Args:
            question: The question.
            space: The space (default "default").
            now: The question date: a datetime or a timestamp string (default None: none).
            top_k: Evidence hits retrieved, 1..10,000 (default None: `Config.top_k`).
            filters: A `Filters` or its dict form (keyword only; default None: no filter).

        Returns:
            An `Answer`.

        Raises:
            RuntimeError: This AsyncMemory is closed; otherwise the errors of `Memory.answer`.
        """
        return await self._run(self.memory.answer, question, space, now, top_k, filters=filters)

    async def with_raw_turns(self, question: str, hits: list[Hit], space: str = "default") -> list[Hit]:
        """As `Memory.with_raw_turns`: `hits` with the space's best raw turns fused in.

        Args:
            question: The question the raw turns are searched for.
            hits: The hits to complement.
            space: The space (default "default").

        Returns:
            As many hits as `hits`.

        Raises:
            RuntimeError: This AsyncMemory is closed; otherwise the errors of `Memory.with_raw_turns`.
        """
        return await self._run(self.memory.with_raw_turns, question, hits, space)

    async def time_summaries(self, space: str, hits: list[Hit]) -> str:
        """As `Memory.time_summaries`: the day and week summaries of the hits' sessions.

        Args:
            space: The space.
            hits: The hits whose sessions are summarised.

        Returns:
            The summaries as text.

        Raises:
            RuntimeError: This AsyncMemory is closed; otherwise the errors of `Memory.time_summaries`.
        """
        return await self._run(self.memory.time_summaries, space, hits)

    async def get(self, amu_id: str, space: str = "default") -> AMU:
        """As `Memory.get`: one AMU by id.

        Args:
            amu_id: The unit's id.
            space: The space (default "default").

        Returns:
            The `AMU`.

        Raises:
            RuntimeError: This AsyncMemory is closed; otherwise the errors of `Memory.get`.
        """
        return await self._run(self.memory.get, amu_id, space)

    async def list(self, space: str = "default", status: str | None = None) -> list[AMU]:
        """As `Memory.list`: the AMUs of a space in insertion order.

        Args:
            space: The space (default "default").
            status: None (default): all; "active": the current ones; "superseded": those replaced.

        Returns:
            The `AMU`s.

        Raises:
            RuntimeError: This AsyncMemory is closed; otherwise the errors of `Memory.list`.
        """
        return await self._run(self.memory.list, space, status)

    async def turns(self, space: str = "default", turn_ids: list[str] | None = None) -> list[Turn]:
        """As `Memory.turns`: the raw stored turns of a space in arrival order.

        Args:
            space: The space (default "default").
            turn_ids: Only these turns (default None: all).

        Returns:
            The `Turn`s.

        Raises:
            RuntimeError: This AsyncMemory is closed; otherwise the errors of `Memory.turns`.
        """
        return await self._run(self.memory.turns, space, turn_ids)

    async def history(self, unit_id: str, space: str = "default") -> list:
        """As `Memory.history`: the versions of a fact, oldest first.

        Args:
            unit_id: Any version's id.
            space: The space (default "default").

        Returns:
            The versions, oldest first.

        Raises:
            RuntimeError: This AsyncMemory is closed; otherwise the errors of `Memory.history`.
        """
        return await self._run(self.memory.history, unit_id, space)

    async def links(self, space: str = "default", unit_id: str | None = None) -> list:
        """As `Memory.links`: the relation links of the space.

        Args:
            space: The space (default "default").
            unit_id: Only the links touching this unit (default None: all).

        Returns:
            `etamem.fta.Link`s, oldest first.

        Raises:
            RuntimeError: This AsyncMemory is closed; otherwise the errors of `Memory.links`.
        """
        return await self._run(self.memory.links, space, unit_id)

    async def stats(self, space: str = "default") -> dict:
        """As `Memory.stats`: the per-view shape of a space and the extraction counters.

        Args:
            space: The space (default "default").

        Returns:
            A dict (see `Memory.stats`).

        Raises:
            RuntimeError: This AsyncMemory is closed; otherwise the errors of `Memory.stats`.
        """
        return await self._run(self.memory.stats, space)

    async def index_info(self, space: str = "default") -> dict:
        """As `Memory.index_info`: the space's live indexes.

        Args:
            space: The space (default "default").

        Returns:
            A dict (see `Memory.index_info`).

        Raises:
            RuntimeError: This AsyncMemory is closed; otherwise the errors of `Memory.index_info`.
        """
        return await self._run(self.memory.index_info, space)

    async def spaces(self) -> list[str]:
        """As `Memory.spaces`: the store's spaces (those the caller's scope allows).

        Returns:
            The space names.

        Raises:
            RuntimeError: This AsyncMemory is closed; otherwise the errors of `Memory.spaces`.
        """
        return await self._run(self.memory.spaces)

    async def residency(self) -> ResidencyStats:
        """As `Memory.residency`: live spaces against the budget.

        Returns:
            A `ResidencyStats`.

        Raises:
            RuntimeError: This AsyncMemory is closed; otherwise the errors of `Memory.residency`.
        """
        return await self._run(self.memory.residency)

    # --- life cycle ---------------------------------------------------------------
    async def warm(self) -> "AsyncMemory":
        """As `Memory.warm`: load the models now.

        Returns:
            This AsyncMemory.

        Raises:
            RuntimeError: This AsyncMemory is closed; otherwise the errors of `Memory.warm`.
        """
        await self._run(self.memory.warm)
        return self

    async def checkpoint(self) -> list[str]:
        """As `Memory.checkpoint`: save the changed spaces' indexes as derived files.

        Returns:
            The spaces written.

        Raises:
            RuntimeError: This AsyncMemory is closed; otherwise the errors of `Memory.checkpoint`.
        """
        return await self._run(self.memory.checkpoint)

    async def aclose(self) -> None:
        """Close the Memory (when this AsyncMemory opened it) and the thread pool.

        Calls after it raise RuntimeError. Closing twice is a no-op; a `Memory` given to the
        constructor stays open for its owner to close.
        """
        if self._closed:
            return
        try:
            if self._owns:
                await self._run(self.memory.close)
        finally:
            self._closed = True
            self._pool.shutdown(wait=False)

    async def __aenter__(self) -> "AsyncMemory":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()
