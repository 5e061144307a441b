"""One implementation of every store operation, for SQLite (`etamem.store.Store`) and
PostgreSQL with pgvector (`etamem.store_pg.PgStore`).

The store knows no algorithm. Timestamps are kept as ISO 8601 strings plus epoch seconds;
vectors as little-endian float32 blobs; lists as JSON. No pickle. The SQL is written once, with
`?` placeholders and the `INSERT ... ON CONFLICT` upsert both databases accept, and every write
that belongs together is one transaction. A backend fills in a small dialect layer (the hooks
at the top of `SqlStore`): the connection and its placeholder, the column types of `_SCHEMA`,
the JSON-array query (`_json_values`), how a write transaction starts (`transaction`), what a
consistent read is (`snapshot`), the extra vector column (`_vector_sql`, `_vector_params`,
`_index_vectors`), what makes deleted text leave the files (`truncate_wal`) and how nearest
neighbours are found (`nearest_units`: exact NumPy here, an HNSW index on PostgreSQL).
"""
from __future__ import annotations

import json
import secrets
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Iterable, Iterator

import numpy as np

from .types import AMU, Turn

MODEL_KEYS = ("text_encoder", "text_dim", "affect_tagger", "affect_dim")  # model identity, in `meta`
FORMAT_VERSION = 5  # 2: view nodes and view states; 3: raw-turn vectors; 4: FTA unit fields and links;
# 5: vector-cache keys scoped by space (the cache of older stores is emptied), space epochs,
# derived-file records. Older stores are upgraded in place: the tables added since are created empty.

# Written in SQLite's types; PostgreSQL maps BLOB, REAL and TEXT to its own (etamem.store_pg).
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS turns (
    space TEXT NOT NULL, turn_id TEXT NOT NULL, seq INTEGER NOT NULL, session_id TEXT NOT NULL,
    speaker TEXT NOT NULL, text TEXT NOT NULL, ts TEXT NOT NULL, ts_epoch REAL NOT NULL,
    extra TEXT NOT NULL DEFAULT '{}', extracted INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (space, turn_id));
CREATE INDEX IF NOT EXISTS turns_pending ON turns (space, extracted, seq);
CREATE INDEX IF NOT EXISTS turns_seq ON turns (space, seq);
CREATE TABLE IF NOT EXISTS amus (
    space TEXT NOT NULL, amu_id TEXT NOT NULL, seq INTEGER NOT NULL, text TEXT NOT NULL,
    speaker TEXT NOT NULL, ts TEXT NOT NULL, ts_epoch REAL NOT NULL, session_id TEXT NOT NULL,
    source_turn_ids TEXT NOT NULL, polarity TEXT NOT NULL, polarity_scores TEXT NOT NULL,
    status TEXT NOT NULL, PRIMARY KEY (space, amu_id));
CREATE INDEX IF NOT EXISTS amus_seq ON amus (space, seq);
CREATE TABLE IF NOT EXISTS amu_vectors (
    space TEXT NOT NULL, amu_id TEXT NOT NULL, kind TEXT NOT NULL, vector BLOB NOT NULL,
    PRIMARY KEY (space, amu_id, kind));
CREATE TABLE IF NOT EXISTS turn_vectors (
    space TEXT NOT NULL, turn_id TEXT NOT NULL, vector BLOB NOT NULL, PRIMARY KEY (space, turn_id));
CREATE TABLE IF NOT EXISTS vector_cache (
    kind TEXT NOT NULL, model TEXT NOT NULL, key TEXT NOT NULL, vector BLOB NOT NULL,
    PRIMARY KEY (kind, model, key));
CREATE TABLE IF NOT EXISTS sessions (
    space TEXT NOT NULL, session_id TEXT NOT NULL, first_seq INTEGER NOT NULL,
    ended INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (space, session_id));
CREATE TABLE IF NOT EXISTS nodes (
    space TEXT NOT NULL, view TEXT NOT NULL, node_id TEXT NOT NULL, parent_id TEXT, is_leaf INTEGER NOT NULL,
    children TEXT NOT NULL, members TEXT NOT NULL, count INTEGER NOT NULL, sum BLOB NOT NULL,
    summary TEXT, pending INTEGER NOT NULL, info TEXT NOT NULL, PRIMARY KEY (space, view, node_id));
