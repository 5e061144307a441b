"""Typed data model: turns, memory units, search hits and answers (see docs/design.md, 'Data model')."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

POLARITIES = ("negative", "neutral", "positive")
REVISES_KEY = "revises"  # Turn.extra of a revised turn (Memory.update): the id of the turn it replaces


class UnknownIdError(KeyError):
    """An AMU or turn id that the space does not hold (a KeyError; the message reads plainly)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnknownSpaceError(ValueError):
    """A space the store does not hold (a ValueError, as before it had its own class)."""


@dataclass(frozen=True)
class Turn:
    """One dialogue turn as stored (raw, before extraction).

    Attributes:
        turn_id: The turn's id, unique in its space; dataset ids (LoCoMo `D1:3`) kept verbatim,
            `t<seq>` when `Memory.add` gave one.
        session_id: The session (conversation) it belongs to.
        speaker: Who said it (a name, or a chat role such as `user`).
        text: What was said.
        timestamp: When it was said (timezone-aware).
        space: The space it is stored in.
        extra: Optional dataset fields (e.g. a photo caption) as plain JSON values, and the turn's
            metadata under the key "metadata" (see `etamem.filters`).
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

    Attributes:
        amu_id: The unit's id, unique in its space.
        text: The fact, as one self-contained sentence.
        speaker: Who said it (the source turn's speaker).
        timestamp: When it was said (the source turn's time, timezone-aware).
        session_id: The source turn's session.
        source_turn_ids: Ids of the turns it was drawn from.
        polarity: Its affect: "negative", "neutral" or "positive".
        polarity_scores: Class probabilities in POLARITIES order (negative, neutral, positive).
        status: "active" (current), "superseded" (a newer unit replaces it: still stored and
            retrievable) or "deleted".
        space: The space it is stored in.
    """

    amu_id: str
    text: str
    speaker: str
    timestamp: datetime
    session_id: str
    source_turn_ids: tuple[str, ...]
    polarity: str = "neutral"
    polarity_scores: tuple[float, float, float] = (0.0, 1.0, 0.0)
    status: str = "active"  # "active", "superseded" or "deleted"
    space: str = "default"


@dataclass(frozen=True)
class Hit:
    """A retrieved AMU with its score, the view(s) that found it and its source turns.

    Attributes:
        amu: The unit found.
        score: Its ranking score (higher is better): never higher than the score of a hit ranked
            above it, so a `score > x` filter keeps a prefix of the ranking (see docs/concepts.md,
            'Scores', and `etamem.retrieval.rank_scores`).
        views: The views that found it ("event", "affect", "time"); `("raw",)` for a raw turn of
            the fallback; `("current",)` when brought in as the current version of a hit.
        source_turn_ids: Ids of the unit's source turns.
        source_turns: The stored turns themselves (speaker, time, text), in the order of
            `source_turn_ids`; filled by `Memory.retrieve` / `search` / `answer` (else empty).
        supersedes: Ids of the units this one replaces (a fact that changed, see
            `etamem.facts.current_first`).
        superseded_by: Ids of the units that replace this one.
        metadata: The source turns' metadata merged in order (a later turn's value wins; filled
            with `source_turns`, see `etamem.filters`).
        similarity: The score the search method gave the hit (how well it matches the query),
            before any re-ordering; None for a unit no method scored (a current version brought
            in with views `("current",)`). Equal to `score` where the ranking follows it.
    """

    amu: AMU
    score: float
    views: tuple[str, ...]
    source_turn_ids: tuple[str, ...]
    source_turns: tuple[Turn, ...] = ()
    supersedes: tuple[str, ...] = ()
    superseded_by: tuple[str, ...] = ()
    metadata: dict[str, Any] = field(default_factory=dict)
    similarity: float | None = None


@dataclass(frozen=True)
class SearchResult:
    """Hits with how they were found (what `Memory.retrieve` returns).

    Attributes:
        hits: The hits, best first.
        weights: Per-view routing weights (view name -> weight).
        budgets: Per-view budgets: the units each view was asked for.
        entropies: Per-view normalised routing entropies.
        window: The time window parsed from the query, as (start, end), or None.
        fallback_used: Whether raw turns were brought in by the fallback.
        confidence: The retrieval confidence that gated the raw-turn fallback (None when the
            fallback was off).
        traces: Per-view traces of the beam search, when `trace=True` was asked for (else empty).
        pending_turns: Turns stored but not yet turned into units (`Memory.flush` does it).
        filters: The `etamem.filters.UnitFilter` the search applied (None: none).
    """

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
    """The prompt-ready memory for a query and the hits it renders (see `Memory.context_packet`).

    Attributes:
        text: The rendered memory (what `Memory.context` returns).
        hits: The hits it renders, best first.
    """

    text: str
    hits: list[Hit]


@dataclass(frozen=True)
class StageCost:
    """LLM accounting for one stage (extract, supersession, summarise, answer, judge, ...).

    Attributes:
        calls: LLM calls made.
        cached_calls: Of them, answered from the LLM cache.
        prompt_tokens: Prompt tokens used.
        completion_tokens: Completion tokens used.
        seconds: Seconds the endpoint took to answer them (retries included, the wait for a free
            request slot, `Config.llm_concurrency`, not).
    """

    calls: int = 0
    cached_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0

    def __add__(self, other: "StageCost") -> "StageCost":
        return StageCost(self.calls + other.calls, self.cached_calls + other.cached_calls,
                         self.prompt_tokens + other.prompt_tokens, self.completion_tokens + other.completion_tokens,
                         self.seconds + other.seconds)

    def __sub__(self, other: "StageCost") -> "StageCost":
        return StageCost(self.calls - other.calls, self.cached_calls - other.cached_calls,
                         self.prompt_tokens - other.prompt_tokens, self.completion_tokens - other.completion_tokens,
                         self.seconds - other.seconds)


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
    """An answer with the evidence that grounds it and what it cost (what `Memory.answer` returns).

    Attributes:
        text: The answer; without an LLM, the best evidence sentences.
        hits: The evidence hits.
        llm_used: Whether an LLM wrote the answer: False when none is configured (then `note`
            says so) or nothing is stored in the space yet.
        note: A remark on how the answer was made ("" when none).
        cost: What the answer's LLM calls cost, per stage (stage name -> `StageCost`; stages
            without calls left out).
    """

    text: str
    hits: list[Hit]
    llm_used: bool
    note: str = ""
    cost: dict[str, StageCost] = field(default_factory=dict)
