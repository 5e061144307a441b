"""Mentions of one fact: the turns that said it, kept on its one unit (see
`etamem.facts.restatements` and docs/concepts.md, 'Repeats').

An AMU's `source_turn_ids` lists its mentions, first said first: the turn it was drawn from,
then each later turn that restated it. `merge_restatements` (the write path) folds the new
units that restate a current stored unit, or an earlier unit of the same batch, into it;
`detach` (a delete by turn) takes a deleted turn off the units it only mentions, so they stay
while another mention remains.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Sequence

import numpy as np

from etamem.records import AMU

log = logging.getLogger(__name__)

NEAR = 16  # stored units read as candidates for each new unit


@dataclass
class Merged:
    """A batch after `merge_restatements`: the units kept with their vectors, the stored units
    whose mentions grew, and how many new units were repeats."""

    units: list[AMU]
    text_vecs: np.ndarray
    affect_vecs: np.ndarray
    mentions: list[AMU] = field(default_factory=list)
    repeats: int = 0


def mention_count(unit: AMU) -> int:
    """How many turns said the fact (its source turns)."""
    return len(unit.source_turn_ids)


def last_said(unit: AMU, turns: Sequence[Any]) -> datetime:
    """When the fact was last said: the latest time among its source `turns` (stored `Turn`s,
    e.g. `Hit.source_turns`), else the unit's own (first said)."""
    mine = set(unit.source_turn_ids)
    return max((t.timestamp for t in turns if t.turn_id in mine), default=unit.timestamp)


def _current(store, space: str, ids: list[str]) -> set[str]:
    """The `ids` no replacing link (`supersedes`, `contradicts`) targets: current units."""
    from etamem.facts.supersession import REPLACING

    replaced = {b for a, b, r, _ in store.unit_links(space, ids) if r in REPLACING and b in ids}
    return set(ids) - replaced


def merge_restatements(live, store, units: list[AMU], text_vecs: np.ndarray, affect_vecs: np.ndarray,
                       classifier) -> Merged:
    """Fold the new `units` (one batch, time order, with their (n, d_t) text and (n, d_a)
    affective vectors) that restate a current stored unit of the live space or an earlier unit of
    the batch (`classifier`: `etamem.facts.restatements.RestatementClassifier`) into that unit. The
    index is read under the space's read lock, the classifier (maybe an LLM) runs outside it."""
    from etamem.facts.restatements import find_restatements

    tv = np.asarray(text_vecs, np.float32)
    near: list[list[tuple[AMU, float]]] = []
    with live.rw.read():
        for unit, vec in zip(units, tv):
            found = [] if unit.text.rstrip().endswith("?") else live.index.flat_candidates(vec, NEAR)
            near.append([(live.index.amu_of[s.key], s.cos) for s in found if s.key in live.index.amu_of])
    ids = sorted({a.amu_id for row in near for a, _ in row})
    current = _current(store, live.name, ids) if ids else set()
    found = find_restatements(units, tv, near, classifier, current=current)
    if not found:
        return Merged(units, text_vecs, affect_vecs)
    batch = {u.amu_id: u for u in units}
    stored = {a.amu_id: a for row in near for a, _ in row}
    grown: dict[str, AMU] = {}
    for i, target in sorted(found.items()):
        base = grown.get(target) or batch.get(target) or stored[target]
        turns = tuple(dict.fromkeys([*base.source_turn_ids, *units[i].source_turn_ids]))
        grown[target] = replace(base, source_turn_ids=turns)
        log.debug("space %s: %s restates %s", live.name, units[i].amu_id, target)
    keep = [i for i in range(len(units)) if i not in found]
    kept = [grown.get(units[i].amu_id, units[i]) for i in keep]
    mentions = [a for uid, a in grown.items() if uid not in batch]
    return Merged(kept, np.asarray(text_vecs)[keep], np.asarray(affect_vecs)[keep], mentions, len(found))


def detach(store, space: str, units: Sequence[AMU], dropped: Sequence[str]) -> list[AMU]:
    """The stored units with a mention among the `dropped` turns and another one kept (not among
    `units`, those that go), each without the dropped turns (a delete by turn keeps them)."""
    gone, drop = {u.amu_id for u in units}, set(dropped)
    out = []
    for a in store.amus_of_turns(space, list(dropped)) if dropped else []:
        rest = tuple(t for t in a.source_turn_ids if t not in drop)
        if a.amu_id not in gone and rest:
            out.append(replace(a, source_turn_ids=rest))
    return out


__all__ = ["Merged", "NEAR", "detach", "last_said", "merge_restatements", "mention_count"]
