"""Relation links between FTA units and their lifecycle (FTA-Mem; see docs/design.md, 'FTA-Mem').

For each new unit, the nearest older units (by dialogue time) of the space are found by the
cosine of their fact texts: the `top_m` most similar at or above `floor` that share a
participant. Each pair is classified, from the new unit to the older one, as

    same_episode_as | supersedes | updates | contradicts | followup_of | supports | none

by offline rules (`classify_pair`) or by the LLM (`LLMLinkClassifier`, rules on an unusable
reply). `supersedes`: the newer unit replaces the older (another value of the same attribute,
`etamem.facts.supersession`); `updates` (the paper's sense): it adds detail or progress, the older
stays true. A link is stored once with its direction and read from both ends
(`UnitGraph.links_of` shows "superseded_by", "contradicted_by", ... at the older end).
Lifecycle: the older unit of a `supersedes` link becomes `superseded`, of a `contradicts` link
`contradicted` (the latest such link decides); both stay stored and retrievable. Beside that
state, each link may change the older unit's paper lifecycle (`Lifecycle`: pending / completed /
contradicted / archived / unknown, completeness complete / partial / unknown) with the newer
unit's event time as its update time: the LLM suggests both values per candidate, the rules
(`lifecycle_update`) derive them from the relation.
`history(unit_id)` is the unit's chain of versions (units joined by supersedes / updates /
contradicts / followup_of links), oldest to newest.
"""
from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Iterable, NamedTuple, Protocol, Sequence

import numpy as np

from etamem.extraction.extractors import prompt_datetime
from etamem.extraction.stems import topic_stems
from etamem.facts.supersession import DISLIKE, LIKE, NEGATION, attitude, negated, supersedes
from etamem.fta.units import (
    LIFECYCLE_COMPLETENESS,
    LIFECYCLE_STATES,
    FTAUnit,
    Lifecycle,
    initial_lifecycle,
    retrieval_text,
)
from etamem.models.llm import LLMError, LLMUnavailable
from etamem.models.prompt_files import load_prompt, render_prompt
from etamem.records import Link  # the store's link rows; here for `etamem.fta.Link`

logger = logging.getLogger(__name__)

RELATIONS = ("same_episode_as", "supersedes", "updates", "contradicts", "followup_of", "supports")
INVERSE = {"same_episode_as": "same_episode_as", "supersedes": "superseded_by", "updates": "updated_by",
           "contradicts": "contradicted_by", "followup_of": "followed_up_by", "supports": "supported_by"}
LIFECYCLE = {"supersedes": "superseded", "contradicts": "contradicted"}
HISTORY_RELATIONS = ("supersedes", "updates", "contradicts", "followup_of")
CONFIDENCE_WORDS = {"low": 0.3, "medium": 0.6, "high": 0.9}


@dataclass(frozen=True)
class LinkEnd:
    """A link seen from one unit: the other unit, the relation read from this side ("supersedes"
    when this unit is the newer one, "superseded_by" when it is the older), the confidence."""

    unit_id: str
    relation: str
    confidence: float
    outgoing: bool


@dataclass(frozen=True)
class Neighbour:
    """An older unit proposed for linking, with its cosine to the new unit."""

    unit: FTAUnit
    similarity: float


class LinkDecision(NamedTuple):
    """A classified pair: the older unit `target`, the `relation` (RELATIONS) and its confidence,
    and the lifecycle values suggested for the older unit (None: derive them from the relation)."""

    target: str
    relation: str
    confidence: float
    lifecycle: str | None = None
    completeness: str | None = None


class LinkClassifier(Protocol):
    """`classify(new, neighbours) -> [LinkDecision]` (relations in RELATIONS; pairs without a
    relation are left out; a plain (id, relation, confidence) tuple is read as a decision)."""

    def classify(self, new: FTAUnit, neighbours: Sequence[Neighbour]) -> list[tuple]: ...


