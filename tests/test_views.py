"""Semantic trees, calibration and the Time forest: invariants (hypothesis), hand-worked cases
and persistence."""
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from etamem.config import Config
from etamem.kernels import otsu_threshold
from etamem.records import AMU
from etamem.store.sqlite import Store
from etamem.views import Calibrator, SemanticTree, SpaceViews, Thresholds, TimeForest, route
from helpers import unit


def frozen_calibrator(tau_new=0.5, tau_coh=0.2, tau_merge=0.97, m_max=10):
    """Thresholds that never move (warm-up never ends)."""
    return Calibrator(Thresholds(tau_new, tau_coh, tau_merge, float(m_max)), min_obs=10**9, m_max_bounds=(1, 1000))


def rows_under(tree, n):
    if tree.is_leaf[n]:
        return list(tree.members[n])
    return [r for c in tree.children[n] for r in rows_under(tree, c)]


def check_tree(tree, expected_ids, after_maintenance=True):
    live = np.flatnonzero(tree.alive[: tree.n_nodes])
    seen = {}
    for n in live:
        if tree.is_leaf[n]:
            if after_maintenance:
                assert tree.members[n], f"empty leaf {n}"
            for r in tree.members[n]:
                assert r not in seen, "AMU in two leaves"
                seen[r] = n
                assert tree.leaf_of[r] == n
        elif after_maintenance:
            assert len(tree.children[n]) <= tree.b_max
        for c in tree.children[n]:
            assert tree.parent[c] == n and tree.alive[c]
        rows = rows_under(tree, n)
        assert tree.count[n] == len(rows)
        if rows:
            mean = unit(tree.X[rows].astype(np.float64).sum(axis=0))
            np.testing.assert_allclose(tree.cent[n], mean, atol=1e-5)
    assert sorted(tree.amu_ids[r] for r in seen) == sorted(expected_ids)


def check_caches(tree):
    """What the tree keeps up to date incrementally equals a fresh computation: the leaf-size
    histogram, and the cached start level of the insertion beam (dropped only when a children
    list that decides it changes; left cached)."""
    hist = tree.leaf_size_hist()
    want = np.bincount(tree.count[tree.leaves()], minlength=len(hist))
    assert len(want) == len(hist) and (hist == want).all()
    if tree._top is not None:
        cached = tree._top.tolist()
        tree._top = None
        assert tree.top_level().tolist() == cached
    tree.top_level()


