"""The SQL store's tables and format version, the upsert SQLite and PostgreSQL share, and the row
encodings (little-endian float32 blobs) used by `etamem.store.sql.SqlStore` and its backends."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from etamem.kernels import topk

MODEL_KEYS = ("text_encoder", "text_dim", "affect_tagger", "affect_dim")  # model identity, in `meta`
FORMAT_VERSION = 7  # 2: view nodes and view states; 3: raw-turn vectors; 4: FTA unit fields and links;
# 5: vector-cache keys scoped by space (the cache of older stores is emptied), space epochs,
# derived-file records; 6: the change log (`space_changes`) and framework items (`space_items`);
# 7: `turns.extracted` = 2, a turn searchable through its rule units whose LLM extraction is
# queued (`etamem.extraction.background`; older etamem would read such turns as neither pending
# nor extracted, hence the version).
# Older stores are upgraded in place:
# the tables added since are created empty.

# Written in SQLite's types; PostgreSQL maps BLOB, REAL and TEXT to its own (etamem.store.postgres).
SCHEMA = """
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
CREATE INDEX IF NOT EXISTS unit_links_seq ON unit_links (space, seq);
CREATE TABLE IF NOT EXISTS space_changes (
    space TEXT NOT NULL, generation INTEGER NOT NULL, epoch TEXT NOT NULL, change TEXT NOT NULL,
    PRIMARY KEY (space, generation));
CREATE TABLE IF NOT EXISTS space_items (
    space TEXT NOT NULL, kind TEXT NOT NULL, key TEXT NOT NULL, seq INTEGER NOT NULL, value TEXT NOT NULL,
    turn_id TEXT NOT NULL, created TEXT NOT NULL, updated TEXT NOT NULL, PRIMARY KEY (space, kind, key));
CREATE INDEX IF NOT EXISTS space_items_seq ON space_items (kind, seq);
CREATE INDEX IF NOT EXISTS space_items_turn ON space_items (space, turn_id);
CREATE TABLE IF NOT EXISTS api_keys (
    key_id TEXT PRIMARY KEY, secret_hash TEXT NOT NULL, spaces TEXT NOT NULL, created TEXT NOT NULL,
    revoked INTEGER NOT NULL DEFAULT 0, note TEXT NOT NULL DEFAULT '');
"""
SPACE_TABLES = ("turns", "amus", "amu_vectors", "turn_vectors", "sessions", "space_meta", "nodes", "view_state",
                "view_history", "unit_fields", "unit_links", "space_changes", "space_items")
VECTOR_TABLES = {"amu_vectors": ("space", "amu_id", "kind"), "turn_vectors": ("space", "turn_id")}  # -> key columns
UNIT_KINDS = ("text", "affect")
PENDING, EXTRACTED, QUEUED = 0, 1, 2  # `turns.extracted`: not yet made into units; done; rule units, LLM queued

_ITEM_COLUMNS = "space, kind, key, seq, value, turn_id, created, updated"


@dataclass(frozen=True)
class StoredItem:
    """An item a framework adapter keeps beside a space's turns (`SqlStore.put_item`): its value
    as stored (text, e.g. JSON), the turn holding its text ("" for none), ISO times."""

    space: str
    kind: str
    key: str
    seq: int
    value: str
    turn_id: str
    created: str
    updated: str


# the order of rows read by key (an id list): an expression, so that the planner looks the ids up
# by primary key and sorts them rather than walking the space's whole `seq` index
_BY_SEQ = " ORDER BY seq + 0"
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
    refields: list[tuple[str, str]] = field(default_factory=list)  # (amu id, new fields JSON) of stored units
    # stored AMUs whose mentions changed (a restatement joined, a mention's turn deleted): their
    # `source_turn_ids` rewritten (`etamem.facts.mentions`)
    mentions: list = field(default_factory=list)


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


def vector_blob(vec: np.ndarray) -> bytes:
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
    return [(ids[i], float(sims[i])) for i in topk(sims, k).tolist()]
