"""Exclusive attribute slots: an embedding test for facts that change, next to the
rules of `etamem.facts.supersession`.

A slot is an attribute that holds one value at a time for one person (where they live, their
job, diet, partner, car, phone, commute, the date of one event, an amount, ...), described by
a handful of generic prototype sentences (`etamem/data/attribute_slots.json`). The newer unit is
in a slot when its text vector's best cosine to the slot's prototypes is at least `threshold`
and beats every other slot's best by `margin`; an older unit is in the same slot when its score
there is at least `threshold` and within `tolerance` of its own best slot. Then the newer
supersedes the older (`slot_supersedes`) when both are facts (`supersession.is_fact`) of the
same speaker and holder, the older names its speaker, neither speaks to "you", the newer was
said at least `min_gap_days` later (same-chat elaborations are left to the rules), they differ
(cosine below `ceiling`; a `same_thing` slot also needs a shared topic word: the date of *one*
event), and the newer says that something changed (the rules' change words or SLOT_CHANGE).
Its confidence, SLOT_CONFIDENCE, is below every rule link's.

`SlotSupersession` combines the rules and the slots: the rules' links, plus the slots' for the
candidates the rules leave. The prototype vectors are encoded once per encoder in a process (by
`Memory.warm`, else on first use; cached by the encoder's identity), never at import. Chosen on the tuning data
(`benchmarks/slot_links.py`): threshold 0.4, margin 0.03, tolerance 0.
"""
from __future__ import annotations

import json
import logging
import re
import threading
import weakref
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from typing import Any, Sequence

import numpy as np

from etamem.facts.supersession import (
    STRONG_CHANGE,
    WEAK_CHANGE,
    Candidate,
    RuleSupersession,
    holder,
    is_fact,
    mentions,
    subject_words,
)

logger = logging.getLogger(__name__)

SLOT_CONFIDENCE = 0.45  # below every rule link (0.5 + 0.5 * cosine)
SLOT_FLOOR = 0.15  # candidates this far apart can still be one slot's two values
# how a new value is said besides the rules' change words ("cut coffee out", "pushed to", "since", "from May")
SLOT_CHANGE = re.compile(r"\b(?:cut|pushed|since|starting|from (?:next|january|february|march|april|may|june|july"
                         r"|august|september|october|november|december)|last day|first day|traded|rehomed|gave away"
                         r"|bought|lately|again|(?:has|have|'ve|'s) been \w+ing)\b", re.IGNORECASE)
_THIRD = re.compile(r"\b(?:they|he|she|them|him)\b", re.IGNORECASE)
_YOU = re.compile(r"\b(?:you|your|yours|you're|you've)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Slot:
    """One exclusive attribute: its name, prototype sentences, and whether two of its facts must
    also share a topic word to be about the same thing."""

    name: str
    prototypes: tuple[str, ...]
    same_thing: bool = False


def load_slots(path: str | None = None) -> tuple[Slot, ...]:
    """The slots of `path` (default: the shipped `etamem/data/attribute_slots.json`)."""
    if path is None:
        text = resources.files("etamem.data").joinpath("attribute_slots.json").read_text(encoding="utf-8")
    else:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    raw = json.loads(text)
    items = raw.get("slots") if isinstance(raw, dict) else None
    if not isinstance(items, list) or not items:
        raise ValueError(f"attribute slots: expected {{'slots': [...]}} with at least one slot in {path or 'the default'}")
    out = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("name"), str) \
                or not isinstance(item.get("prototypes"), list) or not item["prototypes"] \
                or not all(isinstance(p, str) and p.strip() for p in item["prototypes"]):
            raise ValueError(f"attribute slots: each slot needs a name and non-empty prototype sentences, got {item!r}")
        out.append(Slot(item["name"], tuple(item["prototypes"]), bool(item.get("same_thing", False))))
    if len({s.name for s in out}) != len(out):
        raise ValueError("attribute slots: slot names must be distinct")
    return tuple(out)


