"""`SemanticTree`: the hierarchy shared by the Event and Affect views (DESIGN §5).

Nodes live in parallel arrays indexed by an integer node id (ids are never reused):
`sums` (float64 sum of the unit vectors below the node), `cent` (float32 normalised
`sums`, i.e. the centroid), `count`, `parent`, `is_leaf`, `alive`, `pending`; children and
leaf members are Python lists. AMUs are rows of `X` (float32 unit vectors).

- Insertion: beam search from the root keeping the best `b_ins` nodes per step; the best
  leaf takes the AMU when its similarity is >= `tau_new`, otherwise a new leaf opens under
  that leaf's parent (it may exceed `b_max` children until maintenance). Sums, centroids
  and `pending` counters are updated along the path. Cost O(depth * b_ins * b_max * d).
- Maintenance (`maintain`, at session end) only visits nodes touched since the last one:
  drop empty leaves, merge tiny and redundant sibling leaves, split oversized or
  low-cohesion leaves (capacity-constrained spherical k-means), regroup nodes with more
  than `b_max` children under new intermediate nodes, collapse single-child nodes, refresh
  summaries whose `pending` reached delta, and update the calibration.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..kernels import balanced_split, beam_descend, cohesion_from_sum
from .calibration import Calibrator

Summariser = Callable[[list[str], list[str]], str]  # (child summaries, representative texts) -> summary


def _unit(x: np.ndarray) -> np.ndarray:
    """Rows (or one vector) scaled to unit length, as float32; zero stays zero."""
    n = np.sqrt(np.einsum("...i,...i->...", x, x))[..., None]
    return (x / np.maximum(n, 1e-12)).astype(np.float32)


class SemanticTree:
    """One semantic hierarchy over unit vectors of dimension `dim`."""

    def __init__(self, dim: int, calibrator: Calibrator, *, b_max: int = 8, m_min: int = 2, b_ins: int = 3,
                 summary_delta: int = 8, summary_reps: int = 3, pair_samples: int = 64, seed: int = 0,
                 backend: str = "auto"):
        self.dim, self.calibrator = int(dim), calibrator
        self.b_max, self.m_min, self.b_ins = b_max, m_min, b_ins
        self.summary_delta, self.summary_reps, self.pair_samples = summary_delta, summary_reps, pair_samples
        self.seed, self.backend = seed, backend
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
        self.version = np.zeros(0, np.int64)  # bumped whenever the AMUs below a node change
        self.children: list[list[int]] = []
        self.kid_table = np.full((0, 2 * b_max), -1, np.int32)  # children as rows, for beam_descend
        self._kids_stale: set[int] = set()  # nodes whose kid_table row is out of date
        self.members: list[list[int]] = []
        self.summary: list[str | None] = []
        self.reps: list[list[int]] = []
        self.n_rows = 0
        self.X = np.zeros((0, self.dim), np.float32)
        self.leaf_of = np.zeros(0, np.int64)
        self.amu_ids: list[str] = []
        self.texts: list[str] = []
        self.row_of: dict[str, int] = {}
        self.dirty: set[int] = set()  # nodes to look at in the next maintenance
        self.changed: set[int] = set()  # nodes to persist
        self.removed: set[int] = set()  # node ids to delete from the store
        self.stats = {"inserted": 0, "deleted": 0, "new_leaves": 0, "splits": 0, "merges": 0, "regroups": 0,
                      "collapses": 0, "summaries_first": 0, "summaries_refresh": 0, "pending_updates": 0}
        self.root = self._new_node(-1, leaf=False)

    # --- storage helpers ------------------------------------------------------------------
    def _grow(self, name: str, need: int) -> None:
        arr = getattr(self, name)
        if need <= arr.shape[0]:
            return
        cap = max(need, 2 * arr.shape[0], 16)
        shape = (cap,) + arr.shape[1:]
        new = np.full(shape, -1, arr.dtype) if name == "kid_table" else np.zeros(shape, arr.dtype)  # zeros: lazy pages
        new[: arr.shape[0]] = arr
        setattr(self, name, new)

    def _new_node(self, parent: int, *, leaf: bool) -> int:
        nid = self.n_nodes
        self.n_nodes += 1
        for name in ("sums", "cent", "count", "is_leaf", "alive", "pending", "version", "kid_table"):
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
        self._kids_stale.add(nid)
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
        if p >= 0 and nid in self.children[p]:
            self.children[p].remove(nid)
            self._kids_stale.add(p)
            self.dirty.add(p)
            self.changed.add(p)
        self.alive[nid] = False
        self.children[nid], self.members[nid], self.reps[nid] = [], [], []
        self._kids_stale.add(nid)
        self.summary[nid] = None
        self.changed.discard(nid)
        self.dirty.discard(nid)
        self.removed.add(nid)

    def _set_parent(self, nid: int, parent: int) -> None:
        old = self.parent[nid]
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
        else:
            kids = self.children[nid]
            self.sums[nid] = self.sums[kids].sum(axis=0) if kids else 0.0
            self.count[nid] = int(self.count[kids].sum()) if kids else 0
        self.cent[nid] = _unit(self.sums[nid])
        self.version[nid] += 1
        self.changed.add(nid)

    def path(self, nid: int) -> list[int]:
        """Node ids from `nid` up to the root."""
        out = [nid]
        parent = self.parent
        while parent[out[-1]] >= 0:
            out.append(parent[out[-1]])
        return out

    def _bump_path(self, leaf: int, vec: np.ndarray, sign: int) -> None:
        path = self.path(leaf)
        sums = self.sums[path]
        sums += vec if sign > 0 else -vec
        self.sums[path] = sums
        self.count[path] += sign
        self.pending[path] += 1
        self.version[path] += 1
        self.stats["pending_updates"] += len(path)
        norms = np.sqrt(np.einsum("ij,ij->i", sums, sums))
        self.cent[path] = sums / np.maximum(norms, 1e-12)[:, None]
        self.changed.update(path)

    # --- queries used by insertion and retrieval --------------------------------------------
    @property
    def active_rows(self) -> int:
        return len(self.row_of)

    def leaves(self) -> np.ndarray:
        """Ids of live leaves, ascending: (L,) int64."""
        return np.flatnonzero(self.alive[: self.n_nodes] & self.is_leaf[: self.n_nodes])

    def descend(self, x: np.ndarray, beam: int) -> tuple[list[int], np.ndarray]:
        """Beam search for one query (x: (d,) float32 unit); see `descend_many`."""
        return self.descend_many(np.asarray(x, np.float32).reshape(1, -1), beam)[0]

    def descend_many(self, Q: np.ndarray, beam: int) -> list[tuple[list[int], np.ndarray]]:
        """Beam search by centroid cosine (`kernels.beam_descend`) for a batch of queries.

        Q: (B, d) float32 unit rows. Returns per query (leaf ids, their cosines as float32),
        best first; empty if the tree has no leaf.
        """
        self._flush_kids()
        nodes, scores = beam_descend(self.cent[: self.n_nodes], self.kid_table[: self.n_nodes],
                                     np.asarray(self.children[self.root], np.int64), Q, beam, backend=self.backend)
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
        X = _unit(X)
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
        self._add_rows(leaf_of, X)
        self.stats["inserted"] += len(ids)
        return leaf_of.tolist()

    def _add_rows(self, leaf_of: np.ndarray, X: np.ndarray) -> None:
        """Add rows X (B, d) to the sums, counts, pending counters and versions of their leaves
        `leaf_of` (B,) and of all the leaves' ancestors, once per node; refresh the centroids."""
        leaves, inv = np.unique(leaf_of, return_inverse=True)
        onehot = np.zeros((len(leaves), len(leaf_of)))
        onehot[inv, np.arange(len(leaf_of))] = 1.0
        delta = onehot @ X.astype(np.float64)  # (L, d) per-leaf sums of the new rows
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
        self.count[uniq] += n_up
        self.pending[uniq] += n_up
        self.version[uniq] += 1
        self.cent[uniq] = sums / np.maximum(np.sqrt(np.einsum("ij,ij->i", sums, sums)), 1e-12)[:, None]
        self.changed.update(uniq.tolist())
        self.dirty.update(leaves.tolist())

    def delete(self, amu_id: str) -> bool:
        """Remove an AMU; empty leaves (and emptied ancestors) go at once. False if absent."""
        row = self.row_of.pop(amu_id, None)
        if row is None:
            return False
        leaf = int(self.leaf_of[row])
        self.members[leaf].remove(row)
        self.leaf_of[row] = -1
        self._bump_path(leaf, self.X[row], -1)
        node = leaf
        while node != self.root and self.count[node] == 0:
            up = self.parent[node]
            self._remove_node(node)
            node = up
        self.dirty.add(node)
        self.stats["deleted"] += 1
        return True

    # --- maintenance ------------------------------------------------------------------------
    def maintain(self, summariser: Summariser | None = None) -> dict[str, int]:
        """Session-end maintenance over the nodes touched since the last pass; returns counts."""
        self.steps += 1
        before = dict(self.stats)
        touched = {n for n in self.dirty if self.alive[n]}
        parents = {n for n in touched if not self.is_leaf[n]} | {self.parent[n] for n in touched if self.is_leaf[n]}
        parents.discard(-1)
        for p in self._merge_candidates(sorted(parents), touched):
            if self.alive[p]:
                self._merge_children(p, touched)
        m_max = self.calibrator.m_max
        for leaf in sorted(n for n in touched | self.dirty if self.alive[n] and self.is_leaf[n]):
            self._maybe_split(leaf, m_max)
            parents.add(self.parent[leaf])
        for p in sorted(parents):
            if self.alive[p]:
                self._regroup(p)
        self._collapse(sorted(parents))
        self._observe_pairs(touched)
        self.calibrator.update(self.count[self.leaves()], self.steps)
        depth: dict[int, int] = {}  # the touched nodes and their ancestors -> depth
        for n in touched | self.dirty:
            if self.alive[n] and n not in depth:
                path = self.path(n)
                for i, a in enumerate(path):
                    depth[a] = len(path) - 1 - i
        self._refresh_summaries(depth, summariser)
        self.dirty.clear()
        self._narrow_kids()
        return {k: self.stats[k] - before[k] for k in self.stats}

    def _merge_candidates(self, parents: list[int], touched: set[int]) -> list[int]:
        """The parents for which `_merge_children` may do something: a leaf child below `m_min`,
        or a fresh (touched) leaf child whose centroid cosine to a sibling leaf exceeds
        `tau_merge` with room for both in one leaf. All parents' pairs are scored at once."""
        out: list[int] = []
        first: list[int] = []
        second: list[int] = []
        owner: list[int] = []
        leaf_flag, dirty = self.leaf_flag, self.dirty
        for p in parents:
            if not self.alive[p]:
                continue
            leaves = [c for c in self.children[p] if leaf_flag[c]]
            if leaves and int(self.count[leaves].min()) < self.m_min:
                out.append(p)
                continue
            for f in leaves:
                if f in touched or f in dirty:
                    others = [c for c in leaves if c != f]
                    first.extend([f] * len(others))
                    second.extend(others)
                    owner.extend([p] * len(others))
        if first:
            nodes, where = np.unique(np.asarray(first + second, np.int64), return_inverse=True)
            cent = self.cent[nodes]
            a, b = where[: len(first)], where[len(first):]
            fits = self.count[first] + self.count[second] <= self.calibrator.m_max
            hit = fits & (np.einsum("ij,ij->i", cent[a], cent[b]) > self.calibrator.current.tau_merge)
            out.extend(set(np.asarray(owner)[hit].tolist()))
        return sorted(out)

    def _merge_children(self, p: int, touched: set[int]) -> None:
        """Tiny leaves go to their most similar sibling leaf; redundant sibling leaves merge
        (pairs with at least one leaf touched since the last maintenance)."""
        m_max, tau_merge = self.calibrator.m_max, self.calibrator.current.tau_merge
        count, leaf_flag = self.count, self.leaf_flag
        for leaf in [c for c in self.children[p] if leaf_flag[c] and count[c] < self.m_min]:
            if not self.alive[leaf] or self.count[leaf] >= self.m_min:
                continue  # absorbed or grown meanwhile
            sibs = [c for c in self.children[p] if self.leaf_flag[c] and c != leaf]
            if not sibs:
                self._reinsert(leaf)  # no sibling leaf: its AMUs go to the best leaf elsewhere
                continue
            sims = self.cent[sibs] @ self.cent[leaf]
            room = self.count[sibs] + self.count[leaf] <= m_max
            pick = np.where(room, sims, sims - 10.0) if room.any() else sims  # prefer a sibling with room
            self._absorb(sibs[int(np.argmax(pick))], leaf)
        leaves = [c for c in self.children[p] if self.leaf_flag[c]]
        fresh = [c for c in leaves if c in touched or c in self.dirty]
        if len(leaves) < 2 or not fresh:
            return
        while True:  # greedy passes, best pair first, until nothing merges
            sims = self.cent[fresh] @ self.cent[leaves].T  # (f, L)
            ii, jj = np.nonzero(sims > tau_merge)
            pairs = sorted((-float(sims[i, j]), fresh[i], leaves[j]) for i, j in zip(ii, jj) if fresh[i] != leaves[j])
            used: set[int] = set()
            for _, a, b in pairs:
                if a in used or b in used or self.count[a] + self.count[b] > m_max:
                    continue
                self._absorb(a, b)
                used.update((a, b))
            if not used:
                return
            leaves = [c for c in self.children[p] if self.leaf_flag[c]]
            fresh = [c for c in leaves if c in used]

    def _reinsert(self, leaf: int) -> None:
        """Move the AMUs of a tiny leaf that has no sibling leaf into the best other leaf
        (beam search without opening new leaves), then drop the leaf."""
        rows = list(self.members[leaf])
        if self.active_rows <= len(rows):
            return  # nowhere else to go
        for r in rows:
            self.members[leaf].remove(r)
            self._bump_path(leaf, self.X[r], -1)
        self._remove_node(leaf)
        node = self.parent[leaf]
        while node != self.root and self.count[node] == 0:
            up = self.parent[node]
            self._remove_node(node)
            node = up
        for r in rows:
            target = self.descend(self.X[r], self.b_ins)[0][0]
            self.members[target].append(r)
            self.leaf_of[r] = target
            self._bump_path(target, self.X[r], +1)
            self.dirty.add(target)
        self.dirty.add(node)
        self.stats["merges"] += 1

    def _absorb(self, keep: int, gone: int) -> None:
        """Move all members of leaf `gone` into sibling leaf `keep` and drop `gone`."""
        rows = self.members[gone]
        self.members[keep].extend(rows)
        self.leaf_of[rows] = keep
        self.sums[keep] += self.sums[gone]
        self.count[keep] += self.count[gone]
        self.pending[keep] += len(rows)
        self.version[keep] += 1
        self.cent[keep] = _unit(self.sums[keep])
        self.changed.add(keep)
        self.dirty.add(keep)
        self._remove_node(gone)
        self.stats["merges"] += 1

    def _maybe_split(self, leaf: int, m_max: int) -> None:
        rows = self.members[leaf]
        n = len(rows)
        low_cohesion = (n >= 2 * self.m_min
                        and cohesion_from_sum(self.sums[leaf], n) < self.calibrator.current.tau_coh)
        if n <= m_max and not low_cohesion:
            return
        # size splits: groups of at most 3/4 capacity (and at least ceil(n/k)), so no split
        # produces a leaf that is tiny or full again at once
        k = max(2, -(-n // m_max))
        capacity = m_max if n <= m_max else max(-(-n // k), -(-3 * m_max // 4))
        labels = balanced_split(self.X[rows], capacity, seed=self.seed + self.steps, n_iter=self.kmeans_iter,
                                backend=self.backend)
        groups = [[r for r, g in zip(rows, labels) if g == k] for k in range(int(labels.max()) + 1)]
        groups = [g for g in groups if g]
        if len(groups) < 2 or (n <= m_max and min(map(len, groups)) < self.m_min):
            return  # a cohesion split may not create leaves that the merge rule would undo
        p = self.parent[leaf]
        self.members[leaf] = groups[0]
        self._recompute(leaf)
        self.pending[leaf] = 0
        for g in groups[1:]:
            nid = self._new_node(p, leaf=True)
            self.members[nid] = g
            self.leaf_of[g] = nid
            self._recompute(nid)
        self.stats["splits"] += 1

    def _regroup(self, p: int) -> None:
        """Bring `p` back to at most b_max children by clustering them (capacity b_max).

        B-tree style, so depth stays logarithmic: an overflowing inner node keeps its largest
        group and hands the other groups to new sibling nodes under its parent (which may
        overflow in turn); only the root gets a new level, its groups moving under new
        children of the root.
        """
        while p >= 0 and len(self.children[p]) > self.b_max:
            kids = list(self.children[p])
            labels = balanced_split(self.cent[kids], self.b_max, seed=self.seed + self.steps,
                                    n_iter=self.kmeans_iter, backend=self.backend)
            groups = sorted(([c for c, g in zip(kids, labels) if g == k] for k in range(int(labels.max()) + 1)),
                            key=len, reverse=True)
            movers = [g for g in groups if len(g) >= 2] if p == self.root else [g for g in groups[1:] if len(g) >= 2]
            if not movers:  # degenerate clustering: move the second half as one group
                movers = [kids[len(kids) // 2:]]
            host = p if p == self.root else self.parent[p]
            for group in movers:
                mid = self._new_node(host, leaf=False)
                for c in group:
                    self._set_parent(c, mid)
                self._recompute(mid)
                self.pending[mid] = int(self.count[mid])
                self.stats["regroups"] += 1
            if p != self.root:
                self._recompute(p)
                p = host

    def _collapse(self, nodes: list[int]) -> None:
        """Remove empty internal nodes and splice out single-child internal nodes."""
        for n in nodes:
            while self.alive[n] and not self.is_leaf[n] and n != self.root and len(self.children[n]) <= 1:
                p = self.parent[n]
                for c in list(self.children[n]):
                    self._set_parent(c, p)
                self._remove_node(n)
                self.stats["collapses"] += 1
                n = p
        kids = self.children[self.root]
        if len(kids) == 1 and not self.is_leaf[kids[0]]:
            only = kids[0]
            for c in list(self.children[only]):
                self._set_parent(c, self.root)
            self._remove_node(only)
            self.stats["collapses"] += 1

    def _observe_pairs(self, touched: set[int]) -> None:
        """Feed sampled within-leaf pair and sibling-centroid similarities to the calibrator."""
        rng = np.random.default_rng(self.seed * 7919 + self.steps)
        leaves = [n for n in sorted(touched) if self.alive[n] and self.is_leaf[n] and self.count[n] >= 2]
        vals: list[np.ndarray] = []
        # no more samples than distinct pairs exist, so small trees do not end warm-up on repeats
        n_pairs = int(sum(self.count[n] * (self.count[n] - 1) // 2 for n in leaves))
        samples = min(self.pair_samples, n_pairs)
        if samples:
            picks = rng.integers(0, len(leaves), samples)
            sizes = self.count[[leaves[i] for i in picks]]
            first = (rng.random(samples) * sizes).astype(np.int64)
            second = (first + 1 + (rng.random(samples) * (sizes - 1)).astype(np.int64)) % sizes
            a = [self.members[leaves[k]][i] for k, i in zip(picks, first)]
            b = [self.members[leaves[k]][j] for k, j in zip(picks, second)]
            vals.append(np.einsum("ij,ij->i", self.X[a], self.X[b]))
        pairs = [self.children[p] for p in sorted({self.parent[n] for n in leaves} - {-1})
                 if len(self.children[p]) >= 2]
        if pairs:
            a = [kids[0] for kids in pairs]
            b = [kids[1 + int(rng.integers(len(kids) - 1))] for kids in pairs]
            vals.append(np.einsum("ij,ij->i", self.cent[a], self.cent[b]))
        if vals:
            self.calibrator.observe(np.concatenate(vals))

    # --- summaries ----------------------------------------------------------------------------
    def leaf_text(self, leaf: int) -> str:
        """A leaf's summary is its AMU texts (no LLM)."""
        return " ".join(self.texts[r] for r in self.members[leaf])

    def node_text(self, nid: int) -> str:
        return self.leaf_text(nid) if self.is_leaf[nid] else (self.summary[nid] or "")

    def _representatives(self, nid: int) -> list[int]:
        """Rows nearest the centroid among the members (leaf) or among the children's stored
        representatives (inner node; a leaf child's are recomputed when missing or when one of
        them has left it)."""
        if self.is_leaf[nid]:
            rows = self.members[nid]
        else:
            rows = []
            for c in self.children[nid]:
                reps = self.reps[c]
                if self.leaf_flag[c] and (not reps or any(self.leaf_of[r] != c for r in reps)):
                    reps = self.reps[c] = self._representatives(c)
                    self.changed.add(c)
                rows.extend(reps)
            rows = [r for r in rows if self.leaf_of[r] >= 0]
        if not rows:
            return []
        sims = self.X[rows] @ self.cent[nid]
        return [rows[i] for i in np.argsort(-sims, kind="stable")[: self.summary_reps]]

    def _refresh_summaries(self, depth: dict[int, int], summariser: Summariser | None) -> None:
        """Deepest first over the nodes of `depth` (node -> depth): representatives and
        summaries refreshed when new or when `pending` >= delta (a leaf's summary is its texts;
        an inner node's comes from the summariser (LLM) when given, else it is extractive)."""
        for n in sorted(depth, key=depth.__getitem__, reverse=True):
            first = self.summary[n] is None and not self.leaf_flag[n]
            if not first and self.pending[n] < self.summary_delta:
                continue
            self.reps[n] = self._representatives(n)
            self.pending[n] = 0
            self.changed.add(n)
            if self.leaf_flag[n]:
                continue
            reps = [self.texts[r] for r in self.reps[n]]
            if summariser is None:
                self.summary[n] = " ".join(reps)
            else:
                self.summary[n] = summariser([self.node_text(c) for c in self.children[n]], reps)
            self.stats["summaries_first" if first else "summaries_refresh"] += 1

    # --- persistence ------------------------------------------------------------------------
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
                "pending": int(self.pending[nid]), "info": {"reps": [self.amu_ids[r] for r in self.reps[nid]]}}

    def state(self) -> dict:
        return {"dim": self.dim, "root": self.root, "n_nodes": self.n_nodes, "steps": self.steps,
                "stats": self.stats, "params": {"b_max": self.b_max, "m_min": self.m_min, "b_ins": self.b_ins,
                                                "summary_delta": self.summary_delta, "summary_reps": self.summary_reps,
                                                "pair_samples": self.pair_samples, "seed": self.seed}}

    @classmethod
    def restore(cls, state: dict, rows: list[dict], calibrator: Calibrator, vectors: dict[str, np.ndarray],
                texts: dict[str, str], backend: str = "auto") -> "SemanticTree":
        """Rebuild a tree from `state()`, `node_row()` rows and the AMU vectors/texts by id."""
        tree = cls(state["dim"], calibrator, backend=backend, **state["params"])
        tree.children, tree.members, tree.summary, tree.reps = [], [], [], []
        n = tree.n_nodes = int(state["n_nodes"])
        for name in ("sums", "cent", "count", "is_leaf", "alive", "pending", "version"):
            arr = getattr(tree, name)
            setattr(tree, name, np.zeros((n,) + arr.shape[1:], arr.dtype))
        tree.parent, tree.leaf_flag = [-1] * n, [False] * n
        tree.children = [[] for _ in range(n)]
        tree.members = [[] for _ in range(n)]
        tree.summary = [None] * n
        tree.reps = [[] for _ in range(n)]
        tree.root, tree.steps, tree.stats = int(state["root"]), int(state["steps"]), dict(state["stats"])
        ids = [a for r in rows for a in r["members"]]
        tree.n_rows = len(ids)
        tree.X = np.stack([vectors[a] for a in ids]).astype(np.float32) if ids else np.zeros((0, tree.dim), np.float32)
        tree.leaf_of = np.full(len(ids), -1, np.int64)
        tree.amu_ids, tree.texts = ids, [texts.get(a, "") for a in ids]
        tree.row_of = {a: i for i, a in enumerate(ids)}
        for r in rows:
            nid = int(r["node_id"])
            tree.alive[nid], tree.is_leaf[nid], tree.parent[nid] = True, r["is_leaf"], int(r["parent_id"])
            tree.leaf_flag[nid] = bool(r["is_leaf"])
            tree.children[nid] = [int(c) for c in r["children"]]
            tree.members[nid] = [tree.row_of[a] for a in r["members"]]
            tree.leaf_of[tree.members[nid]] = nid
            tree.count[nid], tree.pending[nid], tree.summary[nid] = r["count"], r["pending"], r["summary"]
            tree.sums[nid] = np.frombuffer(r["sum"], dtype="<f8")
            tree.cent[nid] = _unit(tree.sums[nid])
            tree.reps[nid] = [tree.row_of[a] for a in r["info"].get("reps", []) if a in tree.row_of]
        tree.dirty, tree.changed, tree.removed = set(), set(), set()
        tree.kid_table = np.full((n, 2 * tree.b_max), -1, np.int32)
        tree._kids_stale = set(range(n))
        return tree

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

