"""FTA-Mem retrieval and answers on the engine (DESIGN §10, "Retrieval").

`search_fta` scores the space's FTA units for a query: the `config.candidate_pool` units nearest
by cosine (at least 4·k) and as many best by BM25 are read with their fields and ranked by
S = (1 − β)·(λ·cos + (1 − λ)·cue) + β·BM25ₙ (`etamem.fta.retrieval.rank`: λ `fta_lambda`, β
`fta_bm25_weight` (0: the paper's score over the cosine pool only), threshold τ `fta_tau`,
`fta_cue` off = plain cosine). A superseded or contradicted unit is placed right after the unit
that replaced it, and each hit brings its most confident linked neighbour (`fta_neighbours`),
listed after the hits with `views == ("fta-link",)`; `fta_links=False` at query time uses no
link (the ablation). Hits keep their rank order (so `top_k=k` is a prefix of `top_k=K`); the
answer packet orders them by time. `answer_fta` renders the four-section packet (or the flat
one, `fta_packet="flat"`) and asks the LLM; without one, the best units are the answer.
"""
from __future__ import annotations

import logging
from datetime import datetime

import numpy as np

from ..types import Answer, Hit, SearchResult
from .engine import PROFILES_KEY, load_units, unit_rows
from .links import INVERSE, LIFECYCLE
from .units import FTAUnit

log = logging.getLogger(__name__)


def _link_map(links: list[tuple[str, str, str, float]]) -> dict[str, list[tuple[str, str, float]]]:
    """unit id -> [(other unit id, relation read from this side, confidence)]."""
    out: dict[str, list[tuple[str, str, float]]] = {}
    for src, dst, rel, conf in links:
        out.setdefault(src, []).append((dst, rel, conf))
        out.setdefault(dst, []).append((src, INVERSE.get(rel, rel), conf))
    return out


def _newer(links: list[tuple[str, str, str, float]]) -> dict[str, str]:
    """older unit id -> the latest unit that updated or contradicted it."""
    return {dst: src for src, dst, rel, _ in links if rel in LIFECYCLE}


def search_fta(live, store, query: str, q_vec: np.ndarray, k: int, config, *, now: datetime | None = None,
               polarity: str | None = None, trace: bool = False, pending: int = 0) -> SearchResult:
    """The best `k` FTA units of the live space for `query` ((d,) float32 `q_vec`), then their
    linked neighbours (module doc). The caller holds the space's read lock."""
    from .retrieval import expand_neighbours, lifecycle_order, query_features, rank

    space = live.name
    ids, vecs, slots = unit_rows(live.index)
    empty = SearchResult([], {"fta": 1.0}, {"fta": k}, {}, pending_turns=pending)
    if not ids:
        return empty
    pool = max(config.candidate_pool, 4 * k)
    sims = vecs @ np.asarray(q_vec, np.float32)
    top = np.argsort(-sims, kind="stable")[:pool].tolist()
    beta = config.fta_bm25_weight
    lexical = None
    if beta > 0:
        lexical = np.asarray(live.index.amu_lex.scores_all(query), np.float64)[slots]
        matched = np.flatnonzero(lexical > 0)
        best = matched[np.lexsort((matched, -lexical[matched]))][:pool].tolist()
        top = list(dict.fromkeys(top + best))  # the cosine pool, then the BM25 pool's others
    units = load_units(store, space, [ids[j] for j in top])
    top = [j for j in top if ids[j] in units]
    cand = [units[ids[j]] for j in top]
    names = {p for u in cand for p in (*u.participants, u.speaker)}
    features = query_features(query, now, names, polarity=polarity)
    scored = rank(np.asarray(q_vec, np.float32), vecs[top], cand, features, lam=config.fta_lambda,
                  tau=config.fta_tau, k=k, cue=config.fta_cue, lexical=None if lexical is None else lexical[top],
                  beta=beta)
    hit_ids = [cand[s.index].unit_id for s in scored]
    by_id = {cand[s.index].unit_id: s for s in scored}
    links = store.unit_links(space, hit_ids) if hit_ids and config.fta_links else []  # off: the no-links ablation
    order = lifecycle_order(hit_ids, {u: units[u].status for u in hit_ids}, _newer(links))
    hits = [Hit(live.index.amu_of[u], round(float(by_id[u].score), 6), ("fta",), live.index.amu_of[u].source_turn_ids)
            for u in order if u in live.index.amu_of]
    if config.fta_neighbours and hits:
        chosen = expand_neighbours(order, _link_map(links), exclude=set(order))
        for u in order:
            other = chosen.get(u)
            if other is not None and other in live.index.amu_of:
                amu = live.index.amu_of[other]
                hits.append(Hit(amu, 0.0, ("fta-link",), amu.source_turn_ids))
    traces = {}
    if trace:
        traces["fta"] = [{"unit_id": cand[s.index].unit_id, "score": s.score, "cos": s.cos, "cue": s.cue,
                          "bm25n": s.lexical} for s in scored]
    window = None if features.window is None else (features.window.start, features.window.end)
    return SearchResult(hits, {"fta": 1.0}, {"fta": k}, {}, window=window, traces=traces, pending_turns=pending)


