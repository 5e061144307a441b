"""Kernels used by the views (stats + clustering), each against a brute-force reference."""
import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from skimage.filters import threshold_otsu

from etamem.kernels import (
    balanced_split,
    beam_descend,
    capacity_assign,
    cohesion,
    ema,
    otsu_threshold,
    softmax_entropy,
    spherical_kmeans,
)
from helpers import BACKENDS

ALL_BACKENDS = BACKENDS + ["auto"]


from helpers import random_unit as _unit  # noqa: E402


def _blobs(rng, sizes, d=16, spread=0.05):
    """Well-separated clusters of unit rows around orthogonal axes; returns (x, true labels)."""
    rows, truth = [], []
    for c, m in enumerate(sizes):
        centre = np.zeros(d, np.float32)
        centre[c] = 1.0
        pts = centre + spread * rng.standard_normal((m, d)).astype(np.float32)
        rows.append(pts / np.linalg.norm(pts, axis=1, keepdims=True))
        truth += [c] * m
    order = rng.permutation(sum(sizes))
    return np.concatenate(rows)[order], np.asarray(truth)[order]


def _same_partition(a, b):
    """True when label vectors a and b describe the same partition (up to permutation)."""
    pairs = set(zip(a.tolist(), b.tolist()))
    return len(pairs) == len(set(a.tolist())) == len(set(b.tolist()))


# --- softmax_entropy --------------------------------------------------------------------

def _entropy_ref(scores, t):
    z = [s / t for s in scores]
    m = max(z)
    e = [math.exp(v - m) for v in z]
    tot = sum(e)
    h = 0.0
    for v in e:
        p = v / tot
        if p > 0:
            h -= p * math.log(p)
    return h / math.log(len(scores))


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("n,t", [(2, 0.05), (5, 0.05), (40, 0.05), (40, 1.0), (300, 0.2)])
def test_softmax_entropy_matches_formula(backend, n, t):
    s = np.random.default_rng(n).uniform(-1, 1, n)
    assert softmax_entropy(s, t, backend=backend) == pytest.approx(_entropy_ref(list(s), t), abs=1e-9)


@pytest.mark.parametrize("backend", BACKENDS)
def test_softmax_entropy_extremes(backend):
    peaked = np.array([1.0, 0.0, 0.0, 0.0, 0.0])
    assert softmax_entropy(peaked, 0.05, backend=backend) < 1e-6
    assert softmax_entropy(np.full(7, 0.3), 0.05, backend=backend) == pytest.approx(1.0, abs=1e-12)
    assert softmax_entropy(np.array([0.9]), backend=backend) == 0.0
    assert softmax_entropy(np.array([]), backend=backend) == 0.0
    # huge scores / tiny temperature stay finite (max subtracted)
    assert softmax_entropy(np.array([1e6, 1e6 - 1]), 1e-3, backend=backend) == pytest.approx(0.0, abs=1e-9)


def test_softmax_entropy_temperature_scaling():
    s = np.array([0.9, 0.5, 0.4, 0.1])
    hs = [softmax_entropy(s, t) for t in (0.01, 0.05, 0.2, 1.0, 10.0)]
    assert all(a < b for a, b in zip(hs, hs[1:]))  # hotter -> flatter
    # only s / T matters
    assert softmax_entropy(s, 0.1) == pytest.approx(softmax_entropy(2 * s, 0.2), abs=1e-12)
    with pytest.raises(ValueError):
        softmax_entropy(s, 0.0)


# --- otsu_threshold ---------------------------------------------------------------------

