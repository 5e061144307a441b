"""Relative dates made absolute against the time a turn was said (used by the rule extractor).

`resolve_relative_dates("I sold my car yesterday.", 10 April 2024)` ->
"I sold my car yesterday (9 April 2024)." The original words stay; the absolute date follows
them in brackets.

Weekdays: "last Friday" is the one before the turn's day, "next Friday" the one after it,
"this Friday" the one of the turn's week (Monday to Sunday). A bare "on Friday" is read from
the sentence's tense: the one before when the sentence is in the past tense ("I went there on
Friday": was, did, went, a verb in -ed ...) and has no future marker (will, 'll, going to,
gonna, plan ...) or speaks of a state a past event left ("Still sore from the bouldering
session on Sunday": the Sunday before), else the coming one ("I start my new job on Monday",
"I've got a job interview on Thursday": "'ve got" is a present "have"). Said on that very
weekday, "on Monday" is a week away (before or after).
"""
from __future__ import annotations

import re
from datetime import date, datetime, timedelta

from etamem.ingest.timeparse import format_date

_WEEKDAYS = {"monday": 0, "tuesday": 1, "wednesday": 2, "thursday": 3, "friday": 4, "saturday": 5,
             "sunday": 6, "mon": 0, "tue": 1, "tues": 1, "thu": 3, "thur": 3, "thurs": 3, "fri": 4}
_COUNT_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
                "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}
_WD_ALT = "|".join(sorted(_WEEKDAYS, key=len, reverse=True))
REL_DATE_RE = re.compile(
    r"\b(?:(?P<dby>(?:the\s+)?day\s+before\s+yesterday)"
    r"|(?P<dat>(?:the\s+)?day\s+after\s+tomorrow)"
    r"|(?P<yest>yesterday|last\s+night)"
    r"|(?P<today>today|tonight|this\s+(?:morning|afternoon|evening))"
    r"|(?P<tom>tomorrow)"
    rf"|(?P<n>\d{{1,3}}|{'|'.join(_COUNT_WORDS)}|a\s+couple(?:\s+of)?|couple\s+of)\s+(?P<u>day|week|month|year)s?\s+ago"
    r"|(?P<p>last|this\s+past|this|next|previous)\s+(?P<pu>weekend|week|month|year)"
    rf"|(?P<wp>last|this\s+past|past|previous|this|next)\s+(?P<wd>{_WD_ALT})"
    rf"|(?P<on>on)\s+(?P<wdo>{_WD_ALT})"
    r")(?![\w'\u2019-])(?!\s*\()(?!\s+(?:mornings|afternoons|evenings|nights)\b)",
    re.IGNORECASE,
)
# tense of a sentence, for a bare "on <weekday>"
_FUTURE_RE = re.compile(
    r"\b(?:will|shall|won't|gonna|going\s+to|plan(?:s|ning)?\s+to|about\s+to|next|tomorrow|upcoming|soon)\b"
    r"|['\u2019]ll\b",
    re.IGNORECASE)
_PAST_WORDS = set(
    "was were did didn't had hadn't wasn't weren't went got came saw made took gave told felt thought bought "
    "brought caught taught left met ran said sent spent began wrote won lost kept slept heard knew grew drew "
    "ate drank swam sang rode drove flew fell held built paid sold stood wore woke broke chose forgot became "
    "spoke stole froze shook yesterday ago last".split())
# a present state left by a past event: "still sore from the session on Sunday", "since Friday"
_PAST_CUE_RE = re.compile(
    r"\b(?:still\s+(?:\w+\s+){0,2}(?:from|after)|(?:recovering|sore|tired|exhausted|aching|hungover|stiff|"
    r"burnt\s+out|jet-?lagged)\s+(?:\w+\s+)?from|ever\s+since|since)\b", re.IGNORECASE)
# "got" of possession is present: "I've got a job interview on Thursday", "she's got", "have got"
_HAVE_GOT_RE = re.compile(r"(?:['\u2019](?:ve|s)|\bha(?:ve|s))\s+(?:\w+\s+)?got\b", re.IGNORECASE)
_BE_BEFORE = set("am is are be been being get gets got feel feels 'm 're i'm you're we're they're".split())
_NOT_PAST_ED = set("bleed breed speed succeed proceed exceed embed".split())  # -ed, not past
_TOKEN_RE = re.compile(r"[A-Za-z]+(?:['\u2019][a-z]+)?")


