"""Readers for conversation files in their official layouts (read unchanged):
LoCoMo (`locomo10.json`), LongMemEval (`longmemeval_s.json`), a plain JSONL of turns and a JSONL
of chat messages.

Each reader yields `Conversation`s: a space name, turn dicts ready for `Memory.add`, and
the questions that come with it (dataset fields kept as given). A file that cannot be read
as its format (bad UTF-8, bad JSON, a missing or wrongly typed field) raises ValueError naming
the file, and the line and column or the record where the reader can tell.
"""
from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

_SESSION_KEY = re.compile(r"^session_(\d+)$")
FORMATS = ("locomo", "longmemeval", "jsonl", "chat")


@dataclass
class Conversation:
    space: str
    turns: list[dict[str, Any]]
    questions: list[dict[str, Any]] = field(default_factory=list)
    question_date: str | None = None  # LongMemEval: the date the question is asked
    labels: list[str] | None = None  # where each turn comes from, for errors: "talk.jsonl:4: turn"


def load_json(path: str | Path) -> Any:
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"file: {path} does not exist")
    try:
        with path.open(encoding="utf-8") as fh:
            return json.load(fh)
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    except json.JSONDecodeError as exc:
        hint = ""
        if exc.msg == "Extra data":
            hint = "; several JSON documents, one per line: is it JSONL (--format jsonl)?"
        raise ValueError(f"{path}:{exc.lineno}:{exc.colno}: invalid JSON ({exc.msg}){hint}") from None
    except RecursionError:
        raise ValueError(f"{path}: JSON nested too deeply") from None


@contextlib.contextmanager
def shape_guard(path, what: str, index: int) -> Iterator[None]:
    """Turn a wrong shape (missing key, wrong type) met while reading record `index` (e.g. what
    "sample") into ValueError naming the file and the record."""
    try:
        yield
    except (KeyError, TypeError, AttributeError, IndexError) as exc:
        detail = f"missing field {exc}" if isinstance(exc, KeyError) else f"{type(exc).__name__}: {exc}"
        raise ValueError(f"{path}: {what} {index}: not in the expected form ({detail})") from None


def _records(path, listed: str, what: str, parse) -> Iterator[Conversation]:
    """`parse(record)` for each record of a file holding a JSON list of `listed` (e.g. "LoCoMo
    samples"); wrong shapes named by `shape_guard` with `what` (e.g. "sample")."""
    data = load_json(path)
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a list of {listed}")
    for index, record in enumerate(data):
        with shape_guard(path, what, index):
            conv = parse(record)
        conv.labels = [f"{path}: {what} {conv.space!r}, turn {t['turn_id']!r}" for t in conv.turns]
        yield conv


def read_locomo(path: str | Path) -> Iterator[Conversation]:
    """LoCoMo: one Conversation per sample (space = `sample_id`, turn ids = `dia_id`).

    Only `session_N` keys whose value is a list count as sessions; a photo's
    `blip_caption` goes to the turn's `extra`.
    """
    return _records(path, "LoCoMo samples", "sample", _locomo_sample)


def _locomo_sample(sample: dict) -> Conversation:
    """One LoCoMo sample as a Conversation (KeyError/TypeError on a wrong shape)."""
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
    return Conversation(space=sample["sample_id"], turns=turns, questions=list(sample.get("qa", [])))


def longmemeval_turn_id(session_id: str, index: int) -> str:
    """Official turn key: `<session id>_<1-based turn index>`."""
    return f"{session_id}_{index + 1}"


def read_longmemeval(path: str | Path) -> Iterator[Conversation]:
    """LongMemEval: one Conversation per question (space = `question_id`), holding its own
    haystack; speakers are `user` / `assistant`, session dates from `haystack_dates`."""
    return _records(path, "LongMemEval questions", "question", _longmemeval_question)


def _longmemeval_question(q: dict) -> Conversation:
    """One LongMemEval question with its haystack as a Conversation."""
    turns = []
    for sid, date, session in zip(q["haystack_session_ids"], q["haystack_dates"], q["haystack_sessions"]):
        for i, turn in enumerate(session):
            extra = {"has_answer": True} if turn.get("has_answer") else {}
            turns.append({"turn_id": longmemeval_turn_id(sid, i), "session_id": sid, "speaker": turn["role"],
                          "text": turn.get("content") or "", "timestamp": date, "extra": extra})
    question = {k: v for k, v in q.items() if k != "haystack_sessions"}
    return Conversation(space=q["question_id"], turns=turns, questions=[question],
                        question_date=q.get("question_date"))


def read_jsonl(path: str | Path, item: str = "turn") -> Iterator[Conversation]:
    """JSONL, one turn per line: `session_id, speaker, text, timestamp`, optional `turn_id`,
    `extra`, `metadata` (`etamem.filters`), and `space` (default "default"); lines are grouped by space in file order. `item`
    names a line in errors (`talk.jsonl:3: turn.timestamp: ...`)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"file: {path} does not exist")
    by_space: dict[str, list[dict[str, Any]]] = {}
    lines: dict[str, list[str]] = {}
    with path.open("rb") as fh:
        for n, raw in enumerate(fh, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(f"{path}:{n}: not UTF-8 text (byte {exc.start}: {exc.reason})") from None
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{n}:{exc.colno}: invalid JSON ({exc.msg})") from None
            except RecursionError:
                raise ValueError(f"{path}:{n}: JSON nested too deeply") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{n}: expected a JSON object per line")
            space = row.pop("space", "default")
            if not isinstance(space, str):
                raise ValueError(f"{path}:{n}: space: expected a string, got {type(space).__name__}")
            by_space.setdefault(space, []).append(row)
            lines.setdefault(space, []).append(f"{path}:{n}: {item}")
    for space, turns in by_space.items():
        yield Conversation(space=space, turns=turns, labels=lines[space])


def read_chat(path: str | Path) -> Iterator[Conversation]:
    """JSONL of chat messages, one per line, as `Memory.add` takes them (`role`, `content`,
    optional `name`, `id`, `timestamp` or `created_at`, `session_id`, `metadata`) with an optional `space`
    (default "default"); errors name the line (`chat.jsonl:3: message.content: ...`)."""
    return read_jsonl(path, item="message")


def read_conversations(path: str | Path, fmt: str) -> Iterator[Conversation]:
    readers = {"locomo": read_locomo, "longmemeval": read_longmemeval, "jsonl": read_jsonl, "chat": read_chat}
    if fmt not in readers:
        raise ValueError(f"format: expected one of {FORMATS}, got {fmt!r}")
    return readers[fmt](path)
