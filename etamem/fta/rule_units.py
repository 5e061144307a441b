"""The rule-based unit extractor (offline, deterministic): sentences of a segment rewritten in
the third person into units, and the rules deciding which carried unit a new one completes."""
from __future__ import annotations

import re
from typing import Any, Sequence

from etamem.extraction.extractors import (
    capitalise,
    content_words,
    is_salient,
    rewrite_first_person,
    speaker_name,
    split_sentences,
    strip_filler,
    turn_text,
)
from etamem.extraction.stems import topic_stems
from etamem.fta import rules
from etamem.fta.segmentation import Segment
from etamem.fta.unit_model import Candidate, Draft, FTAUnit, build_units
from etamem.records import Turn

_YOU_WE = re.compile(r"\b(?:you|your|yours|yourself|we|us|our)\b", re.IGNORECASE)


# --- rule extractor -----------------------------------------------------------------------------
def addressee_at(turns: Sequence[Turn], i: int) -> str | None:
    """The other speaker nearest to turns[i] (next turn first), as a display name."""
    me = turns[i].speaker
    for j in list(range(i + 1, len(turns))) + list(range(i - 1, -1, -1)):
        if turns[j].speaker != me:
            return speaker_name(turns[j].speaker)
    return None


def third_person_sentence(sentence: str, speaker: str, addressee: str | None, attribute: bool = False) -> str:
    """`sentence` with I/me/my -> `speaker` and you/your -> `addressee`; with `attribute`, a
    sentence that still does not name the speaker (imperatives, "we", plain descriptions) is
    prefixed "<speaker> said: " so that it stays self-contained."""
    out = capitalise(rewrite_first_person(sentence, speaker).strip())
    if addressee:
        out = capitalise(rules.rewrite_second_person(out, addressee))
    if attribute and not re.search(rf"\b{re.escape(speaker)}\b", out):
        out = f"{speaker} said: {out}"
    return out


