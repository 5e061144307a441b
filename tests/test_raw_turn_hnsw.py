"""The raw turns' dense index above `Config.raw_exact_max`: an HNSW graph instead of one exact
product over every turn (memory-bandwidth bound: ~16 ms per search at 100k turns), below it the
exact search as before; a store saved exact switches at its next write, never at open."""
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from etamem import Config, Memory
from etamem.models.affect import VaderAffectTagger
from etamem.records import Turn
from etamem.retrieval import TurnIndex

DIM = 32
T0 = datetime(2024, 3, 1, 9, tzinfo=timezone.utc)


def turns_and_vectors(n: int, seed: int = 0) -> tuple[list[Turn], np.ndarray]:
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(12, DIM))
    vecs = centres[rng.integers(0, 12, n)] + 0.4 * rng.normal(size=(n, DIM))
    vecs = (vecs / np.linalg.norm(vecs, axis=1, keepdims=True)).astype(np.float32)
    turns = [Turn(turn_id=f"t{i}", session_id=f"s{i // 20}", speaker="Ana", text=f"turn number {i} about topic {i % 7}",
                  timestamp=T0 + timedelta(minutes=i)) for i in range(n)]
    return turns, vecs


def exact_top(vecs: np.ndarray, q: np.ndarray, k: int) -> set[int]:
    return set(np.argsort(-(vecs @ q), kind="stable")[:k].tolist())


def test_above_the_threshold_the_dense_pool_is_a_graph_with_high_recall():
    turns, vecs = turns_and_vectors(600)
    exact = TurnIndex(DIM, turns, vecs, stemmer="none")
    graph = TurnIndex(DIM, turns, vecs, stemmer="none", exact_max=200)
    assert exact.index.dense.mode == "exact" and graph.index.dense.mode == "hnsw"
    rng = np.random.default_rng(1)
    found = []
    for _ in range(20):
        q = rng.normal(size=DIM).astype(np.float32)
        q /= np.linalg.norm(q)
        keys = graph.index.dense.search(q, 10)[1]
        found.append(len(exact_top(vecs, q, 10) & set(keys)) / 10)
        # the candidates' scores stay exact: the graph's hits score as the exact index scores them
        a = {t.turn_id: s for t, s in graph.search(q, "", 10, beta=0.0, pool=50)}
        b = {t.turn_id: s for t, s in exact.search(q, "", 10, beta=0.0, pool=50)}
        assert all(abs(a[t] - b[t]) < 1e-6 for t in a.keys() & b.keys())
    assert np.mean(found) >= 0.95


def test_below_the_threshold_results_equal_the_exact_index():
    turns, vecs = turns_and_vectors(150)
    exact = TurnIndex(DIM, turns, vecs, stemmer="none")
    capped = TurnIndex(DIM, turns, vecs, stemmer="none", exact_max=200)
    assert capped.index.dense.mode == "exact"
    q = vecs[7]
    assert [(t.turn_id, s) for t, s in capped.search(q, "topic 3", 20, beta=0.1)] == \
        [(t.turn_id, s) for t, s in exact.search(q, "topic 3", 20, beta=0.1)]


def test_an_index_saved_exact_switches_at_its_next_write_and_saves_its_graph(tmp_path):
    turns, vecs = turns_and_vectors(400)
    TurnIndex(DIM, turns[:300], vecs[:300], stemmer="none").save(tmp_path / "a")
    loaded = TurnIndex.load(tmp_path / "a", turns[:300], stemmer="none", exact_max=200)
    assert loaded.index.dense.mode == "exact"  # opening builds no graph
    loaded.add(turns[300:], vecs[300:])
    assert loaded.index.dense.mode == "hnsw"
    loaded.save(tmp_path / "b")
    again = TurnIndex.load(tmp_path / "b", turns, stemmer="none", exact_max=200)
    assert again.index.dense.mode == "hnsw"
    q = vecs[42]
    assert [t.turn_id for t, _ in again.search(q, "", 10, beta=0.0)] == \
        [t.turn_id for t, _ in loaded.search(q, "", 10, beta=0.0)]
    with pytest.raises(ValueError):
        again.index.set_exact_max(0)


def test_memory_uses_the_config_threshold(tmp_path, hashing_encoder):
    def open_memory(path, **cfg):
        return Memory(path, Config(**cfg), text_encoder=hashing_encoder,
                      affect_tagger=VaderAffectTagger(hashing_encoder))

    rows = [{"turn_id": f"x{i}", "session_id": f"s{i // 10}", "speaker": "user",
             "text": f"I went hiking near lake {i} with my sister", "timestamp": (T0 + timedelta(hours=i)).isoformat()}
            for i in range(40)]
    small = open_memory(tmp_path / "small", raw_exact_max=16)
    small.add(rows, space="u")
    assert small.index_info("u")["turn_index_mode"] == "hnsw"
    assert small.search("hiking near lake 7", "u", top_k=3)
    small.close()
    default = open_memory(tmp_path / "default")
    default.add(rows, space="u")
    assert default.index_info("u")["turn_index_mode"] == "exact"
    default.close()
    with pytest.raises(ValueError, match="raw_exact_max"):
        Config(raw_exact_max=-1).validate()


def test_a_flat_index_searched_through_another_dense_index_over_the_same_slots():
    """`FlatHybridIndex.with_dense` (the scale benchmark's HNSW baseline beside an exact index):
    the BM25 part is shared, the dense pool comes from the given index; an exact twin answers as
    the original, a graph scores its candidates exactly, and an index of other rows is refused."""
    from etamem.retrieval.vector_index import VectorIndex

    turns, vecs = turns_and_vectors(300)
    base = TurnIndex(DIM, turns, vecs, stemmer="none").index
    slots = list(range(len(turns)))
    twin = VectorIndex(DIM, exact_max=None)
    twin.upsert(slots, vecs)
    graph = VectorIndex(DIM, exact_max=1)
    graph.upsert(slots, vecs)
    assert graph.mode == "hnsw"
    q = vecs[11]
    want = [(r.index, r.score) for r in base.search(q, "topic 4", 20, beta=0.1)]
    assert [(r.index, r.score) for r in base.with_dense(twin).search(q, "topic 4", 20, beta=0.1)] == want
    via_graph = base.with_dense(graph)
    assert via_graph.lexical is base.lexical
    exact_score = dict(want)
    for r in via_graph.search(q, "topic 4", 20, beta=0.1):
        assert r.index not in exact_score or abs(r.score - exact_score[r.index]) < 1e-6
    short = VectorIndex(DIM, exact_max=None)
    short.upsert(slots[:10], vecs[:10])
    with pytest.raises(ValueError, match="same number of rows"):
        base.with_dense(short)
