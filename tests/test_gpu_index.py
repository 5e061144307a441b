"""The FAISS-GPU selection for the large exact indexes (`etamem/retrieval/gpu_index.py`), tested on
CPU: a stand-in FAISS module reports one GPU and backs `GpuIndexFlatIP` with the real CPU
`IndexFlatIP` (the same API), so the selection, the GPU copy's upkeep (appends, overwrites,
removals, compactions) and the result order are checked against the NumPy exact search; a CPU-only
FAISS keeps everything on the CPU; `index_device="gpu"` without a GPU is refused naming the extra."""
import types

import faiss
import numpy as np
import pytest

from conftest import HashingEncoder
from etamem import Config, Memory
from etamem.models.affect import VaderAffectTagger
from etamem.retrieval import gpu_index, vector_index
from etamem.retrieval.vector_index import VectorIndex


class FakeGpuFaiss(types.SimpleNamespace):
    """faiss with a pretend GPU: GpuIndexFlatIP is the CPU IndexFlatIP; searches are counted."""

    def __init__(self, gpus: int = 1):
        super().__init__(**{k: getattr(faiss, k) for k in dir(faiss) if not k.startswith("_")})
        self.gpus, self.searches = gpus, 0
        fake = self

        class GpuIndexFlatIP(faiss.IndexFlatIP):
            def __init__(self, resources, dim):
                super().__init__(dim)

            def search(self, x, k):
                fake.searches += 1
                return super().search(x, k)

        self.GpuIndexFlatIP = GpuIndexFlatIP
        self.StandardGpuResources = lambda: object()
        self.get_num_gpus = lambda: self.gpus


@pytest.fixture
def fake_gpu(monkeypatch):
    fake = FakeGpuFaiss()
    monkeypatch.setattr(vector_index, "import_faiss", lambda: fake)
    gpu_index._GPUS.clear()
    yield fake
    gpu_index._GPUS.clear()


def unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def test_selection_rules(fake_gpu):
    assert not gpu_index.use_gpu("cpu", 10**6, 10, fake_gpu)
    assert not gpu_index.use_gpu("auto", 9, 10, fake_gpu) and gpu_index.use_gpu("auto", 10, 10, fake_gpu)
    assert gpu_index.use_gpu("gpu", 0, 10, fake_gpu)
    with pytest.raises(ValueError, match="device"):
        gpu_index.use_gpu("cuda", 10, 10, fake_gpu)
    cpu_only = types.SimpleNamespace(get_num_gpus=lambda: 0)  # faiss-cpu: no StandardGpuResources
    assert not gpu_index.use_gpu("auto", 10**6, 10, cpu_only)
    with pytest.raises(ImportError, match=r"etamem\[gpu\]"):
        gpu_index.use_gpu("gpu", 10, 10, cpu_only)


def test_gpu_copy_follows_every_change_and_answers_as_the_cpu(fake_gpu):
    rng = np.random.default_rng(0)
    dim = 16
    gpu, cpu = VectorIndex(dim, exact_max=None), VectorIndex(dim, exact_max=None)
    gpu.set_device("auto", min_rows=50)
    queries = unit(rng.normal(size=(20, dim)))

    def same():
        for q in queries:
            for k in (1, 5, 30):
                g, c = gpu.search(q, k), cpu.search(q, k)
                assert g[1] == c[1] and np.allclose(g[0], c[0], atol=1e-5)

    keys = list(range(40))
    for index in (gpu, cpu):
        index.upsert(keys, unit(rng.normal(size=(40, dim))) if index is gpu else gpu.rows(keys))
    same()
    assert fake_gpu.searches == 0 and not gpu.on_gpu  # under min_rows: NumPy
    more = unit(rng.normal(size=(60, dim)))
    for index in (gpu, cpu):
        index.upsert(list(range(40, 100)), more)
    same()
    assert fake_gpu.searches > 0 and gpu.on_gpu
    steps = [("overwrite", list(range(10))), ("remove", list(range(10, 25))), ("append", list(range(100, 130))),
             ("remove", list(range(40, 80)))]  # the last passes the dead share: a compaction
    for what, ks in steps:
        vecs = unit(rng.normal(size=(len(ks), dim)))
        for index in (gpu, cpu):
            index.remove(ks) if what == "remove" else index.upsert(ks, vecs)
        before = fake_gpu.searches
        same()
        assert fake_gpu.searches > before
    refill = unit(rng.normal(size=(80, dim)))  # a compaction, then more rows than before it, then a search
    for index in (gpu, cpu):
        index.remove(list(range(80, 130)))
        index.upsert(list(range(200, 280)), refill)
    same()
    gpu.set_device("cpu")
    before = fake_gpu.searches
    same()
    assert fake_gpu.searches == before and not gpu.on_gpu


