"""How the merge puts the views' candidates on one scale (`Config.merge_scoring`; docs/benchmarks.md,
'Affect that counts'). Pure functions over arrays; `SpaceIndex.merge_found` applies them.

- "text": every candidate is scored by its text cosine, whichever view found it (the default).
- "view": each candidate is scored by the similarity of the view that found it (the Affect view:
  affective cosine), calibrated per view (`calibrate`: an affine map giving the view's similarities
  over its candidates the mean and spread that text cosine has over those same candidates, so a
  text-keyed view is scored exactly by text cosine); a candidate several views found keeps its best
  calibrated score (`view_dense`).
- "rrf": reciprocal-rank fusion (`fuse_views`) of the per-view rankings, each view ranking its
  candidates by the "view" score with its own calibrated similarity; the fused order then takes
  the "view" scores handed out in rank order (`hand_out`), so the list stays sorted by score and
  on the scale the raw-turn fallback compares turns on.
"""
from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from etamem.records import AMU
from etamem.retrieval.dialogue import DialogueScoring
from etamem.retrieval.lexical import minmax
from etamem.retrieval.temporal import TimeWindow

MERGE_SCORING = ("text", "view", "rrf")


def check_scoring(scoring: str) -> str:
    """`scoring` when it is one of `MERGE_SCORING`, else ValueError."""
    if scoring not in MERGE_SCORING:
        raise ValueError(f"merge_scoring: expected one of {MERGE_SCORING}, got {scoring!r}")
    return scoring


def calibrate(sims: np.ndarray, text_cos: np.ndarray, member: np.ndarray) -> np.ndarray:
    """A view's similarities (n,) mapped onto the text-cosine scale over its candidates (`member`,
    (n,) bool): mu_t + sd_t * (sims - mu_v) / sd_v with mean and standard deviation over the
    members (mu_v, sd_v of `sims`, mu_t, sd_t of `text_cos`). Identity when sims == text_cos; a
    view whose similarities do not vary gets mu_t. Non-members: NaN. float64 (n,)."""
    sims, text_cos, member = np.asarray(sims, np.float64), np.asarray(text_cos, np.float64), np.asarray(member, bool)
    if sims.shape != text_cos.shape or sims.shape != member.shape or sims.ndim != 1:
        raise ValueError(f"calibrate: sims {sims.shape}, text_cos {text_cos.shape}, member {member.shape}: "
                         "expected three (n,) arrays")
    out = np.full(sims.shape, np.nan)
    if not member.any():
        return out
    s, t = sims[member], text_cos[member]
    mu_v, sd_v, mu_t, sd_t = s.mean(), s.std(), t.mean(), t.std()
    if np.array_equal(s, t):
        out[member] = t
    elif sd_v > 1e-12:
        out[member] = mu_t + sd_t * (s - mu_v) / sd_v
    else:
        out[member] = mu_t
    return out


def calibrated_views(sims: np.ndarray, text_cos: np.ndarray, members: np.ndarray) -> np.ndarray:
    """`calibrate` for each view: sims (V, n), text_cos (n,), members (V, n) bool -> (V, n)
    float64, NaN where a view did not find the candidate."""
    sims, members = np.atleast_2d(sims), np.atleast_2d(np.asarray(members, bool))
    if sims.shape != members.shape:
        raise ValueError(f"calibrated_views: sims {sims.shape} and members {members.shape} differ")
    return np.stack([calibrate(s, text_cos, m) for s, m in zip(sims, members)]) if len(sims) \
        else np.zeros((0, len(text_cos)))


def view_dense(calibrated: np.ndarray, text_cos: np.ndarray) -> np.ndarray:
    """Each candidate's "view" similarity: the best calibrated score (V, n) among the views that
    found it (non-NaN); its text cosine when none did. (n,) float64."""
    calibrated = np.atleast_2d(np.asarray(calibrated, np.float64))
    text_cos = np.asarray(text_cos, np.float64)
    if calibrated.shape[1:] != text_cos.shape:
        raise ValueError(f"view_dense: calibrated {calibrated.shape} and text_cos {text_cos.shape} differ")
    if not len(calibrated):
        return text_cos.copy()
    found = ~np.isnan(calibrated)
    best = np.where(found, calibrated, -np.inf).max(axis=0)
    return np.where(found.any(axis=0), best, text_cos)


