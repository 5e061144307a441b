"""Repeats, at write time: a new unit that restates a stored fact of the same speaker (see
docs/concepts.md, 'Repeats').

"I'm vegan." said in three sessions is one fact. A new unit that restates an older current unit
of the same speaker makes no unit of its own: its source turn joins the older unit's
`source_turn_ids` (one turn per mention, the first is when it was first said; `mentions`). A
delete of one mention's turn keeps the unit while another mention remains
(`AMUUnits.forget_extras`); deleting the unit, or every mention, forgets it.

Offline (`is_restatement`), for two statements of one speaker, not questions:

1. the same text once discourse markers and case are set aside; or
2. a cosine of at least RESTATE_FLOOR and nothing that tells two facts apart: the same holder
   ("my sister has a dog named Rex" is not mine, nor "my girlfriend is learning Japanese"), the same numbers, names, weekdays and dates
   (resolved dates included: "on Monday" of two weeks are two runs), the same negation and
   stance, no change word in the newer that the older lacks ("moved", "no longer": a change
   is `supersedes`' to judge), and no other object: a content word on one side only is never
   the head after a shared word ("phone" / "phone case") unless it is a generic head ("vegan
   diet", "jazz music") or verb; content words on both sides that the other lacks are a substitution ("Rome with my
   parents" / "with my girlfriend") unless the cosine is at least RESTATE_STRICT.

With an LLM configured, `LLMRestatement` asks it (prompt `prompts/restatement.txt`, mem0's
ADD / UPDATE / NOOP: NOOP names the unit repeated) for the candidates the rules leave that are
close (cosine >= LLM_FLOOR), with the rules first and as fallback.
"""
from __future__ import annotations

import functools
import logging
import re
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from etamem.extraction.markers import strip_markers
from etamem.facts.supersession import STRONG_CHANGE, attitude, holder, is_fact, negated
from etamem.models.llm import cache_refs

logger = logging.getLogger(__name__)

RESTATE_FLOOR = 0.85  # below this cosine two statements are never one fact offline
RESTATE_STRICT = 0.95  # at or above it a word swapped on both sides is still a paraphrase
LLM_FLOOR = 0.7  # candidates at least this close go to the LLM
REPEATS = "repeats"  # the LLM's verdict for a restatement (mem0's NOOP)

_NUMBER_WORDS = {"one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
                 "twenty", "thirty", "forty", "fifty", "hundred", "thousand", "million", "half", "dozen", "once",
                 "twice", "first", "second", "third", "fourth", "fifth", "both", "single", "couple"}
_DATES = re.compile(r"\b(?:january|february|march|april|may|june|july|august|september|october|november|december"
                    r"|monday|tuesday|wednesday|thursday|friday|saturday|sunday|weekends?|weekdays?|mornings?"
                    r"|evenings?|nights?|yesterday|today|tomorrow|tonight|spring|summer|autumn|fall|winter"
                    r"|christmas|easter)\b", re.IGNORECASE)
