"""Readers for conversation files in their official layouts (read unchanged):
LoCoMo (`locomo10.json`), LongMemEval (`longmemeval_s.json`) and a plain JSONL of turns.

Each reader yields `Conversation`s: a space name, turn dicts ready for `Memory.add`, and
the questions that come with it (dataset fields kept as given).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

_SESSION_KEY = re.compile(r"^session_(\d+)$")
FORMATS = ("locomo", "longmemeval", "jsonl")


@dataclass
class Conversation:
    space: str
    turns: list[dict[str, Any]]
    questions: list[dict[str, Any]] = field(default_factory=list)
    question_date: str | None = None  # LongMemEval: the date the question is asked


def _load_json(path: str | Path) -> Any:
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"file: {path} does not exist")
    with path.open(encoding="utf-8") as fh:
        return json.load(fh)


def read_locomo(path: str | Path) -> Iterator[Conversation]:
    """LoCoMo: one Conversation per sample (space = `sample_id`, turn ids = `dia_id`).

    Only `session_N` keys whose value is a list count as sessions; a photo's
    `blip_caption` goes to the turn's `extra`.
    """
    data = _load_json(path)
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a list of LoCoMo samples")
    for sample in data:
        conv = sample["conversation"]
        sessions = sorted(
            (int(m.group(1)), key) for key in conv if (m := _SESSION_KEY.match(key)) and isinstance(conv[key], list)
        )
        turns = []
        for _, key in sessions:
            date = conv.get(f"{key}_date_time")
            for turn in conv[key]:
                extra = {k: turn[k] for k in ("blip_caption",) if turn.get(k)}
                turns.append({"turn_id": turn["dia_id"], "session_id": key, "speaker": turn["speaker"],
                              "text": turn.get("text") or "", "timestamp": date, "extra": extra})
        yield Conversation(space=sample["sample_id"], turns=turns, questions=list(sample.get("qa", [])))


def longmemeval_turn_id(session_id: str, index: int) -> str:
    """Official turn key: `<session id>_<1-based turn index>`."""
    return f"{session_id}_{index + 1}"


def read_longmemeval(path: str | Path) -> Iterator[Conversation]:
    """LongMemEval: one Conversation per question (space = `question_id`), holding its own
    haystack; speakers are `user` / `assistant`, session dates from `haystack_dates`."""
    data = _load_json(path)
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a list of LongMemEval questions")
    for q in data:
        turns = []
        for sid, date, session in zip(q["haystack_session_ids"], q["haystack_dates"], q["haystack_sessions"]):
            for i, turn in enumerate(session):
                extra = {"has_answer": True} if turn.get("has_answer") else {}
                turns.append({"turn_id": longmemeval_turn_id(sid, i), "session_id": sid, "speaker": turn["role"],
                              "text": turn.get("content") or "", "timestamp": date, "extra": extra})
        question = {k: v for k, v in q.items() if k != "haystack_sessions"}
        yield Conversation(space=q["question_id"], turns=turns, questions=[question],
                           question_date=q.get("question_date"))


def read_jsonl(path: str | Path) -> Iterator[Conversation]:
    """JSONL, one turn per line: `session_id, speaker, text, timestamp`, optional `turn_id`,
    `extra`, and `space` (default "default"); lines are grouped by space in file order."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"file: {path} does not exist")
    by_space: dict[str, list[dict[str, Any]]] = {}
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{n}: invalid JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{n}: expected a JSON object per line")
            by_space.setdefault(row.pop("space", "default"), []).append(row)
    for space, turns in by_space.items():
        yield Conversation(space=space, turns=turns)


def read_conversations(path: str | Path, fmt: str) -> Iterator[Conversation]:
    readers = {"locomo": read_locomo, "longmemeval": read_longmemeval, "jsonl": read_jsonl}
    if fmt not in readers:
        raise ValueError(f"format: expected one of {FORMATS}, got {fmt!r}")
    return readers[fmt](path)
