"""Incremental BM25 (`LexicalIndex`): scores equal a from-scratch bm25s index over the live documents
after any interleaving of adds, removes and compactions, and survive save/load."""
from __future__ import annotations

import json
import os

import numpy as np
import pytest

from etamem.retrieval.lexical import LexicalIndex, splitter, tokenize

WORDS = ["cat", "dog", "paris", "nurse", "job", "hiking", "zebra", "coffee", "rain", "river", "piano",
         "garden", "doctor", "train", "berlin", "sister", "birthday", "cake", "museum", "soccer"]
STOP = ["the", "and", "a", "of", "is"]
SENTENCES = [
    "Caroline went to the LGBTQ support group on 7 May 2023 and felt accepted.",
    "Melanie painted a sunrise over the lake; she's proud of it!",
    "I'm thinking about adopting a dog -- maybe a golden retriever?",
    "The café on Rue de Rivoli serves the best croissants in Paris.",
    "My sister's birthday party: cake, balloons, and 25 guests.",
    "He ran the Berlin marathon in 3h45m, his personal best.",
    "",
    "the and of a",
    "Über-fast trains (ICE) connect Köln and München; tickets cost €49.",
    "snake_case identifiers and CamelCase words both count as tokens",
    "Dog dog DOG: the dog barked at the other dog.",
    "Nurse practitioners in Paris work long shifts at the hospital.",
]
QUERIES = ["cat hiking", "nurse job paris paris", "zebra", "the", "", "unknownword", "dog dog dog",
           "Paris café croissants", "birthday cake sister", "ICE trains Köln", "snake_case tokens"]


def _ref(texts: list[str], query: str, stemmer: str = "english") -> np.ndarray:
    """bm25s's own scores of `query` over a from-scratch index of `texts` (tokens stemmed by
    PyStemmer's English stemmer unless `stemmer` is "none"): (len(texts),)."""
    import bm25s
    import Stemmer

    stem = None if stemmer == "none" else Stemmer.Stemmer("english")
    tokens = bm25s.tokenize(texts, stopwords="en", stemmer=stem, show_progress=False)
    if not any(tokens.ids):  # bm25s cannot index a corpus without a single token
        return np.zeros(len(texts))
    ref = bm25s.BM25()
    ref.index(tokens, show_progress=False)
    q = [t for t in bm25s.tokenize([query], stopwords="en", stemmer=stem, return_ids=False, show_progress=False)[0]
         if t in ref.vocab_dict]
    return ref.get_scores(q) if q else np.zeros(len(texts))


