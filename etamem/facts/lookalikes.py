"""Look-alike facts: two statements that read alike but are about different events, objects,
times or people, so neither is a new version of the other (see docs/design.md, 'Facts that
change').

"I ran 5 km on Monday" / "I ran 10 km on Friday" are two runs; "a 300 euro phone" / "a 30 euro
phone case" two things; "Rome with my parents in 2019" / "Rome with my girlfriend in 2022" two
trips; "work from home on Mondays" / "the office on Thursdays" two days of one week. Without a
word that says something changed ("moved", "now", "switched", "pushed to", "since", ...),
`distinct_facts` tells such a pair apart and the engine (`find_supersessions(distinct=...)`) offers neither end to the
other's classifier (rules, slots or LLM):

- another holder: a relative's or partner's fact is not the speaker's ("my husband doesn't
  like horror movies"; a partner's news with the speaker in it is the couple's: "my girlfriend
  Emma and I");
- other times: both name a time (a weekday, a month, a year, a date, a part of the day or week),
  the times differ, and the times recur ("on Mondays"), the newer is a past event, or the rest
  differs too (numbers, or a word on each side: "flight to Paris on the 2nd" / "to Madrid on the
  9th"), unless both give the value of one possessed thing ("my French class is on Wednesdays" /
  "... on Mondays", "my thesis defense is on November 8" / "on December 2": one thing moved); or the newer adds a
  recurring time the older lacks ("9 hours a night on weekends"), or both name the same
  recurring time for two things ("tennis on Wednesday evenings" / "squash on ...");
- another object: one adds a noun right after a word both share where the other ends its
  phrase ("phone case" / "phone.", "bike helmet" / "bike."; "new" as its only change word is the
  thing's adjective: "a new laptop" / "a new laptop bag"); or, without a change word, the same
  modifier heads two different nouns ("concert tickets" / "concert parking");
- relative periods count as times ("last year" / "this year"), a day of a month is one time ("14
  January" / "28 January"), "every Sunday" recurs;
- a move within a place: a move into a dwelling no name places ("moved into my current flat")
  after a move to or life in a named place ("moved to Manchester") is not a move away from it;
- two spendings: past amounts of different things ("spent 300 euros on flights" / "spent 450
  euros on the hotel", "paid 1,200 for the sofa" / "paid 120 for new cushions") are two events,
  not one amount's new value; so are sums put or saved into two things ("200 a month into my
  savings account" / "50 a month into my kid's college fund"), and the amounts of two things a
  statement opens with ("my rent is 1,150 euros" / "the electricity bill was 96 euros").

Four of these hold against a weak change word ("new", "started", "again", "now"; not a strong
one such as "switched", "instead", "no longer", "sold", which always wins): the newer adds to the
older ("also", "too", "as well", "another", "again": "We went to Edinburgh again in December");
a routine started on other days doing another thing ("On Fridays I've started a spin class" after
"On Mondays I do yoga"); a weekday's exception to what is usual ("the Bristol office on Wednesdays
now" after "the London office most days"); a purchase of another thing ("bought a new helmet for
the bike" after "bought a road bike"). Two periods of a life ("in my twenties" / "in my thirties",
"as a kid", "when I was a kid", "during my teens", "at uni") hold against any change word: each
statement is true of its own period; so does a past period beside a statement that names none
("when I was in my twenties I lived on noodles" / "these days I mostly cook lentils") unless a
strong change word says it ended ("sold the yamaha" after "a yamaha I got in college"). A
relative's fact may follow an opener ("Turns out my daughter ..."), and a change word in a reason
clause about someone else is theirs ("choir on Thursdays now that my daughter no longer needs lifts").
Two things of one kind hold against any change word too: the same noun after a determiner with two
other nouns before it, each missing from the other statement ("the car battery died" / "my phone
battery is down to 78% now", "my wedding ring" / "my signet ring"), unless the other word names a
version ("my new phone") or the noun is said to change ("switched teams").

Where one was born or grew up ("I was born in Galway") holds against any word too: it is never a
version of what the other statement says ("I live in Dublin now"). An added quantity of another
thing holds against a weak change word ("also drink 2 litres of water a day now" after "3 coffees
a day"), unless it is the same quantity with another number.
"""
from __future__ import annotations

