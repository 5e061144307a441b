"""Benchmark metrics: retrieval (no LLM) and answer quality (token F1, BLEU-1, judge verdicts).

Retrieval:
- LoCoMo evidence recall@K: the share of a question's evidence turns among the first K
  *distinct* source turns of a ranking (an AMU stands for its source turns, first occurrence
  wins).
- LongMemEval (official definitions): over the ranked ids, `recall_any@k` = 1 if any gold id
  is in the top k, `recall_all@k` = 1 if all are, `ndcg_any@k` = NDCG@k with binary relevance
  (gain 1 per gold id, discount 1 / log2(rank + 1), rank 1-based; ideal = all gold ids first).

Answers (LoCoMo-style normalisation: lower case, punctuation and the articles a/an/the dropped):
- token F1 over the multisets of answer tokens;
- BLEU-1 = brevity penalty x clipped unigram precision (BP = exp(1 - r/c) when c < r).

Uncertainty: `bootstrap_interval` gives the 95% percentile bootstrap interval of a mean
(questions resampled with replacement, seeded); on per-question differences of two runs it is
the paired interval.
"""
from __future__ import annotations

import json
import math
import re
import string
from collections import Counter
from typing import Iterable, Sequence

import numpy as np

TOKEN = re.compile(r"\w+|[^\w\s]")  # context-token count (the LoCoMo retrieval benchmark's rule)
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


# --- LoCoMo evidence -----------------------------------------------------------------------
def normalise_evidence(raw: Iterable | None, known: set[str]) -> tuple[list[str], int]:
    """(resolved turn ids, number skipped) for one question's evidence list.

    `"D8:6; D9:17"` is split, `"D:11:26"` -> `D11:26`, `"D30:05"` -> `D30:5`; ids not in
    `known` (and duplicates) are skipped and counted."""
    out, skipped = [], 0
    for item in raw or []:
        for part in re.split(r"[;\s,]+", str(item)):
            if not part:
                continue
            m = re.fullmatch(r"D:?(\d+):0*(\d+)", part)
            tid = f"D{int(m.group(1))}:{int(m.group(2))}" if m else part
            if tid in known and tid not in out:
                out.append(tid)
            else:
                skipped += 1
    return out, skipped


def distinct_turns(units: Sequence[tuple[Sequence[str], str]], k: int) -> tuple[list[str], int]:
    """First k distinct turn ids from ranked (source turn ids, text) units, and the context
    tokens of the units needed to cover them."""
    turns: list[str] = []
    tokens = 0
    for sources, text in units:
        if len(turns) >= k:
            break
        new = [t for t in sources if t not in turns]
        if not new:
            continue
        turns.extend(new)
        tokens += len(TOKEN.findall(text))
    return turns[:k], tokens


def distinct(ids: Iterable[str]) -> list[str]:
    """Ids in first-occurrence order."""
    seen: dict[str, None] = {}
    for i in ids:
        seen.setdefault(i, None)
    return list(seen)


def evidence_recall(ranked_turns: Sequence[str], gold: Sequence[str], k: int) -> float:
    """Share of `gold` among the first k of `ranked_turns` (already distinct)."""
    if not gold:
        raise ValueError("evidence_recall: empty gold list")
    return len(set(ranked_turns[:k]) & set(gold)) / len(set(gold))


def rrf(rankings: list[list[int]], k: int = 10) -> list[int]:
    """Reciprocal-rank fusion of rankings of row indexes (ties by index)."""
    scores: dict[int, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank + 1)
    return sorted(scores, key=lambda i: (-scores[i], i))


# --- LongMemEval (official retrieval metrics) ---------------------------------------------
def recall_any(ranked: Sequence[str], gold: Sequence[str], k: int) -> float:
    top = set(ranked[:k])
    return float(any(g in top for g in gold))


def recall_all(ranked: Sequence[str], gold: Sequence[str], k: int) -> float:
    top = set(ranked[:k])
    return float(all(g in top for g in gold))


def _dcg(relevances: Sequence[float]) -> float:
    return float(sum(r / math.log2(i + 2) for i, r in enumerate(relevances)))


def ndcg_any(ranked: Sequence[str], gold: Sequence[str], k: int) -> float:
    """NDCG@k with binary relevance; 0 when there is no gold id."""
    gold_set = set(gold)
    ideal = _dcg([1.0] * min(len(gold_set), k))
    if ideal == 0:
        return 0.0
    return _dcg([1.0 if r in gold_set else 0.0 for r in ranked[:k]]) / ideal


# --- answers --------------------------------------------------------------------------------
def normalise_answer(text: object) -> list[str]:
    """Lower-cased tokens without punctuation and articles."""
    s = str(text).lower().translate(_PUNCT)
    return _ARTICLES.sub(" ", s).split()


