"""BM25 over a fixed list of texts (bm25s tokenisation and scoring), with scores for every
document or for a candidate subset only (so hierarchical search never scores the corpus)."""
from __future__ import annotations

import numpy as np


def tokenize(texts: list[str]) -> list[list[str]]:
    """Lower-cased word tokens without English stopwords (bm25s's tokenizer)."""
    import bm25s

    return bm25s.tokenize(list(texts), stopwords="en", return_ids=False, show_progress=False)


class LexicalIndex:
    """BM25 (bm25s, Lucene variant, k1 1.5, b 0.75) over `texts`.

    Scores are kept as a doc x token sparse matrix, so `scores_for(rows, query)` costs
    O(len(rows) x doc length) and `scores_all(query)` O(postings of the query tokens).
    """

    def __init__(self, texts: list[str]):
        import bm25s
        from scipy import sparse

        self.n = len(texts)
        self.vocab: dict[str, int] = {}
        self._csc = self._csr = None
        tokens = bm25s.tokenize(list(texts), stopwords="en", show_progress=False)
        if self.n and tokens.vocab:  # bm25s cannot index a corpus without a single token
            retriever = bm25s.BM25()
            retriever.index(tokens, show_progress=False)
            self.vocab = dict(retriever.vocab_dict)
            s = retriever.scores
            shape = (int(s["num_docs"]), len(s["indptr"]) - 1)
            self._csc = sparse.csc_matrix((s["data"], s["indices"], s["indptr"]), shape=shape, dtype=np.float32)
            self._csr = self._csc.tocsr()

    def query_ids(self, query: str) -> np.ndarray:
        """Vocabulary ids of the query's tokens that occur in the corpus (repeats kept)."""
        return np.asarray([self.vocab[t] for t in tokenize([query])[0] if t in self.vocab and t], dtype=np.int64)

    def scores_all(self, query: str | np.ndarray) -> np.ndarray:
        """BM25 of every document: (n,) float32."""
        ids = self.query_ids(query) if isinstance(query, str) else query
        if self._csc is None or ids.size == 0:
            return np.zeros(self.n, np.float32)
        return np.asarray(self._csc[:, ids].sum(axis=1), dtype=np.float32).ravel()

    def scores_for(self, rows, query: str | np.ndarray) -> np.ndarray:
        """BM25 of the given document rows only: (len(rows),) float32."""
        ids = self.query_ids(query) if isinstance(query, str) else query
        rows = np.asarray(rows, dtype=np.int64)
        if self._csc is None or ids.size == 0 or rows.size == 0:
            return np.zeros(rows.size, np.float32)
        return np.asarray(self._csr[rows][:, ids].sum(axis=1), dtype=np.float32).ravel()


def minmax(scores: np.ndarray) -> np.ndarray:
    """Min-max normalise over the candidates being compared (all equal -> zeros): float32."""
    s = np.asarray(scores, dtype=np.float32)
    if s.size == 0:
        return s
    lo, hi = float(s.min()), float(s.max())
    return (s - lo) / (hi - lo) if hi > lo else np.zeros_like(s)
