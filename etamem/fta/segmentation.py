"""Boundary-preserving window segmentation (BWS) of a session into situation fragments
(FTA-Mem, Algorithm 1; see docs/design.md, 'FTA-Mem').

`segment_session(turns, detector, mode=...)` cuts one session into contiguous segments that
skip and overlap nothing. Modes:

- ``"bws"`` (default): Algorithm 1. The detector sees turns s..E = min(s+W-1, n-1) and proposes
  cuts. If E is the session end, every segment is final. Otherwise all segments but the last are
  final, the last stays provisional and the next window starts at ``s <- max(b_last, s+1)``.
  When the forced step moves s past the provisional segment's start (the detector found no cut,
  or only one at s), the turns left behind stay glued to the provisional segment, which the next
  window's first segment continues: every turn ends in exactly one segment.
- ``"fixed"``: plain windows of W turns, no detector, no provisional carry.
- ``"fixed-detect"``: the paper's fixed-window comparison: the detector runs on windows that
  advance by W and every detected segment is final (no carry).
- ``"session"``: one segment per session. ``"turn-pair"``: each turn with its reply (W = 2).

With ``keep_qa`` (default) a cut never separates a turn ending in "?" from the next turn when
that turn is by another speaker (in every mode but ``"turn-pair"``, whose granularity is the
ablation itself; in ``"fixed"`` a window then grows until the answer is in).

Detectors (`BoundaryDetector`): `OfflineBoundaryDetector` (embedding depth, time gaps, cue
phrases, no model call) and `LLMBoundaryDetector` (one JSON call per window, offline fallback).
Both return `Cut`s in session turn indices.
"""
from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol, Sequence

import numpy as np

from etamem.extraction.extractors import content_words, prompt_datetime, speaker_name, turn_text
from etamem.models.llm import LLMError, LLMUnavailable
from etamem.models.prompt_files import load_prompt, render_prompt
from etamem.records import Turn

logger = logging.getLogger(__name__)

WINDOW = 20
MODES = ("bws", "fixed", "fixed-detect", "session", "turn-pair")
# The paper's twelve boundary triggers (what opened a segment) ...
TRIGGERS = (
    "session_start", "topic_change", "goal_change", "emotion_shift", "new_time_reference",
    "new_person_or_relationship", "problem_to_support_transition", "support_strategy_transition",
    "homework_or_plan_creation", "correction_or_contradiction", "risk_signal", "unknown",
)
# ... and the ones that only this module writes: time_gap, window, turn_pair, max_carry.


@dataclass(frozen=True)
class Cut:
    """A proposed segment start: turn index `at` (in the session) opens a new segment."""

    at: int
    trigger: str = "unknown"
    score: float = 1.0
    detail: str = ""


@dataclass(frozen=True)
class Segment:
    """A contiguous run of turns of one session (`start`..`end` inclusive, session indices)."""

    session_id: str
    turn_ids: tuple[str, ...]
    start: int
    end: int
    start_time: datetime
    end_time: datetime
    trigger: str = "session_start"
    final: bool = True

    def __len__(self) -> int:
        return self.end - self.start + 1


@dataclass(frozen=True)
class Segmentation:
    """Segments of one session and what it cost: `windows` detector calls, `forced_steps`
    windows that advanced by the minimum step (no usable cut after the window start)."""

    segments: list[Segment]
    windows: int = 0
    forced_steps: int = 0


class BoundaryDetector(Protocol):
    """Anything with `name` and `detect(turns, start, end) -> list[Cut]`: cuts for the window
    turns[start..end] (inclusive) of a session; `turns` is the session so far (context)."""

    name: str

    def detect(self, turns: Sequence[Turn], start: int, end: int) -> list[Cut]: ...


# --- question / answer ------------------------------------------------------------------
_QUESTION_END = re.compile(r"\?[\s\"'\u201d\u2019)\]]*(?:[\U0001F300-\U0001FAFF\u2600-\u27BF]\s*)*$")


def is_question(turn: Turn) -> bool:
    """True when the turn's text ends with a question mark (trailing quotes/emoji ignored)."""
    return bool(_QUESTION_END.search((turn.text or "").strip()))


def splits_qa(turns: Sequence[Turn], at: int) -> bool:
    """True when a cut before turns[at] would separate a question from its answer."""
    if at <= 0 or at >= len(turns):
        return False
    prev, cur = turns[at - 1], turns[at]
    return is_question(prev) and cur.speaker != prev.speaker


