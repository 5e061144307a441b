"""Requests and pleasantries: what a chat turn asks for or says politely is not a fact.

The rule extractor (`RuleExtractor`, `drop_requests`) makes no unit of:
- a question ("How do I set up a budget spreadsheet?", "Any dietary restrictions?");
- a request to the other speaker, with or without a question mark ("Can you give me a shopping
  list", "Please recommend a book.", "Help me plan meals for the week.", "Give me three ideas.",
  "I need some ideas for a gift.", "I'd like you to rewrite this.");
- a pleasantry ("Great question!", "Happy to help.", "I hope this helps!", "Let me know if ...",
  "Feel free to ask.", "You're welcome."), or an acknowledgement ("Got it, thanks for letting me
  know.", "Okay, noted!").

The turn itself stays stored and searchable as a raw turn. What a request says about its speaker
in a clause of its own is kept: "I'm vegan, can you suggest some recipes?" and "Since I just
moved to Porto, where should I shop?" give "The user is vegan" and "The user just moved to
Porto" (`statement_clauses`). What only a request's noun phrase reveals ("Can you find vegan
recipes for my sister's party?": a sister, a party) is left to the LLM extractor; the rules do
not guess facts from a request's object.
"""
from __future__ import annotations

import re

__all__ = ["is_pleasantry", "is_request", "statement_clauses"]

_APOS = "['\u2019]"
# a request's opening: a modal to "you" ("can you", "could u"), "please", "help me", ...
_ASK_OPEN = (
    r"(?:can|could|would|will|won" + _APOS + r"t|wouldn" + _APOS + r"t)\s+(?:you|u|ya)\b"
    r"|please\b|pls\b|plz\b|kindly\b"
    r"|(?:do|would)\s+you\s+(?:mind|know|have\s+any)\b"
    r"|i(?:\s+(?:need|want|would\s+like)|" + _APOS + r"d\s+like)\s+you\s+to\b"
    r"|i\s+(?:was|am|" + _APOS + r"m)\s+wondering\s+if\s+you\b|i\s+wonder\s+if\s+you\b"
    r"|i(?:" + _APOS + r"d|\s+would)\s+(?:appreciate|love)\s+(?:it\s+if\s+you|(?:some|your)\s+help)\b"
    r"|(?:i\s+)?(?:need|want|could\s+use|would\s+love|" + _APOS + r"d\s+love)\s+(?:some\s+|a\s+(?:few\s+|little\s+)?|your\s+|more\s+)?"
    r"(?:help|advice|ideas?|tips?|suggestions?|recommendations?|input|guidance|pointers)\b"
    r"|i(?:" + _APOS + r"m|\s+am)\s+looking\s+for\s+(?:some\s+|a\s+few\s+)?"
    r"(?:help|advice|ideas?|tips?|suggestions?|recommendations?|input|guidance|pointers)\b"
    r"|any\s+(?:ideas?|tips?|suggestions?|recommendations?|advice|thoughts)\b"
)
# an imperative addressed to the other speaker: a task verb, or a verb with "me" after it
_TASK_VERBS = (
    "write rewrite list suggest recommend explain plan draft translate summarize summarise generate create "
    "compare calculate convert brainstorm outline describe define design build compose proofread paraphrase "
    "simplify estimate rank sort organize organise propose analyze analyse evaluate solve"
).split()
_ME_VERBS = "give tell show help find send remind teach get make walk let book buy order pick".split()
_IMPERATIVE = (
    r"(?:" + "|".join(sorted(set(_TASK_VERBS))) + r")\b(?!\s+(?:is|was|are|were)\b)"
    r"|(?:" + "|".join(_ME_VERBS) + r")\s+(?:me|us)\b"
)
_REQUEST_RE = re.compile(rf"^(?:(?:and|but|so|ok|okay|now|also|then|hey|hi|hello)[,\s]+)*(?:{_ASK_OPEN}|{_IMPERATIVE})",
                         re.IGNORECASE)
