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
  superseded / contradicted (set by links, see `links.py`);
- `lifecycle` (the paper's, beside `status`): pending / completed / contradicted / archived /
  unknown, completeness complete / partial / unknown, and the update time, set by links.

Construction (`construct_units`): segments in order; the extractor turns each segment (with the
units carried from earlier segments) into candidates; a candidate that completes a carried unit
is fused into it (both evidence spans kept; the fused unit becomes final once complete);
incomplete candidates are carried; the rest are finalised with an id. At a session's end every
still-carried unit is finalised as it is (completeness kept), never dropped.

Where the pieces live: the data model and the shared unit builder in `unit_model.py`, the rule
extractor and `match_carried` in `rule_units.py`, the LLM extractor in `llm_units.py`; fusion
and construction here. Every name stays importable from this module.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

from etamem.fta.llm_units import LLMUnitExtractor, parse_unit_reply
from etamem.fta.rule_units import RuleUnitExtractor, addressee_at, match_carried, mentions_you, third_person_sentence
from etamem.fta.rules import CONTENT_TYPES, ORIENTATIONS
from etamem.fta.segmentation import Segment
from etamem.fta.unit_model import (
    CARRIED,
    COMPLETENESS,
    LIFECYCLE_COMPLETENESS,
    LIFECYCLE_STATES,
    MAX_CARRIED,
    STATUSES,
    AffectAnchor,
    Candidate,
    Draft,
    EvidenceSpan,
    FactAnchor,
    FTAUnit,
    Lifecycle,
    TimeAnchor,
    UnitExtractor,
    affect_anchors,
    anchors_of,
    build_units,
    content_id,
    initial_lifecycle,
    retrieval_text,
    short_summary,
)
from etamem.records import Turn


# --- carry-over and fusion ---------------------------------------------------------------------
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
        fact=FactAnchor(text, ctype, participants, short_summary(text)),
        time=TimeAnchor(pt.dialogue_time, orient, start, end, expression),
        affect=affect,
        evidence=_merge_evidence(partial.evidence, completion.evidence),
        completeness=completion.completeness if completion.completeness != "unknown" else partial.completeness,
        awaiting="" if completion.completeness == "complete" else partial.awaiting,
    )


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


__all__ = ["AffectAnchor", "CARRIED", "COMPLETENESS", "CONTENT_TYPES", "Candidate", "EvidenceSpan", "FTAUnit",
           "FactAnchor", "LIFECYCLE_COMPLETENESS", "LIFECYCLE_STATES", "LLMUnitExtractor", "Lifecycle", "anchors_of",
           "initial_lifecycle", "MAX_CARRIED", "ORIENTATIONS", "RuleUnitExtractor", "STATUSES",
           "TimeAnchor", "UnitConstruction", "UnitExtractor", "affect_anchors", "construct_units",
           "content_id", "fuse", "match_carried", "parse_unit_reply", "retrieval_text",
           # the pieces the query-side units (etamem.fta.search) are built with
           "Draft", "addressee_at", "build_units", "mentions_you", "third_person_sentence"]
