"""Which space a cache entry belongs to.

Vector caches (the encoder's in-process LRU, the store's `vector_cache` table) and the LLM
response cache are keyed by the text they hold *and* the space the call is made for, so a
search of one space never reads an entry another space made: a cache hit is fast, and a
shared cache would let a tenant time its own searches to learn whether an exact text exists
in someone else's space. `Memory` sets the scope around every call that touches a space
(`scope`); code outside any scope (a bare encoder, the benchmarks when they opt into
`Config.shared_caches`) uses unscoped keys.
"""
from __future__ import annotations

import contextlib
import contextvars
import hashlib
from typing import Iterator

_SCOPE: "contextvars.ContextVar[str | None]" = contextvars.ContextVar("etamem_cache_scope", default=None)


@contextlib.contextmanager
def scope(space: str | None) -> Iterator[None]:
    """Key the cache entries made and read inside (this thread / task) by `space` (None: shared)."""
    token = _SCOPE.set(space)
    try:
        yield
    finally:
        _SCOPE.reset(token)


def current() -> str | None:
    return _SCOPE.get()


def key(text: str, space: str | None = None, *, scoped: bool = True) -> str:
    """The 128-bit hex cache key of `text` in `space` (default: the current scope; `scoped=False`
    or no scope: the text's hash alone, `etamem.models.encoders.text_hash`)."""
    space = current() if space is None and scoped else space
    data = text if space is None else f"{len(space)}:{space}\n{text}"
    return hashlib.blake2b(data.encode("utf-8"), digest_size=16).hexdigest()
