"""Checks of saved view rows before they are restored (see docs/design.md, 'Invariants': a store always opens).

A view is sound when every active unit that belongs to it sits in exactly one leaf, no leaf
holds anything else, every node but the roots has a parent that lists it (and only it lists
it), every node is reachable from a root without cycles, inner nodes hold no members and the
unit counts add up. `check_rows` returns the problems found (empty: sound); the caller
rebuilds a view with problems from its units.
"""
from __future__ import annotations

from collections import Counter

MAX_REPORTED = 5


def check_rows(rows: list[dict], expected: set[str], roots: list, *, session_of: dict[str, str] | None = None,
               n_nodes: int | None = None) -> list[str]:
    """Problems of one view's node rows (`Store.load_views` rows).

    expected: the ids of the active units that belong to the view. roots: the root node ids
    (one for a tree; for the Time forest, every node without a parent). session_of: for the
    Time forest, unit id -> session id (a unit must sit in leaf `S:<session id>`). n_nodes:
    for a tree, the id counter (every node id must be below it).
    """
    problems: list[str] = []
    by_id: dict = {}
    for r in rows:
        if r["node_id"] in by_id:
            problems.append(f"node {r['node_id']} saved twice")
        by_id[r["node_id"]] = r
    if n_nodes is not None:
        over = [n for n in by_id if int(n) >= n_nodes]
        if over:
            problems.append(f"node ids {over[:MAX_REPORTED]} at or above the id counter {n_nodes}")
    for root in roots:
        if root not in by_id:
            problems.append(f"root {root} missing")
    listed: Counter = Counter()
    for nid, r in by_id.items():
        for c in r["children"]:
            listed[c] += 1
            child = by_id.get(c)
            if child is None:
                problems.append(f"node {nid} lists missing child {c}")
            elif child["parent_id"] != nid:
                problems.append(f"node {c} is a child of {nid} but names {child['parent_id']} as parent")
        if r["is_leaf"] and r["children"]:
            problems.append(f"leaf {nid} has children")
        if not r["is_leaf"] and r["members"]:
            problems.append(f"inner node {nid} holds units")
    problems += [f"node {c} listed as a child {k} times" for c, k in listed.items() if k > 1]
    root_set = set(roots)
    for nid in by_id:
        if nid not in root_set and not listed[nid]:
            problems.append(f"node {nid} is not listed by any parent (orphan)")
    seen: set = set()
    stack = [r for r in roots if r in by_id]
    while stack:  # reachability and cycles
        nid = stack.pop()
        if nid in seen:
            problems.append(f"node {nid} reached twice (cycle or shared child)")
            continue
        seen.add(nid)
        stack.extend(c for c in by_id[nid]["children"] if c in by_id)
    if len(seen) < len(by_id):
        problems.append(f"{len(by_id) - len(seen)} nodes unreachable from the roots")
    where: Counter = Counter()
    for nid, r in by_id.items():
        for a in r["members"]:
            where[a] += 1
            if session_of is not None and a in session_of and nid != f"S:{session_of[a]}":
                problems.append(f"unit {a} sits in {nid}, not in its session's leaf")
    twice = [a for a, k in where.items() if k > 1]
    missing = [a for a in expected if a not in where]
    extra = [a for a in where if a not in expected]
    if twice:
        problems.append(f"{len(twice)} units in more than one leaf, e.g. {twice[:MAX_REPORTED]}")
    if missing:
        problems.append(f"{len(missing)} units in no leaf, e.g. {sorted(missing)[:MAX_REPORTED]}")
    if extra:
        problems.append(f"{len(extra)} leaf members are not active units of this view, e.g. {extra[:MAX_REPORTED]}")
    if not problems:  # counts add up (only meaningful on a sound structure)
        problems += _check_counts(by_id, roots)
    return problems


def _check_counts(by_id: dict, roots: list) -> list[str]:
    out: list[str] = []
    for root in roots:
        _count_iterative(by_id, root, out)
    return out


def _count_iterative(by_id: dict, root, out: list[str]) -> int:
    """Post-order count without recursion (deep trees)."""
    totals: dict = {}
    stack = [(root, False)]
    while stack:
        nid, done = stack.pop()
        r = by_id[nid]
        if not done:
            stack.append((nid, True))
            stack.extend((c, False) for c in r["children"])
            continue
        n = len(r["members"]) if r["is_leaf"] else sum(totals[c] for c in r["children"])
        totals[nid] = n
        if n != r["count"] and len(out) < MAX_REPORTED:
            out.append(f"node {nid} counts {r['count']} units, holds {n}")
    return totals[root]
