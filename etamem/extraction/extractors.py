"""AMU extraction: turn -> list of atomic fact strings (see docs/design.md, 'AMU extraction').

`RuleExtractor` is the embedded default (no model): sentence split, filler removal (short
sentences stay when they carry a name, number or date, or state something about the speaker:
"I'm vegan."), relative dates ("yesterday", "last week", "on Monday") given their absolute date
from the turn's timestamp (`etamem.extraction.relative_dates`), I/me/my rewritten to the speaker with verb
agreement ("the user" / "the assistant" for role labels), we/us/our to a group and, when asked,
you/your to the other speaker (`etamem.extraction.person_rewrite`).
`LLMExtractor` makes one LLM call per turn with the dataset prompt. When the endpoint gives
no reply (unreachable, timeouts, 429/5xx after the client's retries, a rejected request) it
raises `ExtractionUnavailable`: `Memory` leaves the turns pending and retries them on the next
`add`/`flush`. When a reply comes but is unusable (not JSON after the repair round, wrong form,
a refusal) that turn is extracted by the rule extractor, counted in `LLMExtractor.stats` and
reported by `extract_result`; so is a turn whose reply holds a unit the turn does not support
(a copy of the prompt's example, an invented name, number or date, the speaker swapped: see
`etamem.extraction.grounding`).
"""
from __future__ import annotations

import logging
import re
import threading
from typing import Any, Iterable, NamedTuple, Sequence

from etamem.extraction.grounding import Source, check_unit, prompt_examples
from etamem.extraction.markers import strip_markers
from etamem.extraction.person_rewrite import (
    WE_FORMS,
    addressee_of,
    addressee_subject,
    capitalise,
    first_plural_group,
    rewrite_first_person,
    rewrite_first_plural,
    rewrite_second_person,
    speaker_name,
    speaker_role,
    speaker_subject,
    third_person,
    turn_subject,
    we_group,
)
from etamem.extraction.relative_dates import resolve_relative_dates
from etamem.extraction.requests import is_pleasantry, is_request, statement_clauses
from etamem.extraction.stems import STOPWORDS
from etamem.models.llm import LLMError, LLMUnavailable
from etamem.models.prompt_files import load_prompt, render_prompt
from etamem.models.tokens import fit
from etamem.records import Turn

__all__ = [  # also the names other modules import from here (moved to person_rewrite / relative_dates)
    "REJECTION_STATS", "STOPWORDS", "turn_source", "STYLES", "WE_FORMS", "Extraction", "ExtractionUnavailable", "LLMExtractor", "RuleExtractor",
    "addressee_of", "addressee_subject", "capitalise", "caption_sentence", "content_words", "first_plural_group",
    "is_salient", "is_statement", "prompt_datetime", "resolve_relative_dates", "rewrite_first_person",
    "rewrite_first_plural", "rewrite_second_person", "speaker_name", "speaker_subject", "split_sentences",
    "strip_filler", "third_person", "turn_subject", "turn_text", "we_group",
]

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
# Patterns searched through a whole text open with a lookbehind and use possessive runs so
# that a long run of spaces or punctuation is scanned once, not once per start position.
_BOUNDARY_RE = re.compile(r"(?<![.!?\u2026])[.!?\u2026]++[\"'\u201d\u2019)\]]*+\s+")
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
_TRAIL_INTERJ_RE = re.compile(r"(?<!\s)\s*+\b(?:lol+|ha(?:ha)+h?|lmao|xd)\b[\s!.]*+$", re.IGNORECASE)
# "Thanks for telling me, ...", "Thank you for letting me know that." (what follows is the content)
_LEAD_THANKS_RE = re.compile(
    r"^(?:thanks|thank\s+you)(?:\s+(?:so|very)\s+much|\s+a\s+lot)?\s+for\s+"
    r"(?:(?:telling|letting)\s+me(?:\s+know)?|sharing|asking|clarifying|the\s+(?:update|info|information|heads[-\s]up))"
    r"(?:\s+(?:that|this|about\s+(?:that|this|it)))?\s*(?:[,!.\u2026~:;-]+\s*|$)",
    re.IGNORECASE)
