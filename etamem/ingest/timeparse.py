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
MONTHS = {
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


YEAR_RANGE = (2, 9998)  # the Time forest and relative dates need a year of margin on both sides


def parse_timestamp(value: datetime | str, default_tz: str | tzinfo = "UTC", field: str = "timestamp") -> datetime:
    """Parse a turn timestamp into a timezone-aware datetime.

    Accepts a datetime (naive ones get `default_tz`), ISO 8601 strings (`2023-05-08T13:56`,
    `2023-05-08 13:56:00+02:00`, `...Z`), LoCoMo (`"1:56 pm on 8 May, 2023"`) and
    LongMemEval (`"2023/05/20 (Sat) 02:21"`), with a year in `YEAR_RANGE`. Raises ValueError
    starting with `field` on anything else.
    """
    tz = resolve_timezone(default_tz)
    if isinstance(value, datetime):
        parsed = value
    elif not isinstance(value, str) or not value.strip():
        raise ValueError(f"{field}: expected a datetime or a non-empty string, got {_short(value)}")
    else:
        text = value.strip()
        parsed = _parse_locomo(text) or _parse_longmemeval(text) or _parse_iso(text)
        if parsed is None:
            raise ValueError(
                f"{field}: cannot parse {_short(value)} (expected ISO 8601, LoCoMo '1:56 pm on 8 May, 2023' "
                "or LongMemEval '2023/05/20 (Sat) 02:21')"
            )
    parsed = parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=tz)
    try:
        year = parsed.astimezone(timezone.utc).year
    except (OverflowError, ValueError):
        year = parsed.year + (1 if parsed.month == 12 else -1)  # the UTC instant falls outside years 1..9999
    if not YEAR_RANGE[0] <= year <= YEAR_RANGE[1] or not YEAR_RANGE[0] <= parsed.year <= YEAR_RANGE[1]:
        raise ValueError(f"{field}: year {parsed.year} is outside {YEAR_RANGE[0]}..{YEAR_RANGE[1]}")
    return parsed


def _short(value, n: int = 80) -> str:
    text = repr(value) if not isinstance(value, int) or abs(value) < 10 ** 50 else "a huge integer"
    return text if len(text) <= n else text[: n - 3] + "..."


def _parse_locomo(text: str) -> datetime | None:
    m = _LOCOMO.match(text)
    if not m:
        return None
    hour, minute, ampm, day, month_name, year = m.groups()
    month = MONTHS.get(month_name.lower())
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
