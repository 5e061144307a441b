"""Knowledge updates as benchmark items (`etamem bench updates [FILE] --filler PATH`, issue 32):
facts that change, the current fact asked about now, the old one about the past.

Scenarios (default: the shipped `etamem/data/updates.json`; a list, or `{"scenarios": [...]}`)
are `{id, kind, split, old, new, now, past}` with an optional `gap_days` (default 30). They are
put into memories of `GROUP_SIZE` scenarios of distinct kinds (seeded); each memory holds
`FILLER_CHATS` real PrefEval chats (`filtered_inter_turns.json`, given by path; each its own
session on its own day) and, per scenario, a session where the user says `old` (day d) and one
where the user says `new` (day d + gap_days), each with a short assistant reply. Both questions
are asked a day after the last session; evidence: the `new` turn for the now-question (the
`old` turn is its stale turn), the `old` turn for the past-question.

A LongMemEval-format FILE is recognised instead: its `knowledge-update` questions, one memory
each (their own haystack); the current evidence is the `has_answer` turns of the latest dated
answer session, the stale evidence those of the earlier answer sessions; no past question.

Ids: spaces `updates-<split>-<g>` (`updates-<split>-c<chats>t<turns>-<g>` with a shortened filler), sessions `upd-<id>-old` / `upd-<id>-new` (turns
`upd-<id>:old` / `upd-<id>:new`, replies `...-reply`) and `chat-<n>` (turns `chat-<n>:<k>`,
n the chat's 1-based place in the filler file), questions `upd-<id>:now` / `upd-<id>:past`;
categories `now:<kind>` / `past:<kind>` (LongMemEval: `now:knowledge-update`).

Metrics (`update_metrics`, over the distinct ranked turns): now-questions `current_first` (the
first turn is current evidence) and `current_before_old` (a current turn ranks before every
stale one, an absent turn counting as after; left out without stale evidence); past-questions
`old_in_5` and `old_first`; recall@k of the evidence for both.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

from etamem.bench.items import BenchConversation, BenchQuestion
from etamem.bench.metrics import evidence_recall
from etamem.ingest.datasets import load_json, read_longmemeval, shape_guard
from etamem.ingest.timeparse import parse_timestamp

SPLITS = ("dev", "test", "all")
GROUP_SIZE = 8  # scenarios per memory
FILLER_CHATS = 6  # PrefEval chats per memory
DEFAULT_GAP_DAYS = 30
START = datetime(2023, 3, 1, 9, 0)  # day 0 of every memory
OLD_SPAN_DAYS = 40  # the old facts are said on days 0..40
REPLIES = ("Got it, thanks for letting me know.", "Thanks for telling me, noted.", "Good to know, I'll remember that.",
           "Okay, noted!", "Thanks for the update.", "Got it.")
FIELDS = ("id", "kind", "split", "old", "new", "now", "past")
LME_CATEGORY = "now:knowledge-update"


@dataclass(frozen=True)
class Scenario:
    """One fact that changes: said `old`, then `new` `gap_days` later; a question about now and one about the past."""

    id: str
    kind: str
    split: str
    old: str
    new: str
    now: str
    past: str
    gap_days: int = DEFAULT_GAP_DAYS


def shipped_scenarios() -> str:
    """The path of the scenarios shipped with the package (etamem/data/updates.json)."""
    return str(resources.files("etamem.data").joinpath("updates.json"))


def read_scenarios(path: str | Path) -> list[Scenario]:
    """The scenarios of a JSON file; ValueError naming the file and the scenario when malformed."""
    data = load_json(path)
    if isinstance(data, dict):
        data = data.get("scenarios")
    if not isinstance(data, list) or not data:
        raise ValueError(f"{path}: expected a non-empty list of scenarios (or {{\"scenarios\": [...]}})")
    out: list[Scenario] = []
    for i, rec in enumerate(data):
        with shape_guard(path, "scenario", i):
            values = {f: rec[f] for f in FIELDS}
            bad = [f for f, v in values.items() if not isinstance(v, str) or not v.strip()]
            if bad:
                raise TypeError(f"{', '.join(bad)}: expected non-empty strings")
            gap = rec.get("gap_days", DEFAULT_GAP_DAYS)
            if isinstance(gap, bool) or not isinstance(gap, int) or gap < 1:
                raise TypeError(f"gap_days: expected a positive whole number of days, got {gap!r}")
        if values["split"] not in ("dev", "test"):
            raise ValueError(f"{path}: scenario {i}: split: expected dev or test, got {values['split']!r}")
        out.append(Scenario(**values, gap_days=gap))
    ids = [s.id for s in out]
    dup = sorted({x for x in ids if ids.count(x) > 1})
    if dup:
        raise ValueError(f"{path}: scenario ids repeated: {', '.join(dup)}")
    return out


def read_filler(path: str | Path | None) -> list[list[tuple[str, str]]]:
    """PrefEval's chats as (role, text) lists: a PrefEval directory or its `filtered_inter_turns.json`;
    ValueError when missing or malformed."""
    if not path:
        raise ValueError("--filler PATH is required for the update scenarios: PrefEval's directory or its "
                         "filtered_inter_turns.json (real chats placed between the facts)")
    file = Path(path)
    if file.is_dir():
        file = file / "filtered_inter_turns.json"
    if not file.is_file():
        raise ValueError(f"--filler: {file} does not exist (expected PrefEval's directory or filtered_inter_turns.json)")
    chats = load_json(file)
    if not isinstance(chats, list) or not chats:
        raise ValueError(f"{file}: expected a non-empty list of chats")
    out = []
    for i, chat in enumerate(chats):
        with shape_guard(file, "chat", i):
            msgs = []
            for m in chat["conversation"]:
                if m["role"] not in ("user", "assistant") or not isinstance(m["content"], str):
                    raise TypeError(f"message role {m['role']!r}: expected user/assistant with string content")
                if m["content"].strip():
                    msgs.append((m["role"], m["content"]))
        out.append(msgs)
    return out


def group(scenarios: Sequence[Scenario], seed: int = 0) -> list[list[Scenario]]:
    """Scenarios in groups of about `GROUP_SIZE`, of distinct kinds while no kind has more
    scenarios than there are groups (seeded: kinds and scenarios shuffled, dealt round robin)."""
    rng = random.Random(f"updates:{seed}")
    by_kind: dict[str, list[Scenario]] = {}
    for s in sorted(scenarios, key=lambda s: s.id):
        by_kind.setdefault(s.kind, []).append(s)
    kinds = sorted(by_kind)
    rng.shuffle(kinds)
    flat = []
    for kind in kinds:
        rng.shuffle(by_kind[kind])
        flat += by_kind[kind]
    n = -(-len(flat) // GROUP_SIZE)
    return [flat[g::n] for g in range(n)]


def _stamp(t: datetime) -> str:
    return t.isoformat(timespec="minutes")


def memory(scenarios: Sequence[Scenario], chats: list[list[tuple[str, str]]], space: str,
           seed: int = 0, filler_chats: int = FILLER_CHATS, filler_turns: int = 0) -> BenchConversation:
    """One memory: a seeded subset of `filler_chats` chats (each cut to its first `filler_turns`
    messages; 0: whole) and each scenario's old and new session. A shortened memory has the same
    fact sessions on the same days, in a space of its own (`<space>` with `c<chats>t<turns>-`
    before its number: a shared --stores never serves the whole memory for it)."""
    rng = random.Random(f"updates:{seed}:{space}")
    if (filler_chats, filler_turns) != (FILLER_CHATS, 0):
        head, _, number = space.rpartition("-")
        space = f"{head}-c{filler_chats}t{filler_turns}-{number}"
    Session = tuple[datetime, int, str, list[tuple[str, str, str]]]  # (start, order, id, [(turn id, role, text)])
    sessions: list[Session] = []

    def at(day: int) -> datetime:
        return START + timedelta(days=day, minutes=rng.randrange(0, 12 * 60))

    taken: set[int] = set()
    for s in scenarios:
        d = rng.randint(0, OLD_SPAN_DAYS)
        taken |= {d, d + s.gap_days}
        for part, day, text in (("old", d, s.old), ("new", d + s.gap_days, s.new)):
            sessions.append((at(day), len(sessions), f"upd-{s.id}-{part}",
                             [(f"upd-{s.id}:{part}", "user", text), (f"upd-{s.id}:{part}-reply", "assistant",
                                                                      rng.choice(REPLIES))]))
    picked = sorted(rng.sample(range(len(chats)), min(filler_chats, len(chats))))
    last = max(taken, default=0)
    free = [d for d in range(last + 1) if d not in taken]  # a chat's day has no fact session
    free += range(last + 1, last + 1 + max(0, len(picked) - len(free)))
    days = sorted(rng.sample(free, len(picked)))
    for n, day in zip(picked, days):
        sessions.append((at(day), len(sessions), f"chat-{n + 1}",
                         [(f"chat-{n + 1}:{k}", role, text)
                          for k, (role, text) in enumerate(chats[n][:filler_turns or None], 1)]))
    sessions.sort()
    turns: list[dict[str, Any]] = []
    clock = START - timedelta(minutes=1)
    for start, _, sid, messages in sessions:
        for tid, role, text in messages:  # a minute apart, never before the previous turn
            clock = max(start, clock + timedelta(minutes=1))
            turns.append({"turn_id": tid, "session_id": sid, "speaker": role, "text": text,
                          "timestamp": _stamp(clock), "extra": {}})
            start = clock
    now = _stamp(clock + timedelta(days=1))
    questions = []
    for s in scenarios:
        old, new = f"upd-{s.id}:old", f"upd-{s.id}:new"
        questions += [BenchQuestion(qid=f"upd-{s.id}:now", space=space, question=s.now, answer=s.new,
                                    category=f"now:{s.kind}", now=now, gold_turns=[new], stale_turns=[old]),
                      BenchQuestion(qid=f"upd-{s.id}:past", space=space, question=s.past, answer=s.old,
                                    category=f"past:{s.kind}", now=now, gold_turns=[old], stale_turns=[new])]
    return BenchConversation(space, turns, questions)


def is_longmemeval(path: str | Path) -> bool:
    """Whether a JSON file looks like LongMemEval's (its records start with `question_id`)."""
    try:
        with Path(path).open("rb") as fh:
            head = fh.read(1 << 16)
    except OSError:
        return False
    return head.lstrip().startswith(b"[") and b'"question_id"' in head