def as_decision(item: Sequence) -> LinkDecision:
    """A classifier's item as a `LinkDecision` (a 3-tuple gets no lifecycle suggestion)."""
    return item if isinstance(item, LinkDecision) else LinkDecision(*item)


# --- the paper's lifecycle -----------------------------------------------------------------------
def event_time(unit: FTAUnit) -> datetime:
    """When the unit's situation happened: its resolved event start, else its dialogue time."""
    return unit.time.event_start if unit.time.event_start is not None else unit.dialogue_time


def lifecycle_update(relation: str, new: FTAUnit, old: FTAUnit, *, status: str | None = None,
                     completeness: str | None = None) -> Lifecycle | None:
    """The older unit's lifecycle after a `relation` link from `new`, or None when it does not
    change. `status` / `completeness`: the classifier's suggestion (the LLM's), used when it is
    one of LIFECYCLE_STATES / LIFECYCLE_COMPLETENESS other than "unknown" ("unknown" changes
    nothing). Without one, the rules: contradicts -> contradicted; supersedes -> archived;
    followup_of or updates of a pending unit by a report that is not itself a plan -> completed
    and complete; updates / same_episode_as of a partial unit by a complete one -> complete;
    supports changes nothing. `updated_at` is the new unit's event time."""
    cur = old.lifecycle
    suggested = status in LIFECYCLE_STATES and status != "unknown"
    suggested_c = completeness in LIFECYCLE_COMPLETENESS and completeness != "unknown"
    new_status, new_comp = cur.status, cur.completeness
    if suggested or suggested_c:
        new_status = status if suggested else cur.status
        new_comp = completeness if suggested_c else cur.completeness
    elif relation == "contradicts":
        new_status = "contradicted"
    elif relation == "supersedes":
        new_status = "archived"
    elif relation in ("followup_of", "updates") and (cur.status == "pending" or old.completeness == "pending") \
            and new.completeness != "pending" and new.time.orientation != "future":
        new_status, new_comp = "completed", "complete"
    elif relation in ("updates", "same_episode_as") and cur.completeness == "partial" \
            and new.completeness == "complete":
        new_comp = "complete"
    if (new_status, new_comp) == (cur.status, cur.completeness):
        return None
    return Lifecycle(new_status, new_comp, event_time(new))


# --- candidates ----------------------------------------------------------------------------
def shares_participant(a: FTAUnit, b: FTAUnit) -> bool:
    """True when the units share a participant (or either names none)."""
    pa = {p.lower() for p in a.participants}
    pb = {p.lower() for p in b.participants}
    return not pa or not pb or bool(pa & pb)


def nearest_older(unit: FTAUnit, vector: np.ndarray, pool: Sequence[FTAUnit], vectors: np.ndarray, *,
                  top_m: int = 5, floor: float = 0.5, same_participants: bool = True) -> list[Neighbour]:
    """The `top_m` units of `pool` (all older than `unit`; `vectors` their unit rows) whose cosine
    to `vector` is at least `floor`, most similar first (ties: the newer first), sharing a
    participant when `same_participants` (the engine's `fta_link_candidates="shared-participant"`;
    the paper takes candidates by similarity alone)."""
    if not len(pool):
        return []
    sims = np.asarray(vectors, np.float32) @ np.asarray(vector, np.float32)
    above = np.nonzero(sims >= floor)[0]
    out = []
    for i in sorted(above.tolist(), key=lambda i: (-float(sims[i]), -i)):
        if len(out) >= top_m:
            break
        if same_participants and not shares_participant(unit, pool[i]):
            continue
        out.append(Neighbour(pool[i], round(float(sims[i]), 4)))
    return out


