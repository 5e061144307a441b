"""Grounded answers: a context packet from hits and source turns, rendered into the answer
prompt for the configured style; without an LLM, the best stated fact for the question's kind. `with_raw_turns`
and `space_time_summaries` read a space of the engine for them (whichever method searches it)."""
from __future__ import annotations

import logging
import re
from datetime import datetime
from typing import TYPE_CHECKING

from etamem.ingest.timeparse import format_date
from etamem.models.prompt_files import render_prompt
from etamem.models.tokens import pack
from etamem.offline_answer import kind_answer
from etamem.records import Answer, Hit, StageCost, Turn

if TYPE_CHECKING:
    from etamem.engine import Engine

log = logging.getLogger(__name__)

# the source-turn section of an answer prompt whose memory lines are the turns themselves
TURNS_ARE_MEMORIES = "(the memories above are the conversation turns themselves)"
NO_LLM_NOTE = ("no LLM is configured: returning the best stated fact for the question's kind "
               "(set ETAMEM_LLM_MODEL and OPENAI_BASE_URL / OPENAI_API_KEY for generated answers)")


_WORD = re.compile(r"\w+")
# words a rewrite of a turn into a unit writes in (the speaker's name for "I", dates resolved)
_REWRITE_WORDS = frozenset(
    "he she they his her hers their theirs him them s the a an and is was were has had will would of others "
    "user assistant week last next january february march april may june july august september october "
    "november december monday tuesday wednesday thursday friday saturday sunday".split())


def restates(text: str, sources: list[Turn]) -> bool:
    """True when `text` says nothing its source turns do not: each of its words is in their text
    or speakers' names, a number, a third-person form (-s) of such a word, or one of the words a
    rewrite into a unit writes in (pronouns, resolved dates). False without sources."""
    if not sources:
        return False
    known = {w for t in sources for w in _WORD.findall(f"{t.speaker} {t.text}".lower())}
    return all(w in known or w in _REWRITE_WORDS or w.isdigit() or (w.endswith("s") and w[:-1] in known)
               for w in _WORD.findall(text.lower()))


def format_memories(hits: list[Hit], sources: dict[str, Turn] | None = None) -> str:
    """One line per hit, chronological: `[8 May 2023] (flat) Caroline went to ...`, with
    `[no longer current]` / `[current; replaces an earlier memory]` on facts that changed.
    With `sources` (turn id -> Turn, shown in the prompt's source-turn section), a line that
    only restates its source turns (`restates`) and carries no such note is left out."""
    if sources:
        hits = [h for h in hits if h.superseded_by or h.supersedes
                or not restates(h.amu.text, [sources[t] for t in h.source_turn_ids if t in sources])]
        if not hits:
            return "(their source turns below say them in full)"
    ordered = sorted(hits, key=lambda h: (h.amu.timestamp, h.amu.amu_id))

    def note(h: Hit) -> str:
        if h.superseded_by:
            return " [no longer current: a later memory replaces it]"
        return " [current; replaces an earlier memory]" if h.supersedes else ""

    return "\n".join(f"[{format_date(h.amu.timestamp)}] ({', '.join(h.views)}) {h.amu.text}{note(h)}"
                     for h in ordered) or "(none)"


def format_source_turns(hits: list[Hit], sources: dict[str, Turn]) -> str:
    seen: list[str] = []
    for h in sorted(hits, key=lambda h: (h.amu.timestamp, h.amu.amu_id)):
        seen.extend(t for t in h.source_turn_ids if t in sources and t not in seen)
    return "\n".join(
        f"[{format_date(sources[t].timestamp)}] {t} {sources[t].speaker}: {sources[t].text}" for t in seen
    ) or "(none)"


def usage_delta(before: dict[str, StageCost], after: dict[str, StageCost]) -> dict[str, StageCost]:
    deltas = {stage: cost - before.get(stage, StageCost()) for stage, cost in after.items()}
    return {stage: d for stage, d in deltas.items() if d != StageCost()}


MISSING = ("not mentioned", "don't have that information", "do not have that information", "no information")


def says_missing(text: str) -> bool:
    """True when an answer reports that the memories lack the information."""
    low = text.lower()
    return any(m in low for m in MISSING)


def turn_lines(hits: list[Hit], sources: dict[str, Turn]) -> list[tuple[tuple[datetime, str], str]]:
    """The hits' source turns in rank order, each once, as ((time, id), line): `[8 May 2023] (turn)
    Caroline: text`, noted `[no longer current ...]` when every hit from that turn is superseded
    and `[current; replaces ...]` when one of them replaces an earlier memory; a hit with no stored
    source turn keeps its unit text. `Config.answer_context` "turns"."""
    order: dict[str, list[Hit]] = {}
    for h in hits:
        ids = [t for t in h.source_turn_ids if t in sources] or [f"unit:{h.amu.amu_id}"]
        for t in ids:
            order.setdefault(t, []).append(h)
    lines = []
    for t, group in order.items():
        if t in sources:
            turn = sources[t]
            when, body = turn.timestamp, f"(turn) {turn.speaker}: {turn.text}"
        else:
            when, body = group[0].amu.timestamp, f"({', '.join(group[0].views)}) {group[0].amu.text}"
        body = f"[{format_date(when)}] {body}"
        if all(h.superseded_by for h in group):
            body += " [no longer current: a later memory replaces it]"
        elif any(h.supersedes for h in group):
            body += " [current; replaces an earlier memory]"
        lines.append(((when, t), body))
    return lines


