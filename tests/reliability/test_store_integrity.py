"""One write, one transaction; a store always opens (DESIGN §11).

- A failure at every statement of every write transaction of an `add` (an `OperationalError`,
  a full disk), or in the encoder: the error reaches the caller, the store stays consistent,
  the memory's state returns to the store's (its searches equal a fresh open's), nothing
  added is lost or doubled once the fault is gone.
- Saved views that are broken (orphan leaf, a unit in two leaves, counts that do not add up,
  an unreadable state) are detected on open and rebuilt from the units with a warning.
- Model identity: another encoder is refused with both names; `reindex` re-encodes.
"""
import json
import logging
import sqlite3
import subprocess
import sys
from contextlib import contextmanager

import pytest

from conftest import HashingEncoder
from etamem import Config, Memory
from etamem.models.affect import VaderAffectTagger
from etamem.models.encoders import CachedEncoder
from etamem.store.sqlite import Store
from rel_common import conversation, fast_memory, view_problems

QUERIES = ["hiking with my sister", "wonderful violin", "What did Ana enjoy last weekend?", "tea and coffee"]


def results(mem, space="u"):
    return [[(h.amu.amu_id, h.views, round(h.score, 6)) for h in mem.search(q, space=space, top_k=15)]
            for q in QUERIES]


class Faults:
    """Counts the statements run inside `Store.transaction` and raises at number `at`."""

    def __init__(self, at: int | None = None, error: Exception | None = None):
        self.at, self.n = at, 0
        self.error = error or sqlite3.OperationalError("injected: disk I/O error")

    def step(self):
        self.n += 1
        if self.at is not None and self.n - 1 == self.at:
            raise self.error


class _Cursor:
    def __init__(self, cur, faults):
        self._cur, self._faults = cur, faults

    def execute(self, *a):
        self._faults.step()
        return self._cur.execute(*a)

    def executemany(self, *a):
        self._faults.step()
        return self._cur.executemany(*a)

    def __getattr__(self, name):
        return getattr(self._cur, name)


@contextmanager
def injected(monkeypatch, faults):
    original = Store.transaction

    @contextmanager
    def transaction(self):
        with original(self) as cur:
            yield _Cursor(cur, faults)

    with monkeypatch.context() as m:
        m.setattr(Store, "transaction", transaction)
        yield faults


def seeded(path):
    mem = fast_memory(path, summary_delta=2)
    mem.add(conversation("a", 3, 5), space="u")
    return mem


NEW = conversation("b", 2, 3, day0=30)  # two sessions: the add ends one (maintenance) and writes units


def test_count_the_write_steps_of_an_add(tmp_path, monkeypatch):
    mem = seeded(tmp_path / "s")
    with injected(monkeypatch, Faults()) as f:
        mem.add(NEW, space="u")
    assert f.n >= 10  # turns, units, vectors, view rows, maintenance, session marks
    mem.close()


@pytest.mark.parametrize("error,every", [(sqlite3.OperationalError("injected: disk I/O error"), 1),
                                         (sqlite3.OperationalError("database or disk is full"), 4)],
                         ids=["io-every-step", "disk-full-every-4th-step"])
def test_a_failure_at_any_write_step_leaves_store_and_memory_consistent(tmp_path, monkeypatch, error, every):
    probe = seeded(tmp_path / "probe")
    with injected(monkeypatch, Faults()) as f:
        probe.add(NEW, space="u")
    steps, expected_turns = f.n, len(probe.turns("u"))
    probe.close()
    for at in range(0, steps, every):
        root = tmp_path / f"s{at}"
        mem = seeded(root)
        with injected(monkeypatch, Faults(at, error)):
            with pytest.raises(sqlite3.OperationalError, match=str(error)):
                mem.add(NEW, space="u")
        assert not view_problems(mem.store, "u"), at
        assert results(mem) == results(fast_memory(root)), at  # memory == what the store says
        # the fault is gone: a retry of the turns not stored, then a flush, completes the add
        stored = {t.turn_id for t in mem.turns("u")}
        rest = [t for t in NEW if t["turn_id"] not in stored]
        if rest:
            mem.add(rest, space="u")
        mem.flush("u")
        assert len(mem.turns("u")) == expected_turns and mem.store.count_pending("u") == 0, at
        ids = [a.amu_id for a in mem.list("u")]
        assert len(ids) == len(set(ids)), at
        assert not view_problems(mem.store, "u"), at
        assert results(mem) == results(fast_memory(root)), at
        mem.close()