# --- rule classification -----------------------------------------------------------------------
_FILLER = {"now", "currently", "still", "also", "actually", "really", "just", "recently", "lately", "anymore",
           "already", "these", "days", "nowadays", "then"}
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
_STATE_PREDICATE = {"is", "are", "was", "lives", "live", "works", "work", "has", "have", "owns", "drives", "uses",
                    "studies", "prefers", "likes", "loves", "favorite", "favourite", "'s", "name", "named", "age",
                    "weighs", "earns", "called", "living", "working", "job", "home", "address", "plays", "teaches",
                    "feels", "feel"}
# the shared prefix must stop right before a value: after a predicate or a preposition / article
_VALUE_SLOT = _STATE_PREDICATE | {"in", "at", "to", "for", "as", "a", "an", "the", "of", "with", "from", "by"}
_MAX_VALUE = 6  # tokens of each differing tail ("a bakery", "2 dogs", "Seattle")
_SAID = re.compile(r"^[A-Z][\w'.-]*(?: [A-Z][\w'.-]*)? said: ")


def link_text(unit: FTAUnit) -> str:
    """The text compared for linking: the fact without a leading "<speaker> said: " (shared by
    every attributed statement of a speaker, it would make them all look alike)."""
    return _SAID.sub("", unit.text, count=1)


def _tokens(text: str) -> list[str]:
    words = _WORD.findall(text.lower().replace("\u2019", "'"))
    out = []
    for w in words:
        if w.endswith("'s") and len(w) > 2:
            out.extend([w[:-2], "'s"])
        elif w not in _FILLER:
            out.append(w)
    return out


def _same_attribute_new_value(old: str, new: str) -> bool:
    """True when the texts share a subject-and-predicate prefix ("caroline lives in") with a
    state-like predicate, and then say different things."""
    a, b = _tokens(old), _tokens(new)
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    if k < 2 or k == len(a) or k == len(b) or a[k - 1] not in _VALUE_SLOT:
        return False
    if not any(w in _STATE_PREDICATE for w in a[:k]) or max(len(a), len(b)) - k > _MAX_VALUE:
        return False
    return set(topic_stems(" ".join(a[k:]))) != set(topic_stems(" ".join(b[k:]))) or \
        [w for w in a[k:] if w.isdigit()] != [w for w in b[k:] if w.isdigit()]


# "but" only from the start of a run of spaces (the lookbehind): a long run is scanned once
_CLAUSE = re.compile(r"(?<=[.!?;:])\s+|,\s+(?:and\s+|but\s+)?|(?<!\s)\s++but\s+")


def _clauses(text: str) -> list[str]:
    """The clauses of a unit text (split at sentence ends, colons, semicolons, commas and "but";
    at least two words each), so that "A, and now Caroline lives in Seattle" compares its own
    statement, not only the text's opening."""
    return [c.strip(" .!?;:") for c in _CLAUSE.split(_SAID.sub("", text, count=1)) if len(c.split()) >= 2]


def _topic_without_stance(text: str, names: frozenset[str]) -> set[str]:
    """Topic stems once negations and like/dislike words are taken out (what the text is about,
    not the stance it takes)."""
    t = text.replace("\u2019", "'")
    for pattern in (NEGATION, LIKE, DISLIKE):
        t = pattern.sub(" ", t)
    return topic_stems(t, names)


def _overlap(x: set[str], y: set[str]) -> float:
    """|x & y| / min(|x|, |y|): 1.0 when one text's topic words are all in the other."""
    return len(x & y) / min(len(x), len(y)) if x and y else 0.0


def _is_event(unit: FTAUnit) -> bool:
    return unit.content_type in ("event", "relationship_event") and unit.time.orientation in ("past", "mixed")


def _is_plan(unit: FTAUnit) -> bool:
    return unit.content_type == "homework_or_plan" or unit.time.orientation == "future"


