"""Space and turn rows of the SQL store: spaces with their write stamps and meta values, turns,
turn vectors and sessions. A mixin of `etamem.store.sql.SqlStore`, over its dialect hooks."""
from __future__ import annotations

import json
import secrets
from datetime import datetime
from typing import Any

import numpy as np

from etamem.records import Turn
from etamem.store.schema import (
    _ADD_SESSION,
    _BUMP,
    _BY_SEQ,
    _EPOCH,
    _ITEM_COLUMNS,
    _SET_SPACE_META,
    _TURN_COLUMNS,
    EXTRACTED,
    QUEUED,
    SPACE_TABLES,
    StoredItem,
    _matrix,
)


class SpaceRows:
    """The space, turn and session operations of `SqlStore`."""

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

    KEEP_CHANGES = 1000  # change-log rows kept per space; a follower further behind reopens

    def _bump(self, cur: Any, space: str, change: dict) -> None:
        """Raise the space's generation (and draw its epoch on its first write) and log what the
        write touches (`change`: the ids of units, turns and view nodes, or {"reset": True}; see
        `changes`): the first statements of a space's write transaction (on PostgreSQL the
        generation's row lock also keeps a second writer of the space waiting until the
        commit). Log rows older than `KEEP_CHANGES` generations go in the same transaction."""
        cur.execute(_BUMP, (space,))
        cur.execute(_EPOCH, (space, "epoch", secrets.token_hex(8)))
        meta = dict(cur.execute("SELECT key, value FROM space_meta WHERE space=? AND key IN ('epoch', 'generation')",
                                (space,)).fetchall())
        generation = int(meta["generation"])
        cur.execute("INSERT INTO space_changes (space, generation, epoch, change) VALUES (?,?,?,?)",
                    (space, generation, meta["epoch"], json.dumps(change, separators=(",", ":"))))
        cur.execute("DELETE FROM space_changes WHERE space=? AND generation<=?", (space, generation - self.KEEP_CHANGES))

    def changes(self, space: str, after: int, upto: int) -> list[tuple[int, str, dict]]:
        """The change log of the writes after generation `after` up to `upto`, oldest first:
        (generation, epoch, change) with change {"units": [ids], "turns": [ids], "nodes": {view:
        [node ids]}} (what the write added, removed or rewrote) or {"reset": True} (a reindex).
        Rows may be missing (compacted, or written before the log existed): the caller checks."""
        rows = self._query("SELECT generation, epoch, change FROM space_changes WHERE space=? AND generation>? "
                           "AND generation<=? ORDER BY generation", (space, after, upto))
        return [(int(g), e, json.loads(c)) for g, e, c in rows]

    # --- items (values a framework adapter keeps by key beside a space's turns) ---------------
    def get_item(self, space: str, kind: str, key: str) -> StoredItem | None:
        """The item `key` of `kind` (e.g. "langgraph") in the space, or None."""
        rows = self._query(f"SELECT {_ITEM_COLUMNS} FROM space_items WHERE space=? AND kind=? AND key=?",
                           (space, kind, key))
        return StoredItem(*rows[0]) if rows else None

    def items(self, kind: str, spaces: list[str] | None = None, prefix: str = "") -> list[StoredItem]:
        """The items of `kind` (in `spaces` only, when given; whose key starts with `prefix`),
        oldest first."""
        sql, params = f"SELECT {_ITEM_COLUMNS} FROM space_items WHERE kind=?", [kind]
        if spaces is not None:
            if not spaces:
                return []
            sql += f" AND space IN ({','.join('?' * len(spaces))})"
            params += list(spaces)
        if prefix:
            sql += " AND substr(key, 1, ?) = ?"
            params += [len(prefix), prefix]
        return [StoredItem(*r) for r in self._query(sql + " ORDER BY seq", params)]

    def item_spaces(self, kind: str) -> list[str]:
        """The spaces holding items of `kind`."""
        return sorted(r[0] for r in self._query("SELECT DISTINCT space FROM space_items WHERE kind=?", (kind,)))

    def put_item(self, space: str, kind: str, key: str, value: str, turn_id: str = "", now: str = "") -> None:
        """Insert or replace an item's `value` (text, e.g. JSON) and the turn holding its text
        ("" for none); a new item goes last, a replaced one keeps its place and creation time."""
        with self.transaction() as cur:
            cur.execute("UPDATE space_items SET value=?, turn_id=?, updated=? WHERE space=? AND kind=? AND key=?",
                        (value, turn_id, now, space, kind, key))
            if not cur.rowcount:
                seq = int(cur.execute("SELECT COALESCE(MAX(seq), -1) + 1 FROM space_items WHERE kind=?",
                                      (kind,)).fetchone()[0])
                cur.execute(f"INSERT INTO space_items ({_ITEM_COLUMNS}) VALUES (?,?,?,?,?,?,?,?)",
                            (space, kind, key, seq, value, turn_id, now, now))

    def delete_item(self, space: str, kind: str, key: str) -> bool:
        """Remove an item; False if there was none."""
        with self.transaction() as cur:
            cur.execute("DELETE FROM space_items WHERE space=? AND kind=? AND key=?", (space, kind, key))
            return cur.rowcount > 0

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
            sql += " AND extracted=0" if pending_only else " AND extracted>0"  # done or LLM queued
        if turn_ids is not None:
            if not turn_ids:
                return []
            sql += f" AND turn_id IN ({','.join('?' * len(turn_ids))})"
            params += list(turn_ids)
        # by key when ids are given: "ORDER BY seq" alone lets SQLite walk the whole space in
        # `turns_seq` order for a long id list (O(space) per write); the expression is sorted instead
        return [self._turn(r) for r in self._query(sql + (" ORDER BY seq" if turn_ids is None else _BY_SEQ), params)]

    def extracted_turn_ids(self, space: str) -> list[str]:
        """Ids of the space's extracted turns in `turns(extracted_only=True)` order (one narrow read)."""
        return [r[0] for r in self._query("SELECT turn_id FROM turns WHERE space=? AND extracted>0 ORDER BY seq",
                                          (space,))]

    def count_pending(self, space: str) -> int:
        """Turns stored but not yet extracted (index `turns_pending`: no scan of the space)."""
        return int(self._query("SELECT COUNT(*) FROM turns WHERE space=? AND extracted=0", (space,))[0][0])

    # --- the LLM queue (`etamem.extraction.background`): turns searchable through their rule units
    def count_queued(self, space: str) -> int:
        """Turns whose rule units are in place and whose LLM extraction is queued."""
        return int(self._query("SELECT COUNT(*) FROM turns WHERE space=? AND extracted=?", (space, QUEUED))[0][0])

    def count_queued_all(self) -> int:
        """Queued turns of every space (the server's metrics: no space named)."""
        return int(self._query("SELECT COUNT(*) FROM turns WHERE extracted=?", (QUEUED,))[0][0])

    def queued_turns(self, space: str, limit: int) -> list[Turn]:
        """The space's first `limit` queued turns, oldest first (index `turns_pending`)."""
        rows = self._query(f"SELECT {_TURN_COLUMNS} FROM turns WHERE space=? AND extracted=? ORDER BY seq LIMIT ?",
                           (space, QUEUED, int(limit)))
        return [self._turn(r) for r in rows]

    def queued_spaces(self) -> list[str]:
        """The spaces holding queued turns (one pass over the `turns_pending` index)."""
        return [r[0] for r in self._query("SELECT DISTINCT space FROM turns WHERE extracted=?", (QUEUED,))]

    def turns_before(self, space: str, turn_id: str, n: int) -> list[Turn]:
        """Up to `n` turns of `turn_id`'s session stored just before it, oldest first (an
        extractor's context)."""
        rows = self._query(
            f"SELECT {_TURN_COLUMNS} FROM turns WHERE space=? AND session_id=(SELECT session_id FROM turns WHERE "
            "space=? AND turn_id=?) AND seq < (SELECT seq FROM turns WHERE space=? AND turn_id=?) "
            "ORDER BY seq DESC LIMIT ?", (space, space, turn_id, space, turn_id, int(n)))
        return [self._turn(r) for r in reversed(rows)]

    def mark_extracted(self, space: str, turn_ids: list[str]) -> list[str]:
        """Queued turns whose rule units stay (the LLM's reply was not used) marked done; the ids
        that were still queued."""
        done = []
        with self.transaction() as cur:
            for t in turn_ids:
                cur.execute("UPDATE turns SET extracted=? WHERE space=? AND turn_id=? AND extracted=?",
                            (EXTRACTED, space, t, QUEUED))
                if cur.rowcount:
                    done.append(t)
        return done

    def turn_vectors(self, space: str, turn_ids: list[str] | None = None) -> dict[str, np.ndarray]:
        """turn id -> (d,) float32 text vector of `turn_text`, for the turns that have one (of
        `turn_ids` only when given: read by key, for a sample)."""
        sql, params = "SELECT turn_id, vector FROM turn_vectors WHERE space=?", [space]
        if turn_ids is not None:
            if not turn_ids:
                return {}
            sql += f" AND turn_id IN ({','.join('?' * len(turn_ids))})"
            params += list(turn_ids)
        rows = self._query(sql, params)
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
