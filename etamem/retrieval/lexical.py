"""Incremental BM25 (bm25s tokenisation and Lucene scoring, k1 1.5, b 0.75) over documents held in
integer slots: adds and tombstone removals cost work proportional to the batch, and scores always
equal those of a bm25s index built from scratch over the live documents (with the same stemmer).
Scores for every document or for a candidate subset only (so hierarchical search never scores the
corpus). Tokens are stemmed with the Snowball English stemmer (PyStemmer, as bm25s does) unless
the index is built with `stemmer="none"`; the stemmer is saved with the index."""
from __future__ import annotations

import json
import math
import os
import threading
from array import array
from collections import Counter

import numpy as np

from etamem.install_hints import install_hint
from etamem.live.npy_files import load_npy

FORMAT = 2  # 2: the stemmer is saved with the index
STEMMERS = ("english", "none")
K1, B = 1.5, 0.75
_FILES = ("doc_ptr", "doc_tok", "doc_tf", "doc_len", "alive", "df", "post_ptr", "post_slot", "post_tf")


def _stemmer(stemmer: str):
    """PyStemmer's Snowball stemmer object for `stemmer` ("english"), or None for "none"."""
    if stemmer not in STEMMERS:
        raise ValueError(f"stemmer: expected one of {', '.join(STEMMERS)}; got {stemmer!r}")
    if stemmer == "none":
        return None
    try:
        import Stemmer
    except ImportError as exc:  # pragma: no cover
        raise ImportError(f"stemmed BM25 needs PyStemmer: {install_hint()}; or set bm25_stemmer='none'") from exc
    stem = Stemmer.Stemmer(stemmer)
    # no cache of stemmed words: one shared by every space answers a word another space used
    # faster, a timing oracle across tenants (and stemming a word costs about a microsecond)
    stem.maxCacheSize = 0
    return stem


def tokenize(texts: list[str], stemmer: str = "english") -> list[list[str]]:
    """Lower-cased word tokens without English stopwords, stemmed (bm25s's tokenizer)."""
    import bm25s

    return bm25s.tokenize(list(texts), stopwords="en", stemmer=_stemmer(stemmer), return_ids=False,
                          show_progress=False)


_SPLIT: dict = {}


def splitter(stemmer: str = "english"):
    """text -> tokens, exactly `tokenize([text], stemmer)[0]` (bm25s's default pattern, English
    stopwords, then the stemmer) without bm25s's per-call set-up (~50 µs), for the per-write and
    per-query paths."""
    split = _SPLIT.get(stemmer)
    if split is None:
        import inspect
        import re

        import bm25s
        from bm25s.stopwords import STOPWORDS_EN

        findall = re.compile(inspect.signature(bm25s.tokenize).parameters["token_pattern"].default).findall
        stop = frozenset(STOPWORDS_EN)
        if _stemmer(stemmer) is None:
            split = lambda text: [w for w in findall(text.lower()) if w not in stop]  # noqa: E731
        else:
            local = threading.local()  # a PyStemmer object must not be used by two threads at once

            def split(text: str) -> list[str]:
                stem_words = getattr(local, "stem_words", None)
                if stem_words is None:
                    stem_words = local.stem_words = _stemmer(stemmer).stemWords
                return stem_words([w for w in findall(text.lower()) if w not in stop])
        _SPLIT[stemmer] = split
    return split


class _Vec:
    """Growable 1-D array (capacity grows by 1.5x, copy-on-grow, so a read-only mmap base is fine)."""

    __slots__ = ("data", "size")

    def __init__(self, data: np.ndarray):
        self.data, self.size = data, len(data)

    @property
    def view(self) -> np.ndarray:
        return self.data[: self.size]

    def extend(self, values) -> None:
        end = self.size + len(values)
        if end > len(self.data):
            grown = np.empty(max(end, int(len(self.data) * 1.5) + 8), self.data.dtype)
            grown[: self.size] = self.data[: self.size]
            self.data = grown
        self.data[self.size : end] = values
        self.size = end


