"""AMU extraction: turn -> list of atomic fact strings (DESIGN §4 step 2).

`RuleExtractor` is the embedded default (no model): sentence split, filler removal (short
sentences stay when they carry a name, number or date), I/me/my rewritten to the speaker's name
with verb agreement, you/your to the other speaker and we/us/our to both, and relative dates
("yesterday", "last week") given their absolute date from the turn's timestamp.
`LLMExtractor` makes one LLM call per turn with the dataset prompt. When the endpoint gives
no reply (unreachable, timeouts, 429/5xx after the client's retries, a rejected request) it
raises `ExtractionUnavailable`: `Memory` leaves the turns pending and retries them on the next
`add`/`flush`. When a reply comes but is unusable (not JSON after the repair round, wrong form,
a refusal) that turn is extracted by the rule extractor, counted in `LLMExtractor.stats` and
reported by `extract_result`.
"""
from __future__ import annotations

import logging
import re
import threading
from datetime import date, datetime, timedelta
from typing import Any, NamedTuple, Sequence

from .llm import LLMError, LLMUnavailable
from .prompts_io import load_prompt, render_prompt
from .timeparse import format_date
from .types import Turn

logger = logging.getLogger(__name__)

STYLES = ("locomo", "longmemeval")

# --- sentence splitting ---------------------------------------------------------------
# Never a sentence end: titles, Latin abbreviations, single initials ("J. K. Rowling").
_ABBREV_NEVER = {
    "mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "mt", "ave", "vs", "no", "approx",
    "e.g", "i.e", "cf", "fig", "dept", "gen", "gov", "sen", "rep", "capt", "lt", "col", "sgt",
}
# A sentence end only when the next sentence starts with a capital letter or a digit.
_ABBREV_MAYBE = {"a.m", "p.m", "etc", "u.s", "u.k", "inc", "co", "ltd", "corp", "jan", "feb",
                 "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec"}
_BOUNDARY_RE = re.compile(r"[.!?\u2026]+[\"'\u201d\u2019)\]]*\s+")
_LAST_TOKEN_RE = re.compile(r"([A-Za-z](?:[A-Za-z.]*[A-Za-z])?)\.$")


def split_sentences(text: str) -> list[str]:
    """Split on . ! ? … followed by whitespace and on newlines, keeping abbreviations."""
    out: list[str] = []
    for line in re.split(r"[\r\n]+", text):
        start = 0
        for m in _BOUNDARY_RE.finditer(line):
            head = line[start:m.start() + len(m.group().rstrip())]
            punct = m.group().rstrip()
            if punct.startswith(".") and punct.rstrip("\"'\u201d\u2019)]") == ".":
                tok = _LAST_TOKEN_RE.search(line[max(start, m.start() - 64):m.start() + 1])  # bounded: linear in the text
                word = tok.group(1).lower() if tok else ""
                nxt = line[m.end():m.end() + 1]
                if word in _ABBREV_NEVER or (len(word) == 1 and word.isalpha()):
                    continue
                if word in _ABBREV_MAYBE and not (nxt.isupper() or nxt.isdigit()):
                    continue
            if head.strip():
                out.append(head.strip())
            start = m.end()
        tail = line[start:].strip()
        if tail:
            out.append(tail)
    return out