class FlakyEncoder(HashingEncoder):
    """Raises while `armed`."""

    armed = False

    def encode(self, texts):
        if self.armed:
            raise RuntimeError("injected: encoder crashed")
        return super().encode(texts)


def test_an_encoder_that_raises_leaves_the_turns_pending(tmp_path):
    flaky = FlakyEncoder()
    enc = CachedEncoder(flaky)
    mem = Memory(tmp_path / "s", Config(), text_encoder=enc, affect_tagger=VaderAffectTagger(enc))
    mem.add(conversation("a", 1, 3), space="u")
    before = results(mem)
    flaky.armed = True
    with pytest.raises(RuntimeError, match="encoder crashed"):
        mem.add([{**t, "text": t["text"] + f" New detail {i}."} for i, t in enumerate(conversation("b", 1, 3, day0=9))],
                space="u")  # new texts reach the encoder, which fails after the turns are stored
    flaky.armed = False
    assert mem.store.count_pending("u") == 3 and len(mem.turns("u")) == 6
    assert mem.retrieve("hiking", space="u").pending_turns == 3 and results(mem) == before
    assert len(mem.flush("u")) > 0 and mem.store.count_pending("u") == 0
    assert not view_problems(mem.store, "u")
    mem.close()


def test_a_failed_checkpoint_keeps_the_store_and_rebuilds_indexes(tmp_path, monkeypatch, caplog):
    from etamem.live import derived

    root = tmp_path / "s"
    mem = seeded(root)
    before = results(mem)

    def full_disk(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(derived, "save", full_disk)
    with pytest.raises(OSError):
        mem.checkpoint()
    with caplog.at_level(logging.WARNING, logger="etamem.memory"):
        mem.close()  # close reports it and closes
    assert "could not save the search indexes" in caplog.text
    monkeypatch.undo()
    assert results(fast_memory(root)) == before


# --- validation on open ------------------------------------------------------------------
def corrupt(db, sql, *params):
    with sqlite3.connect(db) as conn:
        conn.execute(sql, params)


def tree_rows(db, view):
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT node_id, parent_id, is_leaf, children, members, count FROM nodes "
                            "WHERE space='u' AND view=?", (view,)).fetchall()


def a_leaf(db, view="affect", i=0):
    return [r for r in tree_rows(db, view) if r[2] and json.loads(r[4])][i]


CORRUPTIONS = {
    "orphan leaf": lambda db: corrupt(db, "INSERT INTO nodes SELECT space, view, '9999', '-1', 1, '[]', members, count,"
                                          " sum, summary, pending, info FROM nodes WHERE space='u' AND view='affect'"
                                          " AND node_id=?", a_leaf(db)[0]),
    "unit in two leaves": lambda db: corrupt(  # a unit of one session's leaf copied into another's
        db, "UPDATE nodes SET members=? WHERE space='u' AND view='time' AND node_id=?",
        json.dumps(json.loads(a_leaf(db, "time", 1)[4]) + json.loads(a_leaf(db, "time", 0)[4])[:1]),
        a_leaf(db, "time", 1)[0]),
    "child missing": lambda db: corrupt(db, "DELETE FROM nodes WHERE space='u' AND view='affect' AND node_id=?",
                                        a_leaf(db)[0]),
    "count off": lambda db: corrupt(db, "UPDATE nodes SET count=count+3 WHERE space='u' AND view='affect' AND node_id=?",
                                    a_leaf(db)[0]),
    "time unit in wrong session": lambda db: corrupt(
        db, "UPDATE nodes SET members='[]', count=0 WHERE space='u' AND view='time' AND node_id=("
            "SELECT node_id FROM nodes WHERE space='u' AND view='time' AND is_leaf=1 LIMIT 1)"),
    "state unreadable": lambda db: corrupt(db, "UPDATE view_state SET state='{\"root\": 0' WHERE space='u' AND view='affect'"),
}


@pytest.mark.parametrize("kind", list(CORRUPTIONS))
def test_a_broken_view_is_rebuilt_on_open(tmp_path, kind, caplog):
    root = tmp_path / "s"
    mem = seeded(root)
    n_units = len(mem.list("u"))
    mem.close()
    CORRUPTIONS[kind](root / "memory.sqlite")
    assert view_problems(Store(root / "memory.sqlite"), "u") if kind != "state unreadable" else True
    with caplog.at_level(logging.WARNING):
        mem = fast_memory(root)
        hits = mem.search("hiking with my sister", space="u")  # opens: always
    assert "inconsistent" in caplog.text and "rebuilding it from its units" in caplog.text
    assert hits and len(mem.list("u")) == n_units
    shape = mem.stats("u")["views"]
    assert shape["event"]["amus"] + shape["affect"]["amus"] == n_units and shape["time"]["amus"] == n_units
    mem.add(conversation("c", 1, 2, day0=50), space="u")  # the first write saves the rebuilt view
    assert not view_problems(mem.store, "u")
    mem.close()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        fast_memory(root).search("hiking", space="u")
    assert "inconsistent" not in caplog.text


