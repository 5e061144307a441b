"""Grounded units: whether a unit a model wrote is supported by the turn(s) it came from.

A small model asked to extract facts may copy the prompt's example sentence with the speaker's
name put in ("Jonas feels relieved because the adoption interview went well" for a turn about
something else), invent a name, number, date or event the turn never mentions, or give the
speaker's own news to the other participant ("I ran my first half-marathon", said by Maya, ->
"Jonas ran his first half-marathon"). `check_unit` catches these three, in this order:

- `copied_example`: the unit holds a prompt placeholder ("<EVENT>", "PERSON_A"), or its words
  follow an example sentence of the prompt (word trigrams shared with the example cover at least
  `COPY_COVERAGE` of the unit's words, at least `COPY_MIN_WORDS` of them) and at least
  `COPY_UNSUPPORTED` of those copied content words are in neither the source turns nor their
  context (an example that the turn itself supports is no copy);
- `swapped_speaker`: the unit's subject (its first word, a participant: "Jonas", "The user") is
  not the speaker of the source turn(s) it draws on, the source turns do not name that person,
  and the unit's content words are found in the source's first-person sentences ("I", "my",
  "me") more often than in its second-person ones ("you", "your") and in that person's own
  context turns;
- `swapped_speaker` also when the subject is the speaker but the unit says what the speaker
  asked or said of the listener ("Are you still training for the Lisbon half marathon?", said by
  Jonas, -> "Jonas is training for the Lisbon half marathon"): the unit names no other
  participant and its content words are found in the turn's second-person sentences, not in its
  first-person ones;
- `other_turn`: the unit restates an earlier turn rather than its own (for "Aww, a cat! How is
  she settling in?" -> "Jonas adopted a grey cat named Pixel", Maya's news of the turn before):
  fewer than half of its content words are in the source turns, and one context turn gives at
  least `OTHER_TURN_RATIO` times as many (and at least two), said by someone else or, when
  the unit takes nothing from its own turn, by anyone. Context that resolves a pronoun ("She
  hides under the sofa" -> "Pixel hides under the sofa") or continues the speaker's own story
  ("On 1 June" -> "Jonas starts at the Marine Research Institute on 1 June") passes;
- `invented_entity`: a name (a capitalised word inside a sentence, or a sentence-initial one
  with "'s"), a number, or a date, month, weekday or year that neither the source turns, nor
  their context, nor the participants' names give; or at least `INVENTED_MIN` content words
  that make at least `INVENTED_SHARE` of the unit's content words and are found in none of them.

The legitimate rewrites of an extractor pass: "I" / "my" -> the speaker's name (participants'
names are always known), relative dates made absolute ("yesterday" -> "7 May 2023": dates the
turn's relative expressions resolve to, see `etamem.extraction.relative_dates`, within
`DATE_SLACK_DAYS`, the session date itself, and, when the source holds a vaguer time expression
("a few weeks ago", "in the spring"), any date within `VAGUE_DAYS` of the session date), word
forms and paraphrase (words compared by their shared `stem`, a common prefix of 5 letters,
irregular past forms, the extractor's reporting verbs "thinks", "believes", "mentioned" ...).

Pure and deterministic: no model, no I/O.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Iterable, Sequence

from etamem.extraction.relative_dates import REL_DATE_RE, resolve_relative_dates
from etamem.extraction.stems import GENERIC_WORDS, STOPWORDS, stem

__all__ = [
    "COPY_COVERAGE", "COPY_MIN_WORDS", "COPY_UNSUPPORTED", "DATE_SLACK_DAYS", "Grounding", "INVENTED_MIN",
    "INVENTED_SHARE", "LEGACY_EXAMPLES", "OTHER_TURN_RATIO", "REASONS", "Source", "VAGUE_DAYS", "check_unit", "check_units", "known_name", "prompt_examples"]

REASONS = ("copied_example", "invented_entity", "swapped_speaker", "other_turn")

COPY_COVERAGE = 0.5     # share of the unit's words covered by trigrams of one example sentence
COPY_MIN_WORDS = 4      # ... and at least this many of them
COPY_UNSUPPORTED = 2    # ... of which at least this many content words the source does not give
INVENTED_MIN = 3        # unsupported content words (stems) that make an invented unit ...
INVENTED_SHARE = 0.5    # ... when they are at least this share of its content words
DATE_SLACK_DAYS = 3     # a resolved relative date may be off by this many days
VAGUE_DAYS = 400        # a vague time expression ("a few weeks ago") allows dates this near the session date
OTHER_TURN_RATIO = 2    # a context turn giving this many times the unit's words its own turn gives: another turn's fact

# Example sentences of earlier versions of the prompts: a model that learnt them (or a template
# still installed elsewhere) writes them again; their copies are caught like a current example's.
LEGACY_EXAMPLES = (
    "<NAME> feels relieved because <EVENT> went well",
    "feels relieved because the adoption interview went well",
    "believes that art helps people heal",
    "life is too short to wait",
    "art helps people heal",
    "the other person went to a concert in Boston",
    "Did you enjoy the concert in Boston?",
    "The user asked for a riddle about time.",
    "The user bought running shoes for the marathon in June",
)


@dataclass(frozen=True)
class Grounding:
    """The verdict on one unit: `accepted`, else `reason` (one of `REASONS`) and a `detail`
    naming what was not supported. Truthy when accepted."""

    accepted: bool
    reason: str | None = None
    detail: str = ""

    def __bool__(self) -> bool:
        return self.accepted


@dataclass(frozen=True)
class Source:
    """What a unit may draw on: the source turns as (speaker, text) — the turn's text with its
    photo caption, as the model saw it (`turn_text`); the speaker as units name it ("Maya",
    "the user") —, the context turns the model was given, the participants' names, the prompt's
    example sentences (`prompt_examples`) and the time the source was said (dates resolve
    against it)."""

    turns: tuple[tuple[str, str], ...]
    context: tuple[tuple[str, str], ...] = ()
    participants: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()
    when: datetime | None = None
    _cache: dict = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def of(cls, speaker: str, text: str, context: Iterable[tuple[str, str]] = (), participants: Iterable[str] = (),
           examples: Iterable[str] = (), when: datetime | None = None) -> "Source":
        """A source of one turn."""
        return cls(((speaker, text),), tuple(context), tuple(participants), tuple(examples), when)


# --- words ---------------------------------------------------------------------------------
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9'\u2019-]*")
_PLACEHOLDER = re.compile(r"<\s*[A-Za-z][A-Za-z0-9_ -]*>|\b[A-Z]{2,}_[A-Z0-9]+\b|\{[a-z_]+\}")
_QUOTED = re.compile(r"\"([^\"{}]{1,240})\"|\u201c([^\u201d{}]{1,240})\u201d")
_SENTENCE_START = re.compile(r"(?:^\s*|[.!?;:]\s+|[(\"']\s*)$")
_IRREGULAR = {
    "ran": "run", "bought": "buy", "took": "take", "made": "make", "saw": "see", "seen": "see", "ate": "eat",
    "eaten": "eat", "met": "meet", "felt": "feel", "thought": "think", "taught": "teach", "wrote": "write",
    "written": "write", "drove": "drive", "driven": "drive", "flew": "fly", "flown": "fly", "swam": "swim",
    "sang": "sing", "sung": "sing", "won": "win", "lost": "lose", "left": "leave", "began": "begin",
    "begun": "begin", "spent": "spend", "sent": "send", "built": "build", "kept": "keep", "sold": "sell",
    "told": "tell", "paid": "pay", "found": "find", "brought": "bring", "caught": "catch", "chose": "choose",
    "chosen": "choose", "grew": "grow", "grown": "grow", "drew": "draw", "drawn": "draw", "fell": "fall",
    "fallen": "fall", "held": "hold", "gave": "give", "given": "give", "broke": "break", "broken": "break",
    "spoke": "speak", "spoken": "speak", "wore": "wear", "worn": "wear", "woke": "wake", "stood": "stand",
    "heard": "hear", "knew": "know", "known": "know", "rode": "ride", "ridden": "ride", "hid": "hide",
    "hidden": "hide", "slept": "sleep", "fed": "feed", "led": "lead", "read": "read", "hurt": "hurt",
    "struck": "strike", "sat": "sit", "dug": "dig", "froze": "freeze", "frozen": "freeze", "shook": "shake",
    "stole": "steal", "forgot": "forget", "forgotten": "forget", "understood": "understand", "meant": "mean",
    "lent": "lend", "bent": "bend", "lit": "light", "fought": "fight", "sought": "seek", "threw": "throw",
    "thrown": "throw", "blew": "blow", "became": "become", "came": "come", "went": "go", "gone": "go",
    "did": "do", "done": "do", "had": "have", "has": "have", "was": "be", "were": "be", "been": "be",
}
# words an extractor adds of its own when it rewrites a turn (reporting verbs, roles, connectives)
_VOCAB = {stem(w) for w in (
    "feel feels felt feeling think thinks thought believe believes believed plan plans planned planning want wants "
    "wanted like likes liked enjoy enjoys enjoyed mention mentions mentioned say says said tell tells told ask asks "
    "asked express expresses expressed hope hopes hoped wish wishes wished consider considers considered intend "
    "intends intended decide decides decided state states stated describe describes described note notes noted "
    "recommend recommends recommended suggest suggests suggested advise advises advised explain "
    "explains explained provide provides provided request requests requested wonder wonders "
    "wondered reply replies replied answer answers answered agree agrees agreed because due reason user assistant "
    "speaker person people other others someone something conversation chat message question topic currently "
    "recently going able unable including include includes included called named respond responded "
    "apparently possibly also".split()
)}
_NUMBER_WORDS = {"zero": 0, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
                 "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14,
                 "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19, "twenty": 20,
                 "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90,
                 "hundred": 100, "thousand": 1000, "dozen": 12, "couple": 2, "pair": 2, "twice": 2, "both": 2,
                 "once": 1, "single": 1, "third": 3, "fourth": 4, "fifth": 5}
_CARDINALS = {w: n for w, n in _NUMBER_WORDS.items() if w not in (
    "couple", "pair", "twice", "both", "once", "single", "third", "fourth", "fifth")}  # what a unit's words count
_MONTHS = {m: i for i, m in enumerate(
    "january february march april may june july august september october november december".split(), 1)}
_MONTHS.update({m[:3]: i for m, i in list(_MONTHS.items())})
_MONTHS["sept"] = 9
_WEEKDAYS = {d: i for i, d in enumerate("monday tuesday wednesday thursday friday saturday sunday".split())}
_MONTH_ALT = "|".join(sorted(_MONTHS, key=len, reverse=True))
_ORD = r"(?:st|nd|rd|th)?"
_DATE_RES = (  # (pattern, group names in order y / m / d)
    (re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b"), "ymd"),
    (re.compile(rf"\b(\d{{1,2}}){_ORD}\s+(?:of\s+)?({_MONTH_ALT})\.?,?\s+(\d{{4}})\b", re.I), "dmy"),
    (re.compile(rf"\b({_MONTH_ALT})\.?\s+(\d{{1,2}}){_ORD},?\s+(\d{{4}})\b", re.I), "mdy"),
    (re.compile(rf"\b(\d{{1,2}}){_ORD}\s+(?:of\s+)?({_MONTH_ALT})\b\.?", re.I), "dm"),
    (re.compile(rf"\b({_MONTH_ALT})\.?\s+(\d{{1,2}}){_ORD}\b(?!\s*(?:hours?|minutes?|kilo|km|miles?|%))", re.I), "md"),
    (re.compile(rf"\b({_MONTH_ALT})\.?,?\s+(?:of\s+)?(\d{{4}})\b", re.I), "my"),
    (re.compile(r"\b(\d{4})s?\b"), "y"),
)
_TIME_VAGUE = re.compile(
    r"\b(?:ago|recent(?:ly)?|last|next|this|since|until|till|before|after|earlier|later|soon|past|previous|upcoming|"
    r"coming|few|couple|several|weeks?|months?|years?|decades?|days?|weekends?|"
    r"spring|summer|autumn|fall|winter|christmas|easter|holidays?|birthday|anniversary|"
    r"monday|tuesday|wednesday|thursday|friday|saturday|sunday|january|february|march|april|may|june|july|august|"
    r"september|october|november|december|when\s+(?:i|we)\s+was|when\s+(?:i|we)\s+were)\b", re.I)
_YEARS_VAGUE = re.compile(r"\b(?:years?|decades?|ago|since|grew\s+up|childhood|kid|young|college|school)\b", re.I)
# a name said to its bearer: "Jonas! ...", "Hi Maya, ...", "..., Mel." (not a mention of them)
_VOCATIVE = re.compile(
    r"(?:^|(?<=[.!?\u2026]\s)|\b(?i:hi|hey|hello|thanks|thank you|bye|morning|oh|wow|congrats|yes|no|ok|okay)"
    r",?\s+)([A-Z][a-z]+)(?=\s*[!,.?\u2026]|\s*$)|,\s*([A-Z][a-z]+)(?=\s*[!.?\u2026]*\s*$)", re.M)
_PHOTO = re.compile(r"\b(?:photos?|pictures?|pics?|images?|selfies?)\b", re.I)
_FIRST_PERSON = re.compile(r"\b(?:i|me|my|mine|myself|i'm|i've|i'll|i'd)\b", re.I)
_SECOND_PERSON = re.compile(r"\b(?:you|your|yours|yourself|you're|you've|you'll|you'd|u|ur)\b", re.I)


def _norm(word: str) -> str:
    w = word.lower().replace("\u2019", "'").strip("'-")
    return w[:-2] if w.endswith("'s") else w


def _stem(word: str) -> str:
    w = _norm(word)
    return stem(_IRREGULAR.get(w, w))


def _words(text: str) -> list[str]:
    return [_norm(w) for w in _WORD.findall(text.replace("\u2019", "'"))]


def _parts(word: str) -> list[str]:
    """A hyphenated word and its parts ("half-marathon", "half", "marathon")."""
    parts = [p for p in word.split("-") if p]
    return [word, *parts] if len(parts) > 1 else [word]


def _is_content(word: str) -> bool:
    return (len(word) >= 3 and word not in STOPWORDS and word not in GENERIC_WORDS and not any(c.isdigit() for c in word)
            and word not in _NUMBER_WORDS and word not in _MONTHS and word not in _WEEKDAYS)


def _similar(a: str, b: str) -> bool:
    if a == b:
        return True
    n = min(len(a), len(b))
    if n >= 4 and (a.startswith(b) or b.startswith(a)):
        return True
    k = 0
    while k < n and a[k] == b[k]:
        k += 1
    return k >= 5


def _numbers(words: Iterable[str], vocabulary: dict[str, int] = _NUMBER_WORDS) -> set[int]:
    out = {0, 1}
    for w in words:
        for p in _parts(w):
            digits = re.match(r"^(\d+)(?:st|nd|rd|th|s|k|km|m|h|pm|am|%)?$", p.replace(",", ""))
            if digits:
                out.add(int(digits.group(1)))
            elif p in vocabulary:
                out.add(vocabulary[p])
    return out


def prompt_examples(prompt: str) -> tuple[str, ...]:
    """The example sentences of a rendered prompt: its double-quoted phrases of at least three
    words (a JSON answer form's fields as well), plus `LEGACY_EXAMPLES`."""
    found = []
    for m in _QUOTED.finditer(prompt):
        phrase = " ".join((m.group(1) or m.group(2) or "").split())
        if len([w for w in _WORD.findall(_PLACEHOLDER.sub(" ", phrase))]) >= 3 or _PLACEHOLDER.search(phrase):
            found.append(phrase)
    return tuple(dict.fromkeys([*found, *LEGACY_EXAMPLES]))


# --- the source's support -----------------------------------------------------------------------
class _Support:
    """What a source gives: words, stems, numbers, names and dates (built once per `Source`)."""

    def __init__(self, src: Source) -> None:
        texts = [t for _, t in src.turns] + [t for _, t in src.context]
        names = [p for p in src.participants if p] + [s for s, _ in (*src.turns, *src.context) if s]
        all_text = "\n".join([*texts, *names])
        self.words = set()
        for w in _words(all_text):
            self.words.update(_parts(w))
        self.stems = {_stem(w) for w in self.words}
        self.numbers = _numbers(self.words)
        addressed = [m.group(1) or m.group(2) for _, t in src.turns for m in _VOCATIVE.finditer(t)]
        addressed = [n for n in addressed if n.lower() not in STOPWORDS]
        self.people = {_person(n) for n in [*names, *addressed] if n}
        self.people_words = {w for n in names for w in _words(n)}
        self.months = {_MONTHS[w] for w in self.words if w in _MONTHS and (len(w) > 3 or w in ("may",))}
        self.weekdays = {_WEEKDAYS[w] for w in self.words if w in _WEEKDAYS}
        self.turn_stems = _stems_of(t for _, t in src.turns)
        self.context_stems = [(speaker, _stems_of([t])) for speaker, t in src.context]
        self.when = src.when
        # a time expression that `resolve_relative_dates` does not resolve ("a few weeks ago", "in the spring")
        self.vague = any(_TIME_VAGUE.search(REL_DATE_RE.sub(" ", t)) for t in texts)
        self.years_vague = any(_YEARS_VAGUE.search(t) for t in texts)
        self.days: set[date] = set()  # the session's day (+-1) and the days its relative dates name
        self.near_days: set[date] = set()  # ... and those within DATE_SLACK_DAYS of a relative date
        self.month_set: set[tuple[int, int]] = set()
        self.years: set[int] = {n for n in self.numbers if 1000 <= n <= 2999}
        if isinstance(src.when, datetime):
            anchor = src.when.date()
            self.days.update(anchor + timedelta(days=k) for k in (-1, 0, 1))
            for text in texts:
                self._derive(text, src.when)
            self.near_days.update(self.days)
            for d in self.days - {anchor + timedelta(days=k) for k in (-1, 0, 1)}:
                self.near_days.update(d + timedelta(days=k) for k in range(-DATE_SLACK_DAYS, DATE_SLACK_DAYS + 1))
            self.month_set.update((d.year, d.month) for d in self.near_days)
            self.years.update(d.year for d in self.days)
            self.years.update(y for y, _ in self.month_set)

    def _derive(self, text: str, when: datetime) -> None:
        """Dates the text's relative expressions resolve to (as `resolve_relative_dates` writes them)."""
        for m in REL_DATE_RE.finditer(text):
            resolved = resolve_relative_dates(m.group(0), when)
            label = resolved[len(m.group(0)):].strip(" ()")
            if not label:
                continue
            weekday = bool(m["wd"] or m["wdo"])  # "last Sunday": this week's or the one before, read either way
            for y, mo, d in _dates_in(label):
                if d and mo and y:
                    first = date(y, mo, d)
                    span = 2 if "weekend" in label else 7 if "week" in label else 1
                    self.days.update(first + timedelta(days=k) for k in range(-1 if span == 2 else 0, span))
                    if weekday:
                        self.days.update((first - timedelta(days=7), first + timedelta(days=7)))
                elif mo and y:
                    self.month_set.add((y, mo))
                elif y:
                    self.years.add(y)

    def supported(self, word: str) -> bool:
        s = _stem(word)
        if word in self.words or s in self.stems or s in _VOCAB:
            return True
        return any(_similar(s, t) for t in self.stems)

    def day_ok(self, d: date) -> bool:
        if d in self.near_days:
            return True
        return self.vague and self.when is not None and abs((d - self.when.date()).days) <= VAGUE_DAYS

    def month_ok(self, y: int | None, mo: int) -> bool:
        if mo in self.months:
            return True
        if y is None:
            return any(m == mo for _, m in self.month_set) or (self.vague and self.when is not None)
        if (y, mo) in self.month_set:
            return True
        if self.vague and self.when is not None:
            return abs((date(y, mo, 15) - self.when.date()).days) <= VAGUE_DAYS
        return False

    def year_ok(self, y: int) -> bool:
        if y in self.years or y in self.numbers:
            return True
        if self.when is None:
            return self.vague
        span = 15 if self.years_vague else 1 if self.vague else 0
        return abs(y - self.when.year) <= span


def _stems_of(texts: Iterable[str]) -> set[str]:
    return {_stem(p) for t in texts for w in _words(t) for p in _parts(w)}


def _hits(unit_stems: Iterable[str], stems: set[str]) -> int:
    """How many of `unit_stems` `stems` gives (the same stem or a similar one)."""
    return sum(1 for s in unit_stems if s in stems or any(_similar(s, t) for t in stems))


def _person(name: str) -> str:
    n = name.strip().lower()
    return n[4:] if n.startswith("the ") else n


def _dates_in(text: str) -> list[tuple[int | None, int | None, int | None]]:
    """(year, month, day) of each date mention in `text`, without overlaps, longest forms first."""
    out, taken = [], []
    for pattern, order in _DATE_RES:
        for m in pattern.finditer(text):
            if any(m.start() < e and s < m.end() for s, e in taken):
                continue
            vals = dict(zip(order, m.groups()))
            y = int(vals["y"]) if vals.get("y") else None
            mo_text = vals.get("m")
            mo = (int(mo_text) if mo_text.isdigit() else _MONTHS.get(mo_text.lower().rstrip("."))) if mo_text else None
            d = int(vals["d"]) if vals.get("d") else None
            if order == "y" and not (1000 <= (y or 0) <= 2999):
                continue
            if mo is not None and not 1 <= mo <= 12 or d is not None and not 1 <= d <= 31:
                continue
            if mo_text and not mo_text.isdigit() and not mo_text[0].isupper():
                continue  # "may 5" in lower case: the verb more likely than the month
            taken.append((m.start(), m.end()))
            out.append((y, mo, d))
    return out


def _date_spans(text: str) -> list[tuple[int, int, tuple[int | None, int | None, int | None]]]:
    spans, taken = [], []
    for pattern, order in _DATE_RES:
        for m in pattern.finditer(text):
            if any(m.start() < e and s < m.end() for s, e in taken):
                continue
            got = _dates_in(m.group(0))
            if not got:
                continue
            taken.append((m.start(), m.end()))
            spans.append((m.start(), m.end(), got[0]))
    return spans


# --- the three checks ---------------------------------------------------------------------------
def _copied(unit: str, src: Source, sup: _Support) -> str | None:
    leak = _PLACEHOLDER.search(unit)
    if leak:
        return f"prompt placeholder {leak.group(0)!r}"
    words = _words(unit)
    if len(words) < COPY_MIN_WORDS:
        return None
    stems = [_stem(w) for w in words]  # "feel relieved because" repeats "feels relieved because"
    for example in src.examples:
        grams = set()
        for piece in _PLACEHOLDER.split(example):
            ew = [_stem(w) for w in _words(piece)]
            grams.update(tuple(ew[i:i + 3]) for i in range(len(ew) - 2))
        covered = set()
        for i in range(len(words) - 2):
            gram = tuple(words[i:i + 3])
            if tuple(stems[i:i + 3]) in grams:
                covered.update((i, i + 1, i + 2))
                # one phrase of an example is enough when it brings a word the source does not give
                # ("feels relieved because" where nobody said relieved)
                loose = [w for w in gram if _is_content(w) and not sup.supported(w) and w not in sup.people_words]
                if loose:
                    return (f"repeats the prompt's example phrase {' '.join(gram)!r} "
                            f"({', '.join(loose)} not in the turn)")
        if len(covered) < COPY_MIN_WORDS or len(covered) < COPY_COVERAGE * len(words):
            continue
        unsupported = sorted({words[i] for i in covered if _is_content(words[i]) and not sup.supported(words[i])
                              and words[i] not in sup.people_words})
        if len(unsupported) >= COPY_UNSUPPORTED:
            return f"follows the prompt's example {example!r} ({', '.join(unsupported)} not in the turn)"
    return None


def _invented(unit: str, sup: _Support) -> str | None:
    text = unit.replace("\u2019", "'")
    spans = _date_spans(text)
    for _, _, (y, mo, d) in spans:
        if y and mo and d:
            try:
                day = date(y, mo, d)
            except ValueError:
                return f"date {d} {mo} {y} does not exist"
            literal = y in sup.numbers and mo in sup.months and d in sup.numbers
            if not (literal or sup.day_ok(day)):
                return f"date {format(day, '%d %B %Y').lstrip('0')}"
        elif mo and d:
            literal = mo in sup.months and d in sup.numbers
            if not (literal or any(sup.day_ok(date(yy, mo, d)) for yy in _years_near(sup) if _valid(yy, mo, d))):
                return f"date {d} {_month_name(mo)}"
        elif mo and y:
            if not (sup.month_ok(y, mo) and (sup.year_ok(y) or (y, mo) in sup.month_set)):
                return f"month {_month_name(mo)} {y}"
        elif y and not sup.year_ok(y):
            return f"year {y}"
    rest = text
    for s, e, _ in sorted(spans, reverse=True):
        rest = rest[:s] + " " * (e - s) + rest[e:]
    tokens = list(_WORD.finditer(rest))
    if _PHOTO.search(rest) and not any(w in sup.words for w in ("photo", "picture", "pic", "image", "photos",
                                                                  "pictures", "pics", "images", "selfie")):
        return "a photo the turn does not share"
    for m in tokens:
        raw = m.group(0)
        w = _norm(raw)
        if w in _WEEKDAYS:
            if not (_WEEKDAYS[w] in sup.weekdays or sup.vague or any(d.weekday() == _WEEKDAYS[w] for d in sup.days)):
                return f"weekday {raw}"
            continue
        if w in _MONTHS and raw[0].isupper():
            if not sup.month_ok(None, _MONTHS[w]):
                return f"month {raw}"
            continue
        missing = [n for n in _numbers([w], _CARDINALS) - sup.numbers if not (1000 <= n <= 2999 and sup.year_ok(n))]
        if missing:
            return f"number {raw}"
        if raw[0].isupper() and w not in STOPWORDS and _stem(w) not in _VOCAB and not w[0].isdigit():
            start = _SENTENCE_START.search(rest[:m.start()]) is not None
            possessive = raw.endswith(("'s", "s'"))
            if (not start or possessive) and not _name_known(w, sup):
                return f"name {raw}"
    content: dict[str, str] = {}
    for w in _words(rest):
        if _is_content(w) and w not in sup.people_words:
            content.setdefault(_stem(w), w)

    def given(w: str) -> bool:  # a hyphenated word: whole or by its parts ("half-marathon")
        return sup.supported(w) or ("-" in w and all(sup.supported(p) or not _is_content(p)
                                                     for p in w.split("-") if p))

    unsupported = sorted(w for w in content.values() if not given(w))
    if len(unsupported) >= INVENTED_MIN and len(unsupported) >= INVENTED_SHARE * len(content):
        return f"words not in the turn or its context: {', '.join(unsupported)}"
    return None


def _valid(y: int, mo: int, d: int) -> bool:
    try:
        date(y, mo, d)
    except ValueError:
        return False
    return True


def _years_near(sup: _Support) -> set[int]:
    years = set(sup.years)
    if sup.when is not None:
        years.update((sup.when.year - 1, sup.when.year, sup.when.year + 1))
    return years


def _month_name(mo: int) -> str:
    return date(2000, mo, 1).strftime("%B")


def _name_known(word: str, sup: _Support) -> bool:
    parts = _parts(word)
    if any(p in sup.words or _stem(p) in sup.stems for p in parts):
        return True
    # a participant's short or long form: "Mel" for "Melanie", "Caroline" for "Caro"
    return any(len(word) >= 3 and (p.startswith(word) or word.startswith(p)) for p in sup.people_words if len(p) >= 3)


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?\u2026])\s+|\n+", text) if s.strip()]


