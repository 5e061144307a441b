"""The LLM supersession classifier: an LLM judges which older units a new fact replaces.

`LLMSupersession` offers the LLM (prompt `supersession.txt`) the candidates that
`etamem.facts.supersession.find_supersessions` proposes and its gate lets through, and reads a reply
`{"replaced": [{"id", "confidence"}]}` naming only the offered ids (`parse_reply`); an unusable reply
falls back to the rules (`RuleSupersession`). Kept apart from the rules so they import no LLM code.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime
from typing import Any, Sequence

import numpy as np

from etamem.facts.supersession import Candidate, RuleSupersession, SupersessionClassifier, is_fact, same_subject
from etamem.models.llm import cache_refs

logger = logging.getLogger(__name__)


LLM_GATES = ("rules", "slots", "all")


class LLMSupersession:
    """The LLM's judgement (prompt `supersession.txt`: JSON `{"replaced": [{"id", "confidence"}]}`);
    `fallback` (the rules) on an unusable reply. Which candidates the LLM sees (`gate`): "rules",
    those that pass the rules' subject test or are very similar (cosine >= 0.6), so most writes
    make no call; "slots", also those in the new fact's exclusive attribute slot (`slots`, an
    `etamem.facts.slots.AttributeSlots` over `encoder`: needs the vectors, `uses_vectors`); "all",
    every candidate `find_supersessions` proposes (a call for nearly every new fact)."""

    def __init__(self, llm: Any, fallback: SupersessionClassifier | None = None, *,
                 temperature: float | None = None, gate: str = "rules", slots: Any = None,
                 encoder: Any = None) -> None:
        if gate not in LLM_GATES:
            raise ValueError(f"supersession gate: expected one of {LLM_GATES}, got {gate!r}")
        if gate == "slots" and (slots is None or encoder is None):
            raise ValueError("supersession gate 'slots' needs the attribute slots and the text encoder")
        self.llm = llm
        self.fallback = fallback if fallback is not None else RuleSupersession()
        self.temperature = temperature
        self.gate, self.slots, self.encoder = gate, slots, encoder
        self.uses_vectors = gate == "slots"
        if gate == "slots":  # a slot's two values can be far apart
            self.min_similarity = slots.floor
        self.stats = {"calls": 0, "fallbacks": 0}

    def warm(self) -> None:
        """The fallback's models and the gate's slot prototypes loaded now (`Memory.warm`)."""
        warm = getattr(self.fallback, "warm", None)
        if warm is not None:
            warm()
        if self.gate == "slots":
            self.slots.warm(self.encoder)

    def offered(self, new_text: str, speaker: str, candidates: Sequence[Candidate],
                vector: np.ndarray | None = None) -> list[Candidate]:
        """The candidates the LLM is asked about (the `gate`); `vector`: the new unit's text vector."""
        facts = [c for c in candidates if is_fact(c.text)]
        if self.gate == "all":
            return facts
        in_slot: set[str] = set()
        with_vectors = [c for c in facts if c.vector is not None] if self.gate == "slots" and vector is not None else []
        if with_vectors:
            names = self.slots.shared(vector, np.stack([c.vector for c in with_vectors]), self.encoder)
            in_slot = {c.unit_id for c, name in zip(with_vectors, names) if name is not None}
        return [c for c in facts if c.similarity >= 0.6 or c.unit_id in in_slot
                or same_subject(new_text, c.text, speaker)]

    def classify(self, new_text: str, speaker: str, candidates: Sequence[Candidate],
                 vector: np.ndarray | None = None, at: datetime | None = None) -> list[tuple[str, float]]:
        """LLMUnavailable (no reply after the client's retries) propagates: the write stays pending.
        `vector`: the new unit's text vector (the "slots" gate); `at`: when it was said (unused)."""
        from etamem.models.llm import LLMError
        from etamem.models.prompt_files import render_prompt

        if not is_fact(new_text):
            return []
        pool = self.offered(new_text, speaker, candidates, vector)
        if not pool:
            return []
        # short ids: small models shorten or invent the long unit ids they are offered
        short = {str(i): c.unit_id for i, c in enumerate(pool, 1)}
        lines = "\n".join(f"- {i} (said {c.timestamp:%Y-%m-%d}): {c.text}" for i, c in zip(short, pool))
        prompt = render_prompt("supersession", new=new_text, speaker=speaker or "the speaker", candidates=lines)
        ids = list(short)
        self.stats["calls"] += 1
        kwargs = {} if self.temperature is None else {"temperature": self.temperature}
        try:  # the cache entry quotes the candidates: deleting one of their turns forgets it
            with cache_refs(*(ref for c in pool for ref in c.refs)):
                found = self.llm.complete_json([{"role": "user", "content": prompt}], stage="supersession",
                                               validate=lambda r: parse_reply(r, ids), schema=replaced_schema(ids),
                                               **kwargs)
            return [(short[uid], conf) for uid, conf in found]
        except (LLMError, ValueError) as exc:
            logger.warning("supersession: unusable LLM reply (%s); rule classifier", exc)
            self.stats["fallbacks"] += 1
            return self.fallback.classify(new_text, speaker, pool)


_CONFIDENCE = {"low": 0.3, "medium": 0.6, "high": 0.9}


def replaced_schema(ids: Sequence[str]) -> dict:
    """The JSON schema of a supersession reply naming only the offered `ids`."""
    item = {"type": "object", "properties": {"id": {"type": "string", "enum": list(ids)},
                                             "confidence": {"type": "string", "enum": list(_CONFIDENCE)}},
            "required": ["id", "confidence"]}
    return {"type": "object", "properties": {"replaced": {"type": "array", "items": item}}, "required": ["replaced"]}


def parse_reply(reply: Any, ids: Sequence[str]) -> list[tuple[str, float]]:
    """[(id, confidence)] from a reply `{"replaced": [{"id": ..., "confidence": ...}]}` or the bare
    list (`[]`: none replaced; text or parsed); ValueError when it is not that shape or names an
    id that was not offered."""
    if isinstance(reply, str):
        text = reply.strip()
        if text.startswith("["):
            reply = json.loads(text)
        else:
            start, end = text.find("{"), text.rfind("}")
            if start < 0 or end < start:
                raise ValueError("no JSON object in the reply")
            reply = json.loads(text[start:end + 1])
    items = reply.get("replaced") if isinstance(reply, dict) else reply  # a bare list: the items
    if not isinstance(items, list):
        raise ValueError('expected {"replaced": [...]}')
    out = []
    for item in items:
        uid = item.get("id") if isinstance(item, dict) else None
        if uid not in ids:
            raise ValueError(f"unknown unit id {uid!r}")
        conf = item.get("confidence", "medium")
        conf = _CONFIDENCE.get(conf, 0.6) if isinstance(conf, str) else float(conf)
        out.append((uid, max(0.0, min(1.0, conf))))
    return out


__all__ = ["LLM_GATES", "LLMSupersession", "parse_reply", "replaced_schema"]
