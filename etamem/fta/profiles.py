"""Longitudinal (auxiliary) memory for FTA-Mem: one profile per speaker, updated after each
session from that session's FTA units (see docs/design.md, 'FTA-Mem'; the paper's U_i = Update_U(U_{i-1}, M_i)
and H_i = Update_H(H_{i-1}, M_i^sup)). Offline and extractive: every item is a unit's text or
words of it, and names the units (`Source`s) it came from.

A `SpeakerProfile` holds
- `current_states`: the newest state of the speaker per topic (units of type current_state /
  risk_signal, or with emotion words and a present-tense state cue); a newer state on the same
  topic replaces the older one; a superseded or contradicted unit is never a current state;
- `relationships`: people and pets named with a relation word and an owner among the unit's
  speakers ("Maya's sister Ana", "our kids"), with its kind (family, partner, friend, ...);
- `stable_facts`: general facts and preferences the speaker states about themselves;
- `support_notes`: support experiences: advice or encouragement one speaker gives the other,
  help one gives, and what a speaker reports helped (or did not), with helper and helped.
  A note lives in the helped speaker's profile (the helper's when nobody else is named).

Lists are newest first and capped (`ProfileCaps`). Superseded / contradicted units leave
current states and stable facts (pass older units again when their status changes); their
relationships and support notes stay, as history. `forget_units` removes every item that
only deleted units support. Profiles are plain JSON (`profiles_to_json`) for the space meta.
"""
from __future__ import annotations

import json
import logging
import re
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from typing import Any, Collection, Sequence

from etamem.extraction.stems import topic_stems
from etamem.fta import rules
from etamem.fta.units import FTAUnit
from etamem.ingest.timeparse import format_date

logger = logging.getLogger(__name__)

PROFILE_VERSION = 1
STATE_TYPES = ("current_state", "risk_signal")
FACT_TYPES = ("general_fact", "belief_candidate")
RETIRED = ("superseded", "contradicted")
SUPPORT_KINDS = ("advice", "encouragement", "help", "helped", "did_not_help")

RELATION_KINDS = {
    **dict.fromkeys("mom mum mother dad father parent parents sister sisters brother brothers sibling siblings son "
                    "sons daughter daughters grandmother grandma grandfather grandpa grandparents aunt uncle cousin "
                    "cousins niece nephew baby kid kids child children family in-laws".split(), "family"),
    **dict.fromkeys("wife husband partner spouse boyfriend girlfriend fiance fiancee fiancé fiancée".split(),
                    "partner"),
    **dict.fromkeys("friend friends roommate neighbour neighbor neighbours neighbors".split(), "friend"),
    "best friend": "friend",
    **dict.fromkeys("boss manager colleague colleagues coworker coworkers co-worker co-workers teammate "
                    "teammates classmate classmates teacher mentor advisor".split(), "colleague"),
    **dict.fromkeys("dog dogs cat cats puppy kitten pet pets horse rabbit bunny parrot hamster".split(), "pet"),
    **dict.fromkeys("therapist doctor landlord".split(), "other"),
}
_MODIFIERS = r"(?:(?:new|old|late|little|big|younger|older|elder|twin|step|ex-)\s?)?"
_RELATION_RE = re.compile(
    # the owner: from the start of a hyphenated word, its first capitalised part, to the word's end
    # (atomic and possessive: a long hyphenated word is scanned once, not once per part)
    r"(?:(?<![\w-])(?>[\w-]*?\b(?=[A-Z]))(?P<owner>[A-Z][\w-]*+)['\u2019]s\s+|\b(?P<our>[Oo]ur)\s+)(?P<mod>"
    + _MODIFIERS + r")"
    r"(?P<rel>" + "|".join(sorted(map(re.escape, RELATION_KINDS), key=len, reverse=True)) + r")\b"
    r"(?:\s+(?P<name>[A-Z][a-z]+)\b)?")