# --- property tests ---------------------------------------------------------------------------
OPS = st.lists(st.one_of(
    st.tuples(st.just("add"), st.integers(0, 3), st.sampled_from(["negative", "neutral", "positive"]),
              st.integers(0, 40), st.integers(1, 3)),
    st.tuples(st.just("delete"), st.integers(0, 10**6)),
    st.tuples(st.just("maintain")),
), min_size=1, max_size=70)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, seed=st.integers(0, 1000))
def test_views_invariants_under_random_operations(ops, seed):
    cfg = Config(b_max=3, m_max_init=4, m_max_bounds=(4, 6), m_min=2, b_ins=2, calibration_min_obs=20,
                 calibration_reservoir=64, summary_delta=3, seed=seed, insert_top_width=(1, 3, 512)[seed % 3])
    rng = np.random.default_rng(seed)
    centres = unit(rng.standard_normal((4, 8)))
    views = SpaceViews(cfg, 8, 8)
    active: dict[str, AMU] = {}
    vecs: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    start = datetime(2023, 5, 1, 12, tzinfo=timezone.utc)
    for i, op in enumerate(ops):
        if op[0] == "add":
            _, c, pol, day, size = op  # a batch (one call) of `size` AMUs, polarities mixed
            pols = [pol, "neutral", "positive"][:size]
            amus = [AMU(amu_id=f"a{i}_{k}", text=f"text {i} {k}", speaker="S", timestamp=start + timedelta(days=day),
                        session_id=f"s{day}", source_turn_ids=(f"t{i}",), polarity=p) for k, p in enumerate(pols)]
            tv = unit(centres[c] + 0.3 * rng.standard_normal((size, 8)))
            av = unit(centres[(c + 1) % 4] + 0.3 * rng.standard_normal((size, 8)))
            views.add(amus, tv, av)
            for k, amu in enumerate(amus):
                active[amu.amu_id], vecs[amu.amu_id] = amu, (tv[k], av[k])
        elif op[0] == "delete" and active:
            victim = sorted(active)[op[1] % len(active)]
            assert views.remove(victim)
            del active[victim]
        else:
            views.maintain()
        for name in ("event", "affect"):
            check_caches(views.tree(name))
    views.maintain()
    for name in ("event", "affect"):
        ids = [a for a, amu in active.items() if route(amu.polarity) == name]
        check_tree(views.tree(name), ids)
    assert sorted(views.time.amu_session) == sorted(active)
    for node in views.time.nodes.values():
        assert node.count > 0
    # save / reload through a real store gives identical views
    store = Store(None)
    views.save(store, "s")
    amus = [active[a] for a in sorted(active)]
    tv = np.stack([vecs[a.amu_id][0] for a in amus]) if amus else np.zeros((0, 8), np.float32)
    av = np.stack([vecs[a.amu_id][1] for a in amus]) if amus else np.zeros((0, 8), np.float32)
    again = SpaceViews.load(store, "s", cfg, amus, tv, av, 8, 8)
    for name in ("event", "affect"):
        a, b = views.tree(name), again.tree(name)
        assert a.snapshot() == b.snapshot()
        live = np.flatnonzero(a.alive[: a.n_nodes])
        np.testing.assert_array_equal(a.cent[live], b.cent[live])
        assert a.calibrator.state() == b.calibrator.state()
        np.testing.assert_array_equal(a.calibrator.reservoir, b.calibrator.reservoir)
        check_caches(b)
    assert views.time.snapshot() == again.time.snapshot()


# --- hand-worked cases -------------------------------------------------------------------------
def clustered(rng, centre, n, noise):
    return unit(centre + noise * rng.standard_normal((n, centre.shape[0])))


def test_two_clusters_end_in_separated_subtrees():
    rng = np.random.default_rng(1)
    a, b = unit(rng.standard_normal(16)), unit(rng.standard_normal(16))
    b = unit(b - (b @ a) * a)  # orthogonal centres
    X = np.concatenate([clustered(rng, a, 30, 0.05), clustered(rng, b, 30, 0.05)])
    order = rng.permutation(60)
    tree = SemanticTree(16, frozen_calibrator(tau_new=0.8, m_max=8), b_max=4, seed=0)
    for step, i in enumerate(order):
        tree.insert(f"{'A' if i < 30 else 'B'}{i}", X[i])
        if step % 10 == 9:
            tree.maintain()
    tree.maintain()
    check_tree(tree, [f"{'A' if i < 30 else 'B'}{i}" for i in range(60)])
    tops = tree.children[tree.root]
    assert 2 <= len(tops) <= 4 and all(not tree.is_leaf[t] for t in tops)
    labels = ["".join(sorted({tree.amu_ids[r][0] for r in rows_under(tree, t)})) for t in tops]
    assert sorted(set(labels)) == ["A", "B"]  # every top subtree is pure, both clusters present
    for i, ti in enumerate(tops):
        for j, tj in enumerate(tops[:i]):
            cos = float(tree.cent[ti] @ tree.cent[tj])
            assert (cos > 0.9) if labels[i] == labels[j] else (abs(cos) < 0.2)


def test_leaf_above_capacity_splits():
    rng = np.random.default_rng(2)
    tree = SemanticTree(8, frozen_calibrator(tau_new=0.1, m_max=10), seed=0)
    for i, x in enumerate(clustered(rng, unit(rng.standard_normal(8)), 25, 0.02)):
        tree.insert(f"a{i}", x)
    assert len(tree.leaves()) == 1 and tree.count[tree.leaves()[0]] == 25
    report = tree.maintain()
    sizes = tree.count[tree.leaves()]
    assert report["splits"] == 1 and len(sizes) == 3 and sizes.max() <= 10 and sizes.sum() == 25
    check_tree(tree, [f"a{i}" for i in range(25)])