def _ranges(start: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Concatenation of arange(start[i], start[i] + lens[i]) for int64 inputs: (lens.sum(),) int64."""
    ends = np.cumsum(lens)
    return np.arange(ends[-1] if lens.size else 0) + np.repeat(start + lens - ends, lens)


class LexicalIndex:
    """Incremental BM25 over document slots (a slot is never reused until `compact`).

    Forward index: per slot its distinct token ids and term frequencies (CSR `doc_ptr`/`doc_tok`/
    `doc_tf`), length and liveness; inverted index: per token a base CSC of (slot, tf) postings
    (rebuilt at construction, `compact` and `save`) plus growable per-token postings of later adds.
    Live document frequencies, live count and live total length are counters kept up to date.
    """

    def __init__(self, texts: list[str] = (), *, stemmer: str = "english"):
        self.stemmer = stemmer
        self._split = splitter(stemmer)  # validates the stemmer
        self.vocab: dict[str, int] = {}
        self._ptr = _Vec(np.zeros(1, np.int64))
        self._tok, self._tf, self._len = (_Vec(np.zeros(0, np.int32)) for _ in range(3))
        self._alive = _Vec(np.zeros(0, bool))
        self._df = _Vec(np.zeros(0, np.int64))
        self._n_live = self._total_len = 0
        self._post = (np.zeros(1, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int32))
        self._extra: dict[int, array] = {}  # token -> postings added since the CSC, slot << 32 | tf
        if len(texts):
            self._append(texts)
            self._rebuild_postings()

    # --- sizes -------------------------------------------------------------------------------
    @property
    def n(self) -> int:
        """Number of slots, dead included."""
        return self._alive.size

    @property
    def n_live(self) -> int:
        return self._n_live

    @property
    def alive(self) -> np.ndarray:
        """(n,) bool, True for live slots (read-only view)."""
        v = self._alive.view.view()
        v.flags.writeable = False
        return v

    @property
    def dead_share(self) -> float:
        return 1.0 - self._n_live / self.n if self.n else 0.0

    # --- writes ------------------------------------------------------------------------------
    def _append(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Tokenise and append to the forward index and counters: (slot, tok, tf) int64 of the new
        postings, grouped by document."""
        split, vocab, n0 = self._split, self.vocab, self.n
        tok, tf, nu, lens = [], [], [], []  # distinct token ids and their tf, per-doc counts, lengths
        for words in [split(text) for text in texts]:  # tokenise all before touching the vocabulary
            counts = Counter([vocab.setdefault(w, len(vocab)) for w in words])
            tok += counts.keys()
            tf += counts.values()
            nu.append(len(counts))
            lens.append(len(words))
        tok_a, tf_a, nu_a = np.array(tok, np.int64), np.array(tf, np.int64), np.array(nu, np.int64)
        self._ptr.extend(self._ptr.data[n0] + np.cumsum(nu_a))
        self._tok.extend(tok_a)
        self._tf.extend(tf_a)
        self._len.extend(lens)
        self._alive.extend(np.ones(len(lens), bool))
        self._df.extend(np.zeros(len(vocab) - self._df.size, np.int64))
        np.add.at(self._df.data, tok_a, 1)
        self._n_live += len(lens)
        self._total_len += sum(lens)
        return np.repeat(np.arange(n0, n0 + len(lens), dtype=np.int64), nu_a), tok_a, tf_a

    def add(self, texts: list[str]) -> np.ndarray:
        """Append documents: their slots, (len(texts),) int64. O(tokens of the batch)."""
        n0 = self.n
        slot, tok, tf = self._append(texts)
        extra = self._extra
        for t, p in zip(tok.tolist(), ((slot << 32) | tf).tolist()):  # postings packed slot << 32 | tf
            a = extra.get(t)
            if a is None:
                extra[t] = array("q", (p,))
            else:
                a.append(p)
        return np.arange(n0, self.n, dtype=np.int64)

    def remove(self, slots) -> None:
        """Tombstone slots (dead ones are skipped): they leave N, df and avgdl and score 0.
        O(tokens of the removed documents)."""
        slots = np.unique(np.asarray(slots, dtype=np.int64))
        if slots.size and (slots[0] < 0 or slots[-1] >= self.n):
            raise IndexError("slot out of range")
        slots = slots[self._alive.data[slots]]
        if not slots.size:
            return
        ptr = self._ptr.data
        np.subtract.at(self._df.data, self._tok.data[_ranges(ptr[slots], ptr[slots + 1] - ptr[slots])], 1)
        self._alive.data[slots] = False
        self._n_live -= slots.size
        self._total_len -= int(self._len.data[slots].sum())

    def compact(self, keep: np.ndarray) -> None:
        """Keep exactly these live slots, in this order, renumbered 0..len(keep)-1 (live slots left out
        are dropped too; counters are recounted). O(live size)."""
        keep = np.asarray(keep, dtype=np.int64).reshape(-1)
        if keep.size and (keep.min() < 0 or keep.max() >= self.n or not self._alive.data[keep].all()):
            raise ValueError("compact: keep must name live slots")
        if np.unique(keep).size != keep.size:
            raise ValueError("compact: keep has repeats")
        ptr = self._ptr.view
        lens = ptr[keep + 1] - ptr[keep]
        pos = _ranges(ptr[keep], lens)
        self._tok = _Vec(self._tok.data[pos])
        self._tf = _Vec(self._tf.data[pos])
        self._ptr = _Vec(np.r_[0, np.cumsum(lens)].astype(np.int64))
        self._len = _Vec(self._len.data[keep])
        self._alive = _Vec(np.ones(keep.size, bool))
        self._df = _Vec(np.bincount(self._tok.view, minlength=len(self.vocab)).astype(np.int64))
        self._n_live, self._total_len = int(keep.size), int(self._len.view.sum())
        self._rebuild_postings()

    def _rebuild_postings(self) -> None:
        """Inverted index of the live slots as one CSC (token -> slots, tf); drops the growable part."""
        ptr, alive = self._ptr.view, self._alive.view
        lens = ptr[1:] - ptr[:-1]
        slot = np.repeat(np.arange(self.n, dtype=np.int32), lens)
        live = np.repeat(alive, lens)
        tok, tf, slot = self._tok.view[live], self._tf.view[live], slot[live]
        order = np.argsort(tok, kind="stable")
        counts = np.bincount(tok, minlength=len(self.vocab))
        self._post = (np.r_[0, np.cumsum(counts)].astype(np.int64), slot[order], tf[order].astype(np.int32))
        self._extra = {}

    # --- scores ------------------------------------------------------------------------------
    def query_ids(self, query: str) -> np.ndarray:
        """Vocabulary ids of the query's tokens that occur in the vocabulary (repeats kept): int64."""
        vocab = self.vocab
        return np.array([vocab[w] for w in self._split(query) if w in vocab], dtype=np.int64)

    def _weights(self, ids) -> tuple[np.ndarray, np.ndarray, float]:
        """Distinct sorted query ids (int64), count x Lucene idf of each (float64), live avgdl."""
        counts = Counter(np.asarray(ids, dtype=np.int64).ravel().tolist())
        qu = sorted(counts)
        n, df = self._n_live, self._df.view[qu].tolist()
        idf = [math.log1p((n - d + 0.5) / (d + 0.5)) * counts[t] for t, d in zip(qu, df)]
        return np.array(qu, np.int64), np.array(idf), self._total_len / n

    def ceiling(self, query: str | np.ndarray) -> float:
        """What a document of average length holding each query token once would score:
        sum of count x idf / (1 + k1) over the query's tokens in the vocabulary (0.0 when none
        is). Raw BM25 divided by it (`share_of_ceiling`) says how much of the query a document
        matches, on one scale for every query."""
        ids = self.query_ids(query) if isinstance(query, str) else np.asarray(query)
        if ids.size == 0 or self._n_live == 0:
            return 0.0
        return float(self._weights(ids)[1].sum()) / (1.0 + K1)

    def _postings(self, t: int) -> tuple[np.ndarray, np.ndarray]:
        """Slots (int64) and term frequencies (float64) of token t, dead slots included."""
        pptr, pslot, ptf = self._post
        a, b = (int(pptr[t]), int(pptr[t + 1])) if t + 1 < len(pptr) else (0, 0)
        s, f = pslot[a:b].astype(np.int64), ptf[a:b].astype(np.float64)
        extra = self._extra.get(t)
        if extra is not None:
            packed = np.array(extra, dtype=np.int64)
            s, f = np.concatenate([s, packed >> 32]), np.concatenate([f, packed & 0xFFFFFFFF])
        return s, f

    def scores_all(self, query: str | np.ndarray) -> np.ndarray:
        """BM25 of every slot (dead ones 0): (n,) float32. O(postings of the query tokens)."""
        ids = self.query_ids(query) if isinstance(query, str) else np.asarray(query)
        out = np.zeros(self.n, np.float32)
        if ids.size == 0 or self._n_live == 0:
            return out
        qu, idf, avgdl = self._weights(ids)
        alive, dlen = self._alive.data, self._len.data
        slots, parts = [], []
        for t, w in zip(qu.tolist(), idf.tolist()):
            s, f = self._postings(t)
            slots.append(s)
            parts.append(w * f / (f + K1 * (1 - B + B * dlen[s] / avgdl)) * alive[s])
        s, w = np.concatenate(slots), np.concatenate(parts)
        if len(slots) == 1:  # a token's postings name each slot once
            out[s] = w
        elif 16 * s.size > self.n:
            out[:] = np.bincount(s, weights=w, minlength=self.n)
        else:  # sum in float64 over the touched slots only
            order = np.argsort(s)
            s, w = s[order], w[order]
            first = np.flatnonzero(np.append(True, s[1:] != s[:-1]))
            out[s[first]] = np.add.reduceat(w, first)
        return out

    def scores_beside(self, query: str, texts: list[str]) -> np.ndarray:
        """(len(texts),) float64 raw BM25 of `texts` for `query` as if they were documents of
        this index beside its live ones (N, document frequencies and average length counted over
        both; same tokens, k1 and b), so they compare with `scores_all(query)`. Nothing is added."""
        docs = [Counter(self._split(t)) for t in texts]
        out = np.zeros(len(docs), np.float64)
        if not docs:
            return out
        lens = np.asarray([sum(d.values()) for d in docs], np.float64)
        n = self._n_live + len(docs)
        norm = K1 * (1 - B + B * lens / max((self._total_len + float(lens.sum())) / n, 1e-9))
        for word, count in Counter(self._split(query)).items():
            tf = np.asarray([d.get(word, 0) for d in docs], np.float64)
            if tf.any():
                df = (int(self._df.view[self.vocab[word]]) if word in self.vocab else 0) + int(np.count_nonzero(tf))
                out += math.log1p((n - df + 0.5) / (df + 0.5)) * count * tf / (tf + norm)
        return out

    def scores_for(self, rows, query: str | np.ndarray) -> np.ndarray:
        """BM25 of the given slots only (dead ones 0): (len(rows),) float32. O(their lengths)."""
        ids = self.query_ids(query) if isinstance(query, str) else np.asarray(query)
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        if ids.size == 0 or rows.size == 0 or self._n_live == 0:
            return np.zeros(rows.size, np.float32)
        qu, idf, avgdl = self._weights(ids)
        ptr = self._ptr.view
        start, end = ptr[rows], ptr[rows + 1]
        lens = end - start
        ends = np.cumsum(lens)
        pos = np.arange(ends[-1]) + np.repeat(end - ends, lens)  # the rows' entries in the forward index
        tok = self._tok.data[pos]
        j = np.searchsorted(qu, tok)
        hit = np.flatnonzero(np.append(qu, -1)[j] == tok)  # -1: sentinel past the last query id
        row = np.searchsorted(ends, hit, side="right")
        f = self._tf.data[pos[hit]].astype(np.float64)
        norm = np.where(self._alive.view[rows], K1 * (1 - B + B * self._len.data[rows] / avgdl), np.inf)
        w = idf[j[hit]] * f / (f + norm[row])  # a dead row's norm is inf: weight 0
        return np.bincount(row, weights=w, minlength=rows.size).astype(np.float32)

    def scrub(self) -> int:
        """Replace every word no live document holds (df 0: its documents were removed) by an
        unmatchable placeholder keeping its id, so removed text leaves the vocabulary (and the
        saved files). Returns how many words went."""
        gone = [w for w, i in self.vocab.items() if self._df.data[i] == 0 and not w.startswith("\x00")]
        for w in gone:
            i = self.vocab.pop(w)
            self.vocab[f"\x00{i}"] = i
        return len(gone)

    # --- persistence -------------------------------------------------------------------------
    def save(self, directory: str | os.PathLike) -> None:
        """Write `<name>.npy` arrays and `lexical.json` (vocabulary, counters, format) into `directory`."""
        self._rebuild_postings()  # merge the growable postings into the CSC
        self.scrub()
        arrays = dict(zip(_FILES, (self._ptr.view, self._tok.view, self._tf.view, self._len.view,
                                   self._alive.view, self._df.view, *self._post)))
        os.makedirs(directory, exist_ok=True)
        for name, a in arrays.items():  # via a new file: maps of a previous save stay valid
            path = os.path.join(directory, name + ".npy")
            with open(path + ".tmp", "wb") as fh:
                np.save(fh, np.ascontiguousarray(a), allow_pickle=False)
            os.replace(path + ".tmp", path)
        meta = {"format": FORMAT, "stemmer": self.stemmer, "k1": K1, "b": B, "n": self.n, "n_live": self._n_live,
                "total_len": self._total_len, "vocab": sorted(self.vocab, key=self.vocab.__getitem__)}
        with open(os.path.join(directory, "lexical.json"), "w", encoding="utf-8") as fh:
            json.dump(meta, fh, ensure_ascii=False)

    @classmethod
    def load(cls, directory: str | os.PathLike, mmap: bool = True) -> LexicalIndex:
        """Read what `save` wrote; with `mmap` arrays of 1 MiB or more are copy-on-write maps (writes
        never reach the files), smaller ones are read (`etamem.live.npy_files`)."""
        with open(os.path.join(directory, "lexical.json"), encoding="utf-8") as fh:
            meta = json.load(fh)
        if meta.get("format") != FORMAT:
            raise ValueError(f"unsupported lexical index format {meta.get('format')!r}")
        arrays = {}
        for name in _FILES:
            path = os.path.join(directory, name + ".npy")
            arrays[name] = load_npy(path, "c" if mmap else None)  # small ones read: file descriptors
        self = cls(stemmer=meta["stemmer"])
        self.vocab = {t: i for i, t in enumerate(meta["vocab"])}
        self._ptr, self._tok, self._tf, self._len, self._alive, self._df = (_Vec(arrays[k]) for k in _FILES[:6])
        self._post = (arrays["post_ptr"], arrays["post_slot"], arrays["post_tf"])
        self._n_live, self._total_len = int(meta["n_live"]), int(meta["total_len"])
        if self.n != meta["n"] or self._df.size != len(self.vocab):
            raise ValueError("lexical index files disagree with lexical.json")
        _check_arrays(arrays, self.n, len(self.vocab))
        return self


def _check_arrays(a: dict, n: int, n_words: int) -> None:
    """Shapes and ranges of saved arrays (a damaged file must fail here, not in a search):
    CSR pointers monotone and closing on their arrays, word ids and slots in range."""
    ptr, tok, post_ptr, post_slot = a["doc_ptr"], a["doc_tok"], a["post_ptr"], a["post_slot"]
    ok = (len(ptr) == n + 1 and len(a["doc_len"]) == n and len(a["alive"]) == n and len(tok) == len(a["doc_tf"])
          and (n == 0 or (ptr[0] == 0 and ptr[-1] == len(tok) and bool(np.all(np.diff(ptr) >= 0))))
          and (len(tok) == 0 or (int(tok.min()) >= 0 and int(tok.max()) < n_words))
          and len(post_ptr) in (0, n_words + 1) and len(post_slot) == len(a["post_tf"])
          and (len(post_ptr) == 0 or (post_ptr[0] == 0 and post_ptr[-1] == len(post_slot)
                                      and bool(np.all(np.diff(post_ptr) >= 0))))
          and (len(post_slot) == 0 or (int(post_slot.min()) >= 0 and int(post_slot.max()) < n)))
    if not ok:
        raise ValueError("lexical index arrays are damaged (shapes or ranges)")


def share_of_ceiling(scores: np.ndarray, ceiling: float) -> np.ndarray:
    """Raw BM25 over the query's `LexicalIndex.ceiling`, capped at 1 (ceiling 0 -> zeros): float32.
    Unlike `minmax`, a weak lexical match stays weak when it is the best one among the candidates."""
    s = np.asarray(scores, dtype=np.float32)
    return np.minimum(s / np.float32(ceiling), 1.0) if ceiling > 0 else np.zeros_like(s)


def minmax(scores: np.ndarray) -> np.ndarray:
    """Min-max normalise over the candidates being compared (all equal -> zeros): float32."""
    s = np.asarray(scores, dtype=np.float32)
    if s.size == 0:
        return s
    lo, hi = float(s.min()), float(s.max())
    return (s - lo) / (hi - lo) if hi > lo else np.zeros_like(s)