_NOT_NAMES = {"I", "The", "And", "But", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday",
              "January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
              "November", "December"}
_STATE_CUE = re.compile(r"\b(?:feel|feels|feeling|is|am|are|has been|have been|these days|lately|now|currently"
                        r"|still|right now)\b", re.IGNORECASE)
_STATE_WORDS = ("feel feels feeling felt lately currently now still right today bit pretty quite really so much "
                "more less better worse okay fine good bad mood help helped helps").split()
_WE = re.compile(r"\b(?:we|us|our)\b", re.IGNORECASE)
_ADVICE = re.compile(r"\b(?:should|could|might|try|tried|recommend\w*|suggest\w*|make sure|remember to"
                     r"|write down|advice|why (?:don'?t|doesn'?t))\b", re.IGNORECASE)
_NOT_HELPED = re.compile(r"\b(?:didn'?t|did not|doesn'?t|does not|never|wasn'?t|isn'?t|not)\s+(?:\w+\s+)?"
                         r"help(?:ed|s|ful)?\b", re.IGNORECASE)
_HELPED = re.compile(r"\b(?:help(?:ed|s)|(?:was|is|been) (?:really |so |very )?helpful|feel(?:s|ing)? better"
                     r"|thanks to|grateful for|thankful for|worked (?:really )?(?:well )?for)\b"
                     r"(?:\s+(?P<object>[A-Z][\w-]*))?", re.IGNORECASE)
_MAX_LINE = 160


@dataclass(frozen=True)
class Source:
    """A unit an item was extracted from, with the time of its newest evidence (ISO 8601, UTC)."""

    unit_id: str
    date: str


class _Sourced:
    sources: tuple[Source, ...]

    @property
    def unit_ids(self) -> tuple[str, ...]:
        return tuple(s.unit_id for s in self.sources)

    @property
    def date(self) -> str:
        """The newest source's time (ISO 8601, UTC)."""
        return max(s.date for s in self.sources)


@dataclass(frozen=True)
class CurrentState(_Sourced):
    """The speaker's latest state on a topic (`topic`: content-word stems, () for general mood)."""

    text: str
    topic: tuple[str, ...]
    label: str
    emotions: tuple[str, ...]
    content_type: str
    sources: tuple[Source, ...]


@dataclass(frozen=True)
class Relationship(_Sourced):
    """Someone the speaker relates to: relation word ("sister", "late grandmother"), its kind, a name if said."""

    relation: str
    kind: str
    name: str
    sources: tuple[Source, ...]


@dataclass(frozen=True)
class StableFact(_Sourced):
    """A general fact or preference the speaker stated about themselves."""

    text: str
    content_type: str
    sources: tuple[Source, ...]


@dataclass(frozen=True)
class SupportNote(_Sourced):
    """A support experience: `helper` (may be "" when a thing helped) gave `kind` to `helped`."""

    text: str
    kind: str
    helper: str
    helped: str
    sources: tuple[Source, ...]


@dataclass(frozen=True)
class ProfileCaps:
    """How many items each list keeps (newest first)."""

    current_states: int = 5
    relationships: int = 8
    stable_facts: int = 8
    support_notes: int = 5


@dataclass(frozen=True)
class SpeakerProfile:
    """The longitudinal memory of one speaker (see the module doc)."""

    speaker: str
    current_states: tuple[CurrentState, ...] = ()
    relationships: tuple[Relationship, ...] = ()
    stable_facts: tuple[StableFact, ...] = ()
    support_notes: tuple[SupportNote, ...] = ()

    def unit_ids(self) -> set[str]:
        """Every unit id any item names."""
        return {i for items in _lists(self) for item in items for i in item.unit_ids}

    def is_empty(self) -> bool:
        return not any(_lists(self))


_LISTS = ("current_states", "relationships", "stable_facts", "support_notes")
_ITEM_TYPES: dict[str, Any] = {"current_states": CurrentState, "relationships": Relationship,
                               "stable_facts": StableFact, "support_notes": SupportNote}