# --- the segmenter ------------------------------------------------------------------------
def _segment(turns: Sequence[Turn], start: int, end: int, trigger: str, final: bool = True) -> Segment:
    run = turns[start:end + 1]
    return Segment(session_id=run[0].session_id, turn_ids=tuple(t.turn_id for t in run), start=start, end=end,
                   start_time=min(t.timestamp for t in run), end_time=max(t.timestamp for t in run),
                   trigger=trigger, final=final)


def _usable_cuts(cuts: Sequence[Cut], turns: Sequence[Turn], start: int, end: int, keep_qa: bool) -> list[Cut]:
    """Cuts strictly inside (start, end], one per index (highest score), sorted, Q-A kept."""
    best: dict[int, Cut] = {}
    for cut in cuts:
        at = int(cut.at)
        if not start < at <= end or (keep_qa and splits_qa(turns, at)):
            continue
        if at not in best or cut.score > best[at].score:
            best[at] = cut
    return [best[k] for k in sorted(best)]


def _check(turns: Sequence[Turn], window: int) -> None:
    if window < 2:
        raise ValueError(f"window={window}: expected at least 2 turns")
    sessions = {t.session_id for t in turns}
    if len(sessions) > 1:
        raise ValueError(f"segment_session takes the turns of one session, got {len(sessions)} sessions")


def segment_session(turns: Sequence[Turn], detector: BoundaryDetector | None = None, *, mode: str = "bws",
                    window: int = WINDOW, keep_qa: bool = True, complete: bool = True,
                    max_carry: int | None = None) -> Segmentation:
    """Segment the turns of one session (in dialogue order); see the module doc for `mode`.

    `complete=False` (a session still running): the segment that reaches the last turn is
    returned with `final=False` (it may grow with later turns). `max_carry` (BWS only, default
    None = Algorithm 1 as published) bounds how many turns the forced step may leave glued to a
    provisional segment before it is finalised (bounds detector calls on long unbroken stretches).
    """
    turns = list(turns)
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}: expected one of {MODES}")
    if not turns:
        return Segmentation([])
    _check(turns, window)
    if mode in ("bws", "fixed-detect") and detector is None:
        raise ValueError(f"mode={mode!r} needs a boundary detector")
    n = len(turns)
    if mode == "session":
        return Segmentation([_segment(turns, 0, n - 1, "session_start", complete)])
    if mode == "turn-pair":
        return Segmentation(_turn_pairs(turns, complete))
    if mode == "fixed":
        return Segmentation(_fixed_windows(turns, window, keep_qa, complete))
    if mode == "fixed-detect":
        return _fixed_detect(turns, detector, window, keep_qa, complete)
    return _bws(turns, detector, window, keep_qa, complete, max_carry)


def _bws(turns: list[Turn], detector: BoundaryDetector, window: int, keep_qa: bool, complete: bool,
         max_carry: int | None) -> Segmentation:
    """Algorithm 1 (see the module doc). `p` is the start of the provisional segment, `s` the
    window start; p <= s always, and turns p..s-1 are glued to the provisional segment."""
    n = len(turns)
    out: list[Segment] = []
    s = p = 0
    p_trigger = "session_start"
    windows = forced = 0
    while s < n:
        end = min(s + window - 1, n - 1)
        cuts = _usable_cuts(detector.detect(turns, s, end), turns, s, end, keep_qa)
        windows += 1
        starts = [(p, p_trigger)] + [(c.at, c.trigger) for c in cuts]
        bounds = [(b, starts[j + 1][0] - 1 if j + 1 < len(starts) else end, r) for j, (b, r) in enumerate(starts)]
        if end == n - 1:
            for j, (b, e, r) in enumerate(bounds):
                out.append(_segment(turns, b, e, r, complete or j + 1 < len(bounds)))
            break
        for b, e, r in bounds[:-1]:
            out.append(_segment(turns, b, e, r))
        b_last, r_last = bounds[-1][0], bounds[-1][2]
        new_s = max(b_last, s + 1)
        if b_last < new_s:
            forced += 1
        p, p_trigger, s = b_last, r_last, new_s
        if max_carry is not None and s - p >= max(1, max_carry) and not (keep_qa and splits_qa(turns, s)):
            out.append(_segment(turns, p, s - 1, p_trigger))  # a long unbroken stretch: close it
            p, p_trigger = s, "max_carry"
    return Segmentation(out, windows, forced)


