"""SQLite store (WAL): raw turns, AMUs, their vectors, a vector cache and per-space metadata.

The store knows no algorithm. Timestamps are kept as ISO 8601 strings plus epoch seconds;
vectors as little-endian float32 blobs; lists as JSON. No pickle. Every write that belongs
together is one transaction (`BEGIN IMMEDIATE`: one writer at a time across processes; others
wait up to `BUSY_TIMEOUT_S`). Deleted rows are overwritten with zeros (`secure_delete`) and
`truncate_wal` empties the write-ahead log, so forgotten text leaves the database files.
"""
from __future__ import annotations

import json
import os
import sqlite3
import threading
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np

from .types import AMU, Turn

BUSY_TIMEOUT_S = 60.0  # how long a write waits for another process's transaction
MODEL_KEYS = ("text_encoder", "text_dim", "affect_tagger", "affect_dim")  # model identity, in `meta`
FORMAT_VERSION = 3  # 2: view nodes and view states; 3: raw-turn vectors (older stores are upgraded in place)

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
CREATE TABLE IF NOT EXISTS api_keys (
    key_id TEXT PRIMARY KEY, secret_hash TEXT NOT NULL, spaces TEXT NOT NULL, created TEXT NOT NULL,
    revoked INTEGER NOT NULL DEFAULT 0, note TEXT NOT NULL DEFAULT '');
