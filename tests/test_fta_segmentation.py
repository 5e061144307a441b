"""FTA-Mem boundary-preserving window segmentation (etamem/fta/segmentation.py)."""
from __future__ import annotations

import json
import random
from datetime import datetime, timedelta, timezone

import pytest

from etamem.fta.segmentation import (
    TRIGGERS,
    Cut,
    LLMBoundaryDetector,
    OfflineBoundaryDetector,
    Segment,
    cue_phrase,
    depth_scores,
    is_question,
    parse_segment_reply,
    score_boundaries,
    segment_dialogue,
    segment_session,
    segment_starts,
    splits_qa,
)
from etamem.models.llm import LLMClient, LLMUnavailable
from etamem.models.prompt_files import load_prompt, placeholders
from etamem.records import Turn
from fta_dialogues import DIALOGUES, boundary_quality, dialogue_turns
from llm_server import Reply

T0 = datetime(2023, 5, 8, 18, 0, tzinfo=timezone.utc)


def make_turns(n: int, session: str = "s1", *, texts=None, speakers=("Ann", "Bob"), gaps=None) -> list[Turn]:
    out, ts = [], T0
    for i in range(n):
        ts = ts + (gaps.get(i, timedelta(minutes=1)) if gaps else timedelta(minutes=1))
        text = texts[i] if texts else f"statement number {i} about something."
        out.append(Turn(f"{session}:{i}", session, speakers[i % len(speakers)], text, ts))
    return out


class Scripted:
    """A detector that answers from a function of (start, end) and records the windows."""

    name = "scripted"

    def __init__(self, fn):
        self.fn = fn
        self.windows: list[tuple[int, int]] = []

    def detect(self, turns, start, end):
        self.windows.append((start, end))
        return list(self.fn(start, end))


def assert_partition(segments: list[Segment], turns: list[Turn]) -> None:
    """Every turn in exactly one segment, segments contiguous and in order, metadata right."""
    ids = [t for s in segments for t in s.turn_ids]
    assert ids == [t.turn_id for t in turns]
    pos = 0
    for s in segments:
        assert s.start == pos and s.end >= s.start and len(s) == len(s.turn_ids)
        assert s.turn_ids == tuple(t.turn_id for t in turns[s.start:s.end + 1])
        assert s.session_id == turns[0].session_id
        assert s.start_time == turns[s.start].timestamp and s.end_time == turns[s.end].timestamp
        pos = s.end + 1
    assert pos == len(turns)


# --- Algorithm 1 invariants ------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(40))
def test_bws_partitions_every_turn_once_in_order_whatever_the_detector_says(seed):
    rng = random.Random(seed)
    n, window = rng.randint(1, 90), rng.choice([2, 3, 5, 20])
    turns = make_turns(n)

    def noisy(start, end):  # cuts anywhere, including at the window start, outside it, repeated
        return [Cut(rng.randint(start - 3, end + 3), rng.choice(TRIGGERS), rng.random())
                for _ in range(rng.randint(0, 6))]

    det = Scripted(noisy)
    result = segment_session(turns, det, window=window)
    assert_partition(result.segments, turns)
    assert all(s.final for s in result.segments)
    assert result.windows == len(det.windows) <= max(1, n)
    starts = [w[0] for w in det.windows]
    assert starts == sorted(set(starts)), "the window start strictly increases (progress)"
    assert all(e == min(s + window - 1, n - 1) for s, e in det.windows)


@pytest.mark.parametrize("answer", [lambda s, e: [], lambda s, e: [Cut(s)], lambda s, e: [Cut(0), Cut(-1)]])
def test_bws_progress_when_the_detector_finds_no_boundary_or_one_at_the_window_start(answer):
    turns = make_turns(50)
    det = Scripted(answer)
    result = segment_session(turns, det, window=20)
    assert [(s.start, s.end) for s in result.segments] == [(0, 49)]
    # s <- max(b_last, s + 1): one window per start 0..30, the last one reaching the session end
    assert det.windows == [(s, min(s + 19, 49)) for s in range(31)]
    assert result.windows == 31 and result.forced_steps == 30


def test_bws_provisional_last_segment_is_redetected_in_the_next_window():
    turns = make_turns(45)
    every7 = Scripted(lambda s, e: [Cut(b, "topic_change") for b in range(7, 45, 7) if s < b <= e])
    result = segment_session(turns, every7, window=20)
    # window 0-19: cuts 7, 14 -> [0-6], [7-13] final, [14-19] provisional -> next window starts at 14
    assert every7.windows == [(0, 19), (14, 33), (28, 44)]
    assert [(s.start, s.end) for s in result.segments] == [(0, 6), (7, 13), (14, 20), (21, 27), (28, 34),
                                                           (35, 41), (42, 44)]
    assert [s.trigger for s in result.segments] == ["session_start"] + ["topic_change"] * 6
    assert result.forced_steps == 0


