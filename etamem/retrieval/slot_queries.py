"""Direct questions about the speaker's attributes, widened to how such facts are said in passing.

"Where do I live?" shares no word with "Ugh, still unpacking boxes since the move to Porto last
month", and little meaning: the fact was said in passing. A first-person question that asks for
one of the attributes below (where the user lives, works, studies; their partner, pets, health,
surgery, children, car, sport, instrument) is searched with the words such facts are said with
appended ("... move moved flat apartment rent mortgage neighbourhood ..."): they add BM25 matches
and pull the query vector towards the attribute. Other questions (third person: "Where does
Caroline live?", or no attribute) are searched as asked. `Config.slot_queries` switches it.
"""
from __future__ import annotations

import re

__all__ = ["SLOT_WORDS", "expand_query", "slot_of"]

_FIRST = re.compile(r"\b(?:i|my|me|i'm|i've|am\s+i)\b", re.IGNORECASE)
# (slot, question pattern, words the fact is said with)
SLOT_WORDS: tuple[tuple[str, re.Pattern[str], str], ...] = tuple((name, re.compile(pattern, re.IGNORECASE), words) for
                                                                name, pattern, words in (
    ("residence", r"\bwhere\b.*\b(?:live|living|based|home)\b|\b(?:city|country|town|neighbou?rhood)\b.*\blive"
                  r"|\brent\b.*\bown\b|\bmy\s+(?:home|address|flat|apartment)\b",
     "home moved move flat apartment house rent mortgage neighbourhood city here"),
    ("job", r"\bwhere\b.*\bwork\b|\b(?:job|profession|occupation|employer|career)\b|\bfor\s+a\s+living\b"
            r"|\bcompany\b.*\bwork\b|\bwork\b.*\bcompany\b",
     "work job office colleagues company team boss clients shift career offsite"),
    ("school", r"\b(?:school|university|college|studying|study|degree)\b",
     "school university college classes semester exams finals campus lecture studying"),
    ("partner", r"\b(?:partner|wife|husband|girlfriend|boyfriend|married|spouse|fianc\w*)\b",
     "partner wife husband together anniversary married years relationship"),
    ("pet", r"\b(?:pets?|dog|cat|animal)\b", "pet dog cat vet walk"),
    ("surgery", r"\b(?:surgery|operation|operated)\b", "surgery operation hospital recovery stitches removal replacement"),
    ("health", r"\b(?:allerg\w*|condition|illness|disease|glasses|health)\b",
     "allergy allergic reaction intolerance avoid doctor diagnosis"),
    ("children", r"\b(?:kids?|children|child|son|daughter)\b", "son daughter kids school kindergarten birthday"),
    ("car", r"\b(?:car|drive|vehicle)\b", "car drive brakes garage sold bought"),
    ("sport", r"\b(?:sport|martial\s+art|play)\b.*\?|\bwhat\s+do\s+i\s+do\s+on\s+weekends\b",
     "match game training practice team belt run"),
    ("instrument", r"\binstrument\b", "practice practising recital band scales play"),
))


# a request for advice is not a question about an attribute ("What should I feed my dog?")
_ADVICE = re.compile(r"\b(?:recommend\w*|suggest\w*|should|could|can|would|ideas?|tips?|some|best|help|good|how\s+(?:to|do|can))\b",
                     re.IGNORECASE)


def slot_of(query: str) -> str | None:
    """The attribute a first-person direct question asks for, or None."""
    q = query.replace("\u2019", "'")
    if not _FIRST.search(q) or _ADVICE.search(q):
        return None
    return next((name for name, pattern, _ in SLOT_WORDS if pattern.search(q)), None)


def expand_query(query: str) -> str:
    """`query` with its attribute's words appended (`slot_of`), else `query` unchanged."""
    name = slot_of(query)
    if name is None:
        return query
    words = next(w for n, _, w in SLOT_WORDS if n == name)
    return f"{query} ({words})"