_CHITCHAT_RE = re.compile(
    r"\b(?:(?:it'?s |so )?(?:good|nice|great|glad) to (?:see|hear from|meet|talk to|chat with) you"
    r"|how (?:are|have) you(?: been| doing)?|how'?s it going|what'?s up(?: with you)?"
    r"|talk (?:to you )?(?:soon|later)|see (?:you|ya)(?: soon| later| around)?|take care"
    r"|thank(?:s| you)(?: so much| a lot)?(?: for (?:asking|sharing|the \w+))?"
    r"|(?:good)?bye|have a (?:good|great|nice) (?:day|night|one|time))\b",
    re.IGNORECASE,
)
_WORD_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9'\u2019&-]*")


def strip_filler(sentence: str) -> str:
    """`sentence` without leading interjections, greetings, vocatives and thanks for being told
    ("Thanks for letting me know, ..."), discourse markers (`etamem.extraction.markers`: "As I
    said, ...", "..., remember?") and a trailing 'lol'/'haha'."""
    s = sentence.strip()
    for _ in range(6):
        before = s
        s = _LEAD_GREET_NAME_RE.sub("", s, count=1)
        s = _LEAD_THANKS_RE.sub("", s, count=1)
        s = strip_markers(s)  # "Just so you know, ...", "As I said, ...", "..., remember?"
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
    return [w for w in _WORD_RE.findall(s) if w.lower() not in STOPWORDS]


# --- short sentences worth keeping --------------------------------------------------------
_TRAIL_VOCATIVE_RE = re.compile(rf"(?<!\s)\s*+,\s*+{_NAME}\s*+[!.?\u2026~]*+$")
_NUMBER_WORDS = set(
    "two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred thousand "
    "million billion dozen".split()
)
_NOT_NAMES = STOPWORDS | {"god", "omg", "lmao", "xd", "haha", "hahaha", "lol", "ugh", "yay", "aww", "ooh", "omw"}
_TIME_WORD_RE = re.compile(
    r"\b(?:yesterday|today|tonight|tomorrow|ago|weekends?|noon|midnight|january|february|march|april|june|"
    r"july|august|september|october|november|december|monday|tuesday|wednesday|thursday|friday|saturday|"
    r"sunday|(?:last|next|this)\s+(?:week|month|year))\b",
    re.IGNORECASE,
)


def _names_participant(word: str, names: Sequence[str]) -> bool:
    """Whether `word` (lower case) is one of the lower-cased participant `names` or a short
    form of one ("mel" for "melanie"): a vocative, not a fact."""
    stem = word.split("'")[0]
    return any(n.startswith(stem) for n in names)


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
                and not _names_participant(low, names)):
            return True
    return bool(_TIME_WORD_RE.search(s)) and len(content_words(s)) >= 2



# --- short statements about the speaker ------------------------------------------------------
# "I'm vegan.", "My wife is pregnant.", "We're expecting a baby.": a first-person subject ...
_FIRST_PERSON_START_RE = re.compile(
    r"^(?:(?:and|but|so|also|actually|honestly|now|plus)\s+)?"
    r"(?:i|i'm|i've|i'd|i'll|my|mine|we|we're|we've|we'd|we'll|our|ours)(?![\w-])",
    re.IGNORECASE)
# ... and a content word that is not a reply, a reaction or a feeling about what was said
_REPLY_WORDS = set(
    # replies and reactions: "I see.", "I agree.", "I hope so.", "I guess.", "I can't wait!", "I love it!"
    "see agree agreed disagree hope guess think thought know knew understand understood mean meant suppose bet "
    "believe get gets got gotcha feel felt wish promise imagine remember remembered forgot appreciate wonder "
    "doubt hear heard say said tell told try tried check let wait go going goes gotta come coming care mind "
    "bother worry worried thank apologize apologise admit assume figure figured reckon recall follow concur "
    "second swear insist love loved like liked hate hated enjoy enjoyed adore miss missed want need help made "
    "did done can't cannot won't don't didn't doesn't isn't wasn't aren't weren't couldn't wouldn't shouldn't "
    "haven't hasn't not never nope either neither as well yes maybe perhaps probably course anyway exactly true "
    "right same agreed ready set back fine alright sorry happy glad excited thrilled curious impressed jealous "
    "proud honored honoured touched flattered confused afraid serious certain positive convinced relieved "
    "speechless shocked surprised amazed obsessed dying crying laughing kidding joking interested grateful "
    "thankful blessed pleasure bad idea point thoughts ears question luck fun time way heart words "
    "word lol haha hahaha omg yay ugh aww ooh".split())