# --- filler removal -------------------------------------------------------------------
_INTERJ = (
    r"oh my (?:god|gosh|goodness)|oh (?:wow|man|no|yeah|yes)|thank you(?: so much| very much)?"
    r"|thanks(?: so much| a lot)?|by the way|hey+|hi+|hello|heya|yo|oh+|o+h|ooh+|wow+|whoa|woah"
    r"|aw+|ha(?:ha)+h?|he(?:he)+|lol+|lmao|omg|yeah+|yea|yep|yup|yes|sure|ok(?:ay)?|alright"
    r"|well|um+|uh+|hmm+|ah+|cheers|totally|absolutely|definitely|indeed|cool|great|awesome"
    r"|nice|sweet|congrats|congratulations|gosh|dude|man|btw|anyway|anyways|so|welp|phew"
)
_GREETING = r"hey+|hi+|hello|heya|yo|thanks|thank you"
_NAME = r"[A-Z][a-z]+(?:\s[A-Z][a-z]+)?"
_LEAD_INTERJ_RE = re.compile(rf"^(?:{_INTERJ})\b\s*(?:[,!.\u2026~:;-]+\s*|$)", re.IGNORECASE)
_LEAD_GREET_NAME_RE = re.compile(rf"^(?i:{_GREETING})\s+{_NAME}\b\s*[,!.\u2026~-]*\s*")
_LEAD_VOCATIVE_RE = re.compile(rf"^{_NAME}\s*(?:[,!\u2026]+\s*|\.$)")
_TRAIL_INTERJ_RE = re.compile(r"\s*\b(?:lol+|ha(?:ha)+h?|lmao|xd)\b[\s!.]*$", re.IGNORECASE)
_CHITCHAT_RE = re.compile(
    r"\b(?:(?:it'?s |so )?(?:good|nice|great|glad) to (?:see|hear from|meet|talk to|chat with) you"
    r"|how (?:are|have) you(?: been| doing)?|how'?s it going|what'?s up(?: with you)?"
    r"|talk (?:to you )?(?:soon|later)|see (?:you|ya)(?: soon| later| around)?|take care"
    r"|thank(?:s| you)(?: so much| a lot)?(?: for (?:asking|sharing|the \w+))?"
    r"|(?:good)?bye|have a (?:good|great|nice) (?:day|night|one|time))\b",
    re.IGNORECASE,
)
_STOPWORDS = set(
    "a an the and or but so if then than that that's thats this these those it it's its is "
    "are was were be been being am do does did doing have has had having will would can "
    "could should shall may might must to of in on at for with about from by as up out just "
    "really very too also much many some any anything something everything nothing all there "
    "here what what's how how's who why when where which i i'm i've i'll i'd me my mine myself "
    "you you're you've you'll you'd your yours yourself we we're our us they they're them their "
    "he she him her his hers not no yes yeah yep ok okay oh wow hey hi hello lol haha thanks "
    "thank bye good great cool awesome amazing nice sweet wonderful fantastic lovely incredible "
    "glad super totally definitely absolutely sure now still always ever such own one kind sort "
    "kinda gonna wanna pretty lot lots things thing stuff".split()
)
STOPWORDS = frozenset(_STOPWORDS)  # words that carry no content (also read by etamem.fta.rules)
_WORD_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9'\u2019&-]*")


def strip_filler(sentence: str) -> str:
    """Remove leading interjections, greetings and vocatives, and trailing 'lol'/'haha'."""
    s = sentence.strip()
    for _ in range(6):
        before = s
        s = _LEAD_GREET_NAME_RE.sub("", s, count=1)
        m = _LEAD_INTERJ_RE.match(s)
        if m:
            s = s[m.end():]
            s = _LEAD_VOCATIVE_RE.sub("", s, count=1)  # "Wow, Caroline! ..."
        if s == before:
            break
    s = _TRAIL_INTERJ_RE.sub("", s)
    return s.strip(" \t,;:-~")


def content_words(sentence: str) -> list[str]:
    """Words that carry content: not chit-chat phrases, function words or filler."""
    s = _CHITCHAT_RE.sub(" ", sentence.replace("\u2019", "'"))
    return [w for w in _WORD_RE.findall(s) if w.lower() not in _STOPWORDS]


# --- short sentences worth keeping --------------------------------------------------------
_TRAIL_VOCATIVE_RE = re.compile(rf"\s*,\s*{_NAME}\s*[!.?\u2026~]*$")
_NUMBER_WORDS = set(
    "two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred thousand "
    "million billion dozen".split()
)
_NOT_NAMES = _STOPWORDS | {"god", "omg", "lmao", "xd", "haha", "hahaha", "lol", "ugh", "yay", "aww", "ooh", "omw"}
_TIME_WORD_RE = re.compile(
    r"\b(?:yesterday|today|tonight|tomorrow|ago|weekends?|noon|midnight|january|february|march|april|june|"
    r"july|august|september|october|november|december|monday|tuesday|wednesday|thursday|friday|saturday|"
    r"sunday|(?:last|next|this)\s+(?:week|month|year))\b",
    re.IGNORECASE,
)


def is_salient(sentence: str, participants: Sequence[str] = ()) -> bool:
    """True when `sentence` names something: a name (a capitalised word after the first, other
    than the dialogue's `participants` and their short forms, "Mel" for "Melanie": those are
    mostly vocatives, "Wow, Mel!"), a number (digits or a number word; not the heart "<3"),
    or a date or time expression with another content word beside it ("See you tomorrow!" is
    not enough). Short sentences of this kind are facts, not filler."""
    s = _TRAIL_VOCATIVE_RE.sub("", sentence.replace("\u2019", "'").replace("<3", " "))
    names = [p.lower() for p in participants if p]
    for i, word in enumerate(_WORD_RE.findall(s)):
        low = word.lower()
        if any(ch.isdigit() for ch in word) or low in _NUMBER_WORDS:
            return True
        if (i and word[0].isupper() and low not in _NOT_NAMES and not re.match(r"i(?:'|$)", low)
                and not any(n.startswith(low.split("'")[0]) for n in names)):
            return True
    return bool(_TIME_WORD_RE.search(s)) and len(content_words(s)) >= 2


# --- relative dates -------------------------------------------------------------------------
_WEEKDAYS = {"monday": 0, "tuesday": 1, "wednesday": 2, "thursday": 3, "friday": 4, "saturday": 5,
             "sunday": 6, "mon": 0, "tue": 1, "tues": 1, "thu": 3, "thur": 3, "thurs": 3, "fri": 4}