import functools
import re

from etamem.facts.supersession import STRONG_CHANGE, WEAK_CHANGE, quantity_change

_MONTHS = "january|february|march|april|may|june|july|august|september|october|november|december"
# a day of a month, either order: "14 january", "the 14th of January", "January 14th"
_DAY_OF_MONTH = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?(?:\s+of)?\s+({_MONTHS})\b|\b({_MONTHS})\s+(\d{{1,2}})(?:st|nd|rd|th)?\b",
                           re.IGNORECASE)
_TIME = re.compile(
    r"\b(?:(?:last|this|next) (?:year|month|week|summer|winter|spring|autumn|fall|season|semester|term)"
    rf"|yesterday|today|tomorrow|tonight|{_MONTHS}"
    r"|monday|tuesday|wednesday|thursday|friday|saturday|sunday|weekend|weekday|morning|afternoon|evening"
    r"|night|(?:19|20)\d\d|\d{1,2}(?:st|nd|rd|th))s?\b", re.IGNORECASE)
_RECURRING = re.compile(r"\b(?:mondays|tuesdays|wednesdays|thursdays|fridays|saturdays|sundays|weekends|weekdays"
                        r"|mornings|afternoons|evenings|nights|(?:on|every) (?:monday|tuesday|wednesday|thursday|friday"
                        r"|saturday|sunday)s?)\b", re.IGNORECASE)
_PAREN = re.compile(r"\([^)]*\)")  # the resolved dates the extractor adds
# a change said without the rules' change words (as `etamem.facts.slots.SLOT_CHANGE`)
_CHANGED = re.compile(r"\b(?:since|starting|from (?:now|next|then)|pushed|moved|changed|new|anymore|no longer"
                      r"|instead|not .{0,20} but|again|these days|lately)\b", re.IGNORECASE)
_NEW = re.compile(r"\bnew\b", re.IGNORECASE)
_DETERMINERS = {"the", "a", "an", "my", "our", "your", "his", "her", "their", "this", "that", "these", "those"}
_POSSESSIVE = {"my", "our", "your", "his", "her", "their"}
# a discourse opener before the subject: "Turns out my daughter ...", "btw my mum ...", "Fun fact: my ..."
_OPENER = (r"(?:\w+ly,?\s+|so\s+|and\s+|also\s+|(?:it\s+)?turn(?:s|ed)\s+out,?\s+(?:that\s+)?|btw,?\s+|by the way,?\s+"
           r"|oh,?\s+(?:and\s+)?|fun fact:?\s+|guess what,?\s+)?")
_WHO = (r"(?:husband|wife|partner|girlfriend|boyfriend|fianc[ée]e?|mother|mom|mum|father|dad"
        r"|sister|brother|son|daughter|friend|cousin|aunt|uncle|grandma|grandmother|grandpa"
        r"|grandfather|kid|kids|twins|child|children|parents|roommate|flatmate|housemate|neighbou?r|colleague"
        r"|baby|toddler|niece|nephew|stepson|stepdaughter|teenager"
        r"|coworker|boss)(?:-in-law)?")
_SUBJECT_PERSON = re.compile(r"^\W*" + _OPENER + r"(?:my|the \w+'s|\w+'s|his|her|their|our|(?P<household>the)(?=\s+(?:kids|children|twins|baby|toddler)\b))\s+"
                             r"(?P<who>" + _WHO + r")(?![\w-])", re.IGNORECASE)
# a reason clause whose subject is another person: its change words are that person's, not the
# speaker's ("choir on Thursdays, now that my daughter no longer needs lifts to netball")
_OTHERS_REASON = re.compile(r"\b(?:now that|because|cos|coz|bc|as)\s+(?:my|our|his|her|their|the user's|the|\w+'s)\s+"
                            r"(?:\w+\s+)?"
                            + _WHO + r"(?![\w-])(?!\s+and\s+(?:i|me)\b)[^,.;:!?]*", re.IGNORECASE)


