"""Metadata on turns and filters on retrieval (see docs/python-api.md, 'Metadata and filters').

Metadata: a flat JSON object per turn or chat message (`metadata={"channel": "email"}`), str keys
and str / int / float / bool / None values, validated by `validate_metadata` and stored in the
turn's `extra` under `"metadata"` (no store change). A unit's metadata is its source turns'
merged in `source_turn_ids` order (a later turn's value wins), `unit_metadata`.

Filters (`Filters`, or the same keys as a dict): `speaker` (one name or several; `role` is the
same key for chat messages), `session_id` (one or several), `since` / `until` (on the unit's
time: since <= time < until; ISO 8601 or a datetime) and `metadata` (every key given must be
present with an equal value). `resolve_filters` checks them (ValueError naming the field) and
returns a `UnitFilter`, or None for an empty filter (the same as no filter). Retrieval applies
the filter inside the search (`etamem.retrieval.space_search.search_space`, `etamem.fta.search`):
only matching units are candidates, so `top_k` hits come back whenever that many units match.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from etamem.config import shown
from etamem.ingest.timeparse import parse_timestamp
from etamem.records import AMU, Turn

METADATA_KEY = "metadata"  # the key of a turn's `extra` that holds its metadata
MAX_METADATA_KEYS = 64
MAX_METADATA_KEY_CHARS = 128
MAX_METADATA_CHARS = 16_384  # the whole object as JSON
MAX_FILTER_VALUES = 1_000  # speakers or sessions in one filter
MAX_NAME_CHARS = 200  # a speaker or session id (as `etamem.ingest.inputs` limits them)
Scalar = str | int | float | bool | None
FILTER_KEYS = ("speaker", "role", "session_id", "since", "until", "metadata")


def validate_metadata(value: Any, where: str) -> dict[str, Scalar]:
    """`value` checked as a metadata dict.

    A JSON object of at most MAX_METADATA_KEYS non-empty str keys (each at most
    MAX_METADATA_KEY_CHARS characters) with str, int (64-bit), float (finite), bool or None
    values, at most MAX_METADATA_CHARS characters as JSON.

    Args:
        value: The metadata given.
        where: The field named in errors (e.g. `turns[2].metadata`).

    Returns:
        The metadata as a new dict.

    Raises:
        ValueError: Naming `where` (and the key) and what is wrong.
    """
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}: expected a JSON object of str keys to str/int/float/bool/null values, "
                         f"got {shown(value)}")
    if len(value) > MAX_METADATA_KEYS:
        raise ValueError(f"{where}: {len(value)} keys, more than {MAX_METADATA_KEYS}")
    out: dict[str, Scalar] = {}
    for key, v in value.items():
        if not isinstance(key, str) or not key.strip():
            raise ValueError(f"{where}: keys must be non-empty strings, got {shown(key)}")
        if len(key) > MAX_METADATA_KEY_CHARS:
            raise ValueError(f"{where}: key {key[:20]!r}... has {len(key)} characters, more than "
                             f"{MAX_METADATA_KEY_CHARS}")
        if not (v is None or isinstance(v, (str, bool, int, float))):
            raise ValueError(f"{where}.{key}: expected a str, int, float, bool or null value, got {shown(v)} "
                             "(metadata is flat: no lists or objects)")
        if isinstance(v, float) and not math.isfinite(v):
            raise ValueError(f"{where}.{key}: {v} is not a JSON number")
        if isinstance(v, int) and not isinstance(v, bool) and not -(2 ** 63) <= v < 2 ** 63:
            raise ValueError(f"{where}.{key}: an integer outside the 64-bit range")
        out[key] = v
    try:
        size = len(json.dumps(out, sort_keys=True, allow_nan=False))
    except (TypeError, ValueError) as exc:  # e.g. a lone surrogate cannot be written
        raise ValueError(f"{where}: not JSON-serialisable ({exc})") from None
    if size > MAX_METADATA_CHARS:
        raise ValueError(f"{where}: {size} characters as JSON, more than {MAX_METADATA_CHARS}")
    return out


def turn_metadata(turn: Turn) -> dict[str, Scalar]:
    """The metadata stored with a turn.

    Args:
        turn: A stored turn.

    Returns:
        Its metadata ({} when none).
    """
    return turn.metadata


def unit_metadata(source_turn_ids: Iterable[str], turn: Callable[[str], Turn | None]) -> dict[str, Scalar]:
    """A unit's metadata: its source turns' merged in order (a later turn's value wins).

    Args:
        source_turn_ids: The unit's source turn ids, in order.
        turn: `turn(id)` -> the stored turn, or None (left out).

    Returns:
        The merged metadata.
    """
    out: dict[str, Scalar] = {}
    for tid in source_turn_ids:
        t = turn(tid)
        if t is not None:
            out.update(turn_metadata(t))
    return out


@dataclass(frozen=True)
class Filters:
    """What retrieval may return (the `filters` argument of `Memory.search` and the other reads).

    Unset fields do not filter; a `Filters()` with nothing set is no filter. Every field set must
    match. Checked by `resolve_filters`; the dict form takes the same keys (`from_dict`).

    Attributes:
        speaker: Units of this speaker or these speakers (a name or a list; case does not matter;
            the role of a chat message, which is why the dict form also takes `role`).
        session_id: Units of this session or these sessions (an id or a list).
        since: Units said at or after this time (ISO 8601 or a datetime; a naive time is in
            `Config.default_timezone`).
        until: Units said before this time (exclusive; after `since`).
        metadata: Units whose metadata holds every key given with an equal value (`true` is not
            `1`); flat, as turn metadata.
    """

    speaker: str | Sequence[str] | None = None
    session_id: str | Sequence[str] | None = None
    since: datetime | str | None = None
    until: datetime | str | None = None
    metadata: Mapping[str, Scalar] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, value: Mapping[str, Any], where: str = "filters") -> "Filters":
        """The dict form: the field names, with `role` for `speaker`.

        Args:
            value: The dict (keys among speaker, role, session_id, since, until, metadata).
            where: The field named in errors (default "filters").

        Returns:
            The `Filters` (not yet checked: `resolve_filters` checks the values).

        Raises:
            ValueError: An unknown key, or both `speaker` and `role`.
        """
        unknown = sorted(map(str, set(value) - set(FILTER_KEYS)))
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {unknown}; allowed: {sorted(FILTER_KEYS)}")
        if value.get("role") is not None and value.get("speaker") is not None:
            raise ValueError(f"{where}.role: give speaker or role, not both (they are the same filter)")
        speaker = value.get("speaker") if value.get("speaker") is not None else value.get("role")
        return cls(speaker=speaker, session_id=value.get("session_id"), since=value.get("since"),
                   until=value.get("until"), metadata=value.get("metadata") or {})


def _names(value: Any, where: str) -> frozenset[str]:
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, (list, tuple, set, frozenset)) or not items:
        raise ValueError(f"{where}: expected a non-empty string or a non-empty list of strings, got {shown(value)}")
    if len(items) > MAX_FILTER_VALUES:
        raise ValueError(f"{where}: {len(items)} values, more than {MAX_FILTER_VALUES}")
    for v in items:
        if not isinstance(v, str) or not v.strip():
            raise ValueError(f"{where}: expected non-empty strings, got {shown(v)}")
        if len(v) > MAX_NAME_CHARS:
            raise ValueError(f"{where}: a value of {len(v)} characters, more than {MAX_NAME_CHARS}")
    return frozenset(v.strip() for v in items)


def resolve_filters(value: Filters | Mapping[str, Any] | None, default_tz: str = "UTC") -> "UnitFilter | None":
    """The checked filter of `value`, or None when it sets nothing (the same as no filter).

    Args:
        value: A `Filters`, its dict form, or None.
        default_tz: The time zone of naive `since` / `until` times (default "UTC").

    Returns:
        A `UnitFilter`, or None.

    Raises:
        ValueError: Naming the field (`filters.since`, `filters.speaker`, ...): an unknown key, a
            value of the wrong kind, a bad time, `until` not after `since`, or metadata that is not
            flat.
    """
    if value is None:
        return None
    if isinstance(value, Mapping):
        value = Filters.from_dict(value)
    elif not isinstance(value, Filters):
        raise ValueError(f"filters: expected a Filters or a dict, got {shown(value)}")
    speakers = None if value.speaker is None else _names(value.speaker, "filters.speaker")
    sessions = None if value.session_id is None else _names(value.session_id, "filters.session_id")
    since = None if value.since is None else parse_timestamp(value.since, default_tz, field="filters.since")
    until = None if value.until is None else parse_timestamp(value.until, default_tz, field="filters.until")
    if since is not None and until is not None and not since < until:
        raise ValueError(f"filters.until: {until.isoformat()} is not after filters.since {since.isoformat()}")
    metadata = validate_metadata(value.metadata if value.metadata is not None else {}, "filters.metadata")
    if speakers is None and sessions is None and since is None and until is None and not metadata:
        return None
    return UnitFilter(None if speakers is None else frozenset(s.casefold() for s in speakers), sessions,
                      since, until, metadata)


def _same(a: Scalar, b: Scalar) -> bool:
    """Equal JSON values: a bool equals only a bool (in Python True == 1)."""
    return isinstance(a, bool) == isinstance(b, bool) and a == b


@dataclass(frozen=True)
class UnitFilter:
    """A checked filter (`resolve_filters`), as retrieval applies it.

    Attributes:
        speakers: Speakers allowed, case-folded (None: any).
        sessions: Sessions allowed (None: any).
        since: Earliest time allowed (inclusive; None: no bound).
        until: Time bound (exclusive; None: no bound).
        metadata: Key-value pairs every unit must carry.
    """

    speakers: frozenset[str] | None
    sessions: frozenset[str] | None
    since: datetime | None
    until: datetime | None
    metadata: Mapping[str, Scalar]

    def matches(self, speaker: str, session_id: str, when: datetime, metadata: Callable[[], Mapping]) -> bool:
        """Whether an item with these fields passes.

        Args:
            speaker: Its speaker.
            session_id: Its session.
            when: Its time.
            metadata: Returns its metadata; called only when the filter has metadata.

        Returns:
            True when it passes.
        """
        if self.speakers is not None and speaker.casefold() not in self.speakers:
            return False
        if self.sessions is not None and session_id not in self.sessions:
            return False
        if self.since is not None and when < self.since:
            return False
        if self.until is not None and when >= self.until:
            return False
        if self.metadata:
            have = metadata()
            return all(k in have and _same(have[k], v) for k, v in self.metadata.items())
        return True

    def unit(self, amu: AMU, turn: Callable[[str], Turn | None]) -> bool:
        """Whether the unit passes (its metadata: `unit_metadata` of its source turns).

        Args:
            amu: The unit.
            turn: `turn(id)` -> the stored turn, or None.

        Returns:
            True when it passes.
        """
        return self.matches(amu.speaker, amu.session_id, amu.timestamp,
                            lambda: unit_metadata(amu.source_turn_ids, turn))

    def turn(self, t: Turn) -> bool:
        """Whether a raw turn passes (a raw-turn hit of the fallback).

        Args:
            t: The turn.

        Returns:
            True when it passes.
        """
        return self.matches(t.speaker, t.session_id, t.timestamp, lambda: turn_metadata(t))

    def slot_mask(self, ids: Sequence[str | None], unit_of: Mapping[str, AMU],
                  turn: Callable[[str], Turn | None]) -> np.ndarray:
        """Which index slots hold a passing unit.

        Args:
            ids: Unit ids per slot (None: a free slot).
            unit_of: Unit id -> unit.
            turn: `turn(id)` -> the stored turn, or None.

        Returns:
            (len(ids),) bool array.
        """
        return np.fromiter((a is not None and a in unit_of and self.unit(unit_of[a], turn) for a in ids), bool,
                           len(ids))

    def turn_mask(self, turns: Sequence[Turn | None]) -> np.ndarray:
        """Which turn slots hold a passing turn.

        Args:
            turns: Turns per slot (None: removed).

        Returns:
            (len(turns),) bool array.
        """
        return np.fromiter((t is not None and self.turn(t) for t in turns), bool, len(turns))