_BY_ENCODER: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # encoder -> {texts: vectors}
_BY_ID: dict[int, tuple[Any, dict]] = {}  # encoders without weak references (kept alive: the id stays theirs)
_LOCK = threading.Lock()


def _encoded(encoder, texts: tuple[str, ...]) -> np.ndarray:
    """`texts` encoded by `encoder` (float32), once per encoder and texts in the process."""
    with _LOCK:
        try:
            known = _BY_ENCODER.setdefault(encoder, {})
        except TypeError:
            known = _BY_ID.setdefault(id(encoder), (encoder, {}))[1]
        if texts not in known:
            known[texts] = np.asarray(encoder.encode(list(texts)), np.float32)
        return known[texts]


class AttributeSlots:
    """Slot assignment of text vectors (unit norm, float32) by their prototypes' cosines; `floor`:
    the cosine below which two facts are not offered as one slot's two values."""

    floor = SLOT_FLOOR

    def __init__(self, slots: Sequence[Slot] | None = None, *, threshold: float = 0.4, margin: float = 0.03,
                 ceiling: float = 0.9, change_words: bool = True, min_gap_days: float = 1.0,
                 tolerance: float = 0.0) -> None:
        if not -1.0 <= threshold <= 1.0 or not 0.0 <= margin <= 2.0 or not -1.0 <= ceiling <= 1.0:
            raise ValueError(f"attribute slots: threshold and ceiling in [-1, 1], margin in [0, 2]; "
                             f"got {threshold}, {margin}, {ceiling}")
        self.slots = tuple(slots) if slots is not None else load_slots()
        self.threshold, self.margin, self.ceiling = threshold, margin, ceiling
        self.change_words = change_words  # the newer must also say that something changed ("now", "new", "moved")
        self.min_gap_days = min_gap_days  # said this long after the older: not an elaboration in the same chat
        self.tolerance = tolerance  # the older is in the newer's slot within this much of its own best slot
        self._owner = np.concatenate([np.full(len(s.prototypes), k) for k, s in enumerate(self.slots)])
        self._texts = tuple(p for s in self.slots for p in s.prototypes)

    def prototype_vectors(self, encoder) -> np.ndarray:
        """(prototypes, d) float32: every slot's prototypes encoded by `encoder` (once per encoder
        and set of prototypes in a process, whichever `AttributeSlots` asks: `warm` does it ahead)."""
        return _encoded(encoder, self._texts)

    def warm(self, encoder) -> None:
        """Encode the prototypes with `encoder` now (`Memory.warm`), not on the first write that
        compares a new fact with a stored one (3.3 s with MiniLM on a shared CPU)."""
        self.prototype_vectors(encoder)

    def scores(self, vectors: np.ndarray, encoder) -> np.ndarray:
        """(n, slots): each vector's best cosine to each slot's prototypes."""
        cos = np.atleast_2d(np.asarray(vectors, np.float32)) @ self.prototype_vectors(encoder).T
        out = np.full((cos.shape[0], len(self.slots)), -1.0, np.float32)
        for k in range(len(self.slots)):
            out[:, k] = cos[:, self._owner == k].max(axis=1)
        return out

    def assign(self, vectors: np.ndarray, encoder, *, scored: bool = False) -> list[str | None]:
        """The slot of each vector (n, d), or None: best score >= threshold and ahead of the second
        slot by margin (`scored`: `vectors` are already `scores`)."""
        s = vectors if scored else self.scores(vectors, encoder)
        if s.shape[1] == 1:
            return [self.slots[0].name if v >= self.threshold else None for v in s[:, 0]]
        top = np.sort(s, axis=1)
        best = s.argmax(axis=1)
        return [self.slots[int(b)].name if top[i, -1] >= self.threshold and top[i, -1] - top[i, -2] >= self.margin
                else None for i, b in enumerate(best)]

    def shared(self, new_vector: np.ndarray, old_vectors: np.ndarray, encoder) -> list[str | None]:
        """For each older vector, the newer's slot (`assign`) when the older is in it too: its
        score there at least `threshold` and within `tolerance` of its own best slot."""
        s = self.scores(np.vstack([np.asarray(new_vector, np.float32)[None], old_vectors]), encoder)
        name = self.assign(s[:1], None, scored=True)[0]
        if name is None:
            return [None] * len(s[1:])
        k = next(i for i, slot in enumerate(self.slots) if slot.name == name)
        return [name if row[k] >= self.threshold and row[k] >= row.max() - self.tolerance else None for row in s[1:]]

    def same_thing(self, name: str) -> bool:
        return next(s.same_thing for s in self.slots if s.name == name)