def _times(text: str) -> frozenset[str]:
    """The times `text` names, a day of a month as one time ("14 january"; "January 14th" alike)."""
    t = _PAREN.sub(" ", text)
    days = {f"{int(m.group(1) or m.group(4))} {(m.group(2) or m.group(3)).lower()}" for m in _DAY_OF_MONTH.finditer(t)}
    return frozenset(days | {m.group(0).lower().rstrip("s") for m in _TIME.finditer(_DAY_OF_MONTH.sub(" ", t))})


def changed(text: str) -> bool:
    """Whether `text` says that something changed (the rules' change words or `_CHANGED`)."""
    t = text.replace("\u2019", "'")
    return bool(STRONG_CHANGE.search(t) or WEAK_CHANGE.search(t) or _CHANGED.search(t))


_PARTNER = {"husband", "wife", "partner", "girlfriend", "boyfriend", "fiance", "fiancee", "fiancé", "fiancée"}
_USER = re.compile(r"\b(?:the user|i|me|i'm|we|us|we're|our)\b", re.IGNORECASE)
_TOKEN = re.compile(r"[A-Za-z][A-Za-z'-]*|[,;:.!?()]")
# heads that name the kind of place or thing a name already names: "St Mary's (hospital)"
_PLACE_HEADS = {"hospital", "clinic", "school", "university", "college", "company", "street", "road", "avenue",
                "station", "airport", "park", "centre", "center", "office", "building"}


def statement_holder(text: str) -> str | None:
    """Whose fact `text` states when its subject is another person ("my sister", "the user's
    husband", "the kids", "the baby"); a partner only when the speaker is not in the statement too
    ("my girlfriend and I", "my boyfriend is a chef, so I never cook"), "the kids" only when the
    speaker is not in their clause ("the kids outvoted me"; not "the baby naps now, I can shower")."""
    m = _SUBJECT_PERSON.search(text)
    if m is None:
        return None
    who = m.group("who").lower()
    rest = text[m.end():]
    if who in _PARTNER:  # "my boyfriend Luca is a chef, so I never cook": the couple's fact
        return None if _USER.search(rest) else who
    return None if m.group("household") and _USER.search(_clause(rest)) else who


# a clause ends at a sentence mark or a comma, unless the comma lists people before "and I"
_CLAUSE_END = re.compile(r"[.;!?]|,(?!\s+(?:(?:the|my|our)\s+)?\w+\s+and\s+(?:i|me)\b)", re.IGNORECASE)


def _clause(text: str) -> str:
    """`text` up to the end of its first clause ("the baby naps ... now, absolute luxury, I can
    shower": the speaker is not in the baby's clause; "my wife, the kids and I ...": one clause)."""
    return _CLAUSE_END.split(text, maxsplit=1)[0]


def _toks(t: str) -> list[str]:
    """Stems of `t`'s words, "" for a stopword, punctuation kept (phrase ends)."""
    from etamem.extraction.stems import STOPWORDS, stem

    return [w if not w[0].isalpha() else ("" if w.lower() in STOPWORDS else stem(w))
            for w in _TOKEN.findall(_PAREN.sub(" ", t.replace("\u2019", "'")))]


def _words(t: str) -> list[str]:
    """`t`'s words lowercased, punctuation kept (phrase ends), the extractor's resolved dates left out."""
    return [w.lower() for w in _TOKEN.findall(_PAREN.sub(" ", t.replace("\u2019", "'")))]


def _word(w: str) -> bool:
    return bool(w) and w[0].isalpha()


def _heads(places: bool = True) -> set[str]:
    """Heads that name a kind rather than a thing ("vegan diet"), with `places` the kinds of place
    a name already names ("St Mary's hospital")."""
    from etamem.extraction.stems import GENERIC_WORDS

    return GENERIC_WORDS | (_PLACE_HEADS if places else set()) | {"diet", "music", "food", "lover", "fan", "person",
                                                                  "lifestyle", "type"}


def added_object(a: str, b: str) -> bool:
    """`a` names another thing than `b`: a noun right after a content word both share, where
    `b` ends its phrase at that word ("phone case" / "phone.", "bike helmet" / "bike.")."""
    ta, tb = _toks(a), _toks(b)
    ends_b = {w for i, w in enumerate(tb) if _word(w) and (i + 1 == len(tb) or not _word(tb[i + 1]))}
    shared = ({w for w in ta if _word(w)} & {w for w in tb if _word(w)}) - {"user"}
    heads = _heads()
    for prev, w in zip(ta, ta[1:]):
        if prev in shared and prev in ends_b and _word(w) and w not in shared and w not in heads and len(w) > 2:
            return True
    return False


