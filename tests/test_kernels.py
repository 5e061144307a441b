import numpy as np
import pytest

from etamem.kernels import cosine_topk, max_normalise, resolve_backend, topk
from helpers import BACKENDS
from helpers import random_unit as _unit


def _brute(q, x, k):
    sims = q @ x.T
    idx = np.array([sorted(range(x.shape[0]), key=lambda j: (-sims[i, j], j))[:k] for i in range(q.shape[0])])
    return np.take_along_axis(sims, idx, axis=1), idx


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("n,k", [(50, 5), (7, 7), (7, 20), (300, 1)])
def test_cosine_topk_matches_brute_force(backend, n, k):
    rng = np.random.default_rng(n * 31 + k)
    q, x = _unit(rng, 4, 16), _unit(rng, n, 16)
    scores, idx = cosine_topk(q, x, k, backend=backend)
    ref_scores, ref_idx = _brute(q, x, min(k, n))
    np.testing.assert_allclose(scores, ref_scores, atol=1e-5)
    np.testing.assert_array_equal(idx, ref_idx)


@pytest.mark.parametrize("backend", BACKENDS)
def test_cosine_topk_unnormalised_and_ties(backend):
    x = np.array([[2.0, 0.0], [0.0, 3.0], [1.0, 0.0]], np.float32)
    scores, idx = cosine_topk(np.array([[5.0, 0.0]]), x, 2, normalised=False, backend=backend)
    np.testing.assert_allclose(scores, [[1.0, 1.0]])
    assert idx.tolist() == [[0, 2]]  # tie broken by lower index


@pytest.mark.parametrize("backend", BACKENDS)
def test_cosine_topk_ties_at_the_cut_keep_the_lowest_indices(backend):
    x = np.tile(np.array([[1.0, 0.0]], np.float32), (60, 1))
    x[30] = [0.0, 1.0]
    _, idx = cosine_topk(np.array([[1.0, 0.0]], np.float32), x, 3, backend=backend)
    assert idx.tolist() == [[0, 1, 2]]


def test_cosine_topk_empty():
    s, i = cosine_topk(np.ones((2, 3), np.float32), np.zeros((0, 3), np.float32), 5)
    assert s.shape == (2, 0) and i.shape == (2, 0)


def _scores(rng, shape, special: bool):
    """Scores with many ties (few distinct values); `special`: some -inf, NaN, -0.0 and 0.0 too."""
    s = rng.integers(0, 5, size=shape).astype(np.float32) / 4
    if special:
        flat = s.reshape(-1)
        picks = rng.choice(flat.size, size=min(flat.size, 6), replace=False)
        for p, v in zip(picks, [-np.inf, np.nan, -0.0, 0.0, -np.inf, np.nan]):
            flat[p] = v
    return s


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("special", [False, True])
@pytest.mark.parametrize("shape", [(1,), (9,), (40,), (500,), (3, 9), (4, 40), (5, 500), (0, 7)])
def test_topk_is_a_stable_argsort_of_minus_scores(backend, special, shape):
    rng = np.random.default_rng(sum(shape) * 7 + special)
    n = shape[-1]
    for trial in range(6):
        s = _scores(rng, shape, special)
        if trial % 2:
            s = s + rng.normal(0, 1e-3, size=shape).astype(np.float32)  # mostly distinct
        for k in sorted({0, 1, 2, 3, n // 10, n // 4, n // 2, n - 1, n, n + 5, -1}):
            ref = np.argsort(-s, axis=-1, kind="stable")[..., :max(k, 0)]
            got = topk(s, k, backend=backend)
            assert got.dtype == np.int64 and got.shape == ref.shape
            np.testing.assert_array_equal(got, ref, err_msg=f"k={k}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_topk_ties_at_the_cut_keep_the_lowest_indices(backend):
    s = np.array([0.5] * 50 + [0.9] + [0.5] * 50, np.float64)
    assert topk(s, 3, backend=backend).tolist() == [50, 0, 1]
    assert topk(np.array([1, 3, 3, 2]), 2, backend=backend).tolist() == [1, 2]  # ints too
    assert topk([0.1, 0.2], 5, backend=backend).tolist() == [1, 0]  # k > n: all of them
    assert topk(np.zeros(0), 3, backend=backend).shape == (0,)
    with pytest.raises(ValueError):
        topk(np.zeros((2, 2, 2)), 1, backend=backend)


def test_max_normalise():
    np.testing.assert_allclose(max_normalise(np.array([0.0, 2.0, 1.0])), [0.0, 1.0, 0.5])
    assert max_normalise(np.zeros(3)).tolist() == [0.0, 0.0, 0.0]


def test_resolve_backend():
    assert resolve_backend("auto", size=10) == "numpy"
    with pytest.raises(ValueError):
        resolve_backend("tpu")
