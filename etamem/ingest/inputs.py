"""Validation and normalisation of user input to `Memory` (all-or-nothing).

Limits: a turn's text is at most `max_turn_chars` characters (Config, default 100,000), its
`extra` at most that much as JSON, its `metadata` flat and small (`etamem.filters.validate_metadata`;
stored in `extra["metadata"]`); speaker, session_id and turn_id at most 200 characters.
Control characters other than tab, newline and carriage return inside a turn's text or a query
are replaced (`clean_text`: terminal escape sequences removed, others become U+FFFD), since
real chat logs carry them; in speakers and ids they are refused. No field may hold a lone
surrogate (text that is not valid UTF-8). Space names: see `validate_space`.
"""
from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterable, Mapping, Sequence

from etamem.config import MAX_TURN_CHARS, shown
from etamem.filters import METADATA_KEY, validate_metadata
from etamem.ingest.messages import is_message, message_fields
from etamem.ingest.timeparse import parse_timestamp
from etamem.records import Turn

_TURN_KEYS = {"session_id", "speaker", "text", "timestamp", "turn_id", "extra", "space", "metadata"}
MAX_SPACE_CHARS = 128
MAX_ID_CHARS = 200  # speaker, session_id, turn_id
_BAD_TEXT_CHAR = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff]")  # C0 but \t\n\r; surrogates
_SURROGATE = re.compile("[\ud800-\udfff]")
# terminal escape sequences (CSI "ESC [ ... m", OSC "ESC ] ... BEL", two-character ESC forms), then any
# other C0 control character but tab, newline and carriage return
_CONTROL_RUN = re.compile("\x1b\\[[0-?]*[ -/]*[@-~]|\x1b\\][^\x07\x1b]*(?:\x07|\x1b\\\\)?|\x1b[@-Z\\\\-_]"
                          "|[\x00-\x08\x0b\x0c\x0e-\x1f]")
_CONTROL_CHAR = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f]")
REPLACEMENT = "\ufffd"
_OLD_BAD_SPACE_CHAR = re.compile("[\x00-\x1f\x7f-\x9f/\\\\\ud800-\udfff]")  # the rule before NFKC (see `space_as_stored`)
# refused in a space name (after NFKC): control (Cc), format (Cf: zero-width characters, the bidi
# embeddings, overrides and isolates U+202A-202E, U+2066-2069, soft hyphen, BOM), surrogates (Cs),
# line and paragraph separators (Zl, Zp)
_REFUSED_SPACE_CATEGORIES = {"Cc": "control", "Cf": "format", "Cs": "surrogate", "Zl": "line separator",
                             "Zp": "paragraph separator"}
DOT_SEGMENTS = frozenset({".", ".."})
_DOTS_NOTE = ("URL clients remove '.' and '..' path segments (RFC 3986), so a request naming it would "
              "reach another route")


def validate_space(space: Any) -> str:
    """The space name, NFKC-normalised and stripped, so spellings that normalise equal (fullwidth
    `ａｎａ`, `ana`) name the same space; 1..128 characters; no control, format (zero-width,
    bidi override) or line-separator character, no `/` or `\\`, not `.` or `..`; else ValueError.
    Look-alikes from other scripts (Cyrillic `а`) stay distinct names."""
    if not isinstance(space, str):
        raise ValueError(f"space: expected a non-empty string, got {shown(space)}")
    if len(space) > 32 * MAX_SPACE_CHARS:  # no need to read it all: no padding makes it short enough
        raise ValueError(f"space {space[:20]!r}...: {len(space)} characters, more than {MAX_SPACE_CHARS}")
    name = unicodedata.normalize("NFKC", space)
    for ch in name:
        kind = "/" if ch in "/\\" else _REFUSED_SPACE_CATEGORIES.get(unicodedata.category(ch))
        if kind:
            raise ValueError(f"space {space!r}: contains {_describe(ch)}; a space name may not hold control, "
                             "format (zero-width, bidi) or line-separator characters, '/' or '\\'")
    name = name.strip()
    if not name:
        raise ValueError(f"space: expected a non-empty string, got {space!r}")
    if name in DOT_SEGMENTS:
        raise ValueError(f"space {space!r}: '.' and '..' are not space names ({_DOTS_NOTE})")
    if len(name) > MAX_SPACE_CHARS:
        raise ValueError(f"space {name[:20]!r}...: {len(name)} characters, more than {MAX_SPACE_CHARS}")
    return name