# prepositions the stopword list lacks: a noun phrase ends before them ("the bus shelter near my flat")
_PREPOSITIONS = {"near", "behind", "beside", "outside", "inside", "across", "opposite", "around", "under", "past"}


def other_head(a: str, b: str) -> bool:
    """The same modifier, after a determiner, before two different nouns each missing from the
    other statement, the phrase ending there on one side and ending or possessed on the other
    ("the concert tickets." / "the concert parking.", "my garden fence" / "my garden shed", "my
    bus pass expires" / "the bus shelter near ..."): two things, not one thing's new value. A
    verb's other object ("I eat breakfast" / "eating porridge") is not one."""
    from etamem.extraction.stems import STOPWORDS, stem

    wa, wb = _words(a), _words(b)
    content = lambda ws: {stem(w) for w in ws if _word(w) and w not in STOPWORDS}  # noqa: E731
    shared = (content(wa) & content(wb)) - {"user"}
    heads = _heads(places=False)  # "concert parking" / "concert tickets", "Lisbon office" / "Lisbon airport"

    def after(ws: list[str]) -> dict[str, tuple[str, bool, bool]]:
        """shared modifier -> (the unshared noun after it, whether its phrase ends there, possessed)"""
        out = {}
        for i in range(1, len(ws) - 1):
            mod, noun = stem(ws[i]), ws[i + 1]
            end = i + 2 == len(ws) or not _word(ws[i + 2]) or ws[i + 2] in STOPWORDS or ws[i + 2] in _PREPOSITIONS
            owned = ws[i - 1] in _POSSESSIVE or ws[i - 1].endswith("'s")  # "my", "the user's"
            if (ws[i - 1] in _DETERMINERS or owned) and mod in shared and _word(noun) and noun not in STOPWORDS \
                    and stem(noun) not in shared and stem(noun) not in heads and len(noun) > 2:
                out[mod] = (stem(noun), end, owned)
        return out

    # the phrase ends on at least one side, and the other side's ends too or is possessed ("my phone
    # contract renews" / "my phone case is cracked", "my bus pass expires" / "the bus shelter near
    # ...": the verb after the possessed noun is not read as part of its phrase)
    na, nb = after(wa), after(wb)
    return any(w in nb and nb[w][0] != na[w][0] and (na[w][1] or nb[w][1])
               and (na[w][1] or na[w][2]) and (nb[w][1] or nb[w][2]) for w in na)


# modifiers that say which version of one thing, not which thing ("my old phone" / "my new phone")
_VERSION_WORDS = {"new", "old", "current", "first", "last", "next", "previous", "former", "own", "usual", "main",
                  "only", "other", "same", "latest", "original", "second", "third", "recent", "future", "present",
                  "favourite", "favorite", "fav", "fave", "best", "regular"}
# "switched teams", "changed jobs": the noun's one slot changes value
_SLOT_CHANGE = re.compile(r"\b(?:switch|chang|swapp?|mov|new)\w*\s+([a-z]+)s\b", re.IGNORECASE)


def other_modifier(a: str, b: str) -> bool:
    """Two things of one kind: the same noun after a determiner and two different nouns, each missing
    from the other statement ("the car battery died" / "my phone battery is down to 78%", "my house
    key" / "the car key"), not one thing's new value. A version word ("my new phone"), a possessor
    ("the user's inhaler") and a noun whose value is said to change ("switched teams": "the payments
    team" / "the search team") are no other thing."""
    from etamem.extraction.stems import STOPWORDS, stem

    def pairs(ws: list[str]) -> dict[str, str]:
        """head -> the modifier before it, both after a determiner or possessive"""
        out = {}
        for i in range(1, len(ws) - 1):
            det, mod, head = ws[i - 1], ws[i], ws[i + 1]
            if (det in _DETERMINERS or det.endswith("'s")) and _word(mod) and _word(head) and not mod.endswith("'s") \
                    and mod not in STOPWORDS and mod != "user" and head not in STOPWORDS and mod not in _VERSION_WORDS \
                    and len(mod) > 2 and len(head) > 2:
                out[stem(head)] = stem(mod)
        return out

    wa, wb = _words(a), _words(b)
    sa, sb = {stem(w) for w in wa}, {stem(w) for w in wb}
    pa, pb = pairs(wa), pairs(wb)
    heads = _heads(places=False) | {stem(m.lower()) for t in (a, b) for m in _SLOT_CHANGE.findall(t)}
    return any(h in pb and h not in heads and pa[h] != pb[h] and pa[h] not in sb and pb[h] not in sa for h in pa)