def fuse_views(scores: np.ndarray, members: np.ndarray, tiebreak: np.ndarray, k: float) -> np.ndarray:
    """Reciprocal-rank fusion: sum over the views of 1 / (k + rank), rank (1-based) of a candidate
    among the view's members (`members` (V, n) bool) by its score in that view (`scores` (V, n),
    best first, ties by `tiebreak` (n,), lower first). (n,) float64, 0 for a candidate no view found."""
    scores, members = np.atleast_2d(np.asarray(scores, np.float64)), np.atleast_2d(np.asarray(members, bool))
    tiebreak = np.asarray(tiebreak)
    if scores.shape != members.shape or scores.shape[1:] != tiebreak.shape:
        raise ValueError(f"fuse_views: scores {scores.shape}, members {members.shape}, tiebreak {tiebreak.shape} differ")
    if k < 0:
        raise ValueError(f"fuse_views: k={k}: expected >= 0")
    fused = np.zeros(tiebreak.shape, np.float64)
    for s, m in zip(scores, members):
        idx = np.flatnonzero(m)
        order = idx[np.lexsort((tiebreak[idx], -s[idx]))]
        fused[order] += 1.0 / (k + np.arange(1, len(order) + 1))
    return fused


def hand_out(fused: np.ndarray, scores: np.ndarray, tiebreak: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(order, new scores): the candidates by `fused` (best first, ties by `tiebreak`, lower
    first), the i-th taking the i-th best of `scores` (n,), so the list is sorted by its scores
    and they keep their scale. new scores are indexed like the candidates, not like `order`."""
    fused, scores, tiebreak = np.asarray(fused, np.float64), np.asarray(scores, np.float64), np.asarray(tiebreak)
    if not fused.shape == scores.shape == tiebreak.shape:
        raise ValueError(f"hand_out: fused {fused.shape}, scores {scores.shape}, tiebreak {tiebreak.shape} differ")
    order = np.lexsort((tiebreak, -fused))
    out = np.empty_like(scores)
    out[order] = np.sort(scores)[::-1]
    return order, out


def with_additions(score: np.ndarray, times: np.ndarray, time_words: np.ndarray, question: np.ndarray,
                   amus: Sequence[AMU], window: TimeWindow | None, when: bool, time_boost: float,
                   dialogue: DialogueScoring | None) -> np.ndarray:
    """`score` (each unit's hybrid score, (n,)) plus the merge's time terms (`time_boost` inside a
    parsed window, scaled down with distance outside it; half of it for units with their own time
    words (`time_words`) on "when" questions) and dialogue terms (minus the question penalty for
    units that are questions (`question`), plus the speaker and self boosts); `times` in epoch
    seconds, `amus` the units, all (n,) in the same order. The same in every scoring mode."""
    if window is not None and window.kind not in ("first", "latest"):
        lo, hi = window.start.timestamp(), window.end.timestamp()
        gap_days = np.maximum(0.0, np.maximum(lo - times, times - hi)) / 86400.0
        score = score + time_boost / (1.0 + gap_days / 7.0)
    elif window is not None:  # first / latest: order preference by time
        t = minmax(times)
        score = score + time_boost * (t if window.kind == "latest" else 1.0 - t)
    if when:
        score = score + 0.5 * time_boost * time_words
    if dialogue is not None:
        score = score - dialogue.question_penalty * question
        if (dialogue.speaker_boost or dialogue.self_boost) and len(dialogue.named) == 1:
            spoke = np.fromiter((a.speaker == dialogue.named[0] for a in amus), bool, len(amus))
            score = score + dialogue.speaker_boost * spoke
            if dialogue.self_boost:
                who = re.compile(rf"(?<!\w){re.escape(dialogue.named[0])}(?!\w)", re.IGNORECASE)
                about = np.fromiter((bool(who.search(a.text)) for a in amus), bool, len(amus))
                score = score + dialogue.self_boost * (spoke & about)
    return score