def _check(lex: LexicalIndex, texts: dict[int, str], rng, queries=QUERIES) -> None:
    """Every live slot scores as in bm25s over the live texts (slot order), dead slots score 0."""
    live = np.array(sorted(texts), dtype=np.int64)
    assert lex.n_live == live.size and np.flatnonzero(lex.alive).tolist() == live.tolist()
    fresh = LexicalIndex([texts[s] for s in live])
    rows = rng.integers(0, lex.n, size=min(lex.n, 40)) if lex.n else np.zeros(0, np.int64)
    for q in queries:
        expected = np.zeros(lex.n)
        expected[live] = _ref([texts[s] for s in live], q)
        got = lex.scores_all(q)
        assert got.dtype == np.float32 and got.shape == (lex.n,)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(lex.scores_for(rows, q), expected[rows], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(lex.scores_for(rows, lex.query_ids(q)), expected[rows], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(fresh.scores_all(q), expected[live], rtol=1e-5, atol=1e-6)


def _random_texts(rng, k: int) -> list[str]:
    vocab = WORDS + STOP + [f"rare{i}" for i in range(30)]
    return [" ".join(rng.choice(vocab, rng.integers(0, 12))) for _ in range(k)]


@pytest.mark.parametrize("stemmer", ["english", "none"])
def test_splitter_is_bm25s_tokenize(stemmer):
    texts = SENTENCES + QUERIES + ["a_b __ x1 2x 3 ab-cd Ünïcödé ñandú 日本語 テスト"]
    assert [splitter(stemmer)(t) for t in texts] == tokenize(texts, stemmer)


def test_stemming_matches_word_forms_and_is_saved_with_the_index(tmp_path):
    texts = ["Caroline paints sunsets at the lake.", "Melanie went camping with her kids.", "A quiet day."]
    stemmed, plain = LexicalIndex(texts), LexicalIndex(texts, stemmer="none")
    query = "Which paintings did Caroline make? Where did Melanie camp with the kid?"
    assert stemmed.scores_all("painting")[0] > 0 and plain.scores_all("painting")[0] == 0
    assert stemmed.scores_all("camp kid")[1] > 0 and plain.scores_all("camp kid")[1] == 0
    for stem in ("english", "none"):
        lex = LexicalIndex(texts, stemmer=stem)
        np.testing.assert_allclose(lex.scores_all(query), _ref(texts, query, stem), rtol=1e-5, atol=1e-6)
        lex.save(tmp_path / stem)
        back = LexicalIndex.load(tmp_path / stem)
        assert back.stemmer == stem
        np.testing.assert_array_equal(back.scores_all(query), lex.scores_all(query))
    with pytest.raises(ValueError, match="stemmer"):
        LexicalIndex(texts, stemmer="klingon")


def test_matches_bm25s_on_random_words_and_sentences():
    rng = np.random.default_rng(1)
    for texts in (_random_texts(rng, 150), SENTENCES):
        lex = LexicalIndex(texts)
        assert lex.n == lex.n_live == len(texts) and lex.dead_share == 0.0
        _check(lex, dict(enumerate(texts)), rng, QUERIES + WORDS[:5] + ["rare3 rare3 cat"])
        rows = np.array([len(texts) - 1, 0, 3, 3])  # any order, repeats allowed
        np.testing.assert_allclose(lex.scores_for(rows, "cat dog paris"), _ref(texts, "cat dog paris")[rows],
                                   rtol=1e-5, atol=1e-6)


def test_scores_all_sums_tokens_over_few_or_many_postings():
    """A query of rare tokens sums over the touched slots only; one of common tokens over all slots."""
    rng = np.random.default_rng(3)
    texts = [" ".join(rng.choice(WORDS, 6)) for _ in range(400)]
    texts[17], texts[250], texts[390] = "qx1 qx2 cat", "qx2 qx2 dog", "qx1 qx3"
    lex = LexicalIndex(texts[:200])
    lex.add(texts[200:])  # rare tokens in both the built and the added postings
    for q in ("qx1 qx2 qx1 qx3", "qx2 cat", "cat dog paris"):
        np.testing.assert_allclose(lex.scores_all(q), _ref(texts, q), rtol=1e-5, atol=1e-6)


def test_repeated_query_token_counts_twice():
    lex = LexicalIndex(SENTENCES)
    once, twice = lex.scores_all("dog"), lex.scores_all("dog dog")
    assert once.max() > 0
    np.testing.assert_allclose(twice, 2 * once, rtol=1e-6)
    assert lex.query_ids("dog the dog").tolist() == [lex.vocab["dog"]] * 2


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_interleaved_adds_removes_and_compact_match_from_scratch(seed):
    rng = np.random.default_rng(seed)
    pool = _random_texts(rng, 200) + SENTENCES
    texts: dict[int, str] = {}  # slot -> text, live slots only (the caller's parallel array)
    lex = LexicalIndex(pool[:20])
    texts.update(enumerate(pool[:20]))
    nxt = 20
    for step in range(24):
        if rng.random() < 0.55:
            batch = [pool[(nxt + i) % len(pool)] for i in range(int(rng.integers(0, 7)))]
            nxt += len(batch)
            n0 = lex.n
            slots = lex.add(batch)
            assert slots.dtype == np.int64 and slots.tolist() == list(range(n0, n0 + len(batch)))
            texts.update(zip(slots.tolist(), batch))
        else:  # live and dead slots, with repeats
            slots = rng.integers(0, lex.n, size=int(rng.integers(0, 6))) if lex.n else []
            lex.remove(slots)
            for s in np.asarray(slots).tolist():
                texts.pop(s, None)
        if step == 12:  # compact to a shuffled order of the live slots; the caller renumbers alike
            keep = rng.permutation(np.array(sorted(texts), dtype=np.int64))
            lex.compact(keep)
            texts = {i: texts[s] for i, s in enumerate(keep.tolist())}
            assert lex.n == lex.n_live == keep.size and lex.dead_share == 0.0
        if step % 4 == 3 or step == 12:
            _check(lex, texts, rng)
    _check(lex, texts, rng)
    assert lex.dead_share == pytest.approx(1 - len(texts) / lex.n)


def test_remove_is_idempotent_and_removed_tokens_score_zero():
    lex = LexicalIndex(["cat dog", "zebra cat", "river"])
    lex.remove([1])
    state = (lex.n, lex.n_live, lex._total_len, lex._df.view.copy())
    lex.remove([1, 1])
    assert (lex.n, lex.n_live, lex._total_len) == state[:3] and np.array_equal(lex._df.view, state[3])
    assert "zebra" in lex.vocab and lex.scores_all("zebra").tolist() == [0.0, 0.0, 0.0]
    assert lex.scores_for([1], "cat").tolist() == [0.0]
    _check(lex, {0: "cat dog", 2: "river"}, np.random.default_rng(0), ["cat", "zebra cat", "river dog"])
    with pytest.raises(IndexError):
        lex.remove([3])
    with pytest.raises(ValueError):
        lex.compact(np.array([1]))  # dead slot


def test_add_appends_without_rebuilding_the_inverted_index():
    lex = LexicalIndex(SENTENCES)
    post = lex._post
    lex.add(["dog river"])
    lex.remove([0])
    assert lex._post is post  # only the growable per-token postings grew
    _check(lex, {**{i: t for i, t in enumerate(SENTENCES) if i}, len(SENTENCES): "dog river"},
           np.random.default_rng(0))


@pytest.mark.parametrize("mmap", [True, False])
def test_save_load_round_trip_then_keeps_accepting_writes(tmp_path, mmap):
    rng = np.random.default_rng(5)
    base = _random_texts(rng, 60)
    lex = LexicalIndex(base[:40])
    lex.add(base[40:])
    lex.remove([3, 41, 7])
    texts = {i: t for i, t in enumerate(base) if i not in (3, 41, 7)}
    before = {q: lex.scores_all(q) for q in QUERIES}
    lex.save(tmp_path)
    meta = json.loads((tmp_path / "lexical.json").read_text())
    assert meta["format"] == 2 and meta["stemmer"] == "english" and meta["vocab"] == list(lex.vocab)
    for f in os.listdir(tmp_path):
        if f.endswith(".npy"):
            np.load(tmp_path / f, allow_pickle=False)  # plain arrays, no pickle

    loaded = LexicalIndex.load(tmp_path, mmap=mmap)
    assert (loaded.n, loaded.n_live, loaded.vocab) == (lex.n, lex.n_live, lex.vocab)
    for q in QUERIES:
        assert np.array_equal(loaded.scores_all(q), before[q])
        assert np.array_equal(loaded.scores_for([5, 0, 59], q), before[q][[5, 0, 59]])
    new = loaded.add(["zebra hiking brandnewword", ""])
    loaded.remove([0, 5, 41])
    texts.update(zip(new.tolist(), ["zebra hiking brandnewword", ""]))
    texts.pop(0), texts.pop(5)
    _check(loaded, texts, rng, QUERIES + ["brandnewword zebra"])
    again = LexicalIndex.load(tmp_path, mmap=mmap)  # the writes never reached the files
    assert again.n == lex.n and np.array_equal(again.scores_all("zebra"), before["zebra"])
    loaded.compact(np.flatnonzero(loaded.alive))
    loaded.save(tmp_path)  # over its own mapped files
    assert np.array_equal(LexicalIndex.load(tmp_path).scores_all("zebra"), loaded.scores_all("zebra"))


def test_degenerate_inputs_give_zeros_of_the_right_shape(tmp_path):
    empty = LexicalIndex([])
    assert empty.n == empty.n_live == 0 and empty.dead_share == 0.0
    assert empty.scores_all("cat").shape == (0,) and empty.scores_for([], "cat").shape == (0,)
    assert empty.add([]).tolist() == [] and empty.query_ids("cat").dtype == np.int64
    empty.save(tmp_path / "e")
    assert LexicalIndex.load(tmp_path / "e").scores_all("cat").shape == (0,)

    stop = LexicalIndex(["the", "and a", ""])
    assert stop.scores_all("the cat").tolist() == [0.0] * 3 and stop.scores_for([1], "cat").tolist() == [0.0]
    assert stop.query_ids("cat").size == 0
    stop.add(["cat"])
    _check(stop, {0: "the", 1: "and a", 2: "", 3: "cat"}, np.random.default_rng(0), ["cat", "the"])

    lex = LexicalIndex(["cat dog", "dog"])
    for q in ("", "the of", "unknownword", np.zeros(0, np.int64)):
        assert lex.scores_all(q).tolist() == [0.0, 0.0] and lex.scores_for([1, 0], q).tolist() == [0.0, 0.0]
    assert lex.scores_for(np.zeros(0, np.int64), "cat").shape == (0,)
    lex.remove([0, 1])  # nothing live: N = 0
    assert lex.n_live == 0 and lex.dead_share == 1.0
    assert lex.scores_all("cat").tolist() == [0.0, 0.0] and lex.scores_for([0], "dog").tolist() == [0.0]
    lex.add(["dog"])
    _check(lex, {2: "dog"}, np.random.default_rng(0), ["dog", "cat"])
    lex.compact(np.zeros(0, np.int64))
    assert lex.n == 0 and lex.scores_all("dog").shape == (0,)