def test_low_cohesion_leaf_splits_by_cluster():
    rng = np.random.default_rng(3)
    a = unit(rng.standard_normal(8))
    b = unit(-a + 0.1 * rng.standard_normal(8))
    X = np.concatenate([clustered(rng, a, 4, 0.02), clustered(rng, b, 4, 0.02)])
    tree = SemanticTree(8, frozen_calibrator(tau_new=-1.0, tau_coh=0.5, m_max=10), seed=0)
    for i, x in enumerate(X):
        tree.insert(f"{'A' if i < 4 else 'B'}{i}", x)
    assert len(tree.leaves()) == 1
    tree.maintain()
    groups = sorted(sorted(tree.amu_ids[r][0] for r in tree.members[n]) for n in tree.leaves())
    assert groups == [["A"] * 4, ["B"] * 4]


def test_near_duplicate_leaves_merge_and_tiny_leaves_join_a_sibling():
    rng = np.random.default_rng(4)
    c = unit(rng.standard_normal(8))
    calib = frozen_calibrator(tau_new=1.01, tau_merge=0.9, m_max=10)  # every insert opens a leaf
    tree = SemanticTree(8, calib, m_min=1, seed=0)
    for i, x in enumerate(clustered(rng, c, 4, 0.01)):
        tree.insert(f"a{i}", x)
    assert len(tree.leaves()) == 4
    assert tree.maintain()["merges"] == 3 and len(tree.leaves()) == 1
    check_tree(tree, [f"a{i}" for i in range(4)])
    # m_min = 2: a singleton leaf far from the merge threshold still joins its nearest sibling
    tree2 = SemanticTree(8, frozen_calibrator(tau_new=0.9, tau_merge=0.999, m_max=10), m_min=2, seed=0)
    far = unit(-c + 0.5 * rng.standard_normal(8))
    for i, x in enumerate(np.concatenate([clustered(rng, c, 3, 0.01), far[None]])):
        tree2.insert(f"b{i}", x)
    assert len(tree2.leaves()) == 2
    tree2.maintain()
    assert len(tree2.leaves()) == 1


def test_batch_insertion_matches_sequential_on_separated_clusters():
    """One `insert_many` per session gives the leaves that AMU-by-AMU insertion gives when the
    clusters are well separated (the batch descends on the centroids as of the call)."""
    rng = np.random.default_rng(8)
    centres = unit(rng.standard_normal((6, 16)))
    X = np.concatenate([clustered(rng, centres[k], 20, 0.05) for k in range(6)])[rng.permutation(120)]
    seq = SemanticTree(16, frozen_calibrator(tau_new=0.8, m_max=8), b_max=4, seed=0)
    bat = SemanticTree(16, frozen_calibrator(tau_new=0.8, m_max=8), b_max=4, seed=0)
    for s in range(0, 120, 15):
        ids = [f"a{i}" for i in range(s, s + 15)]
        got = bat.insert_many(ids, X[s:s + 15], [f"t{i}" for i in range(s, s + 15)])
        want = [seq.insert(a, X[i], f"t{i}") for a, i in zip(ids, range(s, s + 15))]
        assert got == want
        check_tree(bat, [f"a{i}" for i in range(s + 15)], after_maintenance=False)
        seq.maintain()
        bat.maintain()
        assert bat.snapshot() == seq.snapshot()
    np.testing.assert_allclose(bat.cent[: bat.n_nodes], seq.cent[: seq.n_nodes], atol=1e-6)
    assert bat.stats == seq.stats and bat.texts == seq.texts