def _swapped(unit: str, src: Source, sup: _Support) -> str | None:
    m = re.match(r"^\s*(?:the\s+)?([A-Za-z][\w-]*)(?:'s|\u2019s)?\b", unit, re.I)
    if not m:
        return None
    subject = m.group(1).lower()
    if not (m.group(0).strip()[0].isupper() or subject in ("user", "assistant")):
        return None
    people = {p for p in sup.people if p}
    person = next((p for p in people if p == subject or (len(subject) >= 3 and p.split()[0] == subject)), None)
    others = [(s, t) for s, t in src.turns if _person(s) != person]
    if person is None or not others:
        return None  # not a participant, or only that person speaks in the source
    source_words = set()
    for _, text in others:
        source_words.update(_words(_VOCATIVE.sub(" ", text)))
    if person in source_words or subject in source_words or any(
            len(w) >= 3 and person.startswith(w) and w not in STOPWORDS for w in source_words):
        return None  # the source names that person (not only as the one addressed: "Jonas! I ran ...")
    unit_stems = {_stem(w) for w in _words(unit[m.end():]) if _is_content(w) and _stem(w) not in _VOCAB}
    if not unit_stems:
        return None

    def hits(texts: Iterable[str]) -> int:
        stems = {_stem(p) for t in texts for w in _words(t) for p in _parts(w)}
        return sum(1 for s in unit_stems if any(_similar(s, t) for t in stems))

    first, second = [], []
    for _, text in others:
        for sentence in _sentences(text):
            if _SECOND_PERSON.search(sentence):
                second.append(sentence)
            elif _FIRST_PERSON.search(sentence):
                first.append(sentence)
    own = [t for s, t in (*src.turns, *src.context) if _person(s) == person]
    a = hits(first)
    if a and a > hits(second) and a > hits(own):
        return f"the unit's subject {m.group(1)} is not the speaker ({', '.join(s for s, _ in others)}), " \
               f"who speaks of it in the first person"
    return None


