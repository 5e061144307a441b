"""Validation and normalisation of user input to `Memory.add` (all-or-nothing)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Iterable, Mapping

from .timeparse import parse_timestamp
from .types import Turn

_TURN_KEYS = {"session_id", "speaker", "text", "timestamp", "turn_id", "extra", "space"}


def validate_space(space: Any) -> str:
    if not isinstance(space, str) or not space.strip():
        raise ValueError(f"space: expected a non-empty string, got {space!r}")
    return space


def _required_str(value: Any, where: str) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: expected a non-empty string, got {value!r}")
    return value


def normalise_turns(items: Iterable[Turn | Mapping[str, Any]], space: str, *, default_tz: str,
                    existing_ids: set[str] | None = None, next_seq: int = 0) -> list[Turn]:
    """Check every item and return `Turn`s for `space`; raise ValueError naming the first bad
    field (e.g. `turns[3].timestamp`) before anything is stored.

    Dicts need `session_id, speaker, text, timestamp`; `turn_id` and `extra` (a dict of
    JSON values, e.g. a photo caption under `blip_caption`) are optional. Missing turn ids
    become `t<seq>` in the order given.
    """
    space = validate_space(space)
    if isinstance(items, (Turn, Mapping)):
        items = [items]
    out: list[Turn] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        where = f"turns[{i}]"
        if isinstance(item, Turn):
            if item.space not in ("default", space):
                raise ValueError(f"{where}.space: turn belongs to space {item.space!r}, not {space!r}")
            fields = {"session_id": item.session_id, "speaker": item.speaker, "text": item.text,
                      "timestamp": item.timestamp, "turn_id": item.turn_id, "extra": item.extra}
        elif isinstance(item, Mapping):
            unknown = set(item) - _TURN_KEYS
            if unknown:
                raise ValueError(f"{where}: unknown field(s) {sorted(unknown)}; allowed: {sorted(_TURN_KEYS)}")
            if item.get("space") not in (None, space):
                raise ValueError(f"{where}.space: turn belongs to space {item['space']!r}, not {space!r}")
            fields = dict(item)
        else:
            raise ValueError(f"{where}: expected a Turn or a dict, got {type(item).__name__}")
        for name in ("session_id", "speaker", "text", "timestamp"):
            if fields.get(name) is None:
                raise ValueError(f"{where}.{name}: missing")
        session_id = _required_str(fields["session_id"], f"{where}.session_id")
        speaker = _required_str(fields["speaker"], f"{where}.speaker").strip()
        text = _required_str(fields["text"], f"{where}.text").strip()
        try:
            timestamp = parse_timestamp(fields["timestamp"], default_tz)
        except ValueError as exc:
            raise ValueError(f"{where}.timestamp: {exc}") from None
        extra = fields.get("extra") or {}
        if not isinstance(extra, Mapping):
            raise ValueError(f"{where}.extra: expected a dict, got {type(extra).__name__}")
        turn_id = fields.get("turn_id")
        turn_id = f"t{next_seq + i}" if turn_id is None else _required_str(turn_id, f"{where}.turn_id")
        if turn_id in seen or (existing_ids and turn_id in existing_ids):
            raise ValueError(f"{where}.turn_id: {turn_id!r} is already stored in space {space!r}")
        seen.add(turn_id)
        out.append(Turn(turn_id=turn_id, session_id=session_id, speaker=speaker, text=text,
                        timestamp=timestamp, space=space, extra=dict(extra)))
    return out


def with_space(turn: Turn, space: str) -> Turn:
    return turn if turn.space == space else replace(turn, space=space)
