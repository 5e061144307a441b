"""Inner-product nearest-neighbour index over float32 vectors with hashable keys, updated in place.

Replaces FAISS indexes rebuilt from scratch after every change (`leaf_index` in retriever.py,
`FlatHybridIndex` in flat.py): a write costs O(batch * dim) amortised, never O(n).

Storage: vectors live in the slots of a growable (capacity, dim) float32 matrix (capacity grows by
`_GROWTH`, like a vector), with a key -> slot dict, a slot -> key list and a live mask. A removed
or replaced slot is a tombstone until the next compaction.

Modes:
- "exact" while live keys <= `exact_max` (None: always). Upsert of a known key overwrites its row
  (O(dim)); remove tombstones the slot. Search is one float32 matrix-vector product over the used
  slots, dead slots at -inf, top k by `kernels.topk` (a partition, then a sort on (-sim, slot)), so ties
  go by slot order and results equal brute force exactly.
- "hnsw" above `exact_max`: a faiss `IndexHNSWFlat` (inner product) whose ids are the slots (faiss ids
  are insertion order, so faiss id == slot always). HNSW cannot remove, so upsert of a known key
  tombstones its old slot and appends a new one; search over-fetches (growing until k live hits or
  all slots) and filters dead slots, so it returns min(k, live) live keys. The graph keeps its own
  copy of the vectors (memory ~2x the matrix in this mode).
Compaction (the only O(n) step, amortised over many writes): when dead slots exceed `max_dead_share`
of the used slots, live rows move to the front in slot order, keys are remapped and, in hnsw mode,
the graph is rebuilt. Exact -> hnsw happens once, when live keys pass `exact_max` (compact, build the
graph from the live rows); hnsw -> exact at a compaction that finds live keys under `exact_max // 2`.
Where exact searches run on a GPU (`set_device`, `etamem.retrieval.gpu_index`) the index stays
exact past `exact_max` (a graph it holds goes back to exact at the next write).

Files (`save`/`load`, no pickle): `vectors.npy` (used slots, tombstones included), `keys.json`
({"keys": live keys, "slots": their slots}; ints stay ints, strings stay strings), `meta.json`
(format, dim, mode, parameters) and, in hnsw mode, `hnsw.faiss` (faiss.write_index). `load(mmap=True)`
memory-maps the vectors read-only; the first write copies them.
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np

from etamem.install_hints import install_hint
from etamem.kernels import topk
from etamem.live.npy_files import load_npy
from etamem.retrieval.gpu_index import DEVICES, GpuFlat, use_gpu

log = logging.getLogger(__name__)

FORMAT = 1
_GROWTH = 1.5
_MIN_CAPACITY = 16


def import_faiss():
    """The faiss module, or an ImportError naming the extra to install."""
    try:
        import faiss
    except ImportError as exc:
        raise ImportError(
            f"FAISS is required for search: {install_hint('cpu')}; with a GPU, the gpu extra (faiss-gpu)"
        ) from exc
    return faiss


class VectorIndex:
    """Cosine (inner product on unit rows) k-NN over `dim`-dimensional float32 vectors keyed by int/str."""

    def __init__(self, dim: int, *, exact_max: int | None = 16384, hnsw_m: int = 32,
                 ef_construction: int = 64, max_dead_share: float = 0.25):
        if dim <= 0:
            raise ValueError("dim must be positive")
        if not 0.0 < max_dead_share < 1.0:
            raise ValueError("max_dead_share must be in (0, 1)")
        self.dim = int(dim)
        self.exact_max = exact_max
        self.hnsw_m = hnsw_m
        self.ef_construction = ef_construction
        self.max_dead_share = max_dead_share
        self.mode = "exact"
        self._vecs = np.zeros((0, self.dim), np.float32)  # (capacity, dim); slots [:_n] used
        self._live = np.zeros(0, bool)  # (capacity,)
        self._keys: list = []  # slot -> key (stale for dead slots)
        self._slot: dict = {}  # live key -> slot
        self._n = 0
        self._hnsw = None
        self.device, self.gpu_min_rows = "cpu", 20_000  # see `set_device`
        self._gpu: GpuFlat | None = None
        self._gpu_stale = False

    def set_device(self, device: str, min_rows: int = 20_000) -> None:
        """Where exact searches run: "cpu", "gpu", or "auto" (on a GPU through FAISS-GPU once the
        index holds `min_rows` rows, when one is there; `etamem.retrieval.gpu_index`)."""
        if device == "gpu":
            use_gpu(device, 0, min_rows, import_faiss())  # refused now, not at the first search
        elif device not in DEVICES:
            raise ValueError(f"device: expected one of {DEVICES}, got {device!r}")
        self.device, self.gpu_min_rows = device, int(min_rows)
        if device == "cpu":
            self._gpu = None

    def set_exact_max(self, exact_max: int | None) -> None:
        """A new exact/HNSW threshold (None: always exact), for an index loaded with another one.
        It takes effect at the next write (exact -> hnsw) or compaction (hnsw -> exact), so that
        opening a large index never waits for a graph build."""
        if exact_max is not None and int(exact_max) < 1:
            raise ValueError("exact_max must be positive or None")
        self.exact_max = None if exact_max is None else int(exact_max)

    @property
    def on_gpu(self) -> bool:
        """The last exact search ran on the GPU copy."""
        return self._gpu is not None

    # -- queries ------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._slot)

    def __contains__(self, key) -> bool:
        return key in self._slot

    @property
    def n_slots(self) -> int:
        """Used slots, live and dead."""
        return self._n

    def vector(self, key) -> np.ndarray:
        """Stored vector of `key`: (dim,) float32 copy. KeyError if absent."""
        return np.array(self._vecs[self._slot[key]], np.float32)

    def rows(self, keys) -> np.ndarray:
        """Stored vectors of `keys` in that order: (len(keys), dim) float32 (one gather). KeyError if absent."""
        slot = self._slot
        return self._vecs[np.fromiter((slot[k] for k in keys), np.int64, len(keys))]

    def search(self, q: np.ndarray, k: int) -> tuple[np.ndarray, list]:
        """Top-k live keys by inner product with q ((dim,) float32): (sims (k',) float32 best first, keys)."""
        q = np.asarray(q, np.float32).reshape(-1)
        if q.shape[0] != self.dim:
            raise ValueError(f"q must have {self.dim} values, got {q.shape[0]}")
        k = min(int(k), len(self))
        if k <= 0:
            return np.zeros(0, np.float32), []
        slots, sims = self._search_hnsw(q, k) if self.mode == "hnsw" else self._search_exact(q, k)
        return sims.astype(np.float32), [self._keys[s] for s in slots]

    def _search_exact(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        if self.device != "cpu":
            found = self._search_gpu(q, k)
            if found is not None:
                return found
        sims = self._vecs[: self._n] @ q
        sims[~self._live[: self._n]] = -np.inf
        cand = topk(sims, k, backend="numpy")  # on CPU: `set_device` decides where searches run
        if k < self._n and np.isnan(sims[cand[-1]]):  # a NaN k-th score (NaN query) keeps nothing, as ever
            cand = cand[:0]
        return cand, sims[cand]

    def _search_gpu(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray] | None:
        """The exact search on the GPU copy of the rows, or None (not selected, or too large a fetch)."""
        faiss = import_faiss()
        if not use_gpu(self.device, len(self), self.gpu_min_rows, faiss):
            self._gpu = None
            return None
        if self._gpu is None:
            self._gpu, self._gpu_stale = GpuFlat(faiss, self.dim), False
            log.info("vector index of %d rows: exact search on the GPU (FAISS-GPU)", len(self))
        self._gpu.sync(self._vecs, self._n, self._gpu_stale)
        self._gpu_stale = False
        return self._gpu.search(q, k, self._live[: self._n], len(self))

    def _search_hnsw(self, q: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        n, live = self._n, self._live
        fetch = min(n, int(np.ceil(k * n / len(self))) + 16)
        while True:
            self._hnsw.hnsw.efSearch = max(fetch, 64)
            sims, ids = self._hnsw.search(q.reshape(1, -1), fetch)
            sims, ids = sims[0], ids[0]
            keep = ids >= 0
            keep[keep] = live[ids[keep]]  # drop dead (removed or replaced) slots
            if keep.sum() >= k or fetch >= n:
                break
            fetch = min(n, fetch * 2)
        if keep.sum() < k:  # graph missed live slots even at fetch = n: exact scan instead
            return self._search_exact(q, k)
        ids, sims = ids[keep], sims[keep]
        order = np.lexsort((ids, -sims))[:k]  # not kernels.topk: ties go by slot, not by graph order
        return ids[order], sims[order]

    # -- writes -------------------------------------------------------------------------------
    def upsert(self, keys: list, vecs: np.ndarray) -> None:
        """Insert or replace: keys (B,) hashable, vecs (B, dim) float32. New keys are appended."""
        keys = list(keys)
        vecs = np.asarray(vecs, np.float32)
        if vecs.ndim != 2 or vecs.shape[1] != self.dim:
            raise ValueError(f"vecs must be (B, {self.dim}), got {vecs.shape}")
        if vecs.shape[0] != len(keys):
            raise ValueError(f"keys ({len(keys)}) and vecs ({vecs.shape[0]}) differ in length")
        if len(set(keys)) != len(keys):
            raise ValueError("keys must not repeat within one upsert")
        if not keys:
            return
        known = np.array([key in self._slot for key in keys], bool)
        if self.mode == "exact" and known.any():  # overwrite rows in place
            self._gpu_stale = True
            self._writable()
            self._vecs[[self._slot[key] for key, kn in zip(keys, known) if kn]] = vecs[known]
            keys, vecs = [key for key, kn in zip(keys, known) if not kn], vecs[~known]
        elif self.mode == "hnsw":  # tombstone old slots; every key gets a new one
            for key, kn in zip(keys, known):
                if kn:
                    self._live[self._slot.pop(key)] = False
        self._append(keys, vecs)
        limit = self._graph_above()
        if self.mode == "exact" and limit is not None and len(self) > limit:
            self._compact()  # switches to hnsw
        elif self.mode == "hnsw" and limit is None:
            self._compact()  # back to exact: it searches on the GPU now
        else:
            self._maybe_compact()

    def remove(self, keys: list) -> None:
        """Drop keys (unknown ones ignored); their slots become tombstones."""
        for key in keys:
            slot = self._slot.pop(key, None)
            if slot is not None:
                self._live[slot] = False
        self._maybe_compact()

    def _writable(self, extra: int = 0) -> None:
        """Room for `extra` more slots, in a writable matrix (copies an mmap'd one)."""
        need = self._n + extra
        cap = self._vecs.shape[0]
        if need <= cap and self._vecs.flags.writeable:
            return
        if need > cap:
            cap = max(need, int(cap * _GROWTH), _MIN_CAPACITY)
        vecs = np.zeros((cap, self.dim), np.float32)
        vecs[: self._n] = self._vecs[: self._n]
        live = np.zeros(cap, bool)
        live[: self._n] = self._live[: self._n]
        self._vecs, self._live = vecs, live

    def _append(self, keys: list, vecs: np.ndarray) -> None:
        if not keys:
            return
        self._writable(len(keys))
        start, b = self._n, len(keys)
        self._vecs[start:start + b] = vecs
        self._live[start:start + b] = True
        self._keys[start:] = keys
        self._slot.update(zip(keys, range(start, start + b)))
        self._n += b
        if self._hnsw is not None:
            self._hnsw.add(self._vecs[start:start + b])  # faiss ids start..start+b-1 == slots

    def _maybe_compact(self) -> None:
        if self._n - len(self) > self.max_dead_share * self._n:
            self._compact()

    def _compact(self) -> None:
        """Move live rows to the front (slot order), remap keys, choose the mode, rebuild the graph."""
        slots = np.flatnonzero(self._live[: self._n])
        m = len(slots)
        cap = max(int(m * _GROWTH), _MIN_CAPACITY)
        vecs = np.zeros((cap, self.dim), np.float32)
        vecs[:m] = self._vecs[slots]
        self._vecs, self._live = vecs, np.zeros(cap, bool)
        self._live[:m] = True
        self._keys = [self._keys[s] for s in slots]
        self._slot = {key: i for i, key in enumerate(self._keys)}
        self._n = m
        self._gpu_stale = True
        limit = self._graph_above()
        if limit is None or m <= (limit // 2 if self.mode == "hnsw" else limit):
            self.mode, self._hnsw = "exact", None
        else:
            self.mode, self._hnsw = "hnsw", self._new_graph()
            if m:
                self._hnsw.add(self._vecs[:m])

    def _graph_above(self) -> int | None:
        """The exact/HNSW threshold in force: `exact_max`, or None (always exact) while exact
        searches of this many rows run on a GPU (`gpu_index.use_gpu`: one product there beats a
        graph on the CPU)."""
        if self.exact_max is None or self.device == "cpu":
            return self.exact_max
        return None if use_gpu(self.device, max(len(self), self.exact_max + 1), self.gpu_min_rows,
                               import_faiss()) else self.exact_max

    def _new_graph(self):
        faiss = import_faiss()
        index = faiss.IndexHNSWFlat(self.dim, self.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = self.ef_construction
        return index

    # -- files --------------------------------------------------------------------------------
    def save(self, directory) -> None:
        """Write vectors.npy, keys.json, meta.json (+ hnsw.faiss) into `directory` (created if needed)."""
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        keys = []
        for key in self._slot:
            if isinstance(key, np.integer):
                key = int(key)
            if not isinstance(key, (int, str)):
                raise TypeError(f"save supports int and str keys, got {type(key).__name__}")
            keys.append(key)
        meta = {"format": FORMAT, "dim": self.dim, "mode": self.mode, "n_slots": self._n,
                "exact_max": self.exact_max, "hnsw_m": self.hnsw_m, "ef_construction": self.ef_construction,
                "max_dead_share": self.max_dead_share}
        # each file goes to a temporary name first: replacing keeps an mmap of the old file valid
        _replace(d / "vectors.npy", lambda p: np.save(p, np.ascontiguousarray(self._vecs[: self._n])))
        stored = {"keys": keys, "slots": list(self._slot.values())}
        _replace(d / "keys.json", lambda p: p.write_text(json.dumps(stored)))
        if self._hnsw is not None:
            _replace(d / "hnsw.faiss", lambda p: import_faiss().write_index(self._hnsw, str(p)))
        elif (d / "hnsw.faiss").exists():
            (d / "hnsw.faiss").unlink()
        _replace(d / "meta.json", lambda p: p.write_text(json.dumps(meta)))

    @classmethod
    def load(cls, directory, mmap: bool = True) -> VectorIndex:
        """Read an index written by `save`; mmap=True maps vectors.npy read-only (copied on first
        write) when it holds 1 MiB or more (`etamem.live.npy_files`)."""
        d = Path(directory)
        meta = json.loads((d / "meta.json").read_text())
        if meta.get("format") != FORMAT:
            raise ValueError(f"unsupported vector index format {meta.get('format')!r}")
        index = cls(meta["dim"], exact_max=meta["exact_max"], hnsw_m=meta["hnsw_m"],
                    ef_construction=meta["ef_construction"], max_dead_share=meta["max_dead_share"])
        n = meta["n_slots"]
        vecs = load_npy(d / "vectors.npy", "r" if mmap and n else None)  # small ones read (descriptors)
        if vecs.shape != (n, index.dim) or vecs.dtype != np.float32:
            raise ValueError(f"vectors.npy is {vecs.shape} {vecs.dtype}, expected ({n}, {index.dim}) float32")
        stored = json.loads((d / "keys.json").read_text())
        keys, slots = stored["keys"], stored["slots"]
        if (len(keys) != len(slots) or len(set(slots)) != len(slots) or len(set(keys)) != len(keys)
                or any(not isinstance(x, int) or not 0 <= x < n for x in slots)):
            raise ValueError("keys.json: keys and slots do not describe the saved vectors")
        if n and not np.isfinite(vecs[np.asarray(slots, np.int64)]).all():
            raise ValueError("vectors.npy holds values that are not finite")
        # `index` is a new instance of this class: the classmethod sets its private state directly
        index._vecs, index._n, index.mode = vecs, n, meta["mode"]
        index._live = np.zeros(n, bool)
        index._live[stored["slots"]] = True
        index._keys = [None] * n
        for key, slot in zip(stored["keys"], stored["slots"]):
            index._keys[slot] = key
        index._slot = dict(zip(stored["keys"], stored["slots"]))
        if index.mode == "hnsw":
            index._hnsw = import_faiss().read_index(str(d / "hnsw.faiss"))
            if index._hnsw.ntotal != n:
                raise ValueError(f"hnsw.faiss holds {index._hnsw.ntotal} vectors, expected {n}")
        return index


def _replace(path: Path, write) -> None:
    tmp = path.with_name(path.name + ".tmp" + path.suffix)
    write(tmp)
    os.replace(tmp, path)
