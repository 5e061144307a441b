"""Facts that change, at query time: what is true now ranked first (see docs/design.md, 'Facts
that change').

`current_first` reorders a search's hits, for either method, from the space's replacing links
(`etamem.facts.supersession.REPLACING`: `supersedes`, and FTA-Mem's `contradicts`):

- every hit learns which units it replaces (`Hit.supersedes`) and which replace it
  (`Hit.superseded_by`);
- a superseded hit comes right after the current version of its fact (the end of its chain of
  replacements); when that version was not among the hits it is brought in, with views
  `("current",)`, and the last hit drops out (the count stays); a raw-turn hit (the fallback's)
  follows the links of its turn's units; the current version takes the superseded hit's score
  (its own stays in `Hit.similarity`);
- a question about the present (`asks_present`: "now", "currently", "still", "these days", "at
  the moment", "any more", ... — explicit cues, not tense alone) also puts the latest first among
  hits that state the same thing of the same speaker without a link (`etamem.facts.supersession.
  same_subject`): recency among near-duplicates (each slot keeps its score);
- a question about the past (`asks_past`: "before", "used to", "at first", "in 2023", "did", ...)
  or with a time window keeps the order the method gave (the old fact stays where it ranked).
"""
from __future__ import annotations

import re
from dataclasses import replace
from typing import Callable, Iterable, Sequence

from etamem.facts.supersession import REPLACING, is_fact, same_subject, subject_words
from etamem.records import AMU, Hit

PRESENT = re.compile(r"\b(?:now|nowadays|currently|current|still|these days|at the moment|any ?more|presently"
                     r"|at present|right now|latest|today|these weeks|this (?:week|month|year))\b", re.IGNORECASE)
PAST = re.compile(r"\b(?:before|previously|used to|formerly|originally|at first|initially|earlier|in the past"
                  r"|back then|back when|prior|former|old|first|ago|last (?:year|month|week|time|summer|winter)"
                  r"|(?:in|during|since|until) (?:19|20)\d\d|(?:in|during) (?:january|february|march|april|may|june"
                  r"|july|august|september|october|november|december)|once)\b"
                  r"|^\W*(?:did|was|were|had|what was|where was|who was|when was|how much was|which \w+ was"
                  r"|what did|where did|who did|how did|when did|which \w+ did)\b", re.IGNORECASE)
MAX_CHAIN = 16  # replacements followed from one unit
RAW_PREFIX = "turn:"  # ids of the raw-turn fallback's hits (etamem.retrieval.fallback)


def asks_present(query: str) -> bool:
    """An explicit cue that the question is about now (not tense alone)."""
    return bool(PRESENT.search(query.replace("\u2019", "'"))) and not asks_past(query)


def asks_past(query: str) -> bool:
    """A cue that the question is about an earlier state ("before", "used to", "in 2023", "did ...")."""
    return bool(PAST.search(query.replace("\u2019", "'")))


def replacing_links(links: Iterable[tuple[str, str, str, float]]) -> dict[str, list[str]]:
    """older id -> newer ids (oldest link first) over the replacing relations of `links`
    ((source = newer, target = older, relation, confidence) rows)."""
    out: dict[str, list[str]] = {}
    for source, target, relation, _ in links:
        if relation in REPLACING and source != target:
            out.setdefault(target, []).append(source)
    return out


def annotate(hits: Sequence[Hit], links: Iterable[tuple[str, str, str, float]]) -> list[Hit]:
    """`hits` with `supersedes` / `superseded_by` from the replacing `links` touching them."""
    newer: dict[str, list[str]] = {}
    older: dict[str, list[str]] = {}
    for source, target, relation, _ in links:
        if relation in REPLACING:
            newer.setdefault(target, []).append(source)
            older.setdefault(source, []).append(target)
    def units_only(ids):  # a raw-turn hit's id ("turn:<id>") names no unit: not listed
        return tuple(dict.fromkeys(x for x in ids if not x.startswith(RAW_PREFIX)))

    return [replace(h, supersedes=units_only(older.get(h.amu.amu_id, ())),
                    superseded_by=units_only(newer.get(h.amu.amu_id, ()))) for h in hits]


def current_of(unit_id: str, newer: dict[str, list[str]], units: dict[str, AMU]) -> str:
    """The end of `unit_id`'s chain of replacements: the latest (by time, then id) known unit
    that replaces it, directly or through others (itself when nothing does)."""
    seen, frontier, best = {unit_id}, [unit_id], unit_id
    while frontier and len(seen) <= MAX_CHAIN:
        nxt = []
        for uid in frontier:
            for n in newer.get(uid, ()):
                if n not in seen and n in units:
                    seen.add(n)
                    nxt.append(n)
        frontier = nxt
    for uid in seen - {unit_id}:
        if not newer.get(uid) or all(n not in units for n in newer[uid]):
            if best == unit_id or (units[uid].timestamp, uid) > (units[best].timestamp, best):
                best = uid
    return best