def stored_spelling(space: Any) -> str:
    """`space` under the rule of earlier versions (NFC, stripped; no C0/C1 control character,
    `/`, `\\` or surrogate), the spelling a store or key made then holds; else ValueError."""
    if not isinstance(space, str) or _OLD_BAD_SPACE_CHAR.search(space):
        raise ValueError(f"space: not a space name: {shown(space)}")
    name = unicodedata.normalize("NFC", space).strip()
    if not name or len(name) > MAX_SPACE_CHARS:
        raise ValueError(f"space: not a space name: {shown(space)}")
    return name


def space_as_stored(space: Any, is_stored: Callable[[str], bool]) -> str:
    """The space `space` names in a store: `validate_space(space)`, except that a name an earlier
    version stored under its own rule (`stored_spelling`: NFC only, so `ａｎａ`, `ana` + U+200B
    or `..` could be stored), one today's rule cannot give, is reached by that exact spelling
    while it is stored. ValueError as `validate_space`."""
    try:
        name, error = validate_space(space), None
    except ValueError as exc:
        name, error = None, exc
    if isinstance(space, str) and (name is None or name != space.strip()):
        try:
            old = stored_spelling(space)
        except ValueError:
            old = None
        if old is not None and old != name and not _valid_as_is(old) and is_stored(old):
            return old
    if error is not None:
        raise error
    return name


def _valid_as_is(name: str) -> bool:
    """Whether the rule of today gives `name` itself (then it needs no other way in)."""
    try:
        return validate_space(name) == name
    except ValueError:
        return False


def check_id(value: Any, where: str) -> Any:
    """`value` (a turn or unit id) unless it is `.` or `..`: ValueError naming `where`."""
    if isinstance(value, str) and value in DOT_SEGMENTS:
        raise ValueError(f"{where}: {value!r} is not an id ({_DOTS_NOTE}); '.' and '..' are refused as ids")
    return value


def _describe(ch: str) -> str:
    if "\ud800" <= ch <= "\udfff":
        return f"lone surrogate U+{ord(ch):04X}"
    if ch in "/\\":
        return repr(ch)
    kind = _REFUSED_SPACE_CATEGORIES.get(unicodedata.category(ch), "control")
    name = unicodedata.name(ch, "")
    return f"{kind} character U+{ord(ch):04X}" + (" (NUL)" if ch == "\x00" else f" ({name})" if name else "")


def clean_text(text: str) -> tuple[str, int]:
    """(`text` with its control characters replaced, how many there were): terminal escape
    sequences are removed whole, every other control character but tab, newline and carriage
    return becomes U+FFFD. NUL included (PostgreSQL cannot store it)."""
    count = len(_CONTROL_CHAR.findall(text))
    if not count:
        return text, 0
    return _CONTROL_RUN.sub(lambda m: "" if m.group().startswith("\x1b") and len(m.group()) > 1 else REPLACEMENT,
                            text), count


def check_text(value: str, where: str, max_chars: int, *, limit_name: str | None = None,
               controls: bool = True) -> str:
    """`value` if it has at most `max_chars` characters, no lone surrogate and (`controls`) no
    control character other than tab, newline and carriage return; else ValueError naming
    `where`."""
    if len(value) > max_chars:
        limit = f"{limit_name}={max_chars}" if limit_name else str(max_chars)
        fix = "; split the text into several turns or raise max_turn_chars" if limit_name == "max_turn_chars" else ""
        raise ValueError(f"{where}: {len(value)} characters, more than {limit}{fix}")
    bad = (_BAD_TEXT_CHAR if controls else _SURROGATE).search(value)
    if bad:
        note = (" (not valid Unicode text: it cannot be encoded as UTF-8)" if "\ud800" <= bad.group() <= "\udfff"
                else "; only tab, newline and carriage return are allowed")
        raise ValueError(f"{where}: {_describe(bad.group())} at character {bad.start()}{note}")
    return value


