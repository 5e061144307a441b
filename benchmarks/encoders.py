"""Text encoder variants side by side: fp32 all-MiniLM-L6-v2 (`minilm`, the default) against
its int8 ONNX Runtime version (`minilm-int8`, etamem/models/onnx_encoder.py) and, with `--encoders ... mpnet`,
all-mpnet-base-v2 (`mpnet`, etamem/models/mpnet_encoder.py, from $ETAMEM_MPNET_DIR), in one run.

    python -m benchmarks.encoders [LOCOMO_JSON] [--encoders fp32 int8 mpnet] [--turns 2000] [--single 200]
        [--rounds 3] [--out FILE.json]

Speed: load time (the int8 export cached beforehand), one text at a time (p50 / p95 over
`--single` LoCoMo turns, the encoders interleaved text by text) and batches of 32 and 256 turns
(texts/s, best of `--rounds`, interleaved). Agreement (fp32 and int8 both run) over the first `--turns` turns of the file:
mean / min cosine between the two encoders' vectors of the same text, and for every LoCoMo
question (its conversation's turns as the corpus) the share of the exact top-10 turns by fp32
that int8 also ranks in its top 10. Ratios are against fp32 from the same run; the 1-minute load
average and the process CPU time are printed beside (a shared 2-core machine inflates wall times).
Threads: torch's and ONNX Runtime's intra-op threads both `--threads` (default 1).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from .locomo_retrieval import DEFAULT_FILE

log = logging.getLogger("benchmarks.encoders")


def locomo_texts(path: str | Path, limit: int) -> tuple[list[str], list[list[int]], list[tuple[int, str]]]:
    """Turn texts (first `limit`, file order), the turn indexes of each conversation, and
    (conversation index, question) pairs."""
    from etamem.ingest.datasets import read_locomo

    texts, convs, questions = [], [], []
    for conv in read_locomo(path):
        if len(texts) >= limit:
            break
        start = len(texts)
        texts.extend(str(t.get("text", "")) for t in conv.turns[:limit - len(texts)])
        convs.append(list(range(start, len(texts))))
        questions += [(len(convs) - 1, str(q["question"])) for q in conv.questions if q.get("question")]
    return texts, convs, questions


KINDS = ("fp32", "int8", "mpnet")


def load(kind: str):
    from etamem.models.encoders import default_minilm, minilm_int8
    from etamem.models.mpnet_encoder import all_mpnet

    t = time.perf_counter()
    enc = {"fp32": default_minilm, "int8": minilm_int8, "mpnet": all_mpnet}[kind](device="cpu")
    return enc, time.perf_counter() - t


def speed(encoders: dict, texts: list[str], single: int, rounds: int) -> dict:
    """Interleaved timings: per-text latencies and best batch throughput per encoder."""
    out = {k: {"single_ms": [], "batch": {}} for k in encoders}
    for text in texts[:single]:
        for k, enc in encoders.items():
            t = time.perf_counter()
            enc.encode([text])
            out[k]["single_ms"].append(1000 * (time.perf_counter() - t))
    for size in (32, 256):
        batch = texts[:size]
        for _ in range(rounds):
            for k, enc in encoders.items():
                t = time.perf_counter()
                enc.encode(batch)
                rate = size / (time.perf_counter() - t)
                out[k]["batch"][size] = max(out[k]["batch"].get(size, 0.0), rate)
    for k in out:
        ms = sorted(out[k]["single_ms"])
        out[k]["single_p50_ms"] = statistics.median(ms)
        out[k]["single_p95_ms"] = ms[min(len(ms) - 1, int(0.95 * len(ms)))]
        del out[k]["single_ms"]
    return out


def agreement(fp32, int8, texts, convs, questions) -> dict:
    """Cosine of the two encoders' vectors per text, and top-10 overlap per question."""
    a, b = fp32.encode(texts), int8.encode(texts)
    cos = (a * b).sum(1)
    qa, qb = fp32.encode([q for _, q in questions]), int8.encode([q for _, q in questions])
    overlaps = []
    for i, (c, _) in enumerate(questions):
        idx = np.asarray(convs[c])
        if len(idx) < 10:
            continue
        ta = set(idx[np.argsort(-(a[idx] @ qa[i]))[:10]])
        tb = set(idx[np.argsort(-(b[idx] @ qb[i]))[:10]])
        overlaps.append(len(ta & tb) / 10)
    return {"texts": len(texts), "cos_mean": float(cos.mean()), "cos_min": float(cos.min()),
            "cos_p1": float(np.percentile(cos, 1)), "questions": len(overlaps),
            "top10_overlap": float(np.mean(overlaps)) if overlaps else float("nan")}