def slot_supersedes(new: str, old: str, similarity: float, new_slot: str | None, old_slot: str | None,
                    slots: AttributeSlots, *, speaker: str = "", gap_days: float | None = None) -> float | None:
    """SLOT_CONFIDENCE when `new` replaces the older `old` of the same speaker by the slot test
    (same slot, same holder, both facts, different: cosine below the ceiling and other text;
    a `same_thing` slot also needs a shared topic word), else None."""
    if new_slot is None or new_slot != old_slot or similarity >= slots.ceiling \
            or (gap_days is not None and gap_days < slots.min_gap_days):
        return None
    if new.strip().lower() == old.strip().lower() or not (is_fact(new) and is_fact(old)) \
            or holder(new) != holder(old) or not mentions(old, speaker) or _YOU.search(new) or _YOU.search(old):
        return None  # the older must be the speaker's own fact; neither is said about the listener
    if not mentions(new, speaker) and _THIRD.search(new):
        return None  # the newer tells of someone else ("they went to college together and became engaged")
    if slots.same_thing(new_slot) and not subject_words(new, speaker) & subject_words(old, speaker):
        return None
    t = new.replace("\u2019", "'")
    if slots.change_words and not (STRONG_CHANGE.search(t) or WEAK_CHANGE.search(t) or SLOT_CHANGE.search(t)):
        return None
    return SLOT_CONFIDENCE


class SlotSupersession:
    """The rules (`RuleSupersession`) and the attribute slots together: the rules' link when they
    make one, else the slots'. Needs the vectors (`uses_vectors`): the new unit's and each
    candidate's `Candidate.vector` (a candidate without one is left to the rules)."""

    uses_vectors = True
    min_similarity = SLOT_FLOOR

    def __init__(self, encoder, rules: RuleSupersession | None = None, slots: AttributeSlots | None = None) -> None:
        self.encoder = encoder
        self.rules = rules if rules is not None else RuleSupersession()
        self.slots = slots if slots is not None else AttributeSlots()
        self.stats = {"rule_links": 0, "slot_links": 0}

    def warm(self) -> None:
        """The slots' prototype vectors encoded now (`Memory.warm`)."""
        self.slots.warm(self.encoder)

    def classify(self, new_text: str, speaker: str, candidates: Sequence[Candidate],
                 vector: np.ndarray | None = None, at: datetime | None = None) -> list[tuple[str, float]]:
        """[(older unit id, confidence)]; `vector`: the new unit's text vector, `at`: when it was said."""
        found = dict(self.rules.classify(new_text, speaker, candidates))
        self.stats["rule_links"] += len(found)
        rest = [c for c in candidates if c.unit_id not in found and c.vector is not None]
        if vector is None or not rest or not is_fact(new_text):
            return list(found.items())
        names = self.slots.shared(vector, np.stack([c.vector for c in rest]), self.encoder)
        for c, name in zip(rest, names):
            gap = None if at is None else (at - c.timestamp).total_seconds() / 86400
            conf = slot_supersedes(new_text, c.text, c.similarity, name, name, self.slots, speaker=speaker,
                                   gap_days=gap)
            if conf is not None:
                found[c.unit_id] = conf
                self.stats["slot_links"] += 1
        return list(found.items())


__all__ = ["AttributeSlots", "SLOT_CONFIDENCE", "SLOT_FLOOR", "Slot", "SlotSupersession", "load_slots",
           "slot_supersedes"]