def _required_str(value: Any, where: str, max_chars: int = MAX_ID_CHARS, limit_name: str | None = None,
                  controls: bool = True) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        if value.bit_length() > 13_000:  # about 4,000 digits: Python refuses str() of such ints
            raise ValueError(f"{where}: expected a non-empty string, got an integer of over 3,900 digits")
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: expected a non-empty string, got {shown(value)}")
    return check_text(value, where, max_chars, limit_name=limit_name, controls=controls)


def _turn_space(value: Any, space: str, where: str, is_stored: Callable[[str], bool]) -> None:
    """A turn's own `space` must name the space it is added to (after normalisation)."""
    try:
        same = space_as_stored(value, is_stored) == space
    except ValueError:
        same = False
    if not same:
        raise ValueError(f"{where}.space: turn belongs to space {shown(value)}, not {space!r}")


def turn_items(turns: Any) -> list:
    """`turns` (a Turn, a dict, or an iterable of them) as a list; a plain string is one user
    message (`add("I'm vegan.")`: speaker "user", the other fields their defaults); ValueError for
    bytes or anything not iterable."""
    if isinstance(turns, str):
        return [{"speaker": "user", "text": turns}]
    if isinstance(turns, (Turn, Mapping)):
        return [turns]
    if isinstance(turns, bytes) or not hasattr(turns, "__iter__"):
        raise ValueError(f"turns: expected a string (one user message), a dict with speaker and text (or a Turn, "
                         f"a chat message, or a list of them), got {shown(turns)}")
    return list(turns)


@dataclass
class TurnBatch:
    """What `read_turns` made of a call's items: the `turns`, where each came from (`places`),
    how many items were `skipped` (chat messages with no text, instruction roles) and how many
    control characters were `replaced` in texts (see `clean_text`)."""

    turns: list[Turn]
    places: list[str] = field(default_factory=list)  # where each turn came from, for errors: "turns[3]"
    skipped: int = 0
    replaced: int = 0


@dataclass
class SessionClock:
    """Default session ids for turns given without one: the session of the turn before (in the
    call, else the space's last stored turn when its session is still open) when at most `gap`
    of silence lies between them, else a new session `chat-<UTC time of its first turn>`
    (`-2`, `-3`, ... when `taken(id)` says the store has it)."""

    gap: timedelta = timedelta(minutes=30)
    last_session: str | None = None
    last_time: datetime | None = None
    taken: Callable[[str], bool] = lambda sid: False

    def session_for(self, given: str | None, when: datetime) -> str:
        if given is None:
            if (self.last_session is not None and self.last_time is not None
                    and abs(when - self.last_time) <= self.gap):
                given = self.last_session
            else:
                stem = f"chat-{when.astimezone(timezone.utc):%Y-%m-%dT%H:%M:%SZ}"
                given, n = stem, 1
                while self.taken(given) or given == self.last_session:
                    n += 1
                    given = f"{stem}-{n}"
        self.last_session, self.last_time = given, when
        return given