def _subject(unit: str, sup: _Support) -> tuple[re.Match, str] | None:
    """The unit's leading participant ("Jonas", "The user") as (match, its person key)."""
    m = re.match(r"^\s*(?:the\s+)?([A-Za-z][\w-]*)(?:'s|\u2019s)?\b", unit, re.I)
    if not m:
        return None
    subject = m.group(1).lower()
    if not (m.group(0).strip()[0].isupper() or subject in ("user", "assistant")):
        return None
    person = next((p for p in sup.people if p and (p == subject or (len(subject) >= 3 and p.split()[0] == subject))),
                  None)
    return (m, person) if person else None


def _unit_stems(text: str, sup: _Support) -> set[str]:
    """The unit's content stems, less the extractor's own vocabulary and the participants' names."""
    return {_stem(w) for w in _words(text) if _is_content(w) and w not in sup.people_words and _stem(w) not in _VOCAB}


def _listener_fact(unit: str, src: Source, sup: _Support) -> str | None:
    """The speaker made the subject of what they asked or said of the listener."""
    found = _subject(unit, sup)
    if found is None:
        return None
    m, person = found
    if any(_person(s) != person for s, _ in src.turns):
        return None  # another speaker in the source: `_swapped` reads it
    rest = unit[m.end():]
    if _SECOND_PERSON.search(rest) or rest.rstrip().endswith("?"):
        return None  # reports the question as asked ("Caroline said: ... Do you paint often?")
    if any(w in sup.people_words and not person.startswith(w) for w in _words(rest)):
        return None  # names someone else: "Jonas asked whether Maya ..."
    unit_stems = _unit_stems(rest, sup)
    if len(unit_stems) < 2:
        return None
    first, second = [], []
    for _, text in src.turns:
        for sentence in _sentences(_VOCATIVE.sub(" ", text)):
            if _SECOND_PERSON.search(sentence):
                second.append(sentence)
            if _FIRST_PERSON.search(sentence):  # "I know how stressed you were": both
                first.append(sentence)
    b = _hits(unit_stems, _stems_of(second))
    if b >= 2 and 2 * b >= len(unit_stems) and b > _hits(unit_stems, _stems_of(first)):
        return f"the turn asks or says this of the listener (\"{' '.join(second)[:80]}\"), not of {m.group(1)}"
    return None


