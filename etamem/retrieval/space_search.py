"""One search of one space as `Memory.search` runs it (see docs/design.md, 'Query path'): the views' routed beam
search, then the raw-turn fallback policy. Pure reads of the indexes handed in; the caller
holds the space's read lock and has encoded the query."""
from __future__ import annotations

from datetime import datetime

import numpy as np

from etamem.records import Hit, SearchResult
from etamem.retrieval.dialogue import DialogueScoring, RepliesFn
from etamem.retrieval.fallback import TurnIndex, confidence, with_fallback
from etamem.retrieval.lexical import share_of_ceiling
from etamem.retrieval.options import SearchOptions
from etamem.retrieval.retriever import SpaceIndex


def turn_context(index: SpaceIndex, turns: TurnIndex, query: str, q_text: np.ndarray, cfg):
    """AMU ids -> their (first) source turns' context scores (`TurnIndex.context`) for this
    query, computed once per turn (the beams and the merge ask for the same turns), or None
    when `cfg.context_share` is 0."""
    if cfg.context_share <= 0 or not len(turns):
        return None
    q_ids = turns.query_ids(query)
    amu_of = index.amu_of
    known: dict[str, tuple[float, float]] = {}

    def context(amu_ids: list[str]) -> tuple[np.ndarray, np.ndarray]:
        wanted = [amu_of[a].source_turn_ids[0] for a in amu_ids]
        new = list(dict.fromkeys(t for t in wanted if t not in known))
        if new:
            dense, lexical = turns.context(new, q_text, q_ids, prev=cfg.context_prev, after=cfg.context_next,
                                           lexical_prev=cfg.context_lexical_prev, impute=cfg.context_impute)
            known.update(zip(new, zip(dense.tolist(), lexical.tolist())))
        pairs = np.array([known[t] for t in wanted], np.float32).reshape(-1, 2)
        return pairs[:, 0], pairs[:, 1]
    if cfg.long_turn_words > 0:
        words: dict[str, int] = {}

        def shares(amu_ids: list[str], share: float) -> np.ndarray:
            """A unit's own share shrinks as its source turn outgrows `long_turn_words`."""
            out = np.empty(len(amu_ids), np.float32)
            for i, a in enumerate(amu_ids):
                t = amu_of[a].source_turn_ids[0]
                if t not in words:
                    turn = turns.turn(t)
                    words[t] = 0 if turn is None else len(turn.text.split())
                out[i] = 1.0 - (1.0 - share) * min(1.0, cfg.long_turn_words / max(words[t], 1))
            return out
        context.shares = shares
    if cfg.bm25_norm == "ceiling":  # a turn and its previous one at full weight reach the ceiling
        ceiling = turns.lexical_ceiling(q_ids) * (1.0 + cfg.context_lexical_prev)
        context.norm = lambda raw: share_of_ceiling(raw, ceiling)
    return context


def reply_finder(index: SpaceIndex, turns: TurnIndex) -> RepliesFn:
    """AMU ids -> the AMUs citing the reply to each: the next live turn of the unit's (last) source
    turn in its session when another speaker says it (`TurnIndex.neighbour`), in order."""
    def replies(amu_ids: list[str]) -> list[str]:
        out: list[str] = []
        for a in amu_ids:
            amu = index.amu_of[a]
            nxt = turns.neighbour(amu.source_turn_ids[-1], 1) if amu.source_turn_ids else None
            reply = None if nxt is None else turns.turn(nxt)
            if reply is not None and reply.speaker != amu.speaker:
                out.extend(index.units_of_turn.get(nxt, ()))
        return list(dict.fromkeys(out))
    return replies


def dialogue_scoring(index: SpaceIndex, turns: TurnIndex, named: tuple[str, ...], cfg) -> DialogueScoring:
    """The dialogue-aware re-scoring of `cfg` for a query naming the speakers `named`."""
    return DialogueScoring(named=tuple(named), question_penalty=cfg.question_penalty, speaker_boost=cfg.speaker_boost,
                           self_boost=cfg.self_boost,
                           replies=reply_finder(index, turns) if cfg.follow_replies and len(turns) else None)


