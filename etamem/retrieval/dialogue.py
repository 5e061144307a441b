"""What a dialogue tells retrieval beyond the units' texts (docs/benchmarks.md, 'Recall on the LoCoMo dev file').

- Names: a question names the person it is about ("What does Andrew view his pets as?"), and the
  units carry the speaker's name in every rewritten pronoun ("Andrew thinks Andrew needs ..."),
  so a text vector of the question as asked is pulled towards any short unit that names that
  speaker. `query_vector` mixes it with the vector of the question without the speakers' names.
- Questions: a unit that is itself a question ("Any fun plans for the summer?") rarely holds a
  fact; it loses `question_penalty`, and the reply to it (the next turn of the session, by the
  other speaker) joins the candidates (`reply_finder`), where the question is its context.
- Speaker: a unit spoken by the one speaker the question names gains `speaker_boost`, and
  `self_boost` more when its text names that speaker too: units are rewritten in the third
  person ("The user prefers ...", "Caroline researched ..."), so this marks what a speaker says
  about themself, the facts and preferences a question about them wants. Role speakers
  ("user", "assistant") are named by "the user" and, for the user, by a question in the first
  person (an agent's user asking "what should I cook for my family?").
"""
from __future__ import annotations

import functools
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
    self_boost: float = 0.0  # more for the named speaker's units whose text names them (about themself)
    replies: RepliesFn | None = None


def is_question(text: str) -> bool:
    """Whether a unit's text is a question (ends with "?", closing quotes and spaces aside)."""
    return text.rstrip(" \t\n\"')]").endswith("?")


@functools.lru_cache(maxsize=256)
def _names_pattern(names: tuple[str, ...]) -> re.Pattern:
    """One regex matching any of `names` as whole words (longest first, so "Ann Lee" wins over
    "Ann"), with an optional possessive "'s"; group 1 is the name."""
    alternatives = "|".join(re.escape(n) for n in sorted(names, key=lambda n: (-len(n), n)))
    return re.compile(r"(?<!\w)(" + alternatives + r")(?:'s|’s)?(?!\w)")


# speaker labels that are roles, not names ("user" / "assistant" in LongMemEval and chat logs): a
# query saying "the user" is not about a person named so, and the word must stay in it
ROLE_LABELS = frozenset({"user", "assistant", "system", "human", "ai", "bot", "model", "me", "you"})


def _clean(names: Iterable[str]) -> tuple[str, ...]:
    """Distinct stripped names, role labels (`ROLE_LABELS`, any case) left out, sorted."""
    return tuple(sorted({n.strip() for n in names if n and n.strip() and n.strip().lower() not in ROLE_LABELS}))


# first-person words of a query: an agent's user asking about themself ("recommend a cafe for me")
FIRST_PERSON = re.compile(r"\b(?:i|me|my|mine|myself|i'm|i've|i'd|i'll)\b", re.IGNORECASE)


def named_speakers(query: str, speakers: Iterable[str]) -> tuple[str, ...]:
    """The speakers whose name occurs in the query as a whole word (case as stored, a possessive
    "'s" allowed; where names overlap, the longest match), sorted. Role labels are not names,
    but a speaker whose label is a role counts when the query says "the <role>" ("what did the
    user say ...") and, for the role `user`, when the query speaks in the first person (the
    question comes from the user: "recommend a cafe for me")."""
    names = _clean(speakers)
    found = set(_names_pattern(names).findall(query)) if names else set()
    for label in {s for s in speakers if s and s.strip().lower() in ROLE_LABELS}:
        role = label.strip().lower()
        if re.search(rf"\bthe {re.escape(role)}\b", query, re.IGNORECASE) or (
                role == "user" and FIRST_PERSON.search(query)):
            found.add(label)
    return tuple(sorted(found))


def without_names(query: str, names: Sequence[str]) -> str:
    """The query with these names (and their possessive "'s") removed, spaces collapsed; for a
    role label among them, "the <role>" is the name ("What did the user's sister paint?")."""
    roles = sorted({n.strip().lower() for n in names if n and n.strip().lower() in ROLE_LABELS})
    names = _clean(names)
    if names:
        query = _names_pattern(names).sub("", query)
    if roles:  # a role speaker is named "the user" (possessive included)
        query = re.sub(r"\bthe (?:" + "|".join(map(re.escape, roles)) + r")(?:'s|’s)?(?!\w)", "", query,
                       flags=re.IGNORECASE)
    return re.sub(r"\s+", " ", query).strip()


def query_texts(query: str, names: Sequence[str], mix: float) -> list[str]:
    """What `query_vector` encodes: [query], or [query, query without `names`] when `mix` > 0
    and removing the names changes it and leaves a word."""
    bare = without_names(query, names) if names and mix > 0 else query
    return [query] if bare == query or not re.search(r"\w", bare) else [query, bare]


def query_vector(encode: Callable[[list[str]], np.ndarray], query: str, names: Sequence[str],
                 mix: float) -> np.ndarray:
    """(d,) float32 unit vector: normalise(mix * e(query without `names`) + (1 - mix) * e(query)),
    or e(query) when `mix` is 0, no name occurs or nothing but the names is left. `encode` maps
    texts to (n, d) float32 unit rows."""
    texts = query_texts(query, names, mix)
    if len(texts) == 1:
        return np.asarray(encode(texts)[0], np.float32)
    both = np.asarray(encode(texts), np.float32)
    v = (1.0 - mix) * both[0] + mix * both[1]
    norm = float(np.linalg.norm(v))
    return (v / norm).astype(np.float32) if norm > 0 else both[0]