def test_batch_opens_one_leaf_for_a_new_topic_and_checks_its_input():
    rng = np.random.default_rng(9)
    c = unit(rng.standard_normal(8))
    tree = SemanticTree(8, frozen_calibrator(tau_new=0.8), seed=0)
    tree.insert_many([f"a{i}" for i in range(5)], clustered(rng, c, 5, 0.02))
    assert len(tree.leaves()) == 1  # the first AMU opens a leaf, the others find it
    leaves = tree.insert_many([f"b{i}" for i in range(6)], clustered(rng, unit(-c), 6, 0.02))
    assert len(set(leaves)) == 1 and len(tree.leaves()) == 2 and tree.stats["new_leaves"] == 2
    assert tree.pending[tree.root] == 11 and tree.count[tree.root] == 11
    check_tree(tree, [f"a{i}" for i in range(5)] + [f"b{i}" for i in range(6)], after_maintenance=False)
    with pytest.raises(ValueError, match="already in this tree"):
        tree.insert_many(["z", "a0"], clustered(rng, c, 2, 0.02))
    with pytest.raises(ValueError, match="duplicate"):
        tree.insert_many(["z", "z"], clustered(rng, c, 2, 0.02))
    with pytest.raises(ValueError, match="dimension"):
        tree.insert_many(["z"], np.ones((1, 5), np.float32))
    with pytest.raises(ValueError, match="2 ids"):
        tree.insert_many(["z", "y"], np.ones((3, 8), np.float32))
    assert tree.active_rows == 11 and "z" not in tree.row_of  # nothing half-inserted
    assert tree.insert_many([], np.zeros((0, 8), np.float32)) == []


def test_otsu_on_known_bimodal_sample():
    rng = np.random.default_rng(5)
    sample = np.concatenate([rng.normal(0.2, 0.1, 500), rng.normal(0.8, 0.1, 500)])
    t = otsu_threshold(sample)
    skimage = pytest.importorskip("skimage.filters")
    assert t == pytest.approx(skimage.threshold_otsu(sample, nbins=256), abs=1e-9)
    assert 0.4 < t < 0.6


def test_thresholds_move_by_ema_only_after_warm_up():
    rng = np.random.default_rng(6)
    init = Thresholds(0.4, 0.3, 0.9, 12.0)
    calib = Calibrator(init, min_obs=64, alpha=0.3, low_pct=10, high_pct=90, m_max_bounds=(6, 24))
    values = np.concatenate([rng.normal(0.2, 0.05, 40), rng.normal(0.75, 0.05, 40)]).astype(np.float32)
    calib.observe(values[:63])
    assert not calib.update(np.bincount([10, 12, 14]), step=1)
    assert calib.current == init and calib.history == []
    calib.observe(values[63:])
    assert calib.update(np.bincount([10, 12, 14]), step=2)
    res = values.astype(np.float64)
    t = otsu_threshold(res)
    high = res[res > t]
    low_t, high_t = np.percentile(high, 10), np.percentile(high, 90)
    m_target = np.clip(1.5 * np.percentile([10, 12, 14], 75), 6, 24)
    cur = calib.current
    assert cur.tau_new == pytest.approx(0.7 * 0.4 + 0.3 * low_t)
    assert cur.tau_coh == pytest.approx(0.7 * 0.3 + 0.3 * min(t, low_t))
    assert cur.tau_merge == pytest.approx(0.7 * 0.9 + 0.3 * high_t)
    assert cur.m_max == pytest.approx(0.7 * 12 + 0.3 * m_target)
    assert len(calib.history) == 1 and calib.history[0]["step"] == 2
    previous = cur.tau_new
    assert calib.update(np.bincount([10, 12, 14]), step=3)  # same reservoir: moves another EMA step toward the target
    assert calib.current.tau_new == pytest.approx(0.7 * previous + 0.3 * low_t)


def test_reservoir_is_bounded_and_uniformish():
    calib = Calibrator(Thresholds(0.4, 0.3, 0.9, 12.0), reservoir_size=100)
    calib.observe(np.zeros(100))
    calib.observe(np.ones(900))
    assert calib.reservoir.size == 100 and calib.seen == 1000
    assert 70 <= int(calib.reservoir.sum()) <= 100  # ~90% of what was seen is ones


def test_insertion_opens_leaf_below_tau_new_under_best_parent():
    rng = np.random.default_rng(7)
    tree = SemanticTree(8, frozen_calibrator(tau_new=0.9), seed=0)
    c = unit(rng.standard_normal(8))
    first = tree.insert("a", c)
    assert tree.insert("b", unit(c + 0.01 * rng.standard_normal(8))) == first
    other = tree.insert("c", unit(-c))
    assert other != first and tree.parent[other] == tree.parent[first]
    assert tree.pending[tree.root] == 3


