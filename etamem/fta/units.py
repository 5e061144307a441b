"""Fact-Time-Affect units: the data model, the rule and LLM extractors, and carry-over with
fusion across segments (FTA-Mem; see docs/design.md, 'FTA-Mem').

A unit m = <fact, time, affect, evidence, completeness> (the paper's <x^F, x^T, x^A, e, o>):

- `FactAnchor`: self-contained text (names, dates, quantities, negations kept), content type
  (the paper's eight), participants, short summary;
- `TimeAnchor`: dialogue time, orientation (past/present/future/mixed/unknown), the event
  window [event_start, event_end) resolved against the dialogue time, the expression resolved;
- `AffectAnchor`: tagger label and scores (negative, neutral, positive), intensity
  |p_pos - p_neg|, emotion/state words, the intention or plan stated;
- `EvidenceSpan`s: session, turn ids, dialogue time range (a fused unit has one per part);
- `completeness` (paper): complete / partial / pending / unknown; `awaiting`: what an incomplete
  unit waits for ("answer" for a question, "outcome" for a plan);
- `status` (lifecycle): partial (carried construction context, no id) -> final (has an id) ->
  superseded / contradicted (set by links, see `links.py`).

Construction (`construct_units`): segments in order; the extractor turns each segment (with the
units carried from earlier segments) into candidates; a candidate that completes a carried unit
is fused into it (both evidence spans kept; the fused unit becomes final once complete);
incomplete candidates are carried; the rest are finalised with an id. At a session's end every
still-carried unit is finalised as it is (completeness kept), never dropped.
"""
from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Callable, Protocol, Sequence

from ..extraction import (capitalise, content_words, is_salient, prompt_datetime, rewrite_first_person,
                          speaker_name, split_sentences, strip_filler, turn_text)
from ..llm import LLMError, LLMUnavailable
from ..prompts_io import load_prompt, render_prompt
from ..retrieval.temporal import TimeWindow, parse_time_window
from ..timeparse import format_date
from ..types import POLARITIES, Turn
from . import rules
from .rules import CONTENT_TYPES, ORIENTATIONS
from .segmentation import Segment

logger = logging.getLogger(__name__)

COMPLETENESS = ("complete", "partial", "pending", "unknown")
STATUSES = ("partial", "final", "superseded", "contradicted")
CARRIED = ("partial", "pending")  # completeness values that are carried to the next segment
MAX_CARRIED = 8
_YOU_WE = re.compile(r"\b(?:you|your|yours|yourself|we|us|our)\b", re.IGNORECASE)


@dataclass(frozen=True)
class FactAnchor:
    """What happened: the factual claim, its content type, who is involved, a short summary."""

    text: str
    content_type: str = "general_fact"
    participants: tuple[str, ...] = ()
    summary: str = ""


@dataclass(frozen=True)
class TimeAnchor:
    """When: the dialogue time, the orientation, and the event window when one was resolved."""

    dialogue_time: datetime
    orientation: str = "unknown"
    event_start: datetime | None = None
    event_end: datetime | None = None
    expression: str = ""


@dataclass(frozen=True)
class AffectAnchor:
    """How it is felt: tagger label and scores (POLARITIES order), intensity, emotion words, intention."""

    label: str = "neutral"
    scores: tuple[float, float, float] = (0.0, 1.0, 0.0)
    intensity: float = 0.0
    emotions: tuple[str, ...] = ()
    intention: str = ""


@dataclass(frozen=True)
class EvidenceSpan:
    """The source turns of (part of) a unit."""

    session_id: str
    turn_ids: tuple[str, ...]
    start_time: datetime
    end_time: datetime


