"""Bulk ingestion throughput through `Memory.add`, against the text encoder alone on the same texts.

    python -m benchmarks.ingest [--data PATH] [--synthetic-amus 100000] [--parts locomo synthetic]
        [--limit K] [--work DIR] [--keep] [--out FILE.json] [--report FILE.json]

Two parts, each in a fresh subprocess with a fresh store and the default `Config()`:

- locomo: the LoCoMo file (default `../shared/data/locomo/locomo10-dev.json`; the bundled demo
  conversation when it is absent or with `--data demo`, which the JSON says), every
  conversation into its own space, session by session (one `add` per session), then
  `end_session`, exactly as `etamem ingest` does; `--limit K` keeps the first K.
- synthetic: one space of about `--synthetic-amus` AMUs made by `benchmarks.agent_loop`'s
  generator (conversations repeated, re-dated and renamed), added the same way.

Timed: the `add` / `end_session` calls only (models are loaded first, reported apart). Reported:
wall and CPU seconds, AMUs/s, turns/s, the split by stage from `mem.stage_seconds` when the
engine has it (stage -> accumulated seconds: extract, encode, tag, views, index, store), how
many texts reached the model during ingestion (`CachedEncoder.encoded_texts`), and the first
search of each space after ingestion (`first_search_s`: work an engine defers to it shows
there). Baseline in the same subprocess: the same model, uncached (the `.inner` of the cache
wrapper: the wrapper would serve every text from the store's `vector_cache`), encoding exactly
the texts the pipeline encodes: the distinct AMU texts (`mem.list`) and raw turn texts
(`etamem.retrieval.turn_text` of `mem.turns`), in batches of 64, in that order.

Target: ingestion time <= 1.5 x encoder-alone time (verdict per part, in the JSON and the table).
Only the text encoder is in the baseline: a RoBERTa affect tagger, when its weights are present,
is a second model the pipeline runs (the default VADER fallback reuses the text vectors).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from itertools import groupby
from pathlib import Path
from typing import Callable

from benchmarks.agent_loop import (
    DEFAULT_DATA,
    DEMO,
    REPO,
    ModelFactory,
    build_space,
    load_sources,
    log_stderr,
    machine_info,
    new_memory,
    peak_mb,
    session_stream,
    stage_diff,
    stage_seconds,
    torch_threads,
    uncached,
)
from benchmarks.workdir import work_dir

TARGET_RATIO = 1.5  # ingestion time / encoder-alone time
BATCH = 64
SYNTHETIC_SPACE = "synthetic"
PARTS = ("locomo", "synthetic")


def locomo_conversations(data=None, limit: int = 0) -> tuple[list, dict]:
    """(conversations as `etamem.ingest.datasets.Conversation`, description of the data): the LoCoMo
    file, or the bundled demo conversation (see `agent_loop.load_sources`)."""
    from etamem.ingest.datasets import Conversation, read_locomo

    _, info = load_sources(data)  # resolves the default / the fallback and raises on a missing file
    if info["kind"] == "locomo":
        convs = list(read_locomo(info["path"]))
    else:
        from importlib import resources

        doc = json.loads(resources.files("etamem.data").joinpath("demo_conversation.json").read_text(encoding="utf-8"))
        convs = [Conversation(space=doc["space"], turns=doc["turns"],
                              questions=[{"question": q["question"]} for q in doc["questions"]])]
    convs = convs[:limit or None]
    info = dict(info, conversations=len(convs))
    return convs, info


def ingest_conversations(mem, conversations, log: Callable[[str], None] | None = None) -> dict:
    """Each conversation into its own space, one `add` per session, then `end_session` (as
    `etamem ingest`); only the engine's calls are timed."""
    engine_s = cpu_s = 0.0
    amus = turns = sessions = 0
    for conv in conversations:
        t, c = time.perf_counter(), time.process_time()
        for _, session in groupby(conv.turns, key=lambda t: t["session_id"]):
            session = list(session)
            amus += len(mem.add(session, space=conv.space))
            turns += len(session)
            sessions += 1
        mem.end_session(conv.space)
        engine_s += time.perf_counter() - t
        cpu_s += time.process_time() - c
        if log is not None:
            log(f"ingested {conv.space}: {len(conv.turns):,} turns, {engine_s:.0f}s so far")
    return {"spaces": len(conversations), "amus_added": amus, "turns": turns, "sessions": sessions,
            "ingest_s": engine_s, "ingest_cpu_s": cpu_s}


def pipeline_texts(mem, spaces: list[str]) -> tuple[list[str], list[str]]:
    """The AMU texts and raw turn texts the pipeline encodes, over the given spaces."""
    from etamem.retrieval import turn_text

    amu_texts = [a.text for s in spaces for a in mem.list(s)]
    turn_texts = [turn_text(t) for s in spaces for t in mem.turns(s)]
    return amu_texts, turn_texts


def encoder_alone(encoder, texts: list[str], batch: int = BATCH) -> dict:
    """Seconds for `encoder.encode` over `texts` in batches of `batch`, in order."""
    t, c = time.perf_counter(), time.process_time()
    for start in range(0, len(texts), batch):
        encoder.encode(texts[start:start + batch])
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    return {"texts": len(texts), "batch": batch, "encode_s": wall, "encode_cpu_s": cpu,
            "texts_per_s": len(texts) / wall if wall else float("inf")}


