"""Fallback to the raw conversation: a turn-level dense + BM25 index over stored turns."""
from __future__ import annotations

import numpy as np

from ..flat_index import FlatHybridIndex
from ..timeparse import format_date
from ..types import Turn


def turn_text(turn: Turn) -> str:
    """A turn's searchable content: `speaker: text`, plus a shared photo's caption (turns are
    first person, so the speaker's name is what links them to questions about people)."""
    caption = turn.extra.get("blip_caption") if turn.extra else None
    text = f"{turn.speaker}: {turn.text}"
    return f"{text} [shared photo: {caption}]" if caption else text


class TurnIndex:
    """Exact hybrid search over the raw turns of one space (vectors: (n, d) float32 unit)."""

    def __init__(self, turns: list[Turn], vectors: np.ndarray):
        self.turns = turns
        texts = [f"{turn_text(t)} {format_date(t.timestamp)}" for t in turns]
        self.index = FlatHybridIndex(vectors, texts)

    def search(self, qvec: np.ndarray, query: str, k: int, *, beta: float) -> list[tuple[Turn, float]]:
        return [(self.turns[r.index], r.score) for r in self.index.search(qvec, query, k, beta=beta)]