_COUNT_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
                "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}
_WD_ALT = "|".join(sorted(_WEEKDAYS, key=len, reverse=True))
_REL_DATE_RE = re.compile(
    r"\b(?:(?P<dby>(?:the\s+)?day\s+before\s+yesterday)"
    r"|(?P<dat>(?:the\s+)?day\s+after\s+tomorrow)"
    r"|(?P<yest>yesterday|last\s+night)"
    r"|(?P<today>today|tonight|this\s+(?:morning|afternoon|evening))"
    r"|(?P<tom>tomorrow)"
    rf"|(?P<n>\d{{1,3}}|{'|'.join(_COUNT_WORDS)}|a\s+couple(?:\s+of)?|couple\s+of)\s+(?P<u>day|week|month|year)s?\s+ago"
    r"|(?P<p>last|this\s+past|this|next|previous)\s+(?P<pu>weekend|week|month|year)"
    rf"|(?P<wp>last|this\s+past|past|previous|this|next)\s+(?P<wd>{_WD_ALT})"
    r")(?![\w'\u2019-])(?!\s*\()",
    re.IGNORECASE,
)


def _month_shift(d: date, k: int) -> date:
    y, m = divmod(d.month - 1 + k, 12)
    return date(d.year + y, m + 1, 1)


def _relative_label(m: re.Match[str], today: date) -> str | None:
    """The absolute form of one relative date expression said on `today`."""
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
    p, wd = " ".join(m["wp"].lower().split()), _WEEKDAYS[m["wd"].lower()]
    if p == "next":
        return day((wd - today.weekday()) % 7 or 7)
    if p == "this":
        return day(wd - today.weekday())
    return day(-((today.weekday() - wd) % 7 or 7))


def resolve_relative_dates(sentence: str, when: datetime | None) -> str:
    """Append the absolute date to each relative date expression, read against `when` (the
    turn's timestamp, in its own timezone): 'yesterday' -> 'yesterday (7 May 2023)', 'last
    week' -> 'last week (the week of 1 May 2023)', 'next month' -> 'next month (June 2023)',
    'last Friday' -> 'last Friday (5 May 2023)', 'two years ago' -> 'two years ago (2021)'.
    The original words stay (lexical matches, the time view's cue words)."""
    if when is None or not isinstance(when, datetime):
        return sentence
    today = when.date()

    def fn(m: re.Match[str]) -> str:
        try:
            label = _relative_label(m, today)
        except (OverflowError, ValueError):  # beyond year 1..9999
            return m.group(0)
        return f"{m.group(0)} ({label})" if label else m.group(0)

    return _REL_DATE_RE.sub(fn, sentence)


# --- person rewrite: I -> speaker, you -> addressee, we -> both ----------------------------------
_APOS = "['\u2019]"
_IP = r"(?<![\w.'\u2019-])I"  # "I" not inside a word or "e.i."
_I = _IP + r"(?![\w'\u2019-]|\.\w)"  # bare "I", not "i.e." nor "I-95"
_FIRST_FIXED: list[tuple[re.Pattern[str], str]] = [
    (re.compile(rf"{_IP}{_APOS}m\b", re.I), "{n} is"),
    (re.compile(rf"{_I}\s+am\b", re.I), "{n} is"),
    (re.compile(rf"{_I}\s+was\b", re.I), "{n} was"),
    (re.compile(rf"{_IP}{_APOS}ve\b", re.I), "{n} has"),
]
_FIRST_OLD_VERBS: list[tuple[re.Pattern[str], str]] = [  # conjugate=False: the rewrite before verb agreement
    (re.compile(rf"{_I}\s+have\b", re.I), "{n} has"),
]
_FIRST_MODALS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(rf"{_IP}{_APOS}ll\b", re.I), "{n} will"),
    (re.compile(rf"{_IP}{_APOS}d\b", re.I), "{n} would"),
]
_FIRST_OLD_DO: list[tuple[re.Pattern[str], str]] = [
    (re.compile(rf"{_I}\s+don{_APOS}?t\b", re.I), "{n} doesn't"),
    (re.compile(rf"{_I}\s+do\b", re.I), "{n} does"),
]
_FIRST_OBJECTS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"\bmyself\b", re.I), "{n}"),
    (re.compile(r"\bmine\b", re.I), "{n}'s"),
    (re.compile(r"\bmy\b(?!\.\w)", re.I), "{n}'s"),
    (re.compile(r"\bme\b(?![\w'\u2019]|\.\w)", re.I), "{n}"),
]
_REWRITES = [*_FIRST_FIXED, *_FIRST_OLD_VERBS, *_FIRST_MODALS, *_FIRST_OLD_DO, *_FIRST_OBJECTS,
             (re.compile(_I, re.I), "{n}")]