def test_bws_carried_turns_stay_with_the_provisional_segment_after_a_forced_step():
    turns = make_turns(30)
    # no cut in the first window; then a cut at 25
    det = Scripted(lambda s, e: [Cut(25, "topic_change")] if s < 25 <= e else [])
    result = segment_session(turns, det, window=20)
    assert [(s.start, s.end) for s in result.segments] == [(0, 24), (25, 29)]
    assert det.windows[:3] == [(0, 19), (1, 20), (2, 21)]


def test_bws_max_carry_bounds_the_detector_calls_on_an_unbroken_stretch():
    turns = make_turns(100)
    det = Scripted(lambda s, e: [])
    result = segment_session(turns, det, window=20, max_carry=20)
    assert_partition(result.segments, turns)
    assert len(det.windows) == 81  # still one window per forced step ...
    assert max(len(s) for s in result.segments) <= 20  # ... but no segment grows past the bound
    assert [s.trigger for s in result.segments][1:] == ["max_carry"] * (len(result.segments) - 1)


def test_incomplete_session_keeps_the_segment_at_the_end_provisional():
    turns = make_turns(30)
    det = Scripted(lambda s, e: [Cut(b) for b in (10, 24) if s < b <= e])
    result = segment_session(turns, det, window=20, complete=False)
    assert [(s.start, s.end, s.final) for s in result.segments] == [(0, 9, True), (10, 23, True), (24, 29, False)]
    assert segment_session(turns, det, window=20).segments[-1].final


def test_one_session_at_a_time_and_bad_arguments():
    turns = make_turns(5) + make_turns(3, session="s2")
    with pytest.raises(ValueError, match="one session"):
        segment_session(turns, Scripted(lambda s, e: []))
    with pytest.raises(ValueError, match="mode"):
        segment_session(make_turns(3), mode="sliding")
    with pytest.raises(ValueError, match="needs a boundary detector"):
        segment_session(make_turns(3))
    with pytest.raises(ValueError, match="window"):
        segment_session(make_turns(3), Scripted(lambda s, e: []), window=1)
    assert segment_session([], Scripted(lambda s, e: [])).segments == []


# --- questions and answers -------------------------------------------------------------------
QA_TEXTS = ["I went hiking on Saturday.", "Where did you go?", "Up Mount Tam, the view was great.",
            "Did you go alone?", "With my sister.", "Nice. Are you going again soon?", "Maybe next month.",
            "I started a pottery class.", "Really? Is it hard?", "The wheel is hard, hand building is easy.",
            "What did you make?", "A small bowl 🙂", "Can I see it?", "Sure, next time you visit."]


@pytest.mark.parametrize("mode", ["bws", "fixed", "fixed-detect"])
@pytest.mark.parametrize("window", [2, 3, 4, 20])
def test_a_question_and_its_answer_are_never_split(mode, window):
    turns = make_turns(len(QA_TEXTS), texts=QA_TEXTS)
    everywhere = Scripted(lambda s, e: [Cut(b) for b in range(s, e + 2)])
    segments = segment_session(turns, everywhere, mode=mode, window=window).segments
    assert_partition(segments, turns)
    for s in segments[1:]:
        assert not splits_qa(turns, s.start), f"{mode}: cut between {turns[s.start - 1].text!r} and its answer"
    assert len(segments) > 1 or (mode == "fixed" and window >= len(turns))  # the guard did not stop every cut


def test_question_detection():
    mk = lambda text, sp="Ann": Turn("x", "s", sp, text, T0)  # noqa: E731
    assert is_question(mk("Is it hard?")) and is_question(mk('He asked "why?"')) and is_question(mk("Really? 🙂"))
    assert not is_question(mk("Why not. I'll go.")) and not is_question(mk(""))
    same = [mk("Is it hard?"), mk("I wonder.")]  # the same speaker goes on: not an answer
    assert not splits_qa(same, 1)
    assert splits_qa([mk("Is it hard?"), mk("Yes.", "Bob")], 1)


def test_keep_qa_can_be_switched_off():
    turns = make_turns(4, texts=["Where were you?", "At home.", "Ok.", "Bye."])
    det = Scripted(lambda s, e: [Cut(1)])
    assert segment_starts(segment_session(turns, det, keep_qa=False).segments) == [1]
    assert segment_starts(segment_session(turns, det).segments) == []


