"""Repeats and look-alikes (issue 49, item 1): real memories, the rule extractor, the real MiniLM
encoder, offline.

    python -m benchmarks.restatements [--split tune|holdout|all] [--filler PATH] [--out FILE.json]
                                      [--set KEY=VALUE ...] [--data FILE --split NAME]

Data: `tests/data/restatements.json` (written for this; the `holdout` third was not used to tune
the rules); `--data tests/data/lookalikes_holdout2.json --split holdout2`: 30 more look-alike pairs
written blind later (no repeats in it). Reported per split:
- repeats: one user says each of 20 facts once and restates it three times (markers, other
  wording), a week apart, the facts interleaved (with `--filler`, PrefEval's real chats between
  the sessions); `units_per_fact` (active units drawn from a fact's turns; 1.0 is one unit per
  fact), `top5_copies_max` (most units of one fact in the top 5 of `context` for the fact's own
  question), `superseded` (a fact's restatement marked as a change of itself);
- look-alikes: each pair (a, then b ten days later) in its own memory: `merged` (b folded into
  a: one unit), `superseded` (b marked as replacing a or a as replacing b).
"""
from __future__ import annotations

import argparse
import json
import logging
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "restatements.json"
T0 = datetime(2024, 1, 1, 9, tzinfo=timezone.utc)
log = logging.getLogger("benchmarks.restatements")


def _memory(path: Path, models, settings: dict):
    from etamem import Config, Memory

    return Memory(path, Config.from_dict(settings), text_encoder=models[0], affect_tagger=models[1])


def _filler(path: str | None, n: int) -> list[list[dict]]:
    """Up to `n` of PrefEval's chats (`filtered_inter_turns.json`) as lists of messages, or []."""
    if not path:
        return []
    p = Path(path)
    p = p / "filtered_inter_turns.json" if p.is_dir() else p
    if not p.is_file():
        log.warning("filler %s not found: no filler", p)
        return []
    raw = json.loads(p.read_text(encoding="utf-8"))
    chats = raw if isinstance(raw, list) else list(raw.values())
    out = []
    for chat in chats[:n]:
        msgs = chat if isinstance(chat, list) else chat.get("conversation", chat.get("messages", []))
        out.append([m for m in msgs if isinstance(m, dict) and m.get("content")][:6])
    return out


def _superseded(mem, space: str, ids: set[str]) -> int:
    return sum(1 for a, b, r, _ in mem.store.unit_links(space, sorted(ids)) if r == "supersedes"
               and a in ids and b in ids)


def repeats(facts: list[dict], models, root: Path, settings: dict, filler: list[list[dict]]) -> dict:
    """The repeats measurement of the module docstring over `facts`."""
    if not facts:
        return {"facts": 0, "statements": 0, "units": 0, "units_per_fact": None, "facts_with_one_unit": 0,
                "top5_copies_max": None, "superseded": 0, "split_facts": [], "most_copies_fact": None}
    mem = _memory(root / "repeats", models, settings)
    owner: dict[str, int] = {}
    for k in range(max(len(f["statements"]) for f in facts)):
        turns = []
        for i, f in enumerate(facts):
            if k < len(f["statements"]):
                tid = f"f{i}-m{k}"
                owner[tid] = i
                turns.append({"turn_id": tid, "session_id": f"s{k}", "speaker": "user", "text": f["statements"][k],
                              "timestamp": T0 + timedelta(days=7 * k, minutes=i)})
        mem.add(turns, space="u")
        for j, chat in enumerate(filler[k * 2:(k + 1) * 2]):
            mem.add([{"turn_id": f"x{k}-{j}-{n}", "session_id": f"x{k}-{j}", "speaker": m.get("role", "user"),
                      "text": m["content"], "timestamp": T0 + timedelta(days=7 * k + 1 + j, minutes=n)}
                     for n, m in enumerate(chat)], space="u")
    units = mem.store.amus("u")
    per_fact = [[u for u in units if any(owner.get(t) == i for t in u.source_turn_ids)] for i in range(len(facts))]
    copies, worst = [], ""
    for i, f in enumerate(facts):
        hits = mem.search(f["query"], space="u", top_k=5, now=T0 + timedelta(days=40))
        n = sum(1 for h in hits if h.views != ("raw",) and any(owner.get(t) == i for t in h.source_turn_ids))
        copies.append(n)
        if n == max(copies):
            worst = f["statements"][0]
    ids = {u.amu_id for us in per_fact for u in us}
    out = {"facts": len(facts), "statements": len(owner), "units": sum(len(us) for us in per_fact),
           "units_per_fact": round(sum(len(us) for us in per_fact) / len(facts), 3),
           "facts_with_one_unit": sum(len(us) == 1 for us in per_fact), "top5_copies_max": max(copies),
           "superseded": _superseded(mem, "u", ids),
           "split_facts": [f["statements"][0] for f, us in zip(facts, per_fact) if len(us) > 1],
           "most_copies_fact": worst}
    mem.close()
    return out


