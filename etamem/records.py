"""Typed data model: turns, memory units, search hits and answers (see docs/design.md, 'Data model')."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

POLARITIES = ("negative", "neutral", "positive")
AMU_STATUSES = ("active", "superseded", "deleted")


class UnknownIdError(KeyError):
    """An AMU or turn id that the space does not hold (a KeyError; the message reads plainly)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnknownSpaceError(ValueError):
    """A space the store does not hold (a ValueError, as before it had its own class)."""


@dataclass(frozen=True)
class Turn:
    """One dialogue turn as stored (raw, before extraction).

    `timestamp` is timezone-aware; `turn_id` keeps dataset ids (LoCoMo `D1:3`) verbatim;
    `extra` carries optional dataset fields (e.g. a photo caption) as plain JSON values, and the
    turn's `metadata` under the key "metadata" (see `etamem.filters`).
    """

    turn_id: str
    session_id: str
    speaker: str
    text: str
    timestamp: datetime
    space: str = "default"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def metadata(self) -> dict[str, Any]:
        """The turn's metadata (`extra["metadata"]`; {} when none)."""
        meta = self.extra.get("metadata") if self.extra else None
        return dict(meta) if isinstance(meta, dict) else {}


@dataclass(frozen=True)
class AMU:
    """Atomic memory unit: one self-contained fact with a pointer to its source turns.

    `polarity_scores` are class probabilities in POLARITIES order (negative, neutral, positive).
    """

    amu_id: str
    text: str
    speaker: str
    timestamp: datetime
    session_id: str
    source_turn_ids: tuple[str, ...]
    polarity: str = "neutral"
    polarity_scores: tuple[float, float, float] = (0.0, 1.0, 0.0)
    status: str = "active"
    space: str = "default"


@dataclass(frozen=True)
class Hit:
    """A retrieved AMU with its score, the view(s) that found it and its source turns: their ids,
    and (`source_turns`, filled by `Memory.retrieve` / `search` / `answer`) the stored turns
    themselves (speaker, time, text), in the order of `source_turn_ids`. `supersedes` /
    `superseded_by`: ids of the units this one replaces / that replace it (a fact that changed,
    see `etamem.facts.current_first`); views `("current",)`: brought in as the current version of a hit.
    `metadata`: the source turns' metadata merged in order (a later turn's value wins; filled
    with `source_turns`, see `etamem.filters`)."""

    amu: AMU
    score: float
    views: tuple[str, ...]
    source_turn_ids: tuple[str, ...]
    source_turns: tuple[Turn, ...] = ()
    supersedes: tuple[str, ...] = ()
    superseded_by: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SearchResult:
    """Hits with how they were found: per-view routing weights, budgets and normalised
    entropies, the parsed time window (if any), the retrieval confidence that gated the raw-turn
    fallback (None when the fallback was off) and whether it was used, and (when asked for) a
    per-view trace of the beam search."""

    hits: list[Hit]
    weights: dict[str, float]
    budgets: dict[str, int]
    entropies: dict[str, float]
    window: tuple[datetime, datetime] | None = None
    fallback_used: bool = False
    confidence: float | None = None
    traces: dict[str, Any] = field(default_factory=dict)
    pending_turns: int = 0  # turns stored but not yet turned into units (`Memory.flush` does it)
    filters: Any = None  # the `etamem.filters.UnitFilter` the search applied (None: none)


@dataclass(frozen=True)
class MemoryContext:
    """The prompt-ready memory for a query (`text`, see `Memory.context`) and the hits it
    renders, best first."""

    text: str
    hits: list[Hit]


@dataclass(frozen=True)
class StageCost:
    """LLM accounting for one stage (extract, summarise, answer, judge)."""

    calls: int = 0
    cached_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    def __add__(self, other: "StageCost") -> "StageCost":
        return StageCost(self.calls + other.calls, self.cached_calls + other.cached_calls,
                         self.prompt_tokens + other.prompt_tokens, self.completion_tokens + other.completion_tokens)

    def __sub__(self, other: "StageCost") -> "StageCost":
        return StageCost(self.calls - other.calls, self.cached_calls - other.cached_calls,
                         self.prompt_tokens - other.prompt_tokens, self.completion_tokens - other.completion_tokens)


@dataclass(frozen=True)
class Link:
    """A relation from the newer unit `source` to the older unit `target`, with a confidence in [0, 1]
    (a row of the store's unit links: FTA-Mem's relations, and `supersedes` between AMUs; also
    `etamem.fta.Link`)."""

    source: str
    target: str
    relation: str
    confidence: float


@dataclass(frozen=True)
class Answer:
    """An answer with the evidence that grounds it and what it cost.

    `llm_used` is False when no LLM is configured: `text` then holds the best evidence
    sentences and `note` says so.
    """

    text: str
    hits: list[Hit]
    llm_used: bool
    note: str = ""
    cost: dict[str, StageCost] = field(default_factory=dict)
