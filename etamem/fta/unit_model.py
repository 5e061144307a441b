"""The FTA unit data model (see `etamem.fta.units` for what each anchor holds) and the shared
unit builder: drafts made into units with their time, orientation, content type and affect
anchors, and the deterministic unit id."""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol, Sequence

from etamem.fta import rules
from etamem.fta.segmentation import Segment
from etamem.ingest.timeparse import format_date
from etamem.records import POLARITIES, Turn

COMPLETENESS = ("complete", "partial", "pending", "unknown")
STATUSES = ("partial", "final", "superseded", "contradicted")
# the paper's lifecycle of a stored unit, kept by link maintenance beside STATUSES (`Lifecycle`)
LIFECYCLE_STATES = ("pending", "completed", "contradicted", "archived", "unknown")
LIFECYCLE_COMPLETENESS = ("complete", "partial", "unknown")
# which anchors represent a unit (`Config.fta_anchors`): the time and affect anchors kept
ANCHORS = {"all": ("time", "affect"), "no-time": ("affect",), "no-affect": ("time",), "fact-only": ()}
CARRIED = ("partial", "pending")  # completeness values that are carried to the next segment
MAX_CARRIED = 8


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
class Lifecycle:
    """The paper's lifecycle of a stored unit: `status` (LIFECYCLE_STATES), `completeness`
    (LIFECYCLE_COMPLETENESS) and `updated_at`, the event time of the newer unit whose link last
    changed them (None until a link does). Kept beside `FTAUnit.status` (superseded /
    contradicted), which decides the ranking; this record is shown, not ranked on."""

    status: str = "unknown"
    completeness: str = "unknown"
    updated_at: datetime | None = None


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
    lifecycle: Lifecycle = Lifecycle()

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


def anchors_of(anchors: str) -> tuple[str, ...]:
    """The anchors besides the fact that `anchors` (a `Config.fta_anchors` value) keeps."""
    if anchors not in ANCHORS:
        raise ValueError(f"anchors must be one of {sorted(ANCHORS)}, got {anchors!r}")
    return ANCHORS[anchors]


def retrieval_text(unit: FTAUnit, anchors: str = "all") -> str:
    """rho(m): the unit's fact with its time and affect anchors and date, for embedding and search;
    `anchors` ("no-time", "no-affect", "fact-only") leaves anchors out (the paper's ablations)."""
    keep = anchors_of(anchors)
    parts = [unit.text]
    t = unit.time
    when = t.expression or ""
    if t.event_start is not None:
        when = f"{when} ({format_date(t.event_start)})".strip()
    if "time" in keep:
        parts.append(f"[{t.orientation}{'; ' + when if when else ''}; said {format_date(t.dialogue_time)}]")
    if "affect" in keep and (unit.affect.label != "neutral" or unit.affect.emotions):
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


def evidence_span(turns: Sequence[Turn]) -> EvidenceSpan:
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
            fact=FactAnchor(d.text, ctype, d.participants, short_summary(d.text)),
            time=TimeAnchor(now, orient, window.start if window else None, window.end if window else None,
                            window.expression if window else ""),
            affect=affect, evidence=(evidence_span(d.turns),), speaker=d.speaker, completeness=completeness,
            awaiting=d.awaiting, space=d.turns[0].space))
    return units


def short_summary(text: str, n: int = 12) -> str:
    words = text.split()
    return text if len(words) <= n else " ".join(words[:n]) + " ..."


def content_id(unit: FTAUnit) -> str:
    """A deterministic id from the unit's space, evidence turns and text ("fta-" + 16 hex)."""
    key = json.dumps([unit.space, unit.session_id, list(unit.turn_ids), unit.text], ensure_ascii=False)
    return "fta-" + hashlib.blake2b(key.encode("utf-8"), digest_size=8).hexdigest()


def initial_lifecycle(unit: FTAUnit) -> Lifecycle:
    """The lifecycle a unit is stored with: "pending" for a plan or follow-up still open
    (completeness "pending"), else "unknown"; completeness as extracted when it is complete or
    partial, else "unknown". Links change it later (`etamem.fta.links.lifecycle_update`)."""
    status = "pending" if unit.completeness == "pending" else "unknown"
    completeness = unit.completeness if unit.completeness in ("complete", "partial") else "unknown"
    return Lifecycle(status, completeness, unit.lifecycle.updated_at)
