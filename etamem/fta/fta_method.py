"""FTA-Mem as a method (`etamem.method.Method`), and its units (`FTAUnits`), which ETAMem's
views can also search (`units="fta"`)."""
from __future__ import annotations

import threading
from datetime import datetime
from typing import TYPE_CHECKING

from etamem.context import render_context
from etamem.records import Answer, Hit, SearchResult
from etamem.threads import blas_threads

if TYPE_CHECKING:
    from etamem.engine import Engine
    from etamem.live.space import LiveSpace


class FTAUnits:
    """Turns made into FTA units by boundary-aware segmentation, linked to the space's units
    (`etamem.fta.builder.build_and_link`; the segment of a running session stays pending), with
    the builder (`etamem.fta.builder.FTABuilder`) made on the first write from the engine's models."""

    kind = "fta"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._builder = None

    def builder(self, engine: Engine):
        """The FTA-Mem construction components (`etamem.fta.builder.FTABuilder`) of this method."""
        with self._lock:
            if self._builder is None:
                from etamem.fta.builder import FTABuilder

                self._builder = FTABuilder(engine.config, engine.text_encoder, engine.affect_tagger, engine.llm)
            return self._builder

    def build(self, engine: Engine, live: LiveSpace, turns, complete):
        from etamem.fta.builder import build_and_link

        return build_and_link(self.builder(engine), engine.store, live, turns, complete, engine.config,
                              engine.timed)

    def forget_extras(self, store, space: str, units, dropped, rewritten):
        """What forgetting changes in the space's other FTA rows (`etamem.fta.builder.forget_extras`)."""
        from etamem.fta.builder import forget_extras

        return forget_extras(store, space, units, dropped, rewritten)

    def history(self, store, space: str, unit_id: str) -> list | None:
        """The versions of a stored FTA unit (`etamem.fta.builder.unit_history`: `FTAUnit`s with
        their lifecycle); None when `unit_id` is no FTA unit of the space."""
        if not store.unit_fields(space, [unit_id]):
            return None
        from etamem.fta.builder import unit_history

        return unit_history(store, space, unit_id)

    def warm(self, engine) -> None:
        """See `Units.warm`: nothing beyond the models `Memory.warm` loads."""


class FTAMethod:
    """FTA-Mem's search (`etamem.fta.search.search_fta`, after the LLM's query rewrite when one
    is configured: the open session's turns that no unit cites yet are ranked with the units as
    provisional hits, `views == ("provisional",)`), answers and four-section packet."""

    name = "fta"

    def __init__(self, units):
        self.units = units

    def check_readable(self, space: str, stored_kind: str | None) -> None:
        if stored_kind == "amu":
            raise ValueError(f"space {space!r} holds AMUs, not FTA units: search it with method='etamem'")

    def search(self, engine: Engine, query: str, space: str, k: int, when: datetime | None, *,
               views: tuple[str, ...], routing: str | None, fallback: bool, trace: bool,
               filters=None) -> SearchResult:
        from etamem.fta.packet import rewrite_query
        from etamem.fta.search import prepare_provisional, search_fta

        live = engine.readable_space(space)
        llm, config = engine.llm, engine.config
        if config.fta_question_only:  # the paper's question-only baseline: no memory at all
            return SearchResult([], {"fta": 1.0}, {"fta": k}, {})
        text = rewrite_query(llm, query, now=when) if llm is not None and config.fta_rewrite else query
        q_vec = engine.encode_query(text)  # models run outside the space's locks
        polarity = engine.affect_tagger.tag([query]).polarities[0]
        provisional = prepare_provisional(engine.store, live.name, engine.affect_tagger, engine.encode_queries,
                                          anchors=config.fta_anchors)
        pending = engine.store.count_pending(live.name)
        with live.rw.read(), blas_threads(config.blas_threads):
            return search_fta(live, engine.store, text, q_vec, k, config, now=when, polarity=polarity,
                              trace=trace, pending=pending, provisional=provisional, filters=filters)

    def answer(self, engine: Engine, question: str, space: str, result: SearchResult, when: datetime | None) -> Answer:
        from etamem.fta.search import answer_fta

        return answer_fta(question, engine.store, space, result.hits, engine.config, engine.llm, when)

    def context(self, engine: Engine, space: str, hits: list[Hit], when: datetime | None) -> str:
        if not hits:
            return render_context(hits, now=when)
        from etamem.fta.search import packet_for

        return packet_for(engine.store, space, hits, engine.config)
