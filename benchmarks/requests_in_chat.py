"""User requests among real chats: how many become facts about the user, and do statements still
all give a unit? (issue 49, item 2; docs/reliability.md, 'Requests and facts said in passing').

    python -m benchmarks.requests_in_chat [--filler ../shared/data/prefeval] [--out FILE.json]

The set (`tests/data/requests.json`, written for this benchmark): 20 user requests to an assistant,
22 user statements (3 of them said inside a request: "I'm vegan, can you suggest some dinner
recipes?") and 8 assistant pleasantries. They are planted in PrefEval's real chats
(`filtered_inter_turns.json`, messages cut to `MAX_CHARS`), each request with a pleasantry as the
assistant's reply, each statement after an assistant turn, and added to one `Memory` (default
config, rule extractor). Counted: request and pleasantry turns with a unit (target 0), their units
in the Affect view (target 0), statements whose key is in a unit of their turn (target all), and
all the memory's units and Affect units (the filler's requests go too). Printed and written as JSON.
"""
from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "requests.json"
FILLER = ROOT.parent / "shared" / "data" / "prefeval"
CHATS = 8  # PrefEval chats the set is planted in
MAX_CHARS = 500
START = datetime(2024, 3, 1, 9, 0, tzinfo=timezone.utc)


def messages(chats: list[list[tuple[str, str]]], data: dict, seed: int = 0) -> tuple[list[dict], dict[str, str]]:
    """The chats with the set planted (turn dicts) and turn id -> "request" / "pleasantry" / "statement"."""
    rng = random.Random(f"requests:{seed}")
    sessions = [[(f"chat-{n + 1}:{k}", role, text[:MAX_CHARS]) for k, (role, text) in enumerate(chats[n], 1)]
                for n in sorted(rng.sample(range(len(chats)), CHATS))]
    role_of: dict[str, str] = {}
    planted = [("request", i, text) for i, text in enumerate(data["requests"])]
    planted += [("statement", i, s["text"]) for i, s in enumerate(data["statements"])]
    for kind, i, text in planted:
        msgs = sessions[rng.randrange(len(sessions))]
        places = [j + 1 for j, m in enumerate(msgs) if m[1] == "assistant"] or [len(msgs)]
        at = rng.choice(places)
        new = [(f"{kind}-{i}", "user", text)]
        role_of[f"{kind}-{i}"] = kind
        if kind == "request":
            new.append((f"{kind}-{i}-reply", "assistant", data["pleasantries"][i % len(data["pleasantries"])]))
            role_of[f"{kind}-{i}-reply"] = "pleasantry"
        msgs[at:at] = new
    turns = []
    for s, msgs in enumerate(sessions):
        clock = START + timedelta(days=s)
        for tid, role, text in msgs:
            clock += timedelta(minutes=1)
            turns.append({"id": tid, "session_id": f"s{s}", "role": role, "content": text,
                          "timestamp": clock.isoformat()})
    return turns, role_of


def run(filler: Path) -> dict:
    from etamem import Memory
    from etamem.bench.updates import read_filler

    data = json.loads(DATA.read_text(encoding="utf-8"))
    turns, role_of = messages(read_filler(filler), data)
    keys = {f"statement-{i}": s["key"].lower() for i, s in enumerate(data["statements"])}
    with tempfile.TemporaryDirectory(prefix="requests-") as root:
        mem = Memory(root)
        try:
            for _, group in _sessions(turns):
                mem.add(group, space="chat")
            units = mem.list("chat")
            affect = set(mem.views("chat").affect.row_of)
            stored = len(mem.turns("chat"))
        finally:
            mem.close()
    by_turn: dict[str, list] = {}
    for u in units:
        for t in u.source_turn_ids:
            by_turn.setdefault(t, []).append(u)
    asked = [t for t, kind in role_of.items() if kind in ("request", "pleasantry")]
    as_facts = {t: [u.text for u in by_turn.get(t, [])] for t in asked if by_turn.get(t)}
    in_affect = [u.text for t in asked for u in by_turn.get(t, []) if u.amu_id in affect]
    kept = {t: any(k in u.text.lower() for u in by_turn.get(t, [])) for t, k in keys.items()}
    return {"turns": len(turns), "turns_stored": stored, "requests": len(data["requests"]),
            "pleasantries_planted": sum(1 for k in role_of.values() if k == "pleasantry"),
            "request_or_pleasantry_turns_with_a_unit": len(as_facts), "their_units": as_facts,
            "their_units_in_affect": in_affect, "statements": len(keys),
            "statements_with_their_unit": sum(kept.values()),
            "statements_missed": [data["statements"][int(t.split("-")[1])]["text"] for t, ok in kept.items() if not ok],
            "units": len(units), "affect_units": len(affect)}


def _sessions(turns: list[dict]):
    from itertools import groupby

    return groupby(turns, key=lambda t: t["session_id"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--filler", type=Path, default=FILLER, help="PrefEval's directory or filtered_inter_turns.json")
    ap.add_argument("--out", type=Path, default=None, help="results JSON")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if not (args.filler.is_file() or (args.filler / "filtered_inter_turns.json").is_file()):
        log.warning("skipped: no PrefEval chats at %s (give --filler)", args.filler)
        return 0
    r = run(args.filler)
    rows = [("turns (stored)", f"{r['turns']} ({r['turns_stored']})"),
            ("request + pleasantry turns with a unit", f"{r['request_or_pleasantry_turns_with_a_unit']} of "
                                                      f"{r['requests'] + r['pleasantries_planted']}"),
            ("their units in the Affect view", str(len(r["their_units_in_affect"]))),
            ("statements with their unit", f"{r['statements_with_their_unit']} of {r['statements']}"),
            ("units / Affect units in the memory", f"{r['units']} / {r['affect_units']}")]
    sys.stdout.write("| measure | value |\n|---|---|\n" + "".join(f"| {a} | {b} |\n" for a, b in rows))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(r, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
