"""FTA-Mem retrieval and answers on the engine (see docs/design.md, 'FTA-Mem', retrieval and packet).

`search_fta` scores the space's FTA units for a query: the `config.candidate_pool` units nearest
by cosine (at least 4·k) and as many best by BM25 are read with their fields and ranked by
S = (1 − β)·(λ·cos + (1 − λ)·cue) + β·BM25ₙ (`etamem.fta.retrieval.rank`: λ `fta_lambda`, β
`fta_bm25_weight` (0: the paper's score over the cosine pool only), threshold τ `fta_tau`,
`fta_cue` off = plain cosine, `fta_anchors` leaves the time / affect cues out). A superseded or
contradicted unit is placed right after the unit that replaced it, and each hit brings its most
confident linked neighbour (`fta_neighbours`, `views == ("fta-link",)`), placed right after
that hit (the paper's eq. 10, `fta_neighbour_order="after-hit"`) or after every hit
("appended"); `fta_links=False` at query time uses no link (the ablation). The hits keep their
rank order among themselves; the answer packet orders units by time. `fta_question_only`: no
hit at all (the paper's question-only baseline). `answer_fta` renders the four-section packet
(or the flat one, `fta_packet="flat"`) and asks the LLM; without one, the best units are the answer.

What was said in the open session is searchable before its segment is finalised: the turns that
no stored unit cites yet (the space's pending turns, and the turns of the units carried to the
next segment) are **provisional**. `prepare_provisional` (run before the read lock: it tags and
encodes) makes one provisional unit per such turn with the rule extractor's fields (the whole
turn in the third person, time, content type, affect) and its rho(m) vector; `search_fta` scores
them with the stored units in one `rank` call (same S: cosine and cue, BM25 with the turns
counted as documents beside the units, max-normalised over all candidates, τ), so a provisional
turn ranks about as a one-turn unit of it would. A provisional hit has `views == ("provisional",)`,
`source_turn_ids == (turn_id,)` and an AMU that is not stored: id `provisional:<turn_id>`,
status "provisional" (`Memory.get` does not know it; the answer packet lists it as a primary
unit). A turn that a unit cites by the time the read lock is held is dropped, so once the
session ends the units replace its provisional hits and no turn is listed twice.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Callable, Sequence

import numpy as np

from etamem.extraction.extractors import speaker_name, split_sentences, strip_filler, turn_text
from etamem.fta.builder import CARRIED_KEY, PROFILES_KEY, load_units, unit_rows
from etamem.fta.codec import units_from_json
from etamem.fta.links import INVERSE, LIFECYCLE
from etamem.fta.units import (
    AffectAnchor,
    Draft,
    EvidenceSpan,
    FactAnchor,
    FTAUnit,
    TimeAnchor,
    addressee_at,
    build_units,
    mentions_you,
    retrieval_text,
    third_person_sentence,
)
from etamem.kernels import topk
from etamem.records import AMU, Answer, Hit, SearchResult, Turn
from etamem.retrieval import amu_search_text

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


PROVISIONAL = "provisional"  # the view and the AMU status of a provisional hit
PROVISIONAL_PREFIX = "provisional:"  # + turn id: the AMU id of a provisional hit (not a stored unit)


@dataclass(frozen=True)
class Provisional:
    """The provisional units of a space, ready to score: one unit per turn that no stored unit
    cites yet (id `provisional:<turn_id>`), their AMUs and rho(m) vectors ((n, d_t) float32)."""

    units: list[FTAUnit] = field(default_factory=list)
    amus: list[AMU] = field(default_factory=list)
    vecs: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))
    turns: list[Turn] = field(default_factory=list)  # the turn of each unit (for filters)


def provisional_turns(store, space: str) -> list[Turn]:
    """The turns of `space` that no stored unit cites yet: the turns of the units carried to the
    next segment, then the pending ones (oldest first; read in one snapshot of the store)."""
    with store.snapshot():
        pending = store.turns(space, pending_only=True)
        carried = units_from_json(store.get_space_meta(space, CARRIED_KEY))
        waiting = {t.turn_id for t in pending}
        held = list(dict.fromkeys(t for u in carried for t in u.turn_ids if t not in waiting))
        return (store.turns(space, turn_ids=held) if held else []) + pending


def provisional_units(turns: Sequence[Turn], tagger) -> list[FTAUnit]:
    """One unit per turn, built as the rule extractor builds its units (`build_units`): the
    turn's sentences (filler removed) in the third person, its time anchor and content type by
    the rules, affect from `tagger` (None: neutral). The addressee is the nearest other speaker
    among the turns of the same session."""
    turns = list(turns)
    sessions: dict[str, list[Turn]] = {}
    at = []
    for t in turns:
        group = sessions.setdefault(t.session_id, [])
        at.append(len(group))
        group.append(t)
    drafts = []
    for t, j in zip(turns, at):
        name, other = speaker_name(t.speaker), addressee_at(sessions[t.session_id], j)
        raw = turn_text(t)
        said = " ".join(s for s in (strip_filler(x) for x in split_sentences(raw)) if s) or raw
        parts = (name,) + ((other,) if other and other != name and mentions_you(said) else ())
        drafts.append(Draft(third_person_sentence(said, name, other, attribute=True), said, name, [t], parts))
    return [replace(u, status=PROVISIONAL, unit_id=PROVISIONAL_PREFIX + t.turn_id)
            for u, t in zip(build_units(drafts, tagger), turns)]


def prepare_provisional(store, space: str, tagger, encode: Callable[[list[str]], np.ndarray], *,
                        anchors: str = "all") -> Provisional:
    """The space's provisional units with their AMUs and vectors (`encode`: texts -> (n, d)
    unit rows of rho(m) with `anchors`). Runs the tagger and the encoder: call it before taking
    the space's read lock."""
    turns = provisional_turns(store, space)
    if not turns:
        return Provisional()
    units = provisional_units(turns, tagger)
    vecs = np.asarray(encode([retrieval_text(u, anchors) for u in units]), np.float32)
    amus = [AMU(amu_id=u.unit_id, text=u.text, speaker=t.speaker, timestamp=t.timestamp, session_id=t.session_id,
                source_turn_ids=(t.turn_id,), polarity=u.affect.label,
                polarity_scores=tuple(float(x) for x in u.affect.scores), status=PROVISIONAL, space=t.space)
            for u, t in zip(units, turns)]
    return Provisional(units, amus, vecs, list(turns))


