"""PrefEval explicit preferences as benchmark items (amazon-science/PrefEval,
`benchmark_dataset/`, read unchanged).

A directory holds `explicit_preference/<topic>.json` (a list of `{preference, question,
explanation}` per topic) and `filtered_inter_turns.json` (real user/assistant chats:
`{conversation_id, conversation: [{role, content}], ...}`). Trial i is one user's memory: every
chat as its own session, on days spread by a seeded generator, plus one session per topic in
which the user states item i's preference, on a seeded random day among the chats. Each topic
asks item i's question; its evidence is the preference turn. As many trials as the smallest
topic has items.

Ids: space `prefeval-<i>`, chat sessions `chat-<n>` (turns `chat-<n>:<k>`, 1-based), preference
sessions `pref-<topic>` (turn `pref-<topic>:1`), questions `prefeval-<i>:<topic>`; the category
of a question is its topic.
"""
from __future__ import annotations

import random
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from etamem.bench.items import BenchConversation, BenchQuestion
from etamem.ingest.datasets import load_json, shape_guard

START = datetime(2023, 1, 2, 9, 0)  # the first chat's day
CHAT_GAP_DAYS = (1, 4)  # days between consecutive chats (inclusive range)


def read_prefeval(path: str | Path) -> tuple[dict[str, list[dict]], list[dict]]:
    """(topic -> items, chats) from a PrefEval directory; ValueError naming what is missing or
    malformed."""
    root = Path(path)
    topics_dir, chats_file = root / "explicit_preference", root / "filtered_inter_turns.json"
    if not topics_dir.is_dir():
        raise ValueError(f"{root}: expected a PrefEval directory with explicit_preference/ and "
                         "filtered_inter_turns.json")
    topics: dict[str, list[dict]] = {}
    for file in sorted(topics_dir.glob("*.json")):
        items = load_json(file)
        if not isinstance(items, list) or not items:
            raise ValueError(f"{file}: expected a non-empty list of {{preference, question}} items")
        for i, item in enumerate(items):
            with shape_guard(file, "item", i):
                if not (isinstance(item["preference"], str) and isinstance(item["question"], str)):
                    raise TypeError("preference and question must be strings")
        topics[file.stem] = items
    if not topics:
        raise ValueError(f"{topics_dir}: no <topic>.json file")
    chats = load_json(chats_file)
    if not isinstance(chats, list) or not chats:
        raise ValueError(f"{chats_file}: expected a non-empty list of chats")
    for i, chat in enumerate(chats):
        with shape_guard(chats_file, "chat", i):
            for m in chat["conversation"]:
                if m["role"] not in ("user", "assistant") or not isinstance(m["content"], str):
                    raise TypeError(f"message role {m['role']!r}: expected user/assistant with string content")
    return topics, chats


def _stamp(day: datetime) -> str:
    return day.isoformat(timespec="minutes")


def trial(topics: dict[str, list[dict]], chats: list[dict], index: int, seed: int = 0) -> BenchConversation:
    """Trial `index`: the chats and item `index` of every topic's preference as one memory."""
    rng = random.Random(f"prefeval:{seed}:{index}")
    sessions: list[tuple[datetime, int, str, list[tuple[str, str]]]] = []  # (start, order, id, [(speaker, text)])
    day = START
    chat_days = []
    for n, chat in enumerate(chats, 1):
        if n > 1:
            day += timedelta(days=rng.randint(*CHAT_GAP_DAYS))
        start = day + timedelta(minutes=rng.randrange(0, 12 * 60))
        chat_days.append(day)
        sessions.append((start, len(sessions), f"chat-{n}",
                         [(m["role"], m["content"]) for m in chat["conversation"] if m["content"].strip()]))
    span = (chat_days[-1] - chat_days[0]).days
    for topic, items in topics.items():
        pref_day = START + timedelta(days=rng.randint(0, span), minutes=rng.randrange(0, 12 * 60))
        sessions.append((pref_day, len(sessions), f"pref-{topic}", [("user", items[index]["preference"])]))
    sessions.sort()
    turns: list[dict[str, Any]] = []
    for start, _, sid, messages in sessions:
        for k, (speaker, text) in enumerate(messages, 1):
            turns.append({"turn_id": f"{sid}:{k}", "session_id": sid, "speaker": speaker, "text": text,
                          "timestamp": _stamp(start + timedelta(minutes=k - 1)), "extra": {}})
    space = f"prefeval-{index}"
    now = _stamp(max(s[0] for s in sessions) + timedelta(days=1))
    questions = [BenchQuestion(qid=f"{space}:{topic}", space=space, question=items[index]["question"],
                               answer=items[index]["preference"], category=topic, now=now,
                               gold_turns=[f"pref-{topic}:1"])
                 for topic, items in topics.items()]
    return BenchConversation(space, turns, questions)


def load_prefeval(path: str | Path, seed: int = 0) -> list[BenchConversation]:
    """One BenchConversation per trial (item index), as many as the smallest topic has items."""
    topics, chats = read_prefeval(path)
    trials = min(len(items) for items in topics.values())
    return [trial(topics, chats, i, seed) for i in range(trials)]