def _new_thing(new: str, old: str) -> bool:
    """`new`'s "new" is the adjective of another thing than `old`'s: "a new laptop bag" after "a
    new laptop." (not "a new manager, Tom" after "my manager is Priya")."""
    m = re.search(r"\bnew\s+([\w'-]+\s+[\w'-]+)", new, re.IGNORECASE)
    return m is not None and added_object(m.group(1), old)


_OWN_SUBJECT = re.compile(r"^\W*(?:my|our|the user's|\w+'s)\s+((?:[\w-]+\s+){0,3}?[\w-]+)\s+(?:is|are|was|were)\b",
                          re.IGNORECASE)
# a day of a month, a year or an ordinal: numbers that are not amounts
_DATE_NUMBER = re.compile(rf"{_DAY_OF_MONTH.pattern}|\b(?:(?:19|20)\d\d|\d{{1,2}}(?:st|nd|rd|th))\b", re.IGNORECASE)


def _amounts(text: str) -> frozenset[str]:
    """The numbers of `text` that are not part of a date ("5 km", "301"; not "December 2")."""
    return frozenset(re.findall(r"\d+(?:[.,]\d+)?", _DATE_NUMBER.sub(" ", _PAREN.sub(" ", text))))


_THE_SUBJECT = re.compile(r"^\W*the\s+((?:[\w-]+\s+){0,3}?[\w-]+)\s+(?:is|are|was|were)\b", re.IGNORECASE)


def _the_subject(text: str) -> str | None:
    """The thing a statement opens with and gives the value of ("the electricity bill this month
    was ..."), the extractor's resolved dates left out."""
    m = _THE_SUBJECT.match(_PAREN.sub("", text))
    return m.group(1).lower() if m else None


def _own_subject(text: str) -> str | None:
    """The possessed thing a statement gives the value of ("the user's French class is ..."):
    one attribute with one value at a time, whose new time is a move, not a second event."""
    m = _OWN_SUBJECT.match(text)
    return m.group(1).lower() if m else None


_MOVE = r"mov(?:e|ed|ing)\s+(?:in(?:to)?|to)"  # "move in", "moved into", "moving to"
_MOVE_INTO = re.compile(rf"\b{_MOVE}\s+((?:my|our|a|an|the|this|that|his|her|their)\b[^.,;!?]*)", re.IGNORECASE)
_PLACE_NAMED = re.compile(rf"\b(?:{_MOVE}|li(?:ve|ves|ved|ving)\s+in|based\s+in|relocated\s+to)\s+(?:the\s+)?[A-Z]")


def move_within(new: str, old: str) -> bool:
    """`new` moves into a dwelling no name places ("moved into my current flat in 2021") and
    `old` moved to or lives in a named place ("moved to Manchester"): a move within it."""
    m = _MOVE_INTO.search(_PAREN.sub(" ", new))
    return m is not None and not re.search(r"\b[A-Z]", m.group(1)[1:]) and bool(_PLACE_NAMED.search(old))


_ADDITIVE = re.compile(r"\b(?:also|as well|another|again|in addition|on top of that|too(?=\s*(?:[,.;!?]|lol|$)))\b",
                       re.IGNORECASE)  # "too" ending a clause, not "too many"