_BARE_I_RE = re.compile(_I, re.I)

# conjugation of the verb after a singular subject ("Maya love" -> "Maya loves")
_MODALS = set("can could will would shall should may might must ought cannot can't couldn't won't wouldn't "
              "shouldn't mustn't mightn't".split())
# a word before the subject that makes the verb after it a base form or a plural ("did I go",
# "can I ask", "my wife and I love"): no conjugation
_BLOCK_BEFORE = _MODALS | set(
    "do does did don't doesn't didn't dont am is are was were isn't aren't wasn't weren't have has had haven't "
    "hasn't hadn't let make makes made help helps helped watch saw see hear heard nor to".split())
# words before "you" that leave it in subject position ("if you need", "glad you like")
_YOU_SUBJECT_AFTER = set(
    "and but or so that if when whenever because cause since as while before after until till unless though "
    "although where how why what who once than think thought hope guess bet know knew feel felt believe wish "
    "sure glad seems seem said say says mean means".split())
_ADVERBS = set(
    "really just also still always never often usually actually finally totally definitely probably even only "
    "already sometimes seriously truly honestly kinda sorta absolutely certainly generally mostly normally "
    "rarely simply typically literally basically personally especially genuinely sincerely constantly last "
    "occasionally frequently regularly hardly barely nearly almost ever sometime def prob".split())
_LY_VERBS = set("apply reply rely supply fly multiply imply comply ally rally bully tally".split())
_NOT_VERBS = set(
    "and or but nor so too to the a an of in on at for with as if than then now here there myself alone both all "
    "not once again though gonna wanna gotta dunno guys folks two".split())
_PAST_OR_BARE = set(  # irregular past tenses, and verbs whose past is their base form (left as said)
    "went got saw made took had did was were came found gave told felt thought bought brought caught taught left "
    "met ran said sent spent began wrote won lost kept slept heard knew grew drew ate drank swam sang rode drove "
    "flew fell held built paid sold stood understood wore woke broke chose forgot hid became meant fought sought "
    "led fed sat lay laid lit shot stuck struck swore tore threw blew dug hung bent lent dealt dreamt learnt "
    "burnt spelt spoke stole froze shook forgave overcame gotten been done seen taken given read put set cut "
    "let hit hurt quit shut cost spread bet cast split beat burst upset".split())
_EED_VERBS = set("need feed bleed breed speed succeed proceed exceed heed seed weed embed shed wed".split())
_ING_VERBS = set("bring sing ring sting swing cling fling spring string wring".split())
_THIRD_IRREGULAR = {"have": "has", "do": "does", "go": "goes", "be": "is", "am": "is", "are": "is",
                    "were": "was", "don't": "doesn't", "dont": "doesn't", "haven't": "hasn't",
                    "havent": "hasn't", "aren't": "isn't", "weren't": "wasn't"}
_NEXT_WORD_RE = re.compile(rf"\s+([A-Za-z]+(?:{_APOS}[a-z]+)?)(?![\w'\u2019-])")
# "<my|the ... noun | Name | pronoun> and" right before the subject: a compound (plural) subject
_COMPOUND_RE = re.compile(
    r"(?:\b(?i:my|our|your|his|her|their|the|a|an)\s+(?:[\w'\u2019-]+\s+){0,2}"
    r"|\b[A-Z][\w-]*['\u2019]s\s+(?:[\w'\u2019-]+\s+){0,2}|(?<![.!?]\s)\b[A-Z][\w'\u2019-]*\s+"
    r"|\b(?i:me|you|he|she|they|we|him|them|us)\s+)(?i:and|or|&)\s*$")
_PREV_WORD_RE = re.compile(r"([A-Za-z&]+(?:['\u2019][a-z]+)?)[\s]*$")


def third_person(verb: str) -> str:
    """Third-person singular present of a base verb: love -> loves, go -> goes, try -> tries,
    watch -> watches, have -> has, don't -> doesn't."""
    v = verb.replace("\u2019", "'")
    if v.lower() in _THIRD_IRREGULAR:
        return _THIRD_IRREGULAR[v.lower()]
    if v.endswith(("s", "sh", "ch", "x", "z", "o")):
        return v + "es"
    if v.endswith("y") and len(v) > 1 and v[-2].lower() not in "aeiou":
        return v[:-1] + "ies"
    return v + "s"


def _is_adverb(word: str) -> bool:
    w = word.lower()
    return w in _ADVERBS or (len(w) > 4 and w.endswith("ly") and w not in _LY_VERBS)