# a pleasantry: the whole sentence is politeness or an offer to help
_PLEASANTRY_RE = re.compile(
    r"^(?:(?:oh|well|ah|so)[,\s]+)?(?:"
    r"(?:what\s+a\s+|that" + _APOS + r"?s\s+a\s+|such\s+a\s+)?(?:great|good|excellent|fantastic|wonderful|interesting)\s+"
    r"(?:question|idea|choice|point)s?\b"
    r"|(?:i" + _APOS + r"?m\s+|i\s+am\s+|i" + _APOS + r"?d\s+be\s+|i\s+would\s+be\s+)?(?:so\s+|more\s+than\s+|always\s+)?"
    r"(?:happy|glad|delighted|here)\s+to\s+(?:help|assist|support)\b"
    r"|(?:i" + _APOS + r"?d\s+be\s+|i\s+would\s+be\s+)(?:happy|glad|delighted)\s+to\b"
    r"|(?:i\s+)?hope\s+(?:this|that|it)\s+helps\b"
    r"|(?:please\s+)?(?:let\s+me\s+know|feel\s+free|don" + _APOS + r"?t\s+hesitate)\b"
    r"|you" + _APOS + r"?re\s+(?:very\s+|most\s+)?welcome\b|(?:no\s+problem|no\s+worries|my\s+pleasure|of\s+course"
    r"|certainly|absolutely|good\s+luck|best\s+of\s+luck|enjoy|happy\s+\w+ing)\b\W*$"
    r"|is\s+there\s+anything\s+else\b|anything\s+else\b"
    r"|here\s+(?:are|is|" + _APOS + r"s)\b[^:]*:?\s*$"
    r")",
    re.IGNORECASE,
)
# a clause boundary inside a sentence: a comma, dash or semicolon, or "so" / "and" after one
_CLAUSE_RE = re.compile(r"\s*(?:[,;:]\s*(?:(?:so|and|but)\s+)?|\s[-\u2013\u2014]+\s+(?:(?:so|and|but)\s+)?)")
_LEAD_RE = re.compile(r"^(?:since|because|as|given\s+that|now\s+that|so|and|but)\s+", re.IGNORECASE)
_FIRST_PERSON_RE = re.compile(
    r"^(?:(?:i|i" + _APOS + r"(?:m|ve|d|ll))|my|we|we" + _APOS + r"(?:re|ve|d|ll)|our)(?![\w-])", re.IGNORECASE)


def is_request(sentence: str) -> bool:
    """Whether `sentence` (filler already stripped) asks the other speaker something: a question,
    or a request with or without a question mark (see the module docstring)."""
    s = sentence.replace("\u2019", "'").strip()
    if not s:
        return False
    return s.rstrip(" \"')\u201d").endswith("?") or bool(_REQUEST_RE.match(s))


# an acknowledgement, the whole sentence ("Got it, thanks for letting me know.", "Okay, noted!",
# "Good to know, I'll remember that."): each of its clauses one of these
_ACK = (r"(?:got\s+it|noted|ok(?:ay)?|understood|good\s+to\s+know|sounds\s+good|will\s+do|gotcha"
        r"|thanks?(?:\s+you)?(?:\s+so\s+much)?(?:\s+for\s+(?:letting\s+me\s+know|telling\s+me|the\s+(?:update|info)"
        r"|sharing(?:\s+that)?))?|i'?ll\s+(?:remember|keep)\s+(?:that|it)(?:\s+in\s+mind)?)")
_ACK_RE = re.compile(rf"^\W*{_ACK}(?:[\s,;.!-]+{_ACK})*[\s.!]*$", re.IGNORECASE)


def is_pleasantry(sentence: str) -> bool:
    """Whether `sentence` is politeness alone ("Great question!", "Happy to help.", "Hope this
    helps!", "Let me know if you need anything else.") or an acknowledgement ("Got it, thanks for
    letting me know.", "Okay, noted!")."""
    s = sentence.replace("\u2019", "'").strip()
    return bool(_PLEASANTRY_RE.match(s) or _ACK_RE.match(s))


def statement_clauses(sentence: str) -> list[str]:
    """The clauses of a request sentence that state something about the speaker, without the
    request ("I'm vegan, can you suggest recipes?" -> ["I'm vegan"]; "Since I just moved to
    Porto, where should I shop?" -> ["I just moved to Porto"]); [] when there is none."""
    out = []
    for clause in _CLAUSE_RE.split(sentence.strip()):
        clause = _LEAD_RE.sub("", clause.strip()).strip(" ,;:-")
        if clause and _FIRST_PERSON_RE.match(clause) and not is_request(clause) and not is_pleasantry(clause):
            out.append(clause)
    return out