def classify_pair(new: FTAUnit, old: FTAUnit, similarity: float, *, strict: float = 0.6, same_episode: float = 0.8,
                  supports: float = 0.85) -> tuple[str, float] | None:
    """Offline relation from `new` to the older `old`, with a confidence; None for no link.

    contradicts and updates only between statements of the same speaker (no question-answer
    unit, no plan) with cosine >= `strict`, compared as whole texts and clause by clause
    (`_clauses`). In order: contradicts (the topic words of one are (mostly) in the other once
    stance words are taken out, and one is negated or likes what the other dislikes);
    supersedes (same subject and state-like predicate up to a value slot, a different short
    value, neither a past event nor a plan; or the shared rules of `etamem.facts.supersession.supersedes`
    between the two facts, e.g. "moved to", "stopped", "new manager"); followup_of (the older is a plan, the newer a later
    past/present report about the same things);
    same_episode_as (same session, cosine >= `same_episode`); supports (cosine >= `supports`)."""
    names = frozenset(p.lower() for p in new.participants + old.participants)
    sn, so = topic_stems(new.text, names), topic_stems(old.text, names)
    conf = round(0.5 + 0.5 * max(0.0, min(1.0, similarity)), 3)
    # a state change or a denial: said by the same person about the same thing, no question in it
    own_statement = (new.speaker == old.speaker and similarity >= strict and " asked: " not in new.text
                     and " asked: " not in old.text and not (_is_plan(new) or _is_plan(old)))
    pairs = [(old.text, new.text)] + [(a, b) for a in _clauses(old.text) for b in _clauses(new.text)] \
        if own_statement else []
    for text_o, text_n in pairs:
        if _overlap(_topic_without_stance(text_n, names), _topic_without_stance(text_o, names)) < 0.5:
            continue
        att_n, att_o = attitude(text_n), attitude(text_o)
        if (att_n and att_o and att_n != att_o) or (not (att_n or att_o) and negated(text_n) != negated(text_o)):
            return "contradicts", conf
    # whole texts: not between past events; clauses: the state predicate in the shared prefix decides
    if pairs and (not (_is_event(new) or _is_event(old)) and _same_attribute_new_value(*pairs[0])
                  or any(_same_attribute_new_value(a, b) for a, b in pairs[1:])):
        return "supersedes", conf
    if new.speaker == old.speaker and " asked: " not in new.text and " asked: " not in old.text \
            and supersedes(link_text(new), link_text(old), similarity, speaker=new.speaker, floor=0.4) is not None:
        return "supersedes", conf
    if old.content_type == "homework_or_plan" and not _is_plan(new) \
            and new.time.orientation in ("past", "present", "mixed") and new.dialogue_time >= old.dialogue_time \
            and _overlap(sn, so) >= 0.5:
        return "followup_of", conf
    if new.session_id == old.session_id and similarity >= same_episode:
        return "same_episode_as", round(similarity, 3)
    if similarity >= supports and new.affect.label == old.affect.label:
        return "supports", round(similarity, 3)
    return None


class RuleLinkClassifier:
    """`classify_pair` over each neighbour (thresholds configurable)."""

    def __init__(self, *, strict: float = 0.6, same_episode: float = 0.8, supports: float = 0.85) -> None:
        self.strict = strict
        self.same_episode = same_episode
        self.supports = supports

    def classify(self, new: FTAUnit, neighbours: Sequence[Neighbour]) -> list[LinkDecision]:
        out = []
        for nb in neighbours:
            got = classify_pair(new, nb.unit, nb.similarity, strict=self.strict, same_episode=self.same_episode,
                                supports=self.supports)
            if got is not None and nb.unit.unit_id is not None:
                out.append(LinkDecision(nb.unit.unit_id, got[0], got[1]))
        return out


# --- LLM classification ------------------------------------------------------------------------
def _confidence(value: Any) -> float:
    if isinstance(value, str):
        return CONFIDENCE_WORDS.get(value.strip().lower(), 0.5)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return max(0.0, min(1.0, float(value)))
    return 0.5


def _word(value: Any) -> str | None:
    return value.strip().lower() if isinstance(value, str) and value.strip() else None