def _fixed_windows(turns: list[Turn], window: int, keep_qa: bool, complete: bool) -> list[Segment]:
    n, out, b = len(turns), [], 0
    while b < n:
        e = min(b + window, n) - 1
        while keep_qa and e + 1 < n and splits_qa(turns, e + 1):
            e += 1  # the answer stays with its question
        out.append(_segment(turns, b, e, "session_start" if b == 0 else "window", complete or e < n - 1))
        b = e + 1
    return out


def _fixed_detect(turns: list[Turn], detector: BoundaryDetector, window: int, keep_qa: bool,
                  complete: bool) -> Segmentation:
    out, windows = [], 0
    for b, e, r in [(s.start, s.end, s.trigger) for s in _fixed_windows(turns, window, keep_qa, True)]:
        cuts = _usable_cuts(detector.detect(turns, b, e), turns, b, e, keep_qa)
        windows += 1
        starts = [(b, r)] + [(c.at, c.trigger) for c in cuts]
        for j, (sb, sr) in enumerate(starts):
            se = starts[j + 1][0] - 1 if j + 1 < len(starts) else e
            out.append(_segment(turns, sb, se, sr, complete or se < len(turns) - 1))
    return Segmentation(out, windows)


def _turn_pairs(turns: list[Turn], complete: bool) -> list[Segment]:
    n, out, i = len(turns), [], 0
    while i < n:
        e = i + 1 if i + 1 < n and turns[i + 1].speaker != turns[i].speaker else i
        out.append(_segment(turns, i, e, "session_start" if i == 0 else "turn_pair", complete or e < n - 1))
        i = e + 1
    return out


def segment_dialogue(turns: Sequence[Turn], detector: BoundaryDetector | None = None, **options: Any) -> list[Segment]:
    """`segment_session` over each session (in order of first appearance); all segments."""
    by_session: dict[str, list[Turn]] = {}
    for t in turns:
        by_session.setdefault(t.session_id, []).append(t)
    out: list[Segment] = []
    for session_turns in by_session.values():
        out.extend(segment_session(session_turns, detector, **options).segments)
    return out


# --- evaluation ---------------------------------------------------------------------------
@dataclass(frozen=True)
class BoundaryScore:
    """Boundary precision / recall with a tolerance (each gold boundary matched at most once)."""

    matched: int
    predicted: int
    gold: int

    @property
    def precision(self) -> float:
        return self.matched / self.predicted if self.predicted else 1.0

    @property
    def recall(self) -> float:
        return self.matched / self.gold if self.gold else 1.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    def __add__(self, other: "BoundaryScore") -> "BoundaryScore":
        return BoundaryScore(self.matched + other.matched, self.predicted + other.predicted, self.gold + other.gold)


def score_boundaries(predicted: Sequence[int], gold: Sequence[int], tolerance: int = 1) -> BoundaryScore:
    """Greedy one-to-one matching of predicted and gold segment starts within `tolerance` turns
    (closest pairs first)."""
    pairs = sorted((abs(p - g), p, g) for p in set(predicted) for g in set(gold) if abs(p - g) <= tolerance)
    used_p: set[int] = set()
    used_g: set[int] = set()
    for _, p, g in pairs:
        if p not in used_p and g not in used_g:
            used_p.add(p)
            used_g.add(g)
    return BoundaryScore(len(used_p), len(set(predicted)), len(set(gold)))


def segment_starts(segments: Sequence[Segment]) -> list[int]:
    """The boundaries a segmentation placed: starts of every segment but a session's first."""
    return [s.start for s in segments if s.start > 0]


# --- offline detector ---------------------------------------------------------------------
_LEAD = r"^\W*(?:(?:oh|hey|well|so|ok|okay|alright|um|uh|hmm|and|but|also)\b[\s,.!\u2026-]*){0,3}"
_CUES = (
    r"by the way|btw|anyway|anyways|anyhow|speaking of|on (?:an)?other note|on a (?:different|side|lighter) note"
    r"|(?:to )?chang(?:e|ing) (?:the )?(?:subject|topic)|unrelated(?: question| but)?|random question"
    r"|before i forget|i almost forgot|guess what|enough about(?: me)?|moving on|totally different"
    r"|did i (?:tell|mention)|have i told you|i (?:wanted|meant|forgot) to (?:tell|ask) you"
    r"|what about you|how about you|what else is new|what(?:'s| is) new with you|how(?:'s| is| are| have) (?:your|the)"
)
_CUE_RE = re.compile(_LEAD + rf"(?:(?!(?:{_CUES})\b)[A-Z][a-z]+[\s,!]+)?(?P<cue>{_CUES})\b", re.IGNORECASE)
_WEAK_CUES = ("what about you", "how about you")


