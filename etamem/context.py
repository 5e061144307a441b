"""What an agent reads from memory: hits with their source turns, and the prompt-ready context.

`with_sources` fills `Hit.source_turns` from a lookup of stored turns; `render_context` renders
hits as the text block an agent puts in its system prompt (template `prompts/context.txt`):
one numbered item per hit, best first, with the date it was said, and the source message
quoted under it when the unit is not simply that message.
"""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Callable, Iterable

from etamem.extraction.markers import strip_markers
from etamem.extraction.person_rewrite import capitalise, speaker_subject
from etamem.facts.current_first import status_note
from etamem.ingest.timeparse import format_date
from etamem.models.prompt_files import render_prompt
from etamem.records import Hit, Turn

QUOTE_CHARS = 300  # a source message longer than this is cut with an ellipsis in the context


def with_sources(hits: list[Hit], lookup: Callable[[Iterable[str]], dict[str, Turn]]) -> list[Hit]:
    """`hits` with `source_turns` set, in `source_turn_ids` order, and `metadata` (theirs merged
    in that order, `etamem.filters.unit_metadata`); `lookup(ids)` -> {id: Turn} (ids it cannot
    find are left out)."""
    ids = list(dict.fromkeys(t for h in hits for t in h.source_turn_ids))
    found = lookup(ids) if ids else {}
    out = []
    for h in hits:
        turns = tuple(found[t] for t in h.source_turn_ids if t in found)
        out.append(replace(h, source_turns=turns, metadata={k: v for t in turns for k, v in t.metadata.items()}))
    return out


def _quote(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= QUOTE_CHARS else text[:QUOTE_CHARS - 1].rstrip() + "…"


def render_context(hits: list[Hit], *, now: datetime | None = None) -> str:
    """The prompt-ready memory block for `hits` (best first, `source_turns` filled): a quote
    names its speaker as units do ("the user", a message's `name` with its role); a fact that
    changed says which item is current (`etamem.facts.current_first.status_note`); a fact said
    on several days says how often and when last (`etamem.facts.mentions`), each wording quoted
    once; an empty memory renders as a block that says so."""
    lines: list[str] = []
    quoted: set[str] = set()
    numbers = {h.amu.amu_id: i for i, h in enumerate(hits, 1)}
    for i, h in enumerate(hits, 1):
        note = status_note(h, numbers)  # a fact that changed: which item is current
        said = ""
        if len(h.source_turns) > 1 and len({t.timestamp.date() for t in h.source_turns}) > 1:  # a restated fact
            said = f"said {len(h.source_turns)} times, last on {format_date(max(t.timestamp for t in h.source_turns))}"
        notes = "; ".join(n for n in (note, said) if n)
        lines.append(f"{i}. [{format_date(h.amu.timestamp)}] {h.amu.text.strip()}" + (f" ({notes})" if notes else ""))
        same: set[str] = set()  # a repeat's wording quoted once ("I'm vegan." / "As I said, I'm vegan.")
        for t in h.source_turns:
            key = " ".join(strip_markers(t.text).lower().split())
            if t.turn_id in quoted or key in same or " ".join(t.text.split()) == " ".join(h.amu.text.split()):
                continue
            quoted.add(t.turn_id)
            same.add(key)
            who, role = speaker_subject(t.speaker, t.extra), speaker_subject(t.speaker)
            who = f"{who} ({role})" if who != role else capitalise(who)
            lines.append(f"   {who} said on {format_date(t.timestamp)}: \"{_quote(t.text)}\"")
    asked = f"; asked on {format_date(now)}" if now is not None else ""
    return render_prompt("context", count=len(hits), asked=asked,
                         items="\n".join(lines) or "(nothing remembered yet)").strip() + "\n"
