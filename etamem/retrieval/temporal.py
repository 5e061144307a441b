"""Temporal expressions in questions -> a half-open time window [start, end).

`parse_time_window(question, now)` resolves expressions relative to `now` (the question
date). Windows are in `now`'s timezone (UTC when `now` is None or naive); day-level forms
start at local midnight. Weeks are ISO weeks (Monday start). With `now=None` only forms
that carry their own year are parsed. Supported forms (case-insensitive):

- relative days: "today", "tonight", "this morning/afternoon/evening", "yesterday",
  "last night", "the day before yesterday", "tomorrow", "the day after tomorrow"
- "N days/weeks/months/years ago": N = digits, one..twelve, "a"/"an", "a couple (of)" (2),
  "a few" (2-4), "several" (3-6); weeks/months/years ago are whole calendar periods
  ("3 weeks ago" = the ISO week three weeks before now's week)
- "last/this/next week|weekend|month|year" (also "previous", "this past")
- rolling: "the past/last N days|weeks|months|years", "(the) past week" -> [now - N, now)
- weekdays: "last/on/past/previous Friday" (most recent strictly before today),
  "next Friday", "this Friday" (in now's ISO week)
- absolute: "8 May 2023", "8 May, 2023", "the 8th of May 2023", "May 8(th), 2023",
  "2023-05-08", "2023/05/08", "2023-05", "May 2023", "in May 2023", "in 2022",
  "early/mid/late May 2023", "the beginning/middle/end of May 2023", "early 2022" (thirds:
  days 1-10/11-20/21-end, months Jan-Apr/May-Aug/Sep-Dec), "the week of 8 May 2023" (ISO),
  "the first/second/third/fourth/last week of May 2023" (days 1-7, 8-14, ..., last 7 days)
- needing `now`: "in May" (most recent May on/before now's month), "early May", "8 May" /
  "May 8" (most recent on/before today), "last/this/next May"
- offsets: "two days before <date>", "a week after <date>", "the day before <date>",
  "a few days after last Friday" (the anchor window shifted; kind "before"/"after")
- "recently"/"lately": the 30 days before now
- order words: "first", "earliest", "for the first time" (kind "first"); "latest",
  "most recent(ly)", "last time", "the last <thing>" (kind "latest"); window = everything
  before now, the caller orders by kind

Month names alone are not dates ("What may Caroline do?", "Did Jon march?", "Did June
call?"): a month needs a day number, a year, "in"/"during"/"throughout", or
"early"/"mid"/"late"/"last"/"this"/"next". Among several expressions the most specific
(shortest window) wins, ties going to the first occurrence; an expression inside a longer
one ("yesterday" in "the day before yesterday") is dropped.
"""
from __future__ import annotations

import re
from calendar import monthrange
from collections import namedtuple
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone, tzinfo

from etamem.ingest.timeparse import MONTHS

__all__ = ["TimeWindow", "is_when_question", "parse_time_window"]


@dataclass(frozen=True)
class TimeWindow:
    """Half-open window [start, end) in the question's timezone."""

    start: datetime
    end: datetime
    expression: str
    kind: str  # relative | absolute | before | after | first | latest

    def _aware(self, ts: datetime) -> datetime:  # naive -> the window's timezone
        return ts if ts.tzinfo is not None else ts.replace(tzinfo=self.start.tzinfo)

    def contains(self, ts: datetime) -> bool:
        return self.start <= self._aware(ts) < self.end

    def distance(self, ts: datetime) -> timedelta:
        """0 inside the window, else the gap to the nearest edge."""
        ts = self._aware(ts)
        if ts < self.start:
            return self.start - ts
        return ts - self.end if ts >= self.end else timedelta(0)


# ---------------------------------------------------------------- vocabulary
_WORDS = {w: i + 1 for i, w in enumerate(
    "one two three four five six seven eight nine ten eleven twelve".split())}
_NUM = (r"(?:a\s+couple\s+of|a\s+couple|couple\s+of|a\s+few|few|several|an|a|\d{1,3}|"
        + "|".join(_WORDS) + ")")
_UNIT = r"(?P<u>day|week|month|year)s?"
_MON = "|".join(sorted(MONTHS, key=len, reverse=True))
_WD_NAMES = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_WD = "|".join(_WD_NAMES)
_YEAR = r"(?:19|20)\d\d"
_THIRD = r"(?P<third>early|mid|late|(?:the\s+)?(?:beginning|start|middle|end)\s+of)"
_MIN_YEAR_START = datetime(1, 1, 2)


