"""`SemanticTree`: the hierarchy shared by the Event and Affect views (see docs/design.md, 'Semantic trees').

Nodes live in parallel arrays indexed by an integer node id (ids are never reused):
`sums` (float64 sum of the unit vectors below the node), `cent` (float32 normalised
`sums`, i.e. the centroid), `count`, `parent`, `is_leaf`, `alive`, `pending`; children and
leaf members are Python lists. AMUs are rows of `X` (float32 unit vectors).

- Insertion: beam search keeping the best `b_ins` nodes per step, starting from every node
  of `top_level()` (the deepest level with at most `top_width` nodes, scored in one product);
  the best leaf takes the AMU when its similarity is >= `tau_new`, otherwise a new leaf opens
  under that leaf's parent (it may exceed `b_max` children until maintenance). Sums,
  centroids and `pending` counters are updated along the path. Cost O((top_width + depth *
  b_ins * b_max) * d).
  A batch (`insert_many`) descends once for all its AMUs (`kernels.beam_descend` over the
  centroids and `kid_table`, the children as an int32 table), then picks leaves AMU by AMU.
- Maintenance (`maintain`, at session end; `tree_maintenance.py`) only visits nodes touched
  since the last one.
"""
from __future__ import annotations

import numpy as np

from etamem.kernels import beam_descend
from etamem.views.calibration import Calibrator
from etamem.views.tree_maintenance import TreeMaintenance, unit_rows
from etamem.views.tree_rows import TreeRows


