"""A write's work does not grow with the size of its space (issue 33, item 6: 1M units through
the API). SQLite's work is counted in virtual-machine steps (`set_progress_handler`), so the
checks are exact and free of timing:

- reading turns or units by id (every `add` reads the turns it is given twice) looks them up by
  key: "ORDER BY seq" alone let SQLite walk the whole space in `seq` order for a long id list;
- writing a unit's links finds the next link `seq` through an index (`unit_links_seq`), not by
  reading every link of the space;
- the rule supersession classifier stems a new unit's words once, not once per candidate, and
  skips the products with the batch's units that cannot be candidates, with the same links.
"""
import sqlite3
import time
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from etamem.facts import supersession
from etamem.records import AMU, Turn
from etamem.store.schema import UnitExtras
from etamem.store.sqlite import Store

T0 = datetime(2024, 1, 1, tzinfo=timezone.utc)
SPACE = "s"


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A SQLite store and its connection (caught as `sqlite3.connect` makes it)."""
    made, real = [], sqlite3.connect

    def connect(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(sqlite3, "connect", connect)
    st = Store(tmp_path / "m.sqlite")
    yield st, made[0]
    st.close()


def steps(conn, call) -> int:
    """SQLite VM steps `call()` takes on `conn`."""
    n = [0]

    def tick():
        n[0] += 1
        return 0

    conn.set_progress_handler(tick, 1)
    try:
        call()
    finally:
        conn.set_progress_handler(None, 1)
    return n[0]


def grow(st, start: int, count: int, links: bool = False) -> None:
    """Turns, units (one per turn) and, with `links`, two links per unit, numbered from `start`."""
    turns = [Turn(f"t{i}", f"s{i // 50}", "Ana", f"fact number {i}", T0 + timedelta(minutes=i), space=SPACE)
             for i in range(start, start + count)]
    st.insert_turns(turns, first_seq=start)
    amus = [AMU(f"t{i}#0", f"fact number {i}", "Ana", T0 + timedelta(minutes=i), f"s{i // 50}", (f"t{i}",),
                space=SPACE) for i in range(start, start + count)]
    vecs = np.eye(count, 8, dtype=np.float32) + 0.1
    extras = UnitExtras(links=[(a.amu_id, f"t{i - k}#0", "supersedes", 0.9)
                               for i, a in zip(range(start, start + count), amus) for k in (1, 2) if i >= k]) \
        if links else None
    st.write_amus(SPACE, amus, vecs, vecs, [t.turn_id for t in turns], turn_vecs=vecs, extras=extras)


def test_reads_by_id_do_not_grow_with_the_space(store):
    st, conn = store
    grow(st, 0, 200)
    ids = [f"t{i}" for i in range(100, 160)]
    small = (steps(conn, lambda: st.turns(SPACE, turn_ids=ids)),
             steps(conn, lambda: st.amus(SPACE, amu_ids=[f"{t}#0" for t in ids])))
    grow(st, 200, 3800)
    large = (steps(conn, lambda: st.turns(SPACE, turn_ids=ids)),
             steps(conn, lambda: st.amus(SPACE, amu_ids=[f"{t}#0" for t in ids])))
    assert [t.turn_id for t in st.turns(SPACE, turn_ids=list(reversed(ids)))] == ids  # still in stored order
    assert [a.amu_id for a in st.amus(SPACE, amu_ids=[f"{t}#0" for t in reversed(ids)])] == [f"{t}#0" for t in ids]
    for s, big in zip(small, large):  # a space 20 times larger: the same work, give or take the B-tree depth
        assert big < 1.5 * s, (small, large)


def test_writing_links_does_not_read_every_link(store):
    st, conn = store
    grow(st, 0, 100, links=True)
    small = steps(conn, lambda: grow(st, 100, 50, links=True))
    grow(st, 150, 3000, links=True)
    large = steps(conn, lambda: grow(st, 3150, 50, links=True))
    assert large < 1.5 * small, (small, large)
    assert [r[:2] for r in st.unit_links(SPACE)][-2:] == [("t3199#0", "t3198#0"), ("t3199#0", "t3197#0")]
    assert len(st.unit_links(SPACE)) == 2 * 3200 - 3


def test_rule_classifier_stems_a_new_unit_once(monkeypatch):
    from etamem.extraction import stems

    calls = []
    real = stems.stem
    monkeypatch.setattr(stems, "stem", lambda w: calls.append(w) or real(w))
    new = "Ana stopped playing the cello and now loves the guitar"  # a change word: the stemming path
    cands = [supersession.Candidate(f"u{i}", f"Ana loves playing the cello number {i}", "Ana", T0, 0.8)
             for i in range(8)]
    found = supersession.RuleSupersession().classify(new, "Ana", cands)
    assert found  # the path that stems was taken
    # "stopped" is the new text's own word: stemmed for its subject words and for the change
    # test, once each, not once per candidate
    assert calls.count("stopped") <= 2, calls.count("stopped")


def _every_pair(units, vecs, near, classifier):
    """The pass before the batch filters: a product with every earlier unit of the batch."""
    links = []
    for i, unit in enumerate(units):
        if not supersession.is_fact(unit.text):
            continue
        pool = {}
        for other, cos in [*near[i], *[(units[j], float(vecs[i] @ vecs[j])) for j in range(i)]]:
            if other.speaker == unit.speaker and other.timestamp <= unit.timestamp and cos >= 0.25 \
                    and other.amu_id != unit.amu_id:
                pool[other.amu_id] = supersession.Candidate(other.amu_id, other.text, other.speaker,
                                                            other.timestamp, cos)
        best = sorted(pool.values(), key=lambda c: (-c.similarity, c.unit_id))[:8]
        for target, conf in classifier.classify(unit.text, unit.speaker, best):
            links.append((unit.amu_id, target, supersession.SUPERSEDES, float(conf)))
    return links


SPEAKERS = ["Ana", "Ben"]
TEXTS = ["lives in Lisbon", "lives in Porto", "moved to Oslo", "loves the cello", "stopped playing the cello",
         "works as a nurse", "now works as a chef"]


def _batch(n: int, seed: int = 0, dim: int = 16):
    rng = np.random.default_rng(seed)
    units = [AMU(f"a{i}", f"{SPEAKERS[i % 2]} {TEXTS[rng.integers(len(TEXTS))]}", SPEAKERS[i % 2],
                 T0 + timedelta(minutes=int(rng.integers(0, 30))), "s", (f"t{i}",)) for i in range(n)]
    units.sort(key=lambda a: a.timestamp)
    vecs = rng.standard_normal((n, dim)).astype(np.float32)
    vecs[:, 0] += 4.0  # similar enough to be candidates
    vecs[n // 2:n // 2 + 10] = vecs[n // 2]  # equal vectors: ties in cosine
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return units, vecs


def test_batch_candidates_are_the_same_as_comparing_every_pair():
    """`find_supersessions` with the batch filters gives the links of the full pairwise pass."""
    units, vecs = _batch(40)
    near = [[] for _ in units]
    got = supersession.find_supersessions(units, vecs, near, supersession.RuleSupersession())
    assert got == _every_pair(units, vecs, near, supersession.RuleSupersession())
    assert got  # some links, so the comparison means something


def test_batch_candidates_over_many_units_and_the_index_the_same_as_every_pair():
    """600 units (blocks of the matrix product, the top cut, ties) and index candidates that are
    also batch units (the batch's cosine replaces the index's, as in the pairwise pass)."""
    units, vecs = _batch(600, seed=1)
    rng = np.random.default_rng(2)
    near = [[(units[int(j)], 0.99) for j in rng.integers(0, len(units), 3)] for _ in units]
    got = supersession.find_supersessions(units, vecs, near, supersession.RuleSupersession())
    assert got == _every_pair(units, vecs, near, supersession.RuleSupersession())
    assert len(got) > 50


def test_batch_candidates_take_linear_python_work():
    """A batch of 4x the units takes at most ~8x the time (the pairwise pass: ~16x): one
    matrix product per block of rows, Python work only for the candidates kept."""
    def seconds(n: int) -> float:
        units, vecs = _batch(n, seed=3)
        near = [[] for _ in units]
        best = float("inf")
        for _ in range(2):
            t = time.perf_counter()
            supersession.find_supersessions(units, vecs, near, supersession.RuleSupersession())
            best = min(best, time.perf_counter() - t)
        return best

    small, large = seconds(1_000), seconds(4_000)
    assert large <= 8 * small + 0.2, f"{small:.2f} s for 1,000 units, {large:.2f} s for 4,000"


def test_an_older_store_gets_the_link_index_when_opened(tmp_path):
    import sqlite3
    import tarfile
    from pathlib import Path

    from etamem.store.sqlite import Store

    with tarfile.open(Path(__file__).parent / "data" / "store_v5.tar.gz") as tar:
        tar.extractall(tmp_path, filter="data")
    path = next(tmp_path.rglob("memory.sqlite"))
    has_index = "SELECT name FROM sqlite_master WHERE name='unit_links_seq'"
    assert sqlite3.connect(path).execute(has_index).fetchall() == []
    Store(path).close()
    assert sqlite3.connect(path).execute(has_index).fetchall() == [("unit_links_seq",)]