def _num(text: str) -> tuple[int, int]:
    t = " ".join(text.lower().split())
    if "few" in t:
        return 2, 4
    if "several" in t:
        return 3, 6
    if "couple" in t:
        return 2, 2
    if t.isdigit():
        return int(t), int(t)
    return (_WORDS[t],) * 2 if t in _WORDS else (1, 1)  # a / an / the


def _third(text: str) -> int:
    t = text.lower()
    return 0 if ("early" in t or "beginning" in t or "start" in t) else 1 if "mid" in t else 2


def _add_months(d, k: int):
    y, m = divmod(d.month - 1 + k, 12)
    y += d.year
    return d.replace(year=y, month=m + 1, day=min(d.day, monthrange(y, m + 1)[1]))


def _shift(d, unit: str, k: int):
    if unit in ("month", "year"):
        return _add_months(d, k * (12 if unit == "year" else 1))
    return d + timedelta(days=k * (7 if unit == "week" else 1))


def _period(unit: str, today: date, k: int) -> tuple[date, date]:
    """The calendar day/ISO week/month/year containing `today`, moved by k of them."""
    if unit == "day":
        d = today + timedelta(days=k)
        return d, d + timedelta(days=1)
    if unit == "week":
        monday = today - timedelta(days=today.weekday()) + timedelta(weeks=k)
        return monday, monday + timedelta(days=7)
    if unit == "month":
        first = _add_months(today.replace(day=1), k)
        return first, _add_months(first, 1)
    return date(today.year + k, 1, 1), date(today.year + k + 1, 1, 1)


@dataclass
class _Ctx:
    now: datetime | None
    tz: tzinfo

    @property
    def today(self) -> date:
        return self.now.date()

    def days(self, a: date, b: date, kind: str = "relative"):
        return (datetime(a.year, a.month, a.day, tzinfo=self.tz),
                datetime(b.year, b.month, b.day, tzinfo=self.tz), kind)


# ---------------------------------------------------------------- handlers
def _day_offset(k: int):
    def handler(m, c):
        return c.days(*_period("day", c.today, k)) if c.now else None
    return handler


def _h_ago(m, c):
    if not c.now:
        return None
    lo, hi = _num(m["n"])
    return c.days(_period(m["u"], c.today, -hi)[0], _period(m["u"], c.today, -lo)[1])


def _h_rolling(m, c):
    if not c.now or not (m["the"] or m["n"] or m["p"].lower() == "past"):
        return None
    hi = _num(m["n"])[1] if m["n"] else 1
    return _shift(c.now, m["u"], -hi), c.now, "relative"


def _h_rel_unit(m, c):
    if not c.now:
        return None
    p, u = m["p"].lower(), m["u"].lower()
    k = 0 if p == "this" else 1 if p == "next" else -1
    if u == "weekend":
        sat = _period("week", c.today, k)[0] + timedelta(days=5)
        return c.days(sat, sat + timedelta(days=2))
    return c.days(*_period(u, c.today, k))


def _h_weekday(m, c):
    if not c.now:
        return None
    p, wd, today = m["p"].lower(), _WD_NAMES.index(m["wd"].lower()), c.today
    if p == "next":
        d = today + timedelta(days=(wd - today.weekday()) % 7 or 7)
    elif p == "this":
        d = today + timedelta(days=wd - today.weekday())
    else:
        d = today - timedelta(days=(today.weekday() - wd) % 7 or 7)
    return c.days(d, d + timedelta(days=1))


def _h_day(m, c):
    month, day = MONTHS[m["m"].lower()], int(m["d"])
    if not (m["y"] or c.now):
        return None
    year = int(m["y"]) if m["y"] else c.today.year - ((month, day) > (c.today.month, c.today.day))
    try:
        d = date(year, month, day)
    except ValueError:
        return None
    return c.days(d, d + timedelta(days=1), "absolute")


def _h_iso(m, c):
    try:
        d = date(int(m["y"]), int(m["mo"]), int(m["d"] or 1))
    except ValueError:
        return None
    end = d + timedelta(days=1) if m["d"] else _add_months(d, 1)
    return c.days(d, end, "absolute")


def _h_month(m, c):
    if not (m["pre"] or m["third"] or m["y"]):
        return None
    month = MONTHS[m["m"].lower()]
    if not (m["y"] or c.now):
        return None
    year = int(m["y"]) if m["y"] else c.today.year - (month > c.today.month)
    start = date(year, month, 1)
    end = _add_months(start, 1)
    if m["third"]:
        i = _third(m["third"])
        start, end = start.replace(day=1 + 10 * i), (end if i == 2 else start.replace(day=11 + 10 * i))
    return c.days(start, end, "absolute")


