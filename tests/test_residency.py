"""Bounded residency of live spaces (`etamem.live.residency`, `Engine._evict`): under
`max_live_spaces` the least recently used spaces are dropped after their indexes are saved and
reopen from the derived files, with exactly the results of a memory that never drops any; a
space a search or a write is using stays. Real store, FAISS and BM25; a text-dependent hashing
encoder."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from conftest import HashingEncoder
from etamem import Config, Memory
from etamem.live.residency import LiveTable, array_bytes
from etamem.models.affect import VaderAffectTagger

SPACES = [f"user-{i}" for i in range(5)]
TOPICS = ["my cat Miso likes tuna", "training for the Berlin marathon", "learning to bake sourdough bread",
          "moving to Lisbon in June", "reading a novel about whales", "my sister plays the cello"]


def memory(path, encoder=None, **config) -> Memory:
    enc = encoder or HashingEncoder()
    return Memory(path, config=config, text_encoder=enc, affect_tagger=VaderAffectTagger(enc))


def turns(space: str, batch: int) -> list[dict]:
    k = SPACES.index(space)
    return [{"turn_id": f"b{batch}-{i}", "session_id": f"s{batch}", "speaker": "Ana",
             "text": f"I keep thinking about {TOPICS[(k + batch + i) % len(TOPICS)]}, day {batch}.",
             "timestamp": f"2023-05-{batch + 1:02d}T10:{i:02d}"} for i in range(3)]


def calls() -> list[tuple[str, str, int]]:
    """A mixed, seeded order of adds and searches over the five spaces."""
    rng = np.random.default_rng(7)
    out, batches = [], {s: 0 for s in SPACES}
    for space in SPACES:
        out.append(("add", space, 0))
    for _ in range(30):
        space = SPACES[int(rng.integers(len(SPACES)))]
        if rng.random() < 0.3:
            batches[space] += 1
            out.append(("add", space, batches[space]))
        else:
            out.append(("search", space, int(rng.integers(len(TOPICS)))))
    return out


def run(mem: Memory, call: tuple[str, str, int]):
    kind, space, n = call
    if kind == "add":
        return sorted(a.amu_id for a in mem.add(turns(space, n), space=space))
    return [(h.amu.amu_id, h.score, h.views) for h in mem.search(f"what about {TOPICS[n]}?", space=space)]


def test_eviction_keeps_results_equal_to_a_memory_that_keeps_every_space(tmp_path):
    bounded = memory(tmp_path / "bounded", max_live_spaces=2)
    unbounded = memory(tmp_path / "unbounded", max_live_spaces=0)
    try:
        for call in calls():
            assert run(bounded, call) == run(unbounded, call), call
            stats = bounded.residency()
            assert stats.live <= 2 and len(bounded._live) <= 2
            assert len(bounded._writers) <= 2 and len(bounded._opening) <= 2  # pruned with their spaces
        stats = bounded.residency()
        assert stats.evictions >= 10 and stats.saved_on_eviction >= 5
        assert stats.opens_from_files >= 5  # evicted spaces reopened from the indexes saved on eviction
        assert stats.opens == stats.evictions + stats.live
        assert unbounded.residency().live == 5 and unbounded.residency().evictions == 0
    finally:
        bounded.close()
        unbounded.close()


def test_evicted_space_reopens_from_its_derived_files(tmp_path, caplog):
    mem = memory(tmp_path / "store", max_live_spaces=1)
    try:
        mem.add(turns("user-0", 0), space="user-0")
        before = run(mem, ("search", "user-0", 0))
        mem.add(turns("user-1", 0), space="user-1")  # user-0 evicted, its indexes saved
        assert mem.residency().saved_on_eviction == 1 and "user-0" not in mem._live
        with caplog.at_level("DEBUG", logger="etamem.engine"):
            assert run(mem, ("search", "user-0", 0)) == before
        assert "space user-0 opened from derived files" in caplog.text
        assert mem.residency().opens_from_files == 1
    finally:
        mem.close()


def test_a_space_a_search_is_using_is_not_evicted(tmp_path):
    mem = memory(tmp_path / "store", max_live_spaces=1)
    try:
        for space in SPACES[:3]:
            mem.add(turns(space, 0), space=space)
        run(mem, ("search", "user-0", 0))
        mem.checkpoint()  # nothing to save: an eviction would not wait for the reader's lock
        holding, release = threading.Event(), threading.Event()

        def reader():
            with mem._live.peek("user-0").rw.read():  # a search in progress on user-0
                holding.set()
                release.wait(10)

        thread = threading.Thread(target=reader)
        thread.start()
        try:
            assert holding.wait(10)
            run(mem, ("search", "user-1", 1))
            assert "user-0" in mem._live  # in use: kept, over the budget for now
            assert mem.residency().live == 2
        finally:
            release.set()
            thread.join(10)
        run(mem, ("search", "user-2", 2))  # no longer in use: evicted now
        assert "user-0" not in mem._live and mem.residency().live == 1
    finally:
        mem.close()


class BlockingEncoder(HashingEncoder):
    """Blocks encoding a text holding BLOCK until released (a write holding its space's mutex)."""

    def __init__(self):
        super().__init__()
        self.entered, self.release = threading.Event(), threading.Event()

    def encode(self, texts):
        if any("BLOCK" in t for t in texts):
            self.entered.set()
            self.release.wait(10)
        return super().encode(texts)


@pytest.mark.parametrize("on_disk", [False, True], ids=["in-memory", "directory"])
def test_a_space_being_written_is_not_evicted(tmp_path, on_disk):
    """In memory only the writer mutex protects it (no file lock, nothing to save)."""
    enc = BlockingEncoder()
    mem = memory(tmp_path / "store" if on_disk else None, encoder=enc, max_live_spaces=1)
    try:
        for space in SPACES[:3]:
            mem.add(turns(space, 0), space=space)
        slow = [dict(turns("user-0", 1)[0], text="BLOCK: I finally adopted a second cat called Tofu.")]
        thread = threading.Thread(target=mem.add, args=(slow,), kwargs={"space": "user-0"})
        thread.start()
        try:
            assert enc.entered.wait(10)
            run(mem, ("search", "user-1", 1))
            run(mem, ("search", "user-2", 2))
            assert "user-0" in mem._live  # its writer holds the mutex: kept
        finally:
            enc.release.set()
            thread.join(10)
        hits = mem.search("second cat Tofu", space="user-0")
        assert any("Tofu" in h.amu.text for h in hits)
    finally:
        mem.close()


def test_byte_budget_keeps_only_what_fits(tmp_path):
    mem = memory(tmp_path / "store", max_live_spaces=0, max_live_bytes=1)  # no space fits: only the one in use
    try:
        for space in SPACES[:3]:
            mem.add(turns(space, 0), space=space)
            stats = mem.residency()
            assert stats.live == 1 and stats.live_bytes > 10_000  # its vectors and index arrays
        assert stats.evictions == 2 and stats.saved_on_eviction == 2
        assert mem.residency().live_bytes == mem._live.peek("user-2").nbytes()
    finally:
        mem.close()


def test_live_table_lru_order_and_budget():
    table: LiveTable[str] = LiveTable(max_items=2)
    for name in "abc":
        table[name] = name.upper()
    assert table.get("a") == "A"  # a touched: b is now the least recently used
    assert [n for n, _ in table.eviction_order(keep="c") if table.pop(n)] == ["b"]  # within budget after one
    assert not table.over_budget() and list(table.eviction_order()) == []
    assert table.values() == ["C", "A"] and table.peek("c") == "C" and table.values() == ["C", "A"]
    value = table.peek("c")
    assert table.pop_if("c", "other") is False and table.pop_if("c", value) is True and "c" not in table
    table.clear()
    assert len(table) == 0 and table.get("a") is None


def test_live_table_byte_budget_and_array_bytes():
    table: LiveTable[np.ndarray] = LiveTable(max_bytes=1000, size=lambda v: v.nbytes)
    table["a"], table["b"] = np.zeros(100, np.float32), np.zeros(100, np.float32)  # 800 bytes
    assert not table.over_budget()
    table["c"] = np.zeros(100, np.float32)
    assert [n for n, _ in table.eviction_order(keep="c") if table.pop(n) is not None] == ["a"]  # one is enough
    base = np.zeros((10, 10), np.float64)
    assert array_bytes({"x": [base, base[2:]], "y": (base.T,)}) == 800  # views of one buffer count once
    with pytest.raises(ValueError, match="max_bytes needs a size"):
        LiveTable(max_bytes=10)


@pytest.mark.parametrize("field", ["max_live_spaces", "max_live_bytes"])
def test_budget_config_is_validated(field):
    assert Config.from_dict({field: 0}).to_dict()[field] == 0
    with pytest.raises(ValueError, match=f"config {field}=-1: expected >= 0"):
        Config.from_dict({field: -1})


def test_an_evicted_space_leaves_no_vectors_in_the_process(tmp_path):
    """Spaces created one after another past the budget (two turns and a search each, as an agent
    server's new users): the encoder's in-process cache holds entries of live spaces only, so it
    stays within the budget's worth however many spaces were created; the vectors stay in the
    store's cache and a reopened space finds them there (nothing encoded again)."""
    from etamem.models.encoders import CachedEncoder

    enc = CachedEncoder(HashingEncoder())
    mem = memory(tmp_path / "s", encoder=enc, max_live_spaces=4)
    enc.persist = mem.store
    for k in range(40):
        mem.add([{"speaker": "Ana", "text": f"I adopted a cat named Miso{k}; she loves tuna.", "session_id": "s"},
                 {"speaker": "Ben", "text": f"My dog Rex{k} prefers chicken.", "session_id": "s"}], space=f"new{k}")
        mem.search("what does the cat eat", space=f"new{k}")
    live = mem.residency().live
    assert live <= 4 and mem.residency().evictions >= 36
    assert len(enc.scopes()) <= live, enc.scopes()  # not one scope per space ever created
    assert enc.entries() <= 6 * live
    encoded = enc.encoded_texts
    assert [h.amu.text for h in mem.search("what does the cat eat", space="new0")]  # reopened: store's cache
    assert enc.encoded_texts == encoded + 1  # the query only (a read's vectors are not persisted)
    mem.close()


def test_freed_pages_are_handed_back_every_so_many_evictions():
    from etamem.live.residency import FreedPages

    freed = FreedPages(every=3)
    for n in (1, 1, 0, 1, 2, 5):
        freed.evicted(n)
    assert freed.trims == 2


def test_evicted_spaces_do_not_wait_for_the_interpreters_full_collection(tmp_path):
    """A dropped live space's indexes sit in reference cycles: with the interpreter's automatic
    collection off (its full collections are rare), 100 new spaces under a budget of 4 leave the
    vector indexes of at most the budget plus one batch of 32 evictions alive (4 per space), not
    of every space ever opened."""
    import gc

    from etamem.retrieval.vector_index import VectorIndex

    mem = memory(tmp_path / "s", max_live_spaces=4)
    gc.collect()
    gc.disable()
    try:
        for k in range(100):
            mem.add([{"speaker": "Ana", "text": f"I adopted a cat named Miso{k}.", "session_id": "s"}], space=f"n{k}")
            mem.search("cat", space=f"n{k}")
        alive = sum(isinstance(o, VectorIndex) for o in gc.get_objects())
    finally:
        gc.enable()
    assert mem.residency().evictions >= 96
    assert alive <= 4 * (4 + 32), alive
    mem.close()
