"""ETAMem as a method (`etamem.method.Method`): units searched through the Event, Affect and
Time views (entropy routing, hierarchical beam search, the raw-turn fallback) and answered from
an evidence packet with the Time view's summaries."""
from __future__ import annotations

import logging
from datetime import datetime
from typing import TYPE_CHECKING

from etamem.context import render_context
from etamem.records import Answer, Hit, SearchResult, StageCost
from etamem.threads import blas_threads

if TYPE_CHECKING:
    from etamem.engine import Engine

log = logging.getLogger(__name__)


class ViewsMethod:
    """ETAMem's search over its views, with `units` (AMUs, or FTA units with `units="fta"`)."""

    name = "etamem"

    def __init__(self, units):
        self.units = units

    def check_readable(self, space: str, stored_kind: str | None) -> None:
        if stored_kind == "fta" and self.units.kind != "fta":
            raise ValueError(f"space {space!r} holds FTA units: search it with method='fta' "
                             "(or units='fta' for ETAMem's views over them)")

    def search(self, engine: Engine, query: str, space: str, k: int, when: datetime | None, *,
               views: tuple[str, ...], routing: str | None, fallback: bool, trace: bool,
               filters=None) -> SearchResult:
        from etamem.retrieval import query_vector, search_space

        live = engine.readable_space(space)
        with live.rw.read():
            named = live.index.named_speakers(query)
        # models run outside the space's locks; the text vector mixes in the query without the names
        q_text = query_vector(engine.encode_queries, query, named, engine.config.query_name_mix)
        q_affect = engine.affect_tagger.tag([query]).embeddings[0] if "affect" in views else q_text
        pending = engine.store.count_pending(live.name)
        if pending:
            log.info("space %s: %d turns are pending (not searchable until add/flush processes them)",
                     live.name, pending)
        with live.rw.read(), blas_threads(engine.config.blas_threads):
            return search_space(live.index, live.turns, query, q_text, q_affect, k, engine.config, live.name,
                                now=when, views=views, routing=routing, fallback=fallback, trace=trace,
                                pending=pending, named=named, filters=filters)

    def answer(self, engine: Engine, question: str, space: str, result: SearchResult, when: datetime | None) -> Answer:
        """The evidence answer (an LLM's when one is configured); asked again with raw turns
        fused in when the LLM says the memories lack the answer."""
        from etamem.answering import says_missing, with_raw_turns

        ans = self._compose(engine, question, space, result.hits, when)
        if ans.llm_used and says_missing(ans.text) and not result.fallback_used:
            hits = with_raw_turns(engine, question, result.hits, space, result.filters)
            retry = self._compose(engine, question, space, hits, when)
            cost = {k: ans.cost.get(k, StageCost()) + retry.cost.get(k, StageCost())
                    for k in set(ans.cost) | set(retry.cost)}
            ans = Answer(retry.text, retry.hits, True, "asked again with raw turns (fallback)", cost)
        return ans

    def context(self, engine: Engine, space: str, hits: list[Hit], when: datetime | None) -> str:
        return render_context(hits, now=when)

    @staticmethod
    def _compose(engine: Engine, question: str, space: str, hits: list[Hit], when: datetime | None) -> Answer:
        from etamem.answering import compose_answer, space_time_summaries

        sources = {t.turn_id: t for h in hits for t in h.source_turns}
        packet = engine.config.answer_context == "packet"
        return compose_answer(question, hits, sources, llm=engine.llm, style=engine.config.answer_style,
                              question_date=when, n_sentences=engine.config.answer_evidence_sentences,
                              time_summaries=space_time_summaries(engine, space, hits) if packet else "",
                              memory_lines=engine.config.answer_memory_lines, context=engine.config.answer_context)