def first_searches(mem, asks: list[tuple[str, str]]) -> float:
    """Seconds for the first search of each (space, question)."""
    t = time.perf_counter()
    for space, question in asks:
        mem.search(question, space, top_k=20)
    return time.perf_counter() - t


def measure_part(part: str, *, store_dir, data=None, limit: int = 0, synthetic_amus: int = 100_000, cfg=None,
                 models: ModelFactory | None = None, log: Callable[[str], None] | None = None) -> dict:
    """Ingest one part into a fresh store at `store_dir`, then the encoder-alone baseline."""
    from etamem import Config

    cfg = cfg if cfg is not None else Config()
    path = Path(store_dir)
    if path.exists():
        shutil.rmtree(path)
    mem, model_load_s = new_memory(path, cfg, models)
    model = uncached(mem.text_encoder)
    model.encode(["a warm-up sentence, not one of the data"])  # first-call overhead, outside both timings
    counter0 = getattr(mem.text_encoder, "encoded_texts", None)
    before = stage_seconds(mem)
    if part == "locomo":
        convs, info = locomo_conversations(data, limit)
        row = ingest_conversations(mem, convs, log)
        spaces = [c.space for c in convs]
        asks = [(c.space, next((q["question"] for q in c.questions if q.get("question")), "What happened?"))
                for c in convs]
    elif part == "synthetic":
        sources, info = load_sources(data)
        build, used = build_space(mem, SYNTHETIC_SPACE, session_stream(sources), synthetic_amus, log)
        row = {"spaces": 1, "amus_added": build["amus_added"], "turns": build["turns"], "sessions": build["sessions"],
               "copies": build["copies"], "ingest_s": build["build_s"], "ingest_cpu_s": build["build_cpu_s"],
               "target_amus": synthetic_amus}
        spaces = [SYNTHETIC_SPACE]
        asks = [(SYNTHETIC_SPACE, used[-1].questions()[0])]
    else:
        raise ValueError(f"part: expected one of {PARTS}, got {part!r}")
    stages = stage_diff(before, stage_seconds(mem))
    counter1 = getattr(mem.text_encoder, "encoded_texts", None)
    ingest_mb = peak_mb()
    first_s = first_searches(mem, asks)

    amu_texts, turn_texts = pipeline_texts(mem, spaces)
    texts = list(dict.fromkeys(amu_texts + turn_texts))  # the model sees each distinct text once
    base = encoder_alone(model, texts)
    mem.close()
    n_amus, n_turns, s = len(amu_texts), len(turn_texts), row["ingest_s"]
    row.update({
        "part": part, "data": info, "amus": n_amus, "model_load_s": model_load_s,
        "amus_per_s": n_amus / s if s else float("inf"), "turns_per_s": n_turns / s if s else float("inf"),
        "stage_seconds": stages,
        "encoded_texts_during_ingest": None if counter0 is None or counter1 is None else counter1 - counter0,
        "first_search_s": first_s, "first_searches": len(asks),
        "texts": {"amu": n_amus, "turn": n_turns, "amu_distinct": len(set(amu_texts)),
                  "turn_distinct": len(set(turn_texts)), "distinct": len(texts)},
        "encoder_alone": base, "encoder": getattr(model, "name", type(model).__name__),
        "peak_rss_mb": peak_mb(), "ingest_peak_rss_mb": ingest_mb, "load_avg_1m": os.getloadavg()[0],
        "torch_threads": torch_threads(),
    })
    row["verdict"] = verdict(row)
    return row


def verdict(row: dict) -> dict:
    """Ingestion time against the encoder alone (and, not a target, with the first searches added)."""
    base = row["encoder_alone"]["encode_s"]
    ratio = row["ingest_s"] / base if base else None
    with_first = (row["ingest_s"] + row.get("first_search_s", 0.0)) / base if base else None
    return {"target": f"ingestion time <= {TARGET_RATIO} x encoder-alone time", "ratio": ratio,
            "ratio_with_first_search": with_first, "met": None if ratio is None else ratio <= TARGET_RATIO}


def fmt_met(met) -> str:
    return "not measured" if met is None else ("met" if met else "NOT met")


