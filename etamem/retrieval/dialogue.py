"""What a dialogue tells retrieval beyond the units' texts (README "Measured here", issue 18).

- Names: a question names the person it is about ("What does Andrew view his pets as?"), and the
  units carry the speaker's name in every rewritten pronoun ("Andrew thinks Andrew needs ..."),
  so a text vector of the question as asked is pulled towards any short unit that names that
  speaker. `query_vector` mixes it with the vector of the question without the speakers' names.
- Questions: a unit that is itself a question ("Any fun plans for the summer?") rarely holds a
  fact; it loses `question_penalty`, and the reply to it (the next turn of the session, by the
  other speaker) joins the candidates (`reply_finder`), where the question is its context.
- Speaker: a unit spoken by the one speaker the question names gains `speaker_boost`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np

RepliesFn = Callable[[list[str]], list[str]]  # question unit ids -> ids of the units of their replies


@dataclass(frozen=True)
class DialogueScoring:
    """Per-query settings of the dialogue-aware re-scoring in `SpaceIndex` (all off by default)."""

    named: tuple[str, ...] = ()  # speakers of the space that the query names
    question_penalty: float = 0.0
    speaker_boost: float = 0.0
    replies: RepliesFn | None = None


def is_question(text: str) -> bool:
    """Whether a unit's text is a question (ends with "?", closing quotes and spaces aside)."""
    return text.rstrip(" \t\n\"')]").endswith("?")


def _name_pattern(name: str) -> re.Pattern:
    return re.compile(r"(?<!\w)" + re.escape(name) + r"(?:'s|’s)?(?!\w)")


def named_speakers(query: str, speakers: Iterable[str]) -> tuple[str, ...]:
    """The speakers whose name occurs in the query as a whole word (case as stored, a possessive
    "'s" allowed), sorted."""
    return tuple(sorted(s for s in set(speakers) if s and s.strip() and _name_pattern(s.strip()).search(query)))


def without_names(query: str, names: Sequence[str]) -> str:
    """The query with these names (and their possessive "'s") removed, spaces collapsed."""
    for name in sorted(names, key=len, reverse=True):  # "Ann Lee" before "Ann"
        query = _name_pattern(name.strip()).sub("", query)
    return re.sub(r"\s+", " ", query).strip()


def query_vector(encode: Callable[[list[str]], np.ndarray], query: str, names: Sequence[str],
                 mix: float) -> np.ndarray:
    """(d,) float32 unit vector: normalise(mix * e(query without `names`) + (1 - mix) * e(query)),
    or e(query) when `mix` is 0, no name occurs or nothing but the names is left. `encode` maps
    texts to (n, d) float32 unit rows."""
    bare = without_names(query, names) if names and mix > 0 else query
    if bare == query or not re.search(r"\w", bare):
        return np.asarray(encode([query])[0], np.float32)
    both = np.asarray(encode([query, bare]), np.float32)
    v = (1.0 - mix) * both[0] + mix * both[1]
    norm = float(np.linalg.norm(v))
    return (v / norm).astype(np.float32) if norm > 0 else both[0]