def read_turns(items: Iterable[Turn | Mapping[str, Any]], space: str, *, default_tz: str,
               existing_ids: set[str] | None = None, next_seq: int = 0, max_turn_chars: int = MAX_TURN_CHARS,
               labels: Sequence[str] | None = None, now: datetime | None = None,
               sessions: SessionClock | None = None, keep_system: bool = False,
               known: Mapping[str, Turn] | None = None, is_stored: Callable[[str], bool] | None = None) -> TurnBatch:
    """Check every item and return the `TurnBatch` to store in `space`; raise ValueError naming
    the first bad field (e.g. `turns[3].timestamp`, or `<labels[3]>.timestamp` when the caller
    knows where item 3 comes from, e.g. `talk.jsonl:4: turn`) before anything is stored. Limits:
    see the module doc.

    Items are `Turn`s, plain strings (one user message each), turn dicts (`speaker, text`, optional `session_id, timestamp, turn_id,
    extra, metadata, space`) or chat messages (`role, content`, ...: see `etamem.ingest.messages`). A missing
    timestamp is `now` (default: the time of the call, UTC); a missing session id comes from
    `sessions` (a `SessionClock`); a missing turn id is `t<seq>`, counting from `next_seq` in the
    order given. A turn whose id is in `known` (the stored turns by id) takes its missing
    timestamp and session from the stored one: a retry without them is the same message.
    Control characters in texts are replaced (`clean_text`), not refused. `is_stored(name)` says
    which spaces the store holds (`space_as_stored`: a name stored by an earlier version).
    """
    is_stored = is_stored or (lambda name: False)
    space = space_as_stored(space, is_stored)
    if isinstance(items, (Turn, Mapping)):
        items = [items]
    items = list(items)
    if labels is not None and len(labels) != len(items):
        raise ValueError(f"labels: {len(labels)} labels for {len(items)} turns")
    now = now or datetime.now(timezone.utc)
    sessions = sessions or SessionClock()
    batch = TurnBatch([])
    seen: set[str] = set()
    for i, item in enumerate(items):
        where = f"turns[{i}]" if labels is None else labels[i]
        if isinstance(item, Turn):
            if item.space != "default":
                _turn_space(item.space, space, where, is_stored)
            fields = {"session_id": item.session_id, "speaker": item.speaker, "text": item.text,
                      "timestamp": item.timestamp, "turn_id": item.turn_id, "extra": item.extra}
        elif isinstance(item, Mapping) and is_message(item):
            fields = message_fields(item, where, keep_system=keep_system)
            if fields is None:
                batch.skipped += 1
                continue
        elif isinstance(item, str):  # a plain string: one user message
            fields = {"speaker": "user", "text": item}
        elif isinstance(item, Mapping):
            unknown = set(item) - _TURN_KEYS
            if unknown:
                raise ValueError(f"{where}: unknown field(s) {sorted(map(str, unknown))}; allowed: "
                                 f"{sorted(_TURN_KEYS)} (or a chat message: role, content, ...)")
            fields = dict(item)
        else:
            raise ValueError(f"{where}: expected a Turn, a turn dict or a chat message, got {type(item).__name__}")
        if fields.get("space") is not None:
            _turn_space(fields["space"], space, where, is_stored)
        for name in ("speaker", "text"):
            if fields.get(name) is None:
                raise ValueError(f"{where}.{name}: missing")
        speaker = _required_str(fields["speaker"], f"{where}.speaker").strip()
        text, replaced = clean_text(_required_str(fields["text"], f"{where}.text", max_turn_chars, "max_turn_chars",
                                                  controls=False))
        text = text.strip()
        if not text:
            raise ValueError(f"{where}.text: nothing left once control characters were removed")
        batch.replaced += replaced
        turn_id = fields.get("turn_id")
        turn_id = f"t{next_seq + i}" if turn_id is None else check_id(_required_str(turn_id, f"{where}.turn_id"),
                                                                        f"{where}.turn_id")
        before = (known or {}).get(turn_id)
        if fields.get("timestamp") is not None:
            timestamp = parse_timestamp(fields["timestamp"], default_tz, field=f"{where}.timestamp")
        else:
            timestamp = now if before is None else before.timestamp
        given_session = fields.get("session_id")
        if given_session is not None:
            given_session = _required_str(given_session, f"{where}.session_id")
        elif before is not None:
            given_session = before.session_id
        session_id = sessions.session_for(given_session, timestamp)
        extra = fields.get("extra") or {}
        if not isinstance(extra, Mapping):
            raise ValueError(f"{where}.extra: expected a dict, got {type(extra).__name__}")
        extra = with_metadata(extra, fields.get("metadata"), where)
        try:
            # as the store writes it; NaN and Infinity are not JSON (other readers refuse them)
            size = len(json.dumps(dict(extra), sort_keys=True, allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}.extra: not JSON-serialisable ({exc})") from None
        if size > max_turn_chars:
            raise ValueError(f"{where}.extra: {size} characters as JSON, more than max_turn_chars={max_turn_chars}")
        if turn_id in seen:
            raise ValueError(f"{where}.turn_id: {turn_id!r} appears twice in this call")
        if existing_ids and turn_id in existing_ids:
            raise ValueError(f"{where}.turn_id: {turn_id!r} is already stored in space {space!r}")
        seen.add(turn_id)
        batch.turns.append(Turn(turn_id=turn_id, session_id=session_id, speaker=speaker, text=text,
                                timestamp=timestamp, space=space, extra=dict(extra)))
        batch.places.append(where)
    return batch


def with_metadata(extra: Mapping[str, Any], metadata: Any, where: str) -> Mapping[str, Any]:
    """`extra` with the checked `metadata` under "metadata" (`validate_metadata`; an empty one is
    not stored); metadata already in `extra` is checked the same way. ValueError naming `where`
    when both are given and differ."""
    if metadata is None:
        if METADATA_KEY not in extra:
            return extra
        meta = validate_metadata(extra[METADATA_KEY], f"{where}.extra.{METADATA_KEY}")
    else:
        meta = validate_metadata(metadata, f"{where}.metadata")
        if METADATA_KEY in extra and extra[METADATA_KEY] != meta:
            raise ValueError(f"{where}.metadata: differs from {where}.extra.{METADATA_KEY}; give one of them")
    out = {k: v for k, v in extra.items() if k != METADATA_KEY}
    return {**out, METADATA_KEY: meta} if meta else out


def normalise_turns(items: Iterable[Turn | Mapping[str, Any]], space: str, **kwargs: Any) -> list[Turn]:
    """The turns of `read_turns(items, space, **kwargs)` (same checks and defaults)."""
    return read_turns(items, space, **kwargs).turns


MAX_TOP_K = 10_000  # a search returns at most this many hits


def validate_query(query: Any, max_chars: int) -> str:
    """A search query: a non-empty string of text (see `check_text`), at most `max_chars`, its
    control characters replaced (`clean_text`)."""
    if not isinstance(query, str) or not query.strip():
        raise ValueError(f"query: expected a non-empty string, got {shown(query)}")
    text, _ = clean_text(check_text(query, "query", max_chars, limit_name="max_turn_chars", controls=False))
    if not text.strip():
        raise ValueError("query: nothing left once control characters were removed")
    return text


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


def given_ids(items: Sequence[Any]) -> list[str]:
    """The turn ids the items give (`turn_id` of turns, `id` of chat messages), to look up."""
    out = []
    for item in items:
        value = item.turn_id if isinstance(item, Turn) else (
            item.get("id" if is_message(item) else "turn_id") if isinstance(item, Mapping) else None)
        if isinstance(value, str):
            out.append(value)
    return out


def check_same_content(clean: list[Turn] | TurnBatch, stored: Mapping[str, Turn], space: str,
                       labels: Sequence[str] | None = None) -> None:
    """ValueError naming the first turn of `clean` whose id is in `stored` (id -> stored turn)
    with other content (a `TurnBatch`'s places, else `labels[i]` or `turns[i]` as its place)."""
    batch = clean if isinstance(clean, TurnBatch) else TurnBatch(list(clean))
    for i, t in enumerate(batch.turns):
        if t.turn_id in stored and not same_turn(stored[t.turn_id], t):
            where = batch.places[i] if batch.places else f"turns[{i}]" if labels is None else labels[i]
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