def _is_base_verb(word: str) -> bool:
    """Whether `word`, right after a subject, reads as a present-tense verb to conjugate."""
    w = word.replace("\u2019", "'")
    if w.lower() in _THIRD_IRREGULAR and w.islower():
        return True
    if not w.isalpha() or not w.islower() or w in _MODALS or w in _NOT_VERBS or w in _PAST_OR_BARE:
        return False
    if w.endswith("ing") and w not in _ING_VERBS:
        return False
    if w.endswith("ed") and w not in _EED_VERBS:
        return False
    if w.endswith("s") and not w.endswith(("ss", "us")):
        return False  # already conjugated, or a plural noun
    return not _is_adverb(w)


def _conjugated_rest(text: str, pos: int) -> tuple[str, int] | None:
    """(text to put after the subject, end of what it replaces) when the subject ending at
    `pos` is followed by a base verb, optionally after one adverb; else None."""
    m = _NEXT_WORD_RE.match(text, pos)
    if m and _is_adverb(m.group(1)):
        m2 = _NEXT_WORD_RE.match(text, m.end())
        if m2 is None:
            return None
        m = m2
    if m is None or not _is_base_verb(m.group(1)):
        return None
    return text[pos:m.start(1)] + third_person(m.group(1)), m.end(1)


def _prev_word(text: str, pos: int) -> str | None:
    """The word right before `pos` (None at the start or after punctuation)."""
    m = _PREV_WORD_RE.search(text[max(0, pos - 40):pos])
    return m.group(1).lower().replace("\u2019", "'") if m else None


def _sub_subject(pattern: re.Pattern[str], text: str, name: str, subject_after: set[str] | None) -> str:
    """Replace each match of `pattern` (a bare subject pronoun) by `name`, conjugating the verb
    after it. `subject_after`: the words after which the pronoun is a subject (None: any word
    outside `_BLOCK_BEFORE`; always at the start or after punctuation)."""
    out: list[str] = []
    last = 0
    for m in pattern.finditer(text):
        if m.start() < last:
            continue
        out.append(text[last:m.start()])
        last = m.end()
        prev = _prev_word(text, m.start())
        if subject_after is not None:
            is_subject = prev is None or prev in subject_after
        elif prev in ("and", "or", "&"):  # "my wife and I go", "Tom and I go" vs "it rains and I go"
            is_subject = not _COMPOUND_RE.search(text[max(0, m.start() - 60):m.start()])
        else:
            is_subject = prev not in _BLOCK_BEFORE
        rest = _conjugated_rest(text, m.end()) if is_subject else None
        out.append(name)
        if rest is not None:
            out.append(rest[0])
            last = rest[1]
    out.append(text[last:])
    return "".join(out)


def _apply(rules: list[tuple[re.Pattern[str], str]], sentence: str, **names: str) -> str:
    def fn(repl: str):
        def sub(m: re.Match[str]) -> str:
            tok = m.group(0)
            if len(tok) > 1 and tok.isupper() and tok.isalpha():  # "ME", "MY", "US": acronyms
                return tok
            return repl.format(**names)
        return sub

    for pattern, repl in rules:
        sentence = pattern.sub(fn(repl), sentence)
    return sentence


def speaker_name(speaker: str) -> str:
    """Display form of a speaker: 'user' -> 'User', names unchanged."""
    speaker = speaker.strip() or "Speaker"
    return speaker[0].upper() + speaker[1:] if speaker.islower() else speaker


def rewrite_first_person(sentence: str, name: str, conjugate: bool = True) -> str:
    """Replace I/me/my/mine/myself (and I'm, I've, I'll, I'd ...) by `name`. With `conjugate`
    the present-tense verb after "I" agrees with the name ("I love" -> "Maya loves", "I try"
    -> "Maya tries", "I don't" -> "Maya doesn't"); modals, past tenses, questions ("can I go")
    and compound subjects ("Tom and I go") are left as they are."""
    if not conjugate:
        return _apply(_REWRITES, sentence, n=name)
    sentence = _apply([*_FIRST_FIXED, *_FIRST_MODALS], sentence, n=name)
    sentence = _sub_subject(_BARE_I_RE, sentence, name, None)
    return _apply(_FIRST_OBJECTS, sentence, n=name)


_YOU = r"(?<![\w'\u2019-])you"
_YOU_PLURAL = r"(?!\s+(?:guys|all|two|both|folks|people|lot)\b)"
_YOU_INVERSION_RE = re.compile(
    rf"\b(are|were|have|do|don{_APOS}?t|aren{_APOS}t|weren{_APOS}t|haven{_APOS}?t)\s+you\b(?![\w'\u2019]){_YOU_PLURAL}",
    re.I)
