"""The connections of a PostgreSQL store (`etamem.store.postgres.PgStore`): a pool (psycopg_pool) and
the connection a thread holds for a transaction or a snapshot, with reconnect.

- `pool_size` connections at most (default `DEFAULT_POOL_SIZE`; at least one is kept open), set
  by `PgStore(url, pool_size=...)` or the URL's query `?pool_size=N`, which is removed before
  connecting;
- a read outside a transaction takes any connection; `hold()` keeps one connection for a
  whole transaction or snapshot, and the thread's other calls inside it use that one (a
  thread-local current connection), so nested uses join it;
- a connection the server dropped (restart, `pg_terminate_backend`, network) is found when it
  fails (psycopg `OperationalError` and the connection closed or broken), discarded, and the
  pool's idle connections checked; a read that failed so is run once more on a fresh
  connection, and so is a transaction that failed at its `BEGIN` (nothing ran yet). A
  transaction that failed later is not retried: `ConnectionLost` says so (its writes were
  rolled back, or, lost at `COMMIT`, may have committed). A warning is logged at each reconnect.
"""
from __future__ import annotations

import logging
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from etamem.install_hints import install_hint

log = logging.getLogger(__name__)

DEFAULT_POOL_SIZE = 8  # connections at most; one is kept open
POOL_TIMEOUT_S = 30.0  # how long a caller waits for a free (or new) connection before psycopg_pool.PoolTimeout
T = TypeVar("T")


class ConnectionLost(ConnectionError):
    """The connection to PostgreSQL was lost inside a transaction or snapshot, which cannot be
    run again from here: the caller may retry the whole operation (a new connection is taken)."""


def require_psycopg():
    try:
        import psycopg
    except ImportError as exc:
        raise ImportError(f"a PostgreSQL store needs psycopg 3: {install_hint('postgres')}") from exc
    return psycopg


def _pool_class():
    try:
        from psycopg_pool import ConnectionPool
    except ImportError as exc:
        raise ImportError(f"a PostgreSQL store needs psycopg_pool: {install_hint('postgres')}") from exc
    return ConnectionPool


def split_pool_size(url: str, pool_size: int | None = None) -> tuple[str, int]:
    """(the URL without `pool_size` in its query, the pool size): `pool_size` if given, else the
    URL's, else `DEFAULT_POOL_SIZE`."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    given = [v for k, v in query if k == "pool_size"]
    if given and pool_size is None:
        try:
            pool_size = int(given[-1])
        except ValueError:
            raise ValueError(f"pool_size: expected a whole number in the URL, got {given[-1]!r}") from None
    size = DEFAULT_POOL_SIZE if pool_size is None else pool_size
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"pool_size: expected a whole number >= 1, got {size!r}")
    if given:  # `_replace`: a named tuple's public method (SplitResult), not a private name
        parts = parts._replace(query=urlencode([(k, v) for k, v in query if k != "pool_size"]))
    return urlunsplit(parts), size


def is_lost(conn: Any, exc: BaseException) -> bool:
    """Whether `exc` (from using `conn`) means the connection itself is gone."""
    return isinstance(exc, require_psycopg().OperationalError) and bool(conn.closed or conn.broken)


class PgPool:
    """`size` connections to `url` (a psycopg URL, autocommit) for the threads of one store;
    `name` (the URL without its password) for messages."""

    def __init__(self, url: str, size: int, name: str, timeout: float = POOL_TIMEOUT_S):
        self.name, self.size = name, size
        self.reconnects = 0  # connections found dropped and replaced
        self._local = threading.local()
        self._pool = _pool_class()(url, min_size=1, max_size=size, kwargs={"autocommit": True}, open=False,
                                   timeout=timeout, name="etamem")
        self._pool.open(wait=False)

    def current(self) -> Any | None:
        """The connection this thread holds for a transaction or snapshot, or None."""
        return getattr(self._local, "conn", None)

    @contextmanager
    def use(self, conn: Any) -> Iterator[Any]:
        """`conn` (not the pool's, e.g. in a transaction of the caller's) as this thread's held
        connection inside the block."""
        before, self._local.conn = self.current(), conn
        try:
            yield conn
        finally:
            self._local.conn = before

    def _lost(self, conn: Any, exc: BaseException) -> None:
        """A dropped connection: back to the pool (which discards it), then the idle ones checked."""
        self.reconnects += 1
        log.warning("store %s: the connection to PostgreSQL was lost (%s: %s); reconnecting", self.name,
                    type(exc).__name__, str(exc).strip())
        self._pool.putconn(conn)
        self._pool.check()

    def read(self, fn: Callable[[Any], T]) -> T:
        """`fn(connection)`: on this thread's held connection if any (no retry: a snapshot cannot
        be resumed elsewhere), else on a pooled one, run once more on a fresh connection when
        the first one turns out dropped. `fn` must only read (or be safe to run twice)."""
        conn = self.current()
        if conn is not None:
            try:
                return fn(conn)
            except require_psycopg().OperationalError as exc:
                if is_lost(conn, exc):
                    raise ConnectionLost(f"store {self.name}: the connection to PostgreSQL was lost inside a "
                                         f"transaction or snapshot ({exc}); run the operation again") from exc
                raise
        for attempt in (0, 1):
            conn = self._pool.getconn()
            try:
                result = fn(conn)
            except require_psycopg().OperationalError as exc:
                if attempt or not is_lost(conn, exc):
                    self._pool.putconn(conn)
                    raise
                self._lost(conn, exc)
                continue
            except BaseException:
                self._pool.putconn(conn)
                raise
            self._pool.putconn(conn)
            return result
        raise AssertionError("unreachable")  # pragma: no cover

    @contextmanager
    def hold(self, setup: str | None = None, write: bool = True) -> Iterator[Any]:
        """One connection in a transaction (`setup`: a statement run right after `BEGIN`, e.g.
        `SET TRANSACTION ...`) for this thread until the block ends: committed then, rolled
        back on an exception. Inside another `hold` of this thread: that connection, in a
        savepoint when `write`, as is when not. A connection lost at `BEGIN` (or `setup`) is
        replaced once; lost later, `ConnectionLost` (from the psycopg error)."""
        psycopg = require_psycopg()
        outer = self.current()
        if outer is not None:
            if not write:
                yield outer
                return
            with outer.transaction():
                yield outer
            return
        for attempt in (0, 1):
            conn = self._pool.getconn()
            stage = "begin"  # begin -> body -> commit
            try:
                with conn.transaction():
                    if setup:
                        conn.execute(setup)
                    stage = "body"
                    self._local.conn = conn
                    try:
                        yield conn
                    finally:
                        self._local.conn = None
                    stage = "commit"
            except psycopg.OperationalError as exc:
                if stage == "begin" and not attempt and is_lost(conn, exc):
                    self._lost(conn, exc)
                    continue
                self._pool.putconn(conn)
                if stage == "begin" or not is_lost(conn, exc):
                    raise
                what = "transaction" if write else "snapshot"
                outcome = ("it may or may not have committed" if stage == "commit" else
                           "it was rolled back") if write else "its reads stopped"
                raise ConnectionLost(f"store {self.name}: the connection to PostgreSQL was lost during a {what} "
                                     f"({type(exc).__name__}: {str(exc).strip()}); {outcome}, and it is not retried "
                                     f"here: run the operation again") from exc
            except BaseException:
                self._pool.putconn(conn)
                raise
            self._pool.putconn(conn)
            return

    def close(self) -> None:
        self._pool.close()
