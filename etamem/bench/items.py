"""The benchmark items every dataset loader makes: a conversation (a space to build) with the
questions asked of it and their gold evidence."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

CUE_SESSION_PREFIX = "plus-"  # sessions of cues added for one question only (LoCoMo-Plus), never kept in a store


@dataclass
class BenchQuestion:
    """One question. `category` is the LoCoMo category number as a string or the LongMemEval
    `question_type`; `gold_turns` are resolved evidence turn ids (LoCoMo) or the user turns
    marked `has_answer` (LongMemEval); `gold_sessions` only for LongMemEval."""

    qid: str
    space: str
    question: str
    answer: str
    category: str
    now: str | None
    gold_turns: list[str] = field(default_factory=list)
    gold_sessions: list[str] = field(default_factory=list)
    abstention: bool = False
    skipped_evidence: int = 0
    # LoCoMo-Plus: turn dicts (for `Memory.add`, one session `plus-<i>`) that are part of the
    # memory for this question only: added before it is asked, removed after (bench/workbench.py `cue`)
    cue_turns: list[dict[str, Any]] = field(default_factory=list)
    # updates (bench/updates.py): the evidence the question's answer replaced (now-questions: the
    # old fact's turns) or that replaced it (past-questions: the new fact's turns)
    stale_turns: list[str] = field(default_factory=list)


@dataclass
class BenchConversation:
    """One space to build: turns (dicts for `Memory.add`) and the questions asked of it."""

    space: str
    turns: list[dict[str, Any]]
    questions: list[BenchQuestion]
    user_turns: set[str] = field(default_factory=set)  # LongMemEval: turn-level keys
