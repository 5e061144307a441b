"""Construction throughput and memory of one semantic tree (docs/design.md, 'Semantic trees') against FAISS flat add.

    python -m benchmarks.construction [--sizes 10000 100000 1000000] [--structure flat|nested]
        [--repeat R] [--blas-threads 1] [--dim 384] [--session 50] [--cluster-size 50]
        [--noise 0.6] [--seed 0] [--set KEY=VALUE] [--out FILE.json] [--report FILE.json]

Synthetic, seeded, precomputed embeddings: n / cluster_size random unit centres; each AMU is
its centre + noise * N(0, I) / sqrt(dim), L2-normalised, with its cluster drawn uniformly (so
one session touches many clusters). Each size runs in a fresh subprocess, so the peak RSS
(`ru_maxrss`) is per size; the peak just after data generation is reported too, so the tree's
own increment shows. In the child: one `SemanticTree` with default `Config()` parameters;
AMUs are inserted in order, one `insert_many` batch per session of `--session` AMUs, with
`maintain()` after each and once at the end; insertion and maintenance are timed separately.
Baseline in the same child, after the tree: `faiss.IndexFlatIP(dim).add(X)` of the same
vectors. Progress goes to stderr; the child prints one JSON line to stdout and the parent
prints the Markdown table. With `--repeat R` the sizes run round by round (so a slow spell
of the machine hits every size) and the fastest run of each size is reported, every run kept
in the JSON.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import subprocess
import sys
import time

import numpy as np

FANOUT = 20  # nested data: clusters per topic, topics per super-topic
CHUNK = 16384  # rows generated at a time: keeps the data-only peak close to n * dim * 4 bytes
TARGET_RATE, TARGET_RATE_AT = 2000.0, 100_000


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def generate(n: int, dim: int, cluster_size: int, noise: float, seed: int, structure: str = "flat") -> np.ndarray:
    """(n, dim) float32 unit rows, built in chunks; the same arguments give the same data.

    "flat": n / cluster_size independent random unit centres. "nested": the centres themselves
    are grouped, FANOUT clusters per topic and FANOUT topics per super-topic, each level its
    parent plus N(0, I/dim) noise of norm ~1 (cosine ~0.7 to the parent), as topics nest in
    text embeddings.
    """
    rng = np.random.default_rng(seed)
    n_c = max(1, n // cluster_size)

    def unit(v: np.ndarray) -> np.ndarray:
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    if structure == "flat":
        centres = unit(rng.standard_normal((n_c, dim), dtype=np.float32))
    elif structure == "nested":
        n_t = max(1, -(-n_c // FANOUT))
        n_s = max(1, -(-n_t // FANOUT))
        supers = unit(rng.standard_normal((n_s, dim), dtype=np.float32))
        topics = unit(supers[np.arange(n_t) // FANOUT]
                      + rng.standard_normal((n_t, dim), dtype=np.float32) / math.sqrt(dim))
        centres = unit(topics[np.arange(n_c) // FANOUT]
                       + rng.standard_normal((n_c, dim), dtype=np.float32) / math.sqrt(dim))
    else:
        raise ValueError(f"structure {structure!r}: expected 'flat' or 'nested'")
    X = np.empty((n, dim), np.float32)
    for s in range(0, n, CHUNK):
        e = min(n, s + CHUNK)
        labels = rng.integers(0, n_c, e - s)
        block = centres[labels] + (noise / math.sqrt(dim)) * rng.standard_normal((e - s, dim), dtype=np.float32)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        X[s:e] = block
    return X


# the tree's steps that --breakdown times (insertion: the first two; the rest are maintenance's)
BREAKDOWN = ("descend_many", "_update_paths", "_merge_candidates", "_merge_children", "_maybe_split", "_regroup",
             "_collapse", "_observe_pairs", "leaf_size_hist", "_refresh_summaries")


def time_steps(tree, names=BREAKDOWN) -> dict[str, float]:
    """Wrap the named methods of one tree object with timers; returns the dict of seconds that
    they fill (name -> total). The wrappers are instance attributes, so calls through `self`
    inside the tree are timed too."""
    spent = dict.fromkeys(names, 0.0)

    def timed(name, method):
        def call(*a, **k):
            t = time.perf_counter()
            try:
                return method(*a, **k)
            finally:
                spent[name] += time.perf_counter() - t
        return call

    for name in names:
        setattr(tree, name, timed(name, getattr(tree, name)))
    return spent


def run_child(n: int, args) -> dict:
    import faiss

    from etamem.config import Config
    from etamem.views.semantic_tree import SemanticTree

    import_mb = peak_mb()
    t0 = time.perf_counter()
    X = generate(n, args.dim, args.cluster_size, args.noise, args.seed, args.structure)
    gen_s, data_mb = time.perf_counter() - t0, peak_mb()

    c = Config.from_dict({k: json.loads(v) for k, v in (kv.split("=", 1) for kv in args.set)})
    tree = SemanticTree.from_config(args.dim, c)
    spent = time_steps(tree) if args.breakdown else None
    t_ins = t_maint = 0.0
    cpu0 = time.process_time()
    step, next_report = max(1, n // 10), max(1, n // 10)
    for s in range(0, n, args.session):
        e = min(n, s + args.session)
        t = time.perf_counter()
        tree.insert_many([f"a{i}" for i in range(s, e)], X[s:e], [f"amu {i}" for i in range(s, e)])
        t_ins += time.perf_counter() - t
        t = time.perf_counter()
        tree.maintain()
        t_maint += time.perf_counter() - t
        if e >= next_report:
            print(f"[n={n}] {e}/{n} inserted: insert {t_ins:.1f}s, maintain {t_maint:.1f}s", file=sys.stderr, flush=True)
            next_report += step
    t = time.perf_counter()
    tree.maintain()  # the final one (a no-op when n is a multiple of the session length)
    t_maint += time.perf_counter() - t
    cpu_s = time.process_time() - cpu0
    tree_mb = peak_mb()

    shape = tree.shape()
    sizes = tree.count[tree.leaves()].astype(np.float64)
    p10, p50, p90 = (float(v) for v in np.percentile(sizes, [10, 50, 90]))
    total = t_ins + t_maint

    index = faiss.IndexFlatIP(args.dim)
    t = time.perf_counter()
    index.add(X)
    faiss_s = time.perf_counter() - t
    assert index.ntotal == n and tree.active_rows == n
    combined = n / total
    return {"amus": n, "generate_s": gen_s, "insert_s": t_ins, "maintain_s": t_maint,
            "insert_rate": n / t_ins, "maintain_rate": n / t_maint if t_maint else float("inf"),
            "combined_rate": combined, "us_per_amu": 1e6 * total / n,
            "cpu_s": cpu_s, "cpu_rate": n / cpu_s, "cpu_us_per_amu": 1e6 * cpu_s / n, "load_avg_1m": os.getloadavg()[0],
            "depth": tree.depth(), "leaves": shape["leaves"], "nodes": shape["nodes"],
            "mean_fanout": shape["mean_fanout"], "max_fanout": shape["max_fanout"],
            "leaf_size": {"min": float(sizes.min()), "p10": p10, "p50": p50, "p90": p90,
                          "max": float(sizes.max()), "mean": float(sizes.mean())},
            "thresholds": tree.calibrator.current.as_dict(), "calibration_updates": len(tree.calibrator.history),
            "maintenance_steps": tree.steps, "stats": dict(tree.stats),
            "import_peak_mb": import_mb, "data_peak_mb": data_mb, "tree_peak_mb": tree_mb,
            "tree_increment_mb": tree_mb - data_mb, "peak_mb_with_faiss": peak_mb(),
            "faiss_add_s": faiss_s, "faiss_add_rate": n / faiss_s, "ratio_to_faiss": combined / (n / faiss_s),
            **({"breakdown_us_per_amu": {k: 1e6 * v / n for k, v in spent.items()}} if spent is not None else {})}


def machine_info() -> dict:
    import faiss

    return {"cpu_count": os.cpu_count(), "python": platform.python_version(), "numpy": np.__version__,
            "faiss": getattr(faiss, "__version__", "?"), "platform": platform.platform(),
            "processor": platform.processor() or platform.machine()}


def table(rows: list[dict]) -> str:
    base = rows[0]
    head = ["AMUs", "insert AMUs/s", "maint. AMUs/s", "combined AMUs/s", "µs/AMU", "runs µs/AMU", "CPU µs/AMU",
            "µs ratio",
            "ln ratio", "depth", "path/AMU", "µs/path node", "leaves", "mean fan-out", "leaf p50/p90/max", "new leaves", "peak RSS MB (data)",
            "FAISS add AMUs/s", "tree/FAISS", "load"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        ls = r["leaf_size"]
        cells = [f"{r['amus']:,}", f"{r['insert_rate']:,.0f}", f"{r['maintain_rate']:,.0f}",
                 f"{r['combined_rate']:,.0f}", f"{r['us_per_amu']:.0f}",
                 "/".join(f"{u:.0f}" for u in r.get("runs_us_per_amu", [r["us_per_amu"]])),
                 f"{r['cpu_us_per_amu']:.0f}" if "cpu_us_per_amu" in r else "-",
                 f"{r['us_per_amu'] / base['us_per_amu']:.2f}",
                 f"{math.log(r['amus']) / math.log(base['amus']):.2f}", str(r["depth"]),
                 f"{path_per_amu(r):.2f}", f"{r['us_per_amu'] / path_per_amu(r):.1f}", f"{r['leaves']:,}",
                 f"{r['mean_fanout']:.1f}", f"{ls['p50']:.0f}/{ls['p90']:.0f}/{ls['max']:.0f}",
                 f"{r['stats']['new_leaves'] / r['amus']:.1%}",
                 f"{r['tree_peak_mb']:,.0f} ({r['data_peak_mb']:,.0f})", f"{r['faiss_add_rate']:,.0f}",
                 f"{r['ratio_to_faiss']:.2e}", f"{r['load_avg_1m']:.1f}" if "load_avg_1m" in r else "-"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def path_per_amu(row: dict) -> float:
    """Tree nodes updated per AMU (each AMU's path from its leaf to the root): the work."""
    return row["stats"]["pending_updates"] / row["amus"]


def per_ln_unit(rows: list[dict], value) -> list[float]:
    """How much `value(row)` adds per unit of ln n from one size to the next (the offset reading:
    c(n) = a + b ln n grows logarithmically when these do not rise)."""
    return [(value(b) - value(a)) / math.log(b["amus"] / a["amus"]) for a, b in zip(rows, rows[1:])]


def does_not_rise(slopes: list[float]) -> bool:
    return all(later <= earlier for earlier, later in zip(slopes, slopes[1:]))


def work_slopes(rows: list[dict]) -> list[float]:
    """Path nodes added per unit of ln n from one size to the next (the offset reading on the work)."""
    return per_ln_unit(rows, path_per_amu)


def targets(rows: list[dict], cost: str = "us_per_amu") -> dict:
    """The issue's two targets on `cost` ("us_per_amu": wall clock; "cpu_us_per_amu": process time)."""
    at = [r for r in rows if r["amus"] == TARGET_RATE_AT]
    rate = {"target": f">= {TARGET_RATE:,.0f} AMUs/s (insertion + amortised maintenance) at {TARGET_RATE_AT:,}",
            "measured": 1e6 / at[0][cost] if at else None,
            "met": (1e6 / at[0][cost] >= TARGET_RATE) if at else None}
    base = rows[0]
    growth = [{"amus": r["amus"], "cost_ratio": r[cost] / base[cost],
               "log_ratio": math.log(r["amus"]) / math.log(base["amus"])} for r in rows[1:]]
    covered = len(rows) > 1 and base["amus"] <= 10_000 and rows[-1]["amus"] >= 1_000_000
    # c(n) = a + b ln n also grows logarithmically (the tree's depth is ~ log_f(n / leaf size), an
    # offset the plain ratio test ignores): check that the cost added per unit of ln n does not rise
    per_unit = per_ln_unit(rows, lambda r: r[cost])
    slopes = [{"from": a["amus"], "to": b["amus"], "us_per_ln_unit": u} for a, b, u in zip(rows, rows[1:], per_unit)]
    log = {"target": "per-AMU cost grows no faster than logarithmically from 10k to 1M",
           "range": f"{base['amus']:,} -> {rows[-1]['amus']:,}", "full_range_measured": covered, "points": growth,
           "met": all(g["cost_ratio"] <= g["log_ratio"] for g in growth) if growth else None,
           "slopes": slopes,
           "slope_met": does_not_rise(per_unit) if len(per_unit) > 1 else None}
    return {"rate": rate, "log_growth": log}


def fastest(runs: list[dict]) -> dict:
    """The run with the lowest wall µs/AMU, with the CPU µs/AMU replaced by the lowest of all runs
    (each is the usual estimator under noise) and every run's figures kept."""
    best = dict(min(runs, key=lambda r: r["us_per_amu"]))
    best["runs_us_per_amu"] = [r["us_per_amu"] for r in runs]
    best["runs_cpu_us_per_amu"] = [r["cpu_us_per_amu"] for r in runs]
    best["cpu_us_per_amu"] = min(best["runs_cpu_us_per_amu"])
    best["cpu_rate"] = 1e6 / best["cpu_us_per_amu"]
    return best


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--session", type=int, default=50, help="AMUs per session; maintain() after each")
    ap.add_argument("--cluster-size", type=int, default=50)
    ap.add_argument("--noise", type=float, default=0.6)
    ap.add_argument("--structure", choices=("flat", "nested"), default="flat",
                    help="cluster centres independent (flat) or grouped in topics and super-topics (nested)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="write all results to this JSON file")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="Config override for the tree (JSON value), e.g. --set b_ins=5")
    ap.add_argument("--report", default=None, metavar="FILE.json", help="print the table of a saved run and exit")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs per size, interleaved round by round (10k, 100k, 1M, 10k, ...); the fastest run "
                         "of each size is reported, all runs are kept")
    ap.add_argument("--blas-threads", type=int, default=1,
                    help="BLAS/OpenMP threads in each child (default 1: the tree's products are small and extra "
                         "threads only spin, which inflates CPU time)")
    ap.add_argument("--breakdown", action="store_true",
                    help="also time the tree's main steps (µs/AMU each; the timers slow every figure down, "
                         "by 3-20%% in our 10k runs: compare breakdown runs with each other only)")
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.report:
        with open(args.report) as f:
            report(json.load(f))
        return
    if args.child is not None:
        print(json.dumps(run_child(args.child, args)), flush=True)
        return

    command = "python -m benchmarks.construction " + " ".join(sys.argv[1:] if argv is None else argv)
    common = ["--dim", str(args.dim), "--session", str(args.session), "--cluster-size", str(args.cluster_size),
              "--noise", str(args.noise), "--seed", str(args.seed), "--structure", args.structure,
              *(a for kv in args.set for a in ("--set", kv)), *(["--breakdown"] if args.breakdown else [])]
    env = dict(os.environ, **{k: str(args.blas_threads) for k in
                              ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")})
    sizes, t_start = sorted(args.sizes), time.perf_counter()
    runs: dict[int, list[dict]] = {n: [] for n in sizes}
    for r in range(max(1, args.repeat)):
        for n in sizes:
            print(f"size {n:,}, run {r + 1}/{args.repeat}: starting a fresh subprocess", file=sys.stderr, flush=True)
            proc = subprocess.run([sys.executable, "-m", "benchmarks.construction", "--child", str(n), *common],
                                  stdout=subprocess.PIPE, text=True, check=True, env=env)
            runs[n].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    rows = [fastest(runs[n]) for n in sizes]
    wall = time.perf_counter() - t_start
    doc = {"command": command, "machine": machine_info(),
           "args": {k: v for k, v in vars(args).items() if k not in ("child", "report")}, "wall_s": wall,
           "results": rows, "targets": targets(rows)}
    if all("cpu_us_per_amu" in r for r in rows):
        doc["targets_cpu"] = targets(rows, "cpu_us_per_amu")
    report(doc)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=2)
        print(f"\nwrote {args.out}")


def report(doc: dict) -> None:
    """Print the Markdown table and the target verdicts of one run (as written by --out)."""
    info, a, rows = doc["machine"], doc["args"], doc["results"]
    print(f"machine: {info['cpu_count']} CPUs, {info['processor']}, {info['platform']}; python {info['python']}, "
          f"numpy {info['numpy']}, faiss {info['faiss']}")
    print(f"command: {doc['command']}")
    print(f"data: {a.get('structure', 'flat')} clusters, dim {a['dim']}, cluster size {a['cluster_size']}, "
          f"noise {a['noise']}, seed {a['seed']}; maintain() every {a['session']} AMUs; wall time {doc['wall_s']:.0f}s\n")
    print(table(rows))
    if all("breakdown_us_per_amu" in r for r in rows):
        names = list(rows[0]["breakdown_us_per_amu"])
        print("\nµs/AMU by step (--breakdown; nested calls are inside their caller's figure):\n")
        print("| step | " + " | ".join(f"{r['amus']:,}" for r in rows) + " |\n|---|" + "---|" * len(rows))
        for name in names:
            print(f"| {name} | " + " | ".join(f"{r['breakdown_us_per_amu'][name]:.1f}" for r in rows) + " |")
    print("\nµs/AMU: the fastest of the runs (runs µs/AMU: all of them, in order; CPU µs: the lowest). "
          "µs ratio: µs/AMU over the smallest size; ln ratio: ln(n)/ln(n_smallest), the logarithmic reference. "
          "CPU µs: process time (less sensitive to other load). Path/AMU: tree nodes updated per AMU (the path "
          "from its leaf to the root, a machine-independent measure of the work); µs/path node: µs/AMU over it. "
          "New leaves: insertions that opened a leaf. "
          "Peak RSS: ru_maxrss of the child after the tree is built (in brackets: after data generation). "
          "Load: 1-minute load average at the end (2 cores; above ~1 means other work shared them).")
    fmt = lambda m: "not measured" if m is None else ("met" if m else "NOT met")  # noqa: E731
    print("\nTargets (issue): insertion + amortised maintenance >= 2,000 AMUs/s at 100k; per-AMU cost growing "
          "no faster than logarithmically from 10k to 1M.")
    for label, key in (("wall clock", "targets"), ("CPU time", "targets_cpu")):
        if key not in doc:
            continue
        r, g = doc[key]["rate"], doc[key]["log_growth"]
        measured = "n/a" if r["measured"] is None else f"{r['measured']:,.0f} AMUs/s"
        print(f"{label}:")
        print(f"- rate at 100k: {measured} -> {fmt(r['met'])}")
        pts = ", ".join(f"{p['amus']:,}: {p['cost_ratio']:.2f} vs {p['log_ratio']:.2f}" for p in g["points"])
        scope = "" if g["full_range_measured"] else f" (only {g['range']} measured, not the full 10k -> 1M range)"
        print(f"- log growth, strict (cost ratio <= ln ratio, i.e. cost proportional to ln n) {pts or 'n/a'} -> "
              f"{fmt(g['met'])}{scope}")
        sl = ", ".join(f"{x['from']:,}->{x['to']:,}: {x['us_per_ln_unit']:.1f}" for x in g["slopes"])
        print(f"- log growth, offset allowed (cost = a + b ln n: µs added per unit of ln n must not rise) "
              f"{sl or 'n/a'} -> {fmt(g['slope_met'])}")
    ws = work_slopes(rows)
    if len(ws) > 1:  # not a target of the issue, which is on time: the machine-independent part of it
        print("work (path/AMU; not a time, so not the issue's target): path nodes added per unit of ln n "
              + ", ".join(f"{a['amus']:,}->{b['amus']:,}: {w:.2f}" for a, b, w in zip(rows, rows[1:], ws))
              + f" -> {'logarithmic (does not rise)' if does_not_rise(ws) else 'rises'}")

if __name__ == "__main__":
    main()