def _lists(profile: SpeakerProfile) -> list[tuple[Any, ...]]:
    return [getattr(profile, name) for name in _LISTS]


# --- reading units ------------------------------------------------------------------------------
def _when(unit: FTAUnit) -> str:
    ts = max(span.end_time for span in unit.evidence) if unit.evidence else unit.dialogue_time
    ts = ts.replace(tzinfo=timezone.utc) if ts.tzinfo is None else ts.astimezone(timezone.utc)
    return ts.isoformat(timespec="seconds")


def _own_words(unit: FTAUnit) -> str:
    """The unit text without a question asked by someone else ("A asked: ... B: ") or a "B said: " prefix."""
    text = unit.text
    marker = f"{unit.speaker}: "
    if marker in text:
        return text[text.rindex(marker) + len(marker):]
    prefix = f"{unit.speaker} said: "
    return text[len(prefix):] if text.startswith(prefix) else text


def _about_speaker(unit: FTAUnit, words: str) -> bool:
    """The speaker (not only something of theirs: "Maya's sister ...") or "we" is a subject of `words`."""
    return bool(re.search(rf"\b{re.escape(unit.speaker)}\b(?!['\u2019]s)", words) or _WE.search(words))


def _topic(unit: FTAUnit, words: str) -> tuple[str, ...]:
    exclude = {p.lower() for p in (unit.speaker, *unit.participants)} | set(rules.EMOTIONS) | set(_STATE_WORDS)
    return tuple(sorted(topic_stems(words, exclude)))


