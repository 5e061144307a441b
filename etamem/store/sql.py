"""One implementation of every store operation, for SQLite (`etamem.store.sqlite.Store`) and
PostgreSQL with pgvector (`etamem.store.postgres.PgStore`).

The store knows no algorithm. Timestamps are kept as ISO 8601 strings plus epoch seconds;
vectors as little-endian float32 blobs; lists as JSON. No pickle. The SQL is written once, with
`?` placeholders and the `INSERT ... ON CONFLICT` upsert both databases accept, and every write
that belongs together is one transaction. A backend fills in a small dialect layer (the hooks
at the top of `SqlStore`): the connection and its placeholder, the column types of `SCHEMA`,
the JSON-array query (`_json_values`), how a write transaction starts (`transaction`), what a
consistent read is (`snapshot`), the extra vector column (`_vector_sql`, `_vector_params`,
`_index_vectors`), what makes deleted text leave the files (`truncate_wal`) and how nearest
neighbours are found (`nearest_units`: exact NumPy here, an HNSW index on PostgreSQL).

`SqlStore` keeps the dialect hooks and the store-wide rows (format, meta, model identity, API
keys, vector cache); the tables and encodings are in `etamem.store.schema`, the space and turn
operations in `etamem.store.spaces`, the unit, vector and view-row operations in
`etamem.store.units` (mixins over the same hooks).
"""
from __future__ import annotations

import json
import secrets
from contextlib import contextmanager
from typing import Any, Iterable, Iterator

import numpy as np

from etamem.store.schema import (
    _KEEP_META,
    _PUT_CACHED,
    _SET_META,
    FORMAT_VERSION,
    MODEL_KEYS,
    SPACE_TABLES,
    UNIT_KINDS,
    VECTOR_TABLES,
    UnitExtras,
    _vec,
    top_cosine,
    upsert,
    vector_blob,
)
from etamem.store.spaces import SpaceRows
from etamem.store.units import UnitRows

# the schema's names stay importable from here
__all__ = ["FORMAT_VERSION", "MODEL_KEYS", "SPACE_TABLES", "UNIT_KINDS", "VECTOR_TABLES", "SqlStore", "UnitExtras",
           "top_cosine", "upsert"]


