"""Facts said in passing, found for the direct question (issue 49, item 3; docs/reliability.md,
'Requests and facts said in passing').

    python -m benchmarks.indirect_statements [--filler ../shared/data/prefeval] [--split dev|holdout|all]
        [--systems etamem hybrid-turns] [--out FILE.json]

The cases (`tests/data/indirect_statements.json`, written for this benchmark: 28 dev, 14 holdout)
pair a statement said in passing ("Ugh, still unpacking boxes since the move to Porto last
month.") with the direct question ("Where do I live?"). Memories of `GROUP` cases each: every
statement is a user turn planted inside one of PrefEval's real chats (`filtered_inter_turns.json`,
messages cut to `MAX_CHARS`), after an assistant turn, with a short assistant reply after it;
the chats are sessions a day apart. Each question is asked a day after the last session through
the bench's systems (`etamem.bench.run_stores.Workbench`: `etamem` = `Memory.retrieve`,
`hybrid-turns` = flat hybrid RRF over raw turns); found@k: the statement's turn is among the
first k distinct source turns of the ranking. Printed as a table and written as JSON.
"""
from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import tempfile
from datetime import datetime, timedelta
from pathlib import Path

log = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "tests" / "data" / "indirect_statements.json"
FILLER = ROOT.parent / "shared" / "data" / "prefeval"
GROUP = 7  # cases per memory
CHATS = 4  # PrefEval chats per memory
MAX_CHARS = 500  # filler messages cut to this many characters (encoding time)
KS = (1, 5, 10)
START = datetime(2024, 3, 1, 9, 0)
REPLIES = ("Oh no, that sounds exhausting.", "That sounds like a lot.", "Ha, I can imagine.", "That must be tiring.")


def load_cases(split: str) -> list[dict]:
    cases = json.loads(CASES.read_text(encoding="utf-8"))["cases"]
    return [c for c in cases if split == "all" or c["split"] == split]


def memories(cases: list[dict], chats: list[list[tuple[str, str]]], seed: int = 0) -> list:
    """`BenchConversation`s of `GROUP` cases each, planted in `CHATS` filler chats (seeded)."""
    from etamem.bench.items import BenchConversation, BenchQuestion

    rng = random.Random(f"indirect:{seed}")
    out = []
    for g in range(0, len(cases), GROUP):
        part, space = cases[g:g + GROUP], f"indirect-{g // GROUP}"
        picked = rng.sample(range(len(chats)), CHATS)
        sessions = [[(f"chat-{n + 1}:{k}", role, text[:MAX_CHARS]) for k, (role, text) in enumerate(chats[n], 1)]
                    for n in picked]
        for c in part:  # after an assistant turn of a seeded chat, with a reply
            msgs = sessions[rng.randrange(len(sessions))]
            places = [i + 1 for i, m in enumerate(msgs) if m[1] == "assistant"] or [len(msgs)]
            at = rng.choice(places)
            msgs[at:at] = [(c["id"], "user", c["statement"]), (f"{c['id']}-reply", "assistant", rng.choice(REPLIES))]
        turns, clock = [], START
        for s, msgs in enumerate(sessions):
            clock = START + timedelta(days=s)
            for tid, role, text in msgs:
                clock += timedelta(minutes=1)
                turns.append({"turn_id": tid, "session_id": f"{space}-s{s}", "speaker": role, "text": text,
                              "timestamp": clock.isoformat(timespec="minutes"), "extra": {}})
        now = (clock + timedelta(days=1)).isoformat(timespec="minutes")
        questions = [BenchQuestion(qid=c["id"], space=space, question=c["question"], answer=c["statement"],
                                   category=c["kind"], now=now, gold_turns=[c["id"]]) for c in part]
        out.append(BenchConversation(space, turns, questions))
    return out


def first_turns(units, n: int) -> list[str]:
    seen: list[str] = []
    for u in units:
        for t in u.sources:
            if t not in seen:
                seen.append(t)
        if len(seen) >= n:
            break
    return seen[:n]


def run(split: str, filler: Path, systems: list[str]) -> dict:
    from etamem import Config
    from etamem.bench.run_stores import Workbench
    from etamem.bench.systems import resolve_systems
    from etamem.bench.updates import read_filler

    cases = load_cases(split)
    convs = memories(cases, read_filler(filler))
    specs = resolve_systems(systems)
    per_case: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="indirect-") as root:
        wb = Workbench(Config(), root, pool=max(KS))
        try:
            for conv in convs:
                if any(s.kind == "etamem" for s in specs):
                    wb.build("amu", conv)
                for q in conv.questions:
                    row = per_case.setdefault(q.qid, {"question": q.question, "kind": q.category})
                    for spec in specs:
                        ranked = first_turns(wb.rank(spec, conv, q).units, max(KS))
                        row[spec.key] = ranked.index(q.gold_turns[0]) + 1 if q.gold_turns[0] in ranked else None
        finally:
            wb.close()
    summary = {s.key: {f"found@{k}": sum(1 for r in per_case.values() if r[s.key] and r[s.key] <= k) / len(per_case)
                       for k in KS} for s in specs}
    return {"split": split, "cases": len(per_case), "systems": summary, "per_case": per_case}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--filler", type=Path, default=FILLER, help="PrefEval's directory or filtered_inter_turns.json")
    ap.add_argument("--split", choices=("dev", "holdout", "all"), default="dev")
    ap.add_argument("--systems", nargs="+", default=["etamem", "hybrid-turns"])
    ap.add_argument("--out", type=Path, default=None, help="results JSON")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if not (args.filler.is_file() or (args.filler / "filtered_inter_turns.json").is_file()):
        log.warning("skipped: no PrefEval chats at %s (give --filler)", args.filler)
        return 0
    result = run(args.split, args.filler, args.systems)
    sys.stdout.write(f"indirect statements, split {result['split']} ({result['cases']} cases)\n\n")
    sys.stdout.write("| system | " + " | ".join(f"found@{k}" for k in KS) + " |\n|---|" + "---|" * len(KS) + "\n")
    for key, row in result["systems"].items():
        sys.stdout.write(f"| {key} | " + " | ".join(f"{row[f'found@{k}']:.3f}" for k in KS) + " |\n")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
