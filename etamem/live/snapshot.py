"""A live space's open inputs snapshot into its derived files, so that opening a large space reads
a few flat files instead of every unit row, vector blob and view row of the store.

    <derived directory>/snapshot/{rows.json, amu_text.npy, amu_affect.npy}

`write` takes what a `LiveSpace` holds after a write committed (its units, their vectors, its
extracted turns): exactly what `Store.amus`, `Store.amu_vector_pair` and `Store.turns` return for
the same stamp, encoded as the store encodes it (ISO times, JSON lists, float32 vectors), each file
parsed in one call. `read` gives those values back in the store's order, which it takes from the
store's id columns (`active_amu_ids`, `extracted_turn_ids`: one narrow read that also checks the
snapshot holds exactly the store's units and turns). The view rows are not in it: they are few
(a tenth of the units) and the open reads and validates them from the store, as without a
snapshot. The files are covered by the derived directory's checksum and stamp
(`etamem.live.derived`), and `LiveSpace.open` compares a random sample of units, turns and vectors
with the store's; anything that does not fit raises ValueError and the caller opens from the
store.
"""
from __future__ import annotations

import gc
import json
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np

from etamem.live.npy_files import load_npy
from etamem.records import AMU, Turn

FORMAT = 2  # 2: the view rows left to the store
DIRNAME = "snapshot"


@dataclass
class Snapshot:
    """What `LiveSpace.open` reads from the store, in the store's order: active units, their text
    (n, d_t) and affective (n, d_a) float32 vectors and the extracted turns."""

    amus: list[AMU]
    text_vecs: np.ndarray
    affect_vecs: np.ndarray
    turns: list[Turn]


@contextmanager
def gc_paused():
    """The cyclic garbage collector off for a bulk load (it would scan the growing heap again
    and again while hundreds of thousands of rows are built: about half of an open at 100k
    units); back on after, unless it was off already. Nothing is leaked: the next collection
    runs as usual."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class _Iso(dict):
    """(datetime, its UTC offset) -> its ISO string, each distinct time formatted once (units share
    their turns' times). The offset is in the key: equal instants in two zones are equal
    datetimes, not equal strings."""

    def __missing__(self, key: tuple) -> str:
        self[key] = text = key[0].isoformat()
        return text


def _amu_row(a: AMU, iso: _Iso) -> list:
    return [a.amu_id, a.text, a.speaker, iso[a.timestamp, a.timestamp.utcoffset()], a.session_id,
            list(a.source_turn_ids), a.polarity, [float(s) for s in a.polarity_scores], a.status, a.space]


def _turn_row(t: Turn, iso: _Iso) -> list:
    return [t.turn_id, t.session_id, t.speaker, t.text, iso[t.timestamp, t.timestamp.utcoffset()], t.space, t.extra]


def write(directory: str | Path, index, turns) -> None:
    """Write the snapshot of a live space's units and vectors (`index`, a `SpaceIndex`) and
    extracted turns (`turns`, a `TurnIndex`) into `directory`."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    slots = [s for s, a in enumerate(index.ids) if a is not None]
    amus = [index.amu_of[index.ids[s]] for s in slots]
    live_turns = [t for t in turns.turns if t is not None]
    iso = _Iso()
    (d / "rows.json").write_text(json.dumps({"format": FORMAT, "amus": [_amu_row(a, iso) for a in amus],
                                             "turns": [_turn_row(t, iso) for t in live_turns]},
                                            sort_keys=True))  # a turn's extra as the store keeps it
    np.save(d / "amu_text.npy", np.ascontiguousarray(index.text_vecs[slots], np.float32), allow_pickle=False)
    np.save(d / "amu_affect.npy", np.ascontiguousarray(index.affect_vecs[slots], np.float32), allow_pickle=False)


def exists(directory: str | Path) -> bool:
    """Whether `directory` (a derived directory's `DIRNAME`) holds a snapshot."""
    return (Path(directory) / "rows.json").is_file()


def read(directory: str | Path, amu_ids: list[str], turn_ids: list[str]) -> Snapshot:
    """The snapshot in `directory`, ordered as the store orders its active units (`amu_ids`) and
    extracted turns (`turn_ids`); ValueError unless it holds exactly those."""
    d = Path(directory)
    rows = json.loads((d / "rows.json").read_text())
    if rows.get("format") != FORMAT:
        raise ValueError("snapshot of another format")
    amu_rows, turn_rows = rows["amus"], rows["turns"]
    at = {r[0]: i for i, r in enumerate(amu_rows)}
    if len(at) != len(amu_rows) or len(amu_ids) != len(at) or any(a not in at for a in amu_ids):
        raise ValueError("snapshot units do not match the store's active units")
    order = np.fromiter((at[a] for a in amu_ids), np.int64, len(amu_ids))
    amus = [AMU(r[0], r[1], r[2], datetime.fromisoformat(r[3]), r[4], tuple(r[5]), r[6], tuple(r[7]), r[8], r[9])
            for r in (amu_rows[i] for i in order.tolist())]
    text, affect = load_npy(d / "amu_text.npy", "c"), load_npy(d / "amu_affect.npy", "c")
    if text.shape[0] != len(amu_rows) or affect.shape[0] != len(amu_rows) or text.ndim != 2 or affect.ndim != 2:
        raise ValueError("snapshot vectors do not match its units")
    if not np.array_equal(order, np.arange(len(order))):  # else the store's order already: no gather
        text, affect = text[order], affect[order]
    by_turn = {r[0]: r for r in turn_rows}
    if len(by_turn) != len(turn_rows) or len(turn_ids) != len(by_turn) or any(t not in by_turn for t in turn_ids):
        raise ValueError("snapshot turns do not match the store's extracted turns")
    turns = [Turn(r[0], r[1], r[2], r[3], datetime.fromisoformat(r[4]), r[5], r[6])
             for r in (by_turn[t] for t in turn_ids)]
    return Snapshot(amus, np.asarray(text), np.asarray(affect), turns)


__all__ = ["DIRNAME", "FORMAT", "Snapshot", "exists", "gc_paused", "read", "write"]