def is_statement(sentence: str, participants: Sequence[str] = ()) -> bool:
    """True when `sentence` (filler already stripped) states something about its speaker,
    however short: it opens with I/my/we/our ("I'm vegan.", "My wife is pregnant.", "We're
    expecting a baby."), is not a question, and has a content word other than a reply or a
    reaction ("I see.", "I agree.", "I hope so.", "I love it!", "I'm so glad!") and other than
    the `participants`' names (vocatives: "I love it, Mel!")."""
    s = _TRAIL_VOCATIVE_RE.sub("", sentence.replace("\u2019", "'")).strip()
    if not s or s.endswith("?") or not _FIRST_PERSON_START_RE.match(s):
        return False
    names = [p.lower() for p in participants if p]
    for word in content_words(s):
        low = word.lower().strip("'")
        if low in _REPLY_WORDS or low in STOPWORDS:
            continue
        if _names_participant(low, names):
            continue
        return True
    return False


_CAPTION_PREFIX_RE = re.compile(r"^(?:a |an )?(?:photo(?:graph|graphy)?|picture|image|pic) of\s+", re.I)


def caption_sentence(turn: Turn) -> str | None:
    """'<speaker> shared a photo of <caption>.' when the turn carries a photo caption, else None."""
    caption = turn.extra.get("blip_caption") if turn.extra else None
    if not isinstance(caption, str) or not caption.strip():
        return None
    caption = _CAPTION_PREFIX_RE.sub("", caption.strip())
    caption = caption.rstrip(" .")
    return f"{capitalise(turn_subject(turn))} shared a photo of {caption}." if caption else None


