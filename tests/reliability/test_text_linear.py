"""Text processing stays linear in the input: one adversarial input of about 50,000 characters per
pattern family that used to be quadratic (runs of spaces or punctuation under a search anchored
at the end, a scan to the sentence end per match, the output re-joined per match, candidate
spans compared pairwise), through the real function, within 3x the time of ordinary text of the
same length + 0.5 s (the best of three runs). A call that overruns is interrupted there (a
quadratic one would take minutes)."""
import json
import signal
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from etamem.extraction.extractors import is_salient, is_statement, split_sentences, strip_filler
from etamem.extraction.person_rewrite import rewrite_first_person
from etamem.fta import profiles
from etamem.fta.links import _clauses
from etamem.fta.retrieval import question_form
from etamem.fta.segmentation import segment_session
from etamem.fta.units import RuleUnitExtractor
from etamem.records import Turn
from etamem.retrieval.temporal import parse_time_window

N = 50_000
NOW = datetime(2024, 3, 2, 18, 10, tzinfo=timezone.utc)
DEMO = Path(__file__).resolve().parents[2] / "etamem" / "data" / "demo_conversation.json"


def _ordinary(n: int) -> str:
    sentences = [t["text"] for t in json.loads(DEMO.read_text(encoding="utf-8"))["turns"]]
    return (" ".join(sentences) * (n // 1000 + 1))[:n]


class _Overrun(Exception):
    pass


def _seconds(fn, arg, limit: float | None = None) -> float:
    """Seconds `fn(arg)` takes; fails the test when it runs past `limit` (interrupted there)."""
    size = len(arg if isinstance(arg, str) else arg.text)
    def stop(*_):
        raise _Overrun

    old = signal.signal(signal.SIGALRM, stop)
    if limit is not None:
        signal.setitimer(signal.ITIMER_REAL, limit)
    t = time.perf_counter()
    try:
        fn(arg)
    except _Overrun:
        pytest.fail(f"{fn.__name__} on {size:,} adversarial characters: still running after {limit:.1f} s")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    return time.perf_counter() - t


def _fta_unit(text: str):
    """The longest FTA rule unit of a one-turn segment of `text` (what the profiles read)."""
    turn = Turn(turn_id="t1", session_id="s1", speaker="Maya", text=text, timestamp=NOW)
    segment = segment_session([turn], mode="session").segments[0]
    return max((c.unit for c in RuleUnitExtractor().extract(segment, [turn])), key=lambda u: len(u.text))


def _first_person(text: str) -> str:
    return rewrite_first_person(text, "Maya")


def _time_window(text: str):
    return parse_time_window(text, NOW)


def _salient(text: str) -> bool:
    return is_salient(text, ["Maya", "Jonas"]) or is_statement(text, ["Maya"])


SPACES = "a" + " " * (N - 2) + "b"
CASES = {
    # a run of spaces before an alternative anchored at the end: the trailing "lol" / "haha"
    "trailing interjection": (strip_filler, SPACES),
    # ... the trailing vocative (", Maya!")
    "trailing vocative": (_salient, SPACES),
    # a run of sentence-end punctuation not followed by a space
    "sentence ends": (split_sentences, "!" * N),
    # ", and <speaker>" from every space of a run; and the clause before each match scanned again
    "repeated subject after 'and' (spaces)": (_first_person, SPACES),
    "repeated subject after 'and' (many)": (_first_person, "I go and I go " * (N // 14)),
    # my/me: the output so far re-joined per match
    "my / me objects": (_first_person, "my me " * (N // 6)),
    # "how did ..." scanned to the sentence end per occurrence
    "how ... feel questions": (question_form, "how did " * (N // 8)),
    # time-window candidates compared pairwise
    "time-window candidates": (_time_window, "12 May " * (N // 7)),
    # "but" clauses of the FTA links from every space of a run
    "link clauses": (_clauses, SPACES),
    # a relation's owner ("Ann's sister") from every part of one long hyphenated word
    "relation owners": (profiles._relations, "A-" * (N // 2) + "A visited Ann's sister in the big city"),
}
PREPARE = {"relation owners": _fta_unit}  # the argument made outside the timing


@pytest.mark.parametrize("family", list(CASES))
def test_adversarial_text_takes_linear_time(family):
    fn, text = CASES[family]
    prepare = PREPARE.get(family, lambda t: t)
    ordinary = prepare(_ordinary(len(text)))
    text = prepare(text)
    _seconds(fn, prepare(_ordinary(2000)))  # warm-up (imports, compiled patterns)
    base = min(_seconds(fn, ordinary) for _ in range(2))
    bound = 3 * base + 0.5
    for _ in range(3):  # the best of three: a run slowed by other work on the machine gets two more chances
        took = _seconds(fn, text, limit=bound)  # a quadratic call is interrupted at the bound every time
        if took <= bound:
            break
    assert took <= bound, f"{family}: {took:.2f} s on adversarial text, {base:.2f} s on ordinary text"
