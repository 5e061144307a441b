"""The three views of one space, AMU routing between them, and their persistence.

Routing at construction (see docs/design.md, 'Write path'): neutral AMUs -> Event tree keyed by text embeddings;
positive/negative -> Affect tree keyed by affective embeddings; every AMU -> Time forest
(text embeddings). Models are not loaded here: vectors are handed in.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Callable

import numpy as np

from etamem.records import AMU
from etamem.views.calibration import Calibrator
from etamem.views.semantic_tree import SemanticTree
from etamem.views.time_forest import TimeForest
from etamem.views.validation import check_rows

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
        self._stale: dict[str, list[str]] = {}  # view -> saved node ids of a view rebuilt on load

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

    def forget(self, amu_ids: list[str]) -> None:
        """Remove AMUs and recompute, extractively, the summaries that may quote them (an LLM's
        too; it comes back at the node's next refresh): in the trees, those of the nodes above
        them and of every node whose recorded quotes name one (`SemanticTree.forget`: units move
        between nodes); in the Time forest, where units never move, those above them."""
        for view in ("event", "affect"):
            self.tree(view).forget(amu_ids)
        above = {n for a in amu_ids for n in self.time.ancestors(a)}
        for a in amu_ids:
            self.time.delete(a)
        self.time.refresh_summaries(above)

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
        still exist, deepest first (a tree node records what it may quote from its children's
        records); they are persisted by the next save."""
        for (view, n), text in texts.items():
            if view == "time" and n in self.time.nodes:
                self.time.nodes[n].summary = text
                self.time.changed.add(n)
        for view in ("event", "affect"):
            tree = self.tree(view)
            mine = [n for v, n in texts if v == view and tree.alive[n] and not tree.leaf_flag[n]]
            for n in sorted(mine, key=lambda n: -len(tree.path(n))):
                tree.set_summary(n, texts[(view, n)])

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
            stale = self._stale.pop(view, [])
            payload.append((view, [obj.node_row(n) for n in changed], stale + [str(n) for n in removed],
                            json.dumps(state), reservoir, history))
        return payload, changes

    def apply(self, states: dict, rows: dict[str, list[dict]], removed: dict[str, list[str]], new: list[AMU],
              text_vecs: np.ndarray, affect_vecs: np.ndarray, gone: list[str]) -> dict[str, tuple[list, list]]:
        """Bring the views to what another process committed (`etamem.live.change_log`): `states`
        (`Store.view_states`), per view the rows of the nodes it changed and the ids of those it
        removed, the units it added (`new`, with (n, d_t) / (n, d_a) vectors) and the ids of those
        it removed (`gone`). Returns the changes for the search indexes (`pop_changes`' second)."""
        for obj in (self.event, self.affect, self.time):
            obj.drop_units(gone)
        changes = {}
        for view in VIEWS:
            if view not in states:
                changes[view] = ([], [])
                continue
            state_json, reservoir, history = states[view]
            state = json.loads(state_json)
            if view == "time":
                self.time.apply_rows(state, rows.get(view, []), removed.get(view, []),
                                     {a.amu_id: v for a, v in zip(new, text_vecs)}, {a.amu_id: a.text for a in new},
                                     {a.amu_id: a.timestamp for a in new})
                changes[view] = ([r["node_id"] for r in rows.get(view, [])], list(removed.get(view, [])))
                continue
            calibration = state.pop("calibration")
            if "history" not in calibration:
                calibration["history"] = history
                self._history_saved[view] = len(history)
            calib = Calibrator.from_state(calibration, np.frombuffer(reservoir, "<f4"))
            mine = [i for i, a in enumerate(new) if route(a.polarity) == view]
            tree = self.tree(view)
            vecs = np.asarray(text_vecs if view == "event" else affect_vecs)[mine] if mine else np.zeros((0, tree.dim))
            tree.apply_rows(state, rows.get(view, []), removed.get(view, []), calib, [new[i].amu_id for i in mine],
                            vecs, [new[i].text for i in mine])
            changes[view] = ([int(r["node_id"]) for r in rows.get(view, [])], [int(n) for n in removed.get(view, [])])
        return changes

    def _restore(self, view: str, saved: tuple, space: str, config, amus: list[AMU], tvec, avec, texts,
                 times) -> list[str]:
        """Restore one saved view if its rows pass `check_rows`; else return the problems."""
        state_json, reservoir, rows, history = saved
        state = json.loads(state_json)
        if view == "time":
            problems = check_rows(rows, {a.amu_id for a in amus}, [r["node_id"] for r in rows if r["parent_id"] is None],
                                  session_of={a.amu_id: a.session_id for a in amus})
            if not problems:
                _warn_overrides(space, "time", config, state)
                self.time = TimeForest.restore(state, rows, tvec, texts, times)
            return problems
        problems = check_rows(rows, {a.amu_id for a in amus if route(a.polarity) == view}, [str(state["root"])],
                              n_nodes=int(state["n_nodes"]))
        if problems:
            return problems
        if "history" not in state["calibration"]:  # else a store written before the history table
            state["calibration"]["history"] = history
            self._history_saved[view] = len(history)
        _warn_overrides(space, view, config, {**state.get("params", {}), **state["calibration"]})
        calib = Calibrator.from_state(state.pop("calibration"), np.frombuffer(reservoir, "<f4"))
        setattr(self, view, SemanticTree.restore(state, rows, calib, tvec if view == "event" else avec, texts))
        return []

    @classmethod
    def load(cls, store, space: str, config, amus: list[AMU], text_vecs: np.ndarray, affect_vecs: np.ndarray,
             text_dim: int, affect_dim: int, saved: dict | None = None) -> "SpaceViews":
        """Restore the saved views (`saved`: what `store.load_views` returns, read from a snapshot;
        None: read from the store). A view whose rows fail validation (`check_rows`: every active
        unit in exactly one leaf, parents and children consistent, counts adding up) is rebuilt
        from the units with a warning, and its old rows are deleted by the next save; a store
        written before views existed gets them built. A store always opens."""
        views = cls(config, text_dim, affect_dim)  # a new instance of this class: its private parts are ours
        saved = store.load_views(space) if saved is None else saved
        row = {a.amu_id: i for i, a in enumerate(amus)}
        tvec, avec = VectorsById(text_vecs, row), VectorsById(affect_vecs, row)
        texts = {a.amu_id: a.text for a in amus}
        times = {a.amu_id: a.timestamp for a in amus}
        for view in VIEWS:
            if view not in saved:
                continue
            rows = saved[view][2]
            try:
                problems = views._restore(view, saved[view], space, config, amus, tvec, avec, texts, times)
            except (KeyError, ValueError, IndexError, TypeError, AttributeError) as exc:  # unreadable state
                problems = [f"{type(exc).__name__}: {exc}"]
            if problems:
                log.warning("space %r: the saved %s view is inconsistent (%s); rebuilding it from its units",
                            space, view, "; ".join(problems[:3]))
                setattr(views, view, views._tree(text_dim if view == "event" else affect_dim) if view != "time"
                        else TimeForest(text_dim, summary_delta=config.summary_delta, summary_reps=config.summary_reps))
                views._stale[view] = [r["node_id"] for r in rows]  # deleted by the next save
                views._history_saved.pop(view, None)
        in_tree, in_time = views.event.row_of.keys() | views.affect.row_of.keys(), views.time.amu_session
        missing = [i for i, a in enumerate(amus) if a.amu_id not in in_tree or a.amu_id not in in_time]
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


# saved parameter (tree `state()["params"]`, calibrator and time forest state) -> Config field
_SAVED_PARAMS = {"b_max": "b_max", "m_min": "m_min", "b_ins": "b_ins", "summary_delta": "summary_delta",
                 "summary_reps": "summary_reps", "pair_samples": "calibration_pair_samples", "seed": "seed",
                 "top_width": "insert_top_width", "reservoir_size": "calibration_reservoir",
                 "min_obs": "calibration_min_obs", "low_pct": "calibration_low_pct",
                 "high_pct": "calibration_high_pct", "alpha": "calibration_ema_alpha", "m_max_bounds": "m_max_bounds"}


def _warn_overrides(space: str, view: str, config, saved: dict) -> None:
    """One warning naming each saved parameter of a restored view that differs from the config
    (the saved value wins: the view was built with it)."""
    diffs = []
    for key, field in _SAVED_PARAMS.items():
        if key not in saved or not hasattr(config, field):
            continue
        have, want = saved[key], getattr(config, field)
        if isinstance(want, tuple):
            have = tuple(have)
        if have != want:
            diffs.append(f"saved {key}={have} overrides config {field}={want}")
    if diffs:
        log.warning("space %r %s view: %s (the %s was built with %s)", space, view, "; ".join(diffs),
                    "forest" if view == "time" else "tree", "it" if len(diffs) == 1 else "them")
