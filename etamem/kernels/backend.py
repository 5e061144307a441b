"""Backend selection shared by the kernels."""
from __future__ import annotations

BACKENDS = ("auto", "numpy", "torch", "torch-cuda")


def resolve_backend(backend: str = "auto", *, size: int = 0, cuda_min_size: int = 1_000_000) -> str:
    """Map `backend` to "numpy", "torch" (CPU) or "torch-cuda".

    "auto" picks torch on CUDA when a GPU is present and the work (`size` elements) is big
    enough to pay for the transfer, else NumPy. "torch" means torch on CPU.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}: expected one of {BACKENDS}")
    if backend != "auto":
        return backend
    if size >= cuda_min_size:
        try:
            import torch
        except ImportError:
            return "numpy"
        if torch.cuda.is_available():
            return "torch-cuda"
    return "numpy"