def load_longmemeval_updates(path: str | Path) -> list[BenchConversation]:
    """The `knowledge-update` questions of a LongMemEval-format file, one memory each."""
    out = []
    for conv in read_longmemeval(path):
        q = conv.questions[0]
        if q.get("question_type") != "knowledge-update":
            continue
        with shape_guard(path, f"{conv.space} question", 0):
            answer_sessions = [str(s) for s in q.get("answer_session_ids") or []]
            dates = dict(zip(q["haystack_session_ids"], q["haystack_dates"]))
            order = {sid: i for i, sid in enumerate(q["haystack_session_ids"])}
        present = [s for s in answer_sessions if s in dates]
        latest = max(present, key=lambda s: (parse_timestamp(dates[s], field=f"{path}: {s} date"), order[s]),
                     default=None)
        marked = [t for t in conv.turns if t.get("extra", {}).get("has_answer")]
        qid = str(q["question_id"])
        bq = BenchQuestion(qid=qid, space=conv.space, question=q["question"], answer=str(q.get("answer", "")),
                           category=LME_CATEGORY, now=conv.question_date,
                           gold_turns=[t["turn_id"] for t in marked if t["session_id"] == latest],
                           stale_turns=[t["turn_id"] for t in marked
                                        if t["session_id"] in present and t["session_id"] != latest],
                           gold_sessions=[latest] if latest else [], abstention=qid.endswith("_abs"))
        user_turns = {t["turn_id"] for t in conv.turns if t["speaker"] == "user"}
        out.append(BenchConversation(conv.space, conv.turns, [bq], user_turns))
    if not out:
        raise ValueError(f"{path}: no knowledge-update question in this LongMemEval-format file")
    return out


