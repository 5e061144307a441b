"""What `Hit.score` means: the ranking score, non-increasing down a search's hits (docs/concepts.md,
'Scores').

A search method scores each hit by how well it matches the query; later steps re-order some hits
(the current version of a fact that changed first, `etamem.facts.current_first`; FTA-Mem's
lifecycle order and neighbours; turn diversity). So that a score threshold keeps a prefix of the
ranking, `Memory.retrieve`:

- keeps the method's own score in `Hit.similarity` (`with_similarity`, before any re-ordering);
- reports as `Hit.score` the ranking score (`rank_scores`): no hit scores more than a hit above
  it (each score is capped by the ones above: a prefix of a longer search scores the same).

`current_first` gives a current version it moves up the score of the older version it now
precedes, so a `score > x` filter keeps the current fact whenever it keeps the stale one.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from etamem.records import Hit


def with_similarity(hits: Sequence[Hit]) -> list[Hit]:
    """`hits` with `similarity` set to their method score where not set yet."""
    return [h if h.similarity is not None else replace(h, similarity=h.score) for h in hits]


def rank_scores(hits: Sequence[Hit]) -> list[Hit]:
    """`hits` (best first) with non-increasing scores: each capped by the lowest score above it
    (unchanged where the order already follows the scores)."""
    out: list[Hit] = []
    cap = float("inf")
    for h in hits:
        cap = min(cap, h.score)
        out.append(h if h.score == cap else replace(h, score=cap))
    return out


def in_rank_order(hits: Sequence[Hit]) -> bool:
    """Whether the scores of `hits` never increase down the list."""
    return all(a.score >= b.score for a, b in zip(hits, hits[1:]))


__all__ = ["in_rank_order", "rank_scores", "with_similarity"]
