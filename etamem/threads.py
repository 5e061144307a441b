"""BLAS threads for the engine's own products (views, indexes, search).

Those products are small (a beam step, a centroid update, one query against a few thousand
leaves), and OpenBLAS's worker threads keep spinning for a while after each call. On a
2-core machine they then take the cores the text encoder (torch) needs for the next add:
the agent-loop benchmark measured encoding the same turns at 46 ms per add in a 1k-unit
space and 97 ms in a 10k-unit one, back to 47 ms with BLAS limited to one thread.
`Config.blas_threads` (default 1; 0 leaves BLAS alone) bounds them around the engine's writes
and searches, through threadpoolctl; a user's own NumPy code is untouched. Searches lose a
little (warm search at 100k units 21 -> 28 ms: their exact products over 54k raw turns are the
largest), adds gain more (the spinning after a search doubled the next add's encoding:
93-107 ms per add against 49-58 ms). The limit is process wide while the engine runs.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager, nullcontext
from typing import ContextManager, Iterator

from etamem.install_hints import install_hint

_controller = None
_lock = threading.Lock()


def _get_controller():
    global _controller
    with _lock:
        if _controller is None:
            try:
                from threadpoolctl import ThreadpoolController
            except ImportError as exc:  # pragma: no cover - a base dependency
                raise ImportError(f"threadpoolctl is required: {install_hint()}") from exc
            _controller = ThreadpoolController()
        return _controller


@contextmanager
def _limited(n: int) -> Iterator[None]:
    with _get_controller().limit(limits=n, user_api="blas"):
        yield


def blas_threads(n: int) -> ContextManager:
    """A context in which BLAS uses at most `n` threads (n = 0: unchanged)."""
    return nullcontext() if n <= 0 else _limited(n)
