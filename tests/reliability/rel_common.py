"""Shared pieces of the reliability suite: a fast memory (hashing encoder + VADER, real
SQLite, FAISS/BM25 indexes) and conversations with markers that make leaks visible."""
from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

from conftest import HashingEncoder
from etamem import Config, Memory
from etamem.affect import VaderAffectTagger
from etamem.encoders import CachedEncoder
from etamem.views.validation import check_rows

T0 = datetime(2023, 5, 8, 13, 0, tzinfo=timezone.utc)
WORDS = ("hiking", "guitar", "garden", "painting", "marathon", "bakery", "violin", "sunset", "tea", "coffee",
         "museum", "beach", "novel", "puppy", "kitten", "recipe", "festival", "camping", "yoga", "chess")
DEMO = Path(__file__).resolve().parents[2] / "etamem" / "data" / "demo_conversation.json"


def fast_memory(path, **cfg) -> Memory:
    """A `Memory` on the real store and indexes with a text-dependent hashing encoder (no model load)."""
    enc = CachedEncoder(HashingEncoder())
    mem = Memory(path, Config(**cfg), text_encoder=enc, affect_tagger=VaderAffectTagger(enc))
    enc.persist = mem.store  # vectors cached in the store, as the default encoder does
    return mem


def conversation(prefix: str, n_sessions: int, per_session: int, day0: int = 0) -> list[dict]:
    """Turns with ids `<prefix>s<session>:<i>`; texts depend only on (session, i), so two prefixes
    give the same texts under different ids."""
    out = []
    for s in range(n_sessions):
        start = T0 + timedelta(days=day0 + 3 * s)
        for i in range(per_session):
            a, b = WORDS[(7 * s + i) % len(WORDS)], WORDS[(3 * s + 5 * i + 1) % len(WORDS)]
            out.append({"session_id": f"{prefix}s{s}", "speaker": ("Ana", "Ben")[i % 2], "turn_id": f"{prefix}s{s}:{i}",
                        "text": f"I really enjoyed the {a} last weekend with my sister. The {b} was wonderful.",
                        "timestamp": (start + timedelta(minutes=i)).isoformat()})
    return out


def demo_turns() -> list[dict]:
    return json.loads(DEMO.read_text(encoding="utf-8"))["turns"]


def view_problems(store, space: str) -> dict[str, list[str]]:
    """`check_rows` of every saved view of the space against its active units."""
    from etamem.views.space_views import route

    units = store.amus(space)
    out = {}
    for view, (state_json, _, rows, _) in store.load_views(space).items():
        state = json.loads(state_json)
        if view == "time":
            out[view] = check_rows(rows, {a.amu_id for a in units}, [r["node_id"] for r in rows if r["parent_id"] is None],
                                   session_of={a.amu_id: a.session_id for a in units})
        else:
            out[view] = check_rows(rows, {a.amu_id for a in units if route(a.polarity) == view}, [str(state["root"])],
                                   n_nodes=int(state["n_nodes"]))
    return {v: p for v, p in out.items() if p}


def files_containing(root, needle: bytes) -> list[str]:
    """Every file under `root` whose bytes contain `needle`."""
    return sorted(str(p.relative_to(root)) for p in Path(root).rglob("*") if p.is_file() and needle in p.read_bytes())
