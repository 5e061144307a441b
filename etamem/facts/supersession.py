"""Facts that change, at write time: which older unit a new one replaces (see docs/design.md,
'Facts that change').

When a speaker restates something they said before with another value ("I moved to Milwaukee"
after "I live in Chicago"), the new unit gets a `supersedes` link to the older one. The older
unit stays stored, indexed and retrievable; it is "superseded" for as long as the link and its
newer end exist (deleting the newer unit removes the link: the older is current again).

Offline rules (`supersedes`), for a new unit and an older unit of the same speaker, both short
statements (no question, no request, no plan), cosine at least `floor`:

1. same subject: they share a topic word (stance, negation, change and date words aside) or
   name the same exclusive attribute (CATEGORIES: where one lives, who employs one, one's diet,
   income, school, relationship), and they are about the same holder ("my brother lives in
   Tokyo" is not about where I live);
2. and a change: the newer says so ("moved", "switched", "stopped", "no longer", "not ...
   anymore", "now", "new manager", "pushed back to", ...), or takes the opposite stance on the
   shared topic ("loves horror movies" -> "can't stand horror movies"), or restates the same
   attribute frame with another value ("lives in Denver" -> "lives in Austin"; the frame must
   carry its own word: "is vegan" -> "is gluten-free" is not one attribute), or gives another
   value of an attribute with a closed set of values (REGIMES: a diet, how one gets to work).

`etamem.facts.llm_supersession.LLMSupersession` asks the configured LLM instead (prompt
`prompts/supersession.txt`), with the rules as fallback for an unusable reply. `find_supersessions`
proposes the candidates (nearest older units of the same speaker in the space's index) and
classifies them.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from etamem.models.llm import cache_refs

SUPERSEDES = "supersedes"
REPLACING = ("supersedes", "contradicts")  # link relations whose older end is no longer current
MAX_FACT_WORDS = 40  # longer units (essays, code, instructions) are not facts that change

NEGATION = re.compile(r"\b(?:not|no|never|nobody|nothing|neither|nor|none|cannot|\w+n't|dont|doesnt|didnt|isnt"
                      r"|wasnt|arent|werent|cant|wont|hasnt|havent|hadnt|couldnt|wouldnt|shouldnt)\b", re.IGNORECASE)
LIKE = re.compile(r"\b(?:like[sd]?|lov(?:e|es|ed)|enjoy(?:s|ed)?|prefer(?:s|red)?|fond|favou?rite)\b", re.IGNORECASE)
DISLIKE = re.compile(r"\b(?:hat(?:e|es|ed)|dislik(?:e|es|ed)|detest(?:s|ed)?|can't stand|cannot stand|sick of"
                     r"|tired of|over it)\b", re.IGNORECASE)
# words that say a value was replaced ("moved", "stopped", "no longer") ...
STRONG_CHANGE = re.compile(
    r"\b(?:anymore|any more|no longer|no more|stopped|quit|quitting|gave up|given up|switched|switching|changed"
    r"|changing|moved|relocated|rescheduled|postponed|pushed (?:back|out)|brought forward|bumped|broke up|split up"
    r"|divorced|got (?:married|engaged|divorced|promoted|fired|laid off|hired)|(?<!getting )(?<!get )(?<!got )"
    r"(?<!be )(?<!is )(?<!are )used to|cancell?ed|sold|replaced"
    r"|upgraded|downgraded|promoted|transferred|instead|passed away|down to|went up"
    r"|went down(?! (?:even |really |so |very )?(?:well|better|great|a treat|a storm))|raised|increased"  # not "went down well"
    r"|decreased|lowered|cut (?:down|back|out)|dropped out|turns out|turned out|(?:is|are) off|took (?:me|the \w+|him|her|them) off"
    r"|(?:haven't|hasn't|have not|has not) \w+ .{0,20}in (?:weeks|months|ages|years)|got rid of|from now on"
    r"|grew|shrank|rose|fell to|up to|changed (?:my|the \w+'s|his|her|their|our) minds?)\b", re.IGNORECASE)
# ... and words that only suggest it ("now", "new", "started"): they count for an attribute that holds
# one value at a time (_SINGLE_STEMS, CATEGORIES)
WEAK_CHANGE = re.compile(
    r"\b(?:now|nowadays|these days|currently|new|became|become|started|joined|took up|picked up|finally|actually"
    r"|update|updated|adopted|proposed|raise|after the (?:raise|move|promotion|surgery|operation|breakup"
    r"|wedding))\b", re.IGNORECASE)
_PLAN = re.compile(r"\b(?:will|going to(?! (?:the|a|an|my|his|her|their|our|your|work|school|bed|church|class"
                   r"|college|gym|office)\b)|gonna|plan(?:s|ning)? to|about to|thinking of|might|(?-i:may)|hope to|want to"
                   r"|(?:am|is|are|'m|'re) (?!now\b)\w+ing (?:to|in|on|for|next|this)\b)", re.IGNORECASE)
_REQUEST = re.compile(r"^(?:please|can you|could you|would you|write|give|explain|make|create|tell|help|list"
                      r"|show|generate|translate|rewrite|summari[sz]e|describe|suggest|recommend|provide|draft)\b",
                      re.IGNORECASE)
_CHANGE_STEMS = {"now", "currently", "anymore", "longer", "stopp", "stop", "quit", "gave", "give", "switch",
                 "chang", "mov", "relocat", "reschedul", "postpon", "push", "brought", "bump", "instead", "becam",
                 "becom", "left", "broke", "split", "got", "used", "cancel", "sold", "replac", "upgrad", "downgrad",
                 "promot", "transferr", "transfer", "join", "start", "took", "pick", "dropp", "drop", "actual",
                 "went", "rais", "increas", "decreas", "cut", "lower", "mor", "nowaday", "honest"}
_STANCE_STEMS = {"lov", "lik", "hat", "dislik", "enjoy", "prefer", "fond", "detest", "can't", "cannot", "stand",
                 "sick", "tir", "favorit", "favourit"}
# exclusive attributes worded differently from one value to the next
CATEGORIES = {
    "place": re.compile(r"\b(?:liv(?:e|es|ed|ing) (?:in|with|on|near)|moved (?:to|into|back to|in with)|relocated"
                        r"|based in|home is in|(?:apartment|flat|house|place|lease) (?:is )?(?:in|on)|neighbou?rhood"
                        r"|(?:'m|am|is|are) (?-i:in [A-Z]\w+))\b",
                        re.IGNORECASE),
    "employer": re.compile(r"\b(?:work(?:s|ed|ing)? (?:at|for)|job (?:at|as|with)|employer|hired (?:at|by)"
                           r"|quit (?:my|the|his|her) job|new job|laid off|employed (?:at|by)|(?:engineer|developer"
                           r"|designer|nurse|teacher|doctor|analyst|consultant|intern|lawyer|accountant|chef"
                           r"|scientist|researcher|professor) (?:at|for))\b", re.IGNORECASE),
    "diet": re.compile(r"\b(?:vegan|vegetarian|pescatarian|keto|paleo|omnivore|flexitarian|carnivore|diet"
                       r"|eat(?:s|ing)? (?:\w+ ){0,2}(?:meat|chicken|beef|pork|fish|everything|anything))\b",
                       re.IGNORECASE),
    "income": re.compile(r"\b(?:salary|earn(?:s|ing)?|wage|income)\b|\b(?:makes?|paid) \$?\d", re.IGNORECASE),
    "school": re.compile(r"\b(?:stud(?:y|ies|ying) (?:\w+ ){0,3}at|attend(?:s|ing)?|enrolled (?:at|in)|transferred to"
                         r"|university|college|grad school)\b", re.IGNORECASE),
    "relationship": re.compile(r"\b(?:boyfriend|girlfriend|fianc[ée]e?|married|engaged|dating|broke up|split up"
                               r"|divorced|single|seeing someone)\b", re.IGNORECASE),
}
# attributes with a closed set of values, one at a time: a different value replaces the old one
# even when no change word says so ("eats everything" -> "is doing keto", "bikes to work" -> "takes the train")
REGIMES = {
    "diet": re.compile(r"\b(vegan|vegetarian|pescatarian|keto|paleo|omnivore|flexitarian|carnivore|raw food"
                       r"|eat(?:s|ing)? (?:pretty much |just about )?(?:everything|anything)|no (?:dietary )?restrictions)\b",
                       re.IGNORECASE),
    "commute": re.compile(r"\b(bike|bikes|biking|cycle|cycles|cycling|drive|drives|driving|walk|walks|walking|train"
                          r"|bus|subway|metro|tube|tram|carpool|scooter)\b(?=[^.]{0,30}\b(?:to|from) (?:work|school"
                          r"|the office|campus)\b)", re.IGNORECASE),
}


def regime_change(new: str, old: str) -> bool:
    """Both texts give a value of the same closed attribute (REGIMES) and the values differ."""
    for pattern in REGIMES.values():
        a = {_regime_value(m) for m in pattern.findall(old)}
        b = {_regime_value(m) for m in pattern.findall(new)}
        if a and b and not a & b:
            return True
    return False


def _regime_value(match: str) -> str:
    m = match.lower()
    if m.startswith(("eat", "no ")):
        return "everything"
    return {"bikes": "bike", "biking": "bike", "cycle": "bike", "cycles": "bike", "cycling": "bike", "drives": "drive",
            "driving": "drive", "walks": "walk", "walking": "walk"}.get(m, m)


# whose attribute: "my brother lives in Tokyo" is the brother's (a partner's news is the relationship's)
_HOLDER = re.compile(r"^\W*(?:\w+ly,?\s+|so\s+|and\s+|also\s+)?(?:my|the \w+'s|\w+'s|his|her|their|our)\s+((?:mother|mom"
                     r"|mum|father|dad|sister|brother|son|daughter|friend|cousin|aunt|uncle|grandma|grandmother"
                     r"|grandpa|grandfather|kid|kids|child|children|parents|roommate|neighbou?r|colleague|coworker"
                     r"|boss)(?:-in-law)?)(?![\w-])", re.IGNORECASE)  # "sister-in-law" is not "sister"
_WORD = re.compile(r"[a-z0-9$]+(?:[.,][0-9]+)*(?:'[a-z]+)?")
_SUBJECT = {"the", "user", "user's", "'s", "is", "are", "was", "a", "an", "my", "i", "i'm", "am", "we", "our",
            "we're", "their", "his", "her", "now", "currently", "still", "also", "actually", "really", "just",
            "so", "and", "others"}
_VALUE_SLOT = {"in", "at", "as", "for", "to", "is", "are", "was", "of", "on", "with", "from", "by", "a", "an", "the"}
_MAX_VALUE = 6
# frame words of attributes that hold one value at a time ("lives in", "drives a", "budget is")
_SINGLE = {"live", "lives", "living", "based", "works", "work", "working", "drive", "drives", "driving", "name",
           "named", "called", "favorite", "favourite", "budget", "rent", "salary", "price", "cost", "costs", "age",
           "weigh", "weighs", "address", "manager", "boss", "partner", "girlfriend", "boyfriend", "wife", "husband",
           "deadline", "date", "scheduled", "due", "commute", "mortgage", "goal", "target", "team", "job", "role",
           "title", "school", "major", "phone", "car", "diet", "schedule", "shift", "shifts"}
_PAREN = re.compile(r"\([^)]*\)")  # the resolved dates the extractor adds: "last month (February 2024)"
_DATE = re.compile(r"\b(?:january|february|march|april|may|june|july|august|september|october|november|december"
                   r"|monday|tuesday|wednesday|thursday|friday|saturday|sunday|\d{1,2}(?:st|nd|rd|th)"
                   r"|\d{1,2}(?::\d\d)? ?[ap]m)\b", re.IGNORECASE)
_SINGLE_STEMS = frozenset({"liv", "driv", "nam", "favorit", "favourit", "budget", "rent", "salary", "pric", "cost",
                           "ag", "weigh", "address", "manager", "boss", "partner", "girlfriend", "boyfriend", "wif",
                           "husband", "deadlin", "schedul", "commut", "mortgag", "team", "job", "rol", "titl",
                           "school", "major", "phon", "car", "diet", "shift", "apartment", "hous", "flat", "laptop",
                           "employer", "company", "appointment", "wed", "launch", "flight", "landlord", "roommat",
                           "fianc", "city", "neighborhood", "neighbourhood", "university", "college", "therapist"})
_AMOUNT = re.compile(r"^(?:\$?\d|january|february|march|april|may|june|july|august|september|october|november"
                     r"|december|monday|tuesday|wednesday|thursday|friday|saturday|sunday)")


@functools.lru_cache(maxsize=8192)
def is_fact(text: str) -> bool:
    """A short statement that can change: not a question, a request or a plan, at most
    MAX_FACT_WORDS words. (Cached: a stored unit is tested again with every new unit near it.)"""
    t = text.strip()
    return (bool(t) and not t.rstrip(" \t\n\"')]").endswith("?") and len(t.split()) <= MAX_FACT_WORDS
            and not _REQUEST.match(t) and not _PLAN.search(t.replace("\u2019", "'")))


_IDIOMS = re.compile(r"\b(?:can't|cannot|can not|couldn't) (?:wait|believe|stop|resist|help|thank)|don't worry"
                     r"|no problem|no worries|not only|won't let \w+ down|no doubt|never mind", re.IGNORECASE)


def negated(text: str) -> bool:
    """An odd number of negations ("doesn't", "no", "never", ...), idioms aside ("can't wait")."""
    return len(NEGATION.findall(_IDIOMS.sub(" ", text.replace("\u2019", "'")))) % 2 == 1


def attitude(text: str) -> int:
    """+1 likes, -1 dislikes, 0 neither; a negation flips it ("doesn't like" = -1)."""
    t = text.replace("\u2019", "'")
    sign = -1 if DISLIKE.search(t) else 1 if LIKE.search(t) else 0
    return -sign if sign and negated(t) else sign


_WEAK = {"off", "hour", "minut", "back", "again", "way", "lot", "rough", "sure", "pretty", "much", "well", "bad",
         "someth", "everyth", "anyth", "nothing", "peopl", "stuff", "part", "today"}
_CALENDAR = re.compile(r"\([^)]*\)|\b(?:january|february|march|april|may|june|july|august|september|october"
                       r"|november|december|monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b|\d+\w*",
                       re.IGNORECASE)


@functools.lru_cache(maxsize=8192)
def _subject_words(text: str, speaker: str) -> frozenset[str]:
    from etamem.extraction.stems import topic_stems

    t = _CALENDAR.sub(" ", NEGATION.sub(" ", text.replace("\u2019", "'")))
    names = {w for w in speaker.lower().split() if w} | {"user", "assistant", "others"}
    return frozenset(topic_stems(t, names) - _CHANGE_STEMS - _STANCE_STEMS - _WEAK)


def subject_words(text: str, speaker: str = "") -> set[str]:
    """Topic stems of `text` without the speaker, stance, negation and change words, dates
    (resolved dates in parentheses included), numbers and weak words ("off", "hour")."""
    return set(_subject_words(text, speaker))


@functools.lru_cache(maxsize=8192)
def _categories(text: str) -> frozenset[str]:
    return frozenset(name for name, pattern in CATEGORIES.items() if pattern.search(text))


def categories(text: str) -> set[str]:
    """The exclusive attributes (CATEGORIES) the text speaks of."""
    return set(_categories(text))


@functools.lru_cache(maxsize=8192)
def holder(text: str) -> str | None:
    """Whose attribute the text states when it is a relative's or a friend's ("brother"), else None."""
    m = _HOLDER.search(text)
    return m.group(1).lower() if m else None


def same_subject(new: str, old: str, speaker: str = "") -> bool:
    """Whether two statements are about the same thing of the same holder (rule 1 above)."""
    if holder(new) != holder(old):
        return False
    return bool(subject_words(new, speaker) & subject_words(old, speaker)) or bool(categories(new) & categories(old))


def _tokens(text: str) -> list[str]:
    return _WORD.findall(text.lower().replace("\u2019", "'").replace("'s ", " 's "))


def _frame_change(a: list[str], b: list[str], *, suffix: bool = False) -> bool:
    """Token lists `a` (older) and `b` (newer) share a frame up to a value (`suffix`: the frame
    is their end, the value their start) and the attribute holds one value at a time."""
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    if k < 2 or k == len(a) or k == len(b):
        return False
    own = [w for w in a[:k] if w not in _SUBJECT and w not in _VALUE_SLOT]
    tail_a, tail_b = [w for w in a[k:] if w not in _SUBJECT], [w for w in b[k:] if w not in _SUBJECT]
    if not (own and tail_a and tail_b) or max(len(tail_a), len(tail_b)) > _MAX_VALUE + 4 or tail_a[:2] == tail_b[:2]:
        return False
    if suffix:  # "python is the user's favourite language" / "rust is ...": the frame starts at "is"
        return a[k - 1] in ("is", "are") and bool(set(own) & _SINGLE) and max(len(tail_a), len(tail_b)) <= 3
    amounts_a, amounts_b = [w for w in tail_a[:4] if _AMOUNT.match(w)], [w for w in tail_b[:4] if _AMOUNT.match(w)]
    if amounts_a and amounts_b and amounts_a != amounts_b:
        return True  # a new amount or date: "saving $300 a month" -> "$500", "is on June 14" -> "September 20"
    if a[k - 1] not in _VALUE_SLOT or a[k - 1] in ("was", "were"):
        return False  # (a past state is history, not the current value)
    # an attribute word of its own ("lives in", "drives a") or "<the user's> <noun> is" ("laptop is")
    possessive = a[k - 1] in ("is", "are") and len(own) <= 3 and "user" in a[:k] and a[:k].index("user") < k - 2
    return bool(set(own) & _SINGLE) or possessive


def same_frame_new_value(old: str, new: str) -> bool:
    """The texts share an attribute frame up to a value slot ("the user lives in", "the user's
    budget is", "the user drives a") whose own words are more than the subject, and then say
    different (short) things: "lives in Denver" -> "lives in Austin"; or the frame ends them
    ("Python is the user's favourite language" -> "Rust is ..."). The attribute must hold one
    value at a time: a frame word of `_SINGLE`, "<the user's> <noun> is", or amounts and dates
    on both sides ("is allergic to peanuts" -> "... to penicillin" adds an allergy)."""
    for x in dict.fromkeys([old, *_CLAUSE.split(old)[:2]]):
        for y in dict.fromkeys([new, *_CLAUSE.split(new)[:2]]):
            a, b = _tokens(x), _tokens(y)
            if _frame_change(a, b) or _frame_change(a[::-1], b[::-1], suffix=True):
                return True
    return False


_CLAUSE = re.compile(r"[,;:]\s+|\s+(?:but|and then)\s+")


@functools.lru_cache(maxsize=8192)
def mentions(text: str, speaker: str) -> bool:
    """Whether `text` names its speaker: their name, "the user" for the role, or first person."""
    t = text.lower().replace("\u2019", "'")
    names = [w for w in {speaker.lower().strip(), "user" if speaker.lower() in ("user", "") else ""} if w]
    return any(re.search(rf"\b{re.escape(n)}\b", t) for n in names) or bool(_FIRST_PERSON.search(t))


_FIRST_PERSON = re.compile(r"\b(?:i|i'm|i've|my|me|we|our|we're)\b")
_WINDOW = 4  # tokens between a change word and the subject word it changes
_STRONG_SIMILARITY = 0.6  # a replacement word between statements this close needs no shared word
_REPLACED = re.compile(r"\b(?:switched|switching|replaced|got rid of|sold|traded|swapped|upgraded|downgraded"
                       r"|moved|relocated|transferred)\b", re.IGNORECASE)  # an object or a place replaced
CATEGORY_FLOOR = 0.25  # "relocated to Sacramento" after "renting a house in Portland": cosine 0.29


@functools.lru_cache(maxsize=8192)
def _stemmed_words(t: str) -> tuple[tuple[tuple[int, int, str], ...], tuple[int, ...]]:
    """The words of `t` as (start, end, stem) and the clause of each (cached: a new unit is
    compared with each of its candidates)."""
    from etamem.extraction.stems import stem

    words = tuple((m.start(), m.end(), stem(m.group(0))) for m in re.finditer(r"[A-Za-z][A-Za-z'-]*", t))
    bounds = [0] + [m.end() for m in re.finditer(r"[,;:.!?]", t)]
    return words, tuple(max(i for i, b in enumerate(bounds) if b <= a) for a, _, _ in words)


def change_near_subject(new: str, shared: set[str], pattern: re.Pattern) -> bool:
    """A change word (`pattern`) of `new` within _WINDOW tokens of one of the `shared` subject
    words ("stopped climbing", "new manager", "budget is now", "rescheduled the dentist")."""
    t = new.replace("\u2019", "'")
    words, clause = _stemmed_words(t)
    at = [i for i, (a, _, w) in enumerate(words) if w in shared or w.removesuffix("'s") in shared]
    for m in pattern.finditer(t):
        first = next((i for i, (a, b, _) in enumerate(words) if b > m.start()), len(words))
        last = next((i for i, (a, b, _) in enumerate(words) if b >= m.end()), first)
        for i in at:  # near, or, in a short statement, in the change's clause ("Gym days are Tuesday and Thursday now")
            if first - _WINDOW <= i <= last + _WINDOW or (len(words) <= 12 and first < len(words)
                                                          and clause[i] == clause[first]):
                return True
    return False


def supersedes(new: str, old: str, similarity: float, *, speaker: str = "", floor: float = 0.4) -> float | None:
    """The confidence that statement `new` replaces the older statement `old` of the same
    speaker (rules in the module docstring), or None."""
    if similarity < min(floor, CATEGORY_FLOOR) or new.strip().lower() == old.strip().lower() \
            or not (is_fact(new) and is_fact(old)):
        return None
    if similarity < floor:  # less alike: only a replacement word within one exclusive attribute
        conf = round(0.5 + 0.5 * similarity, 3)
        same_attribute = holder(new) == holder(old) and bool(categories(new) & categories(old))
        return conf if same_attribute and mentions(old, speaker) and STRONG_CHANGE.search(new) else None
    words_n, words_o = subject_words(new, speaker), subject_words(old, speaker)
    strong = bool(STRONG_CHANGE.search(new.replace("\u2019", "'")))
    if not mentions(old, speaker) and not (strong and len(words_n & words_o) >= 2):
        return None  # the older statement must be the speaker's own fact (or the very same thing)
    if holder(new) == holder(old) and similarity >= _STRONG_SIMILARITY and _REPLACED.search(new) \
            and max(len(new.split()), len(old.split())) <= 20:
        return round(0.5 + 0.5 * min(1.0, similarity), 3)  # "switched to a Pixel" after "uses an iPhone"
    if not same_subject(new, old, speaker):
        return None
    conf = round(0.5 + 0.5 * min(1.0, max(0.0, similarity)), 3)
    shared = words_n & words_o
    att_n, att_o = attitude(new), attitude(old)
    # a stance turned over, or a state denied, about the same thing: short statements, the
    # negation right before the shared subject ("doesn't eat meat", "no longer a vegetarian")
    close = shared and similarity >= 0.55 and len(shared) >= 0.6 * min(len(words_n), len(words_o)) \
        and max(len(new.split()), len(old.split())) <= 16
    if close and ((att_n and att_o and att_n != att_o) or (
            att_n == att_o == 0 and negated(new) != negated(old)
            and max(len(new.split()), len(old.split())) <= 12
            and change_near_subject(new if negated(new) else old, shared, NEGATION))):
        return conf
    same_attribute = bool(categories(new) & categories(old))
    if change_near_subject(new, shared, STRONG_CHANGE) or (same_attribute and STRONG_CHANGE.search(new)):
        return conf  # moved, switched, stopped, no longer ... said of the shared subject
    single = {w for w in shared if w in _SINGLE_STEMS}
    dated = bool(_DATE.search(_PAREN.sub(" ", new))) and bool(_DATE.search(_PAREN.sub(" ", old)))
    if change_near_subject(new, shared if dated else single, WEAK_CHANGE) \
            or (same_attribute and WEAK_CHANGE.search(new)):
        return conf  # "new manager", "budget is now", "vegan now": an attribute of one value; a date
    if _PAST_EVENT.search(new):
        return None  # a dated event ("ran 8 km yesterday") is not a new value of a state
    if same_frame_new_value(old, new) or regime_change(new, old) or quantity_change(new, old):
        return conf
    return None


_QUANTITY = re.compile(r"(?:\$|\b)(\d[\d,.]*)\s*(k\b|%|[a-z]+)?", re.IGNORECASE)
_PAST_EVENT = re.compile(r"\b(?:yesterday|last (?:week|night|weekend|month|year)|ago|\w+ed (?:today|yesterday))\b",
                         re.IGNORECASE)


def quantity_change(new: str, old: str) -> bool:
    """The same quantity with another number: a number followed by the same unit word in both
    ("20 miles a week" -> "35 miles a week", "6 people" -> "11 people", "$300" -> "$500"), the
    numbers different (`supersedes` leaves dated past events out: "ran 10 miles yesterday")."""

    def amounts(text: str) -> dict[str, set[str]]:
        out: dict[str, set[str]] = {}
        for m in _QUANTITY.finditer(_PAREN.sub(" ", text)):
            unit = (m.group(2) or ("$" if m.group(0).startswith("$") else "")).lower()
            if unit and unit not in ("am", "pm", "st", "nd", "rd", "th", "and", "or", "to", "of", "a", "the"):
                out.setdefault(unit.rstrip("s") if len(unit) > 3 else unit, set()).add(m.group(1).replace(",", ""))
        return out

    a, b = amounts(old), amounts(new)
    return any(unit in a and not values & a[unit] for unit, values in b.items())


@dataclass(frozen=True)
class Candidate:
    """An older unit proposed for supersession, with its cosine to the new unit."""

    unit_id: str
    text: str
    speaker: str
    timestamp: datetime
    similarity: float
    refs: tuple[str, ...] = ()  # LLM cache tags of its source turns ("turn:<space>/<turn id>")
    vector: np.ndarray | None = field(default=None, compare=False, repr=False)  # its text vector, when known


class SupersessionClassifier(Protocol):
    """`classify(new_text, speaker, candidates) -> [(older unit id, confidence)]`."""

    def classify(self, new_text: str, speaker: str, candidates: Sequence[Candidate]) -> list[tuple[str, float]]: ...


class RuleSupersession:
    """`supersedes` over each candidate."""

    def __init__(self, floor: float = 0.4) -> None:
        self.floor = floor

    def classify(self, new_text: str, speaker: str, candidates: Sequence[Candidate]) -> list[tuple[str, float]]:
        out = []
        for c in candidates:
            conf = supersedes(new_text, c.text, c.similarity, speaker=speaker, floor=self.floor)
            if conf is not None:
                out.append((c.unit_id, conf))
        return out


class _BatchCandidates:
    """The batch's earlier units that can be among unit i's `top` candidates: same speaker, said
    no later, cosine >= `lowest`, and among the `top` most similar of those (ties and the ids
    also found in the index kept), each with its cosine as `float(vecs[i] @ vecs[j])`. The cosines
    come from one matrix product per block of rows, so a batch of n units costs n^2 / 2 products
    in BLAS and Python work per candidate kept, not per pair (a 100,000-character turn: ~1,500
    units; the pairwise Python loop took 8.8 s of its add's 11.2 s under cProfile). The margin `_EPS` absorbs the rounding
    difference between the product and the exact cosine, so the kept set holds every unit the
    pairwise pass would have ranked in the top."""

    BLOCK = 256
    _EPS = 1e-4

    def __init__(self, units: Sequence, vecs: np.ndarray, lowest: float, top: int) -> None:
        self.units, self.vecs, self.lowest, self.top = units, vecs, lowest, top
        codes: dict[Any, int] = {}
        self.speaker = np.array([codes.setdefault(u.speaker, len(codes)) for u in units], np.int64)
        order = {t: r for r, t in enumerate(sorted({u.timestamp for u in units}))}
        self.rank = np.array([order[u.timestamp] for u in units], np.int64)
        self.position = {u.amu_id: j for j, u in enumerate(units)}
        self._block = (-1, np.zeros((0, 0), np.float32))

    def _sims(self, i: int) -> np.ndarray:
        start, block = self._block
        if not start <= i < start + len(block):
            start = i - i % self.BLOCK
            end = min(len(self.units), start + self.BLOCK)
            block = self.vecs[start:end] @ self.vecs[:end].T
            self._block = (start, block)
        return block[i - start, :i]

    def __call__(self, i: int, near_ids: set[str]) -> list[tuple[Any, float]]:
        if i == 0:
            return []
        sims = self._sims(i)
        ok = (self.speaker[:i] == self.speaker[i]) & (self.rank[:i] <= self.rank[i]) & (sims >= self.lowest - self._EPS)
        idx = np.flatnonzero(ok)
        if len(idx) > self.top:
            kth = np.partition(sims[idx], len(idx) - self.top)[len(idx) - self.top]
            keep = set(idx[sims[idx] >= kth - self._EPS].tolist())
            # an id the index also gave: the batch's cosine replaces the index's, as before
            keep.update(j for j in (self.position.get(u) for u in near_ids) if j is not None and j < i and ok[j])
            idx = sorted(keep)
        vi = self.vecs[i]
        return [(self.units[j], float(vi @ self.vecs[j])) for j in idx]


def find_supersessions(units: Sequence, vectors: np.ndarray, near: Sequence[Sequence[tuple[Any, float]]],
                       classifier: SupersessionClassifier, *, top: int = 8, floor: float = 0.4,
                       near_vectors: dict[str, np.ndarray] | None = None,
                       distinct: Callable[[str, str], bool] | None = None) -> list[tuple[str, str, str, float]]:
    """`supersedes` links (newer id, older id, "supersedes", confidence) of new `units` (AMUs in
    time order, text vectors (n, d_t) float32, unit norm) against `near[i]`, the stored units
    nearest unit i as [(AMU, cosine)], and the batch's earlier units. Candidates: units of the
    same speaker, said no later than the new one, cosine >= `floor` (or the classifier's lower
    `min_similarity`), the `top` most similar. A classifier with `uses_vectors` (the attribute
    slots) gets the new unit's vector and each candidate's (`near_vectors`: stored unit id ->
    vector; the batch's own are known). `distinct(new text, candidate text)`: True for two facts
    that only look alike, never offered (the engine passes `etamem.facts.lookalikes.distinct_facts`)."""
    links: list[tuple[str, str, str, float]] = []
    vecs = np.asarray(vectors, np.float32)
    with_vectors = bool(getattr(classifier, "uses_vectors", False))
    lowest = min(floor, CATEGORY_FLOOR, getattr(classifier, "min_similarity", 1.0))
    batch = {u.amu_id: vecs[j] for j, u in enumerate(units)} if with_vectors else {}
    stored = near_vectors or {}
    earlier_of = _BatchCandidates(units, vecs, lowest, top)
    for i, unit in enumerate(units):
        if not is_fact(unit.text):
            continue
        pool: dict[str, Candidate] = {}
        earlier = earlier_of(i, {other.amu_id for other, _ in near[i]})
        for other, cos in [*near[i], *earlier]:
            if other.speaker == unit.speaker and other.timestamp <= unit.timestamp and cos >= lowest \
                    and other.amu_id != unit.amu_id:
                vec = (stored.get(other.amu_id, batch.get(other.amu_id))) if with_vectors else None
                pool[other.amu_id] = Candidate(other.amu_id, other.text, other.speaker, other.timestamp, float(cos),
                                               tuple(f"turn:{other.space}/{t}" for t in other.source_turn_ids), vec)
        best = sorted(pool.values(), key=lambda c: (-c.similarity, c.unit_id))[:top]
        if distinct is not None:
            best = [c for c in best if not distinct(unit.text, c.text)]
        if not best:
            continue
        with cache_refs(*(f"turn:{unit.space}/{t}" for t in unit.source_turn_ids)):
            found = (classifier.classify(unit.text, unit.speaker, best, vector=vecs[i], at=unit.timestamp) if with_vectors
                     else classifier.classify(unit.text, unit.speaker, best))
        for target, conf in found:
            links.append((unit.amu_id, target, SUPERSEDES, float(conf)))
    return links


__all__ = ["CATEGORIES", "Candidate", "DISLIKE", "LIKE", "MAX_FACT_WORDS", "NEGATION",
           "CATEGORY_FLOOR", "REGIMES", "REPLACING", "RuleSupersession", "STRONG_CHANGE", "WEAK_CHANGE", "change_near_subject", "mentions", "quantity_change", "SUPERSEDES", "SupersessionClassifier", "attitude", "categories",
           "find_supersessions", "holder", "is_fact", "negated", "regime_change", "same_frame_new_value",
           "same_subject", "subject_words", "supersedes"]