def is_past_tense(sentence: str) -> bool:
    """Whether `sentence` speaks of the past: no future marker (will, 'll, going to, next ...)
    and a state left by a past event ("still sore from", "since") or a past form (was, did,
    went, a verb in -ed not after a form of "be"; "'ve got" is a present "have")."""
    if _FUTURE_RE.search(sentence):
        return False
    if _PAST_CUE_RE.search(sentence):
        return True
    sentence = _HAVE_GOT_RE.sub(" have", sentence)
    words = [w.lower().replace("\u2019", "'") for w in _TOKEN_RE.findall(sentence)]
    for i, w in enumerate(words):
        if w in _PAST_WORDS:
            return True
        if (len(w) > 4 and w.endswith("ed") and w not in _NOT_PAST_ED
                and not (i and (words[i - 1] in _BE_BEFORE or words[i - 1].endswith(("'m", "'re", "'s"))))):
            return True
    return False


def _month_shift(d: date, k: int) -> date:
    y, m = divmod(d.month - 1 + k, 12)
    return date(d.year + y, m + 1, 1)


def _relative_label(m: re.Match[str], today: date, past: bool) -> str | None:
    """The absolute form of one relative date expression said on `today`; `past`: whether its
    sentence is in the past tense (read only for a bare "on <weekday>")."""
    def day(k: int) -> str:
        return format_date(today + timedelta(days=k))

    def week(k: int) -> str:
        return f"the week of {format_date(today - timedelta(days=today.weekday()) + timedelta(weeks=k))}"

    def month(k: int) -> str:
        return _month_shift(today, k).strftime("%B %Y")

    def year(k: int) -> str:
        return str(date(today.year + k, 1, 1).year)  # ValueError outside years 1..9999

    if m["dby"]:
        return day(-2)
    if m["dat"]:
        return day(2)
    if m["yest"]:
        return day(-1)
    if m["today"]:
        return day(0)
    if m["tom"]:
        return day(1)
    if m["u"]:
        n_text = " ".join(m["n"].lower().split())
        n = int(n_text) if n_text.isdigit() else 2 if "couple" in n_text else _COUNT_WORDS[n_text]
        unit = m["u"].lower()
        if unit == "day":
            return day(-n)
        if unit == "week":
            return week(-n)
        return month(-n) if unit == "month" else year(-n)
    if m["pu"]:
        p, unit = " ".join(m["p"].lower().split()), m["pu"].lower()
        k = 0 if p == "this" else 1 if p == "next" else -1
        if unit == "weekend":
            saturday = today - timedelta(days=today.weekday()) + timedelta(weeks=k, days=5)
            return f"the weekend of {format_date(saturday)}"
        if unit == "week":
            return week(k)
        return month(k) if unit == "month" else year(k)
    if m["wdo"]:
        p, wd = ("last" if past else "next"), _WEEKDAYS[m["wdo"].lower()]
    else:
        p, wd = " ".join(m["wp"].lower().split()), _WEEKDAYS[m["wd"].lower()]
    if p == "next":
        return day((wd - today.weekday()) % 7 or 7)
    if p == "this":
        return day(wd - today.weekday())
    return day(-((today.weekday() - wd) % 7 or 7))


def resolve_relative_dates(sentence: str, when: datetime | None) -> str:
    """`sentence` with the absolute date after each relative date expression, read against
    `when` (the turn's timestamp, in its own timezone): 'yesterday' -> 'yesterday (7 May
    2023)', 'last week' -> 'last week (the week of 1 May 2023)', 'next month' -> 'next month
    (June 2023)', 'last Friday' -> 'last Friday (5 May 2023)', 'two years ago' -> 'two years
    ago (2021)', 'on Monday' -> 'on Monday (15 May 2023)' (see the module docstring). The
    original words stay (lexical matches, the time view's cue words). `when` None: unchanged."""
    if when is None or not isinstance(when, datetime):
        return sentence
    today = when.date()
    past: list[bool] = []  # the tense, computed once and only when a bare weekday needs it

    def fn(m: re.Match[str]) -> str:
        if m["wdo"] and not past:
            past.append(is_past_tense(sentence))
        try:
            label = _relative_label(m, today, bool(past and past[0]))
        except (OverflowError, ValueError):  # beyond year 1..9999
            return m.group(0)
        return f"{m.group(0)} ({label})" if label else m.group(0)

    return REL_DATE_RE.sub(fn, sentence)