class RuleExtractor:
    """Embedded default extractor: deterministic, no model.

    Per sentence: strip filler; keep it when it has `min_words` content words, or fewer (at
    least one) and either a name, number or date (`keep_short`: "Her name is Pixel.") or a
    statement about its speaker (`keep_statements`, see `is_statement`: "I'm vegan.", "My
    wife is pregnant."), such a short sentence joining the unit before it in the turn
    (`attach_short`: "... a grey cat. Her name is Pixel."); give relative dates their absolute
    date from the turn's timestamp (`resolve_dates`: "yesterday (7 May 2023)", see
    `etamem.extraction.relative_dates`); rewrite we/us/our (`resolve_we`, `we_form`, see `we_group`) and
    I/me/my to the speaker with verb agreement (`conjugate`: "I love" -> "Maya loves"). The
    speaker is written as `turn_subject` says: a name, "the user" / "the assistant" for role
    labels ("I love jazz" -> "The user loves jazz."), or the turn's `extra["name"]`.
    Opt-in: you/your -> the other speaker (`resolve_you`; the one other speaker in `context`)
    and "<speaker>: " before units that do not name the speaker (`attribute`).
    In a chat with an assistant (role-labelled speakers), questions, requests and pleasantries make
    no unit, a request's clauses that state something about the speaker excepted (`drop_requests`,
    see `etamem.extraction.requests`).

    Defaults from LoCoMo dev retrieval (recall@20, no LLM): "we" -> "<speaker> and others"
    helps most; short sentences and verb agreement help a little. "you" -> the addressee costs
    3-4 points (one speaker's units then name the other, whom questions ask about);
    `attribute` helps the flat and no-fallback rankings (+0.02-0.03) but costs the full
    system 0.007. `from_config` builds one from a `Config`.
    """

    def __init__(self, min_words: int = 3, *, keep_short: bool = True, attach_short: bool = True,
                 keep_statements: bool = True, resolve_you: bool = False, resolve_we: bool = True,
                 we_form: str = "others", resolve_dates: bool = True, conjugate: bool = True,
                 attribute: bool = False, drop_requests: bool = True) -> None:
        if min_words < 0:
            raise ValueError("min_words must be >= 0")
        if we_form not in WE_FORMS:
            raise ValueError(f"we_form {we_form!r}: expected one of {WE_FORMS}")
        self.min_words = min_words
        self.keep_short = keep_short
        self.attach_short = attach_short
        self.keep_statements = keep_statements
        self.resolve_you = resolve_you
        self.resolve_we = resolve_we
        self.we_form = we_form
        self.resolve_dates = resolve_dates
        self.conjugate = conjugate
        self.attribute = attribute
        self.drop_requests = drop_requests

    @classmethod
    def from_config(cls, config: Any) -> "RuleExtractor":
        """A rule extractor with a `Config`'s settings (min_amu_words, short_statements,
        resolve_dates)."""
        return cls(min_words=config.min_amu_words, keep_statements=config.short_statements,
                   resolve_dates=config.resolve_dates)

    def _kept(self, sentence: str, n_words: int, participants: Sequence[str]) -> bool:
        """Whether a filler-free sentence of `n_words` content words is worth a unit."""
        if n_words >= self.min_words:
            return True
        if not (self.keep_short and n_words):
            return False
        return is_salient(sentence, participants) or (self.keep_statements and is_statement(sentence, participants))

    def _sentences(self, turn: Turn) -> list[str]:
        """The sentences of `turn` that may hold a fact. With `drop_requests`, in a chat with an
        assistant (a role-labelled speaker: user, assistant, ...): no question, request or
        pleasantry, only a request's clauses that state something about the speaker
        (`etamem.extraction.requests`). Between named people ("Did you go to the concert in
        Boston?") a question stays: it is how they exchange news."""
        out = []
        chat = self.drop_requests and speaker_role(turn.speaker) is not None
        for sentence in split_sentences(turn.text or ""):
            if not chat:
                out.append(sentence)
                continue
            bare = strip_filler(sentence)
            if is_pleasantry(bare):
                continue
            if is_request(bare):
                out += [f"{clause}." for clause in statement_clauses(bare)]
            else:
                out.append(sentence)
        return out

    def extract(self, turn: Turn, context: Sequence[Turn] = ()) -> list[str]:
        """Atomic units for `turn`; [] when the turn is only filler. `context`: the turns
        before it in the session (they name the addressee)."""
        name = turn_subject(turn)
        other = addressee_subject(turn, context)
        participants = sorted({name, speaker_name(turn.speaker),
                               *(n for t in context for n in (turn_subject(t), speaker_name(t.speaker)))})
        units: list[str] = []
        for sentence in self._sentences(turn):
            kept = strip_filler(sentence)
            n_words = len(content_words(kept)) if kept else 0
            short = n_words < self.min_words
            if not kept or not self._kept(kept, n_words, participants):
                continue
            if self.resolve_dates:
                kept = resolve_relative_dates(kept, turn.timestamp)
            # first plural and second person first: "you" must not meet the rewritten "I"
            if self.resolve_we:
                kept = rewrite_first_plural(kept, *we_group(turn.speaker, name, other, self.we_form))
            if self.resolve_you and other:
                kept = rewrite_second_person(kept, other, self.conjugate)
            unit = capitalise(rewrite_first_person(kept, name, self.conjugate))
            if self.attribute and not re.search(rf"(?<!\w){re.escape(name)}(?!\w)", unit, re.I):
                unit = f"{capitalise(name)}: {unit}"
            if self.attach_short and short and units:
                units[-1] = f"{units[-1]} {unit}"  # "... a grey cat. Her name is Pixel.": one unit
            else:
                units.append(unit)
        caption = caption_sentence(turn)
        if caption:  # the caption is content, never filler
            units.append(caption)
        return units


# --- LLM extraction -----------------------------------------------------------------------
# counters of units rejected as not grounded in their turn (see etamem.extraction.grounding)
REJECTION_STATS = {"rejected_units": 0, "rejected_copied_example": 0, "rejected_invented_entity": 0,
                   "rejected_swapped_speaker": 0, "rejected_other_turn": 0}
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


