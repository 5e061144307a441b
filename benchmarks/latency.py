"""Query latency of ETAMem retrieval against flat FAISS + BM25 over the same AMUs.

    python -m benchmarks.latency [--sizes 10000 100000 1000000] [--queries 200] [--out FILE.json]

Per size, in a fresh subprocess: seeded synthetic AMUs in one space (clustered unit vectors
as in `benchmarks.construction`; each cluster has its own small vocabulary, an AMU's text is
drawn from it plus noise words; sessions of 50 AMUs, one per day; a third of the AMUs
positive/negative so all three views are populated, the affective vector being the text
vector rotated by a fixed random orthogonal map). Views are built with `maintain()` every
`--session-maintain` AMUs, then the retrieval index once. Queries are drawn like AMUs.

Reported: wall-clock and CPU-time (process time) p50/p95 of ETAMem search (routing + beam search over Event, Affect, Time + merge;
K 20, B 10, beta 0.1) and of the flat baseline (FAISS `IndexFlatIP` top-200 + bm25s BM25 over
all AMUs, score (1 - beta) * cos + beta * BM25n), measured in the same process on the same
queries; query encoding with the real MiniLM encoder is measured separately.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone

import numpy as np


def synth(n: int, dim: int, seed: int, cluster_size: int = 50, noise: float = 0.6):
    rng = np.random.default_rng(seed)
    n_clusters = max(1, n // cluster_size)
    centres = rng.standard_normal((n_clusters, dim)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    vocab = [f"w{i}" for i in range(max(2000, n_clusters * 4))]
    topic = rng.integers(0, len(vocab), (n_clusters, 8))
    labels = rng.integers(0, n_clusters, n)
    x = centres[labels] + noise * rng.standard_normal((n, dim)).astype(np.float32) / np.sqrt(dim)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    words = np.where(rng.random((n, 8)) < 0.75, topic[labels][:, rng.integers(0, 8, 8)],
                     rng.integers(0, len(vocab), (n, 8)))
    texts = [" ".join(vocab[w] for w in row) for row in words]
    return centres, topic, vocab, labels, x.astype(np.float32), texts


def percentiles(ms: list[float]) -> dict:
    a = np.asarray(ms)
    return {"p50_ms": float(np.percentile(a, 50)), "p95_ms": float(np.percentile(a, 95)), "mean_ms": float(a.mean())}


def run_child(n: int, args) -> dict:
    from etamem.config import Config
    from etamem.retrieval.flat import FlatHybridIndex
    from etamem.retrieval import SpaceIndex
    from etamem.types import AMU
    from etamem.views import SpaceViews

    dim = 384
    centres, topic, vocab, labels, x, texts = synth(n, dim, args.seed)
    rot = np.linalg.qr(np.random.default_rng(args.seed + 1).standard_normal((dim, dim)))[0].astype(np.float32)
    xa = x @ rot
    t0 = datetime(2020, 1, 1, tzinfo=timezone.utc)
    pols = ("neutral", "neutral", "positive", "neutral", "negative", "neutral")
    amus = [AMU(amu_id=f"a{i}", text=texts[i], speaker="S", timestamp=t0 + timedelta(days=i // 50),
                session_id=f"s{i // 50}", source_turn_ids=(f"t{i}",), polarity=pols[i % 6]) for i in range(n)]
    cfg = Config()
    views = SpaceViews(cfg, dim, dim)
    t_build = time.perf_counter()
    for start in range(0, n, args.session_maintain):
        end = min(n, start + args.session_maintain)
        views.add(amus[start:end], x[start:end], xa[start:end])
        views.maintain()
    build_s = time.perf_counter() - t_build
    t_index = time.perf_counter()
    index = SpaceIndex(views, amus, x, xa, exact_max=cfg.routing_exact_max)
    index_s = time.perf_counter() - t_index
    flat = FlatHybridIndex(x, texts)

    rng = np.random.default_rng(args.seed + 2)
    qc = rng.integers(0, len(centres), args.queries)
    qv = centres[qc] + 0.6 * rng.standard_normal((args.queries, dim)).astype(np.float32) / np.sqrt(dim)
    qv = (qv / np.linalg.norm(qv, axis=1, keepdims=True)).astype(np.float32)
    qt = [" ".join(vocab[w] for w in topic[c][rng.integers(0, 8, 3)]) for c in qc]
    for i in range(3):  # warm-up
        index.search(qt[i], qv[i], qv[i] @ rot, 20, beam=10, beta=0.1)
        flat.search(qv[i], qt[i], 20, beta=0.1)
    ours, base, ours_cpu, base_cpu = [], [], [], []
    for i in range(args.queries):
        t, c = time.perf_counter(), time.process_time()
        index.search(qt[i], qv[i], qv[i] @ rot, cfg.top_k, beam=cfg.beam_width, beta=cfg.bm25_weight,
                     routing_candidates=cfg.routing_candidates)
        ours.append(1000 * (time.perf_counter() - t))
        ours_cpu.append(1000 * (time.process_time() - c))
        t, c = time.perf_counter(), time.process_time()
        flat.search(qv[i], qt[i], cfg.top_k, beta=cfg.bm25_weight)
        base.append(1000 * (time.perf_counter() - t))
        base_cpu.append(1000 * (time.process_time() - c))
    shape = views.shape()
    return {"amus": n, "load_avg_1m": os.getloadavg()[0], "build_s": build_s, "index_s": index_s, "etamem": percentiles(ours), "flat": percentiles(base),
            "etamem_cpu": percentiles(ours_cpu), "flat_cpu": percentiles(base_cpu),
            "leaves": {v: shape[v]["leaves"] for v in ("event", "affect")}, "sessions": shape["time"]["sessions"],
            "depth": {v: shape[v]["depth"] for v in ("event", "affect")}}


def encoding_latency(queries: int) -> dict:
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from etamem.encoders import SentenceTransformerEncoder

    enc = SentenceTransformerEncoder("minilm", device="cpu")
    qs = [f"When did Caroline go to the support group number {i}?" for i in range(queries)]
    enc.encode(qs[:3])
    ms = []
    for q in qs:
        t = time.perf_counter()
        enc.encode([q])
        ms.append(1000 * (time.perf_counter() - t))
    return percentiles(ms)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--session-maintain", type=int, default=500, help="AMUs between maintain() calls while building")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child is not None:
        print(json.dumps(run_child(args.child, args)), flush=True)
        return
    rows = []
    for n in sorted(args.sizes):
        print(f"size {n:,}: building in a fresh subprocess", file=sys.stderr, flush=True)
        out = subprocess.run([sys.executable, "-m", "benchmarks.latency", "--child", str(n), "--queries",
                              str(args.queries), "--session-maintain", str(args.session_maintain), "--seed",
                              str(args.seed)], stdout=subprocess.PIPE, text=True, check=True).stdout
        rows.append(json.loads(out.strip().splitlines()[-1]))
    enc = encoding_latency(args.queries)
    print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}, "
          f"numpy {np.__version__}; {args.queries} queries per size; K 20, B 10, beta 0.1\n")
    print(f"query encoding (MiniLM, one query per call): p50 {enc['p50_ms']:.1f} ms, p95 {enc['p95_ms']:.1f} ms\n")
    print("| AMUs | ETAMem p50 ms | ETAMem p95 ms | flat FAISS+BM25 p50 ms | flat p95 ms | ETAMem/flat p50 | "
          "p50 growth vs smallest | leaves event/affect | sessions | depth event/affect | build s | index s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    base = rows[0]["etamem"]["p50_ms"]
    for r in rows:
        e, f = r["etamem"], r["flat"]
        print(f"| {r['amus']:,} | {e['p50_ms']:.2f} | {e['p95_ms']:.2f} | {f['p50_ms']:.2f} | {f['p95_ms']:.2f} | "
              f"{e['p50_ms'] / f['p50_ms']:.2f} | {e['p50_ms'] / base:.2f} (n x{r['amus'] / rows[0]['amus']:.0f}) | "
              f"{r['leaves']['event']}/{r['leaves']['affect']} | {r['sessions']} | "
              f"{r['depth']['event']}/{r['depth']['affect']} | {r['build_s']:.0f} | {r['index_s']:.0f} |")
    print("\nCPU time per query (process time, all threads; less sensitive to other load on the machine):\n")
    print("| AMUs | ETAMem CPU p50 ms | ETAMem CPU p95 ms | flat CPU p50 ms | flat CPU p95 ms |")
    print("|---|---|---|---|---|")
    for r in rows:
        e, f = r["etamem_cpu"], r["flat_cpu"]
        print(f"| {r['amus']:,} | {e['p50_ms']:.2f} | {e['p95_ms']:.2f} | {f['p50_ms']:.2f} | {f['p95_ms']:.2f} |")
    at = [r for r in rows if r["amus"] == 100_000]
    if at:
        p50 = at[0]["etamem"]["p50_ms"]
        print(f"\ntarget: search p50 <= 20 ms at 100k -> {p50:.2f} ms: {'met' if p50 <= 20 else 'NOT met'}")
    if len(rows) > 1:
        g = rows[-1]["etamem"]["p50_ms"] / base
        n_ratio = rows[-1]["amus"] / rows[0]["amus"]
        print(f"target: sublinear growth -> p50 x{g:.2f} for n x{n_ratio:.0f}: {'met' if g < n_ratio else 'NOT met'}")
        for a, b in zip(rows, rows[1:]):
            print(f"  {a['amus']:,} -> {b['amus']:,}: p50 x{b['etamem']['p50_ms'] / a['etamem']['p50_ms']:.2f} "
                  f"for n x{b['amus'] / a['amus']:.0f}")
    loads = ", ".join(f"{r['amus']:,}: {r['load_avg_1m']:.1f}" for r in rows)
    print(f"1-minute load average at the end of each size (2 cores; above ~1 means other work shared them): {loads}")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"rows": rows, "encoding": enc, "args": vars(args)}, fh, indent=1)


if __name__ == "__main__":
    main()