_YOU_FIXED: list[tuple[re.Pattern[str], str]] = [
    (re.compile(rf"{_YOU}{_APOS}re\b", re.I), "{a} is"),
    (re.compile(rf"{_YOU}{_APOS}ve\b", re.I), "{a} has"),
    (re.compile(rf"{_YOU}{_APOS}ll\b", re.I), "{a} will"),
    (re.compile(rf"{_YOU}{_APOS}d\b", re.I), "{a} would"),
    (re.compile(rf"{_YOU}\s+are\b(?!\s+(?:guys|all|two|both)\b)", re.I), "{a} is"),
    (re.compile(rf"{_YOU}\s+were\b", re.I), "{a} was"),
    (re.compile(r"\byourself\b", re.I), "{a}"),
    (re.compile(r"\byours\b", re.I), "{a}'s"),
    (re.compile(r"\byour\b", re.I), "{a}'s"),
]
# "you" left as said: thanks and greetings, the discourse marker "you know", plural "you guys"
_BARE_YOU_RE = re.compile(
    rf"(?<!\bthank )(?<!\bsee ){_YOU}(?![\w'\u2019-]){_YOU_PLURAL}"
    r"(?!\s+know\s*(?:[,.!?\u2026]|$|what\b))",
    re.I)
_WE_RULES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(rf"(?<![\w'\u2019-])we{_APOS}re\b", re.I), "{w} are"),
    (re.compile(rf"(?<![\w'\u2019-])we{_APOS}ve\b", re.I), "{w} have"),
    (re.compile(rf"(?<![\w'\u2019-])we{_APOS}ll\b", re.I), "{w} will"),
    (re.compile(rf"(?<![\w'\u2019-])we{_APOS}d\b", re.I), "{w} would"),
    (re.compile(r"(?<![\w'\u2019-])we\b(?![\w'\u2019-])", re.I), "{w}"),
    (re.compile(r"(?<![\w'\u2019-])(?<!\blet )us\b(?![\w'\u2019-]|\.\w)", re.I), "{w}"),
    (re.compile(r"\bours\b", re.I), "{wp}"),
    (re.compile(r"\bour\b", re.I), "{wp}"),
]


def rewrite_second_person(sentence: str, addressee: str, conjugate: bool = True) -> str:
    """Replace you/your/yours/yourself (you're, you've, ...) by `addressee`, the other speaker:
    "Did you go?" -> "Did Mel go?", "your dog" -> "Mel's dog", "Are you ...?" -> "Is Mel ...?",
    "if you need" -> "if Mel needs". Left as said: "thank you", "see you", the marker "you
    know", the plural "you guys/all/two/both"."""
    if conjugate:
        def inv(m: re.Match[str]) -> str:
            verb = third_person(m.group(1).lower())
            verb = verb[:1].upper() + verb[1:] if m.group(1)[:1].isupper() else verb
            return f"{verb} {addressee}"
        sentence = _YOU_INVERSION_RE.sub(inv, sentence)
    sentence = _apply(_YOU_FIXED, sentence, a=addressee)
    if conjugate:
        return _sub_subject(_BARE_YOU_RE, sentence, addressee, _YOU_SUBJECT_AFTER)
    return _BARE_YOU_RE.sub(addressee, sentence)


def rewrite_first_plural(sentence: str, group: str, possessive: str | None = None) -> str:
    """Replace we/us (we're, we've, ...) by `group` ("Maya and Jonas") and our/ours by
    `possessive` (default "<group>'s"); "let us" and "US" stay."""
    return _apply(_WE_RULES, sentence, w=group, wp=possessive or f"{group}'s")


WE_FORMS = ("others", "pair")


def first_plural_group(name: str, other: str | None, form: str = "others") -> tuple[str, str]:
    """(group, possessive) that we/us and our/ours stand for when `name` says them to `other`.

    "others" (the default): "Maya and others", "Maya's" ("our kids" -> "Maya's kids"). In a
    dialogue "we" is more often the speaker with family, friends or a team, or people in
    general, than the two speakers. "pair": "Maya and Jonas", "Maya and Jonas's" (the speaker
    and others when `other` is unknown)."""
    if form not in WE_FORMS:
        raise ValueError(f"we form {form!r}: expected one of {WE_FORMS}")
    if form == "pair" and other:
        return f"{name} and {other}", f"{name} and {other}'s"
    return f"{name} and others", f"{name}'s"


def addressee_of(turn: Turn, context: Sequence[Turn]) -> str | None:
    """The one other speaker in `context` (a two-person dialogue), or None when there is none
    or several."""
    others = {speaker_name(t.speaker) for t in context if t.speaker != turn.speaker}
    return others.pop() if len(others) == 1 else None


def _capitalise(text: str) -> str:
    return text[:1].upper() + text[1:] if text else text


_CAPTION_PREFIX_RE = re.compile(r"^(?:a |an )?(?:photo(?:graph|graphy)?|picture|image|pic) of\s+", re.I)


def caption_sentence(turn: Turn) -> str | None:
    """'<speaker> shared a photo of <caption>.' when the turn carries a photo caption."""
    caption = turn.extra.get("blip_caption") if turn.extra else None
    if not isinstance(caption, str) or not caption.strip():
        return None
    caption = _CAPTION_PREFIX_RE.sub("", caption.strip())
    caption = caption.rstrip(" .")
    return f"{speaker_name(turn.speaker)} shared a photo of {caption}." if caption else None


