"""The slot-keyed storage a `SpaceIndex` keeps beside the views: BM25 over node texts keyed by node
id (`NodeTexts`) and growable parallel arrays over unit slots (`Rows`)."""
from __future__ import annotations

import numpy as np

from etamem.retrieval.lexical import LexicalIndex


class NodeTexts:
    """BM25 over the texts of a view's nodes, keyed by node id: a node whose text changes gets
    a new slot (the old one is a tombstone); slots are compacted when half are dead."""

    def __init__(self, stemmer: str = "english") -> None:
        self.lex = LexicalIndex([], stemmer=stemmer)
        self.slot: dict = {}

    def drop(self, keys) -> None:
        slots = [self.slot.pop(k) for k in keys if k in self.slot]
        if slots:
            self.lex.remove(np.asarray(slots, np.int64))

    def set(self, keys: list, texts: list[str]) -> None:
        if not keys:
            return
        self.drop(keys)
        self.slot.update(zip(keys, self.lex.add(texts).tolist()))
        if self.lex.n > 1024 and self.lex.dead_share > 0.5:
            items = sorted(self.slot.items(), key=lambda kv: kv[1])
            self.lex.compact(np.asarray([s for _, s in items], np.int64))
            self.slot.clear()
            self.slot.update((k, i) for i, (k, _) in enumerate(items))


class Rows:
    """Growable parallel arrays over AMU slots (amortised O(1) append, like a vector)."""

    def __init__(self, **columns: tuple[tuple, type]) -> None:
        self.n = 0
        self.cols = {name: np.zeros((16,) + shape, dtype) for name, (shape, dtype) in columns.items()}

    def append(self, **values: np.ndarray) -> np.ndarray:
        m = len(next(iter(values.values())))
        cap = min(len(arr) for arr in self.cols.values())
        if self.n + m > cap:
            for name in self.cols:
                self._grow(name, max(self.n + m, cap + cap // 4, 16))
        for name, v in values.items():
            self.cols[name][self.n: self.n + m] = v
        self.n += m
        return np.arange(self.n - m, self.n, dtype=np.int64)

    def _grow(self, name: str, cap: int) -> None:
        """To `cap` rows (every column the same): in place when nothing else holds the array
        (realloc moves pages, no copy), else copied."""
        try:
            self.cols[name].resize((cap,) + self.cols[name].shape[1:])
        except ValueError:
            arr = self.cols[name]
            new = np.zeros((cap,) + arr.shape[1:], arr.dtype)
            new[: self.n] = arr[: self.n]
            self.cols[name] = new

    def adopt(self, **columns: np.ndarray) -> None:
        """Take these arrays (all of one length) as the rows, without copying."""
        self.cols = {name: np.asarray(columns[name], self.cols[name].dtype) for name in self.cols}
        self.n = len(self.cols["alive"])

    def keep(self, rows: np.ndarray) -> None:
        for name, arr in self.cols.items():
            self.cols[name] = np.ascontiguousarray(arr[rows])
        self.n = len(rows)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.cols[name]


__all__ = ["NodeTexts", "Rows"]