def search_fta(live, store, query: str, q_vec: np.ndarray, k: int, config, *, now: datetime | None = None,
               polarity: str | None = None, trace: bool = False, pending: int = 0,
               provisional: Provisional | None = None, filters=None) -> SearchResult:
    """The best `k` FTA units of the live space for `query` ((d,) float32 `q_vec`), then their
    linked neighbours (module doc). `provisional` (from `prepare_provisional`): the open
    session's turns, ranked with the units; those a unit cites by now are left out. `filters`
    (an `etamem.filters.UnitFilter`): only the units and provisional turns it lets through are
    pooled, ranked and brought in as neighbours, so `k` hits come back whenever that many match
    (and pass `fta_tau`). The caller holds the space's read lock."""
    from etamem.fta.retrieval import expand_neighbours, lifecycle_order, query_features, rank

    space = live.name
    if config.fta_question_only:
        return SearchResult([], {"fta": 1.0}, {"fta": k}, {}, pending_turns=pending)
    ids, vecs, slots = unit_rows(live.index)
    prov = provisional or Provisional()
    cited = live.index.units_of_turn
    keep = [i for i, u in enumerate(prov.units) if not cited.get(u.turn_ids[0])]
    passes = None
    if filters is not None:  # only the units (and provisional turns) the filter lets through
        mask = filters.slot_mask(ids, live.index.amu_of, live.turns.turn)
        ids, vecs, slots = [a for a, m in zip(ids, mask) if m], vecs[mask], slots[mask]
        passes = set(ids)
        keep = [i for i in keep if filters.turn(prov.turns[i])]
    if not ids and not keep:
        return SearchResult([], {"fta": 1.0}, {"fta": k}, {}, pending_turns=pending)
    q = np.asarray(q_vec, np.float32)
    pool = max(config.candidate_pool, 4 * k)
    top = topk(vecs @ q, pool).tolist() if ids else []
    beta = config.fta_bm25_weight
    lexical = None
    if beta > 0 and ids:
        lexical = np.asarray(live.index.amu_lex.scores_all(query), np.float64)[slots]
        matched = np.flatnonzero(lexical > 0)
        best = matched[topk(lexical[matched], pool)].tolist()
        top = list(dict.fromkeys(top + best))  # the cosine pool, then the BM25 pool's others
    units = load_units(store, space, [ids[j] for j in top])
    top = [j for j in top if ids[j] in units]
    # candidates: the pooled units, then every provisional unit (scored by the same S)
    cand = [units[ids[j]] for j in top] + [prov.units[i] for i in keep]
    rows = vecs[top] if not keep else np.concatenate([vecs[top], prov.vecs[keep]])
    lex = None
    if beta > 0:
        lex = np.zeros(len(cand), np.float64)
        if lexical is not None:
            lex[:len(top)] = lexical[top]
        if keep:
            lex[len(top):] = live.index.amu_lex.scores_beside(query, [amu_search_text(prov.amus[i]) for i in keep])
    names = {p for u in cand for p in (*u.participants, u.speaker)}
    features = query_features(query, now, names, polarity=polarity)
    scored = rank(q, rows, cand, features, lam=config.fta_lambda, tau=config.fta_tau, k=k, cue=config.fta_cue,
                  lexical=lex, beta=beta, anchors=config.fta_anchors)
    by_id = {cand[s.index].unit_id: s for s in scored}
    made = {prov.units[i].unit_id: prov.amus[i] for i in keep}
    hit_ids = [cand[s.index].unit_id for s in scored]
    unit_ids = [u for u in hit_ids if u not in made]
    links = store.unit_links(space, unit_ids) if unit_ids and config.fta_links else []  # off: no-links ablation
    order = lifecycle_order(hit_ids, {u: units[u].status for u in unit_ids}, _newer(links))
    hits = []
    for u in order:
        if u in made:
            hits.append(Hit(made[u], round(float(by_id[u].score), 6), (PROVISIONAL,), made[u].source_turn_ids))
        elif u in live.index.amu_of:
            amu = live.index.amu_of[u]
            hits.append(Hit(amu, round(float(by_id[u].score), 6), ("fta",), amu.source_turn_ids))
    if config.fta_neighbours and hits:
        chosen = expand_neighbours([u for u in order if u not in made], _link_map(links), exclude=set(order))
        hits = place_neighbours(hits, chosen, live.index.amu_of, passes, config.fta_neighbour_order)
    traces = {}
    if trace:
        traces["fta"] = [{"unit_id": cand[s.index].unit_id, "score": s.score, "cos": s.cos, "cue": s.cue,
                          "bm25n": s.lexical, "provisional": cand[s.index].unit_id in made} for s in scored]
    window = None if features.window is None else (features.window.start, features.window.end)
    return SearchResult(hits, {"fta": 1.0}, {"fta": k}, {}, window=window, traces=traces, pending_turns=pending)