# --- Time forest -----------------------------------------------------------------------------
def test_time_forest_levels_midnight_and_own_month_rule():
    forest = TimeForest(4)
    v = unit(np.ones(4))
    t0 = datetime(2023, 10, 1, 23, 50, tzinfo=timezone.utc)  # a Sunday; its Monday is 25 Sep
    forest.insert("a", v, t0, "s1")
    forest.insert("b", v, t0 + timedelta(minutes=20), "s1")  # after midnight: same session
    forest.insert("c", v, datetime(2023, 10, 2, 9, tzinfo=timezone.utc), "s2")
    assert forest.counts() == {"month": 1, "week": 2, "day": 2, "session": 2}  # a day under its own month
    assert forest.path("S:s1") == ["S:s1", "D:2023-10-01", "W:2023-W39/2023-10", "M:2023-10"]
    assert forest.path("S:s2") == ["S:s2", "D:2023-10-02", "W:2023-W40", "M:2023-10"]
    assert forest.nodes["S:s1"].members == ["a", "b"]
    assert forest.nodes["D:2023-10-01"].end == t0 + timedelta(minutes=20)
    forest.delete("c")
    assert forest.counts() == {"month": 1, "week": 1, "day": 1, "session": 1}


def test_time_forest_counts_on_locomo_dev(locomo_dev):
    import json

    from etamem.ingest.datasets import read_locomo
    from etamem.ingest.timeparse import parse_timestamp

    raw = {s["sample_id"]: s["conversation"] for s in json.loads(locomo_dev.read_text())}
    for conv in read_locomo(locomo_dev):
        forest = TimeForest(4)
        for i, t in enumerate(conv.turns):
            forest.insert(f"{t['turn_id']}#{i}", unit(np.ones(4)), parse_timestamp(t["timestamp"]), t["session_id"])
        # independent expectation straight from the session date strings
        c = raw[conv.space]
        starts = [datetime.strptime(c[f"{k}_date_time"], "%I:%M %p on %d %B, %Y")
                  for k, v in c.items() if k.startswith("session_") and isinstance(v, list)]
        days = {s.date() for s in starts}
        weeks = {(d - timedelta(days=d.weekday()), d.year, d.month) for d in days}  # a week's part in each month
        expected = {"month": len({(d.year, d.month) for d in days}), "week": len(weeks),
                    "day": len(days), "session": len(starts)}
        assert forest.counts() == expected, conv.space


def test_merge_screening_changes_nothing():
    """Maintenance that screens parents (`_merge_candidates`) ends in the same trees as running
    the merge pass on every parent (the brute-force reference)."""
    rng = np.random.default_rng(10)
    centres = unit(rng.standard_normal((5, 8)))

    class AllParents(SemanticTree):
        def _merge_candidates(self, parents, touched):
            return sorted(parents)

    cfg = dict(b_max=3, m_min=2, b_ins=2, summary_delta=3, seed=0)
    trees = [cls(8, Calibrator(Thresholds(0.6, 0.2, 0.9, 5.0), min_obs=30, reservoir_size=64,
                               m_max_bounds=(4, 6)), **cfg) for cls in (SemanticTree, AllParents)]
    for step in range(40):
        X = unit(centres[rng.integers(0, 5, 6)] + 0.35 * rng.standard_normal((6, 8)))
        ids = [f"a{step}_{k}" for k in range(6)]
        for tree in trees:
            tree.insert_many(ids, X)
            tree.maintain()
        assert trees[0].snapshot() == trees[1].snapshot()
    assert trees[0].stats == trees[1].stats and trees[0].stats["merges"] > 0


