"""Re-encode a store with other models (`etamem reindex`; see docs/design.md, 'Invariants', model identity).

A store's vectors were made by one text encoder and one affect tagger, recorded in the store
(`Store.models`); opening it with others is an error. `reindex_space` re-encodes one space's
units and raw turns with the new models, re-tags the units (a unit whose polarity changes moves
between the Event and Affect trees) and builds its views afresh, all committed in one
transaction; `Memory.reindex` runs it for every space under the space's write locks and then
records the new identity. An interrupted reindex is finished by running it again.
"""
from __future__ import annotations

import json
import logging
from dataclasses import replace

import numpy as np

from etamem.retrieval import turn_text
from etamem.views import SpaceViews

log = logging.getLogger(__name__)

PENDING_KEY = "reindex_to"  # meta key naming the identity a running reindex moves the store to


def check_identity(store, kind: str, model) -> None:
    """`kind` "text" (text encoder) or "affect" (affect tagger), `model` with `.name` and `.dim`:
    the first model used records itself in the store; another raises ValueError naming both."""
    name_key, dim_key = ("text_encoder", "text_dim") if kind == "text" else ("affect_tagger", "affect_dim")
    mine = {name_key: str(model.name), dim_key: str(int(model.dim))}
    saved = store.record_models(mine)
    if saved != mine:
        what = "text encoder" if kind == "text" else "affect tagger"
        if store.get_meta(PENDING_KEY):
            what += f" (a reindex to {store.get_meta(PENDING_KEY)} was interrupted: run it again)"
        raise ValueError(
            f"{what}: the store {store.path or '(in memory)'} was built with {saved.get(name_key)!r} "
            f"(dim {saved.get(dim_key)}), this Memory uses {mine[name_key]!r} (dim {mine[dim_key]}); configure "
            f"the same model, or re-encode the store with `etamem reindex` (Memory.reindex)")


def reindex_space(store, space: str, config, text_encoder, affect_tagger) -> dict:
    """Re-encode, re-tag and rebuild one space; returns counts (units, turns, moved between views)."""
    units = store.amus(space)
    turns = store.turns(space, extracted_only=True)
    texts = [u.text for u in units]
    text_vecs = np.asarray(text_encoder.encode(texts), np.float32).reshape(len(units), text_encoder.dim)
    affect = affect_tagger.tag(texts)
    affect_vecs = np.asarray(affect.embeddings, np.float32).reshape(len(units), affect_tagger.dim)
    new = [replace(u, polarity=affect.polarities[i], polarity_scores=tuple(float(x) for x in affect.scores[i]))
           for i, u in enumerate(units)]
    turn_vecs = np.asarray(text_encoder.encode([turn_text(t) for t in turns]), np.float32).reshape(
        len(turns), text_encoder.dim)
    views = SpaceViews(config, text_encoder.dim, affect_tagger.dim)
    views.add(new, text_vecs, affect_vecs)
    views.maintain()
    payload, _ = views.pop_changes()
    store.replace_vectors(space, new, text_vecs, affect_vecs, [t.turn_id for t in turns], turn_vecs, payload,
                          {"text_dim": text_encoder.dim, "affect_dim": affect_tagger.dim})
    moved = sum((a.polarity == "neutral") != (b.polarity == "neutral") for a, b in zip(units, new))
    log.info("space %s: re-encoded %d units and %d turns (%d changed view)", space, len(units), len(turns), moved)
    return {"units": len(units), "turns": len(turns), "moved": moved}


def reindex_store(store, text_encoder, affect_tagger, reindex_one) -> dict[str, dict]:
    """`reindex_one(space)` (re-encode one space, under its write lock) for every space, between
    recording the target models as pending and recording them as the store's models, so an
    interrupted run is named by `check_identity`; returns counts per space."""
    mine = {"text_encoder": text_encoder.name, "text_dim": text_encoder.dim, "affect_tagger": affect_tagger.name,
            "affect_dim": affect_tagger.dim}
    store.set_meta(PENDING_KEY, json.dumps(mine, sort_keys=True))
    out = {space: reindex_one(space) for space in store.spaces()}
    with store.transaction() as cur:
        store.set_models(mine, cur=cur)
        cur.execute("DELETE FROM meta WHERE key=?", (PENDING_KEY,))
    return out