# --- offline detector: time gaps and cue phrases -----------------------------------------------
def test_time_gap_splits_and_never_between_a_question_and_its_answer():
    texts = ["I fed the cat.", "Good.", "I am going to bed now.", "Good night.",
             "Morning! I slept badly.", "Why was that?", "Noisy neighbours.", "Ugh."]
    gaps = {4: timedelta(hours=9), 6: timedelta(hours=3)}  # 6 answers the question at 5
    turns = make_turns(len(texts), texts=texts, gaps=gaps)
    det = OfflineBoundaryDetector(None, min_segment=1)
    segments = segment_session(turns, det).segments
    assert segment_starts(segments) == [4]
    assert segments[1].trigger == "time_gap"
    assert segment_starts(segment_session(turns, OfflineBoundaryDetector(None, time_gap=timedelta(hours=12),
                                                                        min_segment=1)).segments) == []


@pytest.mark.parametrize("text,cue", [
    ("By the way, did you hear back about the job?", "by the way"),
    ("Oh, btw I got the tickets.", "btw"),
    ("Anyway, how is the new flat?", "anyway"),
    ("Speaking of money, I paid off my loan.", "speaking of"),
    ("So, on another note, my brother is getting married.", "on another note"),
    ("Hey Mia, enough about me, how is the thesis?", "enough about me"),
    ("How about you, any plans for the weekend?", "how about you"),
    ("I love the way you cook.", None),
    ("The lake was calm anyway.", None),
])
def test_cue_phrases_open_a_turn(text, cue):
    assert cue_phrase(text) == cue


def test_cue_phrase_cuts_without_an_encoder():
    texts = ["I baked bread today.", "How did it turn out?", "Dense but tasty.", "Nice work.",
             "By the way, my sister had a baby.", "Congratulations!", "Thanks, his name is Theo."]
    cuts = OfflineBoundaryDetector(None).detect(make_turns(len(texts), texts=texts), 0, len(texts) - 1)
    assert [(c.at, c.trigger) for c in cuts] == [(4, "topic_change")] and "by the way" in cuts[0].detail


def test_depth_scores_follow_texttiling():
    sims = [0.9, 0.8, 0.3, 0.7, 0.9, 0.85, 0.6, 0.95]
    d = depth_scores(sims)
    assert d[2] == pytest.approx((0.9 - 0.3) + (0.9 - 0.3))  # climbs to both peaks
    assert d[6] == pytest.approx((0.9 - 0.6) + (0.95 - 0.6))
    assert d[0] == d[1] == d[3] == d[4] == 0  # not valleys


def test_boundary_scoring_is_one_to_one_with_a_tolerance():
    s = score_boundaries([5, 6, 12, 30], [5, 11, 20], tolerance=1)
    assert (s.matched, s.predicted, s.gold) == (2, 4, 3)
    assert s.precision == 0.5 and s.recall == pytest.approx(2 / 3)
    assert score_boundaries([], []).f1 == 1.0 and score_boundaries([3], [], 1).precision == 0.0


def test_fixture_gold_boundaries_never_split_a_question_from_its_answer():
    assert len(DIALOGUES) >= 12
    for i in range(len(DIALOGUES)):
        turns, gold = dialogue_turns(i)
        assert not any(splits_qa(turns, g) for g in gold)


def test_offline_detector_boundary_quality_on_the_synthetic_dialogues(minilm):
    """Recall and precision of BWS + the offline detector against the known topic changes (+-1
    turn). Measured (all-MiniLM-L6-v2): dialogues P 0.909 R 0.938; long sessions P 1.0 R 0.886.
    `python tests/fta_dialogues.py` prints them."""
    q = boundary_quality(OfflineBoundaryDetector(minilm))
    for name in ("dialogues", "long_sessions"):
        assert q[name]["precision"] >= 0.8 and q[name]["recall"] >= 0.8, (name, q[name])
    assert q["long_sessions"]["windows"] > q["long_sessions"]["sessions"]  # several windows per session


def test_offline_detector_is_deterministic_and_window_independent(minilm):
    turns, _ = dialogue_turns(2)
    det = OfflineBoundaryDetector(minilm)
    a = segment_starts(segment_session(turns, det, window=20).segments)
    b = segment_starts(segment_session(turns, OfflineBoundaryDetector(minilm), window=8).segments)
    assert a == b == segment_starts(segment_session(turns, det, window=20).segments)


