"""Retrieval over views taken from two stores of one space (the `shared-affect` system).

The paper's Shared Affect variant keys both semantic views by the affective embedding and
leaves the Time view unchanged. `Memory` keys the Event tree and the Time forest by the same
text vectors, so the runner builds the `shared_affect` store (text encoder = the affective
embedding: its Event and Affect trees are what the variant needs) and reads the Time view,
the merge scoring over the union, the AMU BM25 and the raw-turn fallback from the `amu` store
(text-keyed, unchanged). Both stores hold the same units (same extractor, same ids).

Routing is one entropy routing over the three views, each view's query vector being the one
its keys need (affective for Event and Affect, text for Time); each view is then searched in
its own store with its routed budget (`SpaceIndex.search` on that view alone: the whole
budget goes to it), and the union is merged on the `amu` store's scale exactly as
`SpaceIndex.search` merges, then `search_space` applies the raw-turn fallback policy.

This reaches into the engine (`Memory.live_space`, `Memory.known_space`, `Memory.encode_queries`:
the engine's interface for the methods) and merges with `SpaceIndex.merge_found`: a benchmark-only
stopgap. The clean way is an engine option naming the representation that keys
the Event tree ("text" | "affect"), read by `SpaceViews.add` / `load`, `SpaceIndex` (the Event
hierarchy's vector column, its routing index's dimension, the Event query vector) and
`Memory.retrieve` (tag the query when the Event view needs it); one store would then hold the
variant.
"""
from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import numpy as np

from etamem.facts.current_first import in_store
from etamem.ingest.timeparse import parse_timestamp
from etamem.records import SearchResult
from etamem.retrieval import RetrievalResult, Scored, SpaceIndex, query_vector, route, search_space
from etamem.retrieval.options import SearchOptions
from etamem.retrieval.retriever import top_similarities
from etamem.retrieval.temporal import is_when_question, parse_time_window

SEMANTIC_VIEWS = ("event", "affect")


class SplitIndex:
    """A `SpaceIndex` look-alike for `search_space`: Event and Affect from `semantic` (whose text
    vectors are affective), Time, the AMU rows and the merge from `base`."""

    def __init__(self, semantic: SpaceIndex, base: SpaceIndex):
        missing = set(semantic.amu_of) ^ set(base.amu_of)
        if missing:
            raise ValueError(f"the two stores hold different units ({len(missing)} ids differ, e.g. "
                             f"{sorted(missing)[:3]}); build both with the same extractor")
        self.semantic, self.base = semantic, base
        self.amu_of = base.amu_of
        self.units_of_turn = base.units_of_turn  # for `search.reply_finder`

    def search(self, query: str, q_text: np.ndarray, q_affect: np.ndarray, k: int,
               options: SearchOptions | None = None, *, now: datetime | None = None, trace: bool = False,
               context=None, dialogue=None, allowed=None, complete: int = 0) -> RetrievalResult:
        """Route `k` across the options' `views`, search each in its store, merge on the base store's
        scale (`options`, `context`, `dialogue`: as in `SpaceIndex.search`; the
        exact candidates come from the base store's text vectors; `merge_scoring`, `rrf_k`: as there,
        the Event view's similarity being affective here). Filters (`allowed`, `complete`)
        are not supported by these ablation systems: ValueError."""
        if allowed is not None or complete:
            raise ValueError("filters: the bench's split-store systems search without filters")
        o = options or SearchOptions()
        views, beta, lexical, flat = o.views, o.beta, o.lexical, o.flat
        source = {v: self.semantic if v in SEMANTIC_VIEWS else self.base for v in views}
        qv = {v: q_affect if v in SEMANTIC_VIEWS else q_text for v in views}
        sims = {v: top_similarities(source[v].routing[v], qv[v], top=o.routing_candidates) for v in views}
        plan = route(sims, k, mode=o.routing, temperature=o.temperature)
        found: dict[str, list[Scored]] = {}
        for v in views:
            budget = plan.budgets.get(v, 0)
            if not budget:
                found[v] = []
                continue
            one = source[v].search(query, qv[v], q_affect, budget, o.replace(views=(v,), flat=0, merge_scoring="text"),
                                   now=now, context=context)
            found[v] = [Scored(key, score, 0.0, 0.0) for key, score, _ in one.ranked]
        if flat > 0:
            found["flat"] = self.base.flat_candidates(q_text, flat, o.flat_exact_max)
        found = self.base.with_replies(found, dialogue)
        window = parse_time_window(query, now)
        q_ids = self.base.amu_lex.query_ids(query)
        norm = self.base.lexical_normaliser(lexical, self.base.amu_lex, q_ids)
        ranked = self.base.merge_found(found, q_text, q_ids, beta, window, is_when_question(query), o.time_boost, context,
                                  o.context_share, dialogue, norm, q_affect=q_affect, scoring=o.merge_scoring,
                                  rrf_k=o.rrf_k, keyed_by={"event": "affect"})
        return RetrievalResult(ranked, plan, window)


def split_retrieve(semantic_mem, base_mem, query: str, space: str, *, top_k: int, now: str | None,
                   views: tuple[str, ...], routing: str | None, fallback: bool, config) -> SearchResult:
    """`Memory.retrieve` for a `SplitIndex` over the two Memories' live spaces (`config`: the
    settings of this search; the raw-turn fallback searches the base store's turns)."""
    when = None if now is None else parse_timestamp(now, config.default_timezone, field="now")
    sem_live = semantic_mem.live_space(semantic_mem.known_space(space))
    base_live = base_mem.live_space(base_mem.known_space(space))
    with base_live.rw.read():
        named = base_live.index.named_speakers(query)
    q_text = query_vector(base_mem.encode_queries, query, named, config.query_name_mix)
    q_affect = base_mem.affect_tagger.tag([query]).embeddings[0]
    with sem_live.rw.read(), base_live.rw.read():
        index = SplitIndex(sem_live.index, base_live.index)
        result = search_space(index, base_live.turns, query, q_text, q_affect, top_k, config, base_live.name,
                              now=when, views=views, routing=routing, fallback=fallback, named=named)
    if not (config.current_first and result.hits):
        return result
    return replace(result, hits=in_store(base_mem.store, base_live.name, query, result.hits,
                                         windowed=result.window is not None, turn_units=base_live.units_of_turns))
