"""Derived arrays: large ones memory-mapped, small ones read, so that many small live spaces do
not hold a file descriptor per array (etamem.live.npy_files)."""
import os

import numpy as np

from etamem.live import npy_files
from etamem.live.npy_files import load_npy
from etamem.retrieval.lexical import LexicalIndex


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_small_arrays_are_read_and_large_ones_mapped(tmp_path):
    small, big, empty = tmp_path / "small.npy", tmp_path / "big.npy", tmp_path / "empty.npy"
    np.save(small, np.arange(10, dtype=np.float32))
    np.save(big, np.zeros(npy_files.MMAP_MIN_BYTES // 4 + 1, np.float32))
    np.save(empty, np.zeros(0, np.float32))
    assert not isinstance(load_npy(small, "r"), np.memmap) and load_npy(small, "r").tolist() == list(range(10))
    assert isinstance(load_npy(big, "r"), np.memmap) and not isinstance(load_npy(big), np.memmap)
    assert load_npy(empty, "r").shape == (0,)


def test_many_small_indexes_hold_no_descriptor_each(tmp_path):
    index = LexicalIndex(["the user moved to Milwaukee", "the user is vegan now"])
    index.save(tmp_path / "lex")
    before = open_descriptors()
    loaded = [LexicalIndex.load(tmp_path / "lex", mmap=True) for _ in range(50)]
    assert open_descriptors() - before < 5, "each small mapped array would keep a descriptor open"
    assert all(x.n == 2 for x in loaded)
