"""The knobs of one hierarchical search (`SpaceIndex.search`) as one typed value, built from
`Config` once per search instead of passed as a keyword each (see docs/design.md, 'Query path')."""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any


@dataclass(frozen=True)
class SearchOptions:
    """How `SpaceIndex.search` routes, descends, merges and scores. The defaults are a bare
    index's; `from_config` gives a configured search's.

    Attributes:
        beam: beam width of the descent in each view (`Config.beam_width`).
        beta: BM25's share against cosine similarity, in [0, 1] (`Config.bm25_weight`).
        views: the views searched, a subset of ("event", "affect", "time").
        routing: how the budget is shared across views: "entropy" or "mean" (`Config.routing`).
        temperature: the softmax temperature of entropy routing (`Config.routing_temperature`).
        routing_candidates: the best leaves per view that routing reads (`Config.routing_candidates`).
        time_boost: the merge's bonus for units inside a question's time window (`Config.time_boost`).
        context_share: the weight of a unit's source turns in its score (`Config.context_share`).
        context_rows: a final leaf holding more units has only its best by unit text scored in
            context (`Config.context_max_rows`).
        flat: the best units of one exact cosine search that join the views' candidates
            (`Config.flat_candidates`; 0: none).
        flat_exact_max: up to this many units that search is exact (`Config.flat_exact_max`).
        lexical: how BM25 is put on [0, 1]: "minmax" or "ceiling" (`Config.bm25_norm`).
        merge_scoring: how the merge scores the union: "text", "view" or "rrf" (`Config.merge_scoring`).
        rrf_k: the fusion constant of "rrf" (`Config.rrf_k`).
    """

    beam: int = 10
    beta: float = 0.1
    views: tuple[str, ...] = ("event", "affect", "time")
    routing: str = "entropy"
    temperature: float = 0.05
    routing_candidates: int = 256
    time_boost: float = 0.1
    context_share: float = 0.0
    context_rows: int = 16384
    flat: int = 0
    flat_exact_max: int = 20_000
    lexical: str = "minmax"
    merge_scoring: str = "text"
    rrf_k: float = 10

    @classmethod
    def from_config(cls, cfg: Any, *, views: tuple[str, ...] | None = None,
                    routing: str | None = None) -> SearchOptions:
        """The options `cfg` (an `etamem.config.Config`) sets; `views` / `routing` override a call's."""
        return cls(beam=cfg.beam_width, beta=cfg.bm25_weight, views=tuple(views or cls.views),
                   routing=routing or cfg.routing, temperature=cfg.routing_temperature,
                   routing_candidates=cfg.routing_candidates, time_boost=cfg.time_boost,
                   context_share=cfg.context_share, context_rows=cfg.context_max_rows, flat=cfg.flat_candidates,
                   flat_exact_max=cfg.flat_exact_max, lexical=cfg.bm25_norm, merge_scoring=cfg.merge_scoring,
                   rrf_k=cfg.rrf_k)

    def replace(self, **changes: Any) -> SearchOptions:
        """A copy with `changes` (field names of this class; a wrong name is a TypeError)."""
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise TypeError(f"SearchOptions has no field {', '.join(sorted(unknown))}")
        return replace(self, **changes)