class SqlStore(SpaceRows, UnitRows):
    """Every store operation, once, over a DB-API connection; a backend supplies the connection
    and the dialect hooks below (`Store`: SQLite; `etamem.store.postgres.PgStore`: PostgreSQL)."""

    path: Any = None  # what error messages call the store (a file, or a URL without its password)

    # --- dialect hooks -------------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """A write transaction yielding a cursor: everything inside commits together or not at all."""
        raise NotImplementedError

    @contextmanager
    def snapshot(self) -> Iterator[None]:
        """Reads inside see one state of the database, whatever other connections commit
        meanwhile (nested uses join the outer one)."""
        raise NotImplementedError

    def _query(self, sql: str, params: Iterable = ()) -> list:
        """Rows of one statement (outside a write transaction)."""
        raise NotImplementedError

    def _execute(self, sql: str, params: Iterable = ()) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def truncate_wal(self) -> bool:
        """Make deleted text leave the database's log files now if the database allows it;
        False if it could not be done now."""
        return True

    @staticmethod
    def _json_values(column: str) -> str:
        """A table expression with one `value` column: the elements of a JSON list column."""
        return f"json_each({column})"

    def _vector_sql(self, table: str) -> str:
        """The upsert of one row of a vector table (key columns, then `_vector_params`)."""
        return upsert(table, (*VECTOR_TABLES[table], "vector"), VECTOR_TABLES[table])

    @staticmethod
    def _vector_params(vec: np.ndarray) -> tuple:
        return (vector_blob(vec),)

    def _index_vectors(self, table: str, kind: str | None, dim: int) -> None:
        """Called before a write stores vectors of `dim` in `table` (`kind` for unit vectors);
        outside any transaction. A backend with a vector index creates it here."""

    # --- plumbing -------------------------------------------------------------------
    upgraded_from: int | None = None  # the format version this open upgraded the store from

    def _check_version(self) -> None:
        rows = self._query("SELECT value FROM meta WHERE key='format_version'")
        if rows and int(rows[0][0]) < FORMAT_VERSION:
            self.upgraded_from = int(rows[0][0])
        if not rows:
            self._execute("INSERT INTO meta (key, value) VALUES ('format_version', ?)", (str(FORMAT_VERSION),))
        elif int(rows[0][0]) in (1, 2, 3, 4):  # the tables added since exist now; views and turn vectors are rebuilt on load
            with self.transaction() as cur:
                # vector-cache keys were text hashes shared by every space (a cross-space timing
                # oracle); they are scoped by space now: the old rows would never be read again
                cur.execute("DELETE FROM vector_cache")
                cur.execute("UPDATE meta SET value=? WHERE key='format_version'", (str(FORMAT_VERSION),))
        elif int(rows[0][0]) in (5, 6):  # 5: the change log is created empty (followers reopen once, then
            # follow it); 6: nothing to change (no turn of an older store is queued)
            self._execute("UPDATE meta SET value=? WHERE key='format_version'", (str(FORMAT_VERSION),))
        elif int(rows[0][0]) != FORMAT_VERSION:
            raise ValueError(
                f"store {self.path}: format version {rows[0][0]} is not supported (this etamem writes {FORMAT_VERSION})"
            )

    def get_meta(self, key: str) -> str | None:
        rows = self._query("SELECT value FROM meta WHERE key=?", (key,))
        return rows[0][0] if rows else None

    def set_meta(self, key: str, value: str) -> None:
        with self.transaction() as cur:
            cur.execute(_SET_META, (key, value))

    # --- API keys (etamem.tenancy): hashes only -------------------------------------------------
    def insert_api_key(self, key_id: str, secret_hash: str, spaces: list[str], created: str, note: str = "") -> None:
        with self.transaction() as cur:
            cur.execute("INSERT INTO api_keys (key_id, secret_hash, spaces, created, revoked, note) "
                        "VALUES (?,?,?,?,0,?)", (key_id, secret_hash, json.dumps(sorted(spaces)), created, note))

    def api_key(self, key_id: str) -> tuple[str, list[str], bool] | None:
        """(secret hash, spaces, revoked) of a key id, or None."""
        rows = self._query("SELECT secret_hash, spaces, revoked FROM api_keys WHERE key_id=?", (key_id,))
        return None if not rows else (rows[0][0], json.loads(rows[0][1]), bool(rows[0][2]))

    def api_keys(self) -> list:
        """Every key's record (`etamem.tenancy.ApiKey`, no secret), oldest first."""
        from etamem.tenancy import ApiKey

        rows = self._query("SELECT key_id, spaces, created, revoked, note FROM api_keys ORDER BY created, key_id")
        return [ApiKey(r[0], tuple(json.loads(r[1])), r[2], bool(r[3]), r[4]) for r in rows]

    def revoke_api_key(self, key_id: str) -> bool:
        """Mark a key revoked (kept, for the record); False when there is no such key."""
        with self.transaction() as cur:
            cur.execute("UPDATE api_keys SET revoked=1 WHERE key_id=?", (key_id,))
            return cur.rowcount > 0

    def models(self) -> dict[str, str]:
        """The model identity the store's vectors were made with (`MODEL_KEYS`; empty if none yet)."""
        rows = self._query(f"SELECT key, value FROM meta WHERE key IN ({','.join('?' * len(MODEL_KEYS))})",
                           MODEL_KEYS)
        return {r[0]: r[1] for r in rows}

    def record_models(self, models: dict[str, str]) -> dict[str, str]:
        """The saved values of `models`' keys; when none is saved yet, `models` are recorded
        (atomically: two processes cannot both record) and returned."""
        saved = {k: v for k, v in self.models().items() if k in models}
        if saved:
            return saved
        keys = sorted(models)  # one order for every writer: concurrent recorders wait, never deadlock
        marks = ",".join("?" * len(keys))
        with self.transaction() as cur:
            # a key another writer recorded meanwhile is kept (theirs wins); what is saved is then read
            cur.executemany(_KEEP_META, [(k, str(models[k])) for k in keys])
            return dict(cur.execute(f"SELECT key, value FROM meta WHERE key IN ({marks})", keys).fetchall())

    def name_salt(self) -> str:
        """A random salt of this store (drawn once, kept in `meta`) for the file names derived
        from space names (lock files, derived-file directories): a name's hash tells nothing
        without it."""
        salt = getattr(self, "_name_salt", None)
        if salt is None:
            salt = self.get_meta("name_salt")
            if salt is None:
                with self.transaction() as cur:  # two first openers: the first one's salt is kept
                    cur.execute(_KEEP_META, ("name_salt", secrets.token_hex(16)))
                    salt = cur.execute("SELECT value FROM meta WHERE key='name_salt'").fetchall()[0][0]
            self._name_salt = salt
        return salt

    def set_models(self, models: dict[str, str], cur: Any = None) -> None:
        rows = [(k, str(models[k])) for k in MODEL_KEYS if k in models]
        if cur is not None:
            cur.executemany(_SET_META, rows)
        else:
            with self.transaction() as c:
                c.executemany(_SET_META, rows)

    # --- vector cache (text hash -> vector, shared by spaces) ----------------------------
    def get_vectors(self, kind: str, model: str, keys: list[str]) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for start in range(0, len(keys), 500):
            chunk = keys[start:start + 500]
            rows = self._query(
                f"SELECT key, vector FROM vector_cache WHERE kind=? AND model=? AND key IN ({','.join('?' * len(chunk))})",
                [kind, model, *chunk])
            out.update({r[0]: _vec(r[1]) for r in rows})
        return out

    def put_vectors(self, kind: str, model: str, items: dict[str, np.ndarray]) -> None:
        with self.transaction() as cur:  # keys in one order: concurrent writers of shared keys never deadlock
            cur.executemany(_PUT_CACHED, [(kind, model, k, vector_blob(items[k])) for k in sorted(items)])