def cue_phrase(text: str) -> str | None:
    """The topic-shift cue phrase opening `text` ("by the way", "anyway", ...), else None."""
    m = _CUE_RE.match(text or "")
    return m.group("cue").lower() if m else None


def _block_similarity(vecs: np.ndarray, weights: np.ndarray, block: int) -> np.ndarray:
    """sim[g] for gaps g = 1..n-1 (index g-1): cosine between the weighted mean of the `block`
    turns before gap g and that of the `block` turns after it."""
    n = len(vecs)
    sims = np.zeros(max(n - 1, 0), np.float32)
    for g in range(1, n):
        left = slice(max(0, g - block), g)
        right = slice(g, min(n, g + block))
        a = (vecs[left] * weights[left, None]).sum(axis=0)
        b = (vecs[right] * weights[right, None]).sum(axis=0)
        na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
        sims[g - 1] = float(a @ b) / (na * nb) if na > 0 and nb > 0 else 0.0
    return sims


def depth_scores(sims: Sequence[float]) -> np.ndarray:
    """TextTiling depth of each gap: climb to the highest similarity on each side while it keeps
    rising, and add the two drops; 0 for gaps that are not local minima."""
    sims = np.asarray(sims, np.float64)
    m = len(sims)
    depth = np.zeros(m, np.float64)
    for i in range(m):
        if (i > 0 and sims[i - 1] < sims[i]) or (i + 1 < m and sims[i + 1] < sims[i]):
            continue  # not a valley
        left = i
        while left > 0 and sims[left - 1] >= sims[left]:
            left -= 1
        right = i
        while right + 1 < m and sims[right + 1] >= sims[right]:
            right += 1
        depth[i] = (sims[left] - sims[i]) + (sims[right] - sims[i])
    return depth


