"""What a deletion removes from a raw turn (DESIGN §11, "delete forgets").

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
from dataclasses import replace

from .extraction import split_sentences
from .types import Turn

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