def _other_turn(unit: str, src: Source, sup: _Support) -> str | None:
    """The unit restates a context turn, not its own."""
    unit_stems = _unit_stems(unit, sup)
    if len(unit_stems) < 2 or not sup.context_stems:
        return None
    own = _hits(unit_stems, sup.turn_stems)
    if 2 * own >= len(unit_stems):
        return None
    speaker, stems = max(sup.context_stems, key=lambda c: _hits(unit_stems, c[1]))
    best = _hits(unit_stems, stems)
    if own and any(_person(speaker) == _person(s) for s, _ in src.turns):
        return None  # the speaker goes on with their own story ("On 1 June", after "a job offer in Bremen")
    if best >= 2 and best >= OTHER_TURN_RATIO * max(own, 1):
        return (f"{best} of its {len(unit_stems)} content words come from an earlier turn of {speaker}, "
                f"{own} from its own turn")
    return None


def check_unit(unit: str, source: Source) -> Grounding:
    """Whether `unit` (a model's text) is grounded in `source` (see the module docstring)."""
    sup = source._cache.get("support")
    if sup is None:
        sup = source._cache["support"] = _Support(source)
    for reason, check in (("copied_example", lambda: _copied(unit, source, sup)),
                          ("swapped_speaker", lambda: _swapped(unit, source, sup)),
                          ("swapped_speaker", lambda: _listener_fact(unit, source, sup)),
                          ("other_turn", lambda: _other_turn(unit, source, sup)),
                          ("invented_entity", lambda: _invented(unit, sup))):
        detail = check()
        if detail:
            return Grounding(False, reason, detail)
    return Grounding(True)


def known_name(name: str, source: Source) -> bool:
    """Whether every word of `name` (a person's name a model gave) is given by `source`."""
    sup = source._cache.get("support")
    if sup is None:
        sup = source._cache["support"] = _Support(source)
    words = [w for w in _words(name) if w not in STOPWORDS]
    return all(_name_known(w, sup) for w in words)


def check_units(units: Sequence[str], source: Source) -> list[Grounding]:
    """`check_unit` of each unit (the source's support is computed once)."""
    return [check_unit(u, source) for u in units]
