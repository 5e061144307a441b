"""Timestamp parsing for turns: ISO 8601, LoCoMo and LongMemEval forms (timezone-aware)."""
from __future__ import annotations

import re
from datetime import datetime, timezone, tzinfo
from zoneinfo import ZoneInfo

# LoCoMo: "1:56 pm on 8 May, 2023"
_LOCOMO = re.compile(
    r"^\s*(\d{1,2}):(\d{2})\s*([ap])\.?m\.?\s+on\s+(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})\s*$",
    re.IGNORECASE,
)
# LongMemEval: "2023/05/20 (Sat) 02:21"
_LONGMEMEVAL = re.compile(
    r"^\s*(\d{4})/(\d{1,2})/(\d{1,2})\s*(?:\([A-Za-z]{2,9}\))?\s*(?:(\d{1,2}):(\d{2}))?\s*$"
)
_MONTHS = {
    m: i + 1
    for i, names in enumerate(
        [("jan", "january"), ("feb", "february"), ("mar", "march"), ("apr", "april"),
         ("may",), ("jun", "june"), ("jul", "july"), ("aug", "august"),
         ("sep", "sept", "september"), ("oct", "october"), ("nov", "november"), ("dec", "december")]
    )
    for m in names
}


def resolve_timezone(name: str | tzinfo) -> tzinfo:
    """`"UTC"` or an IANA name such as `"Europe/Paris"` -> tzinfo."""
    if isinstance(name, tzinfo):
        return name
    return timezone.utc if name.upper() == "UTC" else ZoneInfo(name)


def parse_timestamp(value: datetime | str, default_tz: str | tzinfo = "UTC") -> datetime:
    """Parse a turn timestamp into a timezone-aware datetime.

    Accepts a datetime (naive ones get `default_tz`), ISO 8601 strings (`2023-05-08T13:56`,
    `2023-05-08 13:56:00+02:00`, `...Z`), LoCoMo (`"1:56 pm on 8 May, 2023"`) and
    LongMemEval (`"2023/05/20 (Sat) 02:21"`). Raises ValueError on anything else.
    """
    tz = resolve_timezone(default_tz)
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=tz)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"timestamp: expected a datetime or a non-empty string, got {value!r}")
    text = value.strip()
    parsed = _parse_locomo(text) or _parse_longmemeval(text) or _parse_iso(text)
    if parsed is None:
        raise ValueError(
            f"timestamp: cannot parse {value!r} (expected ISO 8601, LoCoMo '1:56 pm on 8 May, 2023' "
            "or LongMemEval '2023/05/20 (Sat) 02:21')"
        )
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=tz)


def _parse_locomo(text: str) -> datetime | None:
    m = _LOCOMO.match(text)
    if not m:
        return None
    hour, minute, ampm, day, month_name, year = m.groups()
    month = _MONTHS.get(month_name.lower())
    hour_i = int(hour)
    if month is None or not 1 <= hour_i <= 12:
        return None
    hour_i = hour_i % 12 + (12 if ampm.lower() == "p" else 0)
    try:
        return datetime(int(year), month, int(day), hour_i, int(minute))
    except ValueError:
        return None


def _parse_longmemeval(text: str) -> datetime | None:
    m = _LONGMEMEVAL.match(text)
    if not m:
        return None
    year, month, day, hour, minute = m.groups()
    try:
        return datetime(int(year), int(month), int(day), int(hour or 0), int(minute or 0))
    except ValueError:
        return None


def _parse_iso(text: str) -> datetime | None:
    try:
        return datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
    except ValueError:
        return None


def format_date(ts: datetime) -> str:
    """Readable date used in AMU context and BM25 text, e.g. `8 May 2023`."""
    return f"{ts.day} {ts.strftime('%B %Y')}"
