"""FTA-Mem context synthesis and the two retrieval-time LLM calls (see docs/design.md, 'FTA-Mem', retrieval and packet).

- `render_packet`: the structured memory packet handed to the answer model, in four sections
  (primary units, linked neighbours, source dialogue spans, auxiliary memory), or one flat list
  of unit texts for the ablation;
- `rewrite_query`: one LLM call (stage "fta_rewrite") that turns a question into a
  self-contained retrieval query; any failure falls back to the question itself;
- `answer_from_packet`: one LLM call (stage "answer", temperature 0) over the packet.
"""
from __future__ import annotations

import logging
import re
from datetime import datetime, timedelta
from typing import Any, Sequence

from etamem.extraction.extractors import prompt_datetime, speaker_name, turn_text
from etamem.fta.units import FTAUnit, anchors_of
from etamem.ingest.timeparse import format_date
from etamem.models.llm import LLMError
from etamem.models.prompt_files import render_prompt
from etamem.records import Turn

logger = logging.getLogger(__name__)

REWRITE_STAGE = "fta_rewrite"
ANSWER_STAGE = "answer"
ANSWER_PROMPTS = {"locomo": "fta_answer", "longmemeval": "fta_answer_longmemeval",
                  "short": "fta_answer"}  # FTA-Mem's packet has its sections; no short form of it
MAX_REWRITE_CHARS = 1000  # a longer reply is an answer or an essay, not a query
NONE = "(none)"
SECTIONS = ("# Primary memory units", "# Linked neighbour units", "# Source dialogue spans", "# Auxiliary memory")

# how a neighbour stands to its primary unit P, keyed by the relation read from P's side
_RELATION_PHRASES = {
    "supersedes": "older version, replaced by {p}",
    "superseded_by": "newer version: replaces {p}",
    "updates": "earlier unit that {p} adds to",
    "updated_by": "adds detail or progress to {p}",
    "contradicts": "contradicted by {p}",
    "contradicted_by": "contradicts {p}",
    "followup_of": "earlier unit that {p} follows up",
    "followed_up_by": "follows up {p}",
    "same_episode_as": "same episode as {p}",
    "supports": "supported by {p}",
    "supported_by": "supports {p}",
}
_COMPLETENESS_NOTES = {"partial": "partial: some details missing", "pending": "pending: outcome not yet known"}
_PREFIX = re.compile(r"^(?:rewritten\s+)?(?:search\s+|retrieval\s+)?query\s*:\s*", re.IGNORECASE)


# --- packet --------------------------------------------------------------------------------
def _event_dates(unit: FTAUnit) -> str:
    t = unit.time
    if t.event_start is None:
        return ""
    if t.event_end is None or t.event_end - t.event_start <= timedelta(days=1):
        return format_date(t.event_start)
    return f"{format_date(t.event_start)} to {format_date(t.event_end - timedelta(microseconds=1))}"


def _time_text(unit: FTAUnit) -> str:
    t = unit.time
    parts = [t.orientation]
    dates = _event_dates(unit)
    if t.expression and dates:
        parts.append(f'"{t.expression}" = {dates}')
    elif dates or t.expression:
        parts.append(dates or f'"{t.expression}"')
    return "; ".join(parts)


def _affect_text(unit: FTAUnit) -> str:
    a = unit.affect
    text = a.label + (f" ({', '.join(a.emotions)})" if a.emotions else "")
    return text + (f"; intends to {a.intention}" if a.intention else "")


def status_text(unit: FTAUnit) -> str:
    """The unit's lifecycle status in words: "current" (with a completeness note when it is
    partial / pending), "SUPERSEDED by a newer unit" or "CONTRADICTED by a newer unit"."""
    if unit.status == "superseded":
        return "SUPERSEDED by a newer unit (no longer current)"
    if unit.status == "contradicted":
        return "CONTRADICTED by a newer unit"
    note = _COMPLETENESS_NOTES.get(unit.completeness)
    return f"current ({note})" if note else "current"


def lifecycle_text(unit: FTAUnit) -> str:
    """The paper's lifecycle of a unit in words ("lifecycle: completed, complete, updated
    2023-05-20"), "" while it is unknown / unknown (nothing a link or the extraction said)."""
    life = unit.lifecycle
    if life.status == "unknown" and life.completeness == "unknown":
        return ""
    when = f", updated {format_date(life.updated_at)}" if life.updated_at is not None else ""
    return f"lifecycle: {life.status}, {life.completeness}{when}"


def unit_line(label: str, unit: FTAUnit, anchors: str = "all") -> str:
    """`label. [date said] fact | time: ... | affect: ... | status: ... | lifecycle: ...` for one
    unit; `anchors` ("no-time", "no-affect", "fact-only") leaves the date and time / affect out."""
    keep = anchors_of(anchors)
    life = lifecycle_text(unit)
    date = f"[{format_date(unit.dialogue_time)}] " if "time" in keep else ""
    parts = [f"{label}. {date}{unit.text}"]
    if "time" in keep:
        parts.append(f"time: {_time_text(unit)}")
    if "affect" in keep:
        parts.append(f"affect: {_affect_text(unit)}")
    parts.append(f"status: {status_text(unit)}")
    return " | ".join(parts + ([life] if life else []))


def relation_text(relation: str, primary_label: str) -> str:
    """How a neighbour relates to primary unit `primary_label`, from the relation read on the
    primary's side ("updated_by" -> "newer version: updates M1")."""
    phrase = _RELATION_PHRASES.get(relation)
    if phrase is None:
        return f"{relation.replace('_', ' ')} ({primary_label})"
    return phrase.format(p=primary_label)


