"""The answer without an LLM: the best stated fact for the kind of question asked.

A question asks for one or more kinds (`question_kinds`): a date (`when`), a place (`where`), a
count (`count`), a person (`who`), a reason (`why`), else any fact (`fact`). For each kind the
answer is the unit among the best hits that scores highest on: its rank (`Weights.rank`, a prior
falling with the rank), holding what the kind asks for (`kind`: a date, a place, a number, a
name, a cause), words shared with the question (`overlap`), and being said in the session of the
best hit (`session`: the second part of a two-part answer is most often said beside the first).
Requests to the other speaker, questions and pleasantries ("Sure!", "Thanks!") are not facts
and are passed over while a statement is left; a `when` answer carries the unit's date. The
weights were chosen on half of the LoCoMo dev conversations (`benchmarks/offline_answers.py
--tune`; the grid is flat there, and of the weights within 0.003 F1 of its best these also answer
the bundled demo's questions).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

from etamem.ingest.timeparse import format_date
from etamem.records import Hit

KINDS = ("when", "where", "count", "who", "why", "fact")
_MONTHS = ("january|february|march|april|may|june|july|august|september|october|november|december|"
           "jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec")
_WEEKDAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday|weekend"
_ASKS = {
    "when": re.compile(r"\b(when|what (date|day|year|month|time of year)|which (year|month|day|date)|"
                       r"how long ago|since when)\b", re.I),
    "where": re.compile(r"\b(where|which (city|country|place|town|state|restaurant|shop|store|park|school|"
                        r"company|university)|what (city|country|place|town|state|location))\b", re.I),
    "count": re.compile(r"\bhow (many|much|often|long|old|far)\b", re.I),
    "who": re.compile(r"\b(who|whom|whose|with whom)\b", re.I),
    "why": re.compile(r"\b(why|what (made|caused|motivated|inspired)|what was the reason|for what reason)\b", re.I),
}
_HOLDS = {
    "when": re.compile(rf"\b({_MONTHS}|{_WEEKDAYS}|yesterday|today|tomorrow|tonight|ago|last (week|month|year|"
                       rf"night|time)|next (week|month|year)|(19|20)\d\d|\d{{1,2}}(st|nd|rd|th)|"
                       rf"\d{{1,2}}[/.]\d{{1,2}}|spring|summer|autumn|fall|winter|christmas|birthday)\b", re.I),
    "where": re.compile(r"(\b(in|at|to|from|near|around|visit\w*|moved?|live[sd]?)\s+(the\s+)?[A-Z][\w'-]+|"
                        r"\b(city|country|town|village|park|beach|museum|street|restaurant|cafe|school|"
                        r"university|office|home|lake|mountains?|island|abroad|downtown)\b)"),
    "count": re.compile(r"\b(\d+(\.\d+)?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|"
                        r"twenty|thirty|fifty|hundred|thousand|dozen|once|twice|several|couple)\b", re.I),
    "who": re.compile(r"(\b(mother|mom|mum|father|dad|sister|brother|friend|friends|wife|husband|partner|"
                      r"boyfriend|girlfriend|son|daughter|kids|children|colleague|boss|teacher|coach|"
                      r"neighbou?r|grandma|grandpa|aunt|uncle|cousin|family|team)\b|(?<![.!?]\s)(?<!^)"
                      r"\b[A-Z][a-z]+\b)"),
    "why": re.compile(r"\b(because|since|so that|due to|as a result|reason|comes? from|caused|so i|"
                      r"in order to|to help|inspired|motivated)\b", re.I),
}
_REQUEST = re.compile(r"^\W*(can|could|would|will) (you|u)\b|^\W*(please|help me|tell me|let'?s|do you|did you|"
                      r"are you|have you|how (do|can|should|would) i|what should i|any (ideas|tips|suggestions))\b",
                      re.I)
_PLEASANTRY = re.compile(r"^\W*(sure|thanks|thank you|thx|congrat\w*|wow|aww+|ha(ha)*|no way|good (idea|luck)|"
                         r"great|nice|cool|awesome|amazing|hi|hey|hello|bye|see you|talk soon|of course|"
                         r"you'?re welcome|glad|sounds? (good|great|adorable|lovely)|that'?s (great|amazing|"
                         r"awesome|so cool|wonderful)|long time no see)\b", re.I)
_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset("a an the of to in on at for and or but is are was were be been am do does did has have had "
                  "what when where who whom whose why how which that this these those with by from as it its "
                  "i you he she they we my your his her their our me him them us about into after before "
                  "not no yes so if than then there here would could should will can may might did".split())


@dataclass(frozen=True)
class Weights:
    """How the parts of a unit's score weigh (see the module doc)."""

    rank: float = 1.0
    kind: float = 1.0
    overlap: float = 1.0
    session: float = 0.5
    pool: int = 10  # the best hits looked at


