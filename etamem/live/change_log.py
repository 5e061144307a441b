"""Following another process's writes in O(change): what a live space reads from the store's change
log to catch up with a newer generation instead of opening the space again.

Every write transaction of a space raises its generation and logs, in the same transaction, the
ids it touched (`SqlStore.changes`): the units it added or removed, the turns it extracted,
rewrote or dropped, and the view nodes it wrote or deleted (a reindex logs a reset). A live space
that finds the store at a later generation of the same epoch reads the log rows after its own
(`read`), then the current rows of exactly those ids, all in one snapshot of the store: units and
turns that exist now are added (or rewritten), the others removed; node rows that exist now
replace the live ones, the others are removed. `LiveSpace.follow` applies that to the views and
the indexes under the space's write lock. A gap in the log (rows compacted after
`SqlStore.KEEP_CHANGES` generations, or a store upgraded from a format without the log), a
reset, or another epoch (the space was deleted) returns None: the caller opens the space again.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from etamem.records import AMU, Turn


@dataclass
class Catchup:
    """The rows another process's writes left, read at `stamp` (epoch, generation): units that
    exist now among those the writes touched (`amus`, in the store's order, with (n, d_t) text and
    (n, d_a) affective vectors), the other touched unit ids (`units_touched`), the extracted turns
    among those touched (`turns`, store order) with their vectors by id, the touched turn ids, the
    view states (`Store.view_states`) and per view the current rows of
    the touched nodes and the touched node ids that no longer exist."""

    stamp: tuple[str, int]
    generations: int
    amus: list[AMU]
    text_vecs: np.ndarray
    affect_vecs: np.ndarray
    units_touched: list[str]
    turns: list[Turn]
    turn_vecs: dict[str, np.ndarray]
    turns_touched: list[str]
    states: dict = field(default_factory=dict)
    rows: dict[str, list[dict]] = field(default_factory=dict)
    removed: dict[str, list[str]] = field(default_factory=dict)


def _union(lists) -> list[str]:
    """The ids of several lists, each once, in first-seen order."""
    return list(dict.fromkeys(i for ids in lists for i in ids))


def read(store, space: str, stamp: tuple[str, int]) -> Catchup | None:
    """What the writes after `stamp` (the live space's epoch, generation) changed, or None when
    the log cannot bring it to the store's stamp (nothing newer, another epoch, a gap, a reset)."""
    with store.snapshot():
        now = store.stamp(space)
        if now[0] != stamp[0] or now[1] <= stamp[1] or not stamp[0]:
            return None
        log = store.changes(space, stamp[1], now[1])
        if [g for g, _, _ in log] != list(range(stamp[1] + 1, now[1] + 1)) or any(
                e != now[0] or c.get("reset") for _, e, c in log):
            return None
        units = _union(c["units"] for _, _, c in log)
        turn_ids = _union(c["turns"] for _, _, c in log)
        nodes: dict[str, list[str]] = {}
        for _, _, c in log:
            for view, ids in c["nodes"].items():
                nodes.setdefault(view, []).extend(ids)
        amus = store.amus(space, amu_ids=units) if units else []
        if amus:
            text, affect = store.amu_vector_pair(space, [a.amu_id for a in amus])
        else:
            text = affect = np.zeros((0, 0), np.float32)
        turns = store.turns(space, extracted_only=True, turn_ids=turn_ids) if turn_ids else []
        vecs = store.turn_vectors(space, [t.turn_id for t in turns]) if turns else {}
        catchup = Catchup(now, len(log), amus, text, affect, units, turns, vecs, turn_ids)
        catchup.states = store.view_states(space)  # a write may change a view's state and no node
        for view, ids in nodes.items():
            ids = _union([ids])
            catchup.rows[view] = store.view_rows(space, view, ids)
            found = {r["node_id"] for r in catchup.rows[view]}
            catchup.removed[view] = [n for n in ids if n not in found]
    return catchup


__all__ = ["Catchup", "read"]