@dataclass(frozen=True)
class FTAUnit:
    """A Fact-Time-Affect unit (see the module doc). `unit_id` is None while the unit is
    carried construction context (status "partial")."""

    fact: FactAnchor
    time: TimeAnchor
    affect: AffectAnchor
    evidence: tuple[EvidenceSpan, ...]
    speaker: str
    completeness: str = "complete"
    awaiting: str = ""
    status: str = "partial"
    unit_id: str | None = None
    space: str = "default"

    @property
    def text(self) -> str:
        return self.fact.text

    @property
    def content_type(self) -> str:
        return self.fact.content_type

    @property
    def participants(self) -> tuple[str, ...]:
        return self.fact.participants

    @property
    def session_id(self) -> str:
        return self.evidence[0].session_id

    @property
    def turn_ids(self) -> tuple[str, ...]:
        """Every evidence turn id, oldest span first, without repeats."""
        return tuple(dict.fromkeys(t for span in self.evidence for t in span.turn_ids))

    @property
    def dialogue_time(self) -> datetime:
        return self.time.dialogue_time

    @property
    def carried(self) -> bool:
        """True when this unit waits for a later segment (incomplete and awaiting something)."""
        return self.completeness in CARRIED and bool(self.awaiting)


@dataclass(frozen=True)
class Candidate:
    """An extracted unit and, when it completes a carried unit, that unit's index in `carried`."""

    unit: FTAUnit
    completes: int | None = None


class UnitExtractor(Protocol):
    """`extract(segment, turns, carried) -> list[Candidate]` for the turns of one segment."""

    def extract(self, segment: Segment, turns: Sequence[Turn], carried: Sequence[FTAUnit]) -> list[Candidate]: ...


def retrieval_text(unit: FTAUnit) -> str:
    """rho(m): the unit's fact with its time and affect anchors and date, for embedding and search."""
    parts = [unit.text]
    t = unit.time
    when = t.expression or ""
    if t.event_start is not None:
        when = f"{when} ({format_date(t.event_start)})".strip()
    parts.append(f"[{t.orientation}{'; ' + when if when else ''}; said {format_date(t.dialogue_time)}]")
    if unit.affect.label != "neutral" or unit.affect.emotions:
        feel = ", ".join(unit.affect.emotions) or unit.affect.label
        parts.append(f"[feeling: {feel}]")
    return " ".join(parts)


# --- affect -----------------------------------------------------------------------------------
def affect_anchors(texts: Sequence[str], tagger: Any = None, emotions: Sequence[Sequence[str]] | None = None,
                   intentions: Sequence[str] | None = None) -> list[AffectAnchor]:
    """Affect anchors for `texts` from one `tagger.tag(texts)` batch (neutral without a tagger);
    emotion words and intentions from the rules unless given."""
    texts = list(texts)
    labels: list[str] = ["neutral"] * len(texts)
    scores: list[tuple[float, float, float]] = [(0.0, 1.0, 0.0)] * len(texts)
    if tagger is not None and texts:
        batch = tagger.tag(texts)
        labels = list(batch.polarities)
        scores = [tuple(round(float(x), 4) for x in row) for row in batch.scores]  # type: ignore[misc]
    out = []
    for i, text in enumerate(texts):
        s = scores[i]
        out.append(AffectAnchor(
            label=labels[i] if labels[i] in POLARITIES else "neutral", scores=s,  # type: ignore[arg-type]
            intensity=round(abs(float(s[2]) - float(s[0])), 4),
            emotions=tuple(emotions[i]) if emotions is not None else rules.emotion_words(text),
            intention=intentions[i] if intentions is not None else rules.intention(text)))
    return out


# --- rule extractor -----------------------------------------------------------------------------
def addressee_at(turns: Sequence[Turn], i: int) -> str | None:
    """The other speaker nearest to turns[i] (next turn first), as a display name."""
    me = turns[i].speaker
    for j in list(range(i + 1, len(turns))) + list(range(i - 1, -1, -1)):
        if turns[j].speaker != me:
            return speaker_name(turns[j].speaker)
    return None


