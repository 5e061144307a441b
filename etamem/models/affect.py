"""Affect tagging: polarity label, class scores and affective embedding per text (see docs/design.md, 'Affect tagging').

Two taggers share one interface (`AffectTagger`: `name`, `dim`, `tag(texts) -> AffectBatch`):

* `RobertaAffectTagger` — the designed path. An off-the-shelf 3-class sentiment
  classifier (cardiffnlp twitter-roberta-base-sentiment family). One forward pass per
  batch gives the class probabilities (softmax of the logits, reordered into POLARITIES
  order), the polarity (argmax class) and the affective embedding (attention-mask
  mean-pooled last hidden state, L2-normalised; dim = hidden size).

* `VaderAffectTagger` — the documented fallback when the RoBERTa weights are not on the
  machine. Polarity comes from VADER's compound score (>= +threshold positive,
  <= -threshold negative, else neutral). VADER has no hidden state, so the affective
  representation is built from the text embedding and VADER's affect profile:

      e_aff = concat( sqrt(1 - w) * e_text , sqrt(w) * unit(p) ),
      p     = [neg, neu, pos, max(compound, 0), max(-compound, 0)]   (non-negative)

  With both parts unit-norm, e_aff is unit-norm and
  cos(e_aff_a, e_aff_b) = (1 - w) * cos(text_a, text_b) + w * cos(p_a, p_b):
  affective similarity is topic similarity tempered by a shared polarity profile. Two
  units about the same topic but with opposite feelings are pushed apart (their profiles
  are nearly orthogonal), while same-topic same-feeling units stay close. w is
  `Config.vader_profile_weight`. VADER runs as `etamem.models.vader_linear.LinearVader` (stock
  scores, linear cost), at most `Config.vader_piece_words` words per 2,000 characters.

`make_affect_tagger(config, text_encoder)` picks the tagger from `Config.affect_backend`
("auto" = RoBERTa when its weights are available locally, else VADER) and logs exactly one
line saying which tagger is active and why. Heavy libraries (torch, transformers,
vaderSentiment) are imported only when a tagger is built.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Protocol, Sequence, runtime_checkable

import numpy as np

from etamem.models.encoders import l2_normalise as _l2_normalise
from etamem.models.encoders import resolve_device as _resolve_device
from etamem.records import POLARITIES

logger = logging.getLogger(__name__)

MAX_LENGTH = 256  # token budget per text for the RoBERTa tagger
PROFILE_DIM = 5  # VADER profile: neg, neu, pos, compound+, compound-

# Label names accepted in a model's config.id2label (lower-cased) -> polarity.
_LABEL_ALIASES = {
    "negative": "negative", "neg": "negative", "label_0": "negative",
    "neutral": "neutral", "neu": "neutral", "label_1": "neutral",
    "positive": "positive", "pos": "positive", "label_2": "positive",
}


class AffectModelUnavailable(OSError):
    """The RoBERTa affect model could not be loaded (weights missing or unreadable)."""


@dataclass(frozen=True)
class AffectBatch:
    """Tagging result for n texts.

    polarities: n labels from POLARITIES; scores: (n, 3) float32 class probabilities in
    POLARITIES order (rows sum to 1); embeddings: (n, d) float32, rows L2-normalised.
    """

    polarities: list[str]
    scores: np.ndarray
    embeddings: np.ndarray

    def __len__(self) -> int:
        return len(self.polarities)


@runtime_checkable
class AffectTagger(Protocol):
    """Anything with `name`, `dim` and `tag(texts) -> AffectBatch`."""

    name: str
    dim: int

    def tag(self, texts: list[str]) -> AffectBatch: ...


def _empty_batch(dim: int) -> AffectBatch:
    return AffectBatch([], np.zeros((0, 3), np.float32), np.zeros((0, dim), np.float32))


def _label_order(id2label: dict[Any, str]) -> list[int]:
    """Model class index for each polarity, in POLARITIES order; ValueError if unmappable."""
    if len(id2label) != 3:
        raise ValueError(f"affect model must have exactly 3 labels, got {len(id2label)}: {id2label}")
    by_polarity: dict[str, int] = {}
    for idx, label in id2label.items():
        polarity = _LABEL_ALIASES.get(str(label).strip().lower())
        if polarity is None or polarity in by_polarity:
            raise ValueError(f"cannot map affect model labels {id2label} onto {POLARITIES}")
        by_polarity[polarity] = int(idx)
    return [by_polarity[p] for p in POLARITIES]


class RobertaAffectTagger:
    """Sentiment classifier + mean-pooled last hidden state from one forward pass.

    `model` is a hub id or a local directory; with `local_files_only=True` (default) no
    network access is attempted. `device`: "cpu", "cuda" or "auto".
    """

    def __init__(self, model: str, *, device: str = "cpu", batch_size: int = 32,
                 local_files_only: bool = True) -> None:
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        self.model_id = model
        self.device = _resolve_device(device)
        self.batch_size = max(1, int(batch_size))
        try:
            self._tokenizer = AutoTokenizer.from_pretrained(model, local_files_only=local_files_only)
            self._model = AutoModelForSequenceClassification.from_pretrained(
                model, local_files_only=local_files_only)
        except OSError as exc:
            where = "locally" if local_files_only else "locally or on the hub"
            raise AffectModelUnavailable(
                f"RoBERTa affect model {model!r} not found {where}: set affect_model to a local "
                f"directory holding the weights, or allow_model_download=True to fetch them "
                f"({exc})") from exc
        self._order = _label_order(dict(self._model.config.id2label))
        self._model.to(device=self.device, dtype=torch.float32).eval()
        cfg = self._model.config
        self.dim = int(cfg.hidden_size)
        self.name = f"roberta:{model}"
        # RoBERTa offsets positions by padding_idx + 1 (= 2), so keep inputs 2 short of the table.
        limits = [MAX_LENGTH, int(getattr(cfg, "max_position_embeddings", MAX_LENGTH + 2)) - 2]
        tok_max = getattr(self._tokenizer, "model_max_length", None)
        if isinstance(tok_max, int) and 0 < tok_max < 1_000_000:
            limits.append(tok_max)
        self.max_length = max(8, min(limits))

    def tag(self, texts: list[str]) -> AffectBatch:
        """Tag texts in batches of `batch_size`; returns an AffectBatch of n rows, dim = hidden size."""
        texts = list(texts)
        if not texts:
            return _empty_batch(self.dim)
        import torch

        # Length-sorted batches waste less padding; results are put back in input order.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        probs = np.zeros((len(texts), 3), np.float32)
        embs = np.zeros((len(texts), self.dim), np.float32)
        with torch.inference_mode():
            for start in range(0, len(texts), self.batch_size):
                idx = order[start:start + self.batch_size]
                enc = self._tokenizer([texts[i] for i in idx], padding=True, truncation=True,
                                      max_length=self.max_length, return_tensors="pt")
                enc = {k: v.to(self.device) for k, v in enc.items() if k in ("input_ids", "attention_mask")}
                out = self._model(**enc, output_hidden_states=True)
                p = torch.softmax(out.logits.float(), dim=-1)[:, self._order]
                mask = enc["attention_mask"].unsqueeze(-1).to(torch.float32)
                hidden = out.hidden_states[-1].float()
                pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
                probs[idx] = p.cpu().numpy()
                embs[idx] = pooled.cpu().numpy()
        polarities = [POLARITIES[j] for j in probs.argmax(axis=1)]
        return AffectBatch(polarities, probs, _l2_normalise(embs))


class VaderAffectTagger:
    """VADER polarity + text embedding tempered by the VADER affect profile (see module doc).

    `text_encoder` has `.encode(list[str]) -> (n, d) float32`, `.dim` and `.name`.
    dim = text_encoder.dim + 5. `piece_words`: most words VADER scans per 2,000 characters (after
    its emoji expansion; `Config.vader_piece_words`).
    """

    def __init__(self, text_encoder: Any, *, threshold: float = 0.05, profile_weight: float = 0.5,
                 piece_words: int = 1000) -> None:
        from etamem.models.vader_linear import LinearVader

        if not 0.0 <= profile_weight <= 1.0:
            raise ValueError(f"profile_weight={profile_weight}: expected 0..1")
        if piece_words < 1:
            raise ValueError(f"piece_words={piece_words}: expected at least 1")
        self._analyzer = LinearVader()
        self.piece_words = int(piece_words)
        self.text_encoder = text_encoder
        self.threshold = float(threshold)
        self.profile_weight = float(profile_weight)
        self.dim = int(text_encoder.dim) + PROFILE_DIM
        self.name = f"vader+{text_encoder.name}"

    @property
    def analyzer(self) -> Any:
        """The VADER analyzer (`LinearVader`; its `words_scanned` counts the words scored)."""
        return self._analyzer

    def polarity(self, compound: float) -> str:
        if compound >= self.threshold:
            return "positive"
        if compound <= -self.threshold:
            return "negative"
        return "neutral"

    def _scores(self, text: str) -> dict[str, float]:
        """VADER's neg/neu/pos/compound at a cost bounded by `piece_words` words per 2,000
        characters, whatever the characters (etamem/models/vader_linear.py)."""
        from etamem.models.vader_linear import bounded_scores

        return bounded_scores(self._analyzer, text, self.piece_words)

    def tag(self, texts: list[str]) -> AffectBatch:
        """Tag texts; embeddings are (n, text_encoder.dim + 5) float32 unit rows."""
        texts = list(texts)
        if not texts:
            return _empty_batch(self.dim)
        raw = [self._scores(t) for t in texts]
        polarities = [self.polarity(s["compound"]) for s in raw]
        scores = np.array([[s["neg"], s["neu"], s["pos"]] for s in raw], np.float32)
        totals = scores.sum(axis=1, keepdims=True)
        empty = totals[:, 0] <= 0
        scores = scores / np.where(totals > 0, totals, 1.0)
        scores[empty] = (0.0, 1.0, 0.0)  # no lexical content (e.g. empty text): neutral
        profile = np.array([[s["neg"], s["neu"], s["pos"], max(s["compound"], 0.0), max(-s["compound"], 0.0)]
                            for s in raw], np.float32)
        profile[np.linalg.norm(profile, axis=1) <= 0] = (0.0, 1.0, 0.0, 0.0, 0.0)
        text_emb = _l2_normalise(np.asarray(self.text_encoder.encode(texts), np.float32))
        if text_emb.shape != (len(texts), self.dim - PROFILE_DIM):
            raise ValueError(f"text encoder returned shape {text_emb.shape}, "
                             f"expected ({len(texts)}, {self.dim - PROFILE_DIM})")
        w = self.profile_weight
        emb = np.concatenate([math.sqrt(1.0 - w) * text_emb, math.sqrt(w) * _l2_normalise(profile)], axis=1)
        return AffectBatch(polarities, scores.astype(np.float32), _l2_normalise(emb))


_FALLBACK_WARNED: set[str] = set()  # "auto" fell back to VADER: warned once per process and reason


def make_affect_tagger(config: Any, text_encoder: Any, recorded: str | None = None) -> AffectTagger:
    """Build the tagger chosen by `config.affect_backend`; logs one line naming it and why.

    "vader": VADER. "roberta": RoBERTa, load errors propagate (AffectModelUnavailable says
    how to get the weights). "auto": the store's tagger when `recorded` (its recorded
    identity, e.g. "vader+all-MiniLM-L6-v2") names VADER, without trying RoBERTa; else RoBERTa
    if `config.affect_model` loads (from the hub only when `config.allow_model_download`), else
    VADER: an INFO line when the weights are not there (the documented default on most machines),
    a warning when they are there but unusable (once per process and reason).
    """
    backend = config.affect_backend
    model = config.affect_model
    local_only = not config.allow_model_download

    def vader() -> VaderAffectTagger:
        return VaderAffectTagger(text_encoder, threshold=config.vader_threshold,
                                 profile_weight=config.vader_profile_weight, piece_words=config.vader_piece_words)

    def roberta() -> RobertaAffectTagger:
        return RobertaAffectTagger(model, device=config.device, batch_size=config.affect_batch_size,
                                   local_files_only=local_only)

    if backend == "vader":
        tagger: AffectTagger = vader()
        logger.info("affect tagger: VADER (affect_backend='vader', threshold=%s, profile_weight=%s)",
                    config.vader_threshold, config.vader_profile_weight)
        return tagger
    if backend == "roberta":
        tagger = roberta()
        logger.info("affect tagger: RoBERTa %r (affect_backend='roberta', device=%s)", model, tagger.device)
        return tagger
    if backend != "auto":
        raise ValueError(f"affect_backend={backend!r}: expected 'auto', 'roberta' or 'vader'")
    if recorded and recorded.startswith("vader"):
        logger.info("affect tagger: VADER, the store's recorded tagger (affect_backend='auto'; for RoBERTa set "
                    "affect_backend='roberta' and run `etamem reindex`)")
        return vader()
    try:
        tagger = roberta()
    except (OSError, ValueError) as exc:
        tagger = vader()
        reason = (f"RoBERTa weights {model!r} not found locally; set affect_model to a local path "
                  f"or allow_model_download=True" if local_only and isinstance(exc, OSError)
                  else f"RoBERTa {model!r} unusable: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
        missing = local_only and isinstance(exc, OSError)  # the documented default on a machine without weights
        level = logging.INFO if missing or reason in _FALLBACK_WARNED else logging.WARNING
        _FALLBACK_WARNED.add(reason)
        logger.log(level, "affect tagger: VADER fallback (%s)", reason)
        return tagger
    logger.info("affect tagger: RoBERTa %r (affect_backend='auto', weights found, device=%s)",
                model, tagger.device)
    return tagger


__all__: Sequence[str] = (
    "AffectBatch", "AffectTagger", "AffectModelUnavailable", "RobertaAffectTagger",
    "VaderAffectTagger", "make_affect_tagger",
)
