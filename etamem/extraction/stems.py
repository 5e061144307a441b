"""Word stems shared by both methods: a crude English `stem` and the `topic_stems` of a text
(its content words minus generic verbs, time words and stop words), which the supersession
rules and FTA-Mem's link and profile rules compare.

Pure functions of their arguments (no model, deterministic).
"""
from __future__ import annotations

import re

# words that carry no content (the rule extractor's filler test, the topic stems, grounding)
STOPWORDS = frozenset(
    "a an the and or but so if then than that that's thats this these those it it's its is "
    "are was were be been being am do does did doing have has had having will would can "
    "could should shall may might must to of in on at for with about from by as up out just "
    "really very too also much many some any anything something everything nothing all there "
    "here what what's how how's who why when where which i i'm i've i'll i'd me my mine myself "
    "you you're you've you'll you'd your yours yourself we we're our us they they're them their "
    "he she him her his hers not no yes yeah yep ok okay oh wow hey hi hello lol haha thanks "
    "thank bye good great cool awesome amazing nice sweet wonderful fantastic lovely incredible "
    "glad super totally definitely absolutely sure now still always ever such own one kind sort "
    "kinda gonna wanna pretty lot lots things thing stuff".split()
)

GENERIC_WORDS = set(
    "go goes going went gone get got gets do did does done make made have has had want wanted plan planned "
    "planning will would really think thought know knew say said tell told take took come came time day days "
    "week weeks weekend month months year years next last ago yesterday today tomorrow tonight morning evening "
    "night great good nice fun lot bit little first new old finally also still just thing things way "
    "asked answered later every honestly anymore actually basically totally seriously probably maybe kind sort "
    "anyway said".split()
)
_TOKEN = re.compile(r"[a-z][a-z'\u2019-]+")


def stem(word: str) -> str:
    """A crude English stem: lower case, common suffixes and a final "e" off, a doubled last
    consonant undone ("camping" -> "camp", "running" -> "run", "loves" / "loved" -> "lov")."""
    w = word.lower().replace("\u2019", "'")
    w = w[:-2] if w.endswith("'s") else w
    if w.endswith("ies") and len(w) > 4:
        w = w[:-3] + "y"
    elif w.endswith("es") and len(w) > 4 and w[:-2].endswith(("s", "x", "z", "ch", "sh")):
        w = w[:-2]
    elif w.endswith("s") and not w.endswith("ss") and len(w) > 3:
        w = w[:-1]
    for suffix in ("ingly", "ing", "edly", "ed", "ly"):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            w = w[: -len(suffix)]
            break
    if len(w) > 3 and w[-1] == w[-2] and w[-1] not in "aeiouls":
        w = w[:-1]
    if len(w) > 3 and w.endswith("e"):
        w = w[:-1]
    return w


def topic_stems(text: str, exclude: set[str] | frozenset[str] = frozenset()) -> set[str]:
    """Stems of the content words of `text`, minus generic verbs, time words, stop words and
    `exclude` (e.g. the speakers' names, lower-case; possessives count: "Melanie's")."""
    excluded = set(exclude) | {stem(x) for x in exclude}
    out = set()
    for tok in _TOKEN.findall(text.lower().replace("\u2019", "'")):
        tok = tok.removesuffix("'s")
        if tok in STOPWORDS or tok in GENERIC_WORDS or tok in excluded or len(tok) < 3:
            continue
        s = stem(tok)
        if s not in GENERIC_WORDS and s not in excluded:
            out.add(s)
    return out