def packet_for(store, space: str, hits: list[Hit], config) -> str:
    """The answer context of `hits`: primary units and linked neighbours (oldest first), their
    source dialogue spans, and the space's longitudinal memory (`render_packet`)."""
    from .packet import render_packet
    from .profiles import profiles_from_json, render_profiles

    units = load_units(store, space, [h.amu.amu_id for h in hits])
    prim = [units[h.amu.amu_id] for h in hits if h.views != ("fta-link",) and h.amu.amu_id in units]
    links = store.unit_links(space, [u.unit_id for u in prim]) if prim else []
    link_of = _link_map(links)
    neigh: list[tuple[FTAUnit, str, str]] = []
    prim_ids = {u.unit_id for u in prim}
    for h in hits:
        uid = h.amu.amu_id
        if h.views == ("fta-link",) and uid in units:
            of = next(((o, rel) for o, rel, _ in link_of.get(uid, []) if o in prim_ids), (None, "related"))
            neigh.append((units[uid], of[1], of[0] or ""))
    turn_ids = sorted({t for h in hits for t in h.source_turn_ids})
    spans: dict[str, list] = {}
    for t in sorted(store.turns(space, turn_ids=turn_ids), key=lambda t: t.timestamp):
        spans.setdefault(t.session_id, []).append(t)
    speakers = {u.speaker for u in prim} | {p for u in prim for p in u.participants}
    saved = store.get_space_meta(space, PROFILES_KEY)
    aux = render_profiles(profiles_from_json(saved), speakers) if saved else ""
    key = (lambda u: (u.dialogue_time, u.turn_ids))
    return render_packet(sorted(prim, key=key), sorted(neigh, key=lambda n: key(n[0])), list(spans.items()), aux,
                         flat=config.fta_packet == "flat")


def answer_fta(question: str, store, space: str, hits: list[Hit], config, llm, when: datetime | None) -> Answer:
    """An LLM answer from the FTA packet of `hits`; without an LLM the best units' sentences (as
    `etamem.answering.compose_answer` does offline)."""
    from ..answering import compose_answer, usage_delta
    from .packet import answer_from_packet

    if llm is None:
        primary = [h for h in hits if h.views != ("fta-link",)]
        return compose_answer(question, primary, {}, llm=None, style=config.answer_style, question_date=when,
                              n_sentences=config.answer_evidence_sentences)
    packet = packet_for(store, space, hits, config)
    before = llm.usage()
    text = answer_from_packet(llm, question, packet, question_date=when, style=config.answer_style)
    return Answer(text=text, hits=hits, llm_used=True, cost=usage_delta(before, llm.usage()))


__all__ = ["answer_fta", "packet_for", "search_fta"]
