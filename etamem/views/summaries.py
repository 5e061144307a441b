"""Node summaries with an LLM (stage "summarise"); the trees fall back to extractive
summaries (member texts nearest the centroid) when no LLM is configured."""
from __future__ import annotations

import logging

from etamem.models.prompt_files import render_prompt

log = logging.getLogger(__name__)

MAX_CHILD_CHARS = 1500  # per child summary in the prompt


class LLMSummariser:
    """Callable `(child_texts, rep_texts) -> summary` backed by an LLM client; if a call
    fails, the extractive summary is used for that node and counted in `failures`."""

    def __init__(self, llm, kind: str = "memory"):
        self.llm, self.kind = llm, kind
        self.calls = 0
        self.failures = 0

    def __call__(self, child_texts: list[str], rep_texts: list[str]) -> str:
        texts = [t[:MAX_CHILD_CHARS] for t in child_texts if t]
        children = "\n".join(f"{i}. {t}" for i, t in enumerate(texts, 1)) or "(none)"  # numbered contents
        prompt = render_prompt("summarise", kind=self.kind, children=children)
        self.calls += 1
        try:
            return self.llm.complete([{"role": "user", "content": prompt}], stage="summarise").strip()
        except Exception as exc:  # the node keeps an extractive summary; construction goes on
            self.failures += 1
            log.warning("summary call failed (%s); using the extractive summary", exc)
            return " ".join(rep_texts)