def _same_topic(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """Both general mood (no topic words), or at least half of the smaller topic shared."""
    if not a or not b:
        return not a and not b
    return len(set(a) & set(b)) * 2 >= min(len(a), len(b))


def _state(unit: FTAUnit, source: Source) -> CurrentState | None:
    words = _own_words(unit)
    if unit.awaiting == "answer" or not _about_speaker(unit, words):
        return None
    is_state = unit.content_type in STATE_TYPES or (
        bool(unit.affect.emotions) and unit.time.orientation != "future" and bool(_STATE_CUE.search(words)))
    if not is_state:
        return None
    return CurrentState(unit.text, _topic(unit, words), unit.affect.label, unit.affect.emotions, unit.content_type,
                        (source,))


def _fact(unit: FTAUnit, source: Source) -> StableFact | None:
    words = _own_words(unit)
    if unit.content_type not in FACT_TYPES or unit.awaiting == "answer" or not _about_speaker(unit, words):
        return None
    return StableFact(unit.text, unit.content_type, (source,))


def _relations(unit: FTAUnit) -> list[tuple[str, str, str, str]]:
    """(owner, relation, kind, name) for each relation word the unit names with a known owner."""
    persons = {unit.speaker, *unit.participants}
    own = _own_words(unit)
    found = []
    for text, ours in ((unit.text, False), (own, True)):
        for m in _RELATION_RE.finditer(text):
            if bool(m.group("our")) != ours:
                continue
            owner = unit.speaker if ours else m.group("owner")
            if owner not in persons:
                continue
            rel = m.group("rel").lower()
            name = m.group("name") or ""
            name = "" if name in _NOT_NAMES else name
            found.append((owner, (m.group("mod") or "").lower() + rel, RELATION_KINDS[rel], name))
    return list(dict.fromkeys(found))


def _support(unit: FTAUnit, source: Source) -> SupportNote | None:
    """A support note from the unit, or None (rules in the module doc)."""
    if unit.awaiting == "answer":
        return None
    others = [p for p in unit.participants if p != unit.speaker]
    words = _own_words(unit)
    if unit.content_type == "support_interaction":
        kind = "advice" if _ADVICE.search(words) else "encouragement"
        return SupportNote(unit.text, kind, unit.speaker, others[0] if others else "", (source,))
    if _NOT_HELPED.search(words):
        return SupportNote(unit.text, "did_not_help", _named(others, words), unit.speaker, (source,))
    m = _HELPED.search(words)
    if m is None:
        return None
    obj = m.group("object") or ""
    if obj in others and m.group(0).lower().startswith("help"):  # "Maya helped Leo move"
        return SupportNote(unit.text, "help", unit.speaker, obj, (source,))
    return SupportNote(unit.text, "helped", _named(others, words), unit.speaker, (source,))


def _named(names: Sequence[str], text: str) -> str:
    return next((n for n in names if re.search(rf"\b{re.escape(n)}\b", text)), "")


# --- update and forget --------------------------------------------------------------------------
def update_profiles(profiles: dict[str, SpeakerProfile], units: Sequence[FTAUnit], *,
                    caps: ProfileCaps | None = None) -> dict[str, SpeakerProfile]:
    """New profiles after a session's `units` (pure, deterministic, idempotent). Units without
    an id (carried construction context) are skipped; a unit seen before is re-read (its
    single-unit items replaced), so pass older units again when their status changes.
    `caps`: list lengths (default `ProfileCaps()`)."""
    caps = caps if caps is not None else ProfileCaps()
    work: dict[str, dict[str, list[Any]]] = {
        name: {k: list(getattr(p, k)) for k in _LISTS} for name, p in profiles.items()}

    def lists(name: str) -> dict[str, list[Any]]:
        return work.setdefault(name, {k: [] for k in _LISTS})

    todo = sorted((u for u in units if u.unit_id), key=lambda u: (_when(u), u.unit_id))
    if len(todo) < len(units):
        logger.debug("profiles: %d unit(s) without an id skipped", len(units) - len(todo))
    for unit in todo:
        uid = str(unit.unit_id)
        source = Source(uid, _when(unit))
        for person in work.values():
            for key in ("current_states", "stable_facts", "support_notes"):
                person[key] = [it for it in person[key] if uid not in it.unit_ids]
        for owner, relation, kind, name in _relations(unit):
            rels = lists(owner)["relationships"]
            old = next((r for r in rels if (r.relation, r.name) == (relation, name)), None)
            if old is None:
                rels.append(Relationship(relation, kind, name, (source,)))
            elif uid not in old.unit_ids:
                rels[rels.index(old)] = replace(old, sources=old.sources + (source,))
        note = _support(unit, source)
        if note is not None:
            lists(note.helped or note.helper)["support_notes"].append(note)
        if unit.status in RETIRED:
            continue
        state = _state(unit, source)
        if state is not None:
            states = lists(unit.speaker)["current_states"]
            same = [s for s in states if _same_topic(s.topic, state.topic)]
            if not any(s.date > state.date for s in same):
                states[:] = [s for s in states if s not in same] + [state]
        fact = _fact(unit, source)
        if fact is not None:
            facts = lists(unit.speaker)["stable_facts"]
            key = " ".join(fact.text.lower().split())
            older = [f for f in facts if " ".join(f.text.lower().split()) == key]
            if not any(f.date > fact.date for f in older):
                facts[:] = [f for f in facts if f not in older] + [fact]
    return {name: p for name, p in sorted((n, _profile(n, w, caps)) for n, w in work.items()) if not p.is_empty()}


def _newest_first(item: Any) -> tuple[str, tuple[str, ...]]:
    return item.date, item.unit_ids


def _profile(name: str, lists: dict[str, list[Any]], caps: ProfileCaps) -> SpeakerProfile:
    return SpeakerProfile(name, **{
        k: tuple(sorted(items, key=_newest_first, reverse=True)[:max(0, getattr(caps, k))])
        for k, items in lists.items()})


def forget_units(profiles: dict[str, SpeakerProfile], unit_ids: Collection[str]) -> dict[str, SpeakerProfile]:
    """New profiles without any trace of the deleted units: an item keeps only sources that were
    not deleted and goes when none is left; a profile left empty goes."""
    gone = set(unit_ids)
    out = {}
    for name, profile in profiles.items():
        kept: dict[str, tuple[Any, ...]] = {}
        for key in _LISTS:
            items = []
            for item in getattr(profile, key):
                sources = tuple(s for s in item.sources if s.unit_id not in gone)
                if sources:
                    items.append(item if len(sources) == len(item.sources) else replace(item, sources=sources))
            kept[key] = tuple(items)
        new = SpeakerProfile(name, **kept)
        if not new.is_empty():
            out[name] = new
    return out


# --- JSON ---------------------------------------------------------------------------------------
def profiles_to_json(profiles: dict[str, SpeakerProfile]) -> str:
    """Plain JSON text: {"version": 1, "profiles": {speaker: {...}}}, speakers sorted."""
    body = {name: asdict(profiles[name]) for name in sorted(profiles)}
    return json.dumps({"version": PROFILE_VERSION, "profiles": body}, ensure_ascii=False, sort_keys=True)


def profiles_from_json(text: str) -> dict[str, SpeakerProfile]:
    """Profiles from `profiles_to_json` text; ValueError when the text is not that format."""
    try:
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("version") != PROFILE_VERSION:
            raise ValueError(f"expected profile version {PROFILE_VERSION}, got {data.get('version')!r}"
                             if isinstance(data, dict) else "expected a JSON object")
        out = {}
        for name, raw in data["profiles"].items():
            lists = {key: tuple(_item(_ITEM_TYPES[key], d) for d in raw.get(key, [])) for key in _LISTS}
            out[name] = SpeakerProfile(str(raw.get("speaker", name)), **lists)
        return out
    except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not a profiles document: {exc}") from None


def _item(cls: Any, d: dict[str, Any]) -> Any:
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items() if k != "sources"}
    return cls(sources=tuple(Source(s["unit_id"], s["date"]) for s in d["sources"]), **fields)