def table(r: dict) -> str:
    s, f = r["speed"], r["speed"]["fp32"]
    kinds = [k for k in KINDS if k in s]
    rows = [f"load avg {r['loadavg']:.2f} (1 min), threads {r['threads']}, CPU time {r['cpu_s']:.1f} s, "
            f"wall {r['wall_s']:.1f} s; {r['cpu_flags']}",
            f"{'encoder':<28}{'load s':>8}{'1 text p50 ms':>15}{'p95 ms':>9}{'32/batch t/s':>14}{'256/batch t/s':>15}"]
    for k in kinds:
        x = s[k]
        rows.append(f"{r['names'][k]:<28}{r['load_s'][k]:>8.2f}{x['single_p50_ms']:>15.2f}{x['single_p95_ms']:>9.2f}"
                    f"{x['batch'][32]:>14.1f}{x['batch'][256]:>15.1f}")
    for k in kinds[1:]:
        x = s[k]
        rows.append(f"{k + ' / fp32':<28}{'':>8}{f['single_p50_ms'] / x['single_p50_ms']:>14.2f}x"
                    f"{f['single_p95_ms'] / x['single_p95_ms']:>8.2f}x{x['batch'][32] / f['batch'][32]:>13.2f}x"
                    f"{x['batch'][256] / f['batch'][256]:>14.2f}x  (speed-up)")
    g = r.get("agreement")
    if not g:
        return "\n".join(rows)
    rows.append(f"agreement over {g['texts']} LoCoMo turns: cosine mean {g['cos_mean']:.4f}, min {g['cos_min']:.4f}, "
                f"1st percentile {g['cos_p1']:.4f}; top-10 overlap over {g['questions']} questions "
                f"{g['top10_overlap']:.3f}")
    return "\n".join(rows)


def cpu_flags() -> str:
    try:
        flags = next(ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("flags")).split()
    except (OSError, StopIteration):
        return "CPU flags unknown"
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "amx_int8")
    return "CPU: " + " ".join(f"{w}={'yes' if w in flags else 'no'}" for w in wanted)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("locomo", nargs="?", default=str(DEFAULT_FILE))
    ap.add_argument("--encoders", nargs="+", choices=KINDS, default=["fp32", "int8"],
                    help="fp32 (the baseline) is always run")
    ap.add_argument("--turns", type=int, default=2000)
    ap.add_argument("--single", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if not Path(args.locomo).is_file():
        sys.exit(f"no LoCoMo file at {args.locomo}")
    import torch

    torch.set_num_threads(args.threads)
    wall, cpu = time.perf_counter(), time.process_time()
    kinds = [k for k in KINDS if k == "fp32" or k in args.encoders]
    if "int8" in kinds:
        load("int8")  # the export, once, outside the timed load
    encoders, load_s = {}, {}
    for k in kinds:
        encoders[k], load_s[k] = load(k)
    texts, convs, questions = locomo_texts(args.locomo, args.turns)
    log.info("%d turns, %d questions", len(texts), len(questions))
    for enc in encoders.values():
        enc.encode(texts[:8])  # warm-up
    r = {"names": {k: e.name for k, e in encoders.items()}, "load_s": load_s, "threads": args.threads,
         "speed": speed(encoders, texts, args.single, args.rounds),
         "loadavg": os.getloadavg()[0], "cpu_flags": cpu_flags()}
    if "int8" in encoders:
        r["agreement"] = agreement(encoders["fp32"], encoders["int8"], texts, convs, questions)
    r["wall_s"], r["cpu_s"] = time.perf_counter() - wall, time.process_time() - cpu
    print(table(r))
    if args.out:
        Path(args.out).write_text(json.dumps(r, indent=2, default=str))


if __name__ == "__main__":
    main()