class RuleExtractor:
    """Embedded default extractor: deterministic, no model.

    Per sentence: strip filler; keep it when it has `min_words` content words, or fewer (at
    least one) and a name, number or date (`keep_short`: "Her name is Pixel."), such a short
    sentence joining the unit before it in the turn (`attach_short`: "... a grey cat. Her name
    is Pixel."); rewrite we/us/our (`resolve_we`, `we_form`, see `first_plural_group`) and
    I/me/my to the speaker's name with verb agreement (`conjugate`: "I love" -> "Maya loves").
    Opt-in: you/your -> the other speaker (`resolve_you`; the one other speaker in `context`),
    relative dates given their absolute date from the turn's timestamp (`resolve_dates`:
    "yesterday (7 May 2023)"), and "<speaker>: " before units that do not name the speaker
    (`attribute`).

    Defaults from LoCoMo dev retrieval (recall@20, no LLM): "we" -> "<speaker> and others"
    helps most; short sentences and verb agreement help a little. "you" -> the addressee costs
    3-4 points (one speaker's units then name the other, whom questions ask about); the date
    annotations cost about 0.01 on the full system (the answer prompt already dates each unit);
    `attribute` helps the flat and no-fallback rankings (+0.02-0.03) but costs the full
    system 0.007.
    """

    def __init__(self, min_words: int = 3, *, keep_short: bool = True, attach_short: bool = True,
                 resolve_you: bool = False, resolve_we: bool = True, we_form: str = "others",
                 resolve_dates: bool = False, conjugate: bool = True, attribute: bool = False) -> None:
        if min_words < 0:
            raise ValueError("min_words must be >= 0")
        if we_form not in WE_FORMS:
            raise ValueError(f"we_form {we_form!r}: expected one of {WE_FORMS}")
        self.min_words = min_words
        self.keep_short = keep_short
        self.attach_short = attach_short
        self.resolve_you = resolve_you
        self.resolve_we = resolve_we
        self.we_form = we_form
        self.resolve_dates = resolve_dates
        self.conjugate = conjugate
        self.attribute = attribute

    def extract(self, turn: Turn, context: Sequence[Turn] = ()) -> list[str]:
        """Atomic units for `turn`; [] when the turn is only filler. `context`: the turns
        before it in the session (they name the addressee)."""
        name = speaker_name(turn.speaker)
        other = addressee_of(turn, context)
        participants = sorted({name, *(speaker_name(t.speaker) for t in context)})
        units: list[str] = []
        for sentence in split_sentences(turn.text or ""):
            kept = strip_filler(sentence)
            n_words = len(content_words(kept)) if kept else 0
            short = n_words < self.min_words
            if not kept or (short and not (self.keep_short and n_words and is_salient(kept, participants))):
                continue
            if self.resolve_dates:
                kept = resolve_relative_dates(kept, turn.timestamp)
            # first plural and second person first: "you" must not meet the rewritten "I"
            if self.resolve_we:
                kept = rewrite_first_plural(kept, *first_plural_group(name, other, self.we_form))
            if self.resolve_you and other:
                kept = rewrite_second_person(kept, other, self.conjugate)
            unit = _capitalise(rewrite_first_person(kept, name, self.conjugate))
            if self.attribute and not re.search(rf"(?<!\w){re.escape(name)}(?!\w)", unit):
                unit = f"{name}: {unit}"
            if self.attach_short and short and units:
                units[-1] = f"{units[-1]} {unit}"  # "... a grey cat. Her name is Pixel.": one unit
            else:
                units.append(unit)
        caption = caption_sentence(turn)
        if caption:  # the caption is content, never filler
            units.append(caption)
        return units


# --- LLM extraction -----------------------------------------------------------------------
def prompt_datetime(ts: Any) -> str:
    """Readable date for prompts, e.g. 'Monday, 8 May 2023, 13:56 UTC'."""
    if ts is None:
        return "unknown"
    try:
        zone = f" {ts.tzname()}" if ts.tzinfo is not None and ts.tzname() else ""
        return f"{ts.strftime('%A')}, {ts.day} {ts.strftime('%B %Y, %H:%M')}{zone}"
    except AttributeError:
        return str(ts)


def turn_text(turn: Turn) -> str:
    """The turn's text with its photo caption, as shown to the LLM."""
    caption = turn.extra.get("blip_caption") if turn.extra else None
    text = (turn.text or "").strip()
    if isinstance(caption, str) and caption.strip():
        text = f"{text} [shared photo: {caption.strip()}]".strip()
    return text


