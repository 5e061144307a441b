"""The store in PostgreSQL with pgvector (see docs/storage-and-scale-out.md): several server processes share one
database. `pip install -e ".[postgres]"` (psycopg 3); the database needs pgvector >= 0.8, whose
extension is created on first open when the role may.

The tables, columns and operations are `etamem.store.sql.SqlStore`'s; this module is the
PostgreSQL side of its dialect layer:

- types: BLOB is BYTEA, REAL is DOUBLE PRECISION, TEXT is `TEXT COLLATE "C"` (byte order, as
  SQLite sorts); the shared SQL's `?` placeholders become psycopg's `%s` (`_pg`);
- unit and turn vectors are also written as pgvector values (`embedding vector`, beside the
  float32 blob, in the same statement). The column has no fixed dimension, so each vector kind
  and dimension gets a partial HNSW index (`vector_cosine_ops`) over a cast to `vector(d)`,
  created before the first write that stores such vectors;
- `nearest_units` / `nearest_turns` order by that index with `hnsw.iterative_scan =
  relaxed_order`: a search filtered to one space keeps scanning the graph until it has k rows
  of that space, however small a part of the table the space is (re-sorted after); should the
  scan stop short anyway (`hnsw.max_scan_tuples`), the exact search answers;
- a write transaction runs at READ COMMITTED. Writes of one space are serialised by the row lock
  on the space's generation counter, which each of them raises first, and in `Memory` by
  `PgSpaceLock` around the whole write; other spaces write concurrently. `snapshot` is a
  REPEATABLE READ, READ ONLY transaction;
- connections come from a pool (`etamem.store.pg_pool`, `?pool_size=N` on the URL): a transaction or
  snapshot keeps one for its thread, reads take any; dropped connections are replaced (reads
  retried once, a write transaction only when it failed at `BEGIN`);
- no `secure_delete` / `truncate_wal` equivalent a client can run: deleted rows leave the table
  files when (auto)VACUUM reclaims their space, and the server recycles its WAL segments.
"""
from __future__ import annotations

import hashlib
import logging
import re
import threading
from contextlib import contextmanager
from functools import lru_cache
from typing import Iterable, Iterator

import numpy as np

from etamem.store.pg_pool import PgPool, is_lost, require_psycopg, split_pool_size
from etamem.store.schema import SCHEMA, UNIT_KINDS, VECTOR_TABLES, upsert, vector_blob
from etamem.store.sql import SqlStore

log = logging.getLogger(__name__)

MIN_PGVECTOR = (0, 8)  # hnsw.iterative_scan
HNSW_MAX_DIM = 2000  # pgvector's limit for an HNSW index on `vector`; above it searches are exact
_TYPES = {"BLOB": "BYTEA", "REAL": "DOUBLE PRECISION", "TEXT": 'TEXT COLLATE "C"'}
_SCHEMA_LOCK = 0x6574616D656D  # advisory lock key held while the schema or an index is created ("etamem")


@lru_cache(maxsize=1024)
def _pg(sql: str) -> str:
    """The shared SQL with psycopg's placeholders (a literal `%` doubled; the shared SQL has no literal `?`)."""
    return sql.replace("%", "%%").replace("?", "%s")


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    url = re.sub(r"(?<=://)([^:@/]*):[^@/]*@", r"\1:***@", url)
    return re.sub(r"(?i)(password=)[^&\s]*", r"\1***", url)


def _connect(url: str):
    return require_psycopg().connect(url, autocommit=True)


def _ddl() -> list[str]:
    """The shared schema in PostgreSQL's types, one statement each."""
    text = re.sub(r"\b(BLOB|REAL|TEXT)\b", lambda m: _TYPES[m.group(1)], SCHEMA)
    return [s.strip() for s in text.split(";") if s.strip()]


def _filter(kind: str | None, dim: int) -> str:
    """The rows one HNSW index covers (literals, so that the planner can match the partial index)."""
    if kind is not None and kind not in UNIT_KINDS:
        raise ValueError(f"kind: expected one of {UNIT_KINDS}, got {kind!r}")
    return (f"kind = '{kind}' AND " if kind else "") + f"vector_dims(embedding) = {int(dim)}"


def index_name(table: str, kind: str | None, dim: int) -> str:
    return f"{table}_{kind + '_' if kind else ''}{int(dim)}_hnsw"


class _Cursor:
    """A psycopg cursor that takes the shared SQL (`?` placeholders)."""

    def __init__(self, cur):
        self._cur = cur

    def execute(self, sql: str, params: Iterable = ()):
        return self._cur.execute(_pg(sql), tuple(params))

    def executemany(self, sql: str, rows: Iterable):
        rows = list(rows)
        if rows:
            self._cur.executemany(_pg(sql), rows)
        return self._cur

    def __getattr__(self, name: str):
        return getattr(self._cur, name)