class SemanticTree(TreeMaintenance, TreeRows):
    """One semantic hierarchy over unit vectors of dimension `dim` (maintenance and summaries:
    `TreeMaintenance`; store rows: `TreeRows`)."""

    def __init__(self, dim: int, calibrator: Calibrator, *, b_max: int = 8, m_min: int = 2, b_ins: int = 3,
                 summary_delta: int = 8, summary_reps: int = 3, pair_samples: int = 64, seed: int = 0,
                 backend: str = "auto", top_width: int = 512):
        self.dim, self.calibrator = int(dim), calibrator
        self.b_max, self.m_min, self.b_ins = b_max, m_min, b_ins
        self.summary_delta, self.summary_reps, self.pair_samples = summary_delta, summary_reps, pair_samples
        self.seed, self.backend = seed, backend
        self._top: np.ndarray | None = None  # the beam's start level (cached; see `top_level`)
        self._top_guard: set[int] = set()  # the nodes whose children decide it
        self.top_width = top_width  # the beam starts from the widest level with at most this many nodes
        self.kmeans_iter = 10  # Lloyd iterations for splits/regroups (small sets: converges fast)
        self.steps = 0  # maintenance passes so far
        self.n_nodes = 0
        self.sums = np.zeros((0, self.dim), np.float64)
        self.cent = np.zeros((0, self.dim), np.float32)
        self.count = np.zeros(0, np.int64)
        self.parent: list[int] = []  # Python lists: read one at a time on the hot path
        self.leaf_flag: list[bool] = []
        self.is_leaf = np.zeros(0, bool)
        self.alive = np.zeros(0, bool)
        self.pending = np.zeros(0, np.int64)
        self.children: list[list[int]] = []
        self.kid_table = np.full((0, 2 * b_max), -1, np.int32)  # children as rows, for beam_descend
        self._kids_stale: set[int] = set()  # nodes whose kid_table row is out of date
        self.members: list[list[int]] = []
        self.summary: list[str | None] = []
        self.reps: list[list[int]] = []
        self.quotes: list[list[int] | None] = []  # rows a node's summary may quote (None: any)
        self.n_rows = 0
        self.X = np.zeros((0, self.dim), np.float32)
        self.leaf_of = np.zeros(0, np.int64)
        self.amu_ids: list[str] = []
        self.texts: list[str] = []
        self.row_of: dict[str, int] = {}
        self._size_hist = np.zeros(64, np.int64)  # live leaves by size (see `leaf_size_hist`)
        self._hist_size: dict[int, int] = {}  # live leaf -> the size it is counted at there
        self._sizes_stale: set[int] = set()  # nodes whose leaf size may differ from that
        self.dirty: set[int] = set()  # nodes to look at in the next maintenance
        self.changed: set[int] = set()  # nodes to persist
        self.removed: set[int] = set()  # node ids to delete from the store
        self.stats = {"inserted": 0, "deleted": 0, "new_leaves": 0, "splits": 0, "merges": 0, "regroups": 0,
                      "collapses": 0, "summaries_first": 0, "summaries_refresh": 0, "pending_updates": 0}
        self.root = self._new_node(-1, leaf=False)

    @classmethod
    def from_config(cls, dim: int, config, backend: str = "auto") -> "SemanticTree":
        """An empty tree with the tree and calibration parameters of a `Config`."""
        c = config
        return cls(dim, Calibrator.from_config(c), b_max=c.b_max, m_min=c.m_min, b_ins=c.b_ins,
                   summary_delta=c.summary_delta, summary_reps=c.summary_reps,
                   pair_samples=c.calibration_pair_samples, seed=c.seed, backend=backend,
                   top_width=c.insert_top_width)

    @property
    def top_width(self) -> int:
        return self._top_width

    @top_width.setter
    def top_width(self, width: int) -> None:
        self._top_width, self._top = int(width), None

    def _children_changed(self, *nodes: int) -> None:
        """Drop the cached top level when the children of a node that decides it change."""
        if self._top is not None and any(n in self._top_guard for n in nodes):
            self._top = None

    # --- storage helpers ------------------------------------------------------------------
    def _grow(self, name: str, need: int) -> None:
        """Make room for `need` rows in array `name` (new rows are 0, -1 in `kid_table`).

        In place when nothing else holds the array: `ndarray.resize` reallocates, which for a
        large block moves its pages instead of copying them, so capacity grows by only a
        quarter each time (X at 1M AMUs: no 0.8 GB copy, no two copies at once, little unused
        capacity). When a view or another reference exists, resize refuses and the rows are
        copied into an array of twice the capacity."""
        old = getattr(self, name).shape[0]
        if need <= old:
            return
        tail = getattr(self, name).shape[1:]
        try:  # no local name for the array: resize counts the references to it
            getattr(self, name).resize((max(need, old + old // 4, 16),) + tail)
        except ValueError:
            arr = getattr(self, name)
            new = np.zeros((max(need, 2 * old, 16),) + tail, arr.dtype)  # zeros: lazy pages
            new[:old] = arr
            setattr(self, name, new)
        if name == "kid_table":
            self.kid_table[old:] = -1

    def _new_node(self, parent: int, *, leaf: bool) -> int:
        self._children_changed(parent)
        nid = self.n_nodes
        self.n_nodes += 1
        for name in ("sums", "cent", "count", "is_leaf", "alive", "pending", "kid_table"):
            self._grow(name, self.n_nodes)
        self.sums[nid] = 0.0
        self.cent[nid] = 0.0
        self.count[nid] = 0
        self.parent.append(parent)
        self.leaf_flag.append(leaf)
        self.is_leaf[nid] = leaf
        self.alive[nid] = True
        self.pending[nid] = 0
        self.children.append([])
        self.members.append([])
        self.summary.append(None)
        self.reps.append([])
        self.quotes.append([])
        self._kids_stale.add(nid)
        self._sizes_stale.add(nid)
        if parent >= 0:
            self.children[parent].append(nid)
            self._kids_stale.add(parent)
            self.dirty.add(parent)
            self.changed.add(parent)
        self.changed.add(nid)
        self.dirty.add(nid)
        return nid

    def _remove_node(self, nid: int) -> None:
        p = self.parent[nid]
        self._children_changed(p, nid)
        if p >= 0 and nid in self.children[p]:
            self.children[p].remove(nid)
            self._kids_stale.add(p)
            self.dirty.add(p)
            self.changed.add(p)
        self.alive[nid] = False
        self._sizes_stale.add(nid)
        self.children[nid], self.members[nid], self.reps[nid], self.quotes[nid] = [], [], [], []
        self._kids_stale.add(nid)
        self.summary[nid] = None
        self.changed.discard(nid)
        self.dirty.discard(nid)
        self.removed.add(nid)

    def _set_parent(self, nid: int, parent: int) -> None:
        old = self.parent[nid]
        self._children_changed(old, parent)
        if old >= 0 and nid in self.children[old]:
            self.children[old].remove(nid)
            self.changed.add(old)
            self._kids_stale.add(old)
        self.parent[nid] = parent
        self.children[parent].append(nid)
        self._kids_stale.add(parent)
        self.changed.update((nid, parent))

    def _recompute(self, nid: int) -> None:
        """Exact sums/count of one node from its members (leaf) or children."""
        if self.is_leaf[nid]:
            rows = self.members[nid]
            self.sums[nid] = self.X[rows].astype(np.float64).sum(axis=0) if rows else 0.0
            self.count[nid] = len(rows)
            self._sizes_stale.add(nid)
        else:
            kids = self.children[nid]
            self.sums[nid] = self.sums[kids].sum(axis=0) if kids else 0.0
            self.count[nid] = int(self.count[kids].sum()) if kids else 0
        self.cent[nid] = unit_rows(self.sums[nid])
        self.changed.add(nid)

    def path(self, nid: int) -> list[int]:
        """Node ids from `nid` up to the root."""
        out = [nid]
        parent = self.parent
        while parent[out[-1]] >= 0:
            out.append(parent[out[-1]])
        return out

    def _drop_empty(self, node: int) -> int:
        """Remove `node` and then its ancestors while they hold no AMU; returns the first
        node kept (the root at worst)."""
        while node != self.root and self.count[node] == 0:
            up = self.parent[node]
            self._remove_node(node)
            node = up
        return node

    # --- queries used by insertion and retrieval --------------------------------------------
    @property
    def active_rows(self) -> int:
        return len(self.row_of)

    def leaves(self) -> np.ndarray:
        """Ids of live leaves, ascending: (L,) int64."""
        return np.flatnonzero(self.alive[: self.n_nodes] & self.is_leaf[: self.n_nodes])

    def leaf_size_hist(self) -> np.ndarray:
        """How many live leaves hold each number of AMUs: (V,) int64, index = size (zeros past
        the largest); the same as `np.bincount(count[leaves()])` padded. Kept up to date from
        the nodes whose size may have changed since the last call, so a maintenance step does
        not scan every leaf. The array is the tree's own: read, do not write."""
        hist, counted = self._size_hist, self._hist_size
        for n in self._sizes_stale:
            old = counted.pop(n, None)
            if old is not None:
                hist[old] -= 1
            if self.alive[n] and self.leaf_flag[n]:
                size = int(self.count[n])
                if size >= hist.shape[0]:
                    hist = self._size_hist = np.concatenate([hist, np.zeros(2 * size + 2 - hist.shape[0], np.int64)])
                hist[size] += 1
                counted[n] = size
        self._sizes_stale.clear()
        return hist

    def descend(self, x: np.ndarray, beam: int) -> tuple[list[int], np.ndarray]:
        """Beam search for one query (x: (d,) float32 unit); see `descend_many`."""
        return self.descend_many(np.asarray(x, np.float32).reshape(1, -1), beam)[0]

    def top_level(self) -> np.ndarray:
        """Where the beam starts: the deepest level (counted from the root's children; a leaf
        above it stands for itself) with at most `top_width` nodes, (S,) int64.

        With b_max 8 and the default 512 that is the third level of a large tree: all its nodes
        are scored (one (B, d) x (d, S) product per batch), because near the root a centroid
        averages so many clusters that, where the data has no structure above the clusters,
        it is about as close to the AMU's cluster as to any other and a narrow beam picks
        subtrees almost at random. A small tree is scored down to its leaves (exact insertion).

        The level is cached. It depends only on the children lists of the root, of the levels
        down to it and of its own nodes (their number of children decides whether the next
        level fits), so only a change to one of those lists (`_children_changed`) drops it;
        new leaves and splits deeper down keep it.
        """
        if self._top is None:
            level = list(self.children[self.root])
            guard = {self.root}
            while not all(self.leaf_flag[n] for n in level):
                guard.update(level)
                nxt = [c for n in level for c in (self.children[n] if not self.leaf_flag[n] else (n,))]
                if len(nxt) > self._top_width:
                    break
                level = nxt
            guard.update(level)
            self._top, self._top_guard = np.asarray(level, np.int64), guard
        return self._top

    def descend_many(self, Q: np.ndarray, beam: int) -> list[tuple[list[int], np.ndarray]]:
        """Beam search by centroid cosine (`kernels.beam_descend`) for a batch of queries,
        from `top_level()`.

        Q: (B, d) float32 unit rows. Returns per query (leaf ids, their cosines as float32),
        best first; empty if the tree has no leaf.
        """
        self._flush_kids()
        nodes, scores = beam_descend(self.cent[: self.n_nodes], self.kid_table[: self.n_nodes],
                                     self.top_level(), Q, beam, backend=self.backend)
        found = nodes >= 0
        return [(n[f].tolist(), s[f]) for n, s, f in zip(nodes, scores, found)]

    def _narrow_kids(self) -> None:
        """Give back `kid_table` columns that a wide node (many new leaves before maintenance)
        made the whole table take, once no row needs them."""
        base = 2 * self.b_max
        if self.kid_table.shape[1] > base:
            self._flush_kids()
            need = int((self.kid_table[: self.n_nodes] >= 0).sum(axis=1).max(initial=0))
            if need < self.kid_table.shape[1]:
                self.kid_table = np.ascontiguousarray(self.kid_table[:, : max(base, need)])

    def _flush_kids(self) -> None:
        """Write the children of nodes changed since the last descent into `kid_table`
        (a leaf's row is itself, as `beam_descend` expects)."""
        for n in self._kids_stale:
            row = self.children[n] if not self.leaf_flag[n] else [n]
            if not self.alive[n]:
                row = []
            if len(row) > self.kid_table.shape[1]:  # until the next maintenance regroups the node
                wider = np.full((self.kid_table.shape[0], 2 * len(row)), -1, np.int32)
                wider[:, : self.kid_table.shape[1]] = self.kid_table
                self.kid_table = wider
            self.kid_table[n] = -1
            self.kid_table[n, : len(row)] = row
        self._kids_stale.clear()

    # --- insertion and deletion ---------------------------------------------------------------
    def insert(self, amu_id: str, vec: np.ndarray, text: str = "") -> int:
        """Insert one AMU (vec: (d,) float32, unit); returns its leaf id."""
        return self.insert_many([amu_id], np.asarray(vec, np.float32).reshape(1, -1), [text])[0]

    def insert_many(self, amu_ids: list[str], vecs: np.ndarray, texts: list[str] | None = None) -> list[int]:
        """Insert a batch of AMUs in order (vecs: (B, d) float32, unit rows); returns their leaf ids.

        One beam descent for the whole batch, on the centroids as of the call. Then, AMU by
        AMU, the best leaf is the best of its beam and of the leaves opened earlier in the batch,
        each scored by its live centroid (the AMUs it took earlier in the batch included); below
        `tau_new` a new leaf opens under that leaf's parent. Sums, centroids, counts and pending
        counters of the leaves and their ancestors are written once at the end. Only the beam
        itself sees the batch-start centroids; with B = 1 this is sequential insertion.
        """
        ids = list(amu_ids)
        texts = [""] * len(ids) if texts is None else list(texts)
        X = np.asarray(vecs, np.float32)
        if X.ndim != 2 or X.shape[0] != len(ids) or len(texts) != len(ids):
            raise ValueError(f"insert_many: {len(ids)} ids, {len(texts)} texts and vectors of shape {X.shape}")
        if X.shape[1] != self.dim:
            raise ValueError(f"vector has dimension {X.shape[1]}, tree expects {self.dim}")
        dup = [a for a in ids if a in self.row_of]
        if dup or len(set(ids)) != len(ids):
            raise ValueError(f"amu_id {(dup or ids)[0]!r} is already in this tree" if dup
                             else "insert_many: duplicate amu_ids in the batch")
        if not ids:
            return []
        X = unit_rows(X)
        first = self.n_rows
        self.n_rows += len(ids)
        self._grow("X", self.n_rows)
        self._grow("leaf_of", self.n_rows)
        self.X[first: self.n_rows] = X
        self.amu_ids.extend(ids)
        self.texts.extend(texts)
        self.row_of.update((a, first + i) for i, a in enumerate(ids))
        beams = self.descend_many(X, self.b_ins)
        tau_new = self.calibrator.current.tau_new
        opened: list[int] = []  # leaves opened by this batch
        added: dict[int, np.ndarray] = {}  # leaf -> float64 sum of the batch's rows it took so far
        leaf_of = np.empty(len(ids), np.int64)
        best_sims: list[float] = []
        for i, (cand, sims) in enumerate(beams):
            x = X[i]
            live = [k for k, c in enumerate(cand) if c in added]  # moved during this batch: rescore
            if opened or live:
                cand = cand + opened
                live += range(len(cand) - len(opened), len(cand))
                scores = np.concatenate([sims, np.zeros(len(opened), np.float32)])
                v = self.sums[[cand[k] for k in live]] + np.stack([added[cand[k]] for k in live])
                scores[live] = (v @ x) / np.maximum(np.sqrt(np.einsum("ij,ij->i", v, v)), 1e-12)
                j = int(np.argmax(scores))
            else:  # the beam's order stands (best first)
                scores, j = sims, 0 if cand else -1
            if j >= 0:
                best_sims.append(float(scores[j]))
            if j < 0 or scores[j] < tau_new:
                leaf = self._new_node(self.root if j < 0 else self.parent[cand[j]], leaf=True)
                opened.append(leaf)
                self.stats["new_leaves"] += 1
            else:
                leaf = cand[j]
            added[leaf] = added[leaf] + x if leaf in added else x.astype(np.float64)
            leaf_of[i] = leaf
        self.calibrator.observe(best_sims)
        for i, leaf in enumerate(leaf_of.tolist()):
            self.members[leaf].append(first + i)
        self.leaf_of[first: self.n_rows] = leaf_of
        self._update_paths(leaf_of, X)
        self.stats["inserted"] += len(ids)
        return leaf_of.tolist()

    def _update_paths(self, leaf_of: np.ndarray, X: np.ndarray, sign: int = 1) -> None:
        """Add (sign +1) or take away (-1) rows X (B, d) in the sums and counts of their leaves
        `leaf_of` (B,) and of all the leaves' ancestors, once per node; pending counters count
        every row either way; the centroids are refreshed."""
        leaves, inv = np.unique(leaf_of, return_inverse=True)
        onehot = np.zeros((len(leaves), len(leaf_of)))
        onehot[inv, np.arange(len(leaf_of))] = float(sign)
        delta = onehot @ X.astype(np.float64)  # (L, d) per-leaf signed sums of the rows
        n_add = np.bincount(inv, minlength=len(leaves)).astype(np.int64)
        nodes: list[int] = []
        of_leaf: list[int] = []
        for k, lf in enumerate(leaves.tolist()):
            path = self.path(lf)
            self.stats["pending_updates"] += len(path) * int(n_add[k])
            nodes.extend(path)
            of_leaf.extend([k] * len(path))
        uniq, where = np.unique(np.asarray(nodes, np.int64), return_inverse=True)
        member = np.zeros((len(uniq), len(leaves)))
        member[where, of_leaf] = 1.0  # node x leaf: the node is on the leaf's path
        sums = self.sums[uniq] + member @ delta
        self.sums[uniq] = sums
        n_up = np.rint(member @ n_add).astype(np.int64)
        self.count[uniq] += sign * n_up
        self.pending[uniq] += n_up
        self.cent[uniq] = unit_rows(sums)
        self.changed.update(uniq.tolist())
        touched = leaves.tolist()
        self.dirty.update(touched)
        self._sizes_stale.update(touched)

    def delete(self, amu_id: str) -> bool:
        """Remove an AMU; empty leaves (and emptied ancestors) go at once. False if absent."""
        row = self.row_of.pop(amu_id, None)
        if row is None:
            return False
        leaf = int(self.leaf_of[row])
        self.members[leaf].remove(row)
        self.leaf_of[row] = -1
        self.texts[row] = ""  # the row's slot stays (ids are positions); its text goes
        self._update_paths(np.array([leaf]), self.X[[row]], -1)
        self.dirty.add(self._drop_empty(leaf))
        self.stats["deleted"] += 1
        return True

    def ancestors(self, amu_id: str) -> list[int]:
        """Node ids above the AMU's leaf, leaf excluded (empty if the AMU is absent)."""
        row = self.row_of.get(amu_id)
        return [] if row is None else self.path(int(self.leaf_of[row]))[1:]

    # --- summaries ----------------------------------------------------------------------------
    def refresh_summaries(self, nodes) -> None:
        """Recompute the extractive summaries of these inner nodes, deepest first (after a
        deletion: a summary may quote what went); nodes without a summary keep none."""
        live = [n for n in set(nodes) if n < self.n_nodes and self.alive[n] and not self.leaf_flag[n]]
        for n in sorted(live, key=lambda n: -len(self.path(n))):
            if self.summary[n] is not None:
                self.reps[n] = self._representatives(n)
                self.summary[n] = " ".join(self.texts[r] for r in self.reps[n])
                self.quotes[n] = list(self.reps[n])
                self.changed.add(n)

    def leaf_text(self, leaf: int) -> str:
        """A leaf's summary is its AMU texts (no LLM)."""
        return " ".join(self.texts[r] for r in self.members[leaf])

    def node_text(self, nid: int) -> str:
        return self.leaf_text(nid) if self.is_leaf[nid] else (self.summary[nid] or "")

    # --- inspection -----------------------------------------------------------------------------
    def depth(self) -> int:
        """Edges on the longest root-to-leaf path (0 for an empty tree)."""
        leaves = self.leaves()
        return max((len(self.path(int(n))) - 1 for n in leaves), default=0)

    def shape(self) -> dict:
        leaves = self.leaves()
        internal = [n for n in np.flatnonzero(self.alive[: self.n_nodes]) if not self.is_leaf[n]]
        fan = [len(self.children[n]) for n in internal if self.children[n]]
        sizes = self.count[leaves]
        return {"amus": self.active_rows, "nodes": int(self.alive[: self.n_nodes].sum()), "leaves": int(len(leaves)),
                "depth": self.depth(), "mean_fanout": float(np.mean(fan)) if fan else 0.0,
                "max_fanout": int(max(fan, default=0)),
                "leaf_size_mean": float(sizes.mean()) if len(sizes) else 0.0,
                "leaf_size_max": int(sizes.max()) if len(sizes) else 0,
                "thresholds": self.calibrator.current.as_dict(), "calibrated": self.calibrator.warmed_up,
                "maintenance_steps": self.steps}

    def snapshot(self) -> dict:
        """Canonical structure for equality checks: node -> (parent, leaf, children, members)."""
        return {int(n): (self.parent[n], bool(self.is_leaf[n]), list(self.children[n]),
                         [self.amu_ids[r] for r in self.members[n]], int(self.count[n]), self.summary[n])
                for n in np.flatnonzero(self.alive[: self.n_nodes])}