# --- model identity ------------------------------------------------------------------------
class OtherEncoder(HashingEncoder):
    name = "other-encoder"

    def __init__(self):
        super().__init__(dim=48)


def test_another_encoder_is_refused_and_reindex_moves_the_store(tmp_path):
    root = tmp_path / "s"
    mem = seeded(root)
    mem.close()
    assert Store(root / "memory.sqlite").models() == {
        "text_encoder": "hashing-test-encoder", "text_dim": "64", "affect_tagger": "vader+hashing-test-encoder",
        "affect_dim": "69"}
    enc = CachedEncoder(OtherEncoder())
    other = Memory(root, Config(), text_encoder=enc, affect_tagger=VaderAffectTagger(enc))
    with pytest.raises(ValueError, match="built with 'hashing-test-encoder' \\(dim 64\\).*'other-encoder' \\(dim 48\\)"):
        other.search("hiking", space="u")
    with pytest.raises(ValueError, match="reindex"):
        other.add(conversation("c", 1, 2, day0=50), space="u")
    assert len(other.turns("u")) == 15  # nothing written
    counts = other.reindex()
    assert counts["u"]["units"] == len(other.list("u")) and counts["u"]["turns"] == 15
    assert other.store.models()["text_encoder"] == "other-encoder"
    assert other.views("u").event.dim == 48 and other.search("hiking with my sister", space="u")
    other.add(conversation("c", 1, 2, day0=50), space="u")
    assert not view_problems(other.store, "u")
    other.close()
    with pytest.raises(ValueError, match="built with 'other-encoder'"):
        fast_memory(root).search("hiking", space="u")  # and the old one is refused now


def test_cli_reindex_and_identity_error(tmp_path):
    """`etamem reindex STORE` with the default models on a store built by the hashing encoder."""
    root = tmp_path / "s"
    seeded(root).close()
    run = lambda *a: subprocess.run([sys.executable, "-m", "etamem", "-q", *a], capture_output=True, text=True,
                                    env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"}, timeout=300)
    bad = run("search", str(root), "hiking", "--space", "u")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "etamem reindex" in bad.stderr
    ok = run("reindex", str(root))
    assert ok.returncode == 0, ok.stderr
    assert "u: " in ok.stdout and "15 turns re-encoded" in ok.stdout
    assert Store(root / "memory.sqlite").models()["text_encoder"] == "all-MiniLM-L6-v2"
    hits = fast_memory  # the store now refuses the hashing encoder and serves the default one
    with pytest.raises(ValueError, match="built with 'all-MiniLM-L6-v2'"):
        hits(root).search("hiking", space="u")


def test_a_full_disk_during_ingest_is_a_one_line_error(tmp_path, monkeypatch, capsys):
    """`etamem ingest` on a full disk: one line naming the cause, status 2, no traceback; the
    turns acknowledged before stay (SQLite's own SQLITE_FULL: `test_disk_full.py`)."""
    import json as _json

    from etamem.cli import main
    from etamem.store.sql import SqlStore

    conv = [{"space": "u", "session_id": f"s{i // 3}", "turn_id": f"t{i}", "speaker": "Ana",
             "text": f"I planted tomatoes number {i} in the garden.", "timestamp": f"2023-05-0{1 + i // 3}T10:0{i % 3}:00"}
            for i in range(6)]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(_json.dumps(t) for t in conv) + "\n")
    real, calls = SqlStore.insert_turns, []

    def full(self, turns, first_seq):
        calls.append(len(turns))
        if len(calls) > 1:
            raise sqlite3.OperationalError("database or disk is full")
        return real(self, turns, first_seq)

    monkeypatch.setattr(SqlStore, "insert_turns", full)
    rc = main(["ingest", str(path), "--store", str(tmp_path / "s"), "--format", "jsonl", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert [line for line in err.splitlines() if line.startswith("etamem:")] == [
        "etamem: error: database or disk is full: this command's last write was not stored (what was acknowledged "
        "before is); free space and run it again"]
    monkeypatch.setattr(SqlStore, "insert_turns", real)
    store = Store(tmp_path / "s" / "memory.sqlite")
    assert store.count_turns("u") == calls[0] > 0  # the first write's turns stayed
    store.close()
