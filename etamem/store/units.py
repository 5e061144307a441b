"""Unit rows of the SQL store: AMUs with their vectors, FTA fields and links, nearest-neighbour
reads, forgetting and re-encoding in one transaction, and the views' rows. A mixin of
`etamem.store.sql.SqlStore`, over its dialect hooks and the space rows (`etamem.store.spaces`)."""
from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import numpy as np

from etamem.records import AMU
from etamem.store.schema import (
    _AMU_COLUMNS,
    _BY_SEQ,
    _NODE_COLUMNS,
    _PUT_HISTORY,
    _PUT_LINK,
    _PUT_NODE,
    _PUT_VIEW_STATE,
    EXTRACTED,
    QUEUED,
    UNIT_KINDS,
    UnitExtras,
    _matrix,
    top_cosine,
)

_FEW = 500  # up to this many ids are read by key (`IN`), more by one scan of the space


def _touched(views: list | None) -> dict[str, list[str]]:
    """view -> ids of the nodes a `_write_views` payload writes or deletes (for the change log)."""
    return {view: [r["node_id"] for r in rows] + list(removed) for view, rows, removed, *_ in views or ()}


def _mentioned(extras: UnitExtras | None) -> list[str]:
    """Ids of the stored units whose mentions `extras` rewrites (for the change log)."""
    return [a.amu_id for a in extras.mentions] if extras is not None else []


