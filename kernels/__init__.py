"""Numeric hot paths of ETAMem, installed as `etamem.kernels`.

Pure functions over arrays (no I/O, no logging, no model loading). Each has a NumPy path
and a torch path (CUDA when present) chosen by `backend="auto"`.
"""
from .backend import resolve_backend
from .similarity import cosine_topk, max_normalise

__all__ = ["resolve_backend", "cosine_topk", "max_normalise"]