def linked_order(hits: Sequence[Hit], newer: dict[str, list[str]], units: dict[str, AMU]) -> list[Hit]:
    """Each superseded hit right after the current version of its fact (brought in when absent);
    as many hits as given."""
    by_id = {h.amu.amu_id: h for h in hits}
    by_turn: dict[str, Hit] = {}
    for h in hits:  # a raw-turn hit (or a unit) already showing the current version's turn
        for t in h.source_turn_ids:
            by_turn.setdefault(t, h)
    out: list[Hit] = []
    placed: set[str] = set()
    for h in hits:
        uid = h.amu.amu_id
        if uid in placed:
            continue
        cur = current_of(uid, newer, units)
        if cur != uid and cur not in placed:
            found = by_id.get(cur) or next((by_turn[t] for t in units[cur].source_turn_ids if t in by_turn), None)
            if found is None or found.amu.amu_id not in placed:  # it ranks, and scores, as the older one
                out.append(moved_up(found, h.score) if found is not None else
                           Hit(units[cur], h.score, ("current",), tuple(units[cur].source_turn_ids)))
                placed.add(found.amu.amu_id if found is not None else cur)
            placed.add(cur)
        out.append(h)
        placed.add(uid)
    return out[:len(hits)]


def moved_up(hit: Hit, score: float) -> Hit:
    """`hit` given the ranking `score` of the slot it moves to (its method score kept in
    `similarity`, see `etamem.retrieval.rank_scores`)."""
    if hit.score == score:
        return hit
    return replace(hit, score=score, similarity=hit.score if hit.similarity is None else hit.similarity)


def recency_order(hits: Sequence[Hit], window: int) -> list[Hit]:
    """Among the first `window` hits, statements of one speaker about the same subject (the
    rules' `same_subject`, sharing half the subject words of the shorter (at least one) or an
    exclusive attribute) take their slots latest first."""
    hits = list(hits)
    top = hits[:window]
    groups: list[list[int]] = []
    for i, h in enumerate(top):
        if not is_fact(h.amu.text) or h.views == ("raw",):
            continue
        for g in groups:
            first = top[g[0]].amu
            if first.speaker == h.amu.speaker and _close(first, h.amu):
                g.append(i)
                break
        else:
            groups.append([i])
    for g in groups:
        if len(g) > 1:
            latest = sorted((top[i] for i in g), key=lambda x: (x.amu.timestamp, x.amu.amu_id), reverse=True)
            for slot, h in zip(g, latest):  # each slot keeps its score
                hits[slot] = moved_up(h, top[slot].score)
    return hits


