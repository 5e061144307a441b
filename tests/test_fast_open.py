"""Opening a space from the snapshot in its derived files (`etamem.live.snapshot`): no unit,
vector or turn rows are read from the store beyond a sample compared with the snapshot, and the space answers exactly as one opened
from the store; a snapshot of another generation, or a damaged one, is ignored (the store path,
with a warning for damage). Real store, views, FAISS and BM25; a text-dependent hashing encoder."""
from __future__ import annotations

import json
import logging
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import HashingEncoder
from etamem import Memory
from etamem.live import derived
from etamem.live import snapshot as space_snapshot
from etamem.models.affect import VaderAffectTagger
from etamem.store.sqlite import Store

WORDS = ("cat tuna marathon Berlin sourdough bread Lisbon June novel whales sister cello garden roses "
         "guitar chess coffee rain mountains kayak opera").split()
MOODS = ["I love", "I hate", "I finished", "I am worried about", "I bought", "We talked about"]
QUERIES = ["what about the cat and tuna?", "Berlin marathon training", "who plays the cello?",
           "sourdough bread in June", "I hate the rain", "coffee and chess with my sister"]
# bulk reads of the store and the keyword / position that limits each to some ids
READS = {"amus": "amu_ids", "amu_vector_pair": 1, "amu_vectors": 2, "turns": "turn_ids", "turn_vectors": 1}
SAMPLE = 48  # at most this many ids of each are read, by key


def memory(path) -> Memory:
    enc = HashingEncoder()
    return Memory(path, text_encoder=enc, affect_tagger=VaderAffectTagger(enc))


def session(rng, s: int, n: int) -> list[dict]:
    return [{"turn_id": f"s{s}-{i}", "session_id": f"s{s}", "speaker": ["Ana", "Ben"][i % 2],
             "text": f"{MOODS[int(rng.integers(len(MOODS)))]} the {' and the '.join(rng.choice(WORDS, 2))}.",
             "timestamp": f"2023-0{1 + s // 2 % 9}-{1 + i:02d}T{10 + s % 2}:00{'+01:00' if s % 2 else '+00:00'}",
             "extra": {"z": i, "a": [s, "x"]}}  # the same instants in two zones
            for i in range(n)]


def build(path, sessions: int = 8) -> None:
    """A space with several sessions, ended ones (summaries), a deleted unit (a tombstone slot),
    closed (the derived files and their snapshot are written)."""
    rng = np.random.default_rng(3)
    mem = memory(path)
    for s in range(sessions):
        mem.add(session(rng, s, 12), space="u")
        if s % 3 == 2:
            mem.end_session("u")
    mem.delete("u", mem.list("u")[5].amu_id)
    mem.add(session(rng, sessions, 4), space="u")
    mem.close()


def answers(mem: Memory) -> dict:
    """Everything a caller sees of the opened space: hits of several queries (ids, scores, views),
    the index info, the views' shape, units and turns in order."""
    live = mem.live_space("u")
    return {"hits": [[(h.amu.amu_id, h.score, h.views, h.amu) for h in mem.search(q, space="u", top_k=15)]
                     for q in QUERIES],
            "info": {k: v for k, v in mem.index_info("u").items() if k != "saved"},
            "shape": mem.views("u").shape(), "amus": live.index.amus,
            "turns": [t for t in live.turns.turns if t is not None], "arrival": live.turns.arrival,
            "times": [a.timestamp.isoformat() for a in live.index.amus]  # equal datetimes, not equal zones
            + [t.timestamp.isoformat() for t in live.turns.turns if t is not None]}


def open_without_reading_rows(mem: Memory, monkeypatch) -> None:
    """Open the space with every read of the store's unit, vector or turn rows beyond a sample of
    ids failing the test (the view rows are read: the open validates them)."""
    with monkeypatch.context() as m:
        for name, limit in READS.items():
            real = getattr(Store, name)

            def guarded(self, *a, _n=name, _real=real, _limit=limit, **k):
                ids = k.get(_limit) if isinstance(_limit, str) else (a[_limit - 1] if len(a) >= _limit else None)
                if ids is None or len(ids) > SAMPLE:
                    pytest.fail(f"open read store.{_n} beyond a sample")
                return _real(self, *a, **k)
            m.setattr(Store, name, guarded)
        mem.views("u")


def from_store(path, tmp_path) -> dict:
    """The answers of a copy of the store without its derived files (opened from the store)."""
    copy = tmp_path / "from-store"
    shutil.copytree(path, copy)
    shutil.rmtree(copy / derived.DIRNAME)
    mem = memory(copy)
    try:
        assert mem.index_info("u")["saved"] is None
        return answers(mem)
    finally:
        mem.close()


def snapshot_dir(path):
    store = Store(path / "memory.sqlite")
    salt = store.name_salt()
    store.close()
    (target,) = derived.space_dir(path, "u", salt).glob("g*")
    return target / space_snapshot.DIRNAME