def third_person_sentence(sentence: str, speaker: str, addressee: str | None, attribute: bool = False) -> str:
    """`sentence` with I/me/my -> `speaker` and you/your -> `addressee`; with `attribute`, a
    sentence that still does not name the speaker (imperatives, "we", plain descriptions) is
    prefixed "<speaker> said: " so that it stays self-contained."""
    out = capitalise(rewrite_first_person(sentence, speaker).strip())
    if addressee:
        out = capitalise(rules.rewrite_second_person(out, addressee))
    if attribute and not re.search(rf"\b{re.escape(speaker)}\b", out):
        out = f"{speaker} said: {out}"
    return out


def _evidence(turns: Sequence[Turn]) -> EvidenceSpan:
    return EvidenceSpan(turns[0].session_id, tuple(t.turn_id for t in turns),
                        min(t.timestamp for t in turns), max(t.timestamp for t in turns))


@dataclass
class Draft:
    """A unit before its anchors: third-person `text`, first-person `source`, speaker, evidence
    turns and participants (`build_units` makes the `FTAUnit`)."""

    text: str
    source: str  # first-person wording, for the rules
    speaker: str
    turns: list[Turn]
    participants: tuple[str, ...]
    awaiting: str = ""


class RuleUnitExtractor:
    """Offline extractor: per turn, filler-free sentences rewritten in the third person; a
    question with the other speaker's reply in the segment makes one question-answer unit; a
    question left unanswered at the segment end is a partial unit awaiting an answer; consecutive
    statements of a turn with the same content type and orientation form one unit. Times are
    resolved against the dialogue time, orientation and content type come from cue words
    (`rules`), affect from the injected `tagger` (`.tag(texts)`, e.g. VADER). A plan (future
    orientation) is `pending`, awaiting its outcome; `match_carried` decides completions.
    Deterministic."""

    def __init__(self, tagger: Any = None, *, min_words: int = 3) -> None:
        self.tagger = tagger
        self.min_words = min_words

    def extract(self, segment: Segment, turns: Sequence[Turn], carried: Sequence[FTAUnit] = ()) -> list[Candidate]:
        drafts = self._drafts(list(turns))
        units = build_units(drafts, self.tagger)
        out = []
        taken: set[int] = set()
        for unit in units:
            k = match_carried(unit, carried, segment, exclude=taken)
            if k is not None:
                taken.add(k)
            out.append(Candidate(unit, k))
        return out

    def _informative(self, sentence: str) -> bool:
        return len(content_words(sentence)) >= self.min_words

    def _drafts(self, turns: list[Turn]) -> list[Draft]:
        drafts: list[Draft] = []
        consumed: set[int] = set()  # turns whose statements went into a question-answer unit
        for i, turn in enumerate(turns):
            name = speaker_name(turn.speaker)
            other = addressee_at(turns, i)
            sentences = [s for s in (strip_filler(x) for x in split_sentences(turn_text(turn))) if s]
            questions = [s for s in sentences if s.rstrip().endswith("?")]
            statements = [s for s in sentences if not s.rstrip().endswith("?")]
            if i not in consumed:
                self._statement_drafts(drafts, statements, turn, name, other)
            asked = [q for q in questions if content_words(q)]
            if not asked:
                continue
            q_text = " ".join(third_person_sentence(q, name, other) for q in asked)
            reply = turns[i + 1] if i + 1 < len(turns) and turns[i + 1].speaker != turn.speaker else None
            if reply is None:
                if sum(len(content_words(q)) for q in asked) >= max(1, self.min_words - 1):
                    drafts.append(Draft(f"{name} asked: {q_text}", " ".join(asked), name, [turn],
                                         tuple(p for p in (name, other) if p), awaiting="answer"))
                continue
            r_name = speaker_name(reply.speaker)
            r_sent = [s for s in (strip_filler(x) for x in split_sentences(turn_text(reply))) if s]
            r_stmt = [s for s in r_sent if not s.rstrip().endswith("?")]
            answer = " ".join(third_person_sentence(s, r_name, name) for s in r_stmt)
            words = sum(len(content_words(q)) for q in asked) + sum(len(content_words(s)) for s in r_stmt)
            if not answer or words < self.min_words:
                continue  # small talk ("How are you?" - "Good!"): the reply is handled as a turn
            consumed.add(i + 1)
            drafts.append(Draft(f"{name} asked: {q_text} {r_name}: {answer}", " ".join(r_stmt), r_name,
                                 [turn, reply], tuple(dict.fromkeys((r_name, name)))))
        return drafts

    def _statement_drafts(self, drafts: list[Draft], statements: list[str], turn: Turn, name: str,
                          other: str | None) -> None:
        """One unit for the turn's statements (a turn is one speaker's act; LoCoMo's evidence is
        per turn), except that the speaker's own plans form a separate pending unit that awaits
        its outcome. A short sentence is kept beside the others when it names something
        (`is_salient`: "Her name is Pixel.") and dropped otherwise ("Sounds fun!"); the kept
        sentences of a unit need `min_words` content words together, so a turn of one short
        salient sentence alone makes no unit."""
        participants = [p for p in (name, other) if p]
        facts: list[str] = []
        plans: list[str] = []
        for s in statements:
            if not (self._informative(s) or is_salient(s, participants)):
                continue
            window = rules.resolve_event_time(s, turn.timestamp)
            orient = rules.orientation(s, window, turn.timestamp)
            (plans if rules.content_type(s, orient) == "homework_or_plan" else facts).append(s)
        for sents, plan in ((facts, False), (plans, True)):
            if not sents or not self._informative(" ".join(sents)):
                continue
            text = " ".join(sents)
            parts = (name,) + ((other,) if other and mentions_you(text) else ())
            drafts.append(Draft(third_person_sentence(text, name, other, attribute=True), text, name,
                                 [turn], parts, awaiting="outcome" if plan else ""))