def test_hist_percentile_matches_numpy():
    from etamem.views.calibration import hist_percentile

    rng = np.random.default_rng(11)
    for _ in range(300):
        c = rng.integers(0, int(rng.integers(1, 40)), int(rng.integers(1, 60)))
        padded = np.concatenate([np.bincount(c), np.zeros(int(rng.integers(0, 5)), np.int64)])  # as the tree keeps it
        for q in (0, 10, 33.3, 75, 90, 100):
            assert hist_percentile(np.bincount(c), q) == pytest.approx(float(np.percentile(c, q)), abs=1e-12)
            assert hist_percentile(padded, q) == pytest.approx(float(np.percentile(c, q)), abs=1e-12)


@pytest.mark.parametrize("batch", [1, 2, 0])
def test_space_views_insert_in_configured_batches(batch):
    """`insert_batch=1` is AMU-by-AMU insertion (the sequential reference, checked against
    `SemanticTree.insert`); other sizes split one add() into batches per view."""
    rng = np.random.default_rng(12)
    cfg = Config(insert_batch=batch, b_max=3, m_max_init=4, m_max_bounds=(4, 6), seed=0)
    views = SpaceViews(cfg, 8, 8)
    start = datetime(2023, 5, 1, 12, tzinfo=timezone.utc)
    amus = [AMU(amu_id=f"a{i}", text=f"t{i}", speaker="S", timestamp=start, session_id="s",
                source_turn_ids=(f"t{i}",), polarity="neutral" if i % 3 else "positive") for i in range(9)]
    tv, av = unit(rng.standard_normal((9, 8))), unit(rng.standard_normal((9, 8)))
    calls = []
    for name in ("event", "affect"):
        tree = views.tree(name)
        tree.insert_many = (lambda f: lambda ids, *a: calls.append(len(ids)) or f(ids, *a))(tree.insert_many)
    views.add(amus, tv, av)
    assert calls == {1: [1] * 9, 2: [2, 2, 2, 2, 1], 0: [6, 3]}[batch]  # event: 6 AMUs, affect: 3
    if batch == 1:
        ref = SpaceViews(cfg, 8, 8)
        for i, a in enumerate(amus):
            (ref.event.insert(a.amu_id, tv[i], a.text) if i % 3 else ref.affect.insert(a.amu_id, av[i], a.text))
        assert views.event.snapshot() == ref.event.snapshot() and views.affect.snapshot() == ref.affect.snapshot()
    with pytest.raises(ValueError, match="insert_batch"):
        Config.from_dict({"insert_batch": -1})


def test_arrays_grow_in_place_unless_a_view_is_alive_and_keep_their_rows():
    tree = SemanticTree(4, frozen_calibrator())
    X = unit(np.random.default_rng(2).standard_normal((300, 4)))
    tree.insert_many([f"a{i}" for i in range(100)], X[:100])
    array = id(tree.X)
    tree.insert_many([f"a{i}" for i in range(100, 200)], X[100:200])  # grows X by resize (no other holder)
    assert id(tree.X) == array and tree.X.shape[0] >= 200
    view = tree.X[:10]
    tree.insert_many([f"a{i}" for i in range(200, 300)], X[200:])  # a view holds X: copied, view still valid
    assert not np.shares_memory(view, tree.X)
    np.testing.assert_allclose(view, X[:10], atol=1e-7)
    np.testing.assert_allclose(tree.X[:300], X, atol=1e-7)
    for name in ("kid_table", "sums"):
        old = getattr(tree, name).shape[0]
        before = getattr(tree, name).copy()
        tree._grow(name, old + 1)
        grown = getattr(tree, name)
        np.testing.assert_array_equal(grown[:old], before)
        assert (grown[old:] == (-1 if name == "kid_table" else 0)).all() and grown.shape[0] > old
    tree.maintain()
    check_tree(tree, [f"a{i}" for i in range(300)])


