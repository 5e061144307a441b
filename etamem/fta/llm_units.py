"""The LLM unit extractor: one call per segment with the carried units in the prompt, its reply
validated (`parse_unit_reply`) and made into units; the rule extractor answers for a segment
whose reply is unusable or holds a unit its evidence turns do not support (grounded units:
`etamem.extraction.grounding`)."""
from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta
from typing import Any, Sequence

from etamem.extraction.extractors import REJECTION_STATS, prompt_datetime, speaker_name, turn_subject, turn_text
from etamem.extraction.grounding import Grounding, Source, check_unit, known_name, prompt_examples
from etamem.fta import rules
from etamem.fta.rule_units import RuleUnitExtractor
from etamem.fta.rules import CONTENT_TYPES, ORIENTATIONS
from etamem.fta.segmentation import Segment
from etamem.fta.unit_model import (
    COMPLETENESS,
    Candidate,
    FactAnchor,
    FTAUnit,
    TimeAnchor,
    affect_anchors,
    evidence_span,
    short_summary,
)
from etamem.models.llm import LLMError, LLMUnavailable
from etamem.models.prompt_files import load_prompt, render_prompt
from etamem.records import Turn
from etamem.retrieval.temporal import TimeWindow, parse_time_window

logger = logging.getLogger(__name__)


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


def units_schema(segment: Segment) -> dict:
    """The JSON schema of a unit reply for `segment` (the prompt's form; spans inside the segment)."""
    word = {"type": "string"}
    span = {"type": "array", "items": {"type": "integer", "minimum": segment.start, "maximum": segment.end},
            "minItems": 2, "maxItems": 2}
    content = {"type": "object", "properties": {"text": word, "participants": {"type": "array", "items": word},
                                                "emotion_or_state": word, "intention_or_plan": word},
               "required": ["text", "participants", "emotion_or_state", "intention_or_plan"]}
    unit = {"type": "object", "properties": {
        "summary": word, "time_orientation": {"type": "string", "enum": list(ORIENTATIONS)},
        "content_type": {"type": "string", "enum": list(CONTENT_TYPES)}, "event_time": word, "content": content,
        "evidence_turn_span": span, "status": {"type": "string", "enum": list(COMPLETENESS)},
        "completes": {"type": ["string", "null"]}},
        "required": ["summary", "time_orientation", "content_type", "event_time", "content", "evidence_turn_span",
                     "status", "completes"]}
    return {"type": "object", "properties": {"memory_units": {"type": "array", "items": unit}},
            "required": ["memory_units"]}


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
    extractor) for that segment, counted in `stats`; so does a reply with a unit whose text or
    summary its evidence turns (with the rest of the segment and the carried units as context)
    do not support, or that names a participant no turn names (`grounding=False` turns the
    check off): the rejected units are counted in `rejected_units` and per reason
    (`rejected_copied_example`, `rejected_invented_entity`, `rejected_swapped_speaker`) and
    logged at warning with the segment. No reply (`LLMUnavailable`) propagates."""

    STAGE = "fta_extract"

    def __init__(self, llm: Any, tagger: Any = None, *, fallback: RuleUnitExtractor | None = None,
                 temperature: float | None = None, prompt: str = "fta_extract", grounding: bool = True) -> None:
        self.llm = llm
        self.tagger = tagger
        self.fallback = fallback if fallback is not None else RuleUnitExtractor(tagger)
        self.temperature = temperature
        self.prompt = prompt
        load_prompt(prompt)
        self._lock = threading.Lock()
        self.grounding = grounding
        self._examples: tuple[str, ...] | None = None
        self._stats = {"segments": 0, "llm_segments": 0, "fallback_segments": 0, "llm_units": 0, "fallback_units": 0,
                       **REJECTION_STATS}

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
                                           validate=lambda r: parse_unit_reply(r, segment, len(carried)),
                                           schema=units_schema(segment), **params)
            if not (isinstance(items, list) and all(isinstance(i, dict) and "span" in i for i in items)):
                items = parse_unit_reply(items, segment, len(carried))
        except LLMUnavailable:
            raise
        except (LLMError, ValueError) as exc:
            logger.warning("fta extraction: unusable LLM reply for segment %s:%d-%d (%s); rule extractor",
                           segment.session_id, segment.start, segment.end, exc)
            items = None
        rejected = self.ungrounded(items, segment, turns, carried) if items and self.grounding else []
        if rejected:
            logger.warning("fta extraction: %d ungrounded unit(s) in the LLM reply for segment %s:%d-%d (%s); "
                           "rule extractor", len(rejected), segment.session_id, segment.start, segment.end,
                           "; ".join(f"{v.reason}: {text!r}: {v.detail}" for text, v in rejected))
            with self._lock:
                self._stats["rejected_units"] += len(rejected)
                for _, verdict in rejected:
                    self._stats[f"rejected_{verdict.reason}"] += 1
            items = None
        if items is None:
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

    def ungrounded(self, items: Sequence[dict[str, Any]], segment: Segment, turns: Sequence[Turn],
                   carried: Sequence[FTAUnit] = ()) -> list[tuple[str, Grounding]]:
        """(text, `Grounding`) of each unit of a parsed reply that is not grounded: its text or
        summary against the turns of its evidence span (the segment's other turns and the carried
        units are context), each participant against the names the turns give."""
        if self._examples is None:
            self._examples = prompt_examples(render_prompt(
                self.prompt, date="", segment="", carried="", first=segment.start, last=segment.end,
                content_types=" | ".join(CONTENT_TYPES)))
        names = [n for t in turns for n in (turn_subject(t), speaker_name(t.speaker))]
        names += [p for u in carried for p in (u.speaker, *u.participants) if p]
        out = []
        for item in items:
            b, e = item["span"]
            span = [t for k, t in enumerate(turns) if b <= segment.start + k <= e]
            context = [t for t in turns if t not in span]
            source = Source(tuple((turn_subject(t), turn_text(t)) for t in span),
                            (*((turn_subject(t), turn_text(t)) for t in context), *((u.speaker, u.text) for u in carried)),
                            tuple(dict.fromkeys(names)), self._examples, span[0].timestamp if span else None)
            verdict = check_unit(item["text"], source)
            if verdict and item.get("summary"):
                verdict = check_unit(item["summary"], source)
            for name in item.get("participants", ()) if verdict else ():
                if not known_name(name, source):
                    verdict = Grounding(False, "invented_entity", f"participant {name!r} no turn names")
                    break
            if not verdict:
                out.append((item["text"], verdict))
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
                                item["summary"] or short_summary(item["text"])),
                time=TimeAnchor(now, orient, window.start if window else None, window.end if window else None,
                                window.expression if window else ""),
                affect=affect, evidence=(evidence_span(span_turns),),
                speaker=speaker if speaker in participants or not participants else participants[0],
                completeness=status, awaiting=awaiting, space=span_turns[0].space)
            out.append(Candidate(unit, item["completes"]))
        return out