"""


_AMU_COLUMNS = "amu_id, text, speaker, ts, session_id, source_turn_ids, polarity, polarity_scores, status, space"


def _blob(vec: np.ndarray) -> bytes:
    return np.ascontiguousarray(vec, dtype="<f4").tobytes()


def _matrix(blobs: list[bytes]) -> np.ndarray:
    """Stack little-endian float32 blobs of one dimension: (len(blobs), d) float32, one copy."""
    return np.frombuffer(b"".join(blobs), dtype="<f4").astype(np.float32).reshape(len(blobs), -1)


def _vec(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype="<f4").astype(np.float32)


class Store:
    """One SQLite database per memory store; `path=None` keeps it in memory."""

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = None if path is None else Path(path)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
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
        self._conn.executescript(_SCHEMA)
        self._check_version()

    # --- plumbing -------------------------------------------------------------------
    def _check_version(self) -> None:
        row = self._conn.execute("SELECT value FROM meta WHERE key='format_version'").fetchone()
        if row is None:
            self._conn.execute("INSERT INTO meta VALUES ('format_version', ?)", (str(FORMAT_VERSION),))
        elif int(row[0]) in (1, 2):  # the tables added since exist now; views and turn vectors are rebuilt on load
            self._conn.execute("UPDATE meta SET value=? WHERE key='format_version'", (str(FORMAT_VERSION),))
        elif int(row[0]) != FORMAT_VERSION:
            raise ValueError(
                f"store {self.path}: format version {row[0]} is not supported (this etamem writes {FORMAT_VERSION})"
            )

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Cursor]:
        """A write transaction: everything inside commits together or not at all."""
        with self._lock:
            cur = self._conn.cursor()
            cur.execute("BEGIN IMMEDIATE")
            try:
                yield cur
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            else:
                cur.execute("COMMIT")

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

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def get_meta(self, key: str) -> str | None:
        rows = self._query("SELECT value FROM meta WHERE key=?", (key,))
        return rows[0][0] if rows else None

    def set_meta(self, key: str, value: str) -> None:
        with self.transaction() as cur:
            cur.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    # --- API keys (etamem.tenancy): hashes only -------------------------------------------------
    def insert_api_key(self, key_id: str, secret_hash: str, spaces: list[str], created: str, note: str = "") -> None:
        with self.transaction() as cur:
            cur.execute("INSERT INTO api_keys VALUES (?,?,?,?,0,?)",
                        (key_id, secret_hash, json.dumps(sorted(spaces)), created, note))

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
        with self.transaction() as cur:
            marks = ",".join("?" * len(models))
            saved = dict(cur.execute(f"SELECT key, value FROM meta WHERE key IN ({marks})", list(models)).fetchall())
            if not saved:
                self.set_models(models, cur=cur)
                saved = dict(models)
        return saved

    def set_models(self, models: dict[str, str], cur: sqlite3.Cursor | None = None) -> None:
        rows = [(k, str(models[k])) for k in MODEL_KEYS if k in models]
        if cur is not None:
            cur.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", rows)
        else:
            with self.transaction() as c:
                c.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", rows)

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

    @staticmethod
    def _bump(cur: sqlite3.Cursor, space: str) -> None:
        cur.execute("INSERT INTO space_meta VALUES (?, 'generation', '1') ON CONFLICT(space, key) "
                    "DO UPDATE SET value = CAST(value AS INTEGER) + 1", (space,))

    def get_space_meta(self, space: str, key: str) -> str | None:
        rows = self._query("SELECT value FROM space_meta WHERE space=? AND key=?", (space, key))
        return rows[0][0] if rows else None

    def set_space_meta(self, space: str, key: str, value: str, cur: sqlite3.Cursor | None = None) -> None:
        sql = "INSERT OR REPLACE INTO space_meta VALUES (?, ?, ?)"
        if cur is not None:
            cur.execute(sql, (space, key, value))
        else:
            with self.transaction() as c:
                c.execute(sql, (space, key, value))

    def delete_space(self, space: str, cache_keys: list[str] = ()) -> None:
        """Remove every row of the space and the vector-cache rows of `cache_keys` (the text
        hashes of its units and turns) in one transaction."""
        with self.transaction() as cur:
            for table in ("turns", "amus", "amu_vectors", "turn_vectors", "sessions", "space_meta", "nodes",
                          "view_state", "view_history"):
                cur.execute(f"DELETE FROM {table} WHERE space=?", (space,))
            self._forget_cache(cur, cache_keys)

    @staticmethod
    def _forget_cache(cur: sqlite3.Cursor, keys) -> None:
        cur.executemany("DELETE FROM vector_cache WHERE key=?", [(k,) for k in dict.fromkeys(keys)])

    # --- turns -------------------------------------------------------------------
    def next_turn_seq(self, space: str) -> int:
        row = self._query("SELECT COALESCE(MAX(seq), -1) + 1 FROM turns WHERE space=?", (space,))
        return int(row[0][0])

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
                cur.execute("INSERT OR IGNORE INTO sessions (space, session_id, first_seq) VALUES (?,?,?)",
                            (t.space, t.session_id, first_seq + i))

    def turns(self, space: str, *, pending_only: bool = False, extracted_only: bool = False,
              turn_ids: list[str] | None = None) -> list[Turn]:
        sql, params = "SELECT * FROM turns WHERE space=?", [space]
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
        with self.transaction() as cur:
            self._put_turn_vectors(cur, space, turn_ids, vecs)

    @staticmethod
    def _put_turn_vectors(cur: sqlite3.Cursor, space: str, turn_ids: list[str], vecs: np.ndarray) -> None:
        cur.executemany("INSERT OR REPLACE INTO turn_vectors VALUES (?,?,?)",
                        [(space, t, _blob(v)) for t, v in zip(turn_ids, vecs)])

    def count_turns(self, space: str) -> int:
        return int(self._query("SELECT COUNT(*) FROM turns WHERE space=?", (space,))[0][0])

    @staticmethod
    def _turn(r: sqlite3.Row) -> Turn:
        return Turn(turn_id=r["turn_id"], session_id=r["session_id"], speaker=r["speaker"], text=r["text"],
                    timestamp=datetime.fromisoformat(r["ts"]), space=r["space"], extra=json.loads(r["extra"]))

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
                   turn_vecs: np.ndarray | None = None, views: list | None = None) -> None:
        """Write AMUs with their text (n, d_t) and affective (n, d_a) vectors, mark their turns
        extracted, store the turns' vectors (turn_vecs: (len(done_turn_ids), d_t)), the changed
        view rows (`views`: a `save_views` payload) and the vector dimensions (`dims`), all in
        one transaction."""
        with self.transaction() as cur:
            self._bump(cur, space)
            if turn_vecs is not None:
                self._put_turn_vectors(cur, space, done_turn_ids, turn_vecs)
            if views:
                self._write_views(cur, space, views)
            for key, value in (dims or {}).items():
                self.set_space_meta(space, key, str(value), cur=cur)
            seq0 = int(cur.execute("SELECT COALESCE(MAX(seq), -1) + 1 FROM amus WHERE space=?", (space,)).fetchone()[0])
            for i, a in enumerate(amus):
                cur.execute(
                    "INSERT INTO amus VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                    (space, a.amu_id, seq0 + i, a.text, a.speaker, a.timestamp.isoformat(), a.timestamp.timestamp(),
                     a.session_id, json.dumps(list(a.source_turn_ids)), a.polarity,
                     json.dumps([float(s) for s in a.polarity_scores]), a.status),
                )
                cur.execute("INSERT INTO amu_vectors VALUES (?,?,?,?)", (space, a.amu_id, "text", _blob(text_vecs[i])))
                cur.execute("INSERT INTO amu_vectors VALUES (?,?,?,?)", (space, a.amu_id, "affect", _blob(affect_vecs[i])))
            cur.executemany("UPDATE turns SET extracted=1 WHERE space=? AND turn_id=?",
                            [(space, t) for t in done_turn_ids])

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

    def forget(self, space: str, amu_ids: list[str], turns: dict[str, tuple | None], *,
               views: list | None = None, cache_keys: list[str] = ()) -> int:
        """Remove units and change turns in one transaction: the AMU rows and vectors of
        `amu_ids` go; `turns` maps a turn id to None (the turn, its vector and its session if
        emptied go) or to (text, extra dict, (d,) vector) (the turn is rewritten, e.g. with a
        sentence redacted); the changed view rows (`views`) and the vector-cache rows of
        `cache_keys` go with them. Returns how many AMU rows went."""
        with self.transaction() as cur:
            self._bump(cur, space)
            if views:
                self._write_views(cur, space, views)
            gone = 0
            for a in amu_ids:
                cur.execute("DELETE FROM amus WHERE space=? AND amu_id=?", (space, a))
                gone += cur.rowcount
                cur.execute("DELETE FROM amu_vectors WHERE space=? AND amu_id=?", (space, a))
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
        return gone

    def replace_vectors(self, space: str, amus: list[AMU], text_vecs: np.ndarray, affect_vecs: np.ndarray,
                        turn_ids: list[str], turn_vecs: np.ndarray, views: list, dims: dict[str, int]) -> None:
        """Re-encoded space (`etamem reindex`), one transaction: the units' polarity, scores and
        both vectors, the turns' vectors, and views built afresh (every old node, state and
        calibration record replaced by `views`, a `save_views` payload)."""
        with self.transaction() as cur:
            self._bump(cur, space)
            for table in ("nodes", "view_state", "view_history"):
                cur.execute(f"DELETE FROM {table} WHERE space=?", (space,))
            self._write_views(cur, space, views)
            for key, value in dims.items():
                self.set_space_meta(space, key, str(value), cur=cur)
            for i, a in enumerate(amus):
                cur.execute("UPDATE amus SET polarity=?, polarity_scores=? WHERE space=? AND amu_id=?",
                            (a.polarity, json.dumps([float(x) for x in a.polarity_scores]), space, a.amu_id))
                cur.executemany("INSERT OR REPLACE INTO amu_vectors VALUES (?,?,?,?)",
                                [(space, a.amu_id, "text", _blob(text_vecs[i])),
                                 (space, a.amu_id, "affect", _blob(affect_vecs[i]))])
            cur.execute("DELETE FROM turn_vectors WHERE space=?", (space,))
            self._put_turn_vectors(cur, space, turn_ids, turn_vecs)

    def amus_of_turns(self, space: str, turn_ids: list[str]) -> list[AMU]:
        """Units (any status) whose sources include one of `turn_ids`."""
        if not turn_ids:
            return []
        marks = ",".join("?" * len(turn_ids))
        rows = self._query(f"SELECT {_AMU_COLUMNS} FROM amus WHERE space=? AND EXISTS (SELECT 1 FROM "
                           f"json_each(amus.source_turn_ids) WHERE value IN ({marks})) ORDER BY seq",
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
    def _write_views(cur: sqlite3.Cursor, space: str, payload: list) -> None:
        """payload: (view, changed node rows, removed node ids, state JSON, reservoir bytes, new
        history records) per view; history records are appended (one row each), never rewritten."""
        for view, rows, removed, state, reservoir, history in payload:
            cur.executemany("DELETE FROM nodes WHERE space=? AND view=? AND node_id=?",
                            [(space, view, n) for n in removed])
            cur.executemany(
                "INSERT OR REPLACE INTO nodes VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                [(space, view, r["node_id"], r["parent_id"], int(r["is_leaf"]), json.dumps(r["children"]),
                  json.dumps(r["members"]), r["count"], r["sum"], r["summary"], r["pending"],
                  json.dumps(r["info"])) for r in rows])
            cur.execute("INSERT OR REPLACE INTO view_state VALUES (?,?,?,?)", (space, view, state, reservoir))
            cur.executemany("INSERT OR REPLACE INTO view_history VALUES (?,?,?,?)",
                            [(space, view, int(h["step"]), json.dumps(h)) for h in history])

    def load_views(self, space: str) -> dict[str, tuple[str, bytes, list[dict], list[dict]]]:
        """view -> (state JSON, reservoir bytes, node rows, history records by step) for the views
        saved for the space."""
        out = {}
        for st in self._query("SELECT view, state, reservoir FROM view_state WHERE space=?", (space,)):
            rows = [{"node_id": r["node_id"], "parent_id": r["parent_id"], "is_leaf": bool(r["is_leaf"]),
                     "children": json.loads(r["children"]), "members": json.loads(r["members"]),
                     "count": r["count"], "sum": r["sum"], "summary": r["summary"], "pending": r["pending"],
                     "info": json.loads(r["info"])}
                    for r in self._query("SELECT * FROM nodes WHERE space=? AND view=?", (space, st["view"]))]
            history = [json.loads(r[0]) for r in self._query(
                "SELECT record FROM view_history WHERE space=? AND view=? ORDER BY step", (space, st["view"]))]
            out[st["view"]] = (st["state"], st["reservoir"], rows, history)
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
        with self.transaction() as cur:
            cur.executemany("INSERT OR REPLACE INTO vector_cache VALUES (?,?,?,?)",
                            [(kind, model, k, _blob(v)) for k, v in items.items()])
