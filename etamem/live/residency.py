"""Bounded residency of live spaces: a table in least-recently-used order under a budget.

`LiveTable` holds the engine's live spaces by name (`Config.max_live_spaces`, and optionally
`Config.max_live_bytes` from each value's `size`); every `get` makes a space the most recently
used. The table only says which spaces are over the budget, least recently used first
(`eviction_order`); the engine decides whether each may go (not in use) and saves its derived
files before `pop` (see `etamem.engine`). Thread-safe: every operation holds the table's lock.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Generic, Iterator, TypeVar

import numpy as np

V = TypeVar("V")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ResidencyStats:
    """What `Memory.residency()` reports. `max_live_spaces` / `max_live_bytes`: the budget (0: none);
    `live_bytes`: the estimate of the live spaces' arrays (None without a byte budget); `opens`:
    spaces opened (from the store or derived files), `opens_from_files` of them from derived files;
    `follows`: live spaces brought up to another process's writes from the change log instead of
    opened again; `evictions`: spaces dropped for the budget; `saved_on_eviction`: of them, with
    their indexes saved first."""
    live: int
    max_live_spaces: int
    max_live_bytes: int
    live_bytes: int | None
    opens: int
    opens_from_files: int
    follows: int
    evictions: int
    saved_on_eviction: int


class LiveTable(Generic[V]):
    """Name -> value in least-recently-used order with a budget of `max_items` values and
    `max_bytes` of `size(value)` (0: no bound of that kind)."""

    def __init__(self, max_items: int = 0, max_bytes: int = 0, size: Callable[[V], int] | None = None):
        if max_items < 0 or max_bytes < 0:
            raise ValueError(f"budget: expected max_items >= 0 and max_bytes >= 0, got {max_items}, {max_bytes}")
        if max_bytes and size is None:
            raise ValueError("budget: max_bytes needs a size function")
        self.max_items, self.max_bytes, self._size = max_items, max_bytes, size
        self._items: OrderedDict[str, V] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def bounded(self) -> bool:
        return bool(self.max_items or self.max_bytes)

    def get(self, name: str, default: V | None = None) -> V | None:
        """The value, now the most recently used; `default` when absent."""
        with self._lock:
            value = self._items.get(name)
            if value is None:
                return default
            self._items.move_to_end(name)
            return value

    def peek(self, name: str) -> V | None:
        """The value without touching its place in the order."""
        with self._lock:
            return self._items.get(name)

    def __setitem__(self, name: str, value: V) -> None:
        with self._lock:
            self._items[name] = value
            self._items.move_to_end(name)

    def pop(self, name: str, default: V | None = None) -> V | None:
        with self._lock:
            return self._items.pop(name, default)

    def pop_if(self, name: str, value: V) -> bool:
        """Remove `name` only while it still maps to `value` (not reopened meanwhile)."""
        with self._lock:
            if self._items.get(name) is not value:
                return False
            del self._items[name]
            return True

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def __contains__(self, name: object) -> bool:
        with self._lock:
            return name in self._items

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def values(self) -> list[V]:
        """A snapshot, least recently used first."""
        with self._lock:
            return list(self._items.values())

    def nbytes(self) -> int:
        """The sum of `size` over the values (0 without a size function)."""
        values = self.values()
        return 0 if self._size is None else sum(self._size(v) for v in values)

    def over_budget(self) -> bool:
        if self.max_items and len(self) > self.max_items:
            return True
        return bool(self.max_bytes) and self.nbytes() > self.max_bytes

    def eviction_order(self, keep: str | None = None) -> Iterator[tuple[str, V]]:
        """(name, value) least recently used first while the table is over budget, `keep` (the space
        just opened) never; the caller pops or skips each (the budget is checked again before each)."""
        with self._lock:
            order = list(self._items.items())
        for name, value in order:
            if not self.over_budget():
                return
            if name != keep:
                yield name, value


class FreedPages:
    """Once every `every` evictions, collects the evicted spaces' reference cycles (a full
    `gc.collect`: a dropped live space is otherwise freed only at the interpreter's next full
    collection, tens of MB later) and hands the C heap's free pages back to the system (glibc's
    `malloc_trim`; nothing where there is none: a heap fragmented by spaces opened and dropped
    keeps its pages). Without it, RSS grows by ~90 KB per space created past the budget
    (benchmarks/new_spaces.py)."""

    def __init__(self, every: int = 32):
        self.every, self._since, self.trims = every, 0, 0
        self._lock = threading.Lock()
        self._trim = _malloc_trim()

    def evicted(self, n: int = 1) -> None:
        if n <= 0:
            return
        with self._lock:
            self._since += n
            if self._since < self.every:
                return
            self._since = 0
            self.trims += 1
        t0 = time.perf_counter()
        gc.collect()
        if self._trim is not None:
            self._trim(0)
        log.debug("evictions: cycles collected and free pages handed back in %.1f ms", (time.perf_counter() - t0) * 1e3)


def _malloc_trim():
    """glibc's `malloc_trim`, or None (another C library, or not found)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def array_bytes(obj: object, limit: int = 1_000_000) -> int:
    """Bytes of the numpy arrays reachable from `obj` through attributes, lists, tuples, sets and
    dicts (each buffer counted once), visiting at most `limit` objects: an estimate of a live
    space's memory (its vectors, matrices and index arrays; Python objects are not counted)."""
    seen: set[int] = set()
    bases: set[int] = set()
    total, stack, visited = 0, [obj], 0
    while stack and visited < limit:
        item = stack.pop()
        if id(item) in seen or isinstance(item, (str, bytes, int, float, bool, type(None))):
            continue
        seen.add(id(item))
        visited += 1
        if isinstance(item, np.ndarray):
            base = item
            while isinstance(base.base, np.ndarray):
                base = base.base
            if id(base) not in bases:
                bases.add(id(base))
                total += base.nbytes
            continue
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        else:
            attrs = getattr(item, "__dict__", None)
            if attrs is not None:
                stack.extend(attrs.values())
            slots = getattr(type(item), "__slots__", ())
            for slot in (slots,) if isinstance(slots, str) else slots:
                stack.append(getattr(item, slot, None))
    return total
