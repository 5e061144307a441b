"""One search of one space as `Memory.search` runs it (DESIGN §8): the views' routed beam
search, then the raw-turn fallback policy. Pure reads of the indexes handed in; the caller
holds the space's read lock and has encoded the query."""
from __future__ import annotations

from datetime import datetime

import numpy as np

from ..types import Hit, SearchResult
from .fallback import TurnIndex, confidence, with_fallback
from .retriever import SpaceIndex


def search_space(index: SpaceIndex, turns: TurnIndex, query: str, q_text: np.ndarray, q_affect: np.ndarray, k: int,
                 cfg, space: str, *, now: datetime | None = None, views: tuple[str, ...] = ("event", "affect", "time"),
                 routing: str | None = None, fallback: bool = True, trace: bool = False,
                 pending: int = 0) -> SearchResult:
    """Best `k` hits for the query (q_text: (d_t,), q_affect: (d_a,) float32 unit vectors).

    `k` is shared across `views` by `routing` (default `cfg.routing`); when `fallback` is on and
    the retrieval confidence is below `cfg.fallback_threshold` (or nothing was found), raw turns
    are fused in (`with_fallback`). `pending` (turns stored but not yet extracted) is reported
    in the result, never processed here.
    """
    result = index.search(query, q_text, q_affect, k, beam=cfg.beam_width, beta=cfg.bm25_weight,
                          routing=routing or cfg.routing, temperature=cfg.routing_temperature, now=now,
                          views=views, time_boost=cfg.time_boost, routing_candidates=cfg.routing_candidates,
                          trace=trace)
    amu_of = index.amu_of
    hits = [Hit(amu=amu_of[a], score=s, views=v, source_turn_ids=amu_of[a].source_turn_ids)
            for a, s, v in result.ranked[:k]]
    used, conf = False, None
    if fallback:
        conf, found = confidence(hits, turns, query, q_text, cfg)
        used = conf < cfg.fallback_threshold
        if used:
            hits = with_fallback(hits, turns, query, q_text, k, cfg, space, found)
    window = None if result.window is None else (result.window.start, result.window.end)
    return SearchResult(hits=hits, weights=result.routing.weights, budgets=result.routing.budgets,
                        entropies=result.routing.entropies, window=window, fallback_used=used, confidence=conf,
                        traces=result.traces, pending_turns=pending)