# what money went to: bought, paid for, spent on, put or saved into ("200 a month into my savings account")
_PURCHASE = re.compile(r"\b(?:bought|buying|ordered|paid\b[^.;!?]*?\bfor|spent\b[^.;!?]*?\bon"
                       r"|(?:put|putting|puts|sav(?:e|es|ed|ing))\b[^.;!?]*?\binto)\s+"
                       r"((?:[\w'-]+\s+){0,4}?)([a-z][\w'-]*)(?=\s+(?:and|for|from|at|to|with|in|on|off|now|today|yesterday|again|too|last|this|every|each|per)\b|\s*[,.;!?]|\s*$)",
                       re.IGNORECASE)


def _purchase(text: str) -> str | None:
    """The head noun of what a statement says was bought or paid for ("a second-hand road bike
    for 400 quid" -> "bike", "120 euros for new cushions and a throw" -> "cushions"), else None."""
    from etamem.extraction.stems import stem

    m = _PURCHASE.search(_PAREN.sub(" ", text))
    return stem(m.group(2).lower()) if m else None


_WEEKDAYS = re.compile(r"\b(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)s\b", re.IGNORECASE)
_HABITUAL = re.compile(r"\b(?:most (?:days|nights|mornings|evenings|weeks)|most of the time|usually|normally|mostly"
                       r"|generally|typically)\b", re.IGNORECASE)
# a period of one's life: "in my twenties", "in my 30s", "as a kid", "at uni", "in high school", "during my army years"
_LIFE_PERIOD = re.compile(r"\b(?:(?:in|during) (?:my|his|her|their|our|the user's|\w+'s) (?:early |late |mid-?)?"
                          r"(?:teens|twenties|thirties|forties|fifties|sixties|seventies|[2-9]0s)"
                          r"|as an? (?:kid|child|teenager|teen|student|toddler|baby)"
                          r"|when (?:i|we|the user) (?:was|were) (?:an? )?(?:kid|kids|child|children|teenager|teen|student"
                          r"|students|toddler|baby|little|small|young|younger)"
                          r"|(?:at|in) (?:uni|university|college|school|high school|primary school|secondary school|grad school)"
                          r"|(?:in|during) (?:my|his|her|their|our|the user's|\w+'s) (?:\w+ )?\w+ (?:years|days))\b",
                          re.IGNORECASE)


def _life_periods(t: str) -> frozenset[str]:
    """The periods of a life `t` (apostrophes already plain) names, by their last word ("twenties",
    "kid", "uni")."""
    words = (m.group(0).lower().split() for m in _LIFE_PERIOD.finditer(_PAREN.sub(" ", t)))
    return frozenset(w[-2] if w[-1] in ("years", "days") else w[-1] for w in words)  # "army years": "army"


def _weak_change_holds(new: str, old: str, when_new: frozenset, when_old: frozenset, recurs_new: bool,
                       recurs_old: bool, both_own: bool, other_amounts: bool, same_thing: bool) -> bool:
    """The look-alikes a weak change word does not undo (the module docstring): an addition (its
    marker the only change word: "started eating fish again", "vegan now, ... too" are changes),
    a routine started on other days doing another thing, an exception on some days to what is
    usual ("at the Bristol office on Wednesdays now" after "the London office most days"), a
    purchase of another thing."""
    if _ADDITIVE.search(new) and (not changed(_ADDITIVE.sub(" ", new))
                                  # another quantity added: "also drink 2 litres of water a day now" after "3 coffees a day"
                                  or (other_amounts and both_own and not quantity_change(new, old))):
        return True
    if recurs_new and recurs_old and when_new and when_old and not when_new & when_old and both_own \
            and not same_thing:
        return True
    if _WEEKDAYS.search(_PAREN.sub(" ", new)) and not _HABITUAL.search(new) and _HABITUAL.search(old) \
            and not recurs_old and both_own and not same_thing:
        return True
    bought_new, bought_old = _purchase(new), _purchase(old)
    return bool(other_amounts and bought_new and bought_old and bought_new != bought_old)


# where one comes from: true for good once said ("I was born in Galway", "grew up near Cork")
_ORIGIN = re.compile(r"\b(?:(?:i|the user)(?:'m| am| was) (?:born|raised)|born and (?:raised|bred)|grew up (?:in|on|near|by)"
                     r"|(?:am|'m|is) originally from)\b", re.IGNORECASE)


