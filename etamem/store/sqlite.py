"""The store (`etamem.store.sql.SqlStore`) in SQLite, and `open_store`, which picks the backend
for `Memory(target)`: a directory (SQLite), a PostgreSQL URL (`etamem.store.postgres`), or None.

SQLite runs in WAL mode. Every write that belongs together is one transaction (`BEGIN
IMMEDIATE`: one writer at a time across processes; others wait up to `BUSY_TIMEOUT_S`). Deleted
rows are overwritten with zeros (`secure_delete`) and `truncate_wal` empties the write-ahead
log, so forgotten text leaves the database files.
"""
from __future__ import annotations

import logging
import os
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterable, Iterator

from etamem.store.locks import SpaceFileLock
from etamem.store.private_files import private_file
from etamem.store.schema import FORMAT_VERSION, MODEL_KEYS, SCHEMA, top_cosine
from etamem.store.sql import SqlStore

__all__ = ["BUSY_TIMEOUT_S", "DATABASE_URL_PREFIXES", "FORMAT_VERSION", "MODEL_KEYS", "STORE_FILE", "SqlStore", "Store",
           "is_database_url", "open_store", "top_cosine"]

BUSY_TIMEOUT_S = 60.0  # how long a write waits for another process's transaction
STORE_FILE = "memory.sqlite"  # the database file of a store directory
DATABASE_URL_PREFIXES = ("postgresql://", "postgres://")
log = logging.getLogger(__name__)


class Store(SqlStore):
    """One SQLite database per memory store; `path=None` keeps it in memory."""

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = None if path is None else Path(path)
        if self.path is not None:
            private_file(self.path)  # 0600 in a 0700 directory when etamem creates them
        self._lock = threading.RLock()
        self._conn = sqlite3.connect(
            ":memory:" if self.path is None else str(self.path),
            check_same_thread=False, isolation_level=None, timeout=BUSY_TIMEOUT_S,
        )
        self._conn.row_factory = sqlite3.Row
        if self.path is not None:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("PRAGMA foreign_keys=ON")
        self._conn.execute("PRAGMA secure_delete=ON")
        self._conn.executescript(SCHEMA)
        self._check_version()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Cursor]:
        """A write transaction: everything inside commits together or not at all (`BEGIN
        IMMEDIATE`: the one writer of the database until it ends)."""
        with self._lock:
            cur = self._conn.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                yield cur
                cur.execute("COMMIT")
            except BaseException as exc:
                self._roll_back(cur, exc)
                raise

    def _roll_back(self, cur: sqlite3.Cursor, exc: BaseException) -> None:
        """Roll back after `exc`, which stays the error raised: SQLite has already rolled back
        after some errors (SQLITE_FULL: a full disk), and a failing ROLLBACK must not hide it."""
        if not self._conn.in_transaction:
            return
        try:
            cur.execute("ROLLBACK")
        except sqlite3.Error as again:
            log.warning("rollback after %s failed: %s", type(exc).__name__, again)

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads inside see one state of the database, whatever other processes commit
        meanwhile (a read transaction; nested uses join the outer one)."""
        with self._lock:
            if self._conn.in_transaction:
                yield
                return
            self._conn.execute("BEGIN")
            try:
                yield
            finally:
                self._conn.execute("COMMIT")

    def truncate_wal(self) -> bool:
        """Checkpoint the write-ahead log into the database and truncate it to zero bytes (the
        old page images, deleted text included, leave the WAL file). False if another
        connection's open read kept part of it."""
        if self.path is None:
            return True
        with self._lock:
            busy, _, _ = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        return not busy

    def _query(self, sql: str, params: Iterable = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._conn.execute(sql, tuple(params)).fetchall()

    def _execute(self, sql: str, params: Iterable = ()) -> None:
        with self._lock:
            self._conn.execute(sql, tuple(params))

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def is_database_url(target: Any) -> bool:
    """A PostgreSQL URL (`postgresql://...` or `postgres://...`) rather than a directory."""
    if target is None or isinstance(target, os.PathLike):
        return False
    return str(target).startswith(DATABASE_URL_PREFIXES)


def open_store(target: str | os.PathLike | None) -> tuple[SqlStore, Any, Path | None]:
    """The store behind `Memory(target)`: (store, the per-space writer lock across processes,
    the directory for derived files and the LLM cache, or None).

    None: an in-memory SQLite store (no lock: private to the process). A PostgreSQL URL:
    `etamem.store.postgres.PgStore` with an advisory lock per space and no directory (indexes are
    rebuilt from the stored vectors on open). Anything else: a store directory holding
    `memory.sqlite`, with `SpaceFileLock`s under it."""
    if target is None:
        return Store(None), SpaceFileLock(None), None
    if is_database_url(target):
        from etamem.store.postgres import PgSpaceLock, PgStore

        return PgStore(str(target)), PgSpaceLock(str(target)), None
    root = Path(target)
    if root.exists() and not root.is_dir():
        raise ValueError(f"path: {root} exists and is not a directory")
    store = Store(root / STORE_FILE)
    if store.upgraded_from is not None and store.upgraded_from < 5:
        _drop_unsalted_files(root)
    return store, SpaceFileLock(root, store.name_salt()), root


def _drop_unsalted_files(root: Path) -> None:
    """Stores before format 5 named derived directories and lock files by an unsalted hash of
    the space name: the derived files are a cache (rebuilt on the next open) and the lock files
    are made again on the next write, so both go. (Processes of an older etamem must not be
    writing the store meanwhile.)"""
    import shutil

    shutil.rmtree(root / "derived", ignore_errors=True)
    for lock in (root / "locks").glob("*.lock"):
        lock.unlink(missing_ok=True)
