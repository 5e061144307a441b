"""Validation and normalisation of user input to `Memory` (all-or-nothing).

Limits: a turn's text is at most `max_turn_chars` characters (Config, default 100,000), its
`extra` at most that much as JSON; speaker, session_id and turn_id at most 200 characters. Text
fields may not hold control characters other than tab, newline and carriage return, nor lone
surrogates (text that is not valid UTF-8). Space names: see `validate_space`.
"""
from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import replace
from typing import Any, Iterable, Mapping, Sequence

from .config import MAX_TURN_CHARS, shown
from .timeparse import parse_timestamp
from .types import Turn

_TURN_KEYS = {"session_id", "speaker", "text", "timestamp", "turn_id", "extra", "space"}
MAX_SPACE_CHARS = 128
MAX_ID_CHARS = 200  # speaker, session_id, turn_id
_BAD_TEXT_CHAR = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff]")  # C0 but \t\n\r; surrogates
_BAD_SPACE_CHAR = re.compile("[\x00-\x1f\x7f-\x9f/\\\\\ud800-\udfff]")  # C0, DEL, C1; '/', '\\'; surrogates


def validate_space(space: Any) -> str:
    """The space name, NFC-normalised and stripped, so spellings that normalise equal name the
    same space; 1..128 characters, no control characters, `/` or `\\`; else ValueError."""
    if not isinstance(space, str):
        raise ValueError(f"space: expected a non-empty string, got {shown(space)}")
    bad = _BAD_SPACE_CHAR.search(space)
    if bad:
        raise ValueError(f"space {space!r}: contains {_describe(bad.group())}; a space name may not hold "
                         "control characters, '/' or '\\'")
    name = unicodedata.normalize("NFC", space).strip()
    if not name:
        raise ValueError(f"space: expected a non-empty string, got {space!r}")
    if len(name) > MAX_SPACE_CHARS:
        raise ValueError(f"space {name[:20]!r}...: {len(name)} characters, more than {MAX_SPACE_CHARS}")
    return name


def _describe(ch: str) -> str:
    if "\ud800" <= ch <= "\udfff":
        return f"lone surrogate U+{ord(ch):04X}"
    if ch in "/\\":
        return repr(ch)
    return f"control character U+{ord(ch):04X}" + (" (NUL)" if ch == "\x00" else "")


def check_text(value: str, where: str, max_chars: int, *, limit_name: str | None = None) -> str:
    """`value` if it has at most `max_chars` characters and no control character other than
    tab, newline and carriage return, nor a lone surrogate; else ValueError naming `where`."""
    if len(value) > max_chars:
        limit = f"{limit_name}={max_chars}" if limit_name else str(max_chars)
        fix = "; split the text into several turns or raise max_turn_chars" if limit_name == "max_turn_chars" else ""
        raise ValueError(f"{where}: {len(value)} characters, more than {limit}{fix}")
    bad = _BAD_TEXT_CHAR.search(value)
    if bad:
        note = (" (not valid Unicode text: it cannot be encoded as UTF-8)" if "\ud800" <= bad.group() <= "\udfff"
                else "; only tab, newline and carriage return are allowed")
        raise ValueError(f"{where}: {_describe(bad.group())} at character {bad.start()}{note}")
    return value


def _required_str(value: Any, where: str, max_chars: int = MAX_ID_CHARS, limit_name: str | None = None) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        if value.bit_length() > 13_000:  # about 4,000 digits: Python refuses str() of such ints
            raise ValueError(f"{where}: expected a non-empty string, got an integer of over 3,900 digits")
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: expected a non-empty string, got {shown(value)}")
    return check_text(value, where, max_chars, limit_name=limit_name)


def _turn_space(value: Any, space: str, where: str) -> None:
    """A turn's own `space` must name the space it is added to (after normalisation)."""
    try:
        same = validate_space(value) == space
    except ValueError:
        same = False
    if not same:
        raise ValueError(f"{where}.space: turn belongs to space {shown(value)}, not {space!r}")


def turn_items(turns: Any) -> list:
    """`turns` (a Turn, a dict, or an iterable of them) as a list; ValueError for a bare string
    (a common slip: `add("I like tea")`) or anything not iterable."""
    if isinstance(turns, (Turn, Mapping)):
        return [turns]
    if isinstance(turns, (str, bytes)) or not hasattr(turns, "__iter__"):
        raise ValueError(f"turns: expected a dict with session_id, speaker, text and timestamp (or a Turn, or a "
                         f"list of them), got {shown(turns)}")
    return list(turns)


