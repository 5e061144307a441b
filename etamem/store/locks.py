"""Locks that fit the work (see docs/design.md, 'Invariants'): a reader/writer lock per space.

Searches of a space share its `RWLock`; the in-memory changes of a write (views, indexes,
the store commit) take it alone for milliseconds. Writers of one space are also serialised
by a plain mutex held across their whole write, model inference and LLM calls included,
which never blocks readers of that space or anyone in another space. Across processes (or
several `Memory` objects on one store) the writer of a space also holds a `SpaceFileLock`.
"""
from __future__ import annotations

import hashlib
import logging
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from etamem.store.private_files import private_dir

log = logging.getLogger(__name__)


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

    def busy(self) -> bool:
        """Held or waited for by anyone right now (a snapshot: it may change at once)."""
        with self._cond:
            return bool(self._readers or self._writer or self._writers_waiting)

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


class SpaceFileLock:
    """One writer per space across processes: an exclusive `flock` on
    `<root>/locks/<hash of space>.lock` (the name hashed with the store's `salt`), held for a
    whole write; `remove` deletes a deleted space's file. `root=None` (an in-memory store,
    private to its process) locks nothing. Where `fcntl` is missing (Windows) it locks nothing
    either, with one warning: run one writing process per store there."""

    def __init__(self, root: str | os.PathLike | None, salt: str = ""):
        self.dir = None if root is None else Path(root) / "locks"
        self.salt = salt.encode("ascii")[:64]
        try:
            import fcntl  # noqa: F401
            self._fcntl = fcntl
        except ImportError:  # pragma: no cover - not on Linux/macOS
            self._fcntl = None
            if self.dir is not None:
                log.warning("no fcntl here: writers in several processes are not serialised")

    def path(self, space: str) -> Path | None:
        if self.dir is None:
            return None
        return self.dir / (hashlib.blake2b(space.encode("utf-8"), digest_size=10, key=self.salt).hexdigest() + ".lock")

    @contextmanager
    def hold(self, space: str) -> Iterator[None]:
        path = self.path(space)
        if path is None or self._fcntl is None:
            yield
            return
        private_dir(path.parent)
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                self._fcntl.flock(fd, self._fcntl.LOCK_EX)
                try:  # the file may have been removed (its space deleted) while we waited: lock the new one
                    same = os.stat(path).st_ino == os.fstat(fd).st_ino
                except FileNotFoundError:
                    same = False
            except BaseException:
                os.close(fd)
                raise
            if same:
                break
            os.close(fd)
        try:
            yield
        finally:
            os.close(fd)  # closing the descriptor releases the lock

    @contextmanager
    def try_hold(self, space: str) -> Iterator[bool]:
        """Like `hold` without waiting: yields True holding the lock, False (holding nothing) when
        another process holds it or its file was just replaced."""
        path = self.path(space)
        if path is None or self._fcntl is None:
            yield True
            return
        private_dir(path.parent)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            try:
                self._fcntl.flock(fd, self._fcntl.LOCK_EX | self._fcntl.LOCK_NB)
                held = os.stat(path).st_ino == os.fstat(fd).st_ino
            except (BlockingIOError, FileNotFoundError):
                held = False
            yield held
        finally:
            os.close(fd)

    def remove(self, space: str) -> None:
        """Delete the space's lock file (the caller holds the lock: a waiter then locks a new file)."""
        path = self.path(space)
        if path is not None:
            try:
                path.unlink()
            except FileNotFoundError:
                pass

    def close(self) -> None:
        """Nothing to release between writes (the PostgreSQL lock keeps connections)."""