def turn_diverse(hits: list[Hit]) -> list[Hit]:
    """The hits whose first source turn no better hit has cited, in rank order, then the rest in
    rank order: the first k hits cover as many distinct turns as they can (the many sentence units
    of one long reply no longer fill a page)."""
    seen: set[str] = set()
    first, later = [], []
    for h in hits:
        key = h.source_turn_ids[0] if h.source_turn_ids else h.amu.amu_id
        (later if key in seen else first).append(h)
        seen.add(key)
    return first + later


def search_space(index: SpaceIndex, turns: TurnIndex, query: str, q_text: np.ndarray, q_affect: np.ndarray, k: int,
                 cfg, space: str, *, now: datetime | None = None, views: tuple[str, ...] = ("event", "affect", "time"),
                 routing: str | None = None, fallback: bool = True, trace: bool = False,
                 pending: int = 0, named: tuple[str, ...] = (), filters=None) -> SearchResult:
    """Best `k` hits for the query (q_text: (d_t,), q_affect: (d_a,) float32 unit vectors).

    A budget of max(k, `cfg.route_budget`) units is shared across `views` by `routing` (default
    `cfg.routing`), searched and ranked; when `fallback` is on and the retrieval confidence is
    below `cfg.fallback_threshold` (or nothing was found), raw turns are fused in
    (`with_fallback`); then the list is cut to `k`. Nothing before the cut depends on `k` (up
    to the budget), so a smaller `k` gives a prefix of a larger one. `pending` (turns stored but
    not yet extracted) is reported in the result, never processed here. `named`: the space's
    speakers the query names (`SpaceIndex.named_speakers`), for the dialogue-aware re-scoring
    (`dialogue_scoring`). `filters`: an `etamem.filters.UnitFilter` applied inside the search
    (only matching units and raw turns are candidates; `SpaceIndex.search` widens and completes
    up to the budget, so `k` unit hits come back whenever that many units match).
    """
    budget = max(k, cfg.route_budget)
    allowed = turn_allowed = None
    complete = 0
    if filters is not None:
        allowed = filters.slot_mask(index.ids, index.amu_of, turns.turn)
        turn_allowed = filters.turn_mask(turns.turns)
        complete = min(budget, int(allowed.sum()))  # the budget, not k: a smaller k stays a prefix
    options = SearchOptions.from_config(cfg, views=views, routing=routing)
    result = index.search(query, q_text, q_affect, budget, options, now=now, trace=trace,
                          context=turn_context(index, turns, query, q_text, cfg),
                          dialogue=dialogue_scoring(index, turns, named, cfg), allowed=allowed, complete=complete)
    amu_of = index.amu_of
    hits = [Hit(amu=amu_of[a], score=s, views=v, source_turn_ids=amu_of[a].source_turn_ids)
            for a, s, v in result.ranked]
    hits = (turn_diverse(hits) if cfg.turn_diverse else hits)[:budget]
    used, conf = False, None
    if fallback:
        conf, found = confidence(hits, turns, query, q_text, cfg, allowed=turn_allowed)
        used = conf < cfg.fallback_threshold
        if used:  # turn_diverse: every raw turn kept until the hits are diversified, then the cut
            cut = budget + cfg.fallback_turns if cfg.turn_diverse else budget
            hits = with_fallback(hits, turns, query, q_text, cut, cfg, space, found, allowed=turn_allowed)
            if cfg.turn_diverse:
                hits = turn_diverse(hits)[:budget]
    hits = hits[:k]
    window = None if result.window is None else (result.window.start, result.window.end)
    return SearchResult(hits=hits, weights=result.routing.weights, budgets=result.routing.budgets,
                        entropies=result.routing.entropies, window=window, fallback_used=used, confidence=conf,
                        traces=result.traces, pending_turns=pending, filters=filters)