def test_child_table_widens_for_a_wide_node_and_narrows_after_maintenance():
    rng = np.random.default_rng(13)
    tree = SemanticTree(16, frozen_calibrator(tau_new=0.99, m_max=8), b_max=4, seed=0)
    X = unit(rng.standard_normal((40, 16)))  # unrelated vectors: each opens a leaf under the root
    tree.insert_many([f"a{i}" for i in range(40)], X)
    assert len(tree.children[tree.root]) == 40
    tree._flush_kids()
    assert tree.kid_table.shape[1] >= 40 and tree.kid_table.dtype == np.int32
    tree.maintain()
    assert tree.kid_table.shape[1] == 2 * tree.b_max
    check_tree(tree, [f"a{i}" for i in range(40)])
    q = unit(rng.standard_normal((5, 16)))
    for i, (leaves, sims) in enumerate(tree.descend_many(q, 3)):  # the narrowed table descends right:
        frontier = list(tree.children[tree.root])  # reference over the children lists themselves
        while True:
            kept = sorted(frontier, key=lambda n: -float(tree.cent[n] @ q[i]))[:3]
            if all(tree.is_leaf[n] for n in kept):
                break
            frontier = [c for n in kept for c in ([n] if tree.is_leaf[n] else tree.children[n])]
        assert leaves == kept
        np.testing.assert_allclose(sims, [tree.cent[n] @ q[i] for n in kept], atol=1e-6)


# --- where the insertion beam starts -----------------------------------------------------------
def test_top_level_is_the_widest_level_within_top_width():
    rng = np.random.default_rng(12)
    centres = unit(rng.standard_normal((12, 16)))
    tree = SemanticTree(16, frozen_calibrator(tau_new=0.8, m_max=6), b_max=3, seed=0)
    for s in range(0, 240, 20):
        tree.insert_many([f"a{i}" for i in range(s, s + 20)], clustered(rng, centres[rng.integers(0, 12)], 20, 0.1))
        tree.maintain()
    live = [int(n) for n in np.flatnonzero(tree.alive[: tree.n_nodes]) if n != tree.root]
    depth = {n: len(tree.path(n)) - 1 for n in live}  # root's children: 1
    levels = [sorted(n for n in live if depth[n] == k or (depth[n] < k and tree.is_leaf[n]))
              for k in range(1, max(depth.values()) + 1)]
    assert len(levels) >= 3 and levels[-1] == tree.leaves().tolist()
    for width in (0, 3, len(levels[1]), len(levels[2]) - 1, 10**6):
        tree.top_width = width  # drops the cached level
        fits = [lv for lv in levels if len(lv) <= width]
        want = fits[-1] if fits else levels[0]
        assert sorted(tree.top_level().tolist()) == want
    tree.insert("new", unit(rng.standard_normal(16)))  # a structural change drops the cached level
    assert sorted(tree.top_level().tolist()) == tree.leaves().tolist()


def test_insertion_from_all_leaves_is_exact_and_a_narrow_beam_is_not():
    """Brute-force reference: when the top level holds every leaf, each AMU joins the leaf of
    highest cosine if that reaches tau_new, else opens a leaf. On many independent clusters a
    root-started beam of 1 misses such leaves (so this test can fail)."""
    rng = np.random.default_rng(13)
    centres = unit(rng.standard_normal((40, 24)))
    X = unit(centres[rng.permutation(np.repeat(np.arange(40), 12))] + 0.25 * rng.standard_normal((480, 24)) / 5)
    needless = {}
    for width in (10**6, 0):
        tree = SemanticTree(24, frozen_calibrator(tau_new=0.8, m_max=10), b_max=3, b_ins=1, seed=0, top_width=width)
        needless[width] = 0
        for i, x in enumerate(X):
            leaves = tree.leaves()
            sims = tree.cent[leaves] @ x if len(leaves) else np.zeros(0)
            before = tree.stats["new_leaves"]
            got = tree.insert(f"a{i}", x)
            if len(sims) and sims.max() >= 0.8:
                needless[width] += tree.stats["new_leaves"] > before
                if width:
                    assert got == leaves[int(np.argmax(sims))]
            elif width:
                assert tree.stats["new_leaves"] == before + 1
            if i % 24 == 23:
                tree.maintain()
    assert needless[10**6] == 0 and needless[0] > 10


def test_config_rejects_negative_top_width():
    with pytest.raises(ValueError, match="insert_top_width"):
        Config.from_dict({"insert_top_width": -1})
    assert SemanticTree.from_config(8, Config(insert_top_width=7)).top_width == 7