# --- rendering ----------------------------------------------------------------------------------
def _day(date: str) -> str:
    return format_date(datetime.fromisoformat(date))


def _short(text: str) -> str:
    return text if len(text) <= _MAX_LINE else text[:_MAX_LINE - 3].rstrip() + "..."


def render_profiles(profiles: dict[str, SpeakerProfile], speakers: Collection[str] | None = None) -> str:
    """The "auxiliary memory" section of an answer packet: per speaker (display names, e.g.
    `speakers` from the retrieved units' participants), one short dated line per item; an unnamed
    relation is left out when a named one of the same word is shown. "(none)" when empty."""
    lines: list[str] = []
    for name in sorted(profiles):
        if speakers is not None and name not in speakers:
            continue
        p = profiles[name]
        lines.append(f"{name}:")
        for s in p.current_states:
            feel = ", ".join(s.emotions) or s.label
            lines.append(f"- state [{_day(s.date)}] {_short(s.text)} ({feel})")
        named = {r.relation for r in p.relationships if r.name}
        for r in p.relationships:
            if r.name or r.relation not in named:
                who = f"{r.relation} {r.name}".strip()
                lines.append(f"- relationship [{_day(r.date)}] {who} ({r.kind})")
        for f in p.stable_facts:
            lines.append(f"- fact [{_day(f.date)}] {_short(f.text)}")
        for n in p.support_notes:
            who = f"{n.helper or 'something'} -> {n.helped or 'someone'}"
            lines.append(f"- support [{_day(n.date)}] {who} ({n.kind.replace('_', ' ')}): {_short(n.text)}")
    return "\n".join(lines) or "(none)"


__all__ = ["CurrentState", "FACT_TYPES", "PROFILE_VERSION", "ProfileCaps", "RELATION_KINDS", "Relationship",
           "STATE_TYPES", "SUPPORT_KINDS", "Source", "SpeakerProfile", "StableFact", "SupportNote", "forget_units",
           "profiles_from_json", "profiles_to_json", "render_profiles", "update_profiles"]
