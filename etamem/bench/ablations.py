"""Construction-time ablations, injected into `Memory` (no engine code changes):

- `TurnExtractor`: w/o AMUs — every turn (text + photo caption) is one unit;
- `SharedTextTagger`: shared text representation — the Affect view is keyed by the text
  embedding (polarity labels unchanged);
- `SharedAffectEncoder`: shared affect representation — the store's text vectors are the
  affective embedding; the runner reads only its Event and Affect trees and takes the Time
  view, the merge scoring and the raw turns from the `amu` store (`composite.py`), so the
  Time view stays text-keyed as in the paper;
- `UnifiedTagger`: one unified view (paper Table 5) — every AMU labelled neutral (all in the
  Event tree, text embedding: Unified Semantic) or non-neutral (all in the Affect tree,
  affective embedding: Unified Affective);
- `fta`, `fta_fixed`, `fta_session`, `fta_turn_pair`: FTA-Mem stores (`Config(method="fta")`)
  segmented by BWS, fixed windows, whole sessions or turn pairs, or with fewer anchors
  (`FTA_CONSTRUCTIONS`, their segmentation modes in `FTA_SEGMENTATION`);
- `CachingExtractor`: per-turn extraction cached by content hash (LongMemEval sessions repeat
  across questions), in an SQLite table; a turn the LLM extractor left to its rule fallback,
  or could not extract (`ExtractionUnavailable`), is not cached.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from typing import Any, Sequence

import numpy as np

from etamem.extraction.extractors import Extraction, turn_text
from etamem.records import Turn

# FTA-Mem stores (Config method "fta") and the Config values each is built with: segmentation modes (the
# paper's granularity and fixed-window comparisons; "fta_fixed" is the paper's fixed window with the
# detector) and the anchors a unit is represented by (its Fig. 3 ablations)
FTA_CONSTRUCTIONS: dict[str, dict[str, str]] = {
    "fta": {"fta_segmentation": "bws"}, "fta_fixed": {"fta_segmentation": "fixed-detect"},
    "fta_plain_fixed": {"fta_segmentation": "fixed"}, "fta_session": {"fta_segmentation": "session"},
    "fta_turn_pair": {"fta_segmentation": "turn-pair"},
    "fta_no_time": {"fta_anchors": "no-time"}, "fta_no_affect": {"fta_anchors": "no-affect"},
    "fta_fact_only": {"fta_anchors": "fact-only"},
}
FTA_SEGMENTATION = {k: v.get("fta_segmentation", "bws") for k, v in FTA_CONSTRUCTIONS.items()}
CONSTRUCTIONS = ("amu", "turn", "shared_text", "shared_affect", "unified_semantic", "unified_affective",
                 *FTA_CONSTRUCTIONS)


class TurnExtractor:
    """One unit per turn: its text with any photo caption ([] for an empty turn)."""

    name = "turn"

    def extract(self, turn: Turn, context: Sequence[Turn] = ()) -> list[str]:
        text = turn_text(turn).strip()
        return [text] if text else []


class SharedTextTagger:
    """Polarity from `tagger`, embedding from `text_encoder` (dim = text_encoder.dim)."""

    def __init__(self, tagger: Any, text_encoder: Any):
        self.tagger = tagger
        self.text_encoder = text_encoder
        self.dim = int(text_encoder.dim)
        self.name = f"shared-text:{tagger.name}"

    def tag(self, texts: list[str]):
        from etamem.models.affect import AffectBatch

        batch = self.tagger.tag(list(texts))
        emb = np.asarray(self.text_encoder.encode(list(texts)), np.float32).reshape(len(batch), self.dim)
        return AffectBatch(batch.polarities, batch.scores, emb)


class SharedAffectEncoder:
    """A text encoder returning `tagger`'s affective embeddings: (n, tagger.dim) float32."""

    def __init__(self, tagger: Any):
        self.tagger = tagger
        self.dim = int(tagger.dim)
        self.name = f"shared-affect:{tagger.name}"

    def encode(self, texts: list[str]) -> np.ndarray:
        return np.asarray(self.tagger.tag(list(texts)).embeddings, np.float32).reshape(len(texts), self.dim)


class UnifiedTagger:
    """`tagger` with every label moved to one semantic view (`to`): "event" labels every text
    neutral; "affect" keeps a non-neutral label and relabels a neutral text with its likelier
    non-neutral class. Class scores and embeddings are `tagger`'s, unchanged."""

    def __init__(self, tagger: Any, to: str):
        if to not in ("event", "affect"):
            raise ValueError(f"to: expected 'event' or 'affect', got {to!r}")
        self.tagger = tagger
        self.to = to
        self.dim = int(tagger.dim)
        self.name = f"unified-{to}:{tagger.name}"

    def tag(self, texts: list[str]):
        from etamem.models.affect import AffectBatch
        from etamem.records import POLARITIES

        batch = self.tagger.tag(list(texts))
        if self.to == "event":
            labels = ["neutral"] * len(batch)
        else:
            neg, pos = POLARITIES.index("negative"), POLARITIES.index("positive")
            scores = np.asarray(batch.scores, np.float32).reshape(len(batch), len(POLARITIES))
            labels = [p if p != "neutral" else ("negative" if s[neg] > s[pos] else "positive")
                      for p, s in zip(batch.polarities, scores)]
        return AffectBatch(labels, batch.scores, batch.embeddings)


class CachingExtractor:
    """Wraps an extractor; results are kept in SQLite under sha256(extractor name, speaker,
    turn content, context contents), so a session seen again is not extracted again.

    Only the inner extractor's own output is cached: units an `LLMExtractor` made with its
    rule fallback (`extract_result(...).fallback`) are returned but not kept under its key,
    and an exception (e.g. `ExtractionUnavailable`) caches nothing."""

    def __init__(self, inner: Any, path: str, name: str):
        self.inner = inner
        self.name = name
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(path, check_same_thread=False, timeout=30.0)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("CREATE TABLE IF NOT EXISTS extractions (key TEXT PRIMARY KEY, units TEXT NOT NULL)")
        self._conn.commit()
        self.hits = self.misses = 0

    def key(self, turn: Turn, context: Sequence[Turn]) -> str:
        blob = json.dumps([self.name, [(t.speaker, turn_text(t), t.timestamp.isoformat()) for t in (*context, turn)]],
                          ensure_ascii=False)
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()

    @property
    def stats(self) -> dict[str, int]:
        """The inner extractor's counters (turns extracted on cache misses); {} if it has none."""
        return dict(getattr(self.inner, "stats", None) or {})

    def extract(self, turn: Turn, context: Sequence[Turn] = ()) -> list[str]:
        return self.extract_result(turn, context).units

    def extract_result(self, turn: Turn, context: Sequence[Turn] = ()) -> Extraction:
        key = self.key(turn, context)
        with self._lock:
            row = self._conn.execute("SELECT units FROM extractions WHERE key = ?", (key,)).fetchone()
            if row is not None:
                self.hits += 1
        if row is not None:
            return Extraction(list(json.loads(row[0])), False)
        inner = getattr(self.inner, "extract_result", None)
        result = inner(turn, context) if inner is not None else Extraction(list(self.inner.extract(turn, context)))
        units = list(result.units)
        with self._lock:
            self.misses += 1
            if not result.fallback:
                self._conn.execute("INSERT OR REPLACE INTO extractions VALUES (?, ?)", (key, json.dumps(units)))
                self._conn.commit()
        return Extraction(units, result.fallback)

    def close(self) -> None:
        with self._lock:
            self._conn.close()
