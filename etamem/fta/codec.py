"""FTA units as plain JSON (the store's `unit_fields` rows and the construction state; no pickle).

`unit_to_json(unit) -> str` and `unit_from_json(text) -> FTAUnit` round-trip every field of
`FTAUnit` (datetimes as ISO 8601 with their offset). `FORMAT` is written into each object so
that a later layout can be told apart. The `lifecycle` object (the paper's lifecycle) is an
optional key of format 1: a row written before it reads as `Lifecycle()`, and a reader that
does not know it ignores it, so adding it needed no format change.
"""
from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from etamem.fta.units import AffectAnchor, EvidenceSpan, FactAnchor, FTAUnit, Lifecycle, TimeAnchor

FORMAT = 1


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def _time(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


def unit_to_dict(unit: FTAUnit) -> dict[str, Any]:
    """Every field of `unit` as JSON-ready values."""
    f, t, a = unit.fact, unit.time, unit.affect
    return {
        "format": FORMAT, "unit_id": unit.unit_id, "space": unit.space, "speaker": unit.speaker,
        "completeness": unit.completeness, "awaiting": unit.awaiting, "status": unit.status,
        "fact": {"text": f.text, "content_type": f.content_type, "participants": list(f.participants),
                 "summary": f.summary},
        "time": {"dialogue_time": _iso(t.dialogue_time), "orientation": t.orientation,
                 "event_start": _iso(t.event_start), "event_end": _iso(t.event_end), "expression": t.expression},
        "affect": {"label": a.label, "scores": [float(x) for x in a.scores], "intensity": float(a.intensity),
                   "emotions": list(a.emotions), "intention": a.intention},
        "evidence": [{"session_id": e.session_id, "turn_ids": list(e.turn_ids), "start_time": _iso(e.start_time),
                      "end_time": _iso(e.end_time)} for e in unit.evidence],
        "lifecycle": {"status": unit.lifecycle.status, "completeness": unit.lifecycle.completeness,
                      "updated_at": _iso(unit.lifecycle.updated_at)},
    }


def unit_from_dict(d: dict[str, Any]) -> FTAUnit:
    """The unit `unit_to_dict` wrote; ValueError for another format."""
    if d.get("format") != FORMAT:
        raise ValueError(f"FTA unit format {d.get('format')!r} is not supported (this etamem reads {FORMAT})")
    f, t, a = d["fact"], d["time"], d["affect"]
    return FTAUnit(
        fact=FactAnchor(f["text"], f["content_type"], tuple(f["participants"]), f["summary"]),
        time=TimeAnchor(_time(t["dialogue_time"]), t["orientation"], _time(t["event_start"]), _time(t["event_end"]),
                        t["expression"]),
        affect=AffectAnchor(a["label"], tuple(a["scores"]), a["intensity"], tuple(a["emotions"]), a["intention"]),
        evidence=tuple(EvidenceSpan(e["session_id"], tuple(e["turn_ids"]), _time(e["start_time"]),
                                    _time(e["end_time"])) for e in d["evidence"]),
        speaker=d["speaker"], completeness=d["completeness"], awaiting=d["awaiting"], status=d["status"],
        unit_id=d["unit_id"], space=d["space"], lifecycle=_lifecycle(d.get("lifecycle")))


def _lifecycle(d: dict[str, Any] | None) -> Lifecycle:
    if not d:
        return Lifecycle()
    return Lifecycle(d.get("status", "unknown"), d.get("completeness", "unknown"), _time(d.get("updated_at")))


def unit_to_json(unit: FTAUnit) -> str:
    return json.dumps(unit_to_dict(unit), ensure_ascii=False, sort_keys=True)


def unit_from_json(text: str) -> FTAUnit:
    return unit_from_dict(json.loads(text))


def units_to_json(units: list[FTAUnit]) -> str:
    return json.dumps([unit_to_dict(u) for u in units], ensure_ascii=False, sort_keys=True)


def units_from_json(text: str | None) -> list[FTAUnit]:
    return [] if not text else [unit_from_dict(d) for d in json.loads(text)]
