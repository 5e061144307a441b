"""Construction of memory units from raw turns: extract, encode, tag (see docs/design.md, 'Write path').

`build_units` is the model side of a write, run outside the space's locks; `Memory` hands
its result to the live space, which updates the views, the indexes and the store at once.
"""
from __future__ import annotations

import threading
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Callable

import numpy as np

from etamem.models.llm import cache_refs
from etamem.records import AMU, Turn
from etamem.retrieval import turn_text
from etamem.store.schema import UnitExtras

if TYPE_CHECKING:
    from etamem.engine import Engine
    from etamem.live.space import LiveSpace

CONTEXT_TURNS = 4  # earlier turns of the session given to the extractor with each turn
UNITS_KEY = "units"  # space meta: "amu" | "fta", the kind of units the space's writes build


def check_units_kind(store, space: str, kind: str) -> bool:
    """ValueError when `space` holds the other kind of units than `kind` ("amu" | "fta": one
    space, one kind); True when the space has not recorded its kind yet (the caller records it)."""
    recorded = store.get_space_meta(space, UNITS_KEY)
    if recorded is None and store.count_amus(space):
        recorded = "amu"  # written before the kind was recorded: AMUs
    if recorded is not None and recorded != kind:
        raise ValueError(f"space {space!r} holds {recorded} units and this Memory's config builds {kind} units "
                         f"(config method / units): open it with units={recorded!r} or use another space")
    return store.get_space_meta(space, UNITS_KEY) is None


def build_units(turns: list[Turn], space: str, extractor, text_encoder, affect_tagger,
                timed: Callable[[str], AbstractContextManager]) -> tuple[list[AMU], np.ndarray, np.ndarray, np.ndarray]:
    """The units of `turns` (one session's batch, in order) with their vectors: (units, text
    vectors (n, d_t), affective vectors (n, d_a), raw-turn vectors (len(turns), d_t)), float32.
    Unit ids are `<turn id>#<k>`; `timed(stage)` accounts the extract / encode / tag stages."""
    drafts: list[tuple[Turn, list[str]]] = []
    with timed("extract"):
        for i, turn in enumerate(turns):
            context = turns[max(0, i - CONTEXT_TURNS):i]
            # LLM cache entries are tagged with every turn whose text the prompt holds (forgetting)
            with cache_refs(*(f"turn:{space}/{t.turn_id}" for t in [*context, turn])):
                drafts.append((turn, extractor.extract(turn, context)))
    return encode_units(drafts, space, text_encoder, affect_tagger, timed, turns=turns)


def encode_units(drafts: list[tuple[Turn, list[str]]], space: str, text_encoder, affect_tagger,
                 timed: Callable[[str], AbstractContextManager], *, turns: list[Turn] = (), infix: str = ""
                 ) -> tuple[list[AMU], np.ndarray, np.ndarray, np.ndarray]:
    """AMUs of each (turn, unit texts) draft, encoded and tagged: (units, text vectors (n, d_t),
    affective vectors (n, d_a), vectors of `turns`' searchable texts (len(turns), d_t)), float32,
    encoded in one call. Unit ids are `<turn id>#<infix><k>` (LLM units replacing a turn's rule
    units take another infix, so the two never share an id)."""
    flat = [(turn, k, text) for turn, texts in drafts for k, text in enumerate(texts)]
    texts = [d[2] for d in flat]
    with timed("encode"):  # units and raw turns in one call: turn vectors are encoded once, here
        vecs = text_encoder.encode(texts + [turn_text(t) for t in turns])
        text_vecs, turn_vecs = vecs[:len(texts)], vecs[len(texts):]
    with timed("tag"):
        affect = affect_tagger.tag(texts)
    units = [
        AMU(amu_id=f"{turn.turn_id}#{infix}{k}", text=text, speaker=turn.speaker, timestamp=turn.timestamp,
            session_id=turn.session_id, source_turn_ids=(turn.turn_id,), polarity=affect.polarities[j],
            polarity_scores=tuple(float(s) for s in affect.scores[j]), space=space)
        for j, (turn, k, text) in enumerate(flat)
    ]
    return units, text_vecs, affect.embeddings, turn_vecs


