"""Following another process's writes from the change log (`etamem/live/change_log.py`): a live space
that finds newer writes in the store applies them in place, and then answers exactly as a fresh
open of the store (hits with scores, views, units, turns); a gap in the log, a reindex or a
deleted space make it open again; a format-5 store is upgraded in place and followed from its
first logged write. On
SQLite and on PostgreSQL (the `target` fixture of tests/test_store_backends.py)."""
import tarfile
from pathlib import Path

import pytest

from etamem.store.sql import FORMAT_VERSION
from test_store_backends import FACTS, backend, memory, target, turns  # noqa: F401 - pytest fixtures

QUERIES = ["grey cat named Miso", "violin orchestra", "hiking with my sister", "coffee in the morning",
           "what did Ben say about work?"]
MORE = ["I adopted a hedgehog called Pickles last week.", "My sister moved to Lisbon for a new job.",
        "I hate waking up early, it ruins my whole day.", "We played chess in the park until it rained.",
        "The orchestra rehearsal got moved to Thursday evening.", "I finally finished the novel about whales."]


def seen(mem, space: str = "u") -> dict:
    """All a caller sees of the space: hits (ids, scores, views) of several queries, the views'
    shape, the live units and turns."""
    live = mem.live_space(space)
    return {"hits": [[(h.amu.amu_id, round(h.score, 5), h.views) for h in mem.search(q, space=space, top_k=8)]
                     for q in QUERIES],
            "shape": mem.views(space).shape(), "units": sorted(a.amu_id for a in live.index.amus),
            "turns": sorted((t.turn_id, t.text) for t in live.turns.turns if t is not None)}


def fresh(where) -> dict:
    mem = memory(where)
    try:
        return seen(mem)
    finally:
        mem.store.close()


def counts(mem) -> tuple[int, int]:
    r = mem.residency()
    return r.opens, r.follows


def writes(writer):
    """Writes of every kind, one after another: adds, a session end (maintenance), a unit
    deleted, a turn deleted (its units with it), another add."""
    yield lambda: writer.add(turns(MORE[:3], prefix="m"), space="u")
    yield lambda: writer.end_session("u")
    yield lambda: writer.delete("u", writer.list("u")[1].amu_id)
    yield lambda: writer.delete("u", turn_id=writer.turns("u")[0].turn_id)
    yield lambda: writer.add(turns(MORE[3:], prefix="n", per_session=2), space="u")


def test_a_follower_applies_each_write_and_equals_a_fresh_open(target):  # noqa: F811 - the fixture
    writer, follower = memory(target), memory(target)
    writer.add(turns(FACTS), space="u")
    follower.search("cat", space="u")  # holds the space live
    assert counts(follower) == (1, 0)
    for i, write in enumerate(writes(writer)):
        write()
        got = seen(follower)
        assert counts(follower) == (1, i + 1), "followed the log, not reopened"
        assert got == fresh(target), f"after write {i}"
    writer.close()
    follower.close()


def test_several_writes_are_followed_at_once(target):  # noqa: F811 - the fixture
    writer, follower = memory(target), memory(target)
    writer.add(turns(FACTS), space="u")
    follower.search("cat", space="u")
    for write in writes(writer):
        write()
    got = seen(follower)
    assert counts(follower) == (1, 1)
    assert got == fresh(target)
    writer.close()
    follower.close()


def test_a_gap_in_the_log_reopens(target, monkeypatch):  # noqa: F811 - the fixture
    writer, follower = memory(target), memory(target)
    writer.add(turns(FACTS), space="u")
    follower.search("cat", space="u")
    monkeypatch.setattr(type(writer.store), "KEEP_CHANGES", 1)  # the log keeps only the last write
    writer.add(turns(MORE[:2], prefix="m"), space="u")
    writer.add(turns(MORE[2:4], prefix="n"), space="u")
    assert len(writer.store.changes("u", 0, 99)) == 1
    got = seen(follower)
    assert counts(follower) == (2, 0)
    assert got == fresh(target)
    writer.close()
    follower.close()


def test_a_deleted_and_recreated_space_reopens(target):  # noqa: F811 - the fixture
    writer, follower = memory(target), memory(target)
    writer.add(turns(FACTS), space="u")
    follower.search("cat", space="u")
    writer.delete("u")
    writer.add(turns(MORE, prefix="m"), space="u")
    got = seen(follower)
    assert counts(follower) == (2, 0)
    assert got == fresh(target)
    writer.close()
    follower.close()


def test_following_can_be_switched_off(target):  # noqa: F811 - the fixture
    writer, follower = memory(target), memory(target)
    follower.config.follow_changes = False
    writer.add(turns(FACTS), space="u")
    follower.search("cat", space="u")
    writer.add(turns(MORE[:2], prefix="m"), space="u")
    assert seen(follower) == fresh(target) and counts(follower) == (2, 0)
    writer.close()
    follower.close()


def test_a_format_5_store_is_upgraded_and_then_followed(tmp_path, backend):  # noqa: F811 - the fixture
    if backend != "sqlite":
        pytest.skip("the fixture is a SQLite store directory")
    root = tmp_path / "store"
    with tarfile.open(Path(__file__).parent / "data" / "store_v5.tar.gz") as tar:
        tar.extractall(root, filter="data")
    writer, follower = memory(str(root)), memory(str(root))
    assert writer.store.upgraded_from == 5 and writer.store.get_meta("format_version") == str(FORMAT_VERSION)
    follower.search("garden", space="u")
    assert writer.store.changes("u", 0, 99) == []  # written before the log
    writer.add(turns(MORE[:2], prefix="m"), space="u")  # the first logged write: all the follower needs
    writer.add(turns(MORE[2:4], prefix="n"), space="u")
    got = seen(follower)
    assert counts(follower) == (1, 1)
    assert got == fresh(str(root))
    writer.close()
    follower.close()


def test_two_writers_taking_turns_follow_each_other(target):  # noqa: F811 - the fixture
    a, b = memory(target), memory(target)
    a.add(turns(FACTS), space="u")
    b.add(turns(MORE[:2], prefix="m"), space="u")  # b opens, then writes
    a.add(turns(MORE[2:4], prefix="n"), space="u")  # a follows b's write, then writes
    b.end_session("u")
    a.delete("u", a.list("u")[0].amu_id)
    assert counts(a) == (1, 2) and counts(b) == (1, 1)
    want = fresh(target)
    assert seen(a) == want and seen(b) == want
    a.close()
    b.close()
