"""The old argument order of `Memory.delete` / `Memory.update`: `delete(space, amu_id)`,
`update(space, turn_id, text)`. Every method now takes what it acts on first and `space` after it
(`add(turns, space)`, `search(query, space)`, `get(amu_id, space)`, `history(unit_id, space)`,
`delete(amu_id, space)`, `update(turn_id, text, space)`); a call in the old positional order is
still read as it was meant, with a DeprecationWarning.

A call is read in the old order only when the new reading names nothing stored and the old one
does, or names a stored space where the new one does not (the store says which; the errors then
name what was meant): `delete("alice")` deletes the space "alice" when the default space
holds no unit "alice"; `delete("alice", "t1#0")` the unit "t1#0" of space "alice" when space
"t1#0" holds no unit "alice"; `delete("alice", turn_id=...)` (a unit and a turn: never valid in
the new order) the turn of space "alice".
"""
from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from etamem.engine import Engine

DEFAULT_SPACE = "default"
_STACK = 4  # the caller of Memory.delete / update (here <- resolve_* <- Memory method <- caller)


def _stored(mem: Engine, space: str) -> str | None:
    """The stored name of `space`, or None when it is not a valid name or not stored."""
    try:
        name = mem.space_name(space)
    except (ValueError, TypeError, PermissionError):  # a bad name, or one the tenancy scope forbids
        return None
    return name if mem.store.has_space(name) else None


def _has_unit(mem: Engine, space: str, amu_id: object) -> bool:
    name = _stored(mem, space)
    return name is not None and isinstance(amu_id, str) and bool(
        mem.store.amus(name, status=None, amu_ids=[amu_id]))


def _has_turn(mem: Engine, space: str, turn_id: object) -> bool:
    name = _stored(mem, space)
    return name is not None and isinstance(turn_id, str) and bool(mem.store.turns(name, turn_ids=[turn_id]))


def _warn(old: str, new: str) -> None:
    warnings.warn(f"{old}: the old argument order (space first) is deprecated; write {new}",
                  DeprecationWarning, stacklevel=_STACK)


def resolve_delete(mem: Engine, amu_id: str | None, space: str,
                   turn_id: str | None) -> tuple[str | None, str]:
    """(amu_id, space) of `Memory.delete(amu_id, space, turn_id=...)`, read in the old order
    (`delete(space, amu_id)`) when only that names something stored."""
    if amu_id is None or not isinstance(amu_id, str) or not isinstance(space, str):
        return amu_id, space
    if turn_id is not None:  # delete("alice", turn_id=...): a unit and a turn is no new-order call
        if space == DEFAULT_SPACE and _stored(mem, amu_id) is not None:
            _warn(f"delete({amu_id!r}, turn_id=...)", f"delete(turn_id=..., space={amu_id!r})")
            return None, amu_id
        return amu_id, space
    if _has_unit(mem, space, amu_id):
        return amu_id, space
    old_unit = None if space == DEFAULT_SPACE else space
    if _stored(mem, amu_id) is not None and (old_unit is None or _has_unit(mem, amu_id, old_unit)):
        if old_unit is None:
            _warn(f"delete({amu_id!r})", f"delete(space={amu_id!r}) to delete the whole space")
        else:
            _warn(f"delete({amu_id!r}, {old_unit!r})", f"delete({old_unit!r}, space={amu_id!r})")
        return old_unit, amu_id
    return amu_id, space


def resolve_update(mem: Engine, turn_id: str, text: str, space: str) -> tuple[str, str, str]:
    """(turn_id, text, space) of `Memory.update(turn_id, text, space)`, read in the old order
    (`update(space, turn_id, text)`) when only that names a stored turn."""
    if _has_turn(mem, space, turn_id):
        return turn_id, text, space
    if _has_turn(mem, turn_id, text) or (_stored(mem, space) is None and _stored(mem, turn_id) is not None):
        _warn(f"update({turn_id!r}, {text!r}, ...)", f"update({text!r}, <text>, space={turn_id!r})")
        return text, space, turn_id
    return turn_id, text, space