def mentions_you(text: str) -> bool:
    return bool(_YOU_WE.search(text))


def build_units(drafts: Sequence[Draft], tagger: Any = None) -> list[FTAUnit]:
    """FTA units for drafts: time resolved against the first evidence turn's time, orientation
    and content type by rules, affect from one tagger batch."""
    affects = affect_anchors([d.text for d in drafts], tagger)
    units = []
    for d, affect in zip(drafts, affects):
        now = d.turns[0].timestamp
        window = rules.resolve_event_time(d.source, now)
        orient = rules.orientation(d.source, window, now)
        ctype = rules.content_type(d.source, orient)
        if d.awaiting == "outcome":
            ctype = "homework_or_plan"
        completeness = {"answer": "partial", "outcome": "pending"}.get(d.awaiting, "complete")
        units.append(FTAUnit(
            fact=FactAnchor(d.text, ctype, d.participants, _summary(d.text)),
            time=TimeAnchor(now, orient, window.start if window else None, window.end if window else None,
                            window.expression if window else ""),
            affect=affect, evidence=(_evidence(d.turns),), speaker=d.speaker, completeness=completeness,
            awaiting=d.awaiting, space=d.turns[0].space))
    return units


def _summary(text: str, n: int = 12) -> str:
    words = text.split()
    return text if len(words) <= n else " ".join(words[:n]) + " ..."


# --- carry-over and fusion ---------------------------------------------------------------------
def match_carried(unit: FTAUnit, carried: Sequence[FTAUnit], segment: Segment | None = None,
                  exclude: set[int] | frozenset[int] = frozenset()) -> int | None:
    """Index of the carried unit that `unit` completes, by rules, else None:

    - a question awaiting an answer: `unit` is said by another participant in the first turn of
      the segment that follows;
    - a plan awaiting its outcome: `unit` is not itself a plan, is past/present/mixed, shares a
      participant and a topic word ("camping" in "will go camping" / "went camping").
    The latest matching carried unit wins."""
    names = frozenset(p.lower() for u in [unit, *carried] for p in u.participants)
    stems = rules.topic_stems(unit.text, names)
    first_turn = segment.turn_ids[0] if segment is not None else None
    for k in range(len(carried) - 1, -1, -1):
        c = carried[k]
        if k in exclude or not c.carried:
            continue
        if c.awaiting == "answer":
            if first_turn is not None and unit.evidence[0].turn_ids[0] == first_turn and unit.speaker != c.speaker:
                return k
            continue
        if unit.awaiting or unit.time.orientation not in ("past", "present", "mixed"):
            continue
        if not set(unit.participants) & set(c.participants):
            continue
        if stems & rules.topic_stems(c.text, names):
            return k
    return None