class PgStore(SqlStore):
    """The store in a PostgreSQL database (`url`: `postgresql://user:password@host/dbname`,
    optionally `?pool_size=N`). A pool of `pool_size` connections (`etamem.store.pg_pool`): reads
    take any, a transaction or snapshot keeps one for the thread that runs it; dropped
    connections are replaced (reads retried once, writes not)."""

    def __init__(self, url: str, pool_size: int | None = None):
        url, size = split_pool_size(url, pool_size)
        self.url = url
        self.path = redact(url)  # what messages call the store
        self._indexed: set[tuple] = set()  # (table, kind, dim) known to have their HNSW index
        self.exact_fallbacks = 0  # nearest-neighbour searches the index answered short (then exact)
        with _connect(url) as conn, conn.transaction():  # fails here, at once, on a bad URL
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))  # one creator at a time
            self._require_pgvector(conn)
            for statement in _ddl():
                conn.execute(statement)
            for table in VECTOR_TABLES:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS embedding vector")
            self.pool = PgPool(url, size, self.path)
            try:
                with self.pool.use(conn):  # still under the lock
                    self._check_version()
            except BaseException:
                self.pool.close()
                raise

    def _require_pgvector(self, conn) -> None:
        psycopg = require_psycopg()
        row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
        if row is None:
            try:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            except psycopg.Error as exc:
                raise RuntimeError(f"store {self.path}: the pgvector extension is not installed in this database "
                                   f"and could not be created ({exc}); run CREATE EXTENSION vector as a "
                                   f"superuser") from exc
            row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
        version = tuple(int(x) for x in re.findall(r"\d+", row[0])[:2])
        if version < MIN_PGVECTOR:
            raise RuntimeError(f"store {self.path}: pgvector {row[0]} is installed; etamem needs "
                               f"{'.'.join(map(str, MIN_PGVECTOR))} or later (ALTER EXTENSION vector UPDATE)")

    # --- dialect -----------------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[_Cursor]:
        """A write transaction (READ COMMITTED): everything inside commits together or not at all
        (nested: a savepoint of the outer one)."""
        with self.pool.hold() as conn, conn.cursor() as cur:
            yield _Cursor(cur)

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads inside see one state of the database (a REPEATABLE READ, READ ONLY transaction
        on one connection; nested uses join the outer one)."""
        with self.pool.hold("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY", write=False):
            yield

    def _query(self, sql: str, params: Iterable = ()) -> list[tuple]:
        return self.pool.read(lambda conn: conn.execute(_pg(sql), tuple(params)).fetchall())

    def _execute(self, sql: str, params: Iterable = ()) -> None:
        with self.transaction() as cur:  # a write: never retried once it ran
            cur.execute(sql, params)

    def close(self) -> None:
        self.pool.close()

    @staticmethod
    def _json_values(column: str) -> str:
        return f"jsonb_array_elements_text(CAST({column} AS jsonb)) AS j(value)"

    def _vector_sql(self, table: str) -> str:
        keys = VECTOR_TABLES[table]
        return upsert(table, (*keys, "vector", "embedding"), keys,
                      marks=("?",) * (len(keys) + 1) + ("CAST(? AS vector)",))

    @staticmethod
    def _vector_params(vec: np.ndarray) -> tuple:
        v = np.asarray(vec, np.float32).ravel()
        return vector_blob(v), "[" + ",".join(map(repr, v.tolist())) + "]"  # repr: every float32 exactly

    def _index_vectors(self, table: str, kind: str | None, dim: int) -> None:
        """The HNSW index over `table`'s vectors of `kind` and `dim`, created if missing (in a
        transaction of its own, before the write, so that no write holds locks while it waits)."""
        if (table, kind, dim) in self._indexed or dim > HNSW_MAX_DIM:
            return
        name = index_name(table, kind, dim)
        exists = "SELECT 1 FROM pg_indexes WHERE schemaname = current_schema() AND indexname = ?"
        if not self._query(exists, (name,)):
            with self.transaction() as cur:
                cur.execute("SELECT pg_advisory_xact_lock(?)", (_SCHEMA_LOCK,))
                cur.execute(f"CREATE INDEX IF NOT EXISTS {name} ON {table} USING hnsw "
                            f"((CAST(embedding AS vector({dim}))) vector_cosine_ops) WHERE {_filter(kind, dim)}")
            log.info("created the HNSW index %s", name)
        self._indexed.add((table, kind, dim))

    # --- nearest neighbours -----------------------------------------------------------------
    def nearest_units(self, space: str, kind: str, vector: np.ndarray, k: int) -> list[tuple[str, float]]:
        """The `k` units of the space whose `kind` ('text' | 'affect') vectors are most
        cosine-similar to `vector`, as (amu id, cosine), best first: min(k, units) rows, from the
        HNSW index (approximate), exact when the index cannot answer."""
        self._check_nearest(kind, k)
        found = self._nearest("amu_vectors", kind, space, vector, k)
        return super().nearest_units(space, kind, vector, k) if found is None else found

    def nearest_turns(self, space: str, vector: np.ndarray, k: int) -> list[tuple[str, float]]:
        """As `nearest_units`, over the space's raw-turn vectors: [(turn id, cosine)]."""
        self._check_nearest("text", k)
        found = self._nearest("turn_vectors", None, space, vector, k)
        return super().nearest_turns(space, vector, k) if found is None else found

    def _scan(self, conn, table: str, kind: str | None, space: str, q: np.ndarray, k: int) -> list | None:
        """The index-ordered rows on `conn` (a read, safe to run again), None when short."""
        with conn.transaction():
            conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
            conn.execute(f"SET LOCAL hnsw.ef_search = {min(1000, max(40, 2 * int(k)))}")
            rows = conn.execute(_pg(self.nearest_sql(table, kind, q.shape[0], k)),
                                (self._vector_params(q)[1], space)).fetchall()
            if len(rows) < k:
                count = f"SELECT COUNT(*) FROM {table} WHERE space = ? AND {_filter(kind, q.shape[0])}"
                n = conn.execute(_pg(count), (space,)).fetchone()[0]
                if len(rows) < min(k, n):
                    self.exact_fallbacks += 1
                    log.info("space %s: the HNSW scan of %s gave %d of %d rows; searching exactly", space, table,
                             len(rows), min(k, n))
                    return None
        return rows

    @staticmethod
    def nearest_sql(table: str, kind: str | None, dim: int, k: int) -> str:
        """The index-ordered query (parameters: the query vector as text, the space)."""
        key = VECTOR_TABLES[table][1]
        return (f"SELECT {key}, CAST(embedding AS vector({int(dim)})) <=> CAST(? AS vector({int(dim)})) AS distance "
                f"FROM {table} WHERE space = ? AND {_filter(kind, dim)} ORDER BY distance LIMIT {int(k)}")

    def _nearest(self, table: str, kind: str | None, space: str, vector, k: int) -> list[tuple[str, float]] | None:
        """Index-ordered neighbours, or None when the exact search must answer (too many
        dimensions for the index, or the scan stopped before min(k, n) rows)."""
        q = np.asarray(vector, np.float32).ravel()
        if q.shape[0] > HNSW_MAX_DIM:
            return None
        rows = self.pool.read(lambda conn: self._scan(conn, table, kind, space, q, k))
        if rows is None:
            return None
        rows.sort(key=lambda r: (r[1], r[0]))  # relaxed order: nearly sorted
        return [(r[0], 1.0 - float(r[1])) for r in rows]