def _h_rel_month(m, c):
    if not c.now:
        return None
    p, month, today = m["p"].lower(), MONTHS[m["m"].lower()], c.today
    year = today.year
    if p == "next":
        year += month <= today.month
    elif p != "this":
        year -= month >= today.month
    start = date(year, month, 1)
    return c.days(start, _add_months(start, 1), "absolute")


def _h_year(m, c):
    if not (m["pre"] or m["third"]):
        return None
    y = int(m["y"])
    start, end = date(y, 1, 1), date(y + 1, 1, 1)
    if m["third"]:
        i = _third(m["third"])
        start, end = date(y, 1 + 4 * i, 1), (end if i == 2 else date(y, 5 + 4 * i, 1))
    return c.days(start, end, "absolute")


def _h_recent(m, c):  # "recently": the 30 days before now
    return (c.now - timedelta(days=30), c.now, "relative") if c.now else None


def _order(kind: str):
    def handler(m, c):
        return (_MIN_YEAR_START.replace(tzinfo=c.tz), c.now, kind) if c.now else None
    return handler


_F = re.IGNORECASE
_RULES = [(re.compile(p, _F), h) for p, h in [
    (r"\b(?:the\s+)?day\s+before\s+yesterday\b", _day_offset(-2)),
    (r"\b(?:the\s+)?day\s+after\s+tomorrow\b", _day_offset(2)),
    (r"\byesterday\b|\blast\s+night\b", _day_offset(-1)),
    (r"\b(?:earlier\s+)?today\b|\btonight\b|\bthis\s+(?:morning|afternoon|evening)\b", _day_offset(0)),
    (r"\btomorrow\b", _day_offset(1)),
    (rf"\b(?P<n>{_NUM})\s+{_UNIT}\s+ago\b", _h_ago),
    (rf"\b(?P<the>the\s+)?(?P<p>past|last)\s+(?:(?P<n>{_NUM})\s+)?{_UNIT}\b", _h_rolling),
    (r"\b(?P<p>this\s+past|last|this|next|previous)\s+(?P<u>weekend|week|month|year)\b", _h_rel_unit),
    (rf"\b(?P<p>this\s+past|last|on|past|previous|next|this)\s+(?P<wd>{_WD})\b", _h_weekday),
    ((rf"\b(?:the\s+)?(?P<d>\d{{1,2}})(?:st|nd|rd|th)?(?:\s+of)?\s+(?P<m>{_MON})\b\.?"
      rf"(?:,?\s+(?P<y>{_YEAR})\b)?"), _h_day),
    ((rf"\b(?P<m>{_MON})\b\.?\s+(?:the\s+)?(?P<d>\d{{1,2}})(?:st|nd|rd|th)?\b"
      rf"(?:,?\s+(?P<y>{_YEAR})\b)?(?!\s*:)"), _h_day),
    (rf"\b(?P<y>{_YEAR})([-/])(?P<mo>\d{{1,2}})(?:\2(?P<d>\d{{1,2}}))?\b", _h_iso),
    ((rf"\b(?:(?P<pre>in|during|throughout)\s+)?(?:{_THIRD}[\s-]+)?(?P<m>{_MON})\b\.?"
      rf"(?:,?\s+(?P<y>{_YEAR})\b)?"), _h_month),
    (rf"\b(?P<p>this\s+past|last|this|next)\s+(?P<m>{_MON})\b(?!\.?,?\s+{_YEAR})", _h_rel_month),
    (rf"\b(?:(?P<pre>in|during|throughout|the\s+year)\s+)?(?:{_THIRD}[\s-]+)?(?P<y>{_YEAR})\b(?![-/]\d)",
     _h_year),
    (r"\brecently\b|\blately\b", _h_recent),
    (r"\b(?:for\s+the\s+first\s+time|first|earliest)\b", _order("first")),
    ((rf"\b(?:latest|most\s+recent(?:ly)?|(?:the\s+)?last\s+time|the\s+last\b(?!\s+(?:{_NUM}|{_MON}|{_WD}|"
      r"night|day|week|weekend|month|year|days|weeks|months|years)\b))"), _order("latest")),
]]
_OFFSET = re.compile(rf"\b(?P<n>{_NUM}|the)\s+{_UNIT}\s+(?P<dir>before|after|prior\s+to)\s+", _F)
_WEEK_OF = re.compile(r"\b(?:the\s+|that\s+)?(?:(?P<ord>first|second|third|fourth|last)\s+)?week\s+of\s+", _F)
_ORD = ("first", "second", "third", "fourth")