def _content(text: str) -> set[str]:
    from etamem.facts.supersession import subject_words

    return subject_words(_PAREN.sub(" ", text)) - {"schedul", "set", "plan", "book", "due"}


@functools.lru_cache(maxsize=8192)
def distinct_facts(new: str, old: str) -> bool:
    """Whether `new` and `old` (one speaker's statements) are about different events, objects,
    times or people (the module docstring), so `new` cannot replace `old`."""
    from etamem.extraction.relative_dates import is_past_tense

    t_new, t_old = new.replace("\u2019", "'"), old.replace("\u2019", "'")
    if statement_holder(t_new) != statement_holder(t_old):
        return True  # the subject is another person: "my husband doesn't like ..." after "I like ..."
    if move_within(t_new, t_old):
        return True
    if bool(_ORIGIN.search(t_new)) != bool(_ORIGIN.search(t_old)):
        return True  # where one was born or grew up is no version of where one lives now
    when_new, when_old = _times(t_new), _times(t_old)
    recurs_new, recurs_old = (bool(_RECURRING.search(_PAREN.sub(" ", t))) for t in (t_new, t_old))
    amounts_new, amounts_old = _amounts(t_new), _amounts(t_old)
    other_amounts = bool(amounts_new and amounts_old and amounts_new != amounts_old)
    both_own = bool(_content(t_new) - _content(t_old) and _content(t_old) - _content(t_new))  # a word on each side
    own_new, own_old = _own_subject(t_new), _own_subject(t_old)
    same_thing = own_new is not None and own_new == own_old
    holds = _weak_change_holds(t_new, t_old, when_new, when_old, recurs_new, recurs_old, both_own, other_amounts,
                               same_thing)
    periods_new, periods_old = _life_periods(t_new), _life_periods(t_old)
    if periods_new and periods_old and not periods_new & periods_old:
        return True  # two periods of a life: "in my twenties I worked in retail" / "switched to teaching in my thirties"
    if bool(periods_new) != bool(periods_old) and is_past_tense(t_new if periods_new else t_old) \
            and not STRONG_CHANGE.search(t_new):
        return True  # a past period of a life beside the present: "when I was in my twenties I lived on noodles"
    if other_modifier(t_new, t_old):
        return True  # another thing of the same kind: "my phone battery" after "the car battery"
    head = other_head(t_new, t_old)
    own_words = _OTHERS_REASON.sub(" ", t_new)  # the speaker's own change words
    if changed(own_words):
        if STRONG_CHANGE.search(own_words):
            return False
        if holds:
            return True
        if not changed(_NEW.sub(" ", own_words)) and when_new and when_old and not when_new & when_old and other_amounts \
                and is_past_tense(t_new) and is_past_tense(t_old):
            return True  # two past results at two times: "this year ... 49 minutes, a new personal best"
        if not head and (changed(_NEW.sub(" ", own_words)) or not _new_thing(t_new, t_old)):
            return False  # "new" alone, before another thing, is that thing's adjective: "a new laptop bag",
            # "my phone case is cracked so I ordered a new one" after "my phone contract renews"
    if head:
        return True
    recurring = recurs_new or recurs_old
    thing_new, thing_old = own_new or _the_subject(t_new), own_old or _the_subject(t_old)
    if thing_new and thing_old and not set(thing_new.split()) & set(thing_old.split()) and amounts_new and amounts_old:
        return True  # two things' amounts: "our rent is 1,200 pounds" / "the electricity bill this month was 96"
    if when_new and when_old and when_new != when_old and not same_thing:
        if recurring or is_past_tense(t_new) or both_own or other_amounts:
            return True  # other days of a week, two past events, or another thing on another date
    if recurs_new and not recurs_old:
        return True
    if other_amounts and both_own and is_past_tense(t_new) and is_past_tense(t_old):
        return True  # two past spendings or counts of different things
    if holds:
        return True
    if recurring and when_new == when_old and both_own:
        return True  # two things at one recurring time: "tennis on Wednesday evenings" / "squash ..."
    return added_object(t_new, t_old) or added_object(t_old, t_new)


__all__ = ["added_object", "changed", "distinct_facts", "move_within", "other_head", "other_modifier", "statement_holder"]