# --- other modes ----------------------------------------------------------------------------
def test_fixed_session_and_turn_pair_modes():
    turns = make_turns(45)
    fixed = segment_session(turns, mode="fixed", window=20).segments
    assert [(s.start, s.end) for s in fixed] == [(0, 19), (20, 39), (40, 44)]
    assert [s.trigger for s in fixed] == ["session_start", "window", "window"]
    one = segment_session(turns, mode="session").segments
    assert [(s.start, s.end, s.trigger) for s in one] == [(0, 44, "session_start")]
    pairs = segment_session(turns[:5], mode="turn-pair").segments
    assert [(s.start, s.end) for s in pairs] == [(0, 1), (2, 3), (4, 4)]
    same = make_turns(4, speakers=("Ann", "Ann", "Bob", "Ann"))  # a turn alone when the next is not a reply
    assert [(s.start, s.end) for s in segment_session(same, mode="turn-pair").segments] == [(0, 0), (1, 2), (3, 3)]


def test_fixed_detect_mode_runs_the_detector_per_window_without_carry():
    turns = make_turns(45)
    det = Scripted(lambda s, e: [Cut(b) for b in (7, 18, 30) if s < b <= e])
    result = segment_session(turns, det, mode="fixed-detect", window=20)
    assert det.windows == [(0, 19), (20, 39), (40, 44)]
    assert [(s.start, s.end) for s in result.segments] == [(0, 6), (7, 17), (18, 19), (20, 29), (30, 39), (40, 44)]


def test_segment_dialogue_segments_each_session():
    turns = make_turns(25, "a") + make_turns(7, "b")
    segs = segment_dialogue(turns, Scripted(lambda s, e: [Cut(10)] if s < 10 <= e else []))
    assert [(s.session_id, s.start, s.end) for s in segs] == [("a", 0, 9), ("a", 10, 24), ("b", 0, 6)]


# --- LLM detector ---------------------------------------------------------------------------
def spans_reply(*spans, trigger="topic_change"):
    return json.dumps({"segments": [{"turn_span": list(s), "boundary_trigger": trigger} for s in spans]})


def test_segment_prompt_renders_every_placeholder():
    assert placeholders(load_prompt("fta_segment")) == {"turns", "first", "last", "triggers", "example"}


def test_parse_segment_reply():
    assert [(c.at, c.trigger) for c in parse_segment_reply(json.loads(spans_reply((3, 5), (6, 9))), 3, 9)] == \
        [(6, "topic_change")]
    reply = {"segments": [{"turn_span": [0, 2]}, {"turn_span": [3, 4], "boundary_trigger": "?"}]}
    cuts = parse_segment_reply(reply, 0, 4)
    assert [(c.at, c.trigger) for c in cuts] == [(3, "unknown")]
    for bad in ({"segments": []}, {"parts": []}, {"segments": [{"turn_span": [0, 12]}]},
                {"segments": [{"turn_span": [0, 5]}, {"turn_span": [4, 9]}]}, {"segments": [{"turn_span": "0-3"}]},
                {"segments": [{"turn_span": [5, 2]}]}):
        with pytest.raises(ValueError):
            parse_segment_reply(bad, 0, 9)


def test_llm_detector_one_call_per_window_and_fallback_on_an_unusable_reply(chat_server):
    turns = make_turns(30, texts=[f"turn {i} text." if i != 22 else "By the way, my cat is sick." for i in range(30)])
    chat_server.script(
        spans_reply((0, 9), (10, 15), (16, 19)),       # window 0-19: final [0-9], [10-15]; 16 provisional
        "this is not json", "still not json",          # window 16-29: unusable after the repair -> offline
    )
    llm = LLMClient("test-model", base_url=chat_server.base_url, max_retries=0)
    det = LLMBoundaryDetector(llm, OfflineBoundaryDetector(None, min_segment=1))
    result = segment_session(turns, det, window=20)
    assert [(s.start, s.end) for s in result.segments] == [(0, 9), (10, 15), (16, 21), (22, 29)]
    assert result.windows == 2
    assert det.stats == {"windows": 2, "llm_windows": 1, "fallback_windows": 1}
    assert llm.usage()["fta_segment"].calls == 3  # one per window, plus the client's one repair round
    first = chat_server.requests[0]["messages"][-1]["content"]
    assert "[0] (id s1:0;" in first and "[19] (id s1:19;" in first and "[20]" not in first
    assert "topic_change" in first and "session_start" in first


def test_llm_detector_without_a_reply_raises(chat_server):
    chat_server.script(Reply(status=400))
    det = LLMBoundaryDetector(LLMClient("m", base_url=chat_server.base_url, max_retries=0))
    with pytest.raises(LLMUnavailable):
        segment_session(make_turns(5), det)
