"""The memory an adapter puts beside the message it is answering, without that message.

Agent frameworks store the user's message before the model call (the OpenAI Agents SDK's
Runner saves the turn's input to the session first), so a search for it finds it: it came back
as memory #1 for itself ("1. Where do I live now?  2. The user just moved to Lisbon."). The
adapters ask `answering_context`: the best `top_k` memories for the message, leaving out every
hit whose source turns all say exactly that message (its raw turn and its own units; case and
spacing ignored).
"""
from __future__ import annotations

import re

from etamem.ingest.inputs import validate_top_k
from etamem.memory import Memory
from etamem.records import Hit, MemoryContext

__all__ = ["SPARE_HITS", "answering_context", "is_the_message"]

SPARE_HITS = 4  # hits asked for beyond top_k: the message's raw turn and its units, left out
_MAX_TOP_K = 10_000
_SPACE_RE = re.compile(r"\s+")


def _plain(text: str) -> str:
    return _SPACE_RE.sub(" ", text).strip().casefold()


def is_the_message(hit: Hit, message: str) -> bool:
    """Whether every source turn of `hit` says `message` (case and spacing ignored)."""
    said = _plain(message)
    return bool(hit.source_turns) and all(_plain(t.text or "") == said for t in hit.source_turns)


def answering_context(memory: Memory, message: str, space: str, top_k: int | None = None) -> MemoryContext:
    """`Memory.context_packet` for `message` without `message` itself (`is_the_message`): the best
    `top_k` (default `Config.context_top_k`) of the others, rendered as `context` renders them."""
    k = memory.config.context_top_k if top_k is None else validate_top_k(top_k)
    packet = memory.context_packet(message, space, top_k=min(k + SPARE_HITS, _MAX_TOP_K))
    kept = [h for h in packet.hits if not is_the_message(h, message)][:k]
    if len(kept) == len(packet.hits):
        return packet
    return MemoryContext(memory.method.context(memory, memory.space_name(space), kept, None), kept)
