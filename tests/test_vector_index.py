"""VectorIndex: exact mode equals brute force, hnsw mode never returns dead keys and keeps recall,
compaction and mode switches, save/load round trips."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("faiss")

from etamem.retrieval.vector_index import VectorIndex  # noqa: E402

DIM = 32


def unit(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float32)
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def clustered(rng: np.random.Generator, n: int, dim: int = DIM, centres: int = 20) -> np.ndarray:
    """(n, dim) float32 unit rows around `centres` random directions."""
    c = unit(rng.standard_normal((centres, dim)))
    return unit(c[rng.integers(0, centres, n)] + 0.35 * rng.standard_normal((n, dim)).astype(np.float32))


def brute(live: dict, q: np.ndarray, k: int) -> tuple[np.ndarray, list]:
    """Reference top-k over a {key: (dim,) vector} dict: (sims, keys) best first."""
    keys = list(live)
    if not keys:
        return np.zeros(0, np.float32), []
    sims = np.stack([live[key] for key in keys]) @ q
    order = np.argsort(-sims, kind="stable")[:k]
    return sims[order], [keys[i] for i in order]


def test_exact_mode_equals_brute_force_after_random_writes():
    rng = np.random.default_rng(0)
    index = VectorIndex(DIM, exact_max=None, max_dead_share=0.2)
    live: dict = {}
    compactions = 0
    for step in range(300):
        action = rng.random()
        if action < 0.6 or not live:
            b = int(rng.integers(1, 8))
            pool = list(live)
            keys = []
            for _ in range(b):  # mix of new keys (ints and strings) and existing ones
                if pool and rng.random() < 0.4:
                    keys.append(pool.pop(int(rng.integers(len(pool)))))
                else:
                    keys.append(f"s{step}-{len(keys)}" if rng.random() < 0.5 else step * 100 + len(keys))
            keys = list(dict.fromkeys(keys))
            vecs = unit(rng.standard_normal((len(keys), DIM)))
            index.upsert(keys, vecs)
            live.update(zip(keys, vecs))
        else:
            pool = list(live)
            drop = [pool[i] for i in rng.choice(len(pool), size=min(len(pool), int(rng.integers(1, 6))), replace=False)]
            before = index.n_slots
            index.remove(drop + ["never-seen"])
            for key in drop:
                del live[key]
            compactions += index.n_slots < before
        assert index.mode == "exact" and len(index) == len(live)
        if step % 10 == 0:
            for _ in range(3):
                q = unit(rng.standard_normal(DIM))
                for k in (1, 5, len(live) + 3):
                    sims, keys = index.search(q, k)
                    ref_sims, ref_keys = brute(live, q, k)
                    assert keys == ref_keys
                    np.testing.assert_allclose(sims, ref_sims, rtol=1e-5, atol=1e-6)
                    assert sims.dtype == np.float32
    assert compactions > 0
    for key, vec in live.items():
        assert key in index
        np.testing.assert_array_equal(index.vector(key), vec)


def test_exact_ties_break_by_slot_order():
    index = VectorIndex(4)
    v = unit(np.ones((1, 4)))
    index.upsert(["c", "a", "b"], np.repeat(v, 3, axis=0))
    assert index.search(v[0], 2)[1] == ["c", "a"]
    index.remove(["c"])
    assert index.search(v[0], 5)[1] == ["a", "b"]


def test_validation_errors():
    index = VectorIndex(DIM)
    with pytest.raises(ValueError, match="vecs"):
        index.upsert([1], np.zeros(DIM, np.float32))
    with pytest.raises(ValueError, match="vecs"):
        index.upsert([1], np.zeros((1, DIM + 1), np.float32))
    with pytest.raises(ValueError, match="keys"):
        index.upsert([1, 2], np.zeros((1, DIM), np.float32))
    with pytest.raises(ValueError, match="keys"):
        index.upsert([1, 1], np.zeros((2, DIM), np.float32))
    with pytest.raises(ValueError, match="q"):
        index.search(np.zeros(DIM + 1, np.float32), 3)
    assert index.search(np.zeros(DIM, np.float32), 3)[1] == []


def recall_at(index: VectorIndex, live: dict, queries: np.ndarray, k: int) -> float:
    hits = 0
    for q in queries:
        sims, keys = index.search(q, k)
        assert len(keys) == min(k, len(live)) and len(set(keys)) == len(keys)
        assert all(key in live for key in keys)  # no removed key
        for key, s in zip(keys, sims):  # no stale vector of a replaced key
            assert abs(float(live[key] @ q) - float(s)) < 1e-4
        hits += len(set(keys) & set(brute(live, q, k)[1]))
    return hits / (len(queries) * min(k, len(live)))


def test_hnsw_mode_filters_dead_keeps_recall_compacts_and_switches():
    rng = np.random.default_rng(1)
    index = VectorIndex(DIM, exact_max=200, max_dead_share=0.25)
    data = clustered(rng, 2000)
    keys = list(range(2000))
    index.upsert(keys[:150], data[:150])
    assert index.mode == "exact"
    index.upsert(keys[150:], data[150:])
    assert index.mode == "hnsw" and index.n_slots == 2000
    live = dict(zip(keys, data))
    queries = clustered(rng, 40)
    assert recall_at(index, live, queries, 10) >= 0.95

    # replace 300 keys (tombstone + new slot) and remove 150: dead share 450 / 2300 < 0.25
    moved = [int(i) for i in rng.choice(2000, 300, replace=False)]
    new = clustered(rng, 300)
    index.upsert(moved, new)
    live.update(zip(moved, new))
    gone = [k for k in keys if k not in set(moved)][:150]
    index.remove(gone)
    for key in gone:
        del live[key]
    assert index.mode == "hnsw" and index.n_slots == 2300 and len(index) == 1850
    assert recall_at(index, live, queries, 10) >= 0.95
    assert recall_at(index, live, queries[:3], 5000) == 1.0  # k > n_live: all live keys

    # pass the dead share: compaction shrinks the slots to the live keys
    more = [k for k in live if k not in set(moved)][:200]
    index.remove(more)
    for key in more:
        del live[key]
    assert index.mode == "hnsw" and index.n_slots == len(index) == 1650
    assert recall_at(index, live, queries, 10) >= 0.95

    # remove down to 50 live keys: a compaction under exact_max // 2 switches back to exact
    for key in list(live)[50:]:
        index.remove([key])
        del live[key]
    assert index.mode == "exact" and len(index) == 50
    q = queries[0]
    assert index.search(q, 7)[1] == brute(live, q, 7)[1]


@pytest.mark.parametrize("mode", ["exact", "hnsw"])
@pytest.mark.parametrize("mmap", [True, False])
def test_save_load_round_trip(tmp_path, mode, mmap, monkeypatch):
    monkeypatch.setattr("etamem.live.npy_files.MMAP_MIN_BYTES", 0)  # map even this small index
    rng = np.random.default_rng(2)
    index = VectorIndex(DIM, exact_max=None if mode == "exact" else 100)
    data = clustered(rng, 400)
    keys = [f"k{i}" if i % 2 else i for i in range(400)]
    index.upsert(keys, data)
    index.upsert(keys[:20], clustered(rng, 20))  # replaced keys (tombstones in hnsw mode)
    index.remove(keys[20:40])
    assert index.mode == mode
    index.save(tmp_path)
    loaded = VectorIndex.load(tmp_path, mmap=mmap)
    assert loaded.mode == mode and len(loaded) == len(index) and loaded.n_slots == index.n_slots
    assert isinstance(loaded._vecs, np.memmap) == mmap
    queries = clustered(rng, 10)
    for q in queries:
        a, b = index.search(q, 15), loaded.search(q, 15)
        assert a[1] == b[1] and all(type(x) is type(y) for x, y in zip(a[1], b[1]))
        np.testing.assert_array_equal(a[0], b[0])
    # the loaded index still takes writes, and the saved files stay intact
    fresh = unit(rng.standard_normal((3, DIM)))
    loaded.upsert([keys[50], "new", 10_000], fresh)
    loaded.remove([keys[60]])
    assert loaded.search(fresh[1], 1)[1] == ["new"]
    assert keys[60] not in loaded and keys[60] not in loaded.search(fresh[0], 400)[1]
    np.testing.assert_allclose(loaded.vector(keys[50]), fresh[0])
    again = VectorIndex.load(tmp_path, mmap=mmap)
    assert again.search(queries[0], 15)[1] == index.search(queries[0], 15)[1]
    loaded.save(tmp_path)  # overwrite the files the first load may still map
    assert VectorIndex.load(tmp_path).search(fresh[1], 1)[1] == ["new"]
