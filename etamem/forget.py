"""What a deletion removes from a raw turn (see docs/design.md, 'Invariants', delete forgets).

Deleting a unit must also take its text out of the turn it was drawn from, or the raw-turn
index would keep answering with it. A unit is matched to the sentences of its source turn
(text and photo caption) that carry it: the sentence holds at least half of the unit's
content words or the unit at least half of the sentence's (rule units are sentences, maybe
with "I" rewritten to the speaker's name; LLM units paraphrase). Those sentences are cut.
When no sentence matches, or nothing is left, the whole turn goes (the caller then deletes
every unit drawn from it): a deletion errs on the side of forgetting.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from etamem.extraction.extractors import split_sentences
from etamem.models import cache_scope
from etamem.records import AMU, Turn, UnknownIdError
from etamem.retrieval import turn_text

CAPTION_KEY = "blip_caption"
_WORD = re.compile(r"\w+", re.UNICODE)
_STOP = frozenset("the a an and or but of to in on at for with is are was were be been am i you he she it we they "
                  "my your his her its our their me him us them this that these those so do did does have has had "
                  "not no yes just very really".split())


def content_words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP}


def _carries(sentence: str, unit: str) -> bool:
    if " ".join(_WORD.findall(unit.lower())) in " ".join(_WORD.findall(sentence.lower())):
        return True
    s, u = content_words(sentence), content_words(unit)
    if not s or not u:
        return False
    shared = len(s & u)
    return shared >= 0.5 * len(u) or shared >= 0.5 * len(s)


def _cut(text: str, units: list[str]) -> tuple[str, list[str]]:
    """(text without the sentences carrying any unit, the sentences cut)."""
    kept, cut = [], []
    for sentence in split_sentences(text):
        (cut if any(_carries(sentence, u) for u in units) else kept).append(sentence)
    return " ".join(kept), cut


def redact(turn: Turn, unit_texts: list[str]) -> tuple[Turn | None, list[str]]:
    """The turn without the sentences that carry `unit_texts`, and the sentences cut.
    (None, [whole text]) when nothing matched or nothing is left: forget the whole turn."""
    text, cut = _cut(turn.text, unit_texts)
    extra = dict(turn.extra)
    caption = extra.get(CAPTION_KEY)
    if isinstance(caption, str) and caption:
        new_caption, cut_caption = _cut(caption, unit_texts)
        cut += cut_caption
        if new_caption:
            extra[CAPTION_KEY] = new_caption
        else:
            extra.pop(CAPTION_KEY)
    whole = [turn.text] + ([caption] if isinstance(caption, str) and caption else [])
    if not cut or not text.strip():
        return None, whole
    return replace(turn, text=text, extra=extra), cut


@dataclass
class ForgetPlan:
    """What a deletion removes: units (those asked for and those of dropped turns), turns dropped
    or rewritten (redacted, same ids), the texts forgotten (for caches that hold text) and the
    vector-cache keys of every text that goes."""

    units: list[AMU]
    dropped: list[str] = field(default_factory=list)
    rewritten: list[Turn] = field(default_factory=list)
    quoted: list[str] = field(default_factory=list)
    cache_keys: list[str] = field(default_factory=list)


def forget_targets(store, space: str, amu_id: str | None, turn_id: str | None) -> tuple[list[AMU], list[Turn]]:
    """(units, source turns) a delete of `amu_id` (the unit and its source turns) or of `turn_id`
    (the turn; its units are found by the plan) names; UnknownIdError when it is not stored."""
    if amu_id is not None:
        units = store.amus(space, status=None, amu_ids=[str(amu_id)])
        if not units:
            raise UnknownIdError(f"no AMU {amu_id!r} in space {space!r}")
        return units, store.turns(space, turn_ids=sorted(set(units[0].source_turn_ids)))
    sources = store.turns(space, turn_ids=[str(turn_id)])
    if not sources:
        raise UnknownIdError(f"no turn {turn_id!r} in space {space!r}")
    return [], sources


def plan_forget(store, space: str, units: list[AMU], sources: list[Turn], *, whole_turns: bool,
                keep_mentioned: bool = False) -> ForgetPlan:
    """Plan the deletion of `units` (their source turns redacted) or, with `whole_turns`, of the
    `sources` turns and every unit drawn from them; `keep_mentioned` (AMUs, whose source turns
    are mentions of one fact, `etamem.facts.mentions`): a unit that a turn kept also says stays."""
    plan = ForgetPlan(list(units), quoted=[u.text for u in units])
    for turn in sources:
        new, cut = (None, [turn.text]) if whole_turns else redact(turn, plan.quoted)
        plan.quoted += cut
        if new is None:
            plan.dropped.append(turn.turn_id)
        else:
            plan.rewritten.append(new)
    if plan.dropped:  # units drawn from a turn that goes go with it
        have = {u.amu_id for u in plan.units}
        drop = set(plan.dropped)
        plan.units += [u for u in store.amus_of_turns(space, plan.dropped) if u.amu_id not in have
                       and not (keep_mentioned and set(u.source_turn_ids) - drop)]
        plan.quoted += [u.text for u in plan.units if u.text not in plan.quoted]
    plan.cache_keys = cache_keys(plan.units, sources)
    return plan


def cache_keys(units: list[AMU], turns: list[Turn]) -> list[str]:
    """The vector-cache keys of the units' texts and the turns' searchable texts."""
    return [cache_scope.key(u.text) for u in units] + [cache_scope.key(turn_text(t)) for t in turns]