def parse_link_reply(reply: Any, ids: Sequence[str]) -> list[LinkDecision]:
    """Decisions from a `{"memory_updates": [{"memory_id", "relation", "relation_confidence",
    "lifecycle_status", "completeness"}]}` reply (the paper's form; `{"links": [{"id",
    "relation", "confidence"}]}` is read too); ValueError when it is not of that form or names
    an id that was not offered. Relations outside RELATIONS ("unknown", "none", ...) mean no
    link; a lifecycle value outside the paper's vocabulary reads as no suggestion."""
    items = None
    if isinstance(reply, dict):
        items = reply.get("memory_updates", reply.get("links"))
    elif isinstance(reply, list):
        items = reply
    if not isinstance(items, list):
        raise ValueError('expected {"memory_updates": [{"memory_id": ..., "relation": ..., ...}]}')
    offered = set(ids)
    out: list[LinkDecision] = []
    for item in items:
        uid = item.get("memory_id", item.get("id")) if isinstance(item, dict) else None
        if not isinstance(uid, str):
            raise ValueError(f"update item must be an object with a string memory_id, got {item!r}")
        if uid not in offered:
            raise ValueError(f"update names {uid!r}, which is not one of the candidates")
        rel = _word(item.get("relation")) or ""
        if rel not in RELATIONS:
            continue
        life, comp = _word(item.get("lifecycle_status")), _word(item.get("completeness"))
        out.append(LinkDecision(uid, rel, _confidence(item.get("relation_confidence", item.get("confidence"))),
                                life if life in LIFECYCLE_STATES else None,
                                comp if comp in LIFECYCLE_COMPLETENESS else None))
    return out


def updates_schema(ids: Sequence[str]) -> dict:
    """The JSON schema of a link reply naming only the offered `ids` (the prompt's form)."""
    def one_of(words):
        return {"type": "string", "enum": list(words)}

    item = {"type": "object", "properties": {
        "memory_id": one_of(ids), "completeness": one_of(LIFECYCLE_COMPLETENESS),
        "lifecycle_status": one_of(LIFECYCLE_STATES), "relation": one_of((*RELATIONS, "unknown")),
        "relation_confidence": one_of(("low", "medium", "high", "unknown"))},
        "required": ["memory_id", "completeness", "lifecycle_status", "relation", "relation_confidence"]}
    return {"type": "object", "properties": {"memory_updates": {"type": "array", "items": item}},
            "required": ["memory_updates"]}


class LLMLinkClassifier:
    """One LLM call per new unit that has neighbours (prompt `fta_link`, stage "fta_link"). An
    unusable reply falls back to the rules for that unit (`stats["fallback_units"]`); no reply
    (`LLMUnavailable`) propagates."""

    STAGE = "fta_link"

    def __init__(self, llm: Any, fallback: LinkClassifier | None = None, *, temperature: float | None = None,
                 prompt: str = "fta_link") -> None:
        self.llm = llm
        self.fallback = fallback if fallback is not None else RuleLinkClassifier()
        self.temperature = temperature
        self.prompt = prompt
        load_prompt(prompt)
        self._lock = threading.Lock()
        self._stats = {"units": 0, "llm_units": 0, "fallback_units": 0}

    @property
    def stats(self) -> dict[str, int]:
        with self._lock:
            return dict(self._stats)

    @staticmethod
    def short_ids(neighbours: Sequence[Neighbour]) -> dict[str, str]:
        """Short id -> unit id of the candidates (small models shorten or invent long ids)."""
        return {f"c{i}": nb.unit.unit_id for i, nb in enumerate(neighbours, 1) if nb.unit.unit_id is not None}

    def build_messages(self, new: FTAUnit, neighbours: Sequence[Neighbour]) -> list[dict[str, str]]:
        label = {v: k for k, v in self.short_ids(neighbours).items()}
        cands = "\n".join(f"- {label.get(nb.unit.unit_id, nb.unit.unit_id)} (said {prompt_datetime(nb.unit.dialogue_time)}, "
                          f"lifecycle {nb.unit.lifecycle.status}, completeness {nb.unit.lifecycle.completeness}): "
                          f"{retrieval_text(nb.unit)}" for nb in neighbours)
        text = render_prompt(self.prompt, new_id="new", new_date=prompt_datetime(new.dialogue_time),
                             new_unit=retrieval_text(new), candidates=cands)
        return [{"role": "user", "content": text}]

    def classify(self, new: FTAUnit, neighbours: Sequence[Neighbour]) -> list[LinkDecision]:
        if not neighbours:
            return []
        short = self.short_ids(neighbours)
        ids = list(short)
        params = {} if self.temperature is None else {"temperature": self.temperature}
        try:
            out = self.llm.complete_json(self.build_messages(new, neighbours), stage=self.STAGE,
                                         validate=lambda r: parse_link_reply(r, ids), schema=updates_schema(ids),
                                         **params)
            if not (isinstance(out, list) and all(isinstance(x, LinkDecision) for x in out)):
                out = parse_link_reply(out, ids)
            out = [d._replace(target=short[d.target]) for d in out]
        except LLMUnavailable:
            raise
        except (LLMError, ValueError) as exc:
            logger.warning("fta links: unusable LLM reply for unit %s (%s); rule classifier", new.unit_id, exc)
            with self._lock:
                self._stats["units"] += 1
                self._stats["fallback_units"] += 1
            return self.fallback.classify(new, neighbours)
        with self._lock:
            self._stats["units"] += 1
            self._stats["llm_units"] += 1
        return out