def token_f1(prediction: object, gold: object) -> float:
    p, g = normalise_answer(prediction), normalise_answer(gold)
    if not p or not g:
        return float(p == g)
    common = sum((Counter(p) & Counter(g)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def bleu1(prediction: object, gold: object) -> float:
    c, r = normalise_answer(prediction), normalise_answer(gold)
    if not c or not r:
        return 0.0
    clipped = sum((Counter(c) & Counter(r)).values())
    bp = 1.0 if len(c) >= len(r) else math.exp(1.0 - len(r) / len(c))
    return bp * clipped / len(c)


def parse_verdict(reply: object) -> bool:
    """True for a CORRECT judge verdict. Accepts parsed JSON ({"label": ...} or similar) or
    text; raises ValueError when no verdict can be found."""
    if isinstance(reply, str):
        try:
            reply = json.loads(reply)
        except json.JSONDecodeError:
            pass
    if isinstance(reply, dict):
        for key in ("label", "verdict", "answer", "result", "judgement", "judgment"):
            if key in reply:
                reply = reply[key]
                break
    text = str(reply).strip().upper()
    if "WRONG" in text or "INCORRECT" in text:
        return False
    if "CORRECT" in text:
        return True
    raise ValueError(f"judge reply has no CORRECT/WRONG verdict: {str(reply)[:200]!r}")


BOOTSTRAP_RESAMPLES = 2000


def bootstrap_interval(values: Iterable[float], *, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0,
                       level: float = 0.95) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the mean of `values`: `resamples` samples of the same
    size drawn with replacement (numpy generator seeded with `seed`), the (1 - level) / 2 and
    (1 + level) / 2 percentiles of their means; None for no values. Per-question differences of
    two runs give the paired interval."""
    x = np.asarray(list(values), np.float64)
    if not x.size:
        return None
    if resamples < 1 or not 0.0 < level < 1.0:
        raise ValueError(f"bootstrap_interval: resamples >= 1 and 0 < level < 1, got {resamples}, {level}")
    means = x[np.random.default_rng(seed).integers(0, x.size, (resamples, x.size))].mean(axis=1)
    tail = 100.0 * (1.0 - level) / 2.0
    return float(np.percentile(means, tail)), float(np.percentile(means, 100.0 - tail))


def clustered_bootstrap_interval(values: Sequence[float], clusters: Sequence[str], *,
                                 resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0,
                                 level: float = 0.95) -> tuple[float, float] | None:
    """Percentile bootstrap interval of the mean of `values` resampling whole clusters
    (conversations) with replacement: each resample draws as many clusters as there are, and
    its mean is over every value of the drawn clusters. Questions of one conversation are not
    independent; this interval says how much a figure moves with the choice of conversations.
    `values` (n,) float, `clusters` (n,) labels; None for no values."""
    x = np.asarray(list(values), np.float64)
    if not x.size:
        return None
    if len(clusters) != x.size:
        raise ValueError(f"clustered_bootstrap_interval: {x.size} values but {len(clusters)} cluster labels")
    labels = sorted(set(clusters))
    index = {c: i for i, c in enumerate(labels)}
    ids = np.fromiter((index[c] for c in clusters), np.int64, x.size)
    sums, counts = np.bincount(ids, x, len(labels)), np.bincount(ids, None, len(labels))
    draws = np.random.default_rng(seed).integers(0, len(labels), (resamples, len(labels)))
    means = sums[draws].sum(axis=1) / counts[draws].sum(axis=1)
    tail = 100.0 * (1.0 - level) / 2.0
    return float(np.percentile(means, tail)), float(np.percentile(means, 100.0 - tail))


def paired_p_value(differences: Sequence[float], clusters: Sequence[str] | None = None, *,
                   resamples: int = 10_000, seed: int = 0) -> float | None:
    """Two-sided p-value that the mean of paired `differences` (after - before, one per question)
    is 0: a sign-flip randomisation test, flipping the signs of whole clusters (conversations)
    when `clusters` is given, else of single questions; the share of `resamples` random flips
    whose |mean| reaches the observed |mean| (with the observed counted once, so never 0).
    None for no values."""
    d = np.asarray(list(differences), np.float64)
    if not d.size:
        return None
    if clusters is None:
        groups = d
    else:
        if len(clusters) != d.size:
            raise ValueError(f"paired_p_value: {d.size} differences but {len(clusters)} cluster labels")
        labels = sorted(set(clusters))
        index = {c: i for i, c in enumerate(labels)}
        groups = np.bincount(np.fromiter((index[c] for c in clusters), np.int64, d.size), d, len(labels))
    observed = abs(groups.sum())
    signs = np.random.default_rng(seed).choice(np.array([-1.0, 1.0]), (resamples, groups.size))
    hits = int((np.abs(signs @ groups) >= observed - 1e-12).sum())
    return (hits + 1) / (resamples + 1)


def mean(values: Iterable[float]) -> float | None:
    values = list(values)
    return sum(values) / len(values) if values else None
