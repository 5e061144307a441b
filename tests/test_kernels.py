import numpy as np
import pytest

from etamem.kernels import cosine_topk, max_normalise, resolve_backend
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


def test_cosine_topk_unnormalised_and_ties():
    x = np.array([[2.0, 0.0], [0.0, 3.0], [1.0, 0.0]], np.float32)
    scores, idx = cosine_topk(np.array([[5.0, 0.0]]), x, 2, normalised=False, backend="numpy")
    np.testing.assert_allclose(scores, [[1.0, 1.0]])
    assert idx.tolist() == [[0, 2]]  # tie broken by lower index


def test_cosine_topk_empty():
    s, i = cosine_topk(np.ones((2, 3), np.float32), np.zeros((0, 3), np.float32), 5)
    assert s.shape == (2, 0) and i.shape == (2, 0)


def test_max_normalise():
    np.testing.assert_allclose(max_normalise(np.array([0.0, 2.0, 1.0])), [0.0, 1.0, 0.5])
    assert max_normalise(np.zeros(3)).tolist() == [0.0, 0.0, 0.0]


def test_resolve_backend():
    assert resolve_backend("auto", size=10) == "numpy"
    with pytest.raises(ValueError):
        resolve_backend("tpu")