_Cand = namedtuple("_Cand", "s e start end kind order")  # text span, window, rule order


def _inner_spans(spans: set[tuple[int, int]]) -> set[tuple[int, int]]:
    """The spans that lie inside another one (sorted by start, then longest first, a span is
    inside another when one before it ends at or after its end)."""
    inner = set()
    reach = -1
    for s, e in sorted(spans, key=lambda span: (span[0], -span[1])):
        if reach >= e:
            inner.add((s, e))
        reach = max(reach, e)
    return inner


def parse_time_window(question: str, now: datetime | None) -> TimeWindow | None:
    """The most specific time window named in `question`, resolved against `now`; None when
    none is named, or when it would fall outside the calendar (years 1..9999)."""
    try:
        return _parse_time_window(question, now)
    except OverflowError:
        return None
    except ValueError as exc:
        if "out of range" in str(exc):
            return None
        raise


def _parse_time_window(question: str, now: datetime | None) -> TimeWindow | None:
    if now is not None and now.tzinfo is None:
        now = now.replace(tzinfo=timezone.utc)
    c = _Ctx(now, now.tzinfo if now is not None else timezone.utc)
    cands: list[_Cand] = []
    for rx, handler in _RULES:
        for m in rx.finditer(question):
            got = handler(m, c)
            if got is not None:
                cands.append(_Cand(m.start(), m.end(), *got, len(cands)))
    mods = sorted([*_OFFSET.finditer(question), *_WEEK_OF.finditer(question)],
                  key=lambda m: m.start(), reverse=True)
    by_start: dict[int, _Cand] = {}  # text start -> the first of the longest candidates there
    for k in cands:
        if k.s not in by_start or k.e > by_start[k.s].e:
            by_start[k.s] = k
    for m in mods:  # innermost first, so offsets can chain
        a = by_start.get(m.end())
        if a is None or (m.re is _WEEK_OF and (a.end - a.start > timedelta(days=1)) != bool(m["ord"])):
            continue  # "the week of" needs a day, "the first/last week of" a month or year
        if m.re is _WEEK_OF and m["ord"]:  # days 1-7, 8-14, ..., or the last 7 days
            first = (a.end.date() - timedelta(days=7) if m["ord"].lower() == "last"
                     else a.start.date() + timedelta(days=7 * _ORD.index(m["ord"].lower())))
            start, end, kind = c.days(first, first + timedelta(days=7), a.kind)
        elif m.re is _WEEK_OF:
            monday = a.start.date() - timedelta(days=a.start.weekday())
            start, end, kind = c.days(monday, monday + timedelta(days=7), a.kind)
        else:
            lo, hi = _num(m["n"])
            if m["dir"].lower() == "after":
                start, end, kind = _shift(a.start, m["u"], lo), _shift(a.end, m["u"], hi), "after"
            else:
                start, end, kind = _shift(a.start, m["u"], -hi), _shift(a.end, m["u"], -lo), "before"
        cands.append(_Cand(m.start(), a.e, start, end, kind, len(cands)))
        if m.start() not in by_start or a.e > by_start[m.start()].e:
            by_start[m.start()] = cands[-1]
    inner = _inner_spans({(k.s, k.e) for k in cands})
    kept = [k for k in cands if (k.s, k.e) not in inner]
    if not kept:
        return None
    best = min(kept, key=lambda k: (k.end - k.start, k.s, k.order))
    return TimeWindow(best.start, best.end, question[best.s:best.e], best.kind)


_WHEN = re.compile(
    r"^\W*when\b"
    r"|\bwhen\s+(?:did|was|were|is|are|will|would|does|do|has|have|had)\b"
    r"|\b(?:since|until|till)\s+when\b"
    r"|\b(?:what|which)\s+(?:exact\s+|specific\s+)?(?:date|day|days|week|weekend|month|year|time|season)\b"
    r"|\bhow\s+long\s+ago\b|\bhow\s+long\s+has\s+it\s+been\b"
    r"|\bhow\s+many\s+(?:days|weeks|months|years|hours)\s+(?:\w+\s+){0,3}?"
    r"(?:ago|since|before|after|between|passed|elapsed)\b",
    _F,
)


def is_when_question(question: str) -> bool:
    """True when the question asks for a time (when / what date / how long ago / ...)."""
    return bool(_WHEN.search(question))
