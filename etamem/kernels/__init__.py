"""Numeric hot paths of ETAMem (`etamem.kernels`).

Pure functions over arrays (no I/O, no logging, no model loading). Each has a NumPy path
and a torch path (CUDA when present) chosen by `backend="auto"`.
"""
from etamem.kernels.backend import resolve_backend
from etamem.kernels.clustering import balanced_split, capacity_assign, spherical_kmeans
from etamem.kernels.ranking import topk
from etamem.kernels.similarity import cosine_topk, max_normalise
from etamem.kernels.stats import cohesion, cohesion_from_sum, ema, otsu_threshold, softmax_entropy
from etamem.kernels.tree import beam_descend

__all__ = [
    "resolve_backend", "cosine_topk", "max_normalise", "topk",
    "softmax_entropy", "otsu_threshold", "cohesion", "cohesion_from_sum", "ema",
    "spherical_kmeans", "capacity_assign", "balanced_split", "beam_descend",
]
