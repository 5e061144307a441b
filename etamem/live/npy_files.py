"""Loading the derived files' `.npy` arrays: large ones memory-mapped, small ones read.

Each memory map holds a file descriptor for as long as it lives (Python's `mmap` keeps a
duplicate of the file's descriptor), so mapping every small array of every live space would run
a server with many small spaces out of descriptors (`ulimit -n`, often 1024). Arrays under
`MMAP_MIN_BYTES` are read into memory instead: they cost less than a page table entry's worth
of bookkeeping anyway.
"""
from __future__ import annotations

import os

import numpy as np

MMAP_MIN_BYTES = 1 << 20  # files smaller than this are read, not mapped


def load_npy(path: str | os.PathLike, mmap_mode: str | None = None) -> np.ndarray:
    """`np.load(path, mmap_mode)` for a file of at least MMAP_MIN_BYTES, else read whole
    (no pickles either way); an empty array is always read (it cannot be mapped)."""
    if mmap_mode is not None and os.path.getsize(path) >= MMAP_MIN_BYTES:
        try:
            return np.load(path, mmap_mode=mmap_mode, allow_pickle=False)
        except ValueError:  # an empty array cannot be mapped
            pass
    return np.load(path, allow_pickle=False)


__all__ = ["MMAP_MIN_BYTES", "load_npy"]
