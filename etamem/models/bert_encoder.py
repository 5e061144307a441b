"""A small BERT sentence encoder (mean pooling, L2-normalised) run with plain torch, the
`tokenizers` package and `safetensors`: the default all-MiniLM-L6-v2 without importing
sentence-transformers and transformers (about 6 s of imports on a 2-core machine, paid by every
CLI search). Vectors equal sentence-transformers' for the same model (tested to 1e-5).

Supports a sentence-transformers directory whose modules are Transformer (BERT) -> Pooling
(mean tokens) -> Normalize, with `model.safetensors`, `tokenizer.json` and `config.json`;
anything else raises ValueError and the caller uses sentence-transformers.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from etamem.models.text_batches import length_batches


def read_json(path: Path) -> dict | list:
    with path.open(encoding="utf-8") as f:
        return json.load(f)


def sentence_model_problem(model_dir: str | Path, config_problem) -> str | None:
    """None when `model_dir` is a sentence-transformers directory (Transformer -> mean Pooling ->
    Normalize, safetensors weights, tokenizer.json) whose config.json `config_problem(config)`
    accepts (returns None), else why not. Shared by this encoder and `etamem.models.mpnet_encoder`."""
    d = Path(model_dir)
    for name in ("config.json", "tokenizer.json", "model.safetensors", "modules.json", "1_Pooling/config.json"):
        if not (d / name).is_file():
            return f"no {name}"
    why = config_problem(read_json(d / "config.json"))
    if why:
        return why
    kinds = [m.get("type", "").rsplit(".", 1)[-1] for m in read_json(d / "modules.json")]
    if kinds != ["Transformer", "Pooling", "Normalize"]:
        return f"modules {kinds}"
    pooling = read_json(d / "1_Pooling/config.json")
    if not pooling.get("pooling_mode_mean_tokens") or any(
            pooling.get(k) for k in ("pooling_mode_cls_token", "pooling_mode_max_tokens",
                                     "pooling_mode_mean_sqrt_len_tokens")):
        return "pooling other than mean tokens"
    return None


def _bert_problem(cfg: dict) -> str | None:
    if cfg.get("model_type") != "bert" or cfg.get("hidden_act") != "gelu" or \
            cfg.get("position_embedding_type", "absolute") != "absolute":
        return "not a BERT with GELU and absolute positions"
    return None


def supported(model_dir: str | Path) -> str | None:
    """None when `model_dir` is a model this encoder runs, else why not."""
    return sentence_model_problem(model_dir, _bert_problem)


def encode_batches(texts: list[str], dim: int, batch_size: int, tokenizer, device: str, forward) -> np.ndarray:
    """(n, dim) float32 rows of `forward(ids, mask) -> (B, dim)` torch tensor over `texts`
    tokenised by `tokenizer` (padded per batch), in batches of similar length (`length_batches`)."""
    import torch

    texts = list(texts)
    out = np.zeros((len(texts), dim), dtype=np.float32)
    with torch.inference_mode():
        for batch in length_batches(texts, batch_size):
            enc = tokenizer.encode_batch([texts[i] for i in batch])
            ids = torch.tensor([e.ids for e in enc], dtype=torch.long, device=device)
            mask = torch.tensor([e.attention_mask for e in enc], dtype=torch.long, device=device)
            out[batch] = forward(ids, mask).float().cpu().numpy()
    return out


class BertEncoder:
    """Encode texts to (n, dim) float32 unit vectors with a BERT sentence model from
    `model_dir`; `name` is the model identity recorded in stores."""

    def __init__(self, model_dir: str | Path, *, name: str, device: str = "cpu", batch_size: int = 64):
        why = supported(model_dir)
        if why:
            raise ValueError(f"{model_dir}: not a model BertEncoder runs ({why})")
        import torch
        from safetensors.torch import load_file
        from tokenizers import Tokenizer

        d = Path(model_dir)
        cfg = read_json(d / "config.json")
        st = read_json(d / "sentence_bert_config.json") if (d / "sentence_bert_config.json").is_file() else {}
        self.name, self.batch_size, self.device = name, batch_size, device
        self.dim = int(cfg["hidden_size"])
        self.heads = int(cfg["num_attention_heads"])
        self.layers = int(cfg["num_hidden_layers"])
        self.eps = float(cfg.get("layer_norm_eps", 1e-12))
        self.max_length = int(st.get("max_seq_length") or cfg["max_position_embeddings"])
        self.tokenizer = Tokenizer.from_file(str(d / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=self.max_length)
        self.tokenizer.enable_padding(pad_id=int(cfg.get("pad_token_id", 0)), pad_token="[PAD]")
        self.w = {k: v.to(device) for k, v in load_file(str(d / "model.safetensors")).items()}
        self._torch = torch

    def module(self):
        """The forward pass `(ids, mask) -> (B, dim)` as a `torch.nn.Module` holding the weights as
        parameters (what `torch.onnx.export` needs: `etamem.models.onnx_encoder`)."""
        torch, enc = self._torch, self

        class _Bert(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.weights = torch.nn.ParameterDict(
                    {k.replace(".", "__"): torch.nn.Parameter(v, requires_grad=False) for k, v in enc.w.items()})

            def forward(self, ids, mask):  # `enc` is this encoder (the enclosing method's self)
                return enc._forward(ids, mask, {k.replace("__", "."): v for k, v in self.weights.items()})

        return _Bert().eval()

    def _forward(self, ids, mask, w=None):
        """ids, mask: (B, L) int64 -> (B, dim) float32 mean-pooled, L2-normalised; `w` the
        weights by name (default this encoder's)."""
        torch, w = self._torch, self.w if w is None else w
        F = torch.nn.functional
        B, L = ids.shape
        x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][:L]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = F.layer_norm(x, (self.dim,), w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps)
        keep = mask.bool()[:, None, None, :]  # (B, 1, 1, L): attend to real tokens only
        dh = self.dim // self.heads
        for i in range(self.layers):
            p = f"encoder.layer.{i}."

            def lin(t, name):
                return F.linear(t, w[p + name + ".weight"], w[p + name + ".bias"])

            q, k, v = (lin(x, f"attention.self.{n}").view(B, L, self.heads, dh).transpose(1, 2)
                       for n in ("query", "key", "value"))
            scores = (q @ k.transpose(-1, -2)) / math.sqrt(dh)
            scores = scores.masked_fill(~keep, torch.finfo(scores.dtype).min)
            a = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, L, self.dim)
            x = F.layer_norm(x + lin(a, "attention.output.dense"), (self.dim,),
                             w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"],
                             self.eps)
            h = F.gelu(lin(x, "intermediate.dense"))
            x = F.layer_norm(x + lin(h, "output.dense"), (self.dim,), w[p + "output.LayerNorm.weight"],
                             w[p + "output.LayerNorm.bias"], self.eps)
        m = mask[..., None].to(x.dtype)
        pooled = (x * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return F.normalize(pooled, dim=-1)

    def encode(self, texts: list[str]) -> np.ndarray:
        return encode_batches(texts, self.dim, self.batch_size, self.tokenizer, self.device, self._forward)
