"""FTA-Mem retrieval (see docs/design.md, 'FTA-Mem', retrieval and packet): score units against a query, keep the strong
ones, add one linked neighbour per hit, and order the result. Pure functions over arrays and
units; the engine supplies vectors, links and lifecycle maps.

Score of unit m for query q (the paper's eq. 8 with our cue score):

    R(q, m) = lam * cos(q, rho(m)) + (1 - lam) * c(q, m)      (lam 0.8)

and R = cos when no cue component applies to the query (or cues are switched off): a query
without cues is scored by similarity alone rather than being penalised by a cue of zero or
flattered by an invented one. Whether a component applies depends only on the query, so for one
query either every unit has a cue or none has, and R is comparable across units. Units with
R >= tau (0.35) are kept, best first, ties by row index, at most k.

The paper names the cue score's ingredients (time, situation type, participants, affect) but
gives no formula; ours, c(q, m), is the plain mean of the components below that apply to the
query, each in [0, 1] (None when none applies):

- time: the query names a time window W (from `parse_time_window`; order words such as
  "first"/"latest" do not count). The unit's time is its event window when one was resolved,
  else its dialogue time. Score 1 when they overlap, else 0.5 ** (gap / h): gap is the distance
  in days from the middle of the unit's time to W, h (the half-life) is W's length clamped to
  [1, 30] days (a day-sized question forgives less than a month-sized one).
- participants: the query names people the space knows. Score = the share of those names
  that are among the unit's participants or its speaker.
- content type: the question's form (`question_form`) says what kind of unit answers it; each
  form has compatible content types and a unit attribute. Score = 0.5 * [type compatible] +
  0.5 * [attribute present]:
    when       -> event / relationship_event / homework_or_plan; has a resolved event time
    feel       -> current_state / risk_signal / relationship_event; non-neutral affect or
                  emotion words
    why        -> support_interaction / belief_candidate / current_state; a reason or help cue
                  in the text ("because", "helped", ...)
    plan       -> homework_or_plan; future orientation or a stated intention
    preference -> belief_candidate; a liking cue in the text ("love", "favourite", ...)
- affect: the query's polarity (from the caller's tagger) is positive or negative. Score 1
  when the unit's label agrees, 0.5 when it is neutral, 0 when opposite; 1 as well when the
  unit carries an emotion word the query names.

Our addition, a lexical term (`fta_bm25_weight` beta, default 0.1; 0 is the paper's R alone):

    S(q, m) = (1 - beta) * R(q, m) + beta * bm25(q, m) / max bm25 over the candidates

with BM25 over the unit's speaker, text and date; tau then applies to S. The paper retrieves by
embedding only; on the LoCoMo dev file the lexical term lifts single-hop questions above flat
hybrid retrieval over raw turns (docs/benchmarks.md, FTA-Mem). The candidates of a query are the units
nearest by cosine and, with beta > 0, those best by BM25 (the engine's pool).

Then `expand_neighbours` adds one linked unit per hit, `lifecycle_order` puts a superseded or
contradicted unit right after the one that replaced it, `chronological` orders for the packet.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Collection, Mapping, Sequence

import numpy as np

from etamem.fta import rules
from etamem.fta.links import INVERSE, RELATIONS
from etamem.fta.units import FTAUnit, anchors_of
from etamem.kernels import topk
from etamem.records import POLARITIES
from etamem.retrieval.temporal import TimeWindow, is_when_question, parse_time_window

WINDOW_KINDS = ("relative", "absolute", "before", "after")  # windows that locate a time
QUESTION_FORMS = ("when", "feel", "why", "plan", "preference")
COMPONENTS = ("time", "participants", "content_type", "affect")
LIFECYCLE_STATUSES = ("superseded", "contradicted")
_DAY_S = 86400.0
_MIN_HALF_LIFE_DAYS = 1.0
_MAX_HALF_LIFE_DAYS = 30.0
_CHUNK_ROWS = 4096  # rows per float64 block in `rank`

_F = re.IGNORECASE
# "how did/does/... <...> feel/react/cope/take it" within one sentence (`_asks_feeling`), or:
_FEEL_HOW = re.compile(r"\bhow\s+(?:did|does|do|was|were|is|are|has|have|had|will|would|might)\b", _F)
_FEEL_VERB = re.compile(
    r"\b(?:feel|feels|felt|feeling|feelings|react|reacted|cope|coped|coping|take\s+it|took\s+it)\b", _F)
_SENTENCE_END = re.compile(r"[?.!]")
_FEEL = re.compile(
    r"\b(?:what|which)\s+(?:emotions?|feelings?|mood)\b|\bemotional(?:ly)?\b|\bmood\b"
    r"|\b(?:feel|feels|felt)\s+about\b", _F)
_WHY = re.compile(
    r"^\W*why\b|\bwhy\s+(?:did|does|do|was|is|were|are|has|have|had|would|will|can|could|might)\b"
    r"|\bwhat\s+(?:made|makes|caused|causes|motivated|motivates|inspired|inspires|led|prompted|helped|helps)\b"
    r"|\b(?:reason|reasons|motivation)\b", _F)
_PLAN = re.compile(
    r"\b(?:plan|plans|planning|planned|intend|intends|intending|going\s+to|goal|goals|next\s+step"
    r"|hope\s+to|hoping\s+to|want(?:s)?\s+to)\b", _F)
_PREFERENCE = re.compile(
    r"\b(?:favou?rite|prefer|prefers|preferred|hobby|hobbies"
    r"|(?:does|do|did)\s+\w+(?:\s+\w+)?\s+(?:like|love|enjoy))\b", _F)
_REASON_CUE = re.compile(
    r"\b(?:because|cause|since|due\s+to|reason|so\s+that|in\s+order\s+to|that'?s\s+why|which\s+is\s+why"
    r"|helped|helps|help|inspired|motivated|advice|suggested|encouraged)\b", _F)
_LIKING_CUE = re.compile(r"\b(?:love|loves|loved|like|likes|enjoy|enjoys|favou?rite|prefer\w*|into|fan\s+of)\b", _F)
_FORM_TYPES: dict[str, frozenset[str]] = {
    "when": frozenset({"event", "relationship_event", "homework_or_plan"}),
    "feel": frozenset({"current_state", "risk_signal", "relationship_event"}),
    "why": frozenset({"support_interaction", "belief_candidate", "current_state"}),
    "plan": frozenset({"homework_or_plan"}),
    "preference": frozenset({"belief_candidate"}),
}
_PRIORITY = ("supersedes", "updates", "contradicts", "followup_of", "same_episode_as", "supports")
_BASE_RELATION = {**{r: r for r in RELATIONS}, **{inv: r for r, inv in INVERSE.items()}}


# --- query features ------------------------------------------------------------------------
@dataclass(frozen=True)
class QueryFeatures:
    """What the cue score reads from a query: its text, the time window it names, the known
    names it mentions (canonical spelling, first-mention order), its question form (one of
    QUESTION_FORMS or None) and its polarity (POLARITIES or None, from the caller's tagger)."""

    text: str
    window: TimeWindow | None = None
    names: tuple[str, ...] = ()
    question_type: str | None = None
    polarity: str | None = None


def _asks_feeling(query: str) -> bool:
    """Whether `query` asks how someone felt, reacted or coped: "how did/does/... <...>
    feel/react/cope/take it" in one sentence, "what emotions", "emotional", "mood", "feel
    about". Each sentence is scanned once from its first "how <auxiliary>" (a later one in the
    same sentence sees less of it), so a long query costs linear time."""
    if _FEEL.search(query):
        return True
    pos = 0
    while (how := _FEEL_HOW.search(query, pos)) is not None:
        end = _SENTENCE_END.search(query, how.end())
        stop = end.start() if end else len(query)
        if _FEEL_VERB.search(query[how.end():stop]):
            return True
        pos = stop + 1
    return False


def question_form(query: str) -> str | None:
    """The question form of `query` (rule order: when, feel, why, plan, preference), else None."""
    if is_when_question(query):
        return "when"
    if _asks_feeling(query):
        return "feel"
    for form, rx in (("why", _WHY), ("plan", _PLAN), ("preference", _PREFERENCE)):
        if rx.search(query):
            return form
    return None


def query_names(query: str, known_names: Collection[str]) -> tuple[str, ...]:
    """The `known_names` that `query` mentions as whole words (case-insensitive, possessives
    included), in order of first mention, spelled as in `known_names`."""
    found: list[tuple[int, str]] = []
    seen: set[str] = set()
    for name in sorted({n.strip() for n in known_names if n and n.strip()}, key=len, reverse=True):
        key = name.casefold()
        if key in seen:
            continue
        m = re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", query, _F)
        if m:
            seen.add(key)
            found.append((m.start(), name))
    return tuple(name for _, name in sorted(found))


def query_features(query: str, now: datetime | None, known_names: Collection[str], *,
                   polarity: str | None = None) -> QueryFeatures:
    """Features of `query` asked at `now` (the question date; None: only dated expressions
    parse) in a space whose people are `known_names`; `polarity` from the caller's tagger."""
    if polarity is not None and polarity not in POLARITIES:
        raise ValueError(f"polarity must be one of {POLARITIES} or None, got {polarity!r}")
    return QueryFeatures(query, parse_time_window(query, now), query_names(query, known_names),
                         question_form(query), polarity)


# --- cue score -----------------------------------------------------------------------------
def _aware(ts: datetime, like: datetime) -> datetime:
    return ts.replace(tzinfo=like.tzinfo) if ts.tzinfo is None and like.tzinfo is not None else ts


def time_component(window: TimeWindow | None, unit: FTAUnit) -> float | None:
    """The time cue (module doc); None without a locating window."""
    if window is None or window.kind not in WINDOW_KINDS:
        return None
    t = unit.time
    start = t.event_start if t.event_start is not None else t.dialogue_time
    end = t.event_end if t.event_start is not None and t.event_end is not None and t.event_end > start else start
    start, end = _aware(start, window.start), _aware(end, window.start)
    if start == end:
        if window.start <= start < window.end:
            return 1.0
    elif start < window.end and end > window.start:
        return 1.0
    gap_days = window.distance(start + (end - start) / 2).total_seconds() / _DAY_S
    width_days = (window.end - window.start).total_seconds() / _DAY_S
    half_life = min(max(width_days, _MIN_HALF_LIFE_DAYS), _MAX_HALF_LIFE_DAYS)
    return float(0.5 ** (gap_days / half_life))


def participants_component(names: Collection[str], unit: FTAUnit) -> float | None:
    """Share of `names` among the unit's participants and speaker; None without names."""
    wanted = {n.casefold() for n in names if n}
    if not wanted:
        return None
    have = {p.casefold() for p in unit.participants} | {unit.speaker.casefold()}
    return len(wanted & have) / len(wanted)


def _form_attribute(form: str, unit: FTAUnit) -> bool:
    if form == "when":
        return unit.time.event_start is not None
    if form == "feel":
        return unit.affect.label != "neutral" or bool(unit.affect.emotions)
    if form == "why":
        return bool(_REASON_CUE.search(unit.text))
    if form == "plan":
        return unit.time.orientation == "future" or bool(unit.affect.intention)
    return bool(_LIKING_CUE.search(unit.text))  # preference


def content_type_component(question_type: str | None, unit: FTAUnit) -> float | None:
    """0.5 for a content type the question form wants plus 0.5 for the form's unit attribute
    (module doc); None when the form is unknown or None."""
    if question_type not in _FORM_TYPES:
        return None
    return 0.5 * (unit.content_type in _FORM_TYPES[question_type]) + 0.5 * _form_attribute(question_type, unit)


def affect_component(polarity: str | None, unit: FTAUnit, query: str = "") -> float | None:
    """1 / 0.5 / 0 for a unit label that agrees / is neutral / is opposite (1 too when the unit
    has an emotion word the query names); None for a neutral or missing query polarity."""
    if polarity not in ("positive", "negative"):
        return None
    if query and set(rules.emotion_words(query)) & set(unit.affect.emotions):
        return 1.0
    label = unit.affect.label
    return 1.0 if label == polarity else 0.5 if label not in ("positive", "negative") else 0.0


def cue_components(query: str, unit: FTAUnit, *, window: TimeWindow | None, names: Collection[str],
                   question_type: str | None, polarity: str | None) -> dict[str, float]:
    """The cue components that apply (a subset of COMPONENTS, in that order), each in [0, 1]."""
    got = {"time": time_component(window, unit), "participants": participants_component(names, unit),
           "content_type": content_type_component(question_type, unit),
           "affect": affect_component(polarity, unit, query)}
    return {k: v for k, v in got.items() if v is not None}


def cue_score(query: str, unit: FTAUnit, *, window: TimeWindow | None, names: Collection[str],
              question_type: str | None, polarity: str | None, anchors: str = "all") -> float | None:
    """c(q, m): the mean of the applicable components (module doc); None when none applies.
    `anchors` ("no-time", "no-affect", "fact-only"): the time / affect components are left out."""
    keep = anchors_of(anchors)
    parts = cue_components(query, unit, window=window if "time" in keep else None, names=names,
                           question_type=question_type, polarity=polarity if "affect" in keep else None)
    return sum(parts.values()) / len(parts) if parts else None


def cues_apply(features: QueryFeatures, anchors: str = "all") -> bool:
    """True when at least one cue component applies to the query (then to every unit)."""
    keep = anchors_of(anchors)
    return (("time" in keep and features.window is not None and features.window.kind in WINDOW_KINDS)
            or bool(features.names) or features.question_type in _FORM_TYPES
            or ("affect" in keep and features.polarity in ("positive", "negative")))


# --- ranking -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Scored:
    """One kept unit: its row `index`, `score` (S, = R without a lexical term), `cos`, `cue`
    (None when no cue applied) and `lexical` (max-normalised BM25; 0.0 without a lexical term)."""

    index: int
    score: float
    cos: float
    cue: float | None
    lexical: float = 0.0


def cosines(q_vec: np.ndarray, vecs: np.ndarray) -> np.ndarray:
    """(n,) float64 dot products of `vecs` (n, d) with `q_vec` (d,), computed in float64 blocks
    so that the order does not depend on float32 accumulation."""
    q = np.asarray(q_vec)
    v = np.asarray(vecs)
    if q.ndim != 1:
        raise ValueError(f"q_vec must have shape (d,), got {q.shape}")
    if v.ndim != 2 or v.shape[1] != q.shape[0]:
        raise ValueError(f"vecs must have shape (n, {q.shape[0]}), got {v.shape}")
    q64 = q.astype(np.float64)
    out = np.empty(v.shape[0], np.float64)
    for i in range(0, v.shape[0], _CHUNK_ROWS):
        out[i:i + _CHUNK_ROWS] = v[i:i + _CHUNK_ROWS].astype(np.float64) @ q64
    return out


def max_normalised(scores: np.ndarray | None, n: int) -> np.ndarray:
    """(n,) float64 `scores` divided by their maximum (zeros when None, empty or all <= 0)."""
    if scores is None:
        return np.zeros(n, np.float64)
    s = np.asarray(scores, np.float64).reshape(-1)
    if s.shape[0] != n:
        raise ValueError(f"{s.shape[0]} lexical scores for {n} vector rows")
    top = float(s.max()) if n else 0.0
    return s / top if top > 0 else np.zeros(n, np.float64)


def rank(q_vec: np.ndarray, vecs: np.ndarray, units: Sequence[FTAUnit], features: QueryFeatures, *,
         lam: float = 0.8, tau: float = 0.35, k: int = 10, cue: bool = True,
         lexical: np.ndarray | None = None, beta: float = 0.0, anchors: str = "all") -> list[Scored]:
    """Top-`k` units by S (module doc) among those with S >= `tau`, best first, ties by index.

    q_vec: (d,) float32 query vector; vecs: (n, d) float32 L2-normalised rows of rho(unit);
    units: the n units in row order; lexical: (n,) raw BM25 scores of the units (None or beta 0:
    S = R). `cue=False` scores R by cosine only (the ablation); `anchors` leaves the time / affect
    cue components out (`cue_score`)."""
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lam must be in [0, 1], got {lam}")
    if not 0.0 <= beta <= 1.0:
        raise ValueError(f"beta must be in [0, 1], got {beta}")
    cos = cosines(q_vec, vecs)
    n = cos.shape[0]
    if len(units) != n:
        raise ValueError(f"{len(units)} units for {n} vector rows")
    lex = max_normalised(lexical if beta > 0 else None, n)
    if k <= 0 or n == 0:
        return []
    score = cos.copy()
    cues: dict[int, float] = {}
    if cue and cues_apply(features, anchors):
        # c <= 1, so a unit with S(c = 1) < tau cannot be kept: its cue is not computed
        reachable = (1.0 - beta) * (lam * cos + (1.0 - lam)) + beta * lex >= tau
        score[~reachable] = -np.inf
        for i in np.flatnonzero(reachable):
            c = cue_score(features.text, units[i], window=features.window, names=features.names,
                          question_type=features.question_type, polarity=features.polarity, anchors=anchors)
            if c is not None:
                cues[int(i)] = c
                score[i] = lam * cos[i] + (1.0 - lam) * c
    if beta > 0:
        score = (1.0 - beta) * score + beta * lex
    idx = np.flatnonzero(score >= tau)
    order = idx[topk(score[idx], k)]
    return [Scored(int(i), float(score[i]), float(cos[i]), cues.get(int(i)), float(lex[i])) for i in order]


# --- neighbours, lifecycle, chronology -----------------------------------------------------
def relation_priority(relation: str) -> int:
    """Rank of a relation (either direction) for neighbour ties: updates 0, contradicts 1,
    followup_of 2, same_episode_as 3, supports 4, anything else 5."""
    base = _BASE_RELATION.get(relation, relation)
    return _PRIORITY.index(base) if base in _PRIORITY else len(_PRIORITY)


def expand_neighbours(hits: list[str], links: Mapping[str, Sequence[tuple[str, str, float]]], *,
                      exclude: set[str]) -> dict[str, str]:
    """For each hit id (in the given order, so better hits choose first), the one linked unit
    with the highest confidence (ties: `relation_priority`, then id) that is not a hit, not in
    `exclude` and not chosen for an earlier hit. `links[hit]` lists (other id, relation read
    from the hit's side, confidence). Returns hit -> neighbour for the hits that got one."""
    hit_set = set(hits)
    chosen: dict[str, str] = {}
    taken: set[str] = set()
    for hit in hits:
        if hit in chosen:
            continue
        best: tuple[float, int, str] | None = None
        for other, relation, confidence in links.get(hit, ()):
            if other in hit_set or other in exclude or other in taken:
                continue
            key = (-float(confidence), relation_priority(relation), other)
            if best is None or key < best:
                best = key
        if best is not None:
            chosen[hit] = best[2]
            taken.add(best[2])
    return chosen


def lifecycle_order(ids: Sequence[str], status: Mapping[str, str], newer: Mapping[str, str]) -> list[str]:
    """`ids` (best first) with every superseded / contradicted id moved right after the id that
    replaced it (`newer[old]`) when that one is in `ids` too, the newer first; several older
    versions of one unit follow it in their rank order, chains nest (C, B, A for A <- B <- C).
    Other ids keep their rank. Duplicates are dropped (first kept)."""
    ids = list(dict.fromkeys(ids))
    present = set(ids)
    after: dict[str, list[str]] = {}
    deferred: set[str] = set()
    for uid in ids:
        up = newer.get(uid)
        if status.get(uid) in LIFECYCLE_STATUSES and up is not None and up != uid and up in present:
            after.setdefault(up, []).append(uid)
            deferred.add(uid)
    out: list[str] = []
    emitted: set[str] = set()

    def emit(uid: str) -> None:
        stack = [uid]
        while stack:
            cur = stack.pop()
            if cur in emitted:
                continue
            emitted.add(cur)
            out.append(cur)
            stack.extend(reversed(after.get(cur, [])))

    for uid in ids:
        if uid not in deferred:
            emit(uid)
    for uid in ids:  # ids in a cycle of `newer` links have no root: keep their rank
        if uid not in emitted:
            emit(uid)
    return out


def _natural(text: str) -> tuple[str | int, ...]:
    parts = re.split(r"(\d+)", text)
    return tuple(int(p) if i % 2 else p for i, p in enumerate(parts))


def _chrono_key(unit: FTAUnit) -> tuple:
    first = unit.evidence[0] if unit.evidence else None
    return (unit.dialogue_time,
            first.start_time if first else unit.dialogue_time,
            _natural(first.session_id) if first else (),
            _natural(first.turn_ids[0]) if first and first.turn_ids else ())


def chronological(units: Sequence[FTAUnit]) -> list[FTAUnit]:
    """`units` by dialogue time, then evidence order (first span's start time, session id and
    first turn id, numbers compared as numbers: "D1:9" before "D1:10"); equal keys keep their
    order. Units with the same `unit_id` appear once (the first)."""
    seen: set[str] = set()
    kept = []
    for u in units:
        if u.unit_id is not None:
            if u.unit_id in seen:
                continue
            seen.add(u.unit_id)
        kept.append(u)
    return sorted(kept, key=_chrono_key)


__all__ = ["COMPONENTS", "LIFECYCLE_STATUSES", "QUESTION_FORMS", "QueryFeatures", "Scored", "WINDOW_KINDS",
           "affect_component", "chronological", "content_type_component", "cosines", "cue_components",
           "cue_score", "cues_apply", "expand_neighbours", "lifecycle_order", "max_normalised",
           "participants_component",
           "query_features", "query_names", "question_form", "rank", "relation_priority", "time_component"]
