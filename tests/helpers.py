"""Small shared helpers for the tests (importable because conftest puts tests/ on sys.path)."""
import numpy as np

# six facts of two speakers, one searchable word each (the store-backend and PostgreSQL pool tests)
FACTS = ["Ana adopted a grey cat named Miso last spring.",
         "Ben plays the violin in a small orchestra.",
         "Ana went hiking in the mountains near the lake.",
         "The bakery on Main Street sells wonderful sourdough bread.",
         "Ben starts a new job as a nurse at the hospital in June.",
         "The garden has tomatoes and basil growing everywhere now."]

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