CREATE TABLE IF NOT EXISTS view_state (
    space TEXT NOT NULL, view TEXT NOT NULL, state TEXT NOT NULL, reservoir BLOB NOT NULL,
    PRIMARY KEY (space, view));
CREATE TABLE IF NOT EXISTS view_history (
    space TEXT NOT NULL, view TEXT NOT NULL, step INTEGER NOT NULL, record TEXT NOT NULL,
    PRIMARY KEY (space, view, step));
CREATE TABLE IF NOT EXISTS space_meta (
    space TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (space, key));
CREATE TABLE IF NOT EXISTS unit_fields (
    space TEXT NOT NULL, amu_id TEXT NOT NULL, lifecycle TEXT NOT NULL, fields TEXT NOT NULL,
    PRIMARY KEY (space, amu_id));
CREATE TABLE IF NOT EXISTS unit_links (
    space TEXT NOT NULL, source TEXT NOT NULL, target TEXT NOT NULL, relation TEXT NOT NULL,
    confidence REAL NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (space, source, target, relation));
CREATE INDEX IF NOT EXISTS unit_links_target ON unit_links (space, target);
CREATE TABLE IF NOT EXISTS api_keys (
    key_id TEXT PRIMARY KEY, secret_hash TEXT NOT NULL, spaces TEXT NOT NULL, created TEXT NOT NULL,
    revoked INTEGER NOT NULL DEFAULT 0, note TEXT NOT NULL DEFAULT '');