def load_updates(path: str | Path | None = None, filler: str | Path | None = None, split: str | None = None,
                 seed: int = 0, filler_chats: int | None = None, filler_turns: int | None = None
                 ) -> list[BenchConversation]:
    """The memories of a scenarios file (default: the shipped one) with `filler` chats, for
    `split` (dev by default; test, all), or the knowledge-update questions of a LongMemEval file
    (no filler needed, no split). `filler_chats` chats per memory (default `FILLER_CHATS`), each
    cut to its first `filler_turns` messages (default: whole): a shorter memory for runs that
    classify every write with an LLM."""
    split = split or "dev"
    for name, value in (("filler_chats", filler_chats), ("filler_turns", filler_turns)):
        if value is not None and value < 0:
            raise ValueError(f"{name}: expected 0 or more, got {value}")
    if split not in SPLITS:
        raise ValueError(f"--split: expected one of {', '.join(SPLITS)}, got {split!r}")
    path = path or shipped_scenarios()
    if is_longmemeval(path):
        return load_longmemeval_updates(path)
    scenarios = [s for s in read_scenarios(path) if split == "all" or s.split == split]
    if not scenarios:
        raise ValueError(f"{path}: no scenario in the {split} split")
    chats = read_filler(filler)
    size = {"filler_chats": FILLER_CHATS if filler_chats is None else filler_chats, "filler_turns": filler_turns or 0}
    return [memory(g, chats, f"updates-{split}-{i}", seed, **size) for i, g in enumerate(group(scenarios, seed), 1)]


def _first(ranked: Sequence[str], turns: Sequence[str]) -> int | None:
    """The 0-based rank of the first of `turns` in `ranked`, None when none is there."""
    wanted = set(turns)
    return next((i for i, t in enumerate(ranked) if t in wanted), None)


def update_metrics(ranked: Sequence[str], q: BenchQuestion, ks: Sequence[int]) -> dict[str, float]:
    """The metrics of one question over its distinct ranked turns (see the module docstring)."""
    out = {f"recall@{k}": evidence_recall(ranked, q.gold_turns, k) for k in ks}
    gold = _first(ranked, q.gold_turns)
    if q.category.startswith("past:"):
        out["old_first"] = float(gold == 0)
        out["old_in_5"] = float(gold is not None and gold < 5)
        return out
    out["current_first"] = float(gold == 0)
    if q.stale_turns:
        stale = _first(ranked, q.stale_turns)
        out["current_before_old"] = float(gold is not None and (stale is None or gold < stale))
    return out