def _merge_evidence(a: Sequence[EvidenceSpan], b: Sequence[EvidenceSpan]) -> tuple[EvidenceSpan, ...]:
    out = list(a)
    for span in b:
        if span not in out:
            out.append(span)
    return tuple(out)


def fuse(partial: FTAUnit, completion: FTAUnit) -> FTAUnit:
    """Merge a carried unit with the unit that completes it: texts joined, participants and
    evidence spans united (both kept, oldest first), the completion's event window (else the
    partial's), orientation "mixed" when the two differ, the stronger affect with both emotion
    lists, the partial's intention. Completeness becomes the completion's (so a plan with its
    outcome is complete); the dialogue time stays the partial's (first mention). Status unchanged."""
    text = partial.text if completion.text in partial.text else f"{partial.text.rstrip()} {completion.text}"
    ctype = partial.content_type
    if completion.content_type not in ("general_fact",) and partial.awaiting == "outcome":
        ctype = completion.content_type if completion.content_type != "support_interaction" else ctype
    participants = tuple(dict.fromkeys(partial.participants + completion.participants))
    pt, ct = partial.time, completion.time
    orient = pt.orientation if pt.orientation == ct.orientation else "mixed"
    if ct.event_start is not None:
        start, end = ct.event_start, ct.event_end
    else:
        start, end = pt.event_start, pt.event_end
    expression = "; ".join(e for e in dict.fromkeys((pt.expression, ct.expression)) if e)
    strong = completion.affect if completion.affect.intensity >= partial.affect.intensity else partial.affect
    affect = replace(strong, emotions=tuple(dict.fromkeys(partial.affect.emotions + completion.affect.emotions)),
                     intention=partial.affect.intention or completion.affect.intention)
    return replace(
        partial,
        fact=FactAnchor(text, ctype, participants, _summary(text)),
        time=TimeAnchor(pt.dialogue_time, orient, start, end, expression),
        affect=affect,
        evidence=_merge_evidence(partial.evidence, completion.evidence),
        completeness=completion.completeness if completion.completeness != "unknown" else partial.completeness,
        awaiting="" if completion.completeness == "complete" else partial.awaiting,
    )


def content_id(unit: FTAUnit) -> str:
    """A deterministic id from the unit's space, evidence turns and text ("fta-" + 16 hex)."""
    key = json.dumps([unit.space, unit.session_id, list(unit.turn_ids), unit.text], ensure_ascii=False)
    return "fta-" + hashlib.blake2b(key.encode("utf-8"), digest_size=8).hexdigest()


@dataclass(frozen=True)
class UnitConstruction:
    """Finalised units (with ids, in finalisation order), still-carried units (only when the last
    session is not complete) and counts: candidates fused, carried units finalised incomplete."""

    units: list[FTAUnit]
    carried: list[FTAUnit] = field(default_factory=list)
    fused: int = 0
    finalised_incomplete: int = 0


