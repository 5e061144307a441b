"""Fallback to the raw conversation: a turn-level dense + BM25 index over stored turns."""
from __future__ import annotations

import numpy as np

from ..extraction import turn_text as content_text
from ..timeparse import format_date
from ..types import Turn
from .flat import FlatHybridIndex


def turn_text(turn: Turn) -> str:
    """A turn's searchable content: `speaker: ` + the text with any photo caption, as the
    extractor sees it (turns are first person, so the speaker's name is what links them to
    questions about people)."""
    return f"{turn.speaker}: {content_text(turn)}"


class TurnIndex:
    """Exact hybrid search over the raw turns of one space (vectors: (n, d) float32 unit)."""

    def __init__(self, turns: list[Turn], vectors: np.ndarray):
        self.turns = turns
        texts = [f"{turn_text(t)} {format_date(t.timestamp)}" for t in turns]
        self.index = FlatHybridIndex(vectors, texts)

    def search(self, qvec: np.ndarray, query: str, k: int, *, beta: float) -> list[tuple[Turn, float]]:
        return [(self.turns[r.index], r.score) for r in self.index.search(qvec, query, k, beta=beta)]


def rrf_fuse(hit_sources: list[tuple[str, ...]], turn_ids: list[str], k: int = 10) -> list[tuple[object, float]]:
    """Reciprocal-rank fusion of ranked hits (given by their source turns) with ranked raw turns.

    Hit i at rank r gets 1/(k + r + 1); raw turn t at rank r gives 1/(k + r + 1) to the best
    ranked hit whose sources contain t, or, if no hit covers t, becomes an entry of its own.
    Returns (hit index | turn id, fused score), best first (ties: hits before turns, then rank).
    """
    scores: dict[object, float] = {i: 1.0 / (k + i + 1) for i in range(len(hit_sources))}
    first_hit: dict[str, int] = {}
    for i, sources in enumerate(hit_sources):
        for t in sources:
            first_hit.setdefault(t, i)
    for r, t in enumerate(turn_ids):
        key = first_hit.get(t, t)
        scores[key] = scores.get(key, 0.0) + 1.0 / (k + r + 1)
    rank_of = {key: (0, key) if isinstance(key, int) else (1, turn_ids.index(key)) for key in scores}
    return sorted(scores.items(), key=lambda kv: (-kv[1], rank_of[kv[0]]))