class PgSpaceLock:
    """One writer per space across processes (and hosts) sharing a PostgreSQL store: a session
    advisory lock (`pg_advisory_lock`) on a 64-bit hash of the space, taken on a connection of
    its own for the whole write and released after it; the interface of
    `etamem.store.locks.SpaceFileLock`. Connections are kept for the next write (one per write in
    progress), so a writer waiting for one space never delays another space's."""

    def __init__(self, url: str):
        require_psycopg()
        self.url = split_pool_size(url)[0]
        self._idle: list = []
        self._mutex = threading.Lock()

    @staticmethod
    def key(space: str) -> int:
        digest = hashlib.blake2b(b"etamem-space\0" + space.encode("utf-8"), digest_size=8).digest()
        return int.from_bytes(digest, "big", signed=True)

    @contextmanager
    def hold(self, space: str) -> Iterator[None]:
        key = self.key(space)
        conn = self._take()
        try:
            conn.execute("SELECT pg_advisory_lock(%s::bigint)", (key,))
        except require_psycopg().OperationalError as exc:
            lost = is_lost(conn, exc)
            conn.close()
            if not lost:
                raise
            log.warning("space lock: the connection to PostgreSQL was lost (%s); reconnecting", str(exc).strip())
            self._drop_idle()  # dropped with it, most likely
            conn = _connect(self.url)
            try:
                conn.execute("SELECT pg_advisory_lock(%s::bigint)", (key,))
            except BaseException:
                conn.close()
                raise
        except BaseException:
            conn.close()
            raise
        try:
            yield
        finally:
            self._release(conn, key)

    def remove(self, space: str) -> None:
        """Nothing to delete: advisory locks leave no trace."""

    def _take(self):
        with self._mutex:
            while self._idle:
                conn = self._idle.pop()
                if not conn.closed and not conn.broken:
                    return conn
        return _connect(self.url)

    def _release(self, conn, key: int) -> None:
        try:
            conn.execute("SELECT pg_advisory_unlock(%s::bigint)", (key,))
        except Exception:  # noqa: BLE001 - the connection is gone or unusable: its session's locks went with it
            conn.close()
            return
        with self._mutex:
            self._idle.append(conn)

    def _drop_idle(self) -> None:
        with self._mutex:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def close(self) -> None:
        self._drop_idle()