def construct_units(turns: Sequence[Turn], segments: Sequence[Segment], extractor: UnitExtractor, *,
                    new_id: Callable[[FTAUnit], str] = content_id, max_carried: int = MAX_CARRIED,
                    complete: bool = True, carried: Sequence[FTAUnit] = ()) -> UnitConstruction:
    """Run `extractor` over `segments` in order with carry-over and fusion (module doc).

    `turns` holds every turn the segments name. Carried units are reset at each session change
    (the previous session's are finalised as they are). `max_carried`: when more units wait,
    the oldest is finalised. `complete=False`: the last session is still running, its carried
    units are returned (pass them back as `carried` with the next segments)."""
    by_id = {t.turn_id: t for t in turns}
    out: list[FTAUnit] = []
    waiting: list[FTAUnit] = list(carried)
    fused = incomplete = 0
    session: str | None = waiting[0].session_id if waiting else None

    def finalise(unit: FTAUnit) -> None:
        out.append(replace(unit, status="final", unit_id=new_id(unit)))

    def flush() -> None:
        nonlocal incomplete
        for unit in waiting:
            incomplete += unit.completeness != "complete"
            finalise(unit)
        waiting.clear()

    for segment in segments:
        if session is not None and segment.session_id != session:
            flush()
        session = segment.session_id
        try:
            seg_turns = [by_id[t] for t in segment.turn_ids]
        except KeyError as exc:
            raise ValueError(f"segment {segment.session_id}:{segment.start}-{segment.end} names turn {exc} "
                             "that is not among the turns given") from None
        candidates = extractor.extract(segment, seg_turns, list(waiting))
        completed: dict[int, FTAUnit] = {}
        new_waiting: list[FTAUnit] = []
        for cand in candidates:
            k = cand.completes
            if k is not None and 0 <= k < len(waiting):
                base = completed.get(k, waiting[k])
                completed[k] = fuse(base, cand.unit)
                fused += 1
            elif cand.unit.carried:
                new_waiting.append(cand.unit)
            else:
                finalise(cand.unit)
        kept: list[FTAUnit] = []
        for k, unit in enumerate(waiting):
            unit = completed.get(k, unit)
            if unit.carried:
                kept.append(unit)
            else:
                finalise(unit)
        waiting[:] = kept + new_waiting
        while len(waiting) > max(0, max_carried):
            unit = waiting.pop(0)
            incomplete += unit.completeness != "complete"
            finalise(unit)
    if complete:
        flush()
    return UnitConstruction(out, list(waiting), fused, incomplete)


# --- LLM extractor ---------------------------------------------------------------------------
def _format_segment(segment: Segment, turns: Sequence[Turn]) -> str:
    return "\n".join(f"[{segment.start + k}] (id {t.turn_id}; {prompt_datetime(t.timestamp)}) "
                     f"{speaker_name(t.speaker)}: {turn_text(t)}" for k, t in enumerate(turns))


def _format_carried(carried: Sequence[FTAUnit]) -> str:
    if not carried:
        return "(none)"
    lines = []
    for k, u in enumerate(carried, 1):
        lines.append(f"P{k}: {u.text} (status {u.completeness}, waiting for {u.awaiting or 'more detail'}; "
                     f"turns {', '.join(u.turn_ids)}; said {prompt_datetime(u.dialogue_time)})")
    return "\n".join(lines)


def _choice(value: Any, allowed: Sequence[str], default: str) -> str:
    v = value.strip().lower().replace("-", "_").replace(" ", "_") if isinstance(value, str) else ""
    return v if v in allowed else default


