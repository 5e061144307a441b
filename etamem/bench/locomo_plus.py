"""LoCoMo-Plus cognitive cues as benchmark items (xjtuleeyf/Locomo-Plus, `data/locomo_plus.json`,
read unchanged, with the LoCoMo file its items are stitched into).

An item holds a two-turn cue dialogue ("A: ...\\nB: ..."), a trigger said later ("A: ...") that
shares little wording with the cue, a `time_gap` ("two months later"), a `relation_type`
(causal, state, goal, value) and `locomo_conversation`, the index of the LoCoMo sample it is
stitched into (required: an item without it raises ValueError naming the item).

Stitching follows the benchmark's `data/build_conv.py`: the trigger is asked 7 days after the
conversation's last session; the cue is said `time_gap` before that; A is the conversation's
`speaker_a`, B its `speaker_b`. A gap is read as its first "<number> week(s)/month(s)/year(s)"
(digits, one..twelve, "a"/"an"; 7, 30, 365 days per unit); a gap without one ("several months
later", "a few weeks later") counts as 0 days, the cue then said at the trigger's time — the
benchmark's own quirk, kept so the stitching matches it.

Each item is one question of its LoCoMo conversation (space = the LoCoMo `sample_id`, so the
stores built for LoCoMo serve it unchanged): question = the trigger without its "A: ", `now` =
the trigger's time, category = the relation type, gold turns = the cue's turns. The cue is not
part of the conversation's turns: it travels in `BenchQuestion.cue_turns` (session `plus-<i>`,
turns `plus-<i>:1`, `plus-<i>:2`, `i` the item's index in the file) and the runner adds it to
the memory for that question only. Question ids `<sample_id>:plus-<i>`.
"""
from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from etamem.bench.items import CUE_SESSION_PREFIX, BenchConversation, BenchQuestion
from etamem.ingest.datasets import read_locomo, shape_guard

RELATION_TYPES = ("causal", "state", "goal", "value")
QUERY_DELAY = timedelta(days=7)  # the trigger: 7 days after the last session
LOCOMO_TIME = "%I:%M %p on %d %B, %Y"  # "1:56 pm on 8 May, 2023"
UNIT_DAYS = {"week": 7, "month": 30, "year": 365}
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
            "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}
_GAP = re.compile(r"\b(\d+|" + "|".join(_NUMBERS) + r")\b\s*(week|month|year)s?\b")
_LINE = re.compile(r"^\s*([AB]):\s*(.*)$")


def gap_days(time_gap: str) -> int:
    """Days a `time_gap` goes back: the first "<number> <unit>" found (see the module
    docstring); 0 when there is none ("several months later")."""
    m = _GAP.search(time_gap.lower())
    if not m:
        return 0
    num, unit = m.groups()
    return (int(num) if num.isdigit() else _NUMBERS[num]) * UNIT_DAYS[unit]


def parse_dialogue(text: str) -> list[tuple[str, str]]:
    """[(A or B, text)] of the lines starting with "A:" / "B:" (others ignored, as the benchmark
    does)."""
    return [(m.group(1), m.group(2).strip()) for line in text.split("\n") if (m := _LINE.match(line))]


def _stamp(t: datetime) -> str:
    return t.isoformat(timespec="minutes")


def _last_session_time(path, sample: dict) -> datetime:
    conv = sample["conversation"]
    dates = [conv[f"session_{n}_date_time"] for n in _session_numbers(conv)]
    if not dates:
        raise ValueError(f"{path}: sample {sample.get('sample_id')!r} has no session")
    try:
        return datetime.strptime(dates[-1].strip(), LOCOMO_TIME)
    except ValueError:
        raise ValueError(f"{path}: sample {sample.get('sample_id')!r}: session date {dates[-1]!r} is not in the "
                         "LoCoMo form '1:56 pm on 8 May, 2023'") from None


def _session_numbers(conv: dict) -> list[int]:
    return sorted(int(m.group(1)) for key, value in conv.items()
                  if (m := re.fullmatch(r"session_(\d+)", key)) and isinstance(value, list))


def cue_question(index: int, item: dict, sample: dict, space: str, last: datetime) -> BenchQuestion:
    """Item `index` stitched into a LoCoMo sample whose last session is at `last`."""
    speakers = {"A": sample["conversation"]["speaker_a"], "B": sample["conversation"]["speaker_b"]}
    query_time = last + QUERY_DELAY
    cue_time = query_time - timedelta(days=gap_days(item["time_gap"]))
    sid = f"{CUE_SESSION_PREFIX}{index}"
    cue = parse_dialogue(item["cue_dialogue"])
    trigger = parse_dialogue(item["trigger_query"])
    if not cue or not trigger:
        raise ValueError(f"item {index}: cue_dialogue and trigger_query need 'A: ...' / 'B: ...' lines")
    turns: list[dict[str, Any]] = [{"turn_id": f"{sid}:{k}", "session_id": sid, "speaker": speakers[who],
                                    "text": text, "timestamp": _stamp(cue_time), "extra": {}}
                                   for k, (who, text) in enumerate(cue, 1)]
    question = " ".join(text for _, text in trigger)
    return BenchQuestion(qid=f"{space}:{sid}", space=space, question=question, answer="",
                         category=str(item["relation_type"]), now=_stamp(query_time),
                         gold_turns=[t["turn_id"] for t in turns], cue_turns=turns)


def read_items(path: str | Path) -> list[dict]:
    """The LoCoMo-Plus items; ValueError naming the file and item when one is malformed or
    lacks `locomo_conversation`."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"file: {path} does not exist")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a JSON file ({exc})") from None
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a list of LoCoMo-Plus items")
    for i, item in enumerate(data):
        with shape_guard(path, "item", i):
            if "locomo_conversation" not in item:
                raise ValueError(f"{path}: item {i} has no 'locomo_conversation' (the index of the LoCoMo sample "
                                 "it is stitched into); the runner needs it on every item")
            for key in ("cue_dialogue", "trigger_query", "time_gap", "relation_type"):
                if not isinstance(item[key], str):
                    raise TypeError(f"{key} must be a string")
            if not isinstance(item["locomo_conversation"], int) or isinstance(item["locomo_conversation"], bool):
                raise TypeError("locomo_conversation must be an integer index")
    return data


def load_locomo_plus(path: str | Path, locomo: str | Path | None) -> list[BenchConversation]:
    """One BenchConversation per LoCoMo sample that has items: its turns as the LoCoMo loader
    gives them and one question per item (in file order)."""
    if not locomo:
        raise ValueError("locomo-plus needs the LoCoMo file its items are stitched into (--locomo FILE)")
    items = read_items(path)
    convs = list(read_locomo(locomo))  # validates the file
    samples = json.loads(Path(locomo).read_text(encoding="utf-8"))
    questions: dict[int, list[BenchQuestion]] = {}
    last: dict[int, datetime] = {}
    for i, item in enumerate(items):
        n = item["locomo_conversation"]
        if not 0 <= n < len(convs):
            raise ValueError(f"{path}: item {i}: locomo_conversation {n} is not an index of {locomo} "
                             f"({len(convs)} samples)")
        with shape_guard(locomo, "sample", n):
            if n not in last:
                last[n] = _last_session_time(locomo, samples[n])
        with shape_guard(path, "item", i):
            questions.setdefault(n, []).append(cue_question(i, item, samples[n], convs[n].space, last[n]))
    return [BenchConversation(convs[n].space, convs[n].turns, questions[n]) for n in sorted(questions)]