def test_a_cpu_only_faiss_keeps_the_search_on_cpu(monkeypatch):
    gpu_index._GPUS.clear()
    index = VectorIndex(8, exact_max=None)
    index.set_device("auto", min_rows=1)
    index.upsert([1, 2, 3], unit(np.eye(8, dtype=np.float32)[:3] + 0.1))
    assert index.search(np.eye(8, dtype=np.float32)[0], 1)[1] == [1] and not index.on_gpu
    if not gpu_index.gpu_count(faiss):  # this machine (faiss-cpu): "gpu" is refused at once
        with pytest.raises(ImportError, match=r"etamem\[gpu\]"):
            index.set_device("gpu")


def test_memory_places_its_raw_turn_index_per_config(fake_gpu, tmp_path):
    enc = HashingEncoder()
    turns = [{"turn_id": f"t{i}", "session_id": f"s{i // 10}", "speaker": ("Ana", "Ben")[i % 2],
              "text": f"Ana talked about the {w} on day {i}.", "timestamp": f"2024-03-{1 + i // 10:02d}T10:{i % 60:02d}"}
             for i, w in enumerate(["garden", "violin", "cat", "bakery", "harbour"] * 12)]
    hits = {}
    for device in ("auto", "cpu"):
        cfg = Config(index_device=device, gpu_min_rows=20)
        mem = Memory(tmp_path / device, cfg, text_encoder=enc, affect_tagger=VaderAffectTagger(enc))
        mem.add(turns, space="u")
        hits[device] = [(h.amu.amu_id, round(h.score, 5)) for h in mem.retrieve("the violin", space="u").hits]
        assert mem.live_space("u").turns.index.dense.on_gpu == (device == "auto")
        mem.close()
    assert hits["auto"] == hits["cpu"] and fake_gpu.searches > 0
    with pytest.raises(ValueError, match="index_device"):
        Config().replace(index_device="cuda")


def test_an_index_that_searches_on_a_gpu_stays_exact_past_exact_max(fake_gpu, monkeypatch):
    rows = unit(np.random.default_rng(0).normal(size=(40, 8)))
    cpu = VectorIndex(8, exact_max=10)
    cpu.upsert(list(range(40)), rows)
    assert cpu.mode == "hnsw"  # on the CPU a graph above exact_max
    gpu = VectorIndex(8, exact_max=10)
    gpu.set_device("auto", min_rows=5)
    gpu.upsert(list(range(40)), rows)
    assert gpu.mode == "exact"  # one product on the GPU instead
    sims, keys = gpu.search(rows[3], 5)
    assert keys[0] == 3 and gpu.on_gpu
    cpu.set_device("auto", min_rows=5)  # a graph built before the GPU was there: exact at the next write
    cpu.upsert([40], unit(np.ones((1, 8))))
    assert cpu.mode == "exact" and cpu.search(rows[3], 5)[1] == keys
    monkeypatch.setattr(vector_index, "import_faiss", lambda: FakeGpuFaiss(gpus=0))  # no GPU: the graph again
    gpu_index._GPUS.clear()
    again = VectorIndex(8, exact_max=10)
    again.set_device("auto", min_rows=5)
    again.upsert(list(range(40)), rows)
    assert again.mode == "hnsw"