class ExtractionUnavailable(LLMUnavailable):
    """The LLM gave no reply for a turn (see `LLMUnavailable`): nothing was extracted; the
    turn is to be extracted again later, not by the rule extractor."""


class Extraction(NamedTuple):
    """Units of one turn and whether they came from the rule fallback (then not the LLM's
    output: caches keyed by the LLM extractor must not keep them)."""

    units: list[str]
    fallback: bool = False


def _facts_from(answer: Any) -> list[str] | None:
    """Fact strings from an LLM answer, or None when its shape is unusable."""
    if isinstance(answer, dict):
        answer = answer.get("facts")
    if not isinstance(answer, list):
        return None
    facts = []
    for item in answer:
        if isinstance(item, dict):  # tolerate [{"fact": "..."}]
            item = item.get("fact", item.get("text"))
        if isinstance(item, str) and item.strip():
            facts.append(item.strip())
    if answer and not facts:
        return None  # a non-empty list with nothing usable in it is malformed
    return facts


def _checked_facts(answer: Any) -> list[str]:
    facts = _facts_from(answer)
    if facts is None:
        raise ValueError('expected {"facts": [strings]} or a list of strings')
    return facts


class LLMExtractor:
    """One LLM call per turn with the style's prompt.

    `llm` needs `complete_json(messages, stage=..., validate=...)` returning parsed JSON
    (retries, JSON repair and the response cache live in the client; see `LLMClient`).
    - no reply (`LLMUnavailable`: unreachable, timeouts, 429/5xx after retries, rejected):
      `ExtractionUnavailable` is raised, nothing is extracted (the caller keeps the turn
      pending; `Memory.stats(space)["extraction"]["unavailable"]` counts these);
    - an unusable reply (`LLMError`: not JSON after the repair round, not of the form
      {"facts": [...]}, a refusal, no text): the rule extractor's units for that turn,
      counted in `fallback_turns` / `fallback_units` (`extract_result` flags them);
    - any other exception is a bug and propagates.
    An answer of zero facts is valid, not a fallback. Thread-safe (the counters are locked).
    """

    CONTEXT_TURNS = 4

    def __init__(self, llm: Any, *, style: str = "locomo", fallback: RuleExtractor | None = None) -> None:
        if style not in STYLES:
            raise ValueError(f"extraction style {style!r}: expected one of {STYLES}")
        self.llm = llm
        self.style = style
        self.prompt_name = f"extract_{style}"
        load_prompt(self.prompt_name)  # fail early when the template is missing
        self.fallback = fallback if fallback is not None else RuleExtractor()
        self._lock = threading.Lock()
        self._stats = {"turns": 0, "llm_units": 0, "fallback_turns": 0, "fallback_units": 0}

    @property
    def stats(self) -> dict[str, int]:
        with self._lock:
            return dict(self._stats)

    def build_messages(self, turn: Turn, context: Sequence[Turn] = ()) -> list[dict[str, str]]:
        recent = list(context)[-self.CONTEXT_TURNS:]
        ctx = "\n".join(f"{speaker_name(t.speaker)}: {turn_text(t)}" for t in recent) or "(none)"
        prompt = render_prompt(
            self.prompt_name,
            speaker=speaker_name(turn.speaker),
            text=turn_text(turn),
            date=prompt_datetime(turn.timestamp),
            context=ctx,
        )
        return [{"role": "user", "content": prompt}]

    def extract(self, turn: Turn, context: Sequence[Turn] = ()) -> list[str]:
        """Units for `turn` (see the class docstring; raises `ExtractionUnavailable`)."""
        return self.extract_result(turn, context).units

    def extract_result(self, turn: Turn, context: Sequence[Turn] = ()) -> Extraction:
        """`Extraction(units, fallback)`: `fallback` is True when the LLM's reply was unusable
        and the rule extractor made the units. Raises `ExtractionUnavailable` on no reply."""
        messages = self.build_messages(turn, context)
        facts: list[str] | None = None
        try:
            facts = _facts_from(self.llm.complete_json(messages, stage="extract", validate=_checked_facts))
            if facts is None:  # an llm object that does not apply `validate`
                logger.warning("extraction: unusable LLM answer for turn %s; rule fallback", turn.turn_id)
        except LLMUnavailable as exc:
            raise ExtractionUnavailable(f"no LLM reply for turn {turn.turn_id}: {exc}") from exc
        except LLMError as exc:
            logger.warning("extraction: unusable LLM reply for turn %s (%s: %s); rule fallback",
                           turn.turn_id, type(exc).__name__, exc)
        if facts is None:
            units = self.fallback.extract(turn, context)
            with self._lock:
                self._stats["turns"] += 1
                self._stats["fallback_turns"] += 1
                self._stats["fallback_units"] += len(units)
            return Extraction(units, True)
        with self._lock:
            self._stats["turns"] += 1
            self._stats["llm_units"] += len(facts)
        return Extraction(facts, False)