@dataclass(eq=False)
class OfflineBoundaryDetector:
    """The embedded default detector (no LLM): per gap between turns,

    - embedding shift: TextTiling depth of the block similarity (blocks of `block` turns, weighted
      by how much content a turn has, so "haha, nice!" barely counts); a cut where the depth is
      at least `min_depth` and at least mean + `z`·std of the session's valley depths, or at
      least `sure_depth` whatever the statistics (a session whose every valley is a real shift);
    - a topic-shift cue phrase opening the turn ("by the way", "anyway", "speaking of", ...):
      a cut where the depth is at least `cue_depth` (`weak_cue_depth` for "how/what about you");
    - a time gap over `time_gap` between two turns: always a cut;
    - speaker structure: a topic cut that would separate a question from its answer moves to
      just before the question (a time gap there is dropped); of cuts closer than `min_segment`
      turns the stronger stays.

    The threshold is calibrated per session (the depth statistics of all turns seen so far), so
    a window's cuts do not depend on where the window starts. `encoder=None`: cue phrases and
    time gaps only. Vectors are cached per text.
    """

    encoder: Any = None
    block: int = 3
    min_depth: float = 0.15
    z: float = 0.5
    sure_depth: float = 0.5
    cue_depth: float = 0.03
    weak_cue_depth: float = 0.08
    time_gap: timedelta = timedelta(hours=1)
    min_segment: int = 3
    name: str = "offline"
    _vectors: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _cache: dict[str, list[Cut]] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def detect(self, turns: Sequence[Turn], start: int, end: int) -> list[Cut]:
        """Cuts for turns[start..end] (session indices, start < at <= end)."""
        return [c for c in self.session_cuts(turns) if start < c.at <= end]

    def session_cuts(self, turns: Sequence[Turn]) -> list[Cut]:
        """All cuts of the session `turns` (cached by the turns' ids and texts)."""
        key = hashlib.blake2b("\x1f".join(f"{t.turn_id}\x1e{t.text}\x1e{t.timestamp.isoformat()}"
                                          for t in turns).encode(), digest_size=16).hexdigest()
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None:
            return hit
        cuts = self._compute(list(turns))
        with self._lock:
            if len(self._cache) > 256:
                self._cache.clear()
            self._cache[key] = cuts
        return cuts

    def _encode(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            known = {t: self._vectors[t] for t in dict.fromkeys(texts) if t in self._vectors}
        missing = [t for t in dict.fromkeys(texts) if t not in known]
        if missing:  # the model runs outside the lock
            vecs = np.asarray(self.encoder.encode(missing), np.float32)
            known.update(zip(missing, vecs))
            with self._lock:
                if len(self._vectors) > 50_000:
                    self._vectors.clear()
                self._vectors.update(zip(missing, vecs))
        return np.stack([known[t] for t in texts])

    def gap_depths(self, turns: Sequence[Turn]) -> np.ndarray:
        """Depth score of each gap (index g-1 for the gap before turn g); zeros without encoder."""
        n = len(turns)
        if self.encoder is None or n < 2:
            return np.zeros(max(n - 1, 0))
        texts = [turn_text(t) or " " for t in turns]
        vecs = self._encode(texts)
        weights = np.array([min(1.0, 0.15 + len(content_words(t)) / 6.0) for t in texts], np.float32)
        return depth_scores(_block_similarity(vecs, weights, self.block))

    def _compute(self, turns: list[Turn]) -> list[Cut]:
        n = len(turns)
        if n < 2:
            return []
        depth = self.gap_depths(turns)
        valleys = depth[depth > 0]
        threshold = self.min_depth
        if len(valleys) >= 2:
            threshold = max(self.min_depth, float(valleys.mean() + self.z * valleys.std()))
        threshold = min(threshold, max(self.min_depth, self.sure_depth))
        proposals: list[Cut] = []
        for g in range(1, n):
            d = float(depth[g - 1])
            prev, cur = turns[g - 1], turns[g]
            gap = (cur.timestamp - prev.timestamp).total_seconds()
            if gap > self.time_gap.total_seconds():
                proposals.append(Cut(g, "time_gap", 10.0 + d, f"gap {gap / 3600:.1f} h"))
                continue
            cue = cue_phrase(cur.text)
            need = (self.weak_cue_depth if cue in _WEAK_CUES else self.cue_depth) if self.encoder is not None else 0.0
            if cue is not None and d >= need:
                proposals.append(Cut(g, "topic_change", 1.0 + d, f"cue {cue!r}, depth {d:.2f}"))
            elif d >= threshold:
                proposals.append(Cut(g, "topic_change", d, f"depth {d:.2f} >= {threshold:.2f}"))
        return self._place(turns, proposals)

    def _place(self, turns: list[Turn], proposals: list[Cut]) -> list[Cut]:
        """Move cuts off question/answer gaps, then keep the strongest of cuts closer than
        `min_segment` (a time gap always stays)."""
        moved: list[Cut] = []
        for c in proposals:
            if splits_qa(turns, c.at):  # a topic cut moves before the question; a time gap is dropped
                if c.trigger != "time_gap" and c.at - 1 > 0 and not splits_qa(turns, c.at - 1):
                    moved.append(Cut(c.at - 1, c.trigger, c.score, c.detail + " (before the question)"))
                continue
            moved.append(c)
        kept: list[Cut] = []
        for c in sorted(moved, key=lambda c: (-c.score, c.at)):
            if c.at < self.min_segment and c.trigger != "time_gap":
                continue
            if all(abs(c.at - k.at) >= self.min_segment or c.trigger == k.trigger == "time_gap" for k in kept):
                kept.append(c)
        return sorted(kept, key=lambda c: c.at)


# --- LLM detector -------------------------------------------------------------------------
def _format_turns(turns: Sequence[Turn], start: int, end: int) -> str:
    lines = []
    for i in range(start, end + 1):
        t = turns[i]
        lines.append(f"[{i}] (id {t.turn_id}; {prompt_datetime(t.timestamp)}) "
                     f"{speaker_name(t.speaker)}: {turn_text(t)}")
    return "\n".join(lines)


def parse_segment_reply(reply: Any, start: int, end: int) -> list[Cut]:
    """Cuts from a `{"segments": [{"turn_span": [b, e], "boundary_trigger": ...}]}` reply for the
    window start..end; ValueError when the reply is unusable (no segments, a span that is not two
    integers inside the window, spans out of order or overlapping). A trigger outside the
    vocabulary reads as "unknown"; gaps between spans join the segment before them."""
    items = reply.get("segments") if isinstance(reply, dict) else reply
    if not isinstance(items, list) or not items:
        raise ValueError('expected {"segments": [{"turn_span": [start, end], "boundary_trigger": ...}, ...]}')
    spans = []
    for item in items:
        span = item.get("turn_span") if isinstance(item, dict) else None
        if (not isinstance(span, list) or len(span) != 2
                or not all(isinstance(x, int) and not isinstance(x, bool) for x in span)):
            raise ValueError(f"turn_span must be [start, end] integers, got {span!r}")
        b, e = span
        if not start <= b <= e <= end:
            raise ValueError(f"turn_span {span} is outside the window [{start}, {end}] or reversed")
        trigger = item.get("boundary_trigger")
        trigger = trigger.strip().lower() if isinstance(trigger, str) else "unknown"
        spans.append((b, e, trigger if trigger in TRIGGERS else "unknown"))
    spans.sort()
    for (b1, e1, _), (b2, _, _) in zip(spans, spans[1:]):
        if b2 <= e1:
            raise ValueError(f"turn spans overlap at {b2}")
    return [Cut(b, r, 1.0, "llm") for b, _, r in spans if b > start]


def segments_schema(start: int, end: int) -> dict:
    """The JSON schema of a segmentation reply for the window start..end."""
    span = {"type": "array", "items": {"type": "integer", "minimum": start, "maximum": end},
            "minItems": 2, "maxItems": 2}
    item = {"type": "object", "properties": {"turn_span": span, "boundary_trigger": {"type": "string", "enum": list(TRIGGERS)}},
            "required": ["turn_span", "boundary_trigger"]}
    return {"type": "object", "properties": {"segments": {"type": "array", "items": item, "minItems": 1}},
            "required": ["segments"]}


class LLMBoundaryDetector:
    """One LLM call per window (prompt `fta_segment`, stage "fta_segment"): JSON spans with one
    of the paper's boundary triggers. An unusable reply (not JSON after the client's repair
    round, wrong form, spans outside the window) falls back to `fallback` (the offline detector)
    for that window, counted in `stats["fallback_windows"]`. No reply at all (`LLMUnavailable`)
    propagates: the caller keeps the turns pending, as for AMU extraction."""

    name = "llm"
    STAGE = "fta_segment"

    def __init__(self, llm: Any, fallback: BoundaryDetector | None = None, *, temperature: float | None = None,
                 prompt: str = "fta_segment") -> None:
        self.llm = llm
        self.fallback = fallback if fallback is not None else OfflineBoundaryDetector()
        self.temperature = temperature
        self.prompt = prompt
        load_prompt(prompt)  # fail early when the template is missing
        self._lock = threading.Lock()
        self._stats = {"windows": 0, "llm_windows": 0, "fallback_windows": 0}

    @property
    def stats(self) -> dict[str, int]:
        with self._lock:
            return dict(self._stats)

    def build_messages(self, turns: Sequence[Turn], start: int, end: int) -> list[dict[str, str]]:
        mid = (start + end) // 2
        spans = [{"turn_span": [start, mid], "boundary_trigger": "session_start" if start == 0 else "unknown"},
                 {"turn_span": [mid + 1, end], "boundary_trigger": "topic_change"}] if end > start else \
            [{"turn_span": [start, end], "boundary_trigger": "session_start" if start == 0 else "unknown"}]
        text = render_prompt(self.prompt, turns=_format_turns(turns, start, end), first=start, last=end,
                             triggers=", ".join(TRIGGERS), example=json.dumps({"segments": spans}))
        return [{"role": "user", "content": text}]

    def detect(self, turns: Sequence[Turn], start: int, end: int) -> list[Cut]:
        params = {} if self.temperature is None else {"temperature": self.temperature}
        try:
            cuts = self.llm.complete_json(self.build_messages(turns, start, end), stage=self.STAGE,
                                          validate=lambda r: parse_segment_reply(r, start, end),
                                          schema=segments_schema(start, end), **params)
            if not isinstance(cuts, list):  # an llm object that does not apply `validate`
                cuts = parse_segment_reply(cuts, start, end)
        except LLMUnavailable:
            raise
        except (LLMError, ValueError) as exc:
            logger.warning("fta segmentation: unusable LLM reply for turns %d-%d (%s); offline detector",
                           start, end, exc)
            with self._lock:
                self._stats["windows"] += 1
                self._stats["fallback_windows"] += 1
            return self.fallback.detect(turns, start, end)
        with self._lock:
            self._stats["windows"] += 1
            self._stats["llm_windows"] += 1
        return cuts


__all__ = ["BoundaryDetector", "BoundaryScore", "Cut", "LLMBoundaryDetector", "MODES", "OfflineBoundaryDetector",
           "Segment", "Segmentation", "TRIGGERS", "WINDOW", "cue_phrase", "depth_scores", "is_question",
           "parse_segment_reply", "score_boundaries", "segment_dialogue", "segment_session", "segment_starts",
           "splits_qa"]