def normalise_turns(items: Iterable[Turn | Mapping[str, Any]], space: str, *, default_tz: str,
                    existing_ids: set[str] | None = None, next_seq: int = 0,
                    max_turn_chars: int = MAX_TURN_CHARS, labels: Sequence[str] | None = None) -> list[Turn]:
    """Check every item and return `Turn`s for `space`; raise ValueError naming the first bad
    field (e.g. `turns[3].timestamp`, or `<labels[3]>.timestamp` when the caller knows where
    item 3 comes from, e.g. `talk.jsonl:4: turn`) before anything is stored. Limits: see the
    module doc.

    Dicts need `session_id, speaker, text, timestamp`; `turn_id` and `extra` (a dict of
    JSON values, e.g. a photo caption under `blip_caption`) are optional. Missing turn ids
    become `t<seq>` in the order given.
    """
    space = validate_space(space)
    if isinstance(items, (Turn, Mapping)):
        items = [items]
    out: list[Turn] = []
    seen: set[str] = set()
    if labels is not None:
        items = list(items)
        if len(labels) != len(items):
            raise ValueError(f"labels: {len(labels)} labels for {len(items)} turns")
    for i, item in enumerate(items):
        where = f"turns[{i}]" if labels is None else labels[i]
        if isinstance(item, Turn):
            if item.space != "default":
                _turn_space(item.space, space, where)
            fields = {"session_id": item.session_id, "speaker": item.speaker, "text": item.text,
                      "timestamp": item.timestamp, "turn_id": item.turn_id, "extra": item.extra}
        elif isinstance(item, Mapping):
            unknown = set(item) - _TURN_KEYS
            if unknown:
                raise ValueError(f"{where}: unknown field(s) {sorted(unknown)}; allowed: {sorted(_TURN_KEYS)}")
            if item.get("space") is not None:
                _turn_space(item["space"], space, where)
            fields = dict(item)
        else:
            raise ValueError(f"{where}: expected a Turn or a dict, got {type(item).__name__}")
        for name in ("session_id", "speaker", "text", "timestamp"):
            if fields.get(name) is None:
                raise ValueError(f"{where}.{name}: missing")
        session_id = _required_str(fields["session_id"], f"{where}.session_id")
        speaker = _required_str(fields["speaker"], f"{where}.speaker").strip()
        text = _required_str(fields["text"], f"{where}.text", max_turn_chars, "max_turn_chars").strip()
        timestamp = parse_timestamp(fields["timestamp"], default_tz, field=f"{where}.timestamp")
        extra = fields.get("extra") or {}
        if not isinstance(extra, Mapping):
            raise ValueError(f"{where}.extra: expected a dict, got {type(extra).__name__}")
        try:
            size = len(json.dumps(dict(extra), sort_keys=True))  # as the store writes it
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}.extra: not JSON-serialisable ({exc})") from None
        if size > max_turn_chars:
            raise ValueError(f"{where}.extra: {size} characters as JSON, more than max_turn_chars={max_turn_chars}")
        turn_id = fields.get("turn_id")
        turn_id = f"t{next_seq + i}" if turn_id is None else _required_str(turn_id, f"{where}.turn_id")
        if turn_id in seen:
            raise ValueError(f"{where}.turn_id: {turn_id!r} appears twice in this call")
        if existing_ids and turn_id in existing_ids:
            raise ValueError(f"{where}.turn_id: {turn_id!r} is already stored in space {space!r}")
        seen.add(turn_id)
        out.append(Turn(turn_id=turn_id, session_id=session_id, speaker=speaker, text=text,
                        timestamp=timestamp, space=space, extra=dict(extra)))
    return out


def with_space(turn: Turn, space: str) -> Turn:
    return turn if turn.space == space else replace(turn, space=space)


MAX_TOP_K = 10_000  # a search returns at most this many hits


def validate_query(query: Any, max_chars: int) -> str:
    """A search query: a non-empty string of text (see `check_text`), at most `max_chars`."""
    if not isinstance(query, str) or not query.strip():
        raise ValueError(f"query: expected a non-empty string, got {shown(query)}")
    return check_text(query, "query", max_chars, limit_name="max_turn_chars")


def validate_top_k(top_k: Any) -> int:
    """An int (not a bool) in 1..MAX_TOP_K."""
    if isinstance(top_k, bool) or not isinstance(top_k, int):
        raise ValueError(f"top_k: expected an integer, got {shown(top_k)}")
    if not 1 <= top_k <= MAX_TOP_K:
        raise ValueError(f"top_k: expected 1..{MAX_TOP_K}, got {shown(top_k)}")
    return top_k


def same_turn(a: Turn, b: Turn) -> bool:
    """Same content: session, speaker, text, instant and extra (ids and spaces aside)."""
    return (a.session_id, a.speaker, a.text, a.timestamp, a.extra) == (b.session_id, b.speaker, b.text, b.timestamp,
                                                                        b.extra)


def check_same_content(clean: list[Turn], stored: Mapping[str, Turn], space: str,
                       labels: Sequence[str] | None = None) -> None:
    """ValueError naming the first turn of `clean` whose id is in `stored` (id -> stored turn)
    with other content (`labels[i]` or `turns[i]` as its place)."""
    for i, t in enumerate(clean):
        if t.turn_id in stored and not same_turn(t, stored[t.turn_id]):
            where = f"turns[{i}]" if labels is None else labels[i]
            raise ValueError(f"{where}.turn_id: {t.turn_id!r} is already stored in space {space!r} "
                             f"with other content ({describe_difference(stored[t.turn_id], t)})")


def describe_difference(stored: Turn, given: Turn) -> str:
    """`field: stored ... given ...` for each field that differs (for an error message)."""
    parts = []
    for name in ("session_id", "speaker", "text", "timestamp", "extra"):
        a, b = getattr(stored, name), getattr(given, name)
        if a != b:
            a, b = (x.isoformat() if name == "timestamp" else x for x in (a, b))
            parts.append(f"{name}: stored {shown(a, 60)}, given {shown(b, 60)}")
    return "; ".join(parts)