class RuleUnitExtractor:
    """Offline extractor: per turn, filler-free sentences rewritten in the third person; a
    question with the other speaker's reply in the segment makes one question-answer unit; a
    question left unanswered at the segment end is a partial unit awaiting an answer; consecutive
    statements of a turn with the same content type and orientation form one unit. Times are
    resolved against the dialogue time, orientation and content type come from cue words
    (`rules`), affect from the injected `tagger` (`.tag(texts)`, e.g. VADER). A plan (future
    orientation) is `pending`, awaiting its outcome; `match_carried` decides completions.
    Deterministic."""

    def __init__(self, tagger: Any = None, *, min_words: int = 3) -> None:
        self.tagger = tagger
        self.min_words = min_words

    def extract(self, segment: Segment, turns: Sequence[Turn], carried: Sequence[FTAUnit] = ()) -> list[Candidate]:
        drafts = self._drafts(list(turns))
        units = build_units(drafts, self.tagger)
        out = []
        taken: set[int] = set()
        for unit in units:
            k = match_carried(unit, carried, segment, exclude=taken)
            if k is not None:
                taken.add(k)
            out.append(Candidate(unit, k))
        return out

    def _informative(self, sentence: str) -> bool:
        return len(content_words(sentence)) >= self.min_words

    def _drafts(self, turns: list[Turn]) -> list[Draft]:
        drafts: list[Draft] = []
        consumed: set[int] = set()  # turns whose statements went into a question-answer unit
        for i, turn in enumerate(turns):
            name = speaker_name(turn.speaker)
            other = addressee_at(turns, i)
            sentences = [s for s in (strip_filler(x) for x in split_sentences(turn_text(turn))) if s]
            questions = [s for s in sentences if s.rstrip().endswith("?")]
            statements = [s for s in sentences if not s.rstrip().endswith("?")]
            if i not in consumed:
                self._statement_drafts(drafts, statements, turn, name, other)
            asked = [q for q in questions if content_words(q)]
            if not asked:
                continue
            q_text = " ".join(third_person_sentence(q, name, other) for q in asked)
            reply = turns[i + 1] if i + 1 < len(turns) and turns[i + 1].speaker != turn.speaker else None
            if reply is None:
                if sum(len(content_words(q)) for q in asked) >= max(1, self.min_words - 1):
                    drafts.append(Draft(f"{name} asked: {q_text}", " ".join(asked), name, [turn],
                                         tuple(p for p in (name, other) if p), awaiting="answer"))
                continue
            r_name = speaker_name(reply.speaker)
            r_sent = [s for s in (strip_filler(x) for x in split_sentences(turn_text(reply))) if s]
            r_stmt = [s for s in r_sent if not s.rstrip().endswith("?")]
            answer = " ".join(third_person_sentence(s, r_name, name) for s in r_stmt)
            words = sum(len(content_words(q)) for q in asked) + sum(len(content_words(s)) for s in r_stmt)
            if not answer or words < self.min_words:
                continue  # small talk ("How are you?" - "Good!"): the reply is handled as a turn
            consumed.add(i + 1)
            drafts.append(Draft(f"{name} asked: {q_text} {r_name}: {answer}", " ".join(r_stmt), r_name,
                                 [turn, reply], tuple(dict.fromkeys((r_name, name)))))
        return drafts

    def _statement_drafts(self, drafts: list[Draft], statements: list[str], turn: Turn, name: str,
                          other: str | None) -> None:
        """One unit for the turn's statements (a turn is one speaker's act; LoCoMo's evidence is
        per turn), except that the speaker's own plans form a separate pending unit that awaits
        its outcome. A short sentence is kept beside the others when it names something
        (`is_salient`: "Her name is Pixel.") and dropped otherwise ("Sounds fun!"); the kept
        sentences of a unit need `min_words` content words together, so a turn of one short
        salient sentence alone makes no unit."""
        participants = [p for p in (name, other) if p]
        facts: list[str] = []
        plans: list[str] = []
        for s in statements:
            if not (self._informative(s) or is_salient(s, participants)):
                continue
            window = rules.resolve_event_time(s, turn.timestamp)
            orient = rules.orientation(s, window, turn.timestamp)
            (plans if rules.content_type(s, orient) == "homework_or_plan" else facts).append(s)
        for sents, plan in ((facts, False), (plans, True)):
            if not sents or not self._informative(" ".join(sents)):
                continue
            text = " ".join(sents)
            parts = (name,) + ((other,) if other and mentions_you(text) else ())
            drafts.append(Draft(third_person_sentence(text, name, other, attribute=True), text, name,
                                 [turn], parts, awaiting="outcome" if plan else ""))


def mentions_you(text: str) -> bool:
    return bool(_YOU_WE.search(text))


# --- carry-over -------------------------------------------------------------------------------
def match_carried(unit: FTAUnit, carried: Sequence[FTAUnit], segment: Segment | None = None,
                  exclude: set[int] | frozenset[int] = frozenset()) -> int | None:
    """Index of the carried unit that `unit` completes, by rules, else None:

    - a question awaiting an answer: `unit` is said by another participant in the first turn of
      the segment that follows;
    - a plan awaiting its outcome: `unit` is not itself a plan, is past/present/mixed, shares a
      participant and a topic word ("camping" in "will go camping" / "went camping").
    The latest matching carried unit wins."""
    names = frozenset(p.lower() for u in [unit, *carried] for p in u.participants)
    stems = topic_stems(unit.text, names)
    first_turn = segment.turn_ids[0] if segment is not None else None
    for k in range(len(carried) - 1, -1, -1):
        c = carried[k]
        if k in exclude or not c.carried:
            continue
        if c.awaiting == "answer":
            if first_turn is not None and unit.evidence[0].turn_ids[0] == first_turn and unit.speaker != c.speaker:
                return k
            continue
        if unit.awaiting or unit.time.orientation not in ("past", "present", "mixed"):
            continue
        if not set(unit.participants) & set(c.participants):
            continue
        if stems & topic_stems(c.text, names):
            return k
    return None