_DIGITS = re.compile(r"\d+(?:[.,]\d+)?")
_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][\w'-]*")
_WORD = re.compile(r"[A-Za-z][A-Za-z'-]*")
# head words that name a kind of thing rather than a thing: "a vegan (diet)", "jazz (music)"
_GENERIC_HEADS = {"diet", "food", "music", "person", "guy", "lifestyle", "type", "kind", "sort", "fan", "lover",
                  "thing", "stuff", "hobby", "activity", "sport", "job", "work", "role", "position", "place",
                  "city", "town", "country", "area", "days", "always", "generally", "usually", "follow",
                  "myself", "honestly", "actually", "really", "basically", "definitely", "pretty", "quite",
                  "huge", "big", "whole", "officially", "strict", "strictly", "fully", "totally", "completely",
                  "currently", "still", "also", "truly", "absolutely", "name", "called", "named", "true",
                  "favourite", "favorite", "old", "years", "aged", "age", "based", "live", "lives", "living",
                  "home", "house", "employed", "working", "works", "profession", "profess", "occupation"}


# participles that describe a state, not a past event: "a dog named Rex", "based in Lisbon"
_ADJECTIVAL = re.compile(r"\b(?:named|called|based|married|engaged|divorced|retired|interested|located|obsessed"
                         r"|excited|tired|used|related|qualified|certified|vaccinated|employed|unemployed|allowed"
                         r"|supposed|scheduled|booked|planned|expected|involved|attached|trained|licensed|registered"
                         r"|enrolled|signed up|diagnosed|allergic|learned|skilled|experienced|left-handed"
                         r"|right-handed|colou?r-blind|red|bred|sized|shaped|colou?red|dyed|dedicated|committed)\b",
                         re.IGNORECASE)


def _norm(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9][a-z0-9'-]*", strip_markers(text).lower().replace("\u2019", "'")))


@functools.lru_cache(maxsize=8192)
def facets(text: str) -> tuple[frozenset, frozenset, frozenset, bool, int, tuple[str, ...]]:
    """(numbers, names, date words, negated, attitude, content stems in order) of `text`."""
    from etamem.extraction.stems import STOPWORDS, stem

    t = strip_markers(text).replace("\u2019", "'")
    low = t.lower()
    numbers = frozenset(_DIGITS.findall(t)) | frozenset(w for w in _WORD.findall(low) if w in _NUMBER_WORDS)
    names = frozenset(m.group(0).lower().removesuffix("'s") for m in _NAME.finditer(t)
                      if m.group(0).lower().removesuffix("'s") not in {"user", "i", "i'm", "i've", "assistant"}
                      and not _DATES.fullmatch(m.group(0)))
    dates = frozenset(m.group(0).lower().rstrip("s") for m in _DATES.finditer(t))
    content = tuple(stem(w) for w in _WORD.findall(low)
                    if w not in STOPWORDS and w not in {"user", "user's", "the", "assistant"} and len(w) > 2)
    return numbers, names, dates, negated(t), attitude(t), content


def other_object(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """A content word of `a` missing from `b` right after a word they share ("phone case" after
    "phone"), unless it is a generic head ("vegan diet") or a generic verb ("has got")."""
    from etamem.extraction.stems import GENERIC_WORDS

    shared = set(a) & set(b)
    for i, w in enumerate(a):
        if w in b or w in _GENERIC_HEADS or w in GENERIC_WORDS:
            continue
        if i and a[i - 1] in shared:  # a head noun after a shared word: "phone case", "bike helmet"
            return True
    return False


def is_restatement(new: str, old: str, similarity: float, *, speaker: str = "", other_day: bool = False) -> bool:
    """Whether `new` restates `old` (both by one speaker): the rules of the module docstring.
    `other_day`: said on another day than `old`; then an undated past event ("I went for a
    run.") is another event, not a repeat."""
    from etamem.extraction.relative_dates import is_past_tense

    if new.rstrip().endswith("?") or old.rstrip().endswith("?"):
        return False
    if other_day and is_past_tense(_ADJECTIVAL.sub(" ", new)) and not (facets(new)[0] or facets(new)[2]):
        return False
    if _norm(new) == _norm(old):
        return True
    if similarity < RESTATE_FLOOR or not (is_fact(new) and is_fact(old)):
        return False
    from etamem.facts.lookalikes import statement_holder

    if holder(new) != holder(old) or statement_holder(new) != statement_holder(old):
        return False  # another person's fact: a relative's, or a partner's without the speaker in it
    fn, fo = facets(new), facets(old)
    if fn[:5] != fo[:5]:  # numbers, names, dates, negation, stance
        return False
    if STRONG_CHANGE.search(new.replace("\u2019", "'")) and not STRONG_CHANGE.search(old.replace("\u2019", "'")):
        return False
    a, b = fn[5], fo[5]
    if other_object(a, b) or other_object(b, a):
        return False
    from etamem.extraction.stems import GENERIC_WORDS

    only_a = {w for w in a if w not in b and w not in _GENERIC_HEADS and w not in GENERIC_WORDS}
    only_b = {w for w in b if w not in a and w not in _GENERIC_HEADS and w not in GENERIC_WORDS}
    return not (only_a and only_b) or similarity >= RESTATE_STRICT


@dataclass(frozen=True)
class Prior:
    """An older unit a new one may restate: its id, text and cosine to the new unit."""

    unit_id: str
    text: str
    similarity: float
    other_day: bool = False  # said on another day than the new unit


class RestatementClassifier(Protocol):
    """`repeated(new_text, speaker, priors) -> the id of the unit restated, or None`."""

    def repeated(self, new_text: str, speaker: str, priors: Sequence[Prior]) -> str | None: ...


class RuleRestatement:
    """`is_restatement` over the priors, the closest first."""

    def repeated(self, new_text: str, speaker: str, priors: Sequence[Prior]) -> str | None:
        for p in sorted(priors, key=lambda p: -p.similarity):
            if is_restatement(new_text, p.text, p.similarity, speaker=speaker, other_day=p.other_day):
                return p.unit_id
        return None


class LLMRestatement:
    """The rules first; for the close priors they leave, the LLM's verdict (prompt
    `restatement.txt`: JSON `{"event": "ADD" | "UPDATE" | "NOOP", "id": ...}`; NOOP with an id:
    a repeat of that unit). A reply that is not that shape falls back to the rules' None."""

    def __init__(self, llm: Any, rules: RestatementClassifier | None = None) -> None:
        self.llm = llm
        self.rules = rules if rules is not None else RuleRestatement()
        self.stats = {"calls": 0, "fallbacks": 0}

    def repeated(self, new_text: str, speaker: str, priors: Sequence[Prior]) -> str | None:
        from etamem.models.llm import LLMError
        from etamem.models.prompt_files import render_prompt

        found = self.rules.repeated(new_text, speaker, priors)
        if found is not None:
            return found
        pool = [p for p in sorted(priors, key=lambda p: -p.similarity) if p.similarity >= LLM_FLOOR
                and not p.text.rstrip().endswith("?")][:5]
        if not pool or new_text.rstrip().endswith("?"):
            return None
        short = {str(i): p.unit_id for i, p in enumerate(pool, 1)}
        lines = "\n".join(f"- {i}: {p.text}" for i, p in zip(short, pool))
        prompt = render_prompt("restatement", new=new_text, speaker=speaker or "the speaker", candidates=lines)
        self.stats["calls"] += 1
        try:
            event, uid = self.llm.complete_json([{"role": "user", "content": prompt}], stage="restatement",
                                                validate=lambda r: parse_verdict(r, list(short)),
                                                schema=verdict_schema(list(short)))
        except (LLMError, ValueError) as exc:
            logger.warning("restatement: unusable LLM reply (%s); rules only", exc)
            self.stats["fallbacks"] += 1
            return None
        return short[uid] if event == "NOOP" and uid is not None else None


_EVENTS = ("ADD", "UPDATE", "NOOP")


def verdict_schema(ids: Sequence[str]) -> dict:
    """The JSON schema of a restatement verdict naming only the offered `ids`."""
    return {"type": "object", "properties": {"event": {"type": "string", "enum": list(_EVENTS)},
                                             "id": {"type": ["string", "null"], "enum": [*ids, None]}},
            "required": ["event"]}


def parse_verdict(reply: Any, ids: Sequence[str]) -> tuple[str, str | None]:
    """(event, id) from `{"event": "ADD" | "UPDATE" | "NOOP", "id": ...}` (text or parsed);
    ValueError for another shape, an unknown event, or NOOP / UPDATE naming no offered id."""
    import json

    if isinstance(reply, str):
        start, end = reply.find("{"), reply.rfind("}")
        if start < 0 or end < start:
            raise ValueError("no JSON object in the reply")
        reply = json.loads(reply[start:end + 1])
    if not isinstance(reply, dict):
        raise ValueError('expected {"event": ..., "id": ...}')
    event = str(reply.get("event", "")).upper()
    uid = reply.get("id")
    uid = None if uid in (None, "", "null") else str(uid)
    if event not in _EVENTS:
        raise ValueError(f"unknown event {event!r}")
    if event != "ADD" and uid not in ids:
        raise ValueError(f"{event} names unknown id {uid!r}")
    return event, uid


def find_restatements(units: Sequence, vectors: np.ndarray, near: Sequence[Sequence[tuple[Any, float]]],
                      classifier: RestatementClassifier, *, current: set[str] | None = None) -> dict[int, str]:
    """{index of a new unit: id of the unit it restates} for new `units` (AMUs in time order, text
    vectors (n, d_t) unit norm) against `near[i]` (stored units nearest unit i, [(AMU, cosine)])
    and the batch's earlier units that are kept. Only units of the same speaker said no later
    count; `current`: the stored ids that may be restated (a superseded unit said again is a
    change back, `supersedes`' to judge; None: all)."""
    vecs = np.asarray(vectors, np.float32)
    out: dict[int, str] = {}
    kept: list[int] = []
    for i, unit in enumerate(units):
        priors: dict[str, Prior] = {}
        for other, cos in near[i]:
            if other.speaker == unit.speaker and other.timestamp <= unit.timestamp \
                    and (current is None or other.amu_id in current):
                priors[other.amu_id] = Prior(other.amu_id, other.text, float(cos),
                                             other.timestamp.date() != unit.timestamp.date())
        if kept:
            sims = vecs[kept] @ vecs[i]
            for j, cos in zip(kept, sims):
                other = units[j]
                if other.speaker == unit.speaker and other.timestamp <= unit.timestamp:
                    priors[other.amu_id] = Prior(other.amu_id, other.text, float(cos),
                                                 other.timestamp.date() != unit.timestamp.date())
        target = None
        if priors:
            # an LLM's cache entry holds every text it was shown: tagged with their turns (forgetting)
            shown = [unit, *(o for o, _ in near[i] if o.amu_id in priors), *(units[j] for j in kept
                                                                             if units[j].amu_id in priors)]
            with cache_refs(f"space:{unit.space}", *(f"turn:{o.space}/{t}" for o in shown for t in o.source_turn_ids)):
                target = classifier.repeated(unit.text, unit.speaker, list(priors.values()))
        if target is None:
            kept.append(i)
        else:
            out[i] = target
    return out


def collapse_repeats(hits: Sequence, vector_of: Callable[[str], np.ndarray | None]) -> list:
    """`hits` (best first) without a unit hit that restates a unit ranked above it by the same
    speaker (`is_restatement`; `vector_of(unit id)`: its unit text vector, None when unknown:
    then only the same text counts): the safety net for stores written before repeats were
    folded at write time. Raw-turn hits are kept as they are."""
    kept: list = []
    seen: list[tuple[Any, np.ndarray | None, str]] = []
    for h in hits:
        if h.views == ("raw",):
            kept.append(h)
            continue
        vec, norm = vector_of(h.amu.amu_id), _norm(h.amu.text)
        copy = False
        for other, ovec, onorm in seen:
            if other.speaker != h.amu.speaker:
                continue
            cos = float(vec @ ovec) if vec is not None and ovec is not None else 0.0
            if cos < RESTATE_FLOOR and norm != onorm:
                continue  # `is_restatement` is False both ways: neither close enough nor the same text
            if is_restatement(h.amu.text, other.text, cos, other_day=h.amu.timestamp.date() != other.timestamp.date()) \
                    or is_restatement(other.text, h.amu.text, cos,
                                      other_day=h.amu.timestamp.date() != other.timestamp.date()):
                copy = True
                break
        if not copy:
            kept.append(h)
            seen.append((h.amu, vec, norm))
    return kept


__all__ = ["LLMRestatement", "LLM_FLOOR", "Prior", "REPEATS", "RESTATE_FLOOR", "RESTATE_STRICT",
           "RestatementClassifier", "RuleRestatement", "collapse_repeats", "facets", "find_restatements", "is_restatement", "other_object", "parse_verdict",
           "verdict_schema"]
