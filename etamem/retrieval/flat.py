"""Flat hybrid index over rows in slots (AMUs or raw turns): exact inner product + BM25, updated in place.

Score = (1 - beta) * cos + beta * BM25n, where BM25n is BM25 divided by the best BM25 score
of the query over all rows. Candidates are the union of the dense top `pool` and the BM25
top `pool`; each candidate gets both scores exactly. Used by the raw-turn fallback and as
the flat baselines the hierarchical retrieval is benchmarked against.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from etamem.kernels import max_normalise, topk
from etamem.retrieval.lexical import LexicalIndex
from etamem.retrieval.vector_index import VectorIndex


@dataclass(frozen=True)
class FlatResult:
    index: int  # slot (the row, while nothing was removed)
    score: float
    cosine: float
    bm25: float  # normalised, 0..1


class FlatHybridIndex:
    """Exact dense + BM25 over rows in slots, updated in place (vectors: (n, d) float32 unit rows).

    Dense: a `VectorIndex` keyed by slot (growable matrix, one product per query; FAISS's
    flat index reallocates its whole storage on every add: 4 ms per one-row add at 54k rows,
    measured), exact unless `exact_max` (then HNSW above that many rows: the dense pool is
    approximate, the candidates' scores stay exact); lexical: an incremental `LexicalIndex` with
    the same slots.
    """

    def __init__(self, vectors: np.ndarray, bm25_texts: list[str], *, dim: int | None = None,
                 stemmer: str = "english", exact_max: int | None = None):
        vectors = np.asarray(vectors, dtype=np.float32)
        self.dim = int(dim if dim is not None else vectors.shape[1])
        self._dense = VectorIndex(self.dim, exact_max=exact_max)
        self._bm25 = LexicalIndex([], stemmer=stemmer)
        if len(bm25_texts) or vectors.shape[0]:
            self.add(vectors, bm25_texts)

    @property
    def n(self) -> int:
        """Live rows."""
        return len(self._dense)

    def set_device(self, device: str, min_rows: int = 20_000) -> None:
        """Where the dense search runs (`VectorIndex.set_device`)."""
        self._dense.set_device(device, min_rows)

    def set_exact_max(self, exact_max: int | None) -> None:
        """Exact dense search up to `exact_max` rows (None: always); `VectorIndex.set_exact_max`."""
        self._dense.set_exact_max(exact_max)

    @property
    def dense(self):
        """The dense `VectorIndex` (read-only use)."""
        return self._dense

    @property
    def lexical(self) -> LexicalIndex:
        return self._bm25

    def with_dense(self, dense: VectorIndex) -> "FlatHybridIndex":
        """This index searched through another dense index over the same slots (a graph beside an
        exact one, say); the BM25 part is shared, not copied."""
        if dense.dim != self.dim or len(dense) != len(self._dense):
            raise ValueError("the dense index must hold the same number of rows of the same dimension")
        out = object.__new__(FlatHybridIndex)
        out.dim, out._dense, out._bm25 = self.dim, dense, self._bm25
        return out

    def add(self, vectors: np.ndarray, bm25_texts: list[str]) -> np.ndarray:
        """Append rows; returns their slots ((n,) int64)."""
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.shape != (len(bm25_texts), self.dim):
            raise ValueError(f"vectors: expected shape {(len(bm25_texts), self.dim)}, got {vectors.shape}")
        slots = self._bm25.add(list(bm25_texts))
        if len(slots):
            self._dense.upsert(slots.tolist(), vectors)
        return slots

    def remove(self, slots) -> None:
        slots = np.asarray(slots, np.int64)
        if slots.size:
            self._bm25.remove(slots)
            self._dense.remove(slots.tolist())

    def vectors(self, slots) -> np.ndarray:
        """(len(slots), d) float32 rows of live slots."""
        return self._dense.rows(list(slots))

    def bm25_for(self, slots, query: str | np.ndarray) -> np.ndarray:
        """Raw BM25 of the given slots only ((len(slots),) float32; `query`: text or vocabulary ids)."""
        return self._bm25.scores_for(slots, query)

    def bm25_scores(self, query_text: str) -> np.ndarray:
        """Raw BM25 score of every slot for the query (removed slots 0): (slots,) float32."""
        return self._bm25.scores_all(query_text)

    def search(self, query_vec: np.ndarray, query_text: str, k: int, *, beta: float = 0.1,
               pool: int = 200, allowed: np.ndarray | None = None) -> list[FlatResult]:
        """Top-k slots by (1 - beta) * cos + beta * BM25n; ties by slot. query_vec: (d,) float32 unit.
        `allowed`: a bool mask over slots (live ones only); then every allowed slot is scored
        exactly (no pool) and only they are returned."""
        n = self.n
        if not n or k <= 0:
            return []
        q = np.asarray(query_vec, np.float32).reshape(-1)
        bm25_norm = max_normalise(self.bm25_scores(query_text))
        if allowed is not None:
            cand = np.flatnonzero(np.asarray(allowed, bool))
        else:
            pool = min(max(pool, k), n)
            candidates = set(self._dense.search(q, pool)[1])
            if beta > 0:
                positive = np.flatnonzero(bm25_norm > 0)
                if positive.size > pool:
                    # argpartition, not kernels.topk: its pick among BM25 ties at the cut stays as measured
                    positive = np.argpartition(-bm25_norm, pool - 1)[:pool]
                candidates.update(int(i) for i in positive if bm25_norm[i] > 0)
            cand = np.fromiter(sorted(candidates), dtype=np.int64)
        if not len(cand):
            return []
        cos = self._dense.rows(cand.tolist()) @ q
        score = (1.0 - beta) * cos + beta * bm25_norm[cand]
        order = topk(score, k)  # cand ascending: ties by slot
        return [FlatResult(int(cand[o]), float(score[o]), float(cos[o]), float(bm25_norm[cand[o]]))
                for o in order]

    def save(self, directory) -> None:
        """BM25 arrays and the dense index into `directory`."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        self._bm25.save(d / "lex")
        self._dense.save(d / "dense")

    @classmethod
    def load(cls, directory, dim: int) -> "FlatHybridIndex":
        """The index `save` wrote (with the stemmer it was built with)."""
        d = Path(directory)
        self = cls(np.zeros((0, dim), np.float32), [], dim=dim, stemmer="none")
        self._bm25 = LexicalIndex.load(d / "lex")
        self._dense = VectorIndex.load(d / "dense")
        if self._dense.dim != dim or len(self._dense) != self._bm25.n_live:
            raise ValueError("saved dense and BM25 indexes do not match")
        return self
