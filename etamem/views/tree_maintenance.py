"""Session-end maintenance and summaries of a `SemanticTree` (see docs/design.md, 'Semantic trees'), as a mixin.

`maintain` only visits nodes touched since the last pass: merge tiny and redundant sibling
leaves (parents screened in one product first), split oversized or low-cohesion leaves
(capacity-constrained spherical k-means), regroup nodes with more than `b_max` children
under new intermediate nodes, collapse single-child nodes, feed the calibration, and refresh
representatives and summaries whose `pending` reached delta (deepest first).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from etamem.kernels import balanced_split, cohesion_from_sum, topk

Summariser = Callable[[list[str], list[str]], str]  # (child summaries, representative texts) -> summary
QUOTES_CAP = 512  # units an LLM summary's record of what it may quote holds; past it: anything


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows (or one vector) scaled to unit length, as float32; zero stays zero."""
    n = np.sqrt(np.einsum("...i,...i->...", x, x))[..., None]
    return (x / np.maximum(n, 1e-12)).astype(np.float32)


class TreeMaintenance:
    """Maintenance methods; the node arrays, lists and helpers (`_new_node`, `_remove_node`,
    `_set_parent`, `_recompute`, `_update_paths`, `_drop_empty`, `descend`, `path`, `leaves`) are
    `SemanticTree`'s."""

    # --- maintenance ------------------------------------------------------------------------
    def maintain(self, summariser: Summariser | None = None) -> dict[str, int]:
        """Session-end maintenance over the nodes touched since the last pass; returns counts."""
        self.steps += 1
        self.summarised = []  # inner nodes whose summary this pass refreshed, deepest first
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
        self.calibrator.update(self.leaf_size_hist(), self.steps)
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
        self.members[leaf] = []
        self._update_paths(np.full(len(rows), leaf), self.X[rows], -1)
        node = self._drop_empty(leaf)
        for r in rows:  # one by one: each AMU's descent sees the ones placed before it
            target = self.descend(self.X[r], self.b_ins)[0][0]
            self.members[target].append(r)
            self.leaf_of[r] = target
            self._update_paths(np.array([target]), self.X[[r]])
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
        self._sizes_stale.add(keep)
        self.cent[keep] = unit_rows(self.sums[keep])
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
        return [rows[i] for i in topk(sims, self.summary_reps).tolist()]

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
            self.summarised.append(n)
            if summariser is None:
                self.summary[n], self.quotes[n] = " ".join(reps), list(self.reps[n])
            else:
                self.set_summary(n, summariser([self.node_text(c) for c in self.children[n]], reps))
            self.stats["summaries_first" if first else "summaries_refresh"] += 1

    # --- what summaries quote ---------------------------------------------------------------
    def set_summary(self, n: int, text: str) -> None:
        """Install a summary written from the node's child texts and representatives (an LLM's):
        it may quote any unit that a child's text held (a leaf's members, an inner child's own
        quotes) or a representative; past `QUOTES_CAP` units it counts as quoting anything."""
        quoted: set[int] | None = set(self.reps[n])
        for c in self.children[n]:
            src = self.members[c] if self.leaf_flag[c] else self.quotes[c]
            if src is None or len(quoted) + len(src) > QUOTES_CAP:
                quoted = None
                break
            quoted.update(src)
        self.summary[n], self.quotes[n] = text, None if quoted is None else sorted(quoted)
        self.changed.add(n)

    def quoting(self, rows) -> set[int]:
        """Live inner nodes whose summary may quote one of these rows (their recorded quotes
        include one, or are unknown), wherever the rows sit now."""
        rows = set(rows)
        out = set()
        for n in np.flatnonzero(self.alive[: self.n_nodes] & ~self.is_leaf[: self.n_nodes]).tolist():
            if self.summary[n] is not None and (self.quotes[n] is None or not rows.isdisjoint(self.quotes[n])):
                out.add(n)
        return out

    def forget(self, amu_ids) -> None:
        """Delete AMUs and take them out of every summary and representative list: the
        extractive summaries of the nodes above them and of every node whose summary may quote
        one (maintenance moves units between nodes, a summary is refreshed only every
        `summary_delta` changes) are recomputed; an LLM summary quoting one becomes extractive
        (the LLM's comes back at the node's next refresh)."""
        rows = {self.row_of[a] for a in amu_ids if a in self.row_of}
        if not rows:  # none of them is in this tree: no summary of it can quote them
            return
        above = {n for a in amu_ids for n in self.ancestors(a)}
        for a in amu_ids:
            self.delete(a)
        self.refresh_summaries(above | self.quoting(rows))
        for n in np.flatnonzero(self.alive[: self.n_nodes]).tolist():  # representatives without a summary
            if not rows.isdisjoint(self.reps[n]):
                self.reps[n] = self._representatives(n) if self.leaf_flag[n] else \
                    [r for r in self.reps[n] if r not in rows]
                self.changed.add(n)