def _close(a: AMU, b: AMU) -> bool:
    if not same_subject(b.text, a.text, a.speaker):
        return False
    wa, wb = subject_words(a.text, a.speaker), subject_words(b.text, b.speaker)
    shared = wa & wb
    if not shared:
        return True  # the same exclusive attribute (where one lives, one's diet, ...)
    return len(shared) >= max(1, min(len(wa), len(wb)) // 2)


def raw_turn_links(hits: Sequence[Hit], links: Callable[[list[str]], list],
                   turn_units: Callable[[list[str]], dict[str, list[str]]]) -> list[tuple[str, str, str, float]]:
    """Replacing links as seen by the raw-turn hits (views `("raw",)`): a raw turn whose units a
    unit of another turn replaces is replaced by it, and replaces what its units replace."""
    raw = {h.amu.amu_id: h.source_turn_ids[0] for h in hits if h.views == ("raw",) and h.source_turn_ids}
    if not raw:
        return []
    per_turn = turn_units(sorted(set(raw.values())))
    own_units = {u for us in per_turn.values() for u in us}
    rows = [r for r in links(sorted(own_units)) if r[2] in REPLACING] if own_units else []
    out = []
    for hid, turn in raw.items():
        own = set(per_turn.get(turn, ()))
        for source, target, relation, conf in rows:
            if target in own and source not in own:
                out.append((source, hid, relation, conf))
            elif source in own and target not in own:
                out.append((hid, target, relation, conf))
    return out


def current_first(hits: Sequence[Hit], query: str, links: Callable[[list[str]], list],
                  load: Callable[[list[str]], dict[str, AMU]], *, windowed: bool = False,
                  recency_window: int = 10,
                  turn_units: Callable[[list[str]], dict[str, list[str]]] | None = None) -> list[Hit]:
    """`hits` (best first) annotated and reordered as the module docstring says. `links(ids)` ->
    the space's (source, target, relation, confidence) link rows touching `ids`; `load(ids)` ->
    the stored units by id; `windowed`: the query had a time window (kept as the method ranked);
    `turn_units(turn ids)` -> {turn id: unit ids}: raw-turn hits follow their units' links."""
    if not hits:
        return []
    ids = [h.amu.amu_id for h in hits]
    rows = list(links(ids))
    rows += raw_turn_links(hits, links, turn_units) if turn_units is not None else []
    have = set(rows)  # membership in `rows` (a list scan per row grew with a space's links)
    newer = replacing_links(rows)
    past = windowed or asks_past(query)
    if newer and not past:  # follow the chains to their current ends (a few rounds at most)
        known = set(ids)
        frontier = sorted({n for ns in newer.values() for n in ns} - known)
        for _ in range(4):
            if not frontier:
                break
            known.update(frontier)
            more = [r for r in dict.fromkeys(links(frontier)) if r not in have]
            rows.extend(more)
            have.update(more)
            newer = replacing_links(rows)
            frontier = sorted({n for ns in newer.values() for n in ns} - known)
        units = {h.amu.amu_id: h.amu for h in hits}
        units.update(load(sorted({n for ns in newer.values() for n in ns} - set(units))))
        hits = linked_order(hits, newer, units)
        missing = [h.amu.amu_id for h in hits if h.amu.amu_id not in ids]
        if missing:
            rows.extend(r for r in dict.fromkeys(links(missing)) if r not in have)
    if not past and asks_present(query):
        hits = recency_order(hits, recency_window)
    return annotate(hits, rows)


def in_store(store, space: str, query: str, hits: Sequence[Hit], *, windowed: bool = False,
             turn_units: Callable[[list[str]], dict[str, list[str]]] | None = None) -> list[Hit]:
    """`current_first` over the links and units of `space` in `store` (what `Memory.retrieve`
    applies to every search when `Config.current_first` is on); `turn_units` as there (the live
    index's map of turns to their units)."""
    return current_first(hits, query, lambda ids: store.unit_links(space, ids),
                         lambda ids: {a.amu_id: a for a in store.amus(space, amu_ids=ids)}, windowed=windowed,
                         turn_units=turn_units)


def status_note(hit: Hit, numbers: dict[str, int] | None = None) -> str:
    """How a hit stands among versions of its fact, for prompts and answers: "no longer current"
    (replaced by item N when `numbers` (unit id -> item number) holds the newer), "current;
    replaces item N" / "current; replaces an earlier memory", or "" for a fact nothing replaced."""
    numbers = numbers or {}
    if hit.superseded_by:
        shown = [numbers[n] for n in hit.superseded_by if n in numbers]
        return "no longer current" + (f": replaced by item {min(shown)}" if shown else "")
    if hit.supersedes:
        shown = [numbers[o] for o in hit.supersedes if o in numbers]
        return "current; replaces " + (f"item {min(shown)}" if shown else "an earlier memory")
    return ""


def with_status(units: Sequence[AMU], links: Iterable[tuple[str, str, str, float]]) -> list[AMU]:
    """`units` with status "superseded" where a replacing link from a stored unit targets them
    (links go with their units when one is deleted, so the older is "active" again)."""
    newer = replacing_links(links)
    return [replace(u, status="superseded") if u.status == "active" and newer.get(u.amu_id) else u for u in units]


def versions(unit_id: str, links: Callable[[list[str]], list], load: Callable[[list[str]], dict[str, AMU]]
             ) -> list[AMU]:
    """The versions of a fact: the units joined to `unit_id` by replacing links (either way, any
    distance), itself included, oldest first (time, then id), each with its status. KeyError
    when `load` does not find `unit_id`."""
    seen, frontier, rows = {unit_id}, [unit_id], []
    while frontier and len(seen) <= 4 * MAX_CHAIN:
        found = [r for r in links(frontier) if r[2] in REPLACING and r not in rows]
        rows.extend(found)
        frontier = sorted({x for r in found for x in r[:2]} - seen)
        seen.update(frontier)
    units = load(sorted(seen))
    if unit_id not in units:
        raise KeyError(unit_id)
    return sorted(with_status(list(units.values()), rows), key=lambda u: (u.timestamp, u.amu_id))


__all__ = ["PAST", "PRESENT", "annotate", "asks_past", "asks_present", "current_first", "current_of", "in_store",
           "linked_order", "moved_up", "raw_turn_links", "recency_order", "replacing_links", "status_note", "versions", "with_status"]
