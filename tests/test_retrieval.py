"""Routing, BM25, hierarchical beam search and the merged retrieval."""
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from etamem.config import Config
from etamem.records import AMU
from etamem.retrieval import LexicalIndex, SpaceIndex, beam_search, largest_remainder, minmax, route
from etamem.retrieval.options import SearchOptions
from etamem.views import SpaceViews
from helpers import unit

WORDS = "cat dog hiking paris job nurse sister exam music guitar lake boat coffee garden".split()




# --- routing --------------------------------------------------------------------------------
def test_budgets_sum_to_k_and_peaked_view_gets_most():
    rng = np.random.default_rng(0)
    flat = rng.uniform(0.30, 0.32, 50)
    peaked = np.concatenate([[0.9], rng.uniform(0.1, 0.2, 49)])
    mid = np.concatenate([[0.6, 0.58, 0.57], rng.uniform(0.2, 0.3, 30)])
    for k in (1, 7, 20, 33):
        plan = route({"event": flat, "affect": peaked, "time": mid}, k)
        assert sum(plan.budgets.values()) == k
    plan = route({"event": flat, "affect": peaked, "time": mid}, 20)
    assert plan.budgets["affect"] == max(plan.budgets.values()) and plan.budgets["affect"] > plan.budgets["event"]
    assert plan.entropies["affect"] < plan.entropies["time"] < plan.entropies["event"]
    assert abs(sum(plan.weights.values()) - 1) < 1e-9


def test_empty_view_gets_zero_and_mean_routing_is_equal():
    sims = {"event": np.array([0.5, 0.1]), "affect": np.zeros(0), "time": np.array([0.3, 0.2, 0.1])}
    plan = route(sims, 20)
    assert plan.budgets["affect"] == 0 and sum(plan.budgets.values()) == 20
    mean = route(sims, 20, mode="mean")
    assert mean.budgets == {"event": 10, "affect": 0, "time": 10}
    assert route({"event": np.zeros(0)}, 5).budgets == {"event": 0}
    with pytest.raises(ValueError):
        route(sims, 5, mode="random")


def test_entropy_matches_direct_formula():
    s = np.array([0.5, 0.45, 0.1, 0.0])
    p = np.exp(s / 0.05) / np.exp(s / 0.05).sum()
    h = -(p * np.log(p)).sum() / np.log(4)
    assert route({"v": s}, 3).entropies["v"] == pytest.approx(h, abs=1e-9)