class UnitRows:
    """The unit, vector and view-row operations of `SqlStore`."""

    # --- AMUs --------------------------------------------------------------------
    def write_amus(self, space: str, amus: list[AMU], text_vecs: np.ndarray, affect_vecs: np.ndarray,
                   done_turn_ids: list[str], dims: dict[str, int] | None = None, *,
                   turn_vecs: np.ndarray | None = None, views: list | None = None,
                   extras: UnitExtras | None = None, queued: bool = False) -> None:
        """Write AMUs with their text (n, d_t) and affective (n, d_a) vectors, mark their turns
        extracted (`queued`: their LLM extraction queued, `etamem.extraction.background`), store the
        turns' vectors (turn_vecs: (len(done_turn_ids), d_t)), the changed view rows (`views`: a
        `save_views` payload), the vector dimensions (`dims`) and the FTA `extras` (fields, links,
        lifecycle changes, construction state), all in one transaction."""
        self._index_dims(text_vecs if amus else None, affect_vecs if amus else None, turn_vecs)
        with self.transaction() as cur:
            self._bump(cur, space, {"units": [a.amu_id for a in amus] + _mentioned(extras), "turns": list(done_turn_ids),
                                    "nodes": _touched(views)})
            if turn_vecs is not None:
                self._put_turn_vectors(cur, space, done_turn_ids, turn_vecs)
            if views:
                self._write_views(cur, space, views)
            for key, value in (dims or {}).items():
                self.set_space_meta(space, key, str(value), cur=cur)
            self._insert_amus(cur, space, amus, text_vecs, affect_vecs)
            cur.executemany("UPDATE turns SET extracted=? WHERE space=? AND turn_id=?",
                            [(QUEUED if queued else EXTRACTED, space, t) for t in done_turn_ids])
            if extras is not None:
                self._write_extras(cur, space, extras)

    def _insert_amus(self, cur: Any, space: str, amus: list[AMU], text_vecs: np.ndarray,
                     affect_vecs: np.ndarray) -> None:
        seq0 = int(cur.execute("SELECT COALESCE(MAX(seq), -1) + 1 FROM amus WHERE space=?", (space,)).fetchone()[0])
        cur.executemany(
            "INSERT INTO amus VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            [(space, a.amu_id, seq0 + i, a.text, a.speaker, a.timestamp.isoformat(), a.timestamp.timestamp(),
              a.session_id, json.dumps(list(a.source_turn_ids)), a.polarity,
              json.dumps([float(s) for s in a.polarity_scores]), a.status) for i, a in enumerate(amus)])
        self._put_unit_vectors(cur, space, [a.amu_id for a in amus], text_vecs, affect_vecs)

    @staticmethod
    def _delete_units(cur: Any, space: str, amu_ids: list[str]) -> int:
        """The rows of `amu_ids` (unit, vectors, FTA fields, links either way); how many units went."""
        gone = 0
        for a in amu_ids:
            cur.execute("DELETE FROM amus WHERE space=? AND amu_id=?", (space, a))
            gone += cur.rowcount
            cur.execute("DELETE FROM amu_vectors WHERE space=? AND amu_id=?", (space, a))
            cur.execute("DELETE FROM unit_fields WHERE space=? AND amu_id=?", (space, a))
            cur.execute("DELETE FROM unit_links WHERE space=? AND (source=? OR target=?)", (space, a, a))
        return gone

    def replace_units(self, space: str, turn_id: str, text: str, old_ids: list[str], amus: list[AMU],
                      text_vecs: np.ndarray, affect_vecs: np.ndarray, *, views: list | None = None,
                      extras: UnitExtras | None = None) -> bool:
        """A queued turn's LLM units in place of its rule units, in one transaction: the rows of
        `old_ids` go (with their links), `amus` with their text (n, d_t) and affective (n, d_a)
        vectors, the changed view rows and `extras` are written and the turn is marked extracted.
        Nothing is written (False) unless the turn is still queued with this `text` (deleted,
        revised or landed by another process meanwhile)."""
        self._index_dims(text_vecs if amus else None, affect_vecs if amus else None)
        with self.transaction() as cur:
            row = cur.execute("SELECT text, extracted FROM turns WHERE space=? AND turn_id=?",
                              (space, turn_id)).fetchone()
            if row is None or row[0] != text or int(row[1]) != QUEUED:
                return False
            self._bump(cur, space, {"units": [*old_ids, *(a.amu_id for a in amus)], "turns": [],
                                    "nodes": _touched(views)})
            if views:
                self._write_views(cur, space, views)
            self._delete_units(cur, space, old_ids)
            self._insert_amus(cur, space, amus, text_vecs, affect_vecs)
            cur.execute("UPDATE turns SET extracted=? WHERE space=? AND turn_id=?", (EXTRACTED, space, turn_id))
            if extras is not None:
                self._write_extras(cur, space, extras)
        return True

    def _write_extras(self, cur: Any, space: str, extras: UnitExtras) -> None:
        cur.executemany("UPDATE amus SET source_turn_ids=? WHERE space=? AND amu_id=?",
                        [(json.dumps(list(a.source_turn_ids)), space, a.amu_id) for a in extras.mentions])
        cur.executemany("INSERT INTO unit_fields VALUES (?,?,?,?)",
                        [(space, uid, life, fields) for uid, life, fields in extras.fields])
        seq0 = int(cur.execute("SELECT COALESCE(MAX(seq), -1) + 1 FROM unit_links WHERE space=?",
                               (space,)).fetchone()[0])
        cur.executemany(_PUT_LINK,
                        [(space, a, b, r, float(c), seq0 + i) for i, (a, b, r, c) in enumerate(extras.links)])
        cur.executemany("UPDATE unit_fields SET lifecycle=? WHERE space=? AND amu_id=?",
                        [(life, space, uid) for uid, life in extras.lifecycle.items()])
        cur.executemany("UPDATE unit_fields SET fields=? WHERE space=? AND amu_id=?",
                        [(fields, space, uid) for uid, fields in extras.refields])
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
        sql = "SELECT source, target, relation, confidence, seq FROM unit_links WHERE space=?"
        if amu_ids is None:
            rows = self._query(sql, (space,))
        elif not amu_ids:
            return []
        else:  # two lookups by key (primary key, `unit_links_target`): an OR of both would scan the space's links
            rows = {}
            for i in range(0, len(amu_ids), _FEW):
                part = list(amu_ids[i: i + _FEW])
                marks = ",".join("?" * len(part))
                for column in ("source", "target"):
                    for r in self._query(f"{sql} AND {column} IN ({marks})", [space, *part]):
                        rows[r[:3]] = r
            rows = rows.values()
        return [(r[0], r[1], r[2], float(r[3])) for r in sorted(rows, key=lambda r: r[4])]

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
        # by key when ids are given (see `SpaceRows.turns`: "ORDER BY seq" can walk the whole space)
        return [self._amu(r) for r in self._query(sql + (" ORDER BY seq" if amu_ids is None else _BY_SEQ), params)]

    def active_amu_ids(self, space: str) -> list[str]:
        """Ids of the space's active units in `amus` order (one narrow read)."""
        return [r[0] for r in self._query("SELECT amu_id FROM amus WHERE space=? AND status='active' ORDER BY seq",
                                          (space,))]

    def count_amus(self, space: str) -> int:
        return int(self._query("SELECT COUNT(*) FROM amus WHERE space=? AND status='active'", (space,))[0][0])

    def amu_vector_pair(self, space: str, amu_ids: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """(text, affective) vectors of the given AMUs in that order, read in one pass."""
        if not amu_ids:
            return np.zeros((0, 0), np.float32), np.zeros((0, 0), np.float32)
        by_kind: dict[str, dict[str, bytes]] = {"text": {}, "affect": {}}
        sql, params = "SELECT amu_id, kind, vector FROM amu_vectors WHERE space=?", [space]
        if len(amu_ids) <= _FEW:  # a few units (e.g. a sample): by key, not a scan of the space
            sql += f" AND amu_id IN ({','.join('?' * len(amu_ids))})"
            params += list(amu_ids)
        for r in self._query(sql, params):
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
            self._bump(cur, space, {"units": list(amu_ids) + _mentioned(extras), "turns": list(turns),
                                    "nodes": _touched(views)})
            if views:
                self._write_views(cur, space, views)
            gone = self._delete_units(cur, space, amu_ids)
            for t in turns:  # an item whose text was in the turn: its value holds that text too
                cur.execute("DELETE FROM space_items WHERE space=? AND turn_id=?", (space, t))
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
            self._bump(cur, space, {"reset": True})
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
            self._bump(cur, space, {"units": [], "turns": [], "nodes": _touched(payload)})
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

    def view_rows(self, space: str, view: str, node_ids: list[str]) -> list[dict]:
        """The saved rows of these nodes of one view (those that exist), read by key."""
        out = []
        for i in range(0, len(node_ids), _FEW):
            part = node_ids[i: i + _FEW]
            out += [_node(r) for r in self._query(f"SELECT {_NODE_COLUMNS} FROM nodes WHERE space=? AND view=? AND "
                                                  f"node_id IN ({','.join('?' * len(part))})", [space, view, *part])]
        return out

    def view_states(self, space: str) -> dict[str, tuple[str, bytes, list[dict]]]:
        """view -> (state JSON, reservoir bytes, history records by step): `load_views` without
        the node rows."""
        return {view: (state, bytes(reservoir), [json.loads(r[0]) for r in self._query(
                    "SELECT record FROM view_history WHERE space=? AND view=? ORDER BY step", (space, view))])
                for view, state, reservoir in self._query("SELECT view, state, reservoir FROM view_state WHERE space=?",
                                                          (space,))}

    def load_views(self, space: str) -> dict[str, tuple[str, bytes, list[dict], list[dict]]]:
        """view -> (state JSON, reservoir bytes, node rows, history records by step) for the views
        saved for the space."""
        out = {}
        for view, state, reservoir in self._query("SELECT view, state, reservoir FROM view_state WHERE space=?",
                                                  (space,)):
            rows = [_node(r) for r in self._query(f"SELECT {_NODE_COLUMNS} FROM nodes WHERE space=? AND view=?",
                                                  (space, view))]
            history = [json.loads(r[0]) for r in self._query(
                "SELECT record FROM view_history WHERE space=? AND view=? ORDER BY step", (space, view))]
            out[view] = (state, bytes(reservoir), rows, history)
        return out


def _node(r) -> dict:
    """A node row of `_NODE_COLUMNS` as the views restore it."""
    return {"node_id": r[0], "parent_id": r[1], "is_leaf": bool(r[2]), "children": json.loads(r[3]),
            "members": json.loads(r[4]), "count": r[5], "sum": bytes(r[6]), "summary": r[7], "pending": r[8],
            "info": json.loads(r[9])}