def compose_answer(question: str, hits: list[Hit], sources: dict[str, Turn], *, llm, style: str,
                   question_date: datetime | None, n_sentences: int = 3, time_summaries: str = "",
                   memory_lines: str = "distinct", context: str = "packet") -> Answer:
    """Answer `question` from `hits` (best first). `sources` maps turn ids to stored turns;
    `time_summaries` is the Time-view section of the context packet; `memory_lines` "distinct"
    leaves out memory lines that only restate their source turns (`format_memories`), "all" not;
    `context` "packet" (memory lines, source turns, Time context) or "turns" (the hits' source
    turns only, `turn_lines`: cut in rank order to the model's context, shown oldest first);
    `style` "short" reads turns whatever `context` says."""
    if llm is None:  # the best statement for each kind asked (a date for when, ...: etamem.offline_answer)
        text = kind_answer(question, hits, n_sentences)
        return Answer(text=text or "No memories found.", hits=hits, llm_used=False, note=NO_LLM_NOTE)
    if context == "turns" or style == "short":  # the short prompt has no source-turn or Time section
        lines = turn_lines(hits, sources)
        time_summaries = ""

        def sections(k: int, summaries: str) -> tuple[str, str, str]:  # memories, source turns, Time context
            return "\n".join(body for _, body in sorted(lines[:k])) or "(none)", TURNS_ARE_MEMORIES, "(none)"
        n = len(lines)
    else:
        def sections(k: int, summaries: str) -> tuple[str, str, str]:
            return (format_memories(hits[:k], sources if memory_lines == "distinct" else None),
                    format_source_turns(hits[:k], sources), summaries or "(none)")
        n = len(hits)

    def render(k: int, summaries: str) -> str:
        memories, source_turns, time_text = sections(k, summaries)
        return render_prompt(f"answer_{style}", question=question, memories=memories, source_turns=source_turns,
                             time_summaries=time_text,
                             question_date=format_date(question_date) if question_date else "unknown")

    budget = llm.prompt_budget() if hasattr(llm, "prompt_budget") else None  # test doubles have none
    if budget is None:
        prompt = render(n, time_summaries)
    else:  # the best evidence that fits the model's context (an overflow is a 400 no retry cures),
        # then as much of the Time context as still fits: summaries never push evidence out
        summary_lines = time_summaries.splitlines() if time_summaries else []
        prompt, kept, kept_lines = pack(render, n, summary_lines, budget, llm.tokens.count)
        if kept < n or kept_lines < len(summary_lines):
            log.warning("answer: the best %d of %d memories and %d of %d Time context lines fit the model's "
                        "context of %d tokens (%d for the prompt); the rest left out", kept, n, kept_lines,
                        len(summary_lines), llm.context_tokens, budget)
    before = llm.usage()
    text = llm.complete([{"role": "user", "content": prompt}], stage="answer").strip()
    return Answer(text=text, hits=hits, llm_used=True, cost=usage_delta(before, llm.usage()))


def time_summaries(forest, hits: list[Hit]) -> str:
    """Summaries of the day and week nodes of `forest` (a TimeForest) above the hits' sessions,
    oldest first, one `<node>: <summary>` line each (the Time view's part of an answer prompt)."""
    keys: list[str] = []
    for h in sorted(hits, key=lambda h: h.amu.timestamp):
        node = f"S:{h.amu.session_id}"
        if node not in forest.nodes:
            continue
        for up in forest.path(node)[1:3]:  # day, week
            if up not in keys:
                keys.append(up)
    lines = [f"{k[2:]}: {forest.nodes[k].summary}" for k in keys if forest.nodes[k].summary]
    return "\n".join(lines)


# --- over a space of the engine (any kind of units): what an answer asks again with, and the Time view's part
def with_raw_turns(engine: Engine, question: str, hits: list[Hit], space: str, filters=None) -> list[Hit]:
    """`hits` (as many) with the space's best raw turns fused in by the fallback policy
    (`fallback_fusion`), whatever the confidence; only turns `filters` (an
    `etamem.filters.UnitFilter`) lets through when given (`Memory.with_raw_turns`, and ETAMem's
    answer when the LLM says the memories lack the answer)."""
    from etamem.context import with_sources
    from etamem.retrieval import with_fallback

    live = engine.live_space(engine.known_space(space))
    with engine.scoped(live.name):
        q_text = engine.encode_query(question)  # models run outside the space's locks
    with live.rw.read():
        allowed = None if filters is None else filters.turn_mask(live.turns.turns)
        fused = with_fallback(hits, live.turns, question, q_text, len(hits), engine.config, live.name,
                              allowed=allowed)
    return with_sources(fused, lambda ids: engine.turns_by_id(live.name, ids))


def space_time_summaries(engine: Engine, space: str, hits: list[Hit]) -> str:
    """Summaries of the day and week nodes the hits' sessions hang under in the space's Time
    view, oldest first (`time_summaries`; `Memory.time_summaries`)."""
    live = engine.live_space(engine.space_name(space))
    with live.rw.read():
        return time_summaries(live.views.time, hits)
