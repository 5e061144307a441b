"""Locks that fit the work (DESIGN §11): a reader/writer lock per space.

Searches of a space share its `RWLock`; the in-memory changes of a write (views, indexes,
the store commit) take it alone for milliseconds. Writers of one space are also serialised
by a plain mutex held across their whole write, model inference and LLM calls included,
which never blocks readers of that space or anyone in another space.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator


class RWLock:
    """Many readers or one writer; a waiting writer stops new readers (no writer starvation).
    Not re-entrant: a thread must not take it twice."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0

    @contextmanager
    def read(self) -> Iterator[None]:
        with self._cond:
            while self._writer or self._writers_waiting:
                self._cond.wait()
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                if not self._readers:
                    self._cond.notify_all()

    @contextmanager
    def write(self) -> Iterator[None]:
        with self._cond:
            self._writers_waiting += 1
            try:
                while self._writer or self._readers:
                    self._cond.wait()
            finally:
                self._writers_waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()
