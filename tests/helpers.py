"""Small shared helpers for the tests (importable because conftest puts tests/ on sys.path)."""
import numpy as np

BACKENDS = ["numpy", "torch"]
try:
    import torch

    if torch.cuda.is_available():
        BACKENDS.append("torch-cuda")
except ImportError:  # pragma: no cover
    BACKENDS.remove("torch")


def unit(x):
    """Rows (or one vector) scaled to unit length, as float32."""
    x = np.asarray(x, np.float64)
    return (x / np.linalg.norm(x, axis=-1, keepdims=True)).astype(np.float32)


def random_unit(rng, n, d):
    """n random unit vectors of dimension d: (n, d) float32."""
    return unit(rng.standard_normal((n, d)))
