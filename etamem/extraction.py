"""AMU extraction: turn -> list of atomic fact strings (DESIGN §4 step 2).

`RuleExtractor` is the embedded default (no model): sentence split, filler removal and
a first-person rewrite to the speaker's name. `LLMExtractor` makes one LLM call per turn
with the dataset prompt. When the endpoint gives no reply (unreachable, timeouts, 429/5xx
after the client's retries, a rejected request) it raises `ExtractionUnavailable`: `Memory`
leaves the turns pending and retries them on the next `add`/`flush`. When a reply comes but
is unusable (not JSON after the repair round, wrong form, a refusal) that turn is extracted
by the rule extractor, counted in `LLMExtractor.stats` and reported by `extract_result`.
"""
from __future__ import annotations

import logging
import re
import threading
from typing import Any, NamedTuple, Sequence

from .llm import LLMError, LLMUnavailable
from .prompts_io import load_prompt, render_prompt
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


# --- first-person rewrite ----------------------------------------------------------------
_APOS = "['\u2019]"
_IP = r"(?<![\w.'\u2019-])I"  # "I" not inside a word or "e.i."
_I = _IP + r"(?![\w'\u2019-]|\.\w)"  # bare "I", not "i.e." nor "I-95"
_REWRITES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(rf"{_IP}{_APOS}m\b", re.I), "{n} is"),
    (re.compile(rf"{_I}\s+am\b", re.I), "{n} is"),
    (re.compile(rf"{_I}\s+was\b", re.I), "{n} was"),
    (re.compile(rf"{_IP}{_APOS}ve\b", re.I), "{n} has"),
    (re.compile(rf"{_I}\s+have\b", re.I), "{n} has"),
    (re.compile(rf"{_IP}{_APOS}ll\b", re.I), "{n} will"),
    (re.compile(rf"{_IP}{_APOS}d\b", re.I), "{n} would"),
    (re.compile(rf"{_I}\s+don{_APOS}?t\b", re.I), "{n} doesn't"),
    (re.compile(rf"{_I}\s+do\b", re.I), "{n} does"),
    (re.compile(r"\bmyself\b", re.I), "{n}"),
    (re.compile(r"\bmine\b", re.I), "{n}'s"),
    (re.compile(r"\bmy\b(?!\.\w)", re.I), "{n}'s"),
    (re.compile(r"\bme\b(?![\w'\u2019]|\.\w)", re.I), "{n}"),
    (re.compile(_I, re.I), "{n}"),
]


def speaker_name(speaker: str) -> str:
    """Display form of a speaker: 'user' -> 'User', names unchanged."""
    speaker = speaker.strip() or "Speaker"
    return speaker[0].upper() + speaker[1:] if speaker.islower() else speaker


def rewrite_first_person(sentence: str, name: str) -> str:
    """Replace I/me/my/mine/myself (and I'm, I've, I'll, I'd, I do/don't ...) by `name`."""
    def sub(repl: str):
        def fn(m: re.Match[str]) -> str:
            tok = m.group(0)
            if len(tok) > 1 and tok.isupper() and tok.isalpha():  # "ME", "MY": acronyms
                return tok
            return repl.format(n=name)
        return fn

    for pattern, repl in _REWRITES:
        sentence = pattern.sub(sub(repl), sentence)
    return sentence


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
    """Embedded default extractor: deterministic, no model."""

    def __init__(self, min_words: int = 3) -> None:
        if min_words < 0:
            raise ValueError("min_words must be >= 0")
        self.min_words = min_words

    def extract(self, turn: Turn, context: Sequence[Turn] = ()) -> list[str]:
        """Atomic units for `turn`; [] when the turn is only filler. `context` is unused."""
        name = speaker_name(turn.speaker)
        units: list[str] = []
        for sentence in split_sentences(turn.text or ""):
            kept = strip_filler(sentence)
            if not kept or len(content_words(kept)) < self.min_words:
                continue
            units.append(_capitalise(rewrite_first_person(kept, name)))
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
            units = self.fallback.extract(turn)
            with self._lock:
                self._stats["turns"] += 1
                self._stats["fallback_turns"] += 1
                self._stats["fallback_units"] += len(units)
            return Extraction(units, True)
        with self._lock:
            self._stats["turns"] += 1
            self._stats["llm_units"] += len(facts)
        return Extraction(facts, False)