@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("seed", range(6))
def test_otsu_matches_skimage_random(backend, seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 3000))
    kind = seed % 3
    if kind == 0:
        v = rng.uniform(-1, 1, n)
    elif kind == 1:
        v = np.concatenate([rng.normal(0.1, 0.05, n), rng.normal(0.6, 0.1, n // 3 + 1)])
    else:
        v = rng.exponential(2.0, n).astype(np.float32)
    assert otsu_threshold(v, backend=backend) == pytest.approx(float(threshold_otsu(v, nbins=256)), abs=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_otsu_bimodal_constant_integer_empty(backend):
    rng = np.random.default_rng(7)
    v = np.concatenate([rng.normal(0.2, 0.1, 500), rng.normal(0.8, 0.1, 500)])
    t = otsu_threshold(v, backend=backend)
    assert 0.4 < t < 0.6
    assert t == pytest.approx(float(threshold_otsu(v, nbins=256)), abs=1e-6)
    # modes that do not overlap: the variance is flat over the gap and, like skimage, the
    # first bin of the gap wins (just above the low mode), still separating the two classes
    w = np.concatenate([rng.normal(0.2, 0.04, 500), rng.normal(0.8, 0.04, 500)])
    tw = otsu_threshold(w, backend=backend)
    assert w[w < 0.5].max() <= tw < w[w > 0.5].min()
    assert tw == pytest.approx(float(threshold_otsu(w, nbins=256)), abs=1e-6)
    assert otsu_threshold(np.full(9, 0.37), backend=backend) == pytest.approx(0.37)
    ints = rng.integers(-20, 60, 400)  # skimage bins integers one value per bin
    assert otsu_threshold(ints, backend=backend) == float(threshold_otsu(ints))
    assert otsu_threshold(v, nbins=32, backend=backend) == pytest.approx(
        float(threshold_otsu(v, nbins=32)), abs=1e-6)
    with pytest.raises(ValueError):
        otsu_threshold(np.array([]), backend=backend)
    with pytest.raises(ValueError):
        otsu_threshold(np.array([0.1, np.nan, 0.5]), backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_otsu_histogram_bins_like_numpy_on_bin_edges(backend, dtype):
    """Values on and one ulp either side of every bin edge: the +-1 corrections matter."""
    from etamem.kernels.stats import _histogram

    rng = np.random.default_rng(3)
    for _ in range(5):
        base = np.sort(rng.uniform(-3, 3, 2)).astype(dtype)
        e = np.histogram_bin_edges(base, 256)
        v = np.concatenate([base, e, np.nextafter(e, dtype(-np.inf)), np.nextafter(e, dtype(np.inf))])
        v = v[(v >= base[0]) & (v <= base[1])].astype(dtype)
        counts, centers = _histogram(v, 256, backend)
        ref_counts, ref_centers = np.histogram(v, bins=256)
        np.testing.assert_array_equal(counts, ref_counts)
        np.testing.assert_array_equal(centers, (ref_centers[:-1] + ref_centers[1:]) / 2.0)
        assert otsu_threshold(v, backend=backend) == float(threshold_otsu(v, nbins=256))


_float_arrays = st.one_of(
    arrays(np.float64, st.integers(2, 500),
           elements=st.floats(-1e3, 1e3, allow_nan=False, allow_subnormal=False)),
    arrays(np.float32, st.integers(2, 500),
           elements=st.floats(-1.0, 1.0, allow_nan=False, allow_subnormal=False, width=32)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(v=_float_arrays)
def test_otsu_matches_skimage_hypothesis(v):
    try:
        ref = float(threshold_otsu(v, nbins=256))
    except Exception:  # skimage itself refuses (e.g. range too small for 256 bins)
        return
    for backend in BACKENDS:
        assert otsu_threshold(v, backend=backend) == pytest.approx(ref, abs=1e-6, rel=1e-6), backend


# --- cohesion ---------------------------------------------------------------------------

def _cohesion_ref(x):
    n = x.shape[0]
    tot = 0.0
    for i in range(n):
        for j in range(n):
            if i != j:
                xi, xj = x[i].astype(np.float64), x[j].astype(np.float64)
                tot += float(xi @ xj) / (np.linalg.norm(xi) * np.linalg.norm(xj))
    return tot / (n * (n - 1))


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("n", [2, 3, 10, 57])
def test_cohesion_matches_brute_force(backend, n):
    rng = np.random.default_rng(n)
    x = _unit(rng, n, 24)
    x[: n // 2] += 0.8 * x[0]  # some structure so the mean is not ~0
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    assert cohesion(x, backend=backend) == pytest.approx(_cohesion_ref(x), abs=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
def test_cohesion_small_and_identical(backend):
    assert cohesion(_unit(np.random.default_rng(0), 1, 8), backend=backend) == 1.0
    assert cohesion(np.zeros((0, 8), np.float32), backend=backend) == 1.0
    same = np.tile(_unit(np.random.default_rng(1), 1, 8), (5, 1))
    assert cohesion(same, backend=backend) == pytest.approx(1.0, abs=1e-6)
    opposite = np.array([[1.0, 0.0], [-1.0, 0.0]], np.float32)
    assert cohesion(opposite, backend=backend) == pytest.approx(-1.0)


# --- ema --------------------------------------------------------------------------------

def test_ema_rule_and_validation():
    assert ema(0.5, 0.9, 0.3) == pytest.approx(0.7 * 0.5 + 0.3 * 0.9)
    assert isinstance(ema(0.5, 0.9, 0.3), float)
    assert ema(0.5, 0.9, 0.0) == 0.5 and ema(0.5, 0.9, 1.0) == 0.9
    out = ema(np.array([0.0, 1.0]), np.array([1.0, 1.0]), 0.25)
    assert isinstance(out, np.ndarray)
    np.testing.assert_allclose(out, [0.25, 1.0])
    for bad in (-0.1, 1.1, float("nan")):
        with pytest.raises(ValueError):
            ema(0.5, 0.9, bad)


# --- spherical_kmeans -------------------------------------------------------------------

def _assert_fixed_point(x, labels, cents):
    k = cents.shape[0]
    assert labels.dtype == np.int64 and cents.dtype == np.float32
    assert sorted(set(labels.tolist())) == list(range(k))  # contiguous, no empty cluster
    np.testing.assert_allclose(np.linalg.norm(cents, axis=1), 1.0, atol=1e-5)
    for c in range(k):  # each centroid is the normalised mean of its rows
        m = x[labels == c].astype(np.float64).sum(axis=0)
        np.testing.assert_allclose(cents[c], m / np.linalg.norm(m), atol=1e-5)
    for i in range(x.shape[0]):  # each row sits with its max-dot centroid
        dots = [float(x[i] @ cents[c]) for c in range(k)]
        assert dots[labels[i]] >= max(dots) - 1e-6


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_spherical_kmeans_recovers_clusters(backend, seed):
    x, truth = _blobs(np.random.default_rng(100 + seed), [15, 9, 20])
    labels, cents = spherical_kmeans(x, 3, seed=seed, backend=backend)
    assert cents.shape == (3, 16)
    assert _same_partition(labels, truth)
    _assert_fixed_point(x, labels, cents)


@pytest.mark.parametrize("backend", BACKENDS)
def test_spherical_kmeans_fixed_point_random(backend):
    x = _unit(np.random.default_rng(5), 80, 8)
    labels, cents = spherical_kmeans(x, 6, seed=3, n_iter=200, backend=backend)
    _assert_fixed_point(x, labels, cents)


def test_spherical_kmeans_deterministic_and_backends_agree():
    x, _ = _blobs(np.random.default_rng(9), [12, 12, 12, 12], spread=0.1)
    a = spherical_kmeans(x, 4, seed=11, backend="numpy")
    b = spherical_kmeans(x, 4, seed=11, backend="numpy")
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    for backend in BACKENDS[1:]:
        lt, ct = spherical_kmeans(x, 4, seed=11, backend=backend)
        np.testing.assert_array_equal(lt, a[0])
        np.testing.assert_allclose(ct, a[1], atol=1e-5)


def test_spherical_kmeans_clipping_and_duplicates():
    x = _unit(np.random.default_rng(2), 4, 8)
    labels, cents = spherical_kmeans(x, 10)
    assert cents.shape == (4, 8) and sorted(labels.tolist()) == [0, 1, 2, 3]
    dup = np.tile(x[:1], (6, 1))  # identical rows: extra clusters end empty and are dropped
    labels, cents = spherical_kmeans(dup, 3)
    assert labels.tolist() == [0] * 6 and cents.shape == (1, 8)
    labels, cents = spherical_kmeans(np.zeros((0, 8), np.float32), 3)
    assert labels.shape == (0,) and cents.shape == (0, 8)


# --- capacity_assign --------------------------------------------------------------------

def _greedy_ref(s, cap):
    n, k = s.shape
    pairs = sorted(((float(s[i, j]), i, j) for i in range(n) for j in range(k)),
                   key=lambda p: (-p[0], p[1], p[2]))
    labels, load = [None] * n, [0] * k
    for _, i, j in pairs:
        if labels[i] is None and load[j] < cap:
            labels[i] = j
            load[j] += 1
    return labels


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("seed", range(8))
def test_capacity_assign_matches_greedy(backend, seed):
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(1, 25)), int(rng.integers(1, 6))
    cap = math.ceil(n / k) + int(rng.integers(0, 3))
    s = rng.uniform(-1, 1, (n, k))
    if seed % 2:
        s = np.round(s, 1)  # plenty of ties
    labels = capacity_assign(s, cap, backend=backend)
    assert labels.dtype == np.int64 and labels.shape == (n,)
    assert labels.min() >= 0 and np.bincount(labels, minlength=k).max() <= cap
    assert labels.tolist() == _greedy_ref(s, cap)


def test_capacity_assign_ties_and_errors():
    s = np.ones((3, 2))
    assert capacity_assign(s, 2).tolist() == [0, 0, 1]  # lower row, then lower cluster
    assert capacity_assign(np.zeros((0, 2)), 1).shape == (0,)
    with pytest.raises(ValueError):
        capacity_assign(np.ones((5, 2)), 2)
    with pytest.raises(ValueError):
        capacity_assign(np.ones((1, 2)), 0)


# --- balanced_split ---------------------------------------------------------------------

@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("n,cap", [(30, 7), (13, 12), (50, 5), (9, 1)])
def test_balanced_split_capacity_and_contiguity(backend, n, cap):
    x = _unit(np.random.default_rng(n * cap), n, 12)
    labels = balanced_split(x, cap, backend=backend)
    counts = np.bincount(labels)
    assert labels.shape == (n,) and labels.dtype == np.int64
    assert counts.max() <= cap and counts.min() >= 1  # contiguous 0..g-1, none empty
    assert len(counts) >= min(n, max(2, math.ceil(n / cap)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_balanced_split_two_obvious_clusters(backend):
    x, truth = _blobs(np.random.default_rng(4), [6, 6])
    labels = balanced_split(x, 6, backend=backend)
    assert _same_partition(labels, truth) and sorted(np.bincount(labels).tolist()) == [6, 6]


def test_balanced_split_duplicates_still_respect_capacity():
    x = np.tile(_unit(np.random.default_rng(3), 1, 8), (20, 1))  # k-means collapses to 1
    labels = balanced_split(x, 6)
    assert np.bincount(labels).max() <= 6 and len(set(labels.tolist())) == 4
    assert balanced_split(x[:1], 6).tolist() == [0]
    with pytest.raises(ValueError):
        balanced_split(x, 0)


def test_exports():
    import etamem.kernels as k

    for name in ("softmax_entropy", "otsu_threshold", "cohesion", "ema",
                 "spherical_kmeans", "capacity_assign", "balanced_split", "topk"):
        assert name in k.__all__ and callable(getattr(k, name))
    assert list(itertools.islice(k.__all__, 3)) == ["resolve_backend", "cosine_topk", "max_normalise"]


@pytest.mark.parametrize("n", [1, 2, 5, 40])
def test_cohesion_from_sum_matches_brute_force(n):
    from etamem.kernels import cohesion_from_sum

    rng = np.random.default_rng(n)
    x = rng.standard_normal((n, 12))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    if n < 2:
        assert cohesion_from_sum(x.sum(axis=0), n) == 1.0
        return
    brute = np.mean([x[i] @ x[j] for i in range(n) for j in range(n) if i != j])
    assert cohesion_from_sum(x.sum(axis=0), n) == pytest.approx(brute, abs=1e-9)


# --- beam_descend ----------------------------------------------------------------------------
def _random_tree(rng, n_leaves, fanout, d=12):
    """A random tree as (centroids, child_table, start): leaves get random unit vectors, inner
    nodes the normalised mean of their children; fan-out varies between 1 and `fanout`."""
    cent = list(_unit(rng, n_leaves, d))
    kids: list[list[int]] = [[i] for i in range(n_leaves)]  # a leaf expands to itself
    level = list(range(n_leaves))
    while len(level) > fanout:
        nxt = []
        i = 0
        while i < len(level):
            k = int(rng.integers(1, fanout + 1))
            group = level[i:i + k]
            v = np.sum([cent[g] for g in group], axis=0)
            cent.append((v / np.linalg.norm(v)).astype(np.float32))
            kids.append(group)
            nxt.append(len(cent) - 1)
            i += k
        level = nxt
    width = max(map(len, kids))
    table = np.full((len(kids), width), -1, np.int64)
    for n, k in enumerate(kids):
        table[n, :len(k)] = k
    return np.stack(cent), table, np.asarray(level, np.int64)


def _descend_ref(cent, table, start, x, beam):
    """Plain per-query beam search (lists and sorted()), as DESIGN §5 states it."""
    frontier = [int(n) for n in start]
    while True:
        scored = sorted(((float(cent[n] @ x), n) for n in frontier), key=lambda t: (-t[0], t[1]))[:beam]
        kept = [n for _, n in scored]
        if all(table[n, 0] == n for n in kept):
            return kept, [s for s, _ in scored]
        frontier = [int(c) for n in kept for c in table[n] if c >= 0]


@pytest.mark.parametrize("backend", ALL_BACKENDS)
@pytest.mark.parametrize("n_leaves,fanout,beam", [(1, 3, 3), (5, 8, 3), (200, 4, 3), (300, 8, 1), (120, 3, 5)])
def test_beam_descend_matches_reference(backend, n_leaves, fanout, beam):
    rng = np.random.default_rng(n_leaves * 7 + beam)
    cent, table, start = _random_tree(rng, n_leaves, fanout)
    q = _unit(rng, 30, cent.shape[1])
    nodes, scores = beam_descend(cent, table, start, q, beam, backend=backend)
    assert nodes.shape == scores.shape == (30, beam)
    for i in range(30):
        ref_nodes, ref_scores = _descend_ref(cent, table, start, q[i], beam)
        got = nodes[i][nodes[i] >= 0]
        assert got.tolist() == ref_nodes
        np.testing.assert_allclose(scores[i][: len(got)], ref_scores, atol=1e-5)
        assert (scores[i][len(got):] == -np.inf).all() and (nodes[i][len(got):] == -1).all()
        assert all(table[n, 0] == n for n in got)  # leaves only


@pytest.mark.parametrize("backend", ALL_BACKENDS)
def test_beam_descend_from_a_wide_start_matches_reference(backend):
    """A deeper, wider first frontier (as `SemanticTree.top_level` passes), with leaves
    mixed in, scored in one product: same result as the per-query reference."""
    rng = np.random.default_rng(11)
    cent, table, start = _random_tree(rng, 400, 4)
    wide = [int(c) for n in start for c in table[n] if c >= 0]
    wide = [int(c) for n in wide for c in table[n] if c >= 0]
    wide = sorted(set(wide[: len(wide) // 2] + list(range(0, 400, 37))))  # a level's half and some leaves
    q = _unit(rng, 25, cent.shape[1])
    for beam in (1, 3, 6):
        nodes, scores = beam_descend(cent, table, np.asarray(wide), q, beam, backend=backend)
        for i in range(25):
            ref_nodes, ref_scores = _descend_ref(cent, table, wide, q[i], beam)
            got = nodes[i][nodes[i] >= 0]
            assert got.tolist() == ref_nodes
            np.testing.assert_allclose(scores[i][: len(got)], ref_scores, atol=1e-5)
    # every leaf as the start: an exact nearest-leaf search
    leaves = np.arange(400)
    nodes, scores = beam_descend(cent, table, leaves, q, 1, backend=backend)
    np.testing.assert_array_equal(nodes[:, 0], np.argmax(q @ cent[:400].T, axis=1))


def test_beam_descend_edge_cases():
    rng = np.random.default_rng(0)
    cent, table, start = _random_tree(rng, 10, 3)
    nodes, scores = beam_descend(cent, table, np.zeros(0, np.int64), _unit(rng, 2, 12), 3)
    assert (nodes == -1).all() and np.isneginf(scores).all()
    nodes, _ = beam_descend(cent, table, start, np.zeros((0, 12), np.float32), 3)
    assert nodes.shape == (0, 3)
    # an inner node without children is a dead end, not a result
    table2 = table.copy()
    table2[start[0]] = -1
    nodes, _ = beam_descend(cent, table2, start[:1], _unit(rng, 4, 12), 3)
    assert (nodes == -1).all()
    with pytest.raises(ValueError, match="beam"):
        beam_descend(cent, table, start, _unit(rng, 1, 12), 0)
    with pytest.raises(ValueError, match="integers"):
        beam_descend(cent, table.astype(np.float32), start, _unit(rng, 1, 12), 3)
    q = _unit(rng, 6, 12)  # an int32 table (as the trees keep it) gives the same result
    narrow = beam_descend(cent, table.astype(np.int32), start, q, 3)
    for got, want in zip(narrow, beam_descend(cent, table, start, q, 3)):
        np.testing.assert_array_equal(got, want)
