"""FTA-Mem on the engine (see docs/design.md, 'FTA-Mem'): construction of FTA units from a space's pending turns,
links against the space's stored units, and the store rows that go with them.

`FTABuilder.build(turns, complete, carried)` runs, for the pending turns of one session,

1. BWS segmentation (`config.fta_segmentation`, window `fta_window`, the offline detector or the
   LLM's); while the session runs (`complete=False`) the last segment is provisional: its turns
   stay pending and are segmented again with the next turns (Algorithm 1's restart at b_last);
2. unit extraction with carry-over and fusion (`construct_units`): units still waiting for a later
   segment are the construction state, stored in the space's meta (`CARRIED_KEY`), never
   retrievable; at the session's end they are finalised as they are;
3. vectors: rho(m) (`retrieval_text`) with the text encoder, affective vectors from the tagger.

`FTABuilder.link(batch, live, store)` then classifies each new unit against its nearest older units
(candidates by the unit vectors of the live index, compared by `link_text` vectors; sharing a
participant only with `fta_link_candidates="shared-participant"`) and returns the `UnitExtras`
(fields, links, lifecycle changes, the rewritten fields of older units whose paper lifecycle a
link changed, state) written with the units in one transaction. A stored FTA unit is an AMU (id, fact text, speaker, dialogue time, evidence turns,
affect label) plus its fields row; ETAMem's views index it like any AMU (`units="fta"`).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import numpy as np

from etamem.fta.codec import unit_from_json, unit_to_json, units_from_json, units_to_json
from etamem.fta.links import (
    LIFECYCLE,
    RELATIONS,
    LLMLinkClassifier,
    Neighbour,
    RuleLinkClassifier,
    as_decision,
    lifecycle_update,
    link_text,
    nearest_older,
)
from etamem.fta.segmentation import LLMBoundaryDetector, OfflineBoundaryDetector, segment_session
from etamem.fta.units import (
    FTAUnit,
    Lifecycle,
    LLMUnitExtractor,
    RuleUnitExtractor,
    construct_units,
    initial_lifecycle,
    retrieval_text,
)
from etamem.kernels import topk
from etamem.records import AMU, Turn
from etamem.retrieval import turn_text
from etamem.store.sql import UnitExtras

log = logging.getLogger(__name__)

CARRIED_KEY = "fta_carried"  # space meta: units carried to the next segment of the open session (JSON)
PROFILES_KEY = "fta_profiles"  # space meta: longitudinal memory (etamem.fta.profiles JSON)
LINK_POOL = 20  # older units taken by unit-vector cosine before the link-text comparison


@dataclass
class FTABatch:
    """What one session's pending turns gave: the `turns` whose segments were finalised (the rest
    stay pending), the finalised `units` with their AMUs and vectors (text (n, d_t) of rho(m),
    affective (n, d_a), turns (len(turns), d_t)), the units still carried, and counts."""

    turns: list[Turn]
    units: list[FTAUnit]
    amus: list[AMU]
    text_vecs: np.ndarray
    affect_vecs: np.ndarray
    turn_vecs: np.ndarray
    carried: list[FTAUnit]
    segments: int = 0
    windows: int = 0
    fused: int = 0
    extras: UnitExtras = field(default_factory=UnitExtras)


def unit_amu(unit: FTAUnit, speaker: str) -> AMU:
    """The AMU row of a finalised unit (`speaker`: the raw speaker of its first evidence turn)."""
    a = unit.affect
    return AMU(amu_id=unit.unit_id, text=unit.text, speaker=speaker, timestamp=unit.dialogue_time,
               session_id=unit.session_id, source_turn_ids=unit.turn_ids, polarity=a.label,
               polarity_scores=tuple(float(x) for x in a.scores), space=unit.space)


class FTABuilder:
    """The detector, extractor and link classifier of one `Memory` (LLM ones when `llm` is given
    and the config asks for them, offline ones otherwise), and the construction steps."""

    def __init__(self, config, text_encoder, affect_tagger, llm=None) -> None:
        self.config = config
        self.encoder = text_encoder
        self.tagger = affect_tagger
        offline = OfflineBoundaryDetector(text_encoder)
        use_llm_detector = config.fta_detector == "llm" or (config.fta_detector == "auto" and llm is not None)
        if use_llm_detector and llm is None:
            raise ValueError("config fta_detector='llm' needs an LLM: set llm_model or ETAMEM_LLM_MODEL")
        temperature = config.fta_construction_temperature
        self.detector = LLMBoundaryDetector(llm, fallback=offline, temperature=temperature) if use_llm_detector \
            else offline
        rule = RuleUnitExtractor(affect_tagger, min_words=config.min_amu_words)
        use_llm = config.extractor == "llm" or (config.extractor == "auto" and llm is not None)
        if use_llm and llm is None:
            raise ValueError("config extractor='llm' needs an LLM: set llm_model or ETAMEM_LLM_MODEL")
        self.extractor = LLMUnitExtractor(llm, affect_tagger, fallback=rule, temperature=temperature) if use_llm \
            else rule
        self.classifier = (LLMLinkClassifier(llm, fallback=RuleLinkClassifier(), temperature=temperature) if use_llm
                           else RuleLinkClassifier())
        self.stats = {"turns": 0, "segments": 0, "windows": 0, "units": 0, "fused": 0, "links": 0}

    @property
    def same_participants(self) -> bool:
        """Whether link candidates must share a participant (`fta_link_candidates`)."""
        return self.config.fta_link_candidates == "shared-participant"

    @property
    def keep_qa(self) -> bool:
        """Whether cuts may not separate a question from its reply (`fta_qa_veto`): "offline" vetoes
        the offline detector's cuts and plain windows, not the LLM detector's."""
        veto = self.config.fta_qa_veto
        return veto == "all" or (veto == "offline" and not isinstance(self.detector, LLMBoundaryDetector))

    # --- construction -------------------------------------------------------------------------
    def build(self, turns: Sequence[Turn], complete: bool, carried: Sequence[FTAUnit],
              timed: Callable[[str], Any]) -> FTABatch:
        """Segment, extract and encode the pending `turns` of one session (in order); see the module doc."""
        turns = list(turns)
        cfg = self.config
        with timed("extract"):
            seg = segment_session(turns, self.detector, mode=cfg.fta_segmentation, window=cfg.fta_window,
                                  complete=complete, keep_qa=self.keep_qa)
            final = [s for s in seg.segments if s.final]
            done_ids = {t for s in final for t in s.turn_ids}
            done = [t for t in turns if t.turn_id in done_ids]
            made = construct_units(done, final, self.extractor, carried=list(carried), complete=complete)
        units = _unique_ids(made.units)
        speakers = {t.turn_id: t.speaker for t in turns}
        amus = [unit_amu(u, speakers.get(u.turn_ids[0], u.speaker)) for u in units]
        texts = [retrieval_text(u, cfg.fta_anchors) for u in units]
        with timed("encode"):
            vecs = np.asarray(self.encoder.encode(texts + [turn_text(t) for t in done]), np.float32)
            if not len(vecs):
                vecs = np.zeros((0, self.encoder.dim), np.float32)
            text_vecs, turn_vecs = vecs[:len(texts)], vecs[len(texts):]
        with timed("tag"):  # the fact texts, as the extractor tagged them (their vectors are cached)
            affect_vecs = (np.asarray(self.tagger.tag([u.text for u in units]).embeddings, np.float32) if units
                           else np.zeros((0, self.tagger.dim), np.float32))
        for key, n in (("turns", len(done)), ("segments", len(final)), ("windows", seg.windows),
                       ("units", len(units)), ("fused", made.fused)):
            self.stats[key] += n
        return FTABatch(done, units, amus, text_vecs, affect_vecs, turn_vecs, list(made.carried), len(final),
                        seg.windows, made.fused)

    # --- links ----------------------------------------------------------------------------------
    def link(self, batch: FTABatch, older_ids: list[str], older_vecs: np.ndarray, load: Callable[[list[str]], dict],
             *, enabled: bool = True) -> UnitExtras:
        """The store rows of `batch`: each new unit's fields, its links to the nearest older units
        (`older_ids` with their unit vectors (n, d_t), `load(ids) -> {id: FTAUnit}` reads stored
        ones; units earlier in the batch count as older too), lifecycle changes and the carried
        state. `enabled=False` (the no-links ablation): fields and state only."""
        units = {u.unit_id: replace(u, lifecycle=initial_lifecycle(u)) for u in batch.units}
        links: list[tuple[str, str, str, float]] = []
        lifecycle: dict[str, str] = {}
        changed: dict[str, FTAUnit] = {}  # stored units whose paper lifecycle a link changed
        if enabled and batch.units:
            stored: dict[str, FTAUnit] = {}
            link_vecs = np.asarray(self.encoder.encode([link_text(u) for u in batch.units]), np.float32)
            for i, unit in enumerate(batch.units):
                pool_ids = self._pool(batch.text_vecs[i], older_ids, older_vecs, batch, i)
                missing = [p for p in pool_ids if p not in units and p not in stored]
                stored.update(load(missing) if missing else {})
                pool = [units.get(p) or stored[p] for p in pool_ids if p in units or p in stored]
                pool = [p for p in pool if p.dialogue_time <= unit.dialogue_time]
                if not pool:
                    continue
                rows = np.asarray(self.encoder.encode([link_text(p) for p in pool]), np.float32)
                neighbours: list[Neighbour] = nearest_older(unit, link_vecs[i], pool, rows,
                                                            top_m=self.config.fta_link_top,
                                                            floor=self.config.fta_link_floor,
                                                            same_participants=self.same_participants)
                if not neighbours:
                    continue
                for decision in map(as_decision, self.classifier.classify(unit, neighbours)):
                    target, relation = decision.target, decision.relation
                    if relation not in RELATIONS or target == unit.unit_id:
                        continue
                    links.append((unit.unit_id, target, relation, float(decision.confidence)))
                    old = units.get(target) or changed.get(target) or stored.get(target)
                    if old is None:
                        continue
                    status = LIFECYCLE.get(relation)
                    life = lifecycle_update(relation, units[unit.unit_id], old, status=decision.lifecycle,
                                            completeness=decision.completeness)
                    if status is None and life is None:
                        continue
                    old = replace(old, status=status or old.status, lifecycle=life or old.lifecycle)
                    if target in units:
                        units[target] = old
                        continue
                    if status is not None:
                        lifecycle[target] = status
                    if life is not None:
                        changed[target] = old
            self.stats["links"] += len(links)
        fields = [(u.unit_id, u.status, unit_to_json(u)) for u in units.values()]
        return UnitExtras(fields=fields, links=links, lifecycle=lifecycle,
                          refields=[(uid, unit_to_json(u)) for uid, u in changed.items()],
                          meta={CARRIED_KEY: units_to_json(batch.carried)})

    def _pool(self, vec: np.ndarray, older_ids: list[str], older_vecs: np.ndarray, batch: FTABatch,
              i: int) -> list[str]:
        """Candidate ids for unit i of the batch: the stored units and the batch's earlier units
        nearest by unit vector (`LINK_POOL` of them)."""
        ids = list(older_ids) + [u.unit_id for u in batch.units[:i]]
        if not ids:
            return []
        mats = [m for m in (older_vecs, batch.text_vecs[:i]) if len(m)]
        sims = np.concatenate(mats) @ vec
        top = topk(sims, LINK_POOL)
        return [ids[j] for j in top.tolist() if sims[j] >= self.config.fta_link_floor - 0.2]


def unit_rows(index) -> tuple[list[str], np.ndarray, np.ndarray]:
    """The live units of a `SpaceIndex` in slot order: ids, unit vectors (n, d_t) float32 and
    their slots (n,) int64 (rows of the index's BM25 over units)."""
    alive = np.asarray([i for i, a in enumerate(index.ids) if a is not None], np.int64)
    return [index.ids[i] for i in alive], np.asarray(index.text_vecs[alive], np.float32), alive


def build_and_link(builder: FTABuilder, store, live, turns: list[Turn], complete: bool, config, timed):
    """One session's pending `turns` of the live space made into stored-ready FTA units:
    (turns done, AMUs, text vectors, affective vectors, turn vectors, `UnitExtras`). LLM cache
    entries of the calls are tagged with every turn of the batch (deleting one forgets them)."""
    from etamem.fta.profiles import profiles_from_json, profiles_to_json, update_profiles
    from etamem.models.llm import cache_refs

    space = live.name
    carried = units_from_json(store.get_space_meta(space, CARRIED_KEY))
    with cache_refs(*(f"turn:{space}/{t.turn_id}" for t in turns)):
        batch = builder.build(turns, complete, carried, timed)
        with live.rw.read():
            ids, vecs, _ = unit_rows(live.index)
        with timed("links"):
            rows = builder.link(batch, ids, vecs, lambda q: load_units(store, space, q), enabled=config.fta_links)
    if batch.units:  # longitudinal memory, extractive: the batch's units and the stored ones links changed
        saved = store.get_space_meta(space, PROFILES_KEY)
        changed = [replace(u, status=rows.lifecycle[uid])
                   for uid, u in load_units(store, space, list(rows.lifecycle)).items()]
        finals = [unit_from_json(f) for _, _, f in rows.fields]
        profiles = update_profiles(profiles_from_json(saved) if saved else {}, finals + changed)
        rows.meta[PROFILES_KEY] = profiles_to_json(profiles)
    return batch.turns, batch.amus, batch.text_vecs, batch.affect_vecs, batch.turn_vecs, rows


def unit_history(store, space: str, unit_id: str) -> list[FTAUnit]:
    """The chain of versions of a stored unit (`etamem.fta.links.history` over the store's rows)."""
    from etamem.fta.links import HISTORY_RELATIONS, Link, history
    from etamem.records import UnknownIdError

    if not store.unit_fields(space, [unit_id]):
        raise UnknownIdError(f"no FTA unit {unit_id!r} in space {space!r}")
    seen, frontier, links = {unit_id}, [unit_id], set()
    while frontier:
        rows = [r for r in store.unit_links(space, frontier) if r[2] in HISTORY_RELATIONS]
        links.update(rows)
        frontier = [u for r in rows for u in r[:2] if u not in seen]
        seen.update(frontier)
    units = load_units(store, space, sorted(seen))
    return history(unit_id, units, [Link(*r) for r in sorted(links)])


def forget_extras(store, space: str, units: Sequence[AMU], dropped: Sequence[str],
                  rewritten: Sequence[Turn]) -> UnitExtras | None:
    """What deleting `units` (and dropping / rewriting turns) changes in a space's FTA rows, or
    None for an AMU space: units left superseded or contradicted only by a deleted unit are
    final again, a unit a deleted unit linked to gets its paper lifecycle back as the links that
    remain give it (`replayed_lifecycle`), carried units citing a forgotten turn go, and the
    longitudinal memory forgets what came from the deleted units (nothing of them is kept).
    Their fields and links rows go with the units (`store.forget`)."""
    if store.get_space_meta(space, "units") != "fta":
        return None
    from etamem.fta.profiles import forget_units, profiles_from_json, profiles_to_json

    gone = {u.amu_id for u in units}
    turns = set(dropped) | {t.turn_id for t in rewritten} | {t for u in units for t in u.source_turn_ids}
    rows = store.unit_links(space, sorted(gone)) if gone else []
    retiring = {**LIFECYCLE, "updates": "superseded"}  # before supersedes existed, updates retired the older
    targets = {dst for src, dst, _, _ in rows if src in gone} - gone
    incoming: dict[str, list[tuple[str, str]]] = {}  # target -> (source, relation) of the links left, oldest first
    for src, dst, rel, _ in store.unit_links(space, sorted(targets)) if targets else []:
        if dst in targets and src not in gone:
            incoming.setdefault(dst, []).append((src, rel))
    lifecycle: dict[str, str] = {}
    for old in {dst for src, dst, rel, _ in rows if src in gone and rel in retiring} - gone:
        still = [rel for _, rel in incoming.get(old, []) if rel in retiring]
        lifecycle[old] = retiring[still[-1]] if still else "final"
    sources = load_units(store, space, sorted({src for links in incoming.values() for src, _ in links}))
    refields = []
    for uid, old in load_units(store, space, sorted(targets)).items():
        life = replayed_lifecycle(old, [(rel, sources[src]) for src, rel in incoming.get(uid, []) if src in sources])
        if life != old.lifecycle:
            refields.append((uid, unit_to_json(replace(old, lifecycle=life))))
    carried = [u for u in units_from_json(store.get_space_meta(space, CARRIED_KEY)) if not set(u.turn_ids) & turns]
    meta = {CARRIED_KEY: units_to_json(carried)}
    profiles = store.get_space_meta(space, PROFILES_KEY)
    if profiles:
        meta[PROFILES_KEY] = profiles_to_json(forget_units(profiles_from_json(profiles), sorted(gone)))
    return UnitExtras(lifecycle=lifecycle, refields=refields, meta=meta)


def replayed_lifecycle(unit: FTAUnit, incoming: Sequence[tuple[str, FTAUnit]]) -> Lifecycle:
    """A stored unit's paper lifecycle from its initial one (`initial_lifecycle`) through the
    `incoming` links to it ((relation, newer unit), oldest first), by the rules (`lifecycle_update`;
    an LLM's suggestion made when a link was written is not stored, so it is not replayed)."""
    life = initial_lifecycle(replace(unit, lifecycle=Lifecycle()))
    for rel, source in incoming:
        life = lifecycle_update(rel, source, replace(unit, lifecycle=life)) or life
    return life


def _unique_ids(units: list[FTAUnit]) -> list[FTAUnit]:
    """Units with distinct ids (a repeated content id gets "-2", "-3", ...)."""
    seen: dict[str, int] = {}
    out = []
    for u in units:
        n = seen.get(u.unit_id, 0) + 1
        seen[u.unit_id] = n
        out.append(u if n == 1 else replace(u, unit_id=f"{u.unit_id}-{n}"))
    return out


def load_units(store, space: str, ids: list[str]) -> dict[str, FTAUnit]:
    """Stored FTA units by id (lifecycle from the row, which links may have changed since)."""
    return {uid: replace(unit_from_json(fields), status=life)
            for uid, (life, fields) in store.unit_fields(space, ids).items()}


__all__ = ["CARRIED_KEY", "FTABatch", "FTABuilder", "PROFILES_KEY", "build_and_link", "forget_extras", "load_units",
           "replayed_lifecycle", "unit_amu", "unit_history", "unit_rows"]