def _names(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [p for p in value.replace("|", ",").split(",")]
    if not isinstance(value, list):
        return ()
    return tuple(dict.fromkeys(speaker_name(p.strip()) for p in value if isinstance(p, str) and p.strip()))


def _known(value: Any) -> str:
    if not isinstance(value, str):
        return ""
    v = value.strip()
    return "" if v.lower() in ("", "unknown", "none", "n/a", "null") else v


def parse_unit_reply(reply: Any, segment: Segment, n_carried: int) -> list[dict[str, Any]]:
    """Validated unit dicts from a `{"memory_units": [...]}` reply; ValueError when unusable (not
    of that form, an item without text, an evidence span that is not two integers or lies wholly
    outside the segment). Spans overlapping the segment are clipped to it; unknown content types,
    orientations and statuses read as general_fact / unknown / unknown; a `completes` that names
    no carried unit is ignored."""
    items = reply.get("memory_units") if isinstance(reply, dict) else reply
    if not isinstance(items, list):
        raise ValueError('expected {"memory_units": [...]}')
    out = []
    for item in items:
        if not isinstance(item, dict):
            raise ValueError(f"memory unit must be an object, got {type(item).__name__}")
        content = item.get("content") if isinstance(item.get("content"), dict) else {}
        text = item.get("text", content.get("text"))
        if not isinstance(text, str) or not text.strip():
            raise ValueError("memory unit without text")
        span = item.get("evidence_turn_span")
        if span is None:
            b, e = segment.start, segment.end
        else:
            if (not isinstance(span, list) or len(span) != 2
                    or not all(isinstance(x, int) and not isinstance(x, bool) for x in span)):
                raise ValueError(f"evidence_turn_span must be [start, end] integers, got {span!r}")
            b, e = sorted(span)
            if e < segment.start or b > segment.end:
                raise ValueError(f"evidence_turn_span {span} lies outside the segment [{segment.start}, {segment.end}]")
            b, e = max(b, segment.start), min(e, segment.end)
        completes = item.get("completes")
        k = None
        if isinstance(completes, str) and completes.strip().upper().startswith("P") and completes.strip()[1:].isdigit():
            k = int(completes.strip()[1:]) - 1
        elif isinstance(completes, int) and not isinstance(completes, bool):
            k = completes - 1
        out.append({
            "text": " ".join(text.split()),
            "summary": _known(item.get("summary")),
            "content_type": _choice(item.get("content_type"), CONTENT_TYPES, "general_fact"),
            "orientation": _choice(item.get("time_orientation"), ORIENTATIONS, "unknown"),
            "event_time": _known(item.get("event_time")),
            "participants": _names(item.get("participants", content.get("participants"))),
            "emotion": _known(item.get("emotion_or_state", content.get("emotion_or_state"))),
            "intention": _known(item.get("intention_or_plan", content.get("intention_or_plan"))),
            "span": (b, e),
            "status": _choice(item.get("status"), COMPLETENESS, "unknown"),
            "completes": k if k is not None and 0 <= k < n_carried else None,
        })
    return out


def _event_window(expression: str, text: str, now: datetime) -> TimeWindow | None:
    """The LLM's event time (an ISO date, or words the temporal parser resolves), else the
    window the unit text names."""
    if expression:
        try:
            day = datetime.fromisoformat(expression[:10])
            start = day.replace(tzinfo=now.tzinfo) if day.tzinfo is None else day
            return TimeWindow(start, start + timedelta(days=1), expression, "absolute")
        except ValueError:
            pass
        window = parse_time_window(expression, now)
        if window is not None and window.kind in ("relative", "absolute", "before", "after"):
            return window
    return rules.resolve_event_time(text, now)


class LLMUnitExtractor:
    """One LLM call per segment (prompt `fta_extract`, stage "fta_extract") with the carried
    units in the prompt; the reply names which carried unit a new one completes. Affect labels
    and scores come from the `tagger` (the LLM gives emotion words and intentions); times are
    resolved with the project's parser. An unusable reply falls back to `fallback` (the rule
    extractor) for that segment, counted in `stats`; no reply (`LLMUnavailable`) propagates."""

    STAGE = "fta_extract"

    def __init__(self, llm: Any, tagger: Any = None, *, fallback: RuleUnitExtractor | None = None,
                 temperature: float | None = None, prompt: str = "fta_extract") -> None:
        self.llm = llm
        self.tagger = tagger
        self.fallback = fallback if fallback is not None else RuleUnitExtractor(tagger)
        self.temperature = temperature
        self.prompt = prompt
        load_prompt(prompt)
        self._lock = threading.Lock()
        self._stats = {"segments": 0, "llm_segments": 0, "fallback_segments": 0, "llm_units": 0, "fallback_units": 0}

    @property
    def stats(self) -> dict[str, int]:
        with self._lock:
            return dict(self._stats)

    def build_messages(self, segment: Segment, turns: Sequence[Turn], carried: Sequence[FTAUnit]) -> list[dict]:
        text = render_prompt(self.prompt, date=prompt_datetime(turns[0].timestamp) if turns else "unknown",
                             segment=_format_segment(segment, turns), carried=_format_carried(carried),
                             first=segment.start, last=segment.end, content_types=" | ".join(CONTENT_TYPES))
        return [{"role": "user", "content": text}]

    def extract(self, segment: Segment, turns: Sequence[Turn], carried: Sequence[FTAUnit] = ()) -> list[Candidate]:
        turns = list(turns)
        params = {} if self.temperature is None else {"temperature": self.temperature}
        try:
            items = self.llm.complete_json(self.build_messages(segment, turns, carried), stage=self.STAGE,
                                           validate=lambda r: parse_unit_reply(r, segment, len(carried)), **params)
            if not (isinstance(items, list) and all(isinstance(i, dict) and "span" in i for i in items)):
                items = parse_unit_reply(items, segment, len(carried))
        except LLMUnavailable:
            raise
        except (LLMError, ValueError) as exc:
            logger.warning("fta extraction: unusable LLM reply for segment %s:%d-%d (%s); rule extractor",
                           segment.session_id, segment.start, segment.end, exc)
            out = self.fallback.extract(segment, turns, carried)
            with self._lock:
                self._stats["segments"] += 1
                self._stats["fallback_segments"] += 1
                self._stats["fallback_units"] += len(out)
            return out
        out = self._candidates(items, segment, turns)
        with self._lock:
            self._stats["segments"] += 1
            self._stats["llm_segments"] += 1
            self._stats["llm_units"] += len(out)
        return out

    def _candidates(self, items: list[dict[str, Any]], segment: Segment, turns: list[Turn]) -> list[Candidate]:
        texts = [i["text"] for i in items]
        emotions = [tuple(e.strip().lower() for e in i["emotion"].split(",") if e.strip())
                    or rules.emotion_words(i["text"]) for i in items]
        intentions = [i["intention"] or rules.intention(i["text"]) for i in items]
        affects = affect_anchors(texts, self.tagger, emotions, intentions)
        out = []
        for item, affect in zip(items, affects):
            b, e = item["span"]
            span_turns = turns[b - segment.start:e - segment.start + 1]
            now = span_turns[0].timestamp
            window = _event_window(item["event_time"], item["text"], now)
            orient = item["orientation"]
            if orient == "unknown":
                orient = rules.orientation(item["text"], window, now)
            status = item["status"]
            awaiting = ""
            if status == "pending":
                awaiting = "outcome"
            elif status == "partial":
                awaiting = "answer" if item["text"].rstrip().endswith("?") else "more detail"
            speaker = speaker_name(span_turns[0].speaker)
            participants = item["participants"] or tuple(dict.fromkeys(speaker_name(t.speaker) for t in span_turns))
            unit = FTAUnit(
                fact=FactAnchor(item["text"], item["content_type"], participants,
                                item["summary"] or _summary(item["text"])),
                time=TimeAnchor(now, orient, window.start if window else None, window.end if window else None,
                                window.expression if window else ""),
                affect=affect, evidence=(_evidence(span_turns),),
                speaker=speaker if speaker in participants or not participants else participants[0],
                completeness=status, awaiting=awaiting, space=span_turns[0].space)
            out.append(Candidate(unit, item["completes"]))
        return out


__all__ = ["AffectAnchor", "CARRIED", "COMPLETENESS", "CONTENT_TYPES", "Candidate", "EvidenceSpan", "FTAUnit",
           "FactAnchor", "LLMUnitExtractor", "MAX_CARRIED", "ORIENTATIONS", "RuleUnitExtractor", "STATUSES",
           "TimeAnchor", "UnitConstruction", "UnitExtractor", "affect_anchors", "construct_units",
           "content_id", "fuse", "match_carried", "parse_unit_reply", "retrieval_text"]
