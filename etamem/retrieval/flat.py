"""Flat hybrid index over a fixed set of rows (AMUs or raw turns): FAISS inner product + BM25.

Score = (1 - beta) * cos + beta * BM25n, where BM25n is BM25 divided by the best BM25 score
of the query over all rows. Candidates are the union of the FAISS top `pool` and the BM25
top `pool`; each candidate gets both scores exactly. Used by the raw-turn fallback and as
the flat baselines the hierarchical retrieval is benchmarked against.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..kernels import max_normalise
from .lexical import LexicalIndex


def import_faiss():
    """The faiss module, or an ImportError naming the extra to install."""
    try:
        import faiss
    except ImportError as exc:
        raise ImportError(
            "FAISS is required for search: pip install 'etamem[cpu]' (faiss-cpu) or 'etamem[gpu]' (faiss-gpu)"
        ) from exc
    return faiss


@dataclass(frozen=True)
class FlatResult:
    index: int  # row in the index
    score: float
    cosine: float
    bm25: float  # normalised, 0..1


class FlatHybridIndex:
    """Exact dense (FAISS `IndexFlatIP`) + BM25 (bm25s) over a fixed set of rows.

    vectors: (n, d) float32 unit rows; bm25_texts: n strings.
    """

    def __init__(self, vectors: np.ndarray, bm25_texts: list[str]):
        faiss = import_faiss()
        self.n = len(bm25_texts)
        if vectors.shape[0] != self.n:
            raise ValueError("vectors and bm25_texts must have the same length")
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self._dense = None
        if self.n:
            self._dense = faiss.IndexFlatIP(self.vectors.shape[1])
            self._dense.add(self.vectors)
        self._bm25 = LexicalIndex(bm25_texts)

    def bm25_scores(self, query_text: str) -> np.ndarray:
        """Raw BM25 score of every row for the query: (n,) float32."""
        return self._bm25.scores_all(query_text)

    def search(self, query_vec: np.ndarray, query_text: str, k: int, *, beta: float = 0.1,
               pool: int = 200) -> list[FlatResult]:
        """Top-k rows by (1 - beta) * cos + beta * BM25n. query_vec: (d,) float32 unit."""
        if not self.n or k <= 0:
            return []
        pool = min(max(pool, k), self.n)
        _, dense_idx = self._dense.search(np.asarray(query_vec, np.float32).reshape(1, -1), pool)
        bm25_norm = max_normalise(self.bm25_scores(query_text))
        candidates = set(int(i) for i in dense_idx[0] if i >= 0)
        if beta > 0:
            lexical = np.argpartition(-bm25_norm, pool - 1)[:pool] if pool < self.n else np.arange(self.n)
            candidates.update(int(i) for i in lexical if bm25_norm[i] > 0)
        cand = np.fromiter(sorted(candidates), dtype=np.int64)
        cos = self.vectors[cand] @ np.asarray(query_vec, np.float32)
        score = (1.0 - beta) * cos + beta * bm25_norm[cand]
        order = np.lexsort((cand, -score))[:k]
        return [FlatResult(int(cand[o]), float(score[o]), float(cos[o]), float(bm25_norm[cand[o]]))
                for o in order]