# the reply's form, asked for through `response_format` where the server takes a schema
FACTS_SCHEMA = {"type": "object", "properties": {"facts": {"type": "array", "items": {"type": "string"}}},
                "required": ["facts"]}


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
      counted in `fallback_turns` / `fallback_units` (`extract_result` flags them), those turns
      also in `unusable_turns`;
    - a reply with a unit that is not grounded in the turn, its context or the participants'
      names (`etamem.extraction.grounding.check_unit`: a copy of the prompt's example, an
      invented name / number / date / event, the speaker swapped; `grounding=False` turns the
      check off): likewise the rule extractor's units for that turn, the rejected units counted
      in `rejected_units` and per reason in `rejected_copied_example`, `rejected_invented_entity`,
      `rejected_swapped_speaker`, `rejected_other_turn`, and logged at warning with the turn id;
    - any other exception is a bug and propagates.
    An answer of zero facts is valid, not a fallback. Thread-safe (the counters are locked).
    """

    CONTEXT_TURNS = 4

    def __init__(self, llm: Any, *, style: str = "locomo", fallback: RuleExtractor | None = None,
                 grounding: bool = True) -> None:
        if style not in STYLES:
            raise ValueError(f"extraction style {style!r}: expected one of {STYLES}")
        self.llm = llm
        self.style = style
        self.prompt_name = f"extract_{style}"
        load_prompt(self.prompt_name)  # fail early when the template is missing
        self.fallback = fallback if fallback is not None else RuleExtractor()
        self.grounding = grounding
        self._examples: dict[str, tuple[str, ...]] = {}
        self._speakers: dict[str, dict[str, None]] = {}  # space -> the speakers seen there (participants)
        self._lock = threading.Lock()
        self._stats = {"turns": 0, "llm_units": 0, "fallback_turns": 0, "fallback_units": 0, "unusable_turns": 0,
                       **REJECTION_STATS}

    @property
    def stats(self) -> dict[str, int]:
        with self._lock:
            return dict(self._stats)

    def fitting_context(self, turn: Turn, context: Sequence[Turn]) -> list[Turn] | None:
        """The recent context turns whose prompt fits the model's context (`LLMClient.prompt_budget`;
        all of them when it is unknown), the oldest dropped first; None when the turn alone does
        not fit."""
        recent = list(context)[-self.CONTEXT_TURNS:]
        budget = self.llm.prompt_budget() if hasattr(self.llm, "prompt_budget") else None  # test doubles: none
        if budget is None:
            return recent
        prompt, kept = fit(lambda k: self.build_messages(turn, recent[len(recent) - k:])[0]["content"],
                           len(recent), budget, self.llm.tokens.count)
        if kept == 0 and self.llm.tokens.count(prompt) > budget:
            return None
        if kept < len(recent):
            logger.info("extraction: %d of %d context turns fit the model's context for turn %s", kept,
                        len(recent), turn.turn_id)
        return recent[len(recent) - kept:]

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

    def _prompt_examples(self, speaker: str) -> tuple[str, ...]:
        """The example sentences of the prompt as rendered for `speaker` (no turn in it)."""
        found = self._examples.get(speaker)
        if found is None:
            found = prompt_examples(render_prompt(self.prompt_name, speaker=speaker, text="", date="", context=""))
            self._examples[speaker] = found
        return found

    def ungrounded(self, facts: Sequence[str], turn: Turn, context: Sequence[Turn] = ()) -> list[tuple[str, Any]]:
        """(fact, `Grounding`) of each fact the turn, the context the model saw and the
        participants (the speakers of the turn's space this extractor has seen) do not support
        (`etamem.extraction.grounding`)."""
        recent = list(context)[-self.CONTEXT_TURNS:]
        names = [n for t in (*context, turn) for n in (turn_subject(t), speaker_name(t.speaker))]
        with self._lock:  # the participants: the speakers of the space so far, not only of this session
            seen = self._speakers.setdefault(turn.space, {})
            if len(seen) < 256:
                seen.update(dict.fromkeys(names))
            names += list(seen)
        source = turn_source(turn, recent, self._prompt_examples(speaker_name(turn.speaker)), participants=names)
        return [(fact, verdict) for fact in facts if not (verdict := check_unit(fact, source))]

    def extract(self, turn: Turn, context: Sequence[Turn] = ()) -> list[str]:
        """Units for `turn` (see the class docstring; raises `ExtractionUnavailable`)."""
        return self.extract_result(turn, context).units

    def extract_result(self, turn: Turn, context: Sequence[Turn] = ()) -> Extraction:
        """`Extraction(units, fallback)`: `fallback` is True when the LLM's reply was unusable
        or held a unit the turn does not support, and the rule extractor made the units. Raises
        `ExtractionUnavailable` on no reply."""
        given, context = context, self.fitting_context(turn, context)
        facts: list[str] | None = None
        if context is None:  # the turn alone is longer than the model's context: the rules read it
            logger.warning("extraction: turn %s does not fit the model's context of %d tokens; rule fallback",
                           turn.turn_id, self.llm.context_tokens)
            return self._rule_fallback(turn, given)
        messages = self.build_messages(turn, context)
        try:
            facts = _facts_from(self.llm.complete_json(messages, stage="extract", validate=_checked_facts,
                                                            schema=FACTS_SCHEMA))
            if facts is None:  # an llm object that does not apply `validate`
                logger.warning("extraction: unusable LLM answer for turn %s; rule fallback", turn.turn_id)
        except LLMUnavailable as exc:
            raise ExtractionUnavailable(f"no LLM reply for turn {turn.turn_id}: {exc}") from exc
        except LLMError as exc:
            logger.warning("extraction: unusable LLM reply for turn %s (%s: %s); rule fallback",
                           turn.turn_id, type(exc).__name__, exc)
        rejected = self.ungrounded(facts, turn, context) if facts and self.grounding else []
        if rejected:
            logger.warning("extraction: %d ungrounded unit(s) in the LLM reply for turn %s (%s); rule fallback",
                           len(rejected), turn.turn_id,
                           "; ".join(f"{v.reason}: {fact!r}: {v.detail}" for fact, v in rejected))
            with self._lock:
                self._stats["rejected_units"] += len(rejected)
                for _, verdict in rejected:
                    self._stats[f"rejected_{verdict.reason}"] += 1
            facts = None
        if facts is None:
            return self._rule_fallback(turn, given, unusable=not rejected)
        facts = [first_person_fixed(f, turn_subject(turn)) for f in facts]
        with self._lock:
            self._stats["turns"] += 1
            self._stats["llm_units"] += len(facts)
        return Extraction(facts, False)

    def _rule_fallback(self, turn: Turn, context: Sequence[Turn], *, unusable: bool = False) -> Extraction:
        units = self.fallback.extract(turn, context)
        with self._lock:
            self._stats["turns"] += 1
            self._stats["unusable_turns"] += int(unusable)
            self._stats["fallback_turns"] += 1
            self._stats["fallback_units"] += len(units)
        return Extraction(units, True)


_FIRST_PERSON_WORD = re.compile(r"(?<![\w'\u2019])(?:I|I[\u2019'](?:m|ve|ll|d)|[Mm]e|[Mm]y|[Mm]ine|[Mm]yself)(?![\w'\u2019])")


def first_person_fixed(fact: str, name: str) -> str:
    """`fact` with the first person a model left in ("I am so relieved it is done") written as
    `name` ("Jonas is so relieved it is done"); unchanged when it has none."""
    if not _FIRST_PERSON_WORD.search(fact):
        return fact
    return capitalise(rewrite_first_person(fact, name))


def turn_source(turn, context=(), examples: Iterable[str] = (), *, participants: Iterable[str] = ()) -> Source:
    """The `Source` of one `Turn` as an extractor's prompt shows it: its text with the photo
    caption, the `context` turns given to the model, the participants (the speakers of the
    turn and of `context`, as units name them and as they are shown, plus `participants`)."""
    names = [turn_subject(turn), speaker_name(turn.speaker), *participants]
    for t in context:
        names += [turn_subject(t), speaker_name(t.speaker)]
    return Source(((turn_subject(turn), turn_text(turn)),),
                  tuple((turn_subject(t), turn_text(t)) for t in context),
                  tuple(dict.fromkeys(n for n in names if n)), tuple(examples), turn.timestamp)