class AMUUnits:
    """Turns made into AMUs by the extractor (rules, or an LLM), encoded and tagged (`build_units`),
    with `supersedes` links to the units they replace (the classifier `supersession(engine)`)."""

    kind = "amu"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._supersession, self._supersession_resolved = None, False
        self._restatement, self._restatement_resolved = None, False

    def restatement(self, engine: Engine):
        """The classifier of repeats (`etamem.facts.restatements`), made on first use from
        `engine`'s config; None when `Config.restatements` is "off"."""
        with self._lock:
            if not self._restatement_resolved:
                self._restatement = make_restatement(engine)
                self._restatement_resolved = True
            return self._restatement

    def supersession(self, engine: Engine):
        """The classifier of `supersedes` links between AMUs (`etamem.facts.supersession`), made on
        first use from `engine`'s config and models; None when `Config.supersession` is "off"."""
        with self._lock:
            if not self._supersession_resolved:
                self._supersession = make_supersession(engine)
                self._supersession_resolved = True
            return self._supersession

    def warm(self, engine: Engine) -> None:
        """See `Units.warm`: the `supersedes` classifier made, its models loaded (the attribute
        slots' prototype vectors, `etamem.facts.slots`)."""
        warm = getattr(self.supersession(engine), "warm", None)
        if warm is not None:
            warm()

    def build(self, engine: Engine, live: LiveSpace, turns: list[Turn], complete: bool):
        """See `Units.build`. With the LLM's work queued behind the write (`Engine.llm_queue`),
        the units come from the LLM extractor's rule fallback and the links from the rules."""
        deferred = engine.llm_queue is not None
        extractor = engine.extractor.fallback if deferred else engine.extractor
        units, text_vecs, affect_vecs, turn_vecs = build_units(
            turns, live.name, extractor, engine.text_encoder, engine.affect_tagger, engine.timed)
        from etamem.records import REVISES_KEY

        mentions: list[AMU] = []
        repeats = self.restatement(engine)
        if deferred:
            repeats = getattr(repeats, "rules", repeats)  # an LLM classifier's rules
        # a revised turn (`Memory.update`) is a change of its old units, never their repeat
        if repeats is not None and units and not any(REVISES_KEY in t.extra for t in turns):
            from etamem.facts.mentions import merge_restatements

            with engine.timed("links"):
                merged = merge_restatements(live, engine.store, units, text_vecs, affect_vecs, repeats)
            units, text_vecs, affect_vecs, mentions = merged.units, merged.text_vecs, merged.affect_vecs, merged.mentions
        classifier = self.supersession(engine)
        if deferred:
            classifier = getattr(classifier, "fallback", classifier)  # an LLM classifier's rules
        links = []
        if classifier is not None and units:
            with engine.timed("links"):
                links = supersession_links(live, units, text_vecs, classifier, engine.config.supersession_floor)
        extras = UnitExtras(links=links, mentions=mentions) if links or mentions else None
        return turns, units, text_vecs, affect_vecs, turn_vecs, extras

    def forget_extras(self, store, space: str, units, dropped, rewritten) -> UnitExtras | None:
        """The units that only a dropped turn mentions among others lose that turn (`etamem.facts.mentions`:
        a restated fact stays while another mention remains); their rows and links go with them
        otherwise (`store.forget`)."""
        from etamem.facts.mentions import detach

        kept = detach(store, space, units, dropped)
        return UnitExtras(mentions=kept) if kept else None

    def history(self, store, space: str, unit_id: str) -> list | None:
        """None: an AMU's versions are the generic `supersedes` chain (`Memory.history`)."""
        return None


def make_supersession(engine: Engine):
    """The `supersedes` classifier `engine`'s config asks for: None ("off"), an LLM's with the
    rules as fallback ("llm", or "auto" with an LLM), else the rules, with the attribute slots
    (`etamem.facts.slots`) unless `supersession_slots` is off; the LLM's gate is
    `supersession_llm_gate`. ValueError when "llm" has no LLM."""
    from etamem.facts.llm_supersession import LLMSupersession
    from etamem.facts.supersession import RuleSupersession

    config = engine.config
    mode, rules = config.supersession, RuleSupersession(config.supersession_floor)
    if mode == "llm" and engine.llm is None:
        raise ValueError("config supersession='llm' needs an LLM: set llm_model or ETAMEM_LLM_MODEL")
    use_llm = mode == "llm" or (mode == "auto" and engine.llm is not None)
    if mode != "off" and not use_llm and config.supersession_slots:
        from etamem.facts.slots import SlotSupersession

        rules = SlotSupersession(engine.text_encoder, rules)
    if mode == "off":
        return None
    if not use_llm:
        return rules
    gate = {}
    if config.supersession_llm_gate == "slots":
        from etamem.facts.slots import AttributeSlots

        gate = {"slots": AttributeSlots(), "encoder": engine.text_encoder}
    return LLMSupersession(engine.llm, rules, temperature=config.fta_construction_temperature,
                           gate=config.supersession_llm_gate, **gate)


def make_restatement(engine: Engine):
    """The repeats classifier `engine`'s config asks for (`Config.restatements`): None ("off"),
    the rules, or the rules then the LLM ("llm", or "auto" with an LLM). ValueError when "llm"
    has no LLM."""
    from etamem.facts.restatements import LLMRestatement, RuleRestatement

    mode = engine.config.restatements
    if mode == "llm" and engine.llm is None:
        raise ValueError("config restatements='llm' needs an LLM: set llm_model or ETAMEM_LLM_MODEL")
    if mode == "off":
        return None
    use_llm = mode == "llm" or (mode == "auto" and engine.llm is not None)
    return LLMRestatement(engine.llm) if use_llm else RuleRestatement()


def supersession_links(live, units: list[AMU], text_vecs: np.ndarray, classifier, floor: float) -> list:
    """`supersedes` links of new `units` (text vectors (n, d_t)) against the live space's stored
    units nearest each (`SpaceIndex.flat_candidates`) and the batch's earlier units
    (`etamem.facts.supersession.find_supersessions`); the index is read under the space's read lock, the
    classifier (maybe an LLM) runs outside it."""
    from etamem.facts.lookalikes import distinct_facts
    from etamem.facts.supersession import find_supersessions, is_fact

    near: list[list[tuple[AMU, float]]] = []
    vectors: dict[str, np.ndarray] = {}  # the candidates' text vectors, for a classifier that uses them
    wants = bool(getattr(classifier, "uses_vectors", False))
    with live.rw.read():
        for unit, vec in zip(units, np.asarray(text_vecs, np.float32)):
            found = live.index.flat_candidates(vec, 32) if is_fact(unit.text) else []
            near.append([(live.index.amu_of[s.key], s.cos) for s in found if s.key in live.index.amu_of])
            if wants:
                vectors.update((s.key, live.index.text_vecs[live.index.row_of[s.key]].copy())
                               for s in found if s.key in live.index.row_of)
    return find_supersessions(units, text_vecs, near, classifier, floor=floor, near_vectors=vectors,
                              distinct=distinct_facts)