DEFAULT_WEIGHTS = Weights()


def question_kinds(question: str) -> list[str]:
    """The kinds a question asks for, in the order asked ("When ..., and where?" -> when, where);
    ["fact"] when it asks for none of them."""
    found = sorted(((m.start(), kind) for kind, rx in _ASKS.items() for m in [rx.search(question)] if m))
    kinds = [kind for _, kind in found]
    return list(dict.fromkeys(kinds)) or ["fact"]


def is_statement(text: str) -> bool:
    """False for a question, a request to the other speaker or a pleasantry: no fact to answer with."""
    t = text.strip()
    if not t or t.endswith("?") or _REQUEST.search(t):
        return False
    if _PLEASANTRY.search(t) and len(content_words(t)) <= 4:
        return False
    return True


def content_words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 1}


def unit_score(hit: Hit, rank: int, kind: str, question_words: dict[str, float], top_session: str,
               weights: Weights) -> float:
    """The unit's score for `kind` (see the module doc); `question_words` weighs each question
    word by how few of the looked-at units hold it."""
    text = hit.amu.text
    score = weights.rank / (1.0 + 0.5 * rank)
    if kind in _HOLDS and _HOLDS[kind].search(text):
        score += weights.kind
    total = sum(question_words.values())
    if total:
        score += weights.overlap * sum(question_words.get(w, 0.0) for w in content_words(text)) / total
    if hit.amu.session_id == top_session:
        score += weights.session
    return score


def sentence(hit: Hit, kind: str) -> str:
    """The unit's text as one answer sentence; a `when` answer with the unit's date."""
    text = hit.amu.text.strip().rstrip(".")
    stale = "no longer current" if hit.superseded_by else ""
    if kind == "when":
        return f"{text} ({format_date(hit.amu.timestamp)}{'; ' + stale if stale else ''})."
    return f"{text} ({stale})." if stale else f"{text}."


def kind_answer(question: str, hits: Sequence[Hit], max_sentences: int = 3,
                weights: Weights = DEFAULT_WEIGHTS) -> str:
    """The best statement among `hits` (best first) for each kind `question` asks, at most
    `max_sentences` distinct sentences; "" for no hits."""
    pool = [(i, h) for i, h in enumerate(hits[:weights.pool])]
    facts = [(i, h) for i, h in pool if is_statement(h.amu.text)] or pool
    facts = [(i, h) for i, h in facts if not h.superseded_by] or facts  # the current version of a fact
    if not facts:
        return ""
    held = [content_words(h.amu.text) for _, h in facts]
    words = {w: 1.0 - sum(w in c for c in held) / (len(held) + 1) for w in content_words(question)}
    top_session = facts[0][1].amu.session_id
    chosen: list[str] = []
    used: set[str] = set()
    for kind in question_kinds(question)[:max(1, max_sentences)]:
        best = max(facts, key=lambda ih: (unit_score(ih[1], ih[0], kind, words, top_session, weights)
                                          - (1.0 if ih[1].amu.amu_id in used else 0.0), -ih[0]))
        if best[1].amu.amu_id not in used:
            used.add(best[1].amu.amu_id)
            chosen.append(sentence(best[1], kind) + replaced(best[1], hits[:weights.pool]))
    return " ".join(chosen)


def replaced(hit: Hit, hits: Sequence[Hit]) -> str:
    """" It replaces: <the older version> (<date>; no longer current)." when the older version of
    the chosen fact is among `hits` (a fact that changed reads as such), else ""."""
    older = [h for h in hits if h.amu.amu_id in set(hit.supersedes)]
    return "".join(f" It replaces: {h.amu.text.rstrip('.')} ({format_date(h.amu.timestamp)}; no longer current)."
                   for h in older[:1])


def join_answer(hits: Sequence[Hit], n: int = 3) -> str:
    """The answer before issue 49: the first `n` hits' texts joined, each with its date."""
    return " ".join(f"{h.amu.text.rstrip('.')} ({format_date(h.amu.timestamp)}"
                    f"{'; no longer current' if h.superseded_by else ''})." for h in hits[:n])
