"""Reads shared fairly between API keys (`etamem serve`): no key holds more than its share of the
read threads, nor runs more than its share of read work at once.

A key may have at most `max_reads` reads (search, answer, context, list, get, ...) in flight, and
its searches in flight at most `max_work` of work, a search's work being its query's characters
times its `top_k` (a search whose work alone is over the bound is let in when the key has no other
read in flight). A read beyond either bound is refused at once with `ReadRefused` (429 +
Retry-After), not queued: a tenant sending heavy searches from many clients holds at most its
share of the read pool, and the other tenants' searches find a thread free. Reads in flight are
counted in the event loop (no lock); a key with nothing in flight holds no entry.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass


class ReadRefused(Exception):
    """A key is at its bound of reads (or read work) in flight: 429 with Retry-After."""


@dataclass
class _InFlight:
    reads: int = 0
    work: int = 0


class ReadBounds:
    """Reads in flight per key: at most `max_reads` (0: no bound) and at most `max_work` of
    search work (query characters x top_k; 0: no bound)."""

    def __init__(self, max_reads: int = 2, max_work: int = 1_000_000):
        if max_reads < 0 or max_work < 0:
            raise ValueError("max_reads_per_key and max_read_work: 0 (no bound) or more")
        self.max_reads, self.max_work = max_reads, max_work
        self._keys: dict[str, _InFlight] = {}

    def __len__(self) -> int:
        """Keys with reads in flight now."""
        return len(self._keys)

    def in_flight(self, key_id: str) -> tuple[int, int]:
        """(reads, work) `key_id` has in flight now."""
        entry = self._keys.get(key_id)
        return (entry.reads, entry.work) if entry else (0, 0)

    @contextlib.contextmanager
    def read(self, key_id: str, work: int = 0):
        """Hold one of `key_id`'s reads (with `work`) while the block runs; `ReadRefused` beyond a bound."""
        entry = self._keys.get(key_id) or _InFlight()
        if self.max_reads and entry.reads >= self.max_reads:
            raise ReadRefused(f"this key already has {entry.reads} reads in flight (at most {self.max_reads} "
                              f"at once); retry after one is answered")
        if self.max_work and work and entry.reads and entry.work + work > self.max_work:
            raise ReadRefused(f"this key's searches in flight are at their bound of work ({self.max_work} query "
                              f"characters x top_k); retry after one is answered, or ask with a shorter query "
                              f"or a smaller top_k")
        entry.reads += 1
        entry.work += work
        self._keys[key_id] = entry
        try:
            yield
        finally:
            entry.reads -= 1
            entry.work -= work
            if not entry.reads:
                self._keys.pop(key_id, None)


def search_work(query: str, top_k: int | None, default_top_k: int) -> int:
    """A search's work as `ReadBounds` counts it: query characters x top_k (at least 1)."""
    k = default_top_k if top_k is None or isinstance(top_k, bool) or not isinstance(top_k, int) else top_k
    return max(1, len(query)) * max(1, k)
