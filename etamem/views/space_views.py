"""The three views of one space, AMU routing between them, and their persistence.

Routing at construction (DESIGN §4): neutral AMUs -> Event tree keyed by text embeddings;
positive/negative -> Affect tree keyed by affective embeddings; every AMU -> Time forest
(text embeddings). Models are not loaded here: vectors are handed in.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Callable

import numpy as np

from ..types import AMU
from .calibration import Calibrator
from .semantic_tree import SemanticTree
from .time_forest import TimeForest

log = logging.getLogger(__name__)

VIEWS = ("event", "affect", "time")


def route(polarity: str) -> str:
    """The semantic view an AMU of this polarity belongs to."""
    return "event" if polarity == "neutral" else "affect"


class VectorsById(Mapping):
    """Read-only AMU id -> (d,) row of an (n, d) matrix, with `take(ids)` gathering many rows in
    one step (restoring trees at 100k AMUs without a dict of 100k row views)."""

    def __init__(self, matrix: np.ndarray, row: dict[str, int]):
        self.matrix, self.row = matrix, row

    def __getitem__(self, amu_id: str) -> np.ndarray:
        return self.matrix[self.row[amu_id]]

    def __contains__(self, amu_id) -> bool:
        return amu_id in self.row

    def __iter__(self):
        return iter(self.row)

    def __len__(self) -> int:
        return len(self.row)

    def take(self, ids: list[str]) -> np.ndarray:
        return self.matrix[np.fromiter((self.row[a] for a in ids), np.int64, len(ids))]


class SpaceViews:
    """Event, Affect and Time views of one space."""

    def __init__(self, config, text_dim: int, affect_dim: int):
        self.config = config
        self.event = self._tree(text_dim)
        self.affect = self._tree(affect_dim)
        self.time = TimeForest(text_dim, summary_delta=config.summary_delta, summary_reps=config.summary_reps)
        self._history_saved: dict[str, int] = {}  # calibration history records already in the store

    def _tree(self, dim: int) -> SemanticTree:
        return SemanticTree.from_config(dim, self.config)

    def tree(self, view: str) -> SemanticTree:
        if view not in ("event", "affect"):
            raise ValueError(f"view: expected 'event' or 'affect', got {view!r}")
        return getattr(self, view)

    def add(self, amus: list[AMU], text_vecs: np.ndarray, affect_vecs: np.ndarray) -> None:
        """Insert AMUs (text_vecs (n, d_t), affect_vecs (n, d_a), float32 unit rows), in batches
        of `config.insert_batch` per tree (0: one batch; 1: AMU by AMU, see `insert_many`)."""
        step = self.config.insert_batch or max(1, len(amus))
        for view, vecs in (("event", text_vecs), ("affect", affect_vecs)):
            idx = [i for i, a in enumerate(amus) if route(a.polarity) == view]
            for s in range(0, len(idx), step):
                part = idx[s: s + step]
                self.tree(view).insert_many([amus[i].amu_id for i in part], np.asarray(vecs)[part],
                                            [amus[i].text for i in part])
        for amu, tv in zip(amus, text_vecs):
            self.time.insert(amu.amu_id, tv, amu.timestamp, amu.session_id, amu.text)

    def remove(self, amu_id: str) -> bool:
        found = self.event.delete(amu_id) | self.affect.delete(amu_id)
        return self.time.delete(amu_id) or found

    def maintain(self, summariser: Callable | None = None) -> dict[str, dict[str, int]]:
        return {"event": self.event.maintain(summariser), "affect": self.affect.maintain(summariser),
                "time": self.time.maintain(summariser)}

    def summary_requests(self) -> list[tuple[str, object, list, list[str]]]:
        """(view, node, child node ids, representative texts) for every inner node whose summary
        the last `maintain` refreshed, deepest first per view: what an LLM summariser needs."""
        out = []
        for view in VIEWS:
            obj = getattr(self, view)
            for n in getattr(obj, "summarised", []):
                if view == "time":
                    if n in obj.nodes:
                        out.append((view, n, list(obj.nodes[n].children), [obj.texts[a] for a in obj.subtree_reps(n)]))
                elif obj.alive[n] and not obj.leaf_flag[n]:
                    out.append((view, n, list(obj.children[n]), [obj.texts[r] for r in obj.reps[n]]))
        return out

    def node_text(self, view: str, node) -> str:
        return getattr(self, view).node_text(node)

    def set_summaries(self, texts: dict[tuple[str, object], str]) -> None:
        """Install summaries computed outside `maintain` ((view, node) -> text) for nodes that
        still exist; they are persisted by the next save."""
        for (view, n), text in texts.items():
            obj = getattr(self, view)
            if view == "time":
                if n in obj.nodes:
                    obj.nodes[n].summary = text
                    obj.changed.add(n)
            elif obj.alive[n] and not obj.leaf_flag[n]:
                obj.summary[n] = text
                obj.changed.add(n)

    def view_of(self, amu_id: str) -> str | None:
        for view in ("event", "affect"):
            if amu_id in getattr(self, view).row_of:
                return view
        return None

    def shape(self) -> dict[str, dict]:
        return {"event": self.event.shape(), "affect": self.affect.shape(), "time": self.time.shape()}

    # --- persistence ---------------------------------------------------------------------------
    def save(self, store, space: str) -> dict[str, tuple[list, list]]:
        """Write changed nodes and the view states in one transaction; returns the changes (see
        `pop_changes`)."""
        payload, changes = self.pop_changes()
        store.save_views(space, payload)
        return changes

    def pop_changes(self) -> tuple[list, dict[str, tuple[list, list]]]:
        """What changed since the last call: the rows to persist (a `Store.save_views` payload)
        and, per view, (changed live node ids, removed node ids) for the search indexes."""
        payload, changes = [], {}
        for view in VIEWS:
            obj = getattr(self, view)
            changed, removed = obj.pop_changes()
            changes[view] = (changed, removed)
            state = obj.state()
            reservoir, history = b"", []
            if view != "time":  # the calibration history goes by record, so a write stays O(change)
                state["calibration"] = obj.calibrator.state()
                full = state["calibration"].pop("history")
                history = full[self._history_saved.get(view, 0):]
                self._history_saved[view] = len(full)
                reservoir = obj.calibrator.reservoir.astype("<f4").tobytes()
            payload.append((view, [obj.node_row(n) for n in changed], [str(n) for n in removed],
                            json.dumps(state), reservoir, history))
        return payload, changes

    @classmethod
    def load(cls, store, space: str, config, amus: list[AMU], text_vecs: np.ndarray, affect_vecs: np.ndarray,
             text_dim: int, affect_dim: int) -> "SpaceViews":
        """Restore the saved views and reconcile them with the active AMUs: AMUs missing from
        the views (e.g. a crash between writes, or a store written before views existed) are
        inserted, AMUs no longer active are removed."""
        views = cls(config, text_dim, affect_dim)
        saved = store.load_views(space)
        row = {a.amu_id: i for i, a in enumerate(amus)}
        tvec, avec = VectorsById(text_vecs, row), VectorsById(affect_vecs, row)
        texts = {a.amu_id: a.text for a in amus}
        times = {a.amu_id: a.timestamp for a in amus}
        for view in ("event", "affect"):
            if view in saved:
                state_json, reservoir, rows, history = saved[view]
                state = json.loads(state_json)
                if "history" not in state["calibration"]:  # else a store written before the history table
                    state["calibration"]["history"] = history
                    views._history_saved[view] = len(history)
                alive = [r for r in rows if all(m in tvec for m in r["members"])]
                if len(alive) == len(rows):
                    calib = Calibrator.from_state(state.pop("calibration"), np.frombuffer(reservoir, "<f4"))
                    setattr(views, view, SemanticTree.restore(state, rows, calib, tvec if view == "event" else avec,
                                                              texts))
                else:
                    log.warning("space %s: %s view refers to AMUs that are gone; rebuilding it", space, view)
        if "time" in saved:
            state_json, _, rows, _ = saved["time"]
            if all(m in tvec for r in rows for m in r["members"]):
                views.time = TimeForest.restore(json.loads(state_json), rows, tvec, texts, times)
        missing = [i for i, a in enumerate(amus) if views.view_of(a.amu_id) is None or a.amu_id not in views.time.amu_session]
        if missing:
            log.info("space %s: inserting %d AMUs missing from the views", space, len(missing))
            for i in missing:
                a = amus[i]
                if views.view_of(a.amu_id) is None:
                    views.tree(route(a.polarity)).insert(a.amu_id, text_vecs[i] if route(a.polarity) == "event"
                                                         else affect_vecs[i], a.text)
                if a.amu_id not in views.time.amu_session:
                    views.time.insert(a.amu_id, text_vecs[i], a.timestamp, a.session_id, a.text)
            views.maintain()
        return views