def place_neighbours(hits: list[Hit], chosen: dict[str, str], amu_of: dict[str, AMU], passes: set[str] | None,
                     order: str = "after-hit") -> list[Hit]:
    """`hits` with the neighbour `chosen[hit id]` of each hit (`views == ("fta-link",)`, similarity
    0 as eq. 10 scores it, ranking score that of the hit it follows: `etamem.retrieval.rank_scores`)
    placed right after its hit (`order="after-hit"`, eq. 10) or after every hit ("appended").
    A neighbour that is not a live unit, or that the filter (`passes`, None: no filter) rejects,
    is left out."""
    out: list[Hit] = []
    tail: list[Hit] = []
    for h in hits:
        out.append(h)
        other = chosen.get(h.amu.amu_id)
        if other is None or other not in amu_of or (passes is not None and other not in passes):
            continue
        amu = amu_of[other]
        (out if order == "after-hit" else tail).append(Hit(amu, h.score, ("fta-link",), amu.source_turn_ids,
                                                           similarity=0.0))
    last = out[-1].score if out else 0.0
    return out + [replace(n, score=min(n.score, last)) for n in tail]


def _hit_unit(amu: AMU) -> FTAUnit:
    """A provisional hit's AMU as a unit for the packet (its text, time and affect label)."""
    ts, turns = amu.timestamp, amu.source_turn_ids
    name = speaker_name(amu.speaker)
    return FTAUnit(fact=FactAnchor(amu.text, "general_fact", (name,)), time=TimeAnchor(ts),
                   affect=AffectAnchor(label=amu.polarity, scores=amu.polarity_scores),
                   evidence=(EvidenceSpan(amu.session_id, turns, ts, ts),), speaker=name, status=PROVISIONAL,
                   unit_id=amu.amu_id, space=amu.space)