# --- lifecycle and history ---------------------------------------------------------------------
def apply_lifecycle(units: dict[str, FTAUnit], link: Link, decision: LinkDecision | None = None) -> None:
    """Mark the older unit of a supersedes / contradicts link superseded / contradicted, and set
    its paper lifecycle (`lifecycle_update`, with `decision`'s suggestion), in place."""
    status = LIFECYCLE.get(link.relation)
    old = units.get(link.target)
    if old is None:
        return
    if status is not None:
        old = replace(old, status=status)
    new = units.get(link.source)
    if new is not None:
        life = lifecycle_update(link.relation, new, old, status=decision.lifecycle if decision else None,
                                completeness=decision.completeness if decision else None)
        if life is not None:
            old = replace(old, lifecycle=life)
    units[link.target] = old


def history(unit_id: str, units: dict[str, FTAUnit], links: Iterable[Link],
            relations: Sequence[str] = HISTORY_RELATIONS) -> list[FTAUnit]:
    """The units connected to `unit_id` through `relations` links (either direction, any
    distance), itself included, ordered oldest -> newest (dialogue time, then insertion order)."""
    if unit_id not in units:
        raise KeyError(unit_id)
    adj: dict[str, set[str]] = {}
    for link in links:
        if link.relation in relations:
            adj.setdefault(link.source, set()).add(link.target)
            adj.setdefault(link.target, set()).add(link.source)
    seen, todo = {unit_id}, [unit_id]
    while todo:
        for other in adj.get(todo.pop(), ()):
            if other not in seen and other in units:
                seen.add(other)
                todo.append(other)
    order = {uid: i for i, uid in enumerate(units)}
    return [units[u] for u in sorted(seen, key=lambda u: (units[u].dialogue_time, order[u]))]


