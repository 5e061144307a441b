"""Persistence of a `SemanticTree`: its node rows and state for the store, the tree restored
from them, and rows another process committed applied in place (`etamem.live.change_log`). A mixin
of `etamem.views.semantic_tree.SemanticTree`."""
from __future__ import annotations

import numpy as np

from etamem.views.calibration import Calibrator
from etamem.views.tree_maintenance import unit_rows


class TreeRows:
    """The store rows of a `SemanticTree` (see the module's docstring)."""

    def pop_changes(self) -> tuple[list[int], list[int]]:
        """(live node ids changed, node ids removed) since the last call; resets both."""
        changed = sorted(n for n in self.changed if self.alive[n])
        removed = sorted(self.removed)
        self.changed, self.removed = set(), set()
        return changed, removed

    def node_row(self, nid: int) -> dict:
        """Plain-data row of one node for the store (sum as float64 bytes)."""
        return {"node_id": str(nid), "parent_id": str(int(self.parent[nid])), "is_leaf": bool(self.is_leaf[nid]),
                "children": [str(c) for c in self.children[nid]],
                "members": [self.amu_ids[r] for r in self.members[nid]], "count": int(self.count[nid]),
                "sum": self.sums[nid].astype("<f8").tobytes(), "summary": self.summary[nid],
                "pending": int(self.pending[nid]), "info": {"reps": [self.amu_ids[r] for r in self.reps[nid]],
                                                            **self._quotes_info(nid)}}

    def _quotes_info(self, nid: int) -> dict:
        """The node row's record of what its summary quotes: none without a summary, "reps" for
        its representatives (extractive), else the unit ids, or None for anything."""
        quoted = self.quotes[nid]
        if self.summary[nid] is None:
            return {}
        if quoted == self.reps[nid]:
            return {"quotes": "reps"}
        return {"quotes": None if quoted is None else [self.amu_ids[r] for r in quoted]}

    def state(self) -> dict:
        return {"dim": self.dim, "root": self.root, "n_nodes": self.n_nodes, "steps": self.steps,
                "stats": self.stats, "params": {"b_max": self.b_max, "m_min": self.m_min, "b_ins": self.b_ins,
                                                "summary_delta": self.summary_delta, "summary_reps": self.summary_reps,
                                                "pair_samples": self.pair_samples, "seed": self.seed,
                                                "top_width": self.top_width}}

    @classmethod
    def restore(cls, state: dict, rows: list[dict], calibrator: Calibrator, vectors: dict[str, np.ndarray],
                texts: dict[str, str], backend: str = "auto") -> "TreeRows":
        """Rebuild a tree from `state()`, `node_row()` rows and the AMU vectors/texts by id."""
        # a new `SemanticTree` (this mixin's class): the classmethod sets its private state directly
        tree = cls(state["dim"], calibrator, backend=backend, **state["params"])
        tree.children, tree.members, tree.summary, tree.reps = [], [], [], []
        n = tree.n_nodes = int(state["n_nodes"])
        for name in ("sums", "cent", "count", "is_leaf", "alive", "pending"):
            arr = getattr(tree, name)
            setattr(tree, name, np.zeros((n,) + arr.shape[1:], arr.dtype))
        tree.parent, tree.leaf_flag = [-1] * n, [False] * n
        tree.children = [[] for _ in range(n)]
        tree.members = [[] for _ in range(n)]
        tree.summary = [None] * n
        tree.reps = [[] for _ in range(n)]
        tree.quotes = [[] for _ in range(n)]
        tree.root, tree.steps, tree.stats = int(state["root"]), int(state["steps"]), dict(state["stats"])
        ids = [a for r in rows for a in r["members"]]
        tree.n_rows = len(ids)
        if not ids:
            tree.X = np.zeros((0, tree.dim), np.float32)
        elif hasattr(vectors, "take"):  # e.g. `VectorsById`: one gather
            tree.X = np.ascontiguousarray(vectors.take(ids), dtype=np.float32)
        else:
            tree.X = np.stack([vectors[a] for a in ids]).astype(np.float32)
        tree.leaf_of = np.full(len(ids), -1, np.int64)
        tree.amu_ids, tree.texts = ids, [texts.get(a, "") for a in ids]
        tree.row_of = {a: i for i, a in enumerate(ids)}
        for r in rows:
            tree._set_row(r)
        tree.cent[:n] = unit_rows(tree.sums[:n])  # dead rows stay 0
        tree.dirty, tree.changed, tree.removed = set(), set(), set()
        tree.kid_table = np.full((n, 2 * tree.b_max), -1, np.int32)
        tree._kids_stale = set(range(n))
        tree._sizes_stale = set(range(n))
        return tree

    def _set_row(self, r: dict) -> int:
        """Set one node from its saved row (its members' rows must exist); returns its id."""
        nid = int(r["node_id"])
        self.alive[nid], self.is_leaf[nid], self.parent[nid] = True, r["is_leaf"], int(r["parent_id"])
        self.leaf_flag[nid] = bool(r["is_leaf"])
        self.children[nid] = [int(c) for c in r["children"]]
        self.members[nid] = [self.row_of[a] for a in r["members"]]
        self.leaf_of[self.members[nid]] = nid
        self.count[nid], self.pending[nid], self.summary[nid] = r["count"], r["pending"], r["summary"]
        self.sums[nid] = np.frombuffer(r["sum"], dtype="<f8")
        reps = r["info"].get("reps", [])
        self.reps[nid] = [self.row_of[a] for a in reps if a in self.row_of]
        self.quotes[nid] = self._restored_quotes(r, reps)
        return nid

    def apply_rows(self, state: dict, rows: list[dict], removed: list[str], calibrator: Calibrator,
                   new_ids: list[str], new_vecs: np.ndarray, new_texts: list[str]) -> None:
        """Bring the tree to rows another process committed (`etamem.live.change_log`): its saved
        `state()`, the rows of the nodes it changed, the ids of the nodes it removed, its
        calibrator, and the units new to this tree (ids, (n, d) vectors, texts) before the rows
        that hold them. Units that left the tree go first (`drop_units`)."""
        if new_ids:
            first = self.n_rows
            self.n_rows += len(new_ids)
            self._grow("X", self.n_rows)
            self._grow("leaf_of", self.n_rows)
            self.X[first: self.n_rows] = unit_rows(np.asarray(new_vecs, np.float32))
            self.leaf_of[first: self.n_rows] = -1
            self.amu_ids.extend(new_ids)
            self.texts.extend(new_texts)
            self.row_of.update((a, first + i) for i, a in enumerate(new_ids))
        n = int(state["n_nodes"])
        for name in ("sums", "cent", "count", "is_leaf", "alive", "pending", "kid_table"):
            self._grow(name, n)
        grow = n - len(self.parent)
        if grow > 0:
            self.parent += [-1] * grow
            self.leaf_flag += [False] * grow
            for name in ("children", "members", "reps", "quotes"):
                getattr(self, name).extend([] for _ in range(grow))
            self.summary += [None] * grow
        self.n_nodes, self.root, self.steps = n, int(state["root"]), int(state["steps"])
        self.stats, self.calibrator = dict(state["stats"]), calibrator
        for nid in map(int, removed):
            if nid < n:
                self.alive[nid], self.is_leaf[nid], self.count[nid], self.pending[nid] = False, False, 0, 0
                self.sums[nid], self.cent[nid] = 0.0, 0.0
                self.children[nid], self.members[nid], self.reps[nid], self.quotes[nid] = [], [], [], []
                self.summary[nid], self.parent[nid], self.leaf_flag[nid] = None, -1, False
        touched = [self._set_row(r) for r in rows] + [int(r) for r in removed if int(r) < n]
        self.cent[touched] = unit_rows(self.sums[touched])
        self._top = None
        self._kids_stale.update(touched)
        self._sizes_stale.update(touched)
        self.dirty, self.changed, self.removed = set(), set(), set()

    def drop_units(self, amu_ids: list[str]) -> None:
        """Forget units another process removed (their nodes' rows follow: `apply_rows`)."""
        for a in amu_ids:
            row = self.row_of.pop(a, None)
            if row is not None:
                self.leaf_of[row] = -1
                self.texts[row] = ""

    def _restored_quotes(self, row: dict, reps: list[str]) -> list[int] | None:
        """What a saved node's summary may quote (rows; None: anything). A row without the
        record (an older store) quotes its representatives if the summary is exactly their
        texts, else (an LLM's summary, or representatives gone) anything; so does a record
        naming a unit that is not in the tree any more."""
        if row["summary"] is None:
            return []
        saved = row["info"].get("quotes", "legacy")
        if saved == "reps" or saved == "legacy":
            ids = reps
            if saved == "legacy" and row["summary"] != " ".join(self.texts[self.row_of[a]] if a in self.row_of
                                                                else "\0" for a in reps):
                return None
        elif saved is None:
            return None
        else:
            ids = saved
        return [self.row_of[a] for a in ids] if all(a in self.row_of for a in ids) else None
