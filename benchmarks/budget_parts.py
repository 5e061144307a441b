"""Where an answer context's tokens go before its first evidence turn: per system, the median
tokens of each part of the context (ETAMem: memory lines, source turns, Time context; FTA-Mem:
each packet section; flat: the turns) at the prefix that first holds an evidence turn, the whole
and its evidence part (what `etamem bench --tokenizer` counts: the supplements left out), and the
units and distinct turns in it. The diagnosis behind docs/benchmarks.md, 'Evidence within the
reader's budget'.

    python -m benchmarks.budget_parts locomo $DATA/locomo/locomo10-dev.json --stores S \
        --tokenizer qwen-0.5b --systems etamem fta hybrid-turns [--conversations conv-26] [--limit-questions 60]

It opens the stores a `etamem bench ... --stores S` run built (copy them first if that run is
still going: a store directory is held by one process at a time).
"""
from __future__ import annotations

import argparse
import json
import re
import statistics


def _sections(packet: str) -> dict[str, str]:
    """An FTA-Mem packet by its '# ' sections (section name, lower case -> its lines)."""
    out, name = {}, "header"
    for line in packet.splitlines():
        if line.startswith("# "):
            name = line[2:].strip().lower()
        out[name] = out.get(name, "") + line + "\n"
    return out


def main(argv=None) -> dict:
    from etamem.bench.budget import context_text
    from etamem.bench.data import load, select
    from etamem.bench.qa import format_sources, format_units
    from etamem.bench.run_stores import Workbench
    from etamem.bench.systems import resolve_systems
    from etamem.config import Config
    from etamem.models.tokens import reader_counter
    from etamem.presets import preset_values

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("dataset")
    p.add_argument("file")
    p.add_argument("--stores", required=True)
    p.add_argument("--tokenizer", default="qwen-0.5b")
    p.add_argument("--systems", nargs="+", default=["etamem", "fta", "hybrid-turns"])
    p.add_argument("--conversations", nargs="+", default=None)
    p.add_argument("--limit-questions", type=int, default=0, help="first N evidence questions per conversation")
    p.add_argument("--pool", type=int, default=80)
    args = p.parse_args(argv)
    config = Config.from_dict(preset_values("default", "etamem", "locomo" if args.dataset.startswith("locomo")
                                            else args.dataset)).replace(llm_model=None)
    _, count = reader_counter(args.tokenizer)
    convs = select(load(args.dataset, args.file), spaces=args.conversations)
    wb = Workbench(config, args.stores, pool=args.pool)
    rows: dict[str, dict[str, list[float]]] = {}
    try:
        for conv in convs:
            turns = {t.turn_id: t for t in wb.turns(conv)}
            questions = [q for q in conv.questions if q.gold_turns]
            if args.limit_questions:
                questions = questions[:args.limit_questions]
            for spec in resolve_systems(args.systems):
                acc = rows.setdefault(spec.key, {})
                for q in questions:
                    ranking = wb.rank(spec, conv, q)
                    gold = set(q.gold_turns)
                    i = next((i for i, u in enumerate(ranking.units) if gold & set(u.sources)), None)
                    if i is None:
                        continue
                    units = ranking.units[:i + 1]
                    if spec.kind == "fta":  # the whole packet, auxiliary memory included
                        parts = _sections(wb.fta_packet(spec, conv.space, ranking.hits[:i + 1]))
                    else:
                        parts = {"memory lines": format_units(units), "source turns": format_sources(units, turns),
                                 "time context": wb.time_summaries(spec, conv.space, ranking.hits[:i + 1])}
                    for name, part in parts.items():
                        acc.setdefault(name, []).append(count(part) if part else 0)
                    acc.setdefault("total", []).append(count("\n".join(p for p in parts.values() if p)))
                    acc.setdefault("evidence part", []).append(
                        count(context_text(wb, spec, conv.space, ranking, i + 1, turns)))
                    acc.setdefault("units", []).append(i + 1)
                    acc.setdefault("turns", []).append(len({t for u in units for t in u.sources}))
                    words = [len(re.findall(r"\w+", u.text)) for u in units]
                    acc.setdefault("words per unit", []).append(statistics.mean(words))
    finally:
        wb.close()
    out = {s: {k: {"median": statistics.median(v), "mean": statistics.mean(v), "n": len(v)} for k, v in acc.items()}
           for s, acc in rows.items()}
    for s, acc in out.items():
        print(f"{s}: " + ", ".join(f"{k} {v['median']:.0f} (mean {v['mean']:.0f})" for k, v in acc.items()))
    print(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    main()