class UnitGraph:
    """Finalised units of one space with their vectors and links.

    `add(units)` stores units in order; each is linked to its nearest older units (by dialogue
    time; ties: stored earlier) via `classifier` (rules by default), links are stored once and
    indexed at both ends, and the lifecycle is applied. `encoder.encode(texts)` gives unit rows
    of the fact texts (`link_text`)."""

    def __init__(self, encoder: Any, classifier: LinkClassifier | None = None, *, top_m: int = 5,
                 floor: float = 0.5, same_participants: bool = True) -> None:
        self.encoder = encoder
        self.classifier = classifier if classifier is not None else RuleLinkClassifier()
        self.top_m = top_m
        self.floor = floor
        self.same_participants = same_participants
        self.units: dict[str, FTAUnit] = {}
        self.links: list[Link] = []
        self._ids: list[str] = []  # row order of `_matrix`
        self._matrix = np.zeros((0, 0), np.float32)  # grows by doubling; rows 0..len(_ids)-1 are used
        self._by_unit: dict[str, list[Link]] = {}

    def _append_row(self, uid: str, vec: np.ndarray) -> None:
        n = len(self._ids)
        if self._matrix.shape[1] != len(vec):
            if n:
                raise ValueError(f"encoder dimension changed: {self._matrix.shape[1]} -> {len(vec)}")
            self._matrix = np.zeros((16, len(vec)), np.float32)
        if n == len(self._matrix):
            self._matrix = np.concatenate([self._matrix, np.zeros_like(self._matrix)])
        self._matrix[n] = vec
        self._ids.append(uid)

    def add(self, units: Sequence[FTAUnit]) -> list[Link]:
        """Store and link `units` (each must have a unit_id not yet stored); the new links."""
        units = list(units)
        for u in units:
            if u.unit_id is None:
                raise ValueError("only finalised units (with a unit_id) can be linked")
            if u.unit_id in self.units:
                raise ValueError(f"unit {u.unit_id} is already stored")
        if not units:
            return []
        vectors = np.asarray(self.encoder.encode([link_text(u) for u in units]), np.float32)
        new_links: list[Link] = []
        for unit, vec in zip(units, vectors):
            older = [i for i, uid in enumerate(self._ids) if self.units[uid].dialogue_time <= unit.dialogue_time]
            pool = [self.units[self._ids[i]] for i in older]
            rows = self._matrix[older] if older else np.zeros((0, len(vec)), np.float32)
            neighbours = nearest_older(unit, vec, pool, rows, top_m=self.top_m, floor=self.floor,
                                       same_participants=self.same_participants)
            self.units[unit.unit_id] = replace(unit, lifecycle=initial_lifecycle(unit))
            self._append_row(unit.unit_id, vec)
            for decision in map(as_decision, self.classifier.classify(unit, neighbours)):
                target, relation = decision.target, decision.relation
                if relation not in RELATIONS or target == unit.unit_id or target not in self.units:
                    continue
                link = Link(unit.unit_id, target, relation, float(decision.confidence))
                self.links.append(link)
                self._by_unit.setdefault(link.source, []).append(link)
                self._by_unit.setdefault(link.target, []).append(link)
                apply_lifecycle(self.units, link, decision)
                new_links.append(link)
        return new_links

    def get(self, unit_id: str) -> FTAUnit:
        return self.units[unit_id]

    def links_of(self, unit_id: str) -> list[LinkEnd]:
        """Every link touching `unit_id`, read from its side, in the order they were made."""
        out = []
        for link in self._by_unit.get(unit_id, []):
            if link.source == unit_id:
                out.append(LinkEnd(link.target, link.relation, link.confidence, True))
            else:
                out.append(LinkEnd(link.source, INVERSE[link.relation], link.confidence, False))
        return out

    def history(self, unit_id: str, relations: Sequence[str] = HISTORY_RELATIONS) -> list[FTAUnit]:
        """`history` over this graph's units and links (oldest -> newest)."""
        return history(unit_id, self.units, self.links, relations)


__all__ = ["CONFIDENCE_WORDS", "HISTORY_RELATIONS", "INVERSE", "LIFECYCLE", "LLMLinkClassifier", "Link",
           "LinkClassifier", "LinkDecision", "as_decision", "event_time", "lifecycle_update",
           "LinkEnd", "Neighbour", "RELATIONS", "RuleLinkClassifier", "UnitGraph", "apply_lifecycle", "classify_pair",
           "history", "link_text", "nearest_older", "parse_link_reply", "shares_participant"]