def test_leaf_similarities_exact_and_hnsw_against_brute_force():
    from etamem.retrieval.retriever import leaf_index, top_similarities

    rng = np.random.default_rng(3)
    x = rng.standard_normal((3000, 32)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = x[7] + 0.3 * rng.standard_normal(32).astype(np.float32)
    q /= np.linalg.norm(q)
    brute = np.sort(x @ q)[::-1]
    exact = top_similarities(leaf_index(x, exact_max=5000), q, len(x), 50)
    np.testing.assert_allclose(exact, brute[:50], rtol=0, atol=1e-5)
    assert top_similarities(leaf_index(x[:20], exact_max=5000), q, 20, 50).shape == (20,)  # all, if fewer
    hnsw = leaf_index(x, exact_max=100)
    assert hnsw.mode == "hnsw"
    approx = top_similarities(hnsw, q, len(x), 50)
    assert approx.shape == (50,) and np.all(np.diff(approx) <= 1e-6)  # best first
    # approximate: nearly all of the true top 50 (compared by value: ties are measure-zero)
    found = np.isclose(brute[:50][:, None], approx[None, :], atol=1e-5).any(axis=1)
    assert found.mean() >= 0.9 and abs(approx[0] - brute[0]) < 1e-5
    assert top_similarities(None, q, 0, 50).shape == (0,)


def test_routing_on_all_leaves_equals_routing_on_enough_candidates():
    rng = np.random.default_rng(4)
    sims = {v: rng.uniform(0.1, 0.9, n) for v, n in (("event", 40), ("affect", 25), ("time", 7))}
    best = {v: np.sort(s)[::-1][:256] for v, s in sims.items()}
    full, top = route(sims, 20), route(best, 20)
    assert full.budgets == top.budgets
    assert all(abs(full.entropies[v] - top.entropies[v]) < 1e-12 for v in sims)


def test_largest_remainder():
    assert largest_remainder({"a": 1, "b": 1, "c": 1}, 10) == {"a": 4, "b": 3, "c": 3}
    # exact shares 3.5, 1.75, 1.75: floors 3, 1, 1, the two largest remainders (b, c) get the rest
    assert largest_remainder({"a": 0.5, "b": 0.25, "c": 0.25}, 7) == {"a": 3, "b": 2, "c": 2}
    assert largest_remainder({"a": 0, "b": 0}, 5) == {"a": 0, "b": 0}


# --- BM25 -------------------------------------------------------------------------------------
def test_lexical_index_matches_bm25s_and_subsets():
    import bm25s

    rng = np.random.default_rng(1)
    texts = [" ".join(rng.choice(WORDS, 6)) for _ in range(60)]
    lex = LexicalIndex(texts, stemmer="none")
    ref = bm25s.BM25()
    ref.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
    for q in ["cat hiking", "nurse job paris paris", "zebra", "the"]:
        tokens = [t for t in bm25s.tokenize([q], stopwords="en", return_ids=False, show_progress=False)[0]
                  if t in ref.vocab_dict]
        expected = ref.get_scores(tokens) if tokens else np.zeros(60)
        np.testing.assert_allclose(lex.scores_all(q), expected, rtol=1e-5, atol=1e-6)
        rows = [5, 0, 59, 17]
        np.testing.assert_allclose(lex.scores_for(rows, q), expected[rows], rtol=1e-5, atol=1e-6)
    assert LexicalIndex([]).scores_all("cat").shape == (0,)
    only_stopwords = LexicalIndex(["the", "and a"])  # bm25s cannot index this: scores are zero
    assert only_stopwords.scores_all("the cat").tolist() == [0.0, 0.0]
    assert only_stopwords.scores_for([1], "cat").tolist() == [0.0]
    np.testing.assert_allclose(minmax(np.array([2.0, 4.0, 3.0])), [0, 1, 0.5])
    assert minmax(np.array([1.0, 1.0])).tolist() == [0.0, 0.0]


# --- beam search -------------------------------------------------------------------------------
def build_views(n=120, seed=0, **cfg):
    rng = np.random.default_rng(seed)
    config = Config(b_max=3, m_max_init=6, m_max_bounds=(4, 8), seed=seed, **cfg)
    centres = unit(rng.standard_normal((6, 16)))
    views = SpaceViews(config, 16, 16)
    amus, tv, av = [], [], []
    t0 = datetime(2023, 3, 1, 10, tzinfo=timezone.utc)
    for i in range(n):
        c = int(rng.integers(6))
        amus.append(AMU(amu_id=f"a{i:03d}", text=" ".join(rng.choice(WORDS, 5)) + f" topic{c}", speaker="S",
                        timestamp=t0 + timedelta(days=int(i // 10) * 3), session_id=f"s{i // 10}",
                        source_turn_ids=(f"t{i}",), polarity=("neutral", "positive", "negative")[i % 3]))
        tv.append(unit(centres[c] + 0.4 * rng.standard_normal(16)))
        av.append(unit(centres[(c + 2) % 6] + 0.4 * rng.standard_normal(16)))
        views.add(amus[-1:], tv[-1][None], av[-1][None])
        if i % 10 == 9:
            views.maintain()
    views.maintain()
    return views, amus, np.stack(tv), np.stack(av)


def exhaustive(index, view, q, query, k, beta):
    tree_ids = (list(index.views.tree(view).row_of) if view != "time" else list(index.views.time.amu_session))
    rows = np.array([index.row_of[a] for a in tree_ids])
    vecs = index.affect_vecs if view == "affect" else index.text_vecs
    bm = index.amu_lex.scores_for(rows, query)
    score = (1 - beta) * (vecs[rows] @ q) + beta * minmax(bm)
    order = np.lexsort((np.array(tree_ids), -score))[:k]
    return [(tree_ids[i], float(score[i])) for i in order]


@pytest.mark.parametrize("view", ["event", "affect", "time"])
@pytest.mark.parametrize("beta", [0.0, 0.1, 0.5])
def test_wide_beam_equals_exhaustive_search(view, beta):
    views, amus, tv, av = build_views()
    index = SpaceIndex(views, amus, tv, av)
    n_leaves = len(index.routing[view])
    assert n_leaves > 3  # a real hierarchy
    rng = np.random.default_rng(3)
    for query in ["cat hiking topic1", "nurse boat", "guitar topic4"]:
        q = unit(rng.standard_normal(16))
        h = index.hierarchies[view]
        got = beam_search(h, q, h.node_lex.query_ids(query), index.amu_lex.query_ids(query),
                          beam=n_leaves, k=10, beta=beta)
        ref = exhaustive(index, view, q, index.amu_lex.query_ids(query), 10, beta)
        assert [s.key for s in got] == [r[0] for r in ref]
        np.testing.assert_allclose([s.score for s in got], [r[1] for r in ref], atol=1e-5)


def test_bm25_weight_zero_is_pure_vector_order():
    views, amus, tv, av = build_views(seed=2)
    index = SpaceIndex(views, amus, tv, av)
    q = unit(np.random.default_rng(4).standard_normal(16))
    h = index.hierarchies["event"]
    got = beam_search(h, q, h.node_lex.query_ids("cat"), index.amu_lex.query_ids("cat"),
                      beam=len(index.routing["event"]), k=15, beta=0.0)
    ids = list(views.event.row_of)
    cos = {a: float(index.text_vecs[index.row_of[a]] @ q) for a in ids}
    assert [s.key for s in got] == sorted(ids, key=lambda a: (-cos[a], a))[:15]


def test_narrow_beam_prunes_and_traces():
    from etamem.retrieval import BeamTrace

    views, amus, tv, av = build_views(n=200, seed=5)
    index = SpaceIndex(views, amus, tv, av)
    h = index.hierarchies["event"]
    trace = BeamTrace()
    q = index.text_vecs[0]
    got = beam_search(h, q, h.node_lex.query_ids("x"), index.amu_lex.query_ids("x"), beam=2, k=5, beta=0.1,
                      trace=trace)
    assert 0 < len(got) <= 5 and len(trace.leaves) <= 2 and all(len(level) <= 2 for level in trace.levels)
    assert len(trace.levels) >= 2  # descended more than one level


def test_search_merges_views_and_reports_routing():
    views, amus, tv, av = build_views(seed=6)
    index = SpaceIndex(views, amus, tv, av)
    q = index.text_vecs[5]
    res = index.search("cat topic2", q, index.affect_vecs[5], 20, SearchOptions(beam=10, beta=0.1), trace=True)
    assert sum(res.routing.budgets.values()) == 20
    keys = [r[0] for r in res.ranked]
    assert len(keys) == len(set(keys)) and 0 < len(keys) <= 20
    scores = [r[1] for r in res.ranked]
    assert scores == sorted(scores, reverse=True)
    # an AMU found by two views lists both
    by_view = {v: {k for k, _ in t.found} for v, t in res.traces.items()}
    for key, _, found_in in res.ranked:
        assert set(found_in) == {v for v, ks in by_view.items() if key in ks}
    only_event = index.search("cat", q, q, 10, SearchOptions(beam=10, beta=0.1, views=("event",)))
    assert all(v == ("event",) for _, _, v in only_event.ranked)


def test_rrf_fuse_hand_computed():
    from etamem.retrieval import rrf_fuse

    hits = [("t1",), ("t2", "t3"), ("t4",)]
    turns = ["t3", "t9", "t1"]
    fused = dict(rrf_fuse(hits, turns, k=10))
    assert fused[0] == pytest.approx(1 / 11 + 1 / 13)  # hit t1, plus raw t1 at rank 3
    assert fused[1] == pytest.approx(1 / 12 + 1 / 11)  # hit t2/t3, plus raw t3 at rank 1
    assert fused[2] == pytest.approx(1 / 13)
    assert fused["t9"] == pytest.approx(1 / 12)  # uncovered raw turn is an entry of its own
    order = [key for key, _ in rrf_fuse(hits, turns, k=10)]
    assert order == [1, 0, "t9", 2]  # 0.1742, 0.1678, 0.0833, 0.0769