def test_open_from_the_snapshot_equals_open_from_the_store(tmp_path, monkeypatch):
    path = tmp_path / "s"
    build(path)
    assert space_snapshot.exists(snapshot_dir(path))
    mem = memory(path)
    try:
        open_without_reading_rows(mem, monkeypatch)
        info = mem.index_info("u")
        assert info["saved"] == info["generation"]  # loaded from the derived files, nothing to save
        got = answers(mem)
    finally:
        mem.close()
    want = from_store(path, tmp_path)
    assert all(got["hits"]) and got["hits"] == want["hits"]
    assert got == want
    extras = [t.extra for t in got["turns"]]
    assert all(list(e) == ["a", "z"] for e in extras)  # as the store gives them (sorted keys)


def test_a_snapshot_of_another_generation_is_ignored(tmp_path, monkeypatch, caplog):
    path = tmp_path / "s"
    build(path)
    writer = memory(path)  # another process writes and never saves its derived files
    writer.add([{"turn_id": "late", "session_id": "s99", "speaker": "Ana",
                 "text": "I adopted a hedgehog called Pickles.", "timestamp": "2023-12-01T10:00"}], space="u")
    monkeypatch.setattr(writer, "checkpoint", list)
    reader = memory(path)
    try:
        caplog.set_level(logging.WARNING)
        assert reader.index_info("u")["saved"] is None  # the store path: the files are a generation behind
        top = reader.search("hedgehog Pickles", space="u", top_k=3)
        assert ("late",) in [h.amu.source_turn_ids for h in top]  # the other process's write is seen
        got = answers(reader)
    finally:
        reader.close()
        writer.close()
    assert got == from_store(path, tmp_path)


def test_a_damaged_snapshot_falls_back_to_the_store_with_a_warning(tmp_path, caplog):
    path = tmp_path / "s"
    build(path)
    want = from_store(path, tmp_path)
    vectors = snapshot_dir(path) / "amu_text.npy"
    data = bytearray(vectors.read_bytes())
    data[-4 * 64:] = np.ones(64, np.float32).tobytes()  # one unit's vector rewritten, same size
    vectors.write_bytes(bytes(data))
    caplog.set_level(logging.WARNING)
    mem = memory(path)
    try:
        assert mem.index_info("u")["saved"] is None
        assert "do not match their checksum" in caplog.text
        assert answers(mem) == want
    finally:
        mem.close()
    caplog.clear()
    mem = memory(path)  # the close wrote them again: the snapshot opens
    try:
        assert mem.index_info("u")["saved"] == mem.index_info("u")["generation"] and not caplog.text
    finally:
        mem.close()


def _rows(snap, fn) -> None:
    rows = json.loads((snap / "rows.json").read_text())
    fn(rows)
    (snap / "rows.json").write_text(json.dumps(rows))


def _every_text(rows, kind: str, column: int) -> None:
    for r in rows[kind]:
        r[column] = r[column] + " (rewritten)"


WRONG = {  # snapshots that do not describe the store, each caught by another check
    "a unit dropped": lambda snap: _rows(snap, lambda rows: rows["amus"].pop()),
    "unit texts rewritten": lambda snap: _rows(snap, lambda rows: _every_text(rows, "amus", 1)),
    "turn texts rewritten": lambda snap: _rows(snap, lambda rows: _every_text(rows, "turns", 3)),
    "unit vectors reversed": lambda snap: np.save(snap / "amu_text.npy", np.load(snap / "amu_text.npy")[::-1].copy()),
    "raw-turn vectors reversed": lambda snap: np.save(
        snap.parent / "turns" / "dense" / "vectors.npy", np.load(snap.parent / "turns" / "dense" / "vectors.npy")[::-1].copy()),
}


@pytest.mark.parametrize("wrong", list(WRONG))
def test_an_unusable_snapshot_with_a_valid_checksum_falls_back_with_a_warning(tmp_path, caplog, wrong):
    """A snapshot that does not describe the store (written wrong, yet recorded with its checksum,
    as only someone who can write the database could) is never used."""
    path = tmp_path / "s"
    build(path)
    want = from_store(path, tmp_path)
    snap = snapshot_dir(path)
    WRONG[wrong](snap)
    directory = snap.parent
    check = derived.digest(directory)  # recorded as if written so
    meta = json.loads((directory / "meta.json").read_text())
    (directory / "meta.json").write_text(json.dumps({**meta, "digest": check}))
    store = Store(path / "memory.sqlite")
    store.set_space_meta("u", derived.RECORD_KEY, derived.record(store.stamp("u"), check))
    store.close()
    caplog.set_level(logging.WARNING)
    mem = memory(path)
    try:
        assert answers(mem) == want
        assert "snapshot" in caplog.text and "not usable" in caplog.text
    finally:
        mem.close()


def test_open_benchmark_measures_both_paths_with_the_same_hits(tmp_path, monkeypatch):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ is not installed
    from benchmarks import open_snapshot

    monkeypatch.chdir(open_snapshot.Path(open_snapshot.__file__).resolve().parents[1])
    out = tmp_path / "open.json"
    open_snapshot.main(["--sizes", "300", "--repeat", "1", "--work", str(tmp_path / "w"), "--out", str(out)])
    (row,) = json.loads(out.read_text())["rows"]
    assert row["same_hits"] and {r["mode"] for r in row["runs"]} == {"store", "snapshot"}
    assert all(r["units"] >= 300 for r in row["runs"])