def _flat(primary: Sequence[FTAUnit], neighbours: Sequence[tuple[FTAUnit, str, str]], dated: bool = True) -> str:
    seen: set[str] = set()
    lines = []
    for unit in [*primary, *(n[0] for n in neighbours)]:
        key = unit.unit_id or f"text:{unit.text}"
        if key in seen:
            continue
        seen.add(key)
        lines.append(f"- [{format_date(unit.dialogue_time)}] {unit.text}" if dated else f"- {unit.text}")
    return "\n".join(lines) or NONE


def render_packet(primary: Sequence[FTAUnit], neighbours: Sequence[tuple[FTAUnit, str, str]],
                  spans: Sequence[tuple[str, list[Turn]]], auxiliary: str, *, flat: bool = False,
                  anchors: str = "all") -> str:
    """The memory packet (SECTIONS, each "(none)" when empty), units in the order given.

    primary: the retrieved units, labelled M1, M2, ...; neighbours: (unit, relation read from
    the primary unit's side as in `UnitGraph.links_of`, that primary's unit id), labelled N1, ...;
    spans: (session id, evidence turns) pairs; auxiliary: the caller's longitudinal memory text.
    `flat=True` (ablation): one "- [date] text" line per distinct unit, primary first.
    `anchors` without "time" ("no-time", "fact-only"): no dates anywhere, spans included."""
    dated = "time" in anchors_of(anchors)
    if flat:
        return _flat(primary, neighbours, dated)
    labels: dict[str, str] = {}
    prim_lines = []
    for i, unit in enumerate(primary, 1):
        if unit.unit_id is not None:
            labels.setdefault(unit.unit_id, f"M{i}")
        prim_lines.append(unit_line(f"M{i}", unit, anchors))
    nb_lines = []
    for i, (unit, relation, of_id) in enumerate(neighbours, 1):
        nb_lines.append(f"{unit_line(f'N{i}', unit, anchors)} | link: "
                        f"{relation_text(relation, labels.get(of_id, of_id))}")
    span_lines = []
    for session_id, turns in spans:
        if not turns:
            continue
        span_lines.append(f"Session {session_id} ({format_date(turns[0].timestamp)}):" if dated
                          else f"Session {session_id}:")
        span_lines.extend(f"  [{format_date(t.timestamp)}] {speaker_name(t.speaker)}: {turn_text(t)}" if dated
                          else f"  {speaker_name(t.speaker)}: {turn_text(t)}" for t in turns)
    bodies = ["\n".join(prim_lines), "\n".join(nb_lines), "\n".join(span_lines), auxiliary.strip()]
    return "\n\n".join(f"{head}\n{body or NONE}" for head, body in zip(SECTIONS, bodies))


# --- LLM calls -----------------------------------------------------------------------------
def clean_rewrite(reply: str) -> str:
    """The query in a rewrite reply: first non-empty line outside code fences, a leading
    "Query:" label and surrounding quotes removed; "" when nothing usable is left."""
    lines = [ln.strip() for ln in (reply or "").splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith("```")]
    if not lines:
        return ""
    text = _PREFIX.sub("", lines[0]).strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'`":
        text = text[1:-1].strip()
    return "" if len(text) > MAX_REWRITE_CHARS else text


def rewrite_query(llm: Any, query: str, *, now: datetime | None = None) -> str:
    """A self-contained retrieval query for `query` (prompt `fta_rewrite`, stage "fta_rewrite",
    temperature 0). Returns `query` itself without an LLM, on an empty or unusable reply, and
    when the call fails (`LLMError`, `LLMUnavailable` included: logged as a warning), so that
    retrieval never fails because of the rewrite."""
    if llm is None or not query.strip():
        return query
    prompt = render_prompt("fta_rewrite", question=query, date=prompt_datetime(now))
    try:
        reply = llm.complete([{"role": "user", "content": prompt}], stage=REWRITE_STAGE, temperature=0.0)
    except LLMError as exc:
        logger.warning("fta query rewrite failed (%s); searching with the question as asked", exc)
        return query
    text = clean_rewrite(reply if isinstance(reply, str) else "")
    if not text:
        logger.warning("fta query rewrite: unusable reply %r; searching with the question as asked",
                       (reply or "")[:80] if isinstance(reply, str) else reply)
        return query
    return text


def answer_prompt(question: str, packet: str, *, question_date: datetime | None, style: str = "locomo") -> str:
    """The answer prompt over `packet`: `fta_answer` for style "locomo" (and "short"),
    `fta_answer_longmemeval` for "longmemeval" (ValueError for another style)."""
    name = ANSWER_PROMPTS.get(style)
    if name is None:
        raise ValueError(f"style must be one of {sorted(ANSWER_PROMPTS)}, got {style!r}")
    return render_prompt(name, question=question, packet=packet or NONE,
                         question_date=format_date(question_date) if question_date else "unknown")


def answer_from_packet(llm: Any, question: str, packet: str, *, question_date: datetime | None,
                       style: str = "locomo") -> str:
    """The answer to `question` from `packet` (one call, stage "answer", temperature 0, prompt
    `answer_prompt`). LLM errors propagate: there is no answer without the model."""
    prompt = answer_prompt(question, packet, question_date=question_date, style=style)
    return llm.complete([{"role": "user", "content": prompt}], stage=ANSWER_STAGE, temperature=0.0).strip()

__all__ = ["ANSWER_PROMPTS", "ANSWER_STAGE", "MAX_REWRITE_CHARS", "REWRITE_STAGE", "SECTIONS", "answer_from_packet",
           "answer_prompt",
           "clean_rewrite", "lifecycle_text", "relation_text", "render_packet", "rewrite_query", "status_text",
           "unit_line"]
