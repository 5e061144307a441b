"""Text encoders, the vector cache, the flat hybrid index and the store format."""
import numpy as np
import pytest

from etamem.models.encoders import CachedEncoder, text_hash
from etamem.retrieval.flat import FlatHybridIndex
from etamem.store.sqlite import FORMAT_VERSION, Store


def test_minilm_similar_closer_than_unrelated(minilm):
    v = minilm.encode(["I adopted a kitten last week.", "We got a new cat a few days ago.",
                       "The central bank raised interest rates."])
    assert v.shape == (3, 384) and v.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.3


def test_cached_encoder_reaches_model_once_per_text(hashing_encoder, tmp_path):
    store = Store(tmp_path / "m.sqlite")
    enc = CachedEncoder(hashing_encoder, max_entries=2, persist=store)
    a = enc.encode(["red apple", "green pear", "red apple"])
    assert enc.encoded_texts == 2 and hashing_encoder.calls == 1
    np.testing.assert_array_equal(a[0], a[2])
    np.testing.assert_array_equal(a, hashing_encoder.encode(["red apple", "green pear", "red apple"]))
    enc.encode(["green pear"])
    assert enc.encoded_texts == 2
    fresh = CachedEncoder(hashing_encoder, persist=store)  # new process: persistent cache answers
    b = fresh.encode(["red apple", "blue plum"])
    assert fresh.encoded_texts == 1
    np.testing.assert_array_equal(b[0], a[0])
    assert enc.encode([]).shape == (0, hashing_encoder.dim)
    assert text_hash("x") != text_hash("y") and len(text_hash("x")) == 32


def _brute_force_order(index, vecs, q, text, beta, k):
    bm = index.bm25_scores(text)
    bm = bm / bm.max() if bm.max() > 0 else bm
    score = (1 - beta) * (vecs @ q) + beta * bm
    return sorted(range(len(vecs)), key=lambda i: (-score[i], i))[:k], score


@pytest.mark.parametrize("beta", [0.0, 0.1, 0.5, 1.0])
def test_flat_index_matches_brute_force(hashing_encoder, beta):
    rng = np.random.default_rng(0)
    words = "cat dog hiking paris job nurse sister exam music guitar lake boat coffee garden".split()
    texts = [" ".join(rng.choice(words, size=5)) for _ in range(120)]
    vecs = hashing_encoder.encode(texts)
    index = FlatHybridIndex(vecs, texts)
    for query in ["cat hiking", "nurse job in paris", "guitar"]:
        q = hashing_encoder.encode([query])[0]
        got = index.search(q, query, 10, beta=beta, pool=40)
        ref, score = _brute_force_order(index, vecs, q, query, beta, 10)
        np.testing.assert_allclose([r.score for r in got], score[ref], atol=1e-5)
        assert [r.index for r in got] == ref


def test_flat_index_bm25_weight_zero_is_pure_vector_order(hashing_encoder):
    texts = ["alpha beta", "beta gamma", "gamma delta", "delta alpha beta"]
    vecs = hashing_encoder.encode(texts)
    index = FlatHybridIndex(vecs, texts)
    q = hashing_encoder.encode(["beta"])[0]
    got = [r.index for r in index.search(q, "beta", 4, beta=0.0)]
    assert got == sorted(range(4), key=lambda i: (-(vecs[i] @ q), i))


def test_flat_index_empty():
    index = FlatHybridIndex(np.zeros((0, 8), np.float32), [])
    assert index.search(np.ones(8, np.float32), "x", 5) == []


def test_store_format_version_is_checked(tmp_path):
    path = tmp_path / "m.sqlite"
    Store(path).close()
    s = Store(path)
    assert s.get_meta("format_version") == str(FORMAT_VERSION)
    s.set_meta("format_version", "999")
    s.close()
    with pytest.raises(ValueError, match="format version 999"):
        Store(path)


def test_store_uses_wal(tmp_path):
    s = Store(tmp_path / "m.sqlite")
    assert s._query("PRAGMA journal_mode")[0][0] == "wal"


def test_openai_embeddings_endpoint_through_the_real_client(chat_server):
    from etamem.config import Config
    from etamem.models.encoders import make_text_encoder
    from llm_server import embed_text

    cfg = Config(text_encoder="openai:test-emb", llm_base_url=chat_server.base_url, llm_api_key="k",
                 embedding_batch_size=2)
    enc = make_text_encoder(cfg)
    assert enc.name == "openai:test-emb" and enc.dim == 16 and len(chat_server.requests) == 1  # dimension probe
    texts = ["red apple pie", "green pear", "red apple pie", "blue plum tart"]
    vecs = enc.encode(texts)
    expected = np.array([embed_text(t) for t in texts], np.float32)
    np.testing.assert_allclose(vecs, expected / np.linalg.norm(expected, axis=1, keepdims=True), atol=1e-6)
    assert len(chat_server.requests) == 1 + 2  # 3 distinct texts in batches of 2
    enc.encode(["green pear"])
    assert len(chat_server.requests) == 3  # served from the cache