def packet_for(store, space: str, hits: list[Hit], config, *, auxiliary: bool = True) -> str:
    """The answer context of `hits`: primary units (provisional hits among them) and linked
    neighbours (oldest first), their source dialogue spans, and (`auxiliary`, with
    `config.fta_auxiliary`) the space's longitudinal memory (`render_packet`)."""
    from etamem.fta.packet import render_packet
    from etamem.fta.profiles import profiles_from_json, render_profiles

    units = load_units(store, space, [h.amu.amu_id for h in hits if h.views != (PROVISIONAL,)])
    prim = [_hit_unit(h.amu) if h.views == (PROVISIONAL,) else units[h.amu.amu_id] for h in hits
            if h.views == (PROVISIONAL,) or (h.views != ("fta-link",) and h.amu.amu_id in units)]
    stored = [u.unit_id for u in prim if u.status != PROVISIONAL]
    links = store.unit_links(space, stored) if stored else []
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
    wanted = auxiliary and config.fta_auxiliary and not config.fta_question_only
    saved = store.get_space_meta(space, PROFILES_KEY) if wanted else None
    aux = render_profiles(profiles_from_json(saved), speakers) if saved else ""
    key = (lambda u: (u.dialogue_time, u.turn_ids))
    return render_packet(sorted(prim, key=key), sorted(neigh, key=lambda n: key(n[0])), list(spans.items()), aux,
                         flat=config.fta_packet == "flat", anchors=config.fta_anchors)


def fitted_packet(store, space: str, hits: list[Hit], config, llm, question: str, when: datetime | None) -> str:
    """The packet of `hits` that fits the model's context (`LLMClient.prompt_budget`; all of it
    when the context is unknown): the most hits that fit without the auxiliary memory, then the
    auxiliary memory if it still fits beside them (it never pushes evidence out)."""
    from etamem.fta.packet import answer_prompt
    from etamem.models.tokens import pack

    budget = llm.prompt_budget() if hasattr(llm, "prompt_budget") else None  # test doubles have none
    if budget is None:
        return packet_for(store, space, hits, config)
    packets: dict[tuple[int, bool], str] = {}

    def render(k: int, aux: str) -> str:
        packets[k, bool(aux)] = packets.get((k, bool(aux))) or packet_for(store, space, hits[:k], config,
                                                                           auxiliary=bool(aux))
        return answer_prompt(question, packets[k, bool(aux)], question_date=when, style=config.answer_style)

    _, kept, aux = pack(render, len(hits), ["auxiliary"], budget, llm.tokens.count)
    if kept < len(hits) or not aux:
        log.warning("answer: the best %d of %d FTA-Mem hits fit the model's context (%d tokens for the prompt)%s",
                    kept, len(hits), budget, "" if aux else ", without the auxiliary memory")
    return packets[kept, bool(aux)]


def answer_fta(question: str, store, space: str, hits: list[Hit], config, llm, when: datetime | None) -> Answer:
    """An LLM answer from the FTA packet of `hits`; without an LLM the best units' sentences (as
    `etamem.answering.compose_answer` does offline)."""
    from etamem.answering import compose_answer, usage_delta
    from etamem.fta.packet import answer_from_packet

    if llm is None:
        primary = [h for h in hits if h.views != ("fta-link",)]
        return compose_answer(question, primary, {}, llm=None, style=config.answer_style, question_date=when,
                              n_sentences=config.answer_evidence_sentences)
    packet = fitted_packet(store, space, hits, config, llm, question, when)
    before = llm.usage()
    text = answer_from_packet(llm, question, packet, question_date=when, style=config.answer_style)
    return Answer(text=text, hits=hits, llm_used=True, cost=usage_delta(before, llm.usage()))


__all__ = ["PROVISIONAL", "PROVISIONAL_PREFIX", "Provisional", "answer_fta", "fitted_packet", "packet_for",
           "place_neighbours", "prepare_provisional", "provisional_turns", "provisional_units", "search_fta"]