"""
SPACE_TABLES = ("turns", "amus", "amu_vectors", "turn_vectors", "sessions", "space_meta", "nodes", "view_state",
                "view_history", "unit_fields", "unit_links")
VECTOR_TABLES = {"amu_vectors": ("space", "amu_id", "kind"), "turn_vectors": ("space", "turn_id")}  # -> key columns
UNIT_KINDS = ("text", "affect")

_AMU_COLUMNS = "amu_id, text, speaker, ts, session_id, source_turn_ids, polarity, polarity_scores, status, space"
_TURN_COLUMNS = "turn_id, session_id, speaker, text, ts, space, extra"
_NODE_COLUMNS = "node_id, parent_id, is_leaf, children, members, count, sum, summary, pending, info"


@dataclass
class UnitExtras:
    """What an FTA write stores beside its units, in the same transaction: `fields` (amu id,
    lifecycle, fields JSON) of new units, `links` (source, target, relation, confidence),
    `lifecycle` changes of stored units (amu id -> lifecycle) and space `meta` values (the
    construction state)."""

    fields: list[tuple[str, str, str]] = field(default_factory=list)
    links: list[tuple[str, str, str, float]] = field(default_factory=list)
    lifecycle: dict[str, str] = field(default_factory=dict)
    meta: dict[str, str] = field(default_factory=dict)


def upsert(table: str, columns: tuple[str, ...], key: tuple[str, ...], *, replace: bool = True,
           marks: tuple[str, ...] | None = None) -> str:
    """`INSERT ... ON CONFLICT (key) DO UPDATE` (`replace`) or `DO NOTHING`, in the syntax SQLite
    (3.24+) and PostgreSQL share; `marks`: the value expressions (default `?` each)."""
    values = ", ".join(marks or ("?",) * len(columns))
    action = ("UPDATE SET " + ", ".join(f"{c} = excluded.{c}" for c in columns if c not in key)) if replace \
        else "NOTHING"
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({values}) ON CONFLICT ({', '.join(key)}) DO {action}"


_SET_META = upsert("meta", ("key", "value"), ("key",))
_KEEP_META = upsert("meta", ("key", "value"), ("key",), replace=False)
_SET_SPACE_META = upsert("space_meta", ("space", "key", "value"), ("space", "key"))
_ADD_SESSION = upsert("sessions", ("space", "session_id", "first_seq"), ("space", "session_id"), replace=False)
_PUT_NODE = upsert("nodes", ("space", "view", *_NODE_COLUMNS.split(", ")), ("space", "view", "node_id"))
_PUT_VIEW_STATE = upsert("view_state", ("space", "view", "state", "reservoir"), ("space", "view"))
_PUT_HISTORY = upsert("view_history", ("space", "view", "step", "record"), ("space", "view", "step"))
_PUT_LINK = upsert("unit_links", ("space", "source", "target", "relation", "confidence", "seq"),
                   ("space", "source", "target", "relation"))
_PUT_CACHED = upsert("vector_cache", ("kind", "model", "key", "vector"), ("kind", "model", "key"))
_BUMP = ("INSERT INTO space_meta (space, key, value) VALUES (?, 'generation', '1') ON CONFLICT (space, key) "
         "DO UPDATE SET value = CAST(CAST(space_meta.value AS BIGINT) + 1 AS TEXT)")
_EPOCH = upsert("space_meta", ("space", "key", "value"), ("space", "key"), replace=False)  # set once per life


def _blob(vec: np.ndarray) -> bytes:
    return np.ascontiguousarray(vec, dtype="<f4").tobytes()


def _matrix(blobs: list[bytes]) -> np.ndarray:
    """Stack little-endian float32 blobs of one dimension: (len(blobs), d) float32, one copy."""
    return np.frombuffer(b"".join(blobs), dtype="<f4").astype(np.float32).reshape(len(blobs), -1)


def _vec(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype="<f4").astype(np.float32)


def top_cosine(ids: list[str], matrix: np.ndarray, query: np.ndarray, k: int) -> list[tuple[str, float]]:
    """Exact nearest neighbours: the `k` rows of `matrix` (n, d) most cosine-similar to `query`,
    as (id, cosine), best first (ties: in row order)."""
    q = np.asarray(query, np.float32).ravel()
    if not ids or k <= 0:
        return []
    if matrix.shape[1] != q.shape[0]:
        raise ValueError(f"vector: dimension {q.shape[0]}, the stored vectors have {matrix.shape[1]}")
    norms = np.linalg.norm(matrix, axis=1) * float(np.linalg.norm(q))
    sims = (matrix @ q) / np.where(norms > 0, norms, 1.0)
    best = np.argsort(-sims, kind="stable")[:k]
    return [(ids[i], float(sims[i])) for i in best]


class SqlStore:
    """Every store operation, once, over a DB-API connection; a backend supplies the connection
    and the dialect hooks below (`Store`: SQLite; `etamem.store_pg.PgStore`: PostgreSQL)."""

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
        return (_blob(vec),)

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
        from .tenancy import ApiKey

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

    # --- spaces ------------------------------------------------------------------
    def spaces(self) -> list[str]:
        """Spaces holding turns (every turn registers its session, so the small sessions table
        answers this without scanning turns)."""
        return [r[0] for r in self._query("SELECT DISTINCT space FROM sessions ORDER BY 1")]

    def has_space(self, space: str) -> bool:
        return bool(self._query("SELECT 1 FROM sessions WHERE space=? LIMIT 1", (space,)))

    def generation(self, space: str) -> int:
        """The space's write counter: +1 for every committed write that changes it."""
        value = self.get_space_meta(space, "generation")
        return int(value) if value else 0

    def stamp(self, space: str) -> tuple[str, int]:
        """(epoch, generation): which life of the space and which write of it. The epoch is a
        random token drawn by the first write after the space was created (or deleted: a deleted
        space's rows go, the counter with them), so a recreated space never repeats the stamp
        of an earlier life; ("", 0) for a space without rows, "" for a space last written
        before epochs existed."""
        rows = dict(self._query("SELECT key, value FROM space_meta WHERE space=? AND key IN ('epoch', 'generation')",
                                (space,)))
        return rows.get("epoch", ""), int(rows.get("generation") or 0)

    @staticmethod
    def _bump(cur: Any, space: str) -> None:
        """Raise the space's generation (and draw its epoch on its first write): the first
        statements of a space's write transaction (on PostgreSQL the generation's row lock also
        keeps a second writer of the space waiting until the commit)."""
        cur.execute(_BUMP, (space,))
        cur.execute(_EPOCH, (space, "epoch", secrets.token_hex(8)))

    def get_space_meta(self, space: str, key: str) -> str | None:
        rows = self._query("SELECT value FROM space_meta WHERE space=? AND key=?", (space, key))
        return rows[0][0] if rows else None

    def set_space_meta(self, space: str, key: str, value: str, cur: Any = None) -> None:
        if cur is not None:
            cur.execute(_SET_SPACE_META, (space, key, value))
        else:
            with self.transaction() as c:
                c.execute(_SET_SPACE_META, (space, key, value))

    def delete_space(self, space: str, cache_keys: list[str] = ()) -> None:
        """Remove every row of the space and the vector-cache rows of `cache_keys` (the text
        hashes of its units and turns) in one transaction."""
        with self.transaction() as cur:
            for table in SPACE_TABLES:
                cur.execute(f"DELETE FROM {table} WHERE space=?", (space,))
            self._forget_cache(cur, cache_keys)

    @staticmethod
    def _forget_cache(cur: Any, keys) -> None:
        cur.executemany("DELETE FROM vector_cache WHERE key=?", [(k,) for k in sorted(set(keys))])

    # --- turns -------------------------------------------------------------------
    def next_turn_seq(self, space: str) -> int:
        row = self._query("SELECT COALESCE(MAX(seq), -1) + 1 FROM turns WHERE space=?", (space,))
        return int(row[0][0])

    def last_turn(self, space: str) -> Turn | None:
        """The space's most recently stored turn (None for an empty space)."""
        rows = self._query(f"SELECT {_TURN_COLUMNS} FROM turns WHERE space=? ORDER BY seq DESC LIMIT 1", (space,))
        return self._turn(rows[0]) if rows else None

    def session_state(self, space: str, session_id: str) -> bool | None:
        """None when the space has no session `session_id`, else whether it is still open."""
        rows = self._query("SELECT ended FROM sessions WHERE space=? AND session_id=?", (space, session_id))
        return None if not rows else not rows[0][0]

    def existing_turn_ids(self, space: str, turn_ids: list[str]) -> set[str]:
        found: set[str] = set()
        for start in range(0, len(turn_ids), 500):
            chunk = turn_ids[start:start + 500]
            marks = ",".join("?" * len(chunk))
            rows = self._query(f"SELECT turn_id FROM turns WHERE space=? AND turn_id IN ({marks})", [space, *chunk])
            found.update(r[0] for r in rows)
        return found

    def insert_turns(self, turns: list[Turn], first_seq: int) -> None:
        """Write raw turns (durable before extraction) and register their sessions."""
        with self.transaction() as cur:
            for i, t in enumerate(turns):
                cur.execute(
                    "INSERT INTO turns (space, turn_id, seq, session_id, speaker, text, ts, ts_epoch, extra)"
                    " VALUES (?,?,?,?,?,?,?,?,?)",
                    (t.space, t.turn_id, first_seq + i, t.session_id, t.speaker, t.text,
                     t.timestamp.isoformat(), t.timestamp.timestamp(), json.dumps(t.extra, sort_keys=True)),
                )
                cur.execute(_ADD_SESSION, (t.space, t.session_id, first_seq + i))

    def turns(self, space: str, *, pending_only: bool = False, extracted_only: bool = False,
              turn_ids: list[str] | None = None) -> list[Turn]:
        sql, params = f"SELECT {_TURN_COLUMNS} FROM turns WHERE space=?", [space]
        if pending_only or extracted_only:
            sql += " AND extracted=0" if pending_only else " AND extracted=1"
        if turn_ids is not None:
            if not turn_ids:
                return []
            sql += f" AND turn_id IN ({','.join('?' * len(turn_ids))})"
            params += list(turn_ids)
        return [self._turn(r) for r in self._query(sql + " ORDER BY seq", params)]

    def count_pending(self, space: str) -> int:
        """Turns stored but not yet extracted (index `turns_pending`: no scan of the space)."""
        return int(self._query("SELECT COUNT(*) FROM turns WHERE space=? AND extracted=0", (space,))[0][0])

    def turn_vectors(self, space: str) -> dict[str, np.ndarray]:
        """turn id -> (d,) float32 text vector of `turn_text`, for the turns that have one."""
        rows = self._query("SELECT turn_id, vector FROM turn_vectors WHERE space=?", (space,))
        if not rows:
            return {}
        matrix = _matrix([r[1] for r in rows])
        return dict(zip((r[0] for r in rows), matrix))

    def put_turn_vectors(self, space: str, turn_ids: list[str], vecs: np.ndarray) -> None:
        self._index_dims(turn_vecs=vecs)
        with self.transaction() as cur:
            self._put_turn_vectors(cur, space, turn_ids, vecs)

    def _put_turn_vectors(self, cur: Any, space: str, turn_ids: list[str], vecs: np.ndarray) -> None:
        cur.executemany(self._vector_sql("turn_vectors"),
                        [(space, t, *self._vector_params(v)) for t, v in zip(turn_ids, vecs)])

    def _put_unit_vectors(self, cur: Any, space: str, amu_ids: list[str], text_vecs: np.ndarray,
                          affect_vecs: np.ndarray) -> None:
        cur.executemany(self._vector_sql("amu_vectors"),
                        [(space, a, kind, *self._vector_params(vecs[i])) for i, a in enumerate(amu_ids)
                         for kind, vecs in (("text", text_vecs), ("affect", affect_vecs))])

    def _index_dims(self, text_vecs=None, affect_vecs=None, turn_vecs=None) -> None:
        """`_index_vectors` for the dimensions a write is about to store."""
        for table, kind, vecs in (("amu_vectors", "text", text_vecs), ("amu_vectors", "affect", affect_vecs),
                                  ("turn_vectors", None, turn_vecs)):
            if vecs is not None and len(vecs):
                self._index_vectors(table, kind, int(np.shape(vecs)[-1]))

    def count_turns(self, space: str) -> int:
        return int(self._query("SELECT COUNT(*) FROM turns WHERE space=?", (space,))[0][0])

    @staticmethod
    def _turn(r) -> Turn:
        """A Turn from a row of `_TURN_COLUMNS`."""
        return Turn(turn_id=r[0], session_id=r[1], speaker=r[2], text=r[3], timestamp=datetime.fromisoformat(r[4]),
                    space=r[5], extra=json.loads(r[6]))

    # --- sessions ----------------------------------------------------------------
    def open_sessions(self, space: str) -> list[str]:
        rows = self._query("SELECT session_id FROM sessions WHERE space=? AND ended=0 ORDER BY first_seq", (space,))
        return [r[0] for r in rows]

    def mark_sessions_ended(self, space: str, session_ids: list[str]) -> None:
        with self.transaction() as cur:
            cur.executemany("UPDATE sessions SET ended=1 WHERE space=? AND session_id=?",
                            [(space, s) for s in session_ids])

    # --- AMUs --------------------------------------------------------------------
    def write_amus(self, space: str, amus: list[AMU], text_vecs: np.ndarray, affect_vecs: np.ndarray,
                   done_turn_ids: list[str], dims: dict[str, int] | None = None, *,
                   turn_vecs: np.ndarray | None = None, views: list | None = None,
                   extras: UnitExtras | None = None) -> None:
        """Write AMUs with their text (n, d_t) and affective (n, d_a) vectors, mark their turns
        extracted, store the turns' vectors (turn_vecs: (len(done_turn_ids), d_t)), the changed
        view rows (`views`: a `save_views` payload), the vector dimensions (`dims`) and the FTA
        `extras` (fields, links, lifecycle changes, construction state), all in one transaction."""
        self._index_dims(text_vecs if amus else None, affect_vecs if amus else None, turn_vecs)
        with self.transaction() as cur:
            self._bump(cur, space)
            if turn_vecs is not None:
                self._put_turn_vectors(cur, space, done_turn_ids, turn_vecs)
            if views:
                self._write_views(cur, space, views)
            for key, value in (dims or {}).items():
                self.set_space_meta(space, key, str(value), cur=cur)
            seq0 = int(cur.execute("SELECT COALESCE(MAX(seq), -1) + 1 FROM amus WHERE space=?", (space,)).fetchone()[0])
            cur.executemany(
                "INSERT INTO amus VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                [(space, a.amu_id, seq0 + i, a.text, a.speaker, a.timestamp.isoformat(), a.timestamp.timestamp(),
                  a.session_id, json.dumps(list(a.source_turn_ids)), a.polarity,
                  json.dumps([float(s) for s in a.polarity_scores]), a.status) for i, a in enumerate(amus)])
            self._put_unit_vectors(cur, space, [a.amu_id for a in amus], text_vecs, affect_vecs)
            cur.executemany("UPDATE turns SET extracted=1 WHERE space=? AND turn_id=?",
                            [(space, t) for t in done_turn_ids])
            if extras is not None:
                self._write_extras(cur, space, extras)

    def _write_extras(self, cur: Any, space: str, extras: UnitExtras) -> None:
        cur.executemany("INSERT INTO unit_fields VALUES (?,?,?,?)",
                        [(space, uid, life, fields) for uid, life, fields in extras.fields])
        seq0 = int(cur.execute("SELECT COALESCE(MAX(seq), -1) + 1 FROM unit_links WHERE space=?",
                               (space,)).fetchone()[0])
        cur.executemany(_PUT_LINK,
                        [(space, a, b, r, float(c), seq0 + i) for i, (a, b, r, c) in enumerate(extras.links)])
        cur.executemany("UPDATE unit_fields SET lifecycle=? WHERE space=? AND amu_id=?",
                        [(life, space, uid) for uid, life in extras.lifecycle.items()])
        for key, value in extras.meta.items():
            self.set_space_meta(space, key, value, cur=cur)

    def unit_fields(self, space: str, amu_ids: list[str] | None = None) -> dict[str, tuple[str, str]]:
        """amu id -> (lifecycle, fields JSON) of the space's FTA units (those of `amu_ids`)."""
        sql, params = "SELECT amu_id, lifecycle, fields FROM unit_fields WHERE space=?", [space]
        if amu_ids is not None:
            if not amu_ids:
                return {}
            sql += f" AND amu_id IN ({','.join('?' * len(amu_ids))})"
            params += list(amu_ids)
        return {r[0]: (r[1], r[2]) for r in self._query(sql, params)}

    def unit_links(self, space: str, amu_ids: list[str] | None = None) -> list[tuple[str, str, str, float]]:
        """(source, target, relation, confidence) links of the space touching `amu_ids` (all when
        None), oldest first."""
        sql, params = "SELECT source, target, relation, confidence FROM unit_links WHERE space=?", [space]
        if amu_ids is not None:
            if not amu_ids:
                return []
            marks = ",".join("?" * len(amu_ids))
            sql += f" AND (source IN ({marks}) OR target IN ({marks}))"
            params += list(amu_ids) * 2
        return [(r[0], r[1], r[2], float(r[3])) for r in self._query(sql + " ORDER BY seq", params)]

    def amus(self, space: str, *, status: str | None = "active", amu_ids: list[str] | None = None) -> list[AMU]:
        sql, params = f"SELECT {_AMU_COLUMNS} FROM amus WHERE space=?", [space]
        if status is not None:
            sql += " AND status=?"
            params.append(status)
        if amu_ids is not None:
            if not amu_ids:
                return []
            sql += f" AND amu_id IN ({','.join('?' * len(amu_ids))})"
            params += list(amu_ids)
        return [self._amu(r) for r in self._query(sql + " ORDER BY seq", params)]

    def count_amus(self, space: str) -> int:
        return int(self._query("SELECT COUNT(*) FROM amus WHERE space=? AND status='active'", (space,))[0][0])

    def amu_vector_pair(self, space: str, amu_ids: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(text, affective) vectors of the given AMUs in that order, read in one pass."""
        if not amu_ids:
            return np.zeros((0, 0), np.float32), np.zeros((0, 0), np.float32)
        by_kind: dict[str, dict[str, bytes]] = {"text": {}, "affect": {}}
        for r in self._query("SELECT amu_id, kind, vector FROM amu_vectors WHERE space=?", (space,)):
            by_kind[r[1]][r[0]] = r[2]
        return tuple(_matrix([by_kind[k][a] for a in amu_ids]) for k in ("text", "affect"))

    def amu_vectors(self, space: str, kind: str, amu_ids: list[str]) -> np.ndarray:
        """Vectors of `kind` ('text' | 'affect') for the given AMUs, in that order: (n, d) float32."""
        if not amu_ids:
            return np.zeros((0, 0), dtype=np.float32)
        rows = self._query("SELECT amu_id, vector FROM amu_vectors WHERE space=? AND kind=?", (space, kind))
        by_id = {r[0]: r[1] for r in rows}
        return _matrix([by_id[a] for a in amu_ids])

    def nearest_units(self, space: str, kind: str, vector: np.ndarray, k: int) -> list[tuple[str, float]]:
        """The `k` units of the space whose `kind` ('text' | 'affect') vectors are most
        cosine-similar to `vector`, as (amu id, cosine), best first: min(k, units) rows. Here
        exact (NumPy over the space's vectors); PostgreSQL answers from its HNSW index."""
        self._check_nearest(kind, k)
        rows = self._query("SELECT amu_id, vector FROM amu_vectors WHERE space=? AND kind=?", (space, kind))
        return top_cosine([r[0] for r in rows], _matrix([r[1] for r in rows]), vector, k) if rows else []

    def nearest_turns(self, space: str, vector: np.ndarray, k: int) -> list[tuple[str, float]]:
        """As `nearest_units`, over the space's raw-turn vectors: [(turn id, cosine)]."""
        self._check_nearest("text", k)
        rows = self._query("SELECT turn_id, vector FROM turn_vectors WHERE space=?", (space,))
        return top_cosine([r[0] for r in rows], _matrix([r[1] for r in rows]), vector, k) if rows else []

    @staticmethod
    def _check_nearest(kind: str, k: int) -> None:
        if kind not in UNIT_KINDS:
            raise ValueError(f"kind: expected one of {UNIT_KINDS}, got {kind!r}")
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"k: expected a positive integer, got {k!r}")

    def forget(self, space: str, amu_ids: list[str], turns: dict[str, tuple | None], *,
               views: list | None = None, cache_keys: list[str] = (), extras: UnitExtras | None = None) -> int:
        """Remove units and change turns in one transaction: the AMU rows and vectors of
        `amu_ids` go; `turns` maps a turn id to None (the turn, its vector and its session if
        emptied go) or to (text, extra dict, (d,) vector) (the turn is rewritten, e.g. with a
        sentence redacted); the changed view rows (`views`) and the vector-cache rows of
        `cache_keys` go with them, and the units' FTA fields and links (`extras`: lifecycle
        changes and construction state written with them). Returns how many AMU rows went."""
        rewritten = [change[2] for change in turns.values() if change is not None]
        self._index_dims(turn_vecs=np.asarray(rewritten) if rewritten else None)
        with self.transaction() as cur:
            self._bump(cur, space)
            if views:
                self._write_views(cur, space, views)
            gone = 0
            for a in amu_ids:
                cur.execute("DELETE FROM amus WHERE space=? AND amu_id=?", (space, a))
                gone += cur.rowcount
                cur.execute("DELETE FROM amu_vectors WHERE space=? AND amu_id=?", (space, a))
                cur.execute("DELETE FROM unit_fields WHERE space=? AND amu_id=?", (space, a))
                cur.execute("DELETE FROM unit_links WHERE space=? AND (source=? OR target=?)", (space, a, a))
            for t, change in turns.items():
                if change is None:
                    cur.execute("DELETE FROM turns WHERE space=? AND turn_id=?", (space, t))
                    cur.execute("DELETE FROM turn_vectors WHERE space=? AND turn_id=?", (space, t))
                else:
                    text, extra, vec = change
                    cur.execute("UPDATE turns SET text=?, extra=? WHERE space=? AND turn_id=?",
                                (text, json.dumps(extra, sort_keys=True), space, t))
                    self._put_turn_vectors(cur, space, [t], np.asarray(vec)[None])
            cur.execute("DELETE FROM sessions WHERE space=? AND session_id NOT IN "
                        "(SELECT session_id FROM turns WHERE space=?)", (space, space))
            self._forget_cache(cur, cache_keys)
            if extras is not None:
                self._write_extras(cur, space, extras)
        return gone

    def replace_vectors(self, space: str, amus: list[AMU], text_vecs: np.ndarray, affect_vecs: np.ndarray,
                        turn_ids: list[str], turn_vecs: np.ndarray, views: list, dims: dict[str, int]) -> None:
        """Re-encoded space (`etamem reindex`), one transaction: the units' polarity, scores and
        both vectors, the turns' vectors, and views built afresh (every old node, state and
        calibration record replaced by `views`, a `save_views` payload)."""
        self._index_dims(text_vecs if amus else None, affect_vecs if amus else None, turn_vecs)
        with self.transaction() as cur:
            self._bump(cur, space)
            for table in ("nodes", "view_state", "view_history"):
                cur.execute(f"DELETE FROM {table} WHERE space=?", (space,))
            self._write_views(cur, space, views)
            for key, value in dims.items():
                self.set_space_meta(space, key, str(value), cur=cur)
            cur.executemany("UPDATE amus SET polarity=?, polarity_scores=? WHERE space=? AND amu_id=?",
                            [(a.polarity, json.dumps([float(x) for x in a.polarity_scores]), space, a.amu_id)
                             for a in amus])
            self._put_unit_vectors(cur, space, [a.amu_id for a in amus], text_vecs, affect_vecs)
            cur.execute("DELETE FROM turn_vectors WHERE space=?", (space,))
            self._put_turn_vectors(cur, space, turn_ids, turn_vecs)

    def amus_of_turns(self, space: str, turn_ids: list[str]) -> list[AMU]:
        """Units (any status) whose sources include one of `turn_ids`."""
        if not turn_ids:
            return []
        marks = ",".join("?" * len(turn_ids))
        rows = self._query(f"SELECT {_AMU_COLUMNS} FROM amus WHERE space=? AND EXISTS (SELECT 1 FROM "
                           f"{self._json_values('amus.source_turn_ids')} WHERE value IN ({marks})) ORDER BY seq",
                           [space, *turn_ids])
        return [self._amu(r) for r in rows]

    @staticmethod
    def _amu(r) -> AMU:
        """An AMU from a row of `_AMU_COLUMNS` (both JSON lists parsed in one call)."""
        sources, scores = json.loads(f"[{r[5]},{r[7]}]")
        return AMU(r[0], r[1], r[2], datetime.fromisoformat(r[3]), r[4], tuple(sources), r[6], tuple(scores), r[8],
                   r[9])

    # --- views (opaque rows written by etamem.views) ------------------------------------
    def save_views(self, space: str, payload: list) -> None:
        """A `_write_views` payload, written in one transaction."""
        with self.transaction() as cur:
            self._bump(cur, space)
            self._write_views(cur, space, payload)

    @staticmethod
    def _write_views(cur: Any, space: str, payload: list) -> None:
        """payload: (view, changed node rows, removed node ids, state JSON, reservoir bytes, new
        history records) per view; history records are appended (one row each), never rewritten."""
        for view, rows, removed, state, reservoir, history in payload:
            cur.executemany("DELETE FROM nodes WHERE space=? AND view=? AND node_id=?",
                            [(space, view, n) for n in removed])
            cur.executemany(
                _PUT_NODE,
                [(space, view, r["node_id"], r["parent_id"], int(r["is_leaf"]), json.dumps(r["children"]),
                  json.dumps(r["members"]), int(r["count"]), r["sum"], r["summary"], int(r["pending"]),
                  json.dumps(r["info"])) for r in rows])
            cur.execute(_PUT_VIEW_STATE, (space, view, state, reservoir))
            cur.executemany(_PUT_HISTORY, [(space, view, int(h["step"]), json.dumps(h)) for h in history])

    def load_views(self, space: str) -> dict[str, tuple[str, bytes, list[dict], list[dict]]]:
        """view -> (state JSON, reservoir bytes, node rows, history records by step) for the views
        saved for the space."""
        out = {}
        for view, state, reservoir in self._query("SELECT view, state, reservoir FROM view_state WHERE space=?",
                                                  (space,)):
            rows = [{"node_id": r[0], "parent_id": r[1], "is_leaf": bool(r[2]), "children": json.loads(r[3]),
                     "members": json.loads(r[4]), "count": r[5], "sum": bytes(r[6]), "summary": r[7],
                     "pending": r[8], "info": json.loads(r[9])}
                    for r in self._query(f"SELECT {_NODE_COLUMNS} FROM nodes WHERE space=? AND view=?", (space, view))]
            history = [json.loads(r[0]) for r in self._query(
                "SELECT record FROM view_history WHERE space=? AND view=? ORDER BY step", (space, view))]
            out[view] = (state, bytes(reservoir), rows, history)
        return out

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
            cur.executemany(_PUT_CACHED, [(kind, model, k, _blob(items[k])) for k in sorted(items)])
