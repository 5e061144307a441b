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

    source: a store path or PostgreSQL URL (None = in memory), opened as `Memory(source, config,
    **components)`, or an existing `Memory` to wrap (then `config` and the components must be
    left out, and `aclose` leaves that Memory open: its owner closes it).
    max_workers: threads of the pool the engine work runs in (>= 1).
    The wrapped `Memory` is `self.memory` (e.g. for `memory.views(space)`).
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
        return self.memory.config

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """`fn(*args, **kwargs)` in the pool, in a copy of the caller's context: for several
        `self.memory` calls that belong together (e.g. an adapter's write and its bookkeeping)."""
        return await self._run(fn, *args, **kwargs)

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if self._closed:
            raise RuntimeError("AsyncMemory is closed")
        call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
        return await asyncio.get_running_loop().run_in_executor(self._pool, call)

    # --- writes -------------------------------------------------------------------
    async def add(self, turns: Turns, space: str = "default") -> list[AMU]:
        """`Memory.add`: store turns (or chat messages), then make and index their units."""
        return await self._run(self.memory.add, turns, space)

    async def check(self, turns: Turns, space: str = "default", *, labels: Sequence[str] | None = None,
                    new_space: bool = False) -> list[Turn]:
        """`Memory.check`: validate turns as `add` would, storing nothing."""
        return await self._run(self.memory.check, turns, space, labels=labels, new_space=new_space)

    async def flush(self, space: str = "default") -> list[AMU]:
        """`Memory.flush`: process the space's pending turns."""
        return await self._run(self.memory.flush, space)

    async def end_session(self, space: str = "default") -> list[str]:
        """`Memory.end_session`: close the space's open sessions."""
        return await self._run(self.memory.end_session, space)

    async def delete(self, space: str = "default", amu_id: str | None = None, *, turn_id: str | None = None) -> int:
        """`Memory.delete`: forget a unit, a turn and its units, or the whole space."""
        return await self._run(self.memory.delete, space, amu_id, turn_id=turn_id)

    async def update(self, space: str, turn_id: str, text: str, *, forget_old: bool = False,
                     timestamp: datetime | str | None = None):
        """`Memory.update`: replace a turn's text, the old version kept as history (or forgotten)."""
        return await self._run(self.memory.update, space, turn_id, text, forget_old=forget_old, timestamp=timestamp)

    async def reindex(self) -> dict[str, dict]:
        """`Memory.reindex`: re-encode every space with this Memory's models."""
        return await self._run(self.memory.reindex)

    # --- reads --------------------------------------------------------------------
    async def search(self, query: str, space: str = "default", top_k: int | None = None,
                     now: datetime | str | None = None, *, filters: Filters | Mapping[str, Any] | None = None
                     ) -> list[Hit]:
        """`Memory.search`: the best AMUs of the space for the query, best first."""
        return await self._run(self.memory.search, query, space, top_k, now, filters=filters)

    async def retrieve(self, query: str, space: str = "default", *, top_k: int | None = None,
                       now: datetime | str | None = None, views: tuple[str, ...] = ("event", "affect", "time"),
                       routing: str | None = None, fallback: bool = True, trace: bool = False,
                       filters: Filters | Mapping[str, Any] | None = None) -> SearchResult:
        """`Memory.retrieve`: the hits with how they were found."""
        return await self._run(self.memory.retrieve, query, space, top_k=top_k, now=now, views=views,
                               routing=routing, fallback=fallback, trace=trace, filters=filters)

    async def context(self, query: str, space: str = "default", *, top_k: int | None = None,
                      now: datetime | str | None = None, filters: Filters | Mapping[str, Any] | None = None) -> str:
        """`Memory.context`: the prompt-ready memory for `query`."""
        return await self._run(self.memory.context, query, space, top_k=top_k, now=now, filters=filters)

    async def context_packet(self, query: str, space: str = "default", *, top_k: int | None = None,
                             now: datetime | str | None = None,
                             filters: Filters | Mapping[str, Any] | None = None) -> MemoryContext:
        """`Memory.context_packet`: `context`'s text with the hits it renders."""
        return await self._run(self.memory.context_packet, query, space, top_k=top_k, now=now, filters=filters)

    async def answer(self, question: str, space: str = "default", now: datetime | str | None = None,
                     top_k: int | None = None, *, filters: Filters | Mapping[str, Any] | None = None) -> Answer:
        """`Memory.answer`: an answer grounded in the space's memories."""
        return await self._run(self.memory.answer, question, space, now, top_k, filters=filters)

    async def with_raw_turns(self, question: str, hits: list[Hit], space: str = "default") -> list[Hit]:
        """`Memory.with_raw_turns`: `hits` with the space's best raw turns fused in."""
        return await self._run(self.memory.with_raw_turns, question, hits, space)

    async def time_summaries(self, space: str, hits: list[Hit]) -> str:
        """`Memory.time_summaries`: the day and week summaries of the hits' sessions."""
        return await self._run(self.memory.time_summaries, space, hits)

    async def get(self, amu_id: str, space: str = "default") -> AMU:
        """`Memory.get`: one AMU by id."""
        return await self._run(self.memory.get, amu_id, space)

    async def list(self, space: str = "default", status: str | None = None) -> list[AMU]:
        """`Memory.list`: the AMUs of a space in insertion order."""
        return await self._run(self.memory.list, space, status)

    async def turns(self, space: str = "default", turn_ids: list[str] | None = None) -> list[Turn]:
        """`Memory.turns`: the raw stored turns of a space in arrival order."""
        return await self._run(self.memory.turns, space, turn_ids)

    async def history(self, unit_id: str, space: str = "default") -> list:
        """`Memory.history`: the versions of a fact, oldest first."""
        return await self._run(self.memory.history, unit_id, space)

    async def links(self, space: str = "default", unit_id: str | None = None) -> list:
        """`Memory.links`: the relation links of the space."""
        return await self._run(self.memory.links, space, unit_id)

    async def stats(self, space: str = "default") -> dict:
        """`Memory.stats`: the per-view shape of a space and the extraction counters."""
        return await self._run(self.memory.stats, space)

    async def index_info(self, space: str = "default") -> dict:
        """`Memory.index_info`: the space's live indexes."""
        return await self._run(self.memory.index_info, space)

    async def spaces(self) -> list[str]:
        """`Memory.spaces`: the store's spaces (those the caller's scope allows)."""
        return await self._run(self.memory.spaces)

    async def residency(self) -> ResidencyStats:
        """`Memory.residency`: live spaces against the budget."""
        return await self._run(self.memory.residency)

    # --- life cycle ---------------------------------------------------------------
    async def warm(self) -> "AsyncMemory":
        """`Memory.warm`: load the models now; returns self."""
        await self._run(self.memory.warm)
        return self

    async def checkpoint(self) -> list[str]:
        """`Memory.checkpoint`: save the changed spaces' indexes as derived files."""
        return await self._run(self.memory.checkpoint)

    async def aclose(self) -> None:
        """Close the Memory (when this AsyncMemory opened it) and the thread pool; calls after
        it raise RuntimeError. Closing twice is a no-op."""
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
