"""Discourse markers: words that say a statement is a repeat or a reminder, not part of it.

"Just so you know, I'm colour-blind.", "As I said, I'm vegan.", "I'm left-handed, remember?",
"Don't forget, my birthday is on the 14th of March." The marker is cut before the sentence is
judged (so the statement is kept) and before it becomes a unit (so "As the user told you, ..."
never reaches a unit's text); the statement itself is left as it is.
"""
from __future__ import annotations

import re

_SAID = (r"(?:said|mentioned|told\s+you|told\s+ya|noted|explained|wrote|shared)"
         r"(?:\s+(?:before|earlier|already|previously|last\s+time|the\s+other\s+day))?")
_LEAD = re.compile(
    r"^(?:(?:and|but|so|well|oh|again|also)\s*,?\s+)*(?:"
    rf"(?:as|like)\s+(?:i(?:'ve|\s+have|\s+had)?|we(?:'ve)?)\s+(?:already\s+)?{_SAID}"
    r"|as\s+you\s+(?:know|may\s+know|might\s+know|already\s+know|(?:may\s+|might\s+)?remember|recall)"
    r"|just\s+so\s+you\s+(?:know|remember)|so\s+you\s+know|for\s+(?:the\s+)?record|for\s+your\s+information|fyi"
    r"|just\s+(?:a|as\s+a)\s+(?:quick\s+|friendly\s+)?reminder|(?:quick\s+|friendly\s+)?reminder"
    r"|just\s+to\s+remind\s+you|to\s+remind\s+you|let\s+me\s+remind\s+you|(?:just\s+)?remember"
    r"|don'?t\s+forget|do\s+not\s+forget|never\s+forget|in\s+case\s+you\s+forgot|(?:just\s+)?to\s+be\s+clear"
    r"|(?:just\s+)?(?:once\s+)?again|once\s+more|(?:just\s+)?to\s+repeat|(?:just\s+)?repeating\s+myself"
    r"|(?:just\s+)?(?:a\s+)?heads[-\s]up"
    r")(?:\s+(?:that|this))?\s*(?:[,:;\u2014\u2013-]+|\.{3}|\u2026)\s*", re.IGNORECASE)
_TRAIL = re.compile(  # (?<!\s)\s*+: one try per run of spaces (linear on long runs)
    r"(?<!\s)\s*+[,;\u2014\u2013-]+\s*(?:"
    rf"(?:as|like)\s+(?:i(?:'ve|\s+have)?|we(?:'ve)?)\s+(?:already\s+)?{_SAID}"
    r"|as\s+you\s+(?:know|may\s+know|(?:may\s+)?remember|recall)|remember|you\s+remember|if\s+you\s+remember"
    r"|(?:just\s+)?(?:so\s+you\s+know|fyi|for\s+the\s+record|a\s+reminder|as\s+a\s+reminder)"
    r"|don'?t\s+forget|again|once\s+again"
    r")\s*(?P<end>[.!?\u2026]*)\s*$", re.IGNORECASE)


def strip_markers(sentence: str) -> str:
    """`sentence` without a leading or trailing discourse marker ("As I said, ...", "Just so you
    know, ...", "..., remember?"); a question mark that only belonged to the marker goes with it."""
    s = sentence.strip()
    for _ in range(3):
        before = s
        m = _LEAD.match(s.replace("\u2019", "'"))
        if m and m.end() < len(s):
            rest = s[m.end():]
            s = rest[:1].upper() + rest[1:] if rest[:1].islower() and not rest.startswith(("i ", "i'")) else rest
            if rest.startswith(("i ", "i'")):
                s = "I" + rest[1:]
        t = _TRAIL.search(s.replace("\u2019", "'"))
        if t and t.start() > 0:
            end = t.group("end").replace("?", "") or "."
            s = s[:t.start()].rstrip() + end[:1]
        if s == before:
            break
    return s


__all__ = ["strip_markers"]
