"""`Memory.update`: a turn's text replaced by a new version, the old one kept as history (or
forgotten), see docs/design.md, 'Facts that change'.

The new text is stored as a new turn (the old turn's session and speaker, the time given or
now, the old `extra` without its photo caption plus `revises`: the old turn's id), extracted,
and each of its units gets a `supersedes` link to every unit of the old turn, written in the
same store transaction as the units: the old units turn "superseded" and `Memory.history`
lists old -> new. The old turn and units stay (history) unless `forget_old`, which deletes the
old turn and the earlier versions it revised as `Memory.delete(turn_id=..., space=...)` does (a
correction of something sensitive: no version of the old text stays).

The new turn's id is `<root>~<hash>` (root: the first version's id; hash of the replaced id and
the new text), and the space meta `revised_by:<old id>` names it, so an id of any version
resolves to the current one and a retry (the same text again) changes nothing.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from etamem import writing
from etamem.facts.supersession import SUPERSEDES
from etamem.forget import CAPTION_KEY
from etamem.ingest.inputs import check_id
from etamem.ingest.timeparse import parse_timestamp
from etamem.records import AMU, REVISES_KEY, Turn, UnknownIdError
from etamem.store.schema import UnitExtras
from etamem.threads import blas_threads

if TYPE_CHECKING:
    from etamem.live.space import LiveSpace
    from etamem.memory import Memory

REVISED_BY = "revised_by:"  # space meta key prefix: old turn id -> the id of the turn that replaced it


@dataclass(frozen=True)
class Update:
    """What `Memory.update` did: the current turn's id, its units' ids, the ids of the units they
    supersede, and whether anything changed (False: the text was already the current one)."""

    turn_id: str
    unit_ids: tuple[str, ...]
    superseded_ids: tuple[str, ...]
    changed: bool = True


def current_turn_id(store, space: str, turn_id: str) -> str:
    """The id of the current version of `turn_id` (itself when it was never updated)."""
    seen = {turn_id}
    while (nxt := store.get_space_meta(space, REVISED_BY + turn_id)) is not None and nxt not in seen:
        seen.add(nxt)
        turn_id = nxt
    return turn_id


def update(mem: Memory, space: str, turn_id: str, text: str, *, forget_old: bool = False,
           timestamp: datetime | str | None = None) -> Update:
    """`Memory.update`."""
    space = mem.known_space(space)
    if not isinstance(turn_id, str) or not turn_id:
        raise ValueError(f"turn_id: expected a non-empty string, got {turn_id!r}")
    check_id(turn_id, "turn_id")
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"text: expected a non-empty string, got {text!r}")
    if mem.method.units.kind != "amu":
        raise ValueError(f"update: space {space!r} builds {mem.method.units.kind} units; update supports AMU spaces")
    when = (datetime.now(timezone.utc) if timestamp is None
            else parse_timestamp(timestamp, mem.config.default_timezone, field="timestamp"))
    with mem.writing_to(space) as live:
        current_id = current_turn_id(mem.store, space, turn_id)
        found = mem.store.turns(space, turn_ids=[current_id])
        if not found:
            where = "" if current_id == turn_id else f" (the current version of {turn_id!r})"
            raise UnknownIdError(f"no turn {current_id!r}{where} in space {space!r}")
        old = found[0]
        new = _new_turn(mem, space, old, text, when)
        if new.text == old.text:  # a retry, or nothing to change
            units = [u.amu_id for u in mem.store.amus_of_turns(space, [old.turn_id])]
            return Update(old.turn_id, tuple(units), _superseded(mem.store, space, units), changed=False)
        old_units = mem.store.amus_of_turns(space, [old.turn_id])
        if mem.store.turns(space, turn_ids=[new.turn_id]):  # a retry after a failure between the writes
            units = mem.store.amus_of_turns(space, [new.turn_id])
        else:
            writing.process_pending(mem, space, live)  # turns waiting before this one keep their order
            units = _extract_and_store(mem, live, new, old, old_units)
    if forget_old:
        for version in versions(mem.store, space, old):
            mem.delete(turn_id=version, space=space)
    ids = [u.amu_id for u in units]
    superseded = () if forget_old else tuple(u.amu_id for u in old_units)
    return Update(new.turn_id, tuple(ids), superseded)


def _new_turn(mem: Memory, space: str, old: Turn, text: str, when: datetime) -> Turn:
    """The validated new version of `old` (ValueError naming the field when `text` is bad)."""
    root = old.turn_id.rsplit("~", 1)[0] if REVISES_KEY in old.extra else old.turn_id
    digest = hashlib.blake2b(f"{old.turn_id}\n{text}".encode(), digest_size=6).hexdigest()
    extra = {k: v for k, v in old.extra.items() if k != CAPTION_KEY}
    extra[REVISES_KEY] = old.turn_id
    item = {"turn_id": f"{root}~{digest}", "session_id": old.session_id, "speaker": old.speaker, "text": text,
            "timestamp": when, "extra": extra}
    batch = writing.read(mem, [item], space, now=when, labels=["update"])
    new = batch.turns[0]
    if new.text == old.text:
        return replace(new, turn_id=old.turn_id)
    return new


def _extract_and_store(mem: Memory, live: LiveSpace, new: Turn, old: Turn, old_units: list[AMU]) -> list[AMU]:
    """Units of `new` built first (nothing is written if the models fail), then the turn and its
    units with their `supersedes` links to `old_units` and the `revised_by` record."""
    turns, units, text_vecs, affect_vecs, turn_vecs, extras = mem.method.units.build(mem, live, [new], True)
    extras = extras or UnitExtras()
    have = {(a, b, r) for a, b, r, _ in extras.links}
    extras.links += [(u.amu_id, o.amu_id, SUPERSEDES, 1.0) for u in units for o in old_units
                     if (u.amu_id, o.amu_id, SUPERSEDES) not in have]
    extras.meta[REVISED_BY + old.turn_id] = new.turn_id
    mem.store.insert_turns([new], first_seq=mem.store.next_turn_seq(live.name))
    with mem.timed("views"), blas_threads(mem.config.blas_threads):
        live.add_units(mem.store, [new], turn_vecs, units, text_vecs, affect_vecs, extras)
    mem.count_extraction(turns=1, amus=len(units))
    return units


def versions(store, space: str, turn: Turn) -> list[str]:
    """Ids of `turn` and the earlier versions it revises that are still stored, newest first."""
    out = [turn.turn_id]
    while (prev := turn.extra.get(REVISES_KEY)) and prev not in out:
        found = store.turns(space, turn_ids=[str(prev)])
        if not found:
            break
        turn = found[0]
        out.append(turn.turn_id)
    return out


def _superseded(store, space: str, unit_ids: list[str]) -> tuple[str, ...]:
    """Ids of the units that `unit_ids` supersede (their `supersedes` links' targets)."""
    mine = set(unit_ids)
    return tuple(dict.fromkeys(b for a, b, r, _ in store.unit_links(space, unit_ids) if r == SUPERSEDES and a in mine))