def lookalikes(pairs: list[dict], models, root: Path, settings: dict) -> dict:
    """The look-alike measurement of the module docstring over `pairs`."""
    merged, superseded = [], []
    mem = _memory(root / "pairs", models, settings)
    for i, p in enumerate(pairs):
        space = f"p{i}"
        mem.add([{"turn_id": "a", "session_id": "s1", "speaker": "user", "text": p["a"], "timestamp": T0}], space=space)
        mem.add([{"turn_id": "b", "session_id": "s2", "speaker": "user", "text": p["b"],
                  "timestamp": T0 + timedelta(days=10)}], space=space)
        units = mem.store.amus(space)
        if len(units) < 2 or any(len(u.source_turn_ids) > 1 for u in units):
            merged.append(f"{p['a']} / {p['b']}")
        if _superseded(mem, space, {u.amu_id for u in units}):
            superseded.append(f"{p['a']} / {p['b']}")
    mem.close()
    return {"pairs": len(pairs), "merged": len(merged), "superseded": len(superseded),
            "merged_pairs": merged, "superseded_pairs": superseded}


def main(argv=None) -> None:
    import tempfile

    from etamem import Memory
    from etamem.config import parse_overrides

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--split", default="tune", help="a split of the data file (tune, holdout, ...) or all")
    ap.add_argument("--data", default=str(DATA), help="the data file (default tests/data/restatements.json)")
    ap.add_argument("--filler", help="PrefEval's directory or filtered_inter_turns.json (real chats between sessions)")
    ap.add_argument("--out", help="results JSON (default: print only)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a Config value")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    settings = parse_overrides(args.set)
    data = json.loads(Path(args.data).read_text(encoding="utf-8"))
    known = sorted({x["split"] for x in data.get("facts", []) + data["lookalikes"]})
    if args.split != "all" and args.split not in known:
        ap.error(f"--split: {args.split!r} is not in {args.data} (its splits: {', '.join(known)})")
    splits = tuple(known) if args.split == "all" else (args.split,)
    base = Memory()
    models = (base.text_encoder, base.affect_tagger)
    filler = _filler(args.filler, 8)
    results: dict = {"settings": settings, "filler_chats": len(filler), "splits": {}}
    rows = []
    for split in splits:
        facts = [f for f in data.get("facts", []) if f["split"] == split]
        pairs = [p for p in data["lookalikes"] if p["split"] == split]
        start = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="restate-") as tmp:
            r, p = repeats(facts, models, Path(tmp), settings, filler), lookalikes(pairs, models, Path(tmp), settings)
        results["splits"][split] = {"repeats": r, "lookalikes": p, "seconds": round(time.perf_counter() - start, 1)}
        rows.append((split, r, p))
    print("| split | facts x mentions | units | units per fact | most copies in a top 5 | restatements superseded "
          "| look-alike pairs | merged | superseded |")
    print("|---|---|---|---|---|---|---|---|---|")
    for split, r, p in rows:
        print(f"| {split} | {r['facts']} x {r['statements'] // max(r['facts'], 1)} | {r['units']} | "
              f"{r['units_per_fact']} | {r['top5_copies_max']} | {r['superseded']} | {p['pairs']} | {p['merged']} | "
              f"{p['superseded']} |")
        for name in ("merged_pairs", "superseded_pairs"):
            for pair in p[name]:
                print(f"  {name[:-6]}: {pair}")
        for fact in r["split_facts"]:
            print(f"  more than one unit: {fact}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