def table(rows: list[dict]) -> str:
    head = ["part", "spaces", "turns", "AMUs", "ingest s", "CPU s", "AMUs/s", "turns/s", "texts to model (ingest)",
            "distinct texts", "encoder alone s", "ingest/encoder", "target", "first search s",
            "(ingest+first)/encoder", "model load s", "peak RSS MB", "load"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        v = r["verdict"]
        enc = r["encoded_texts_during_ingest"]
        cells = [r["part"], str(r["spaces"]), f"{r['turns']:,}", f"{r['amus']:,}", f"{r['ingest_s']:.2f}",
                 f"{r['ingest_cpu_s']:.2f}", f"{r['amus_per_s']:,.0f}", f"{r['turns_per_s']:,.0f}",
                 "-" if enc is None else f"{enc:,}", f"{r['texts']['distinct']:,}",
                 f"{r['encoder_alone']['encode_s']:.2f}", "-" if v["ratio"] is None else f"{v['ratio']:.2f}",
                 fmt_met(v["met"]), f"{r['first_search_s']:.2f}",
                 "-" if v["ratio_with_first_search"] is None else f"{v['ratio_with_first_search']:.2f}",
                 f"{r['model_load_s']:.1f}", f"{r['peak_rss_mb']:,.0f}", f"{r['load_avg_1m']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def stage_table(rows: list[dict]) -> str | None:
    rows = [r for r in rows if r.get("stage_seconds")]
    if not rows:
        return None
    names = list(dict.fromkeys(k for r in rows for k in r["stage_seconds"]))
    lines = ["| part | " + " | ".join(f"{n} s (share)" for n in names) + " | sum of stages s | ingest s |",
             "|---|" + "---|" * (len(names) + 2)]
    for r in rows:
        st, total = r["stage_seconds"], r["ingest_s"]
        cells = [f"{st[n]:.1f} ({st[n] / total:.0%})" if n in st and total else "-" for n in names]
        lines.append(f"| {r['part']} | " + " | ".join(cells) + f" | {sum(st.values()):.1f} | {total:.1f} |")
    return "\n".join(lines)


def report(doc: dict) -> None:
    info = doc["machine"]
    print(f"machine: {info['cpu_count']} CPUs, {info['processor']}, {info['platform']}; python {info['python']}, "
          f"numpy {info['numpy']}; 1-minute load at start {info['load_avg_1m_start']:.1f}")
    print(f"command: {doc['command']}; wall time {doc['wall_s']:.0f}s")
    for r in doc["results"]:
        d = r["data"]
        note = f"; {d['note']}" if d.get("note") else ""
        print(f"- {r['part']}: {d['kind']} ({d['path']}){note}")
    print()
    print(table(doc["results"]))
    st = stage_table(doc["results"])
    if st:
        print("\nTime by stage (`mem.stage_seconds`, accumulated over the ingestion):\n")
        print(st)
    else:
        print("\n(the engine has no `stage_seconds`: totals only)")
    print("\ningest s: the add/end_session calls (models loaded before). texts to model: texts the cache wrapper "
          "sent to the model during ingestion. encoder alone: the same model, uncached, on the distinct AMU and "
          f"raw-turn texts, batches of {BATCH}. first search s: one search per space right after ingestion (not in "
          "the target; work deferred to it shows there). load: 1-minute load average at the end (2 cores).")
    print("\nTarget: " + f"ingestion time <= {TARGET_RATIO} x encoder-alone time")
    for r in doc["results"]:
        v = r["verdict"]
        print(f"- {r['part']}: x{v['ratio']:.2f} -> {fmt_met(v['met'])}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=None,
                    help=f"LoCoMo file (default {DEFAULT_DATA}, or the bundled demo when absent); 'demo': the demo")
    ap.add_argument("--synthetic-amus", type=int, default=100_000, help="AMUs of the synthetic part")
    ap.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    ap.add_argument("--limit", type=int, default=0, help="locomo part: only the first K conversations")
    ap.add_argument("--work", default=None, help="directory for the stores (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the stores (ingest-PART under --work)")
    ap.add_argument("--out", default=None, help="write all results to this JSON file")
    ap.add_argument("--report", default=None, metavar="FILE.json", help="print the table of a saved run and exit")
    ap.add_argument("--child", choices=PARTS, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.report:
        with open(args.report) as f:
            report(json.load(f))
        return
    if args.child is not None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        row = measure_part(args.child, store_dir=Path(args.work) / f"ingest-{args.child}", data=args.data,
                           limit=args.limit, synthetic_amus=args.synthetic_amus, log=log_stderr)
        print(json.dumps(row), flush=True)
        return

    command = "python -m benchmarks.ingest " + " ".join(sys.argv[1:] if argv is None else argv)
    load_sources(args.data)  # fails early on a missing explicit file
    data = args.data if args.data in (None, DEMO) else str(Path(args.data).resolve())
    env = dict(os.environ, HF_HUB_OFFLINE=os.environ.get("HF_HUB_OFFLINE", "1"))
    machine, t_start, rows = machine_info(), time.perf_counter(), []
    with work_dir(args.work, args.keep, "etamem-ingest-", [f"ingest-{part}" for part in args.parts]) as work:
        for part in args.parts:
            log_stderr(f"part {part}: starting a fresh subprocess (store under {work})")
            cmd = [sys.executable, "-m", "benchmarks.ingest", "--child", part, "--work", str(work),
                   "--synthetic-amus", str(args.synthetic_amus), "--limit", str(args.limit),
                   *(["--data", data] if data is not None else [])]
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True, env=env, cwd=REPO)
            rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    doc = {"command": command, "machine": machine,
           "args": {k: v for k, v in vars(args).items() if k not in ("child", "report")},
           "wall_s": time.perf_counter() - t_start, "results": rows,
           "targets": {r["part"]: r["verdict"] for r in rows}}
    report(doc)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
