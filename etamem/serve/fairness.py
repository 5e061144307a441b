"""Reads shared fairly between API keys (`etamem serve`): no key holds more than its share of the
read threads, nor runs more than its share of read work at once.

A key may have at most `max_reads` reads (search, answer, context, list, get, ...) in flight, and
its searches in flight at most `max_work` of work, a search's work being its query's characters
times its `top_k`; a search whose work alone is over the bound is let in only when the key has
nothing else running, read or write (a tenant's heaviest searches and its adds take turns), and
not before as long as the key's last such search took has passed since it ended (they run at
most half the time). A read beyond a bound waits in the event loop (no thread held) up to
`wait_s` for room, then is refused with `ReadRefused` (429 + Retry-After): a tenant sending heavy
searches from many clients holds at most its share of the read pool, a client that retries at
once without heeding Retry-After sends at most one request per `wait_s` per connection, and the
other tenants' searches find a thread free. Requests in flight are counted in the event loop (no
lock); a key with nothing in flight or waiting holds no entry.
"""
from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass


class ReadRefused(Exception):
    """A key is at its bound of reads (or read work) in flight: 429 with Retry-After."""


@dataclass
class _InFlight:
    reads: int = 0
    work: int = 0
    writes: int = 0
    waiting: int = 0
    freed: object = None  # an anyio.Event set when one of the key's reads ends


class ReadBounds:
    """Reads in flight per key: at most `max_reads` (0: no bound) and at most `max_work` of
    search work (query characters x top_k; 0: no bound); a read beyond waits up to `wait_s`."""

    def __init__(self, max_reads: int = 2, max_work: int = 1_000_000, wait_s: float = 1.0):
        if max_reads < 0 or max_work < 0 or wait_s < 0:
            raise ValueError("max_reads_per_key, max_read_work and read_wait_s: 0 (no bound / no wait) or more")
        self.max_reads, self.max_work, self.wait_s = max_reads, max_work, wait_s
        self._keys: dict[str, _InFlight] = {}
        self._rest: dict[str, float] = {}  # key -> monotonic time before which its next heavy search waits

    def __len__(self) -> int:
        """Keys with reads or writes in flight now."""
        return len(self._keys)

    def in_flight(self, key_id: str) -> tuple[int, int]:
        """(reads, work) `key_id` has in flight now."""
        entry = self._keys.get(key_id)
        return (entry.reads, entry.work) if entry else (0, 0)

    def _heavy(self, work: int) -> bool:
        return bool(self.max_work) and work > self.max_work

    def _resting(self, key_id: str, work: int) -> float:
        """Seconds `key_id`'s heavy search of `work` must still wait after its last one (0: none)."""
        return max(0.0, self._rest.get(key_id, 0.0) - time.monotonic()) if self._heavy(work) else 0.0

    def _refusal(self, key_id: str, entry: _InFlight, work: int) -> str | None:
        """Why a read of `work` cannot start now (None: it can)."""
        if self.max_reads and entry.reads >= self.max_reads:
            return (f"this key already has {entry.reads} reads in flight (at most {self.max_reads} at once); "
                    f"retry after one is answered")
        if self.max_work and work and (entry.reads or entry.writes) and entry.work + work > self.max_work:
            return (f"this key's requests in flight are at their bound of search work ({self.max_work} query characters "
                    f"x top_k); retry after one is answered, or ask with a shorter query or a smaller top_k")
        if self._resting(key_id, work):
            return (f"this key's searches over the work bound ({self.max_work} query characters x top_k) run at most "
                    f"half the time; retry in a moment, or ask with a shorter query or a smaller top_k")
        return None

    @contextlib.asynccontextmanager
    async def read(self, key_id: str, work: int = 0):
        """Hold one of `key_id`'s reads (with `work`) while the block runs, after waiting up to
        `wait_s` for room; `ReadRefused` if none came."""
        import anyio

        entry = self._keys.setdefault(key_id, _InFlight())
        why = self._refusal(key_id, entry, work)
        if why is not None and self.wait_s:
            entry.waiting += 1
            try:
                with anyio.move_on_after(self.wait_s):
                    while why is not None:
                        resting = self._resting(key_id, work)
                        if resting and self._refusal(key_id, _InFlight(), work) == why:  # only the rest
                            await anyio.sleep(resting)
                        else:
                            if entry.freed is None:
                                entry.freed = anyio.Event()
                            await entry.freed.wait()
                        why = self._refusal(key_id, entry, work)
            finally:
                entry.waiting -= 1
        if why is not None:
            self._forget_if_idle(key_id, entry)
            raise ReadRefused(why)
        entry.reads += 1
        entry.work += work
        started = time.monotonic()
        try:
            yield
        finally:
            entry.reads -= 1
            entry.work -= work
            if self._heavy(work):  # the key's next heavy search waits as long as this one took
                now = time.monotonic()
                self._rest = {k: t for k, t in self._rest.items() if t > now}
                self._rest[key_id] = now + (now - started)
            self._wake(entry)
            self._forget_if_idle(key_id, entry)

    @contextlib.contextmanager
    def write(self, key_id: str):
        """Count one of `key_id`'s writes as running while the block runs (writes are not bounded
        here: they queue per space; a running write keeps the key's heaviest searches waiting)."""
        entry = self._keys.setdefault(key_id, _InFlight())
        entry.writes += 1
        try:
            yield
        finally:
            entry.writes -= 1
            self._wake(entry)
            self._forget_if_idle(key_id, entry)

    @staticmethod
    def _wake(entry: _InFlight) -> None:
        if entry.freed is not None:
            entry.freed.set()
            entry.freed = None

    def _forget_if_idle(self, key_id: str, entry: _InFlight) -> None:
        if not (entry.reads or entry.writes or entry.waiting) and self._keys.get(key_id) is entry:
            del self._keys[key_id]


def search_work(query: str, top_k: int | None, default_top_k: int) -> int:
    """A search's work as `ReadBounds` counts it: query characters x top_k (at least 1)."""
    k = default_top_k if top_k is None or isinstance(top_k, bool) or not isinstance(top_k, int) else top_k
    return max(1, len(query)) * max(1, k)
