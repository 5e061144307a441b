"""Ingest time of one long turn (10 KB, 100 KB, 1 MB of ordinary sentences) through `Memory.add`,
against the text encoder alone on the same texts, measured in the same run.

    python -m benchmarks.long_turns [--sizes 10000 100000 1000000] [--out FILE.json] [--report FILE.json]

One process, models loaded first; each size goes into a fresh space of a fresh store, as a
single turn of sentences cycled from the bundled demo conversation (ordinary dialogue: names,
dates, feelings), each pass marked "On day N," so texts do not repeat. Per size:

- with the default `Config()` (`max_turn_chars` 100,000): the seconds `add` takes (a turn over the
  limit is refused, and the time to the error and its message are reported);
- when the default refuses it, again with `max_turn_chars` raised to fit, to show the time the
  engine would take on it.

Baseline: the same model, uncached, encoding exactly the distinct texts the pipeline encoded (the
units' texts and the raw turn's text) in one `encode` call (which batches texts of similar length,
64 at most, as the pipeline's calls do). The time of `add` grows linearly with the
text (the sentence splitter, the rule extractor and the views are linear); the table says how
many units each size became.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path

SIZES = (10_000, 100_000, 1_000_000)


def long_text(n_chars: int) -> str:
    """About `n_chars` characters of whole sentences, cycled from the demo conversation's turns,
    each pass prefixed with its own "On day N," so no two turns' texts repeat (the encoder cache
    would serve repeats for free)."""
    doc = json.loads(resources.files("etamem.data").joinpath("demo_conversation.json").read_text(encoding="utf-8"))
    sentences = [t["text"].strip() for t in doc["turns"]]
    out, size, i = [], 0, 0
    while size < n_chars:
        s = f"On day {i // len(sentences) + 1}, {sentences[i % len(sentences)]}"
        out.append(s)
        size += len(s) + 1
        i += 1
    return " ".join(out)[:n_chars].rsplit(" ", 1)[0]


def measure(n_chars: int, work: Path, max_turn_chars: int | None) -> dict:
    """One fresh store, one `add` of one turn of `n_chars`; the encoder alone on the same texts."""
    from benchmarks.agent_loop import new_memory, uncached
    from benchmarks.ingest import encoder_alone, pipeline_texts
    from etamem import Config

    cfg = Config() if max_turn_chars is None else Config(max_turn_chars=max_turn_chars)
    path = work / f"long-{n_chars}-{max_turn_chars}"
    shutil.rmtree(path, ignore_errors=True)
    mem, load_s = new_memory(path, cfg)
    model = uncached(mem.text_encoder)
    # first-call overhead (the kernels of each new batch shape), outside both timings: a batch of
    # 64 texts padded to the model's full length, then one short sentence
    model.encode(["a warm-up text, not one of the data. " * 60] + ["a warm-up sentence"] * 63)
    model.encode(["a warm-up sentence, not one of the data"])
    text = long_text(n_chars)
    turn = {"turn_id": "long", "session_id": "s1", "speaker": "Maya", "text": text, "timestamp": "2024-03-02T18:10"}
    row = {"chars": len(text), "max_turn_chars": cfg.max_turn_chars, "model_load_s": load_s}
    t = time.perf_counter()
    try:
        units = mem.add([turn], space="long")
    except ValueError as exc:
        row.update(refused=True, add_s=time.perf_counter() - t, error=str(exc))
        mem.close()
        return row
    row.update(refused=False, add_s=time.perf_counter() - t, units=len(units))
    t = time.perf_counter()
    mem.search("What did Maya adopt?", "long", top_k=20)
    row["first_search_s"] = time.perf_counter() - t
    amu_texts, turn_texts = pipeline_texts(mem, ["long"])
    texts = list(dict.fromkeys(amu_texts + turn_texts))
    row["encoder_alone"] = encoder_alone(model, texts, batch=len(texts))  # one call: the encoder batches by length
    row["ratio"] = row["add_s"] / row["encoder_alone"]["encode_s"]
    mem.close()
    return row


def table(rows: list[dict]) -> str:
    head = ["turn size", "max_turn_chars", "outcome", "add s", "units", "encoder alone s (same texts)",
            "add / encoder", "first search s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if r["refused"]:
            cells = [f"{r['chars']:,}", f"{r['max_turn_chars']:,}", "refused: " + r["error"][:70] + "...",
                     f"{r['add_s']:.3f}", "-", "-", "-", "-"]
        else:
            cells = [f"{r['chars']:,}", f"{r['max_turn_chars']:,}", "stored", f"{r['add_s']:.2f}", f"{r['units']:,}",
                     f"{r['encoder_alone']['encode_s']:.2f}", f"{r['ratio']:.2f}", f"{r['first_search_s']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report(doc: dict) -> None:
    m = doc["machine"]
    print(f"machine: {m['cpu_count']} CPUs, {m['platform']}; 1-minute load at start {m['load_avg_1m_start']:.1f}, "
          f"at end {doc['load_avg_1m_end']:.1f}")
    print(f"command: {doc['command']}; wall time {doc['wall_s']:.0f}s\n")
    print(table(doc["results"]))


def main(argv: list[str] | None = None) -> None:
    from benchmarks.agent_loop import machine_info

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="turn sizes in characters")
    ap.add_argument("--out", default=None, help="write the results to this JSON file")
    ap.add_argument("--report", default=None, metavar="FILE.json", help="print the table of a saved run and exit")
    args = ap.parse_args(argv)
    if args.report:
        with open(args.report) as f:
            report(json.load(f))
        return
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    command = "python -m benchmarks.long_turns " + " ".join(sys.argv[1:] if argv is None else argv)
    machine, t0, rows = machine_info(), time.perf_counter(), []
    work = Path(tempfile.mkdtemp(prefix="etamem-long-"))
    try:
        for n in args.sizes:
            row = measure(n, work, None)
            rows.append(row)
            if row["refused"]:
                rows.append(measure(n, work, n + 1_000))
            print(f"{n:,} chars done", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    doc = {"command": command, "machine": machine, "wall_s": time.perf_counter() - t0,
           "load_avg_1m_end": os.getloadavg()[0], "results": rows}
    report(doc)
    if args.out:
        from etamem.output import atomic_write

        atomic_write(args.out, json.dumps(doc, indent=1))
        print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
