"""Many spaces in one process: RSS and `Memory.search` latency under a residency budget.

    python -m benchmarks.many_spaces [--spaces 10000] [--turns 50] [--budget 200] [--searches 400]
        [--quick] [--work DIR] [--keep] [--seed 0] [--out FILE.json]

1. Build: `--spaces` spaces of `--turns` chat-like turns each (a small seeded generator: two
   speakers, five sessions, sentences about pets, trips, jobs, food, hobbies), one `add` per
   space, into one store directory, by a `Memory` with `max_live_spaces=--budget` (fresh
   subprocess; its RSS after the build is reported). The text encoder is a hashed bag of words
   (384 dimensions, as MiniLM) so that the engine, not the encoder, is measured; the affect
   tagger is VADER over it; the rest is the default `Config()`.
2. Then in a fresh subprocess per mode, `bounded` (`max_live_spaces=--budget`) and `unbounded`
   (`max_live_spaces=0`, the baseline), the same seeded calls (`search`, top_k 20):
   `first` every space once, in a shuffled order (each opens from its derived files);
   `warm` spaces among the last `--budget` touched (live in both modes);
   `cold` spaces touched before those (evicted in `bounded`: reopened from their derived files;
   still live in `unbounded`); `zipf` users drawn from a Zipf law (a=1.2, seeded) over a
   shuffled ranking of the spaces. RSS (VmRSS) after each phase and the peak (`ru_maxrss`).
Printed as a markdown table with bounded / unbounded ratio columns; `--out` writes the JSON.
`--quick`: 300 spaces, budget 50, 200 searches per phase (a CI-sized run).
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ENCODER_NAME = "hashing-bag-of-words-384"
PHASES = ("first", "warm", "cold", "zipf")
NAMES = ["Ana", "Ben", "Chloe", "Dev", "Eli", "Fatima", "Goran", "Hana", "Ivo", "June", "Kofi", "Lena", "Marta",
         "Nico", "Omar", "Pia", "Quinn", "Rosa", "Sami", "Tess"]
SUBJECTS = [
    "my cat {pet} keeps waking me up at {hour}", "we are planning a trip to {place} in {month}",
    "I started a new job as a {job} last {day}", "I cooked {food} for my sister on {day}",
    "my dog {pet} learned to fetch a {thing}", "I have been learning the {instrument} for {n} weeks",
    "the train to {place} was late again this {day}", "I signed up for a {n} kilometre run in {month}",
    "my manager asked me to lead the {thing} project", "I am trying to eat less {food} this {month}",
    "we adopted a rabbit and called it {pet}", "I finished reading a novel set in {place}",
]
FILL = {
    "pet": ["Miso", "Tofu", "Pepper", "Luna", "Biscuit", "Olive"], "hour": ["five", "six", "dawn", "midnight"],
    "place": ["Lisbon", "Kyoto", "Oslo", "Lima", "Nairobi", "Porto", "Hanoi"], "job": ["nurse", "designer",
    "teacher", "data analyst", "chef"], "month": ["June", "March", "October", "May"], "day": ["Monday", "Friday",
    "weekend", "Sunday"], "food": ["lentil soup", "sushi", "pasta", "curry", "sugar"], "thing": ["frisbee",
    "ball", "migration", "garden"], "instrument": ["cello", "guitar", "piano"], "n": ["two", "five", "ten", "21"],
}
REPLIES = ["That sounds lovely, how did it go?", "Oh no, what happened next?", "Tell me more about it.",
           "Good luck with that!", "How do you feel about it now?"]


class BagOfWordsEncoder:
    """Hashed bag of lower-cased words in 384 dimensions, L2-normalised: deterministic across
    processes and fast, so the engine is measured rather than a model."""

    name = ENCODER_NAME

    def __init__(self, dim: int = 384):
        self.dim = dim

    def encode(self, texts):
        out = np.zeros((len(texts), self.dim), np.float32)
        for i, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "little")
                out[i, h % self.dim] += 1.0
            out[i, -1] += 0.01
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def sentence(rng: np.random.Generator) -> str:
    template = SUBJECTS[int(rng.integers(len(SUBJECTS)))]
    text = template.format(**{k: v[int(rng.integers(len(v)))] for k, v in FILL.items()})
    return text[0].upper() + text[1:] + "."


def conversation(k: int, turns: int) -> list[dict]:
    """`turns` seeded chat-like turns of space k: a user and an assistant over five sessions."""
    rng = np.random.default_rng(1000 + k)
    user = NAMES[k % len(NAMES)]
    per_session = max(1, -(-turns // 5))
    out = []
    for i in range(turns):
        s, j = divmod(i, per_session)
        text = sentence(rng) if i % 2 == 0 else REPLIES[int(rng.integers(len(REPLIES)))] + " " + sentence(rng)
        out.append({"turn_id": f"t{i}", "session_id": f"s{s}", "speaker": user if i % 2 == 0 else "Assistant",
                    "text": text, "timestamp": f"2023-{s + 1:02d}-10T10:{j:02d}"})
    return out


def query(rng: np.random.Generator) -> str:
    return "What did I say about " + sentence(rng).rstrip(".").lower().split(" ", 2)[-1] + "?"


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def memory(path: Path, budget: int):
    from etamem import Memory
    from etamem.models.affect import VaderAffectTagger

    enc = BagOfWordsEncoder()
    return Memory(path, config={"max_live_spaces": budget}, text_encoder=enc, affect_tagger=VaderAffectTagger(enc))


def build(path: Path, spaces: int, turns: int, budget: int) -> dict:
    mem = memory(path, budget)
    base, t0, amus = rss_mb(), time.perf_counter(), 0
    for k in range(spaces):
        amus += len(mem.add(conversation(k, turns), space=f"user-{k}"))
        if (k + 1) % max(1, spaces // 10) == 0:
            print(f"  built {k + 1:,} spaces, {time.perf_counter() - t0:.0f} s, RSS {rss_mb():.0f} MB",
                  file=sys.stderr, flush=True)
    seconds = time.perf_counter() - t0
    row = {"spaces": spaces, "turns": spaces * turns, "amus": amus, "build_s": round(seconds, 1),
           "rss_before_mb": round(base, 1), "rss_after_build_mb": round(rss_mb(), 1),
           "residency": dataclasses.asdict(mem.residency())}
    mem.close()
    return row


def plan(spaces: int, budget: int, searches: int, seed: int) -> dict[str, list[tuple[int, str]]]:
    """The same (space, query) calls for both modes, phase by phase."""
    rng = np.random.default_rng(seed)
    first = rng.permutation(spaces)
    recent, older = first[-budget:], first[:-budget]
    warm = rng.choice(recent, size=searches)
    cold = rng.choice(older, size=min(searches, len(older)), replace=False) if len(older) else np.zeros(0, int)
    ranking = rng.permutation(spaces)
    ranks = rng.zipf(1.2, size=searches * 4)
    zipf = ranking[ranks[ranks <= spaces][:searches] - 1]
    return {name: [(int(k), query(rng)) for k in ks] for name, ks in
            (("first", first), ("warm", warm), ("cold", cold), ("zipf", zipf))}


def run_mode(path: Path, budget: int, calls: dict[str, list[tuple[int, str]]]) -> dict:
    mem = memory(path, budget)
    mem.warm()
    out = {"rss_open_mb": round(rss_mb(), 1)}
    for phase in PHASES:
        before = mem.residency()
        times = []
        for k, q in calls[phase]:
            t0 = time.perf_counter()
            mem.search(q, space=f"user-{k}", top_k=20)
            times.append((time.perf_counter() - t0) * 1000)
        after = mem.residency()
        ms = np.asarray(times) if times else np.zeros(1)
        out[phase] = {"searches": len(times), "p50_ms": round(float(np.percentile(ms, 50)), 2),
                      "p99_ms": round(float(np.percentile(ms, 99)), 2), "opens": after.opens - before.opens,
                      "evictions": after.evictions - before.evictions, "rss_mb": round(rss_mb(), 1),
                      "live": after.live}
    out["peak_rss_mb"] = round(peak_mb(), 1)
    mem.close()
    return out


def child(args) -> dict:
    path = Path(args.work) / "store"
    if args.child == "build":
        return build(path, args.spaces, args.turns, args.budget)
    calls = plan(args.spaces, args.budget, args.searches, args.seed)
    return run_mode(path, args.budget if args.child == "bounded" else 0, calls)


def in_subprocess(mode: str, args, work: str) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.many_spaces", "--child", mode, "--work", work,
           "--spaces", str(args.spaces), "--turns", str(args.turns), "--budget", str(args.budget),
           "--searches", str(args.searches), "--seed", str(args.seed)]
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def table(result: dict) -> str:
    b, u = result["bounded"], result["unbounded"]
    lines = ["| phase | searches | bounded p50 ms | bounded p99 ms | unbounded p50 ms | unbounded p99 ms | "
             "ratio p50 | ratio p99 | bounded opens | bounded RSS MB | unbounded RSS MB | ratio RSS |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for phase in PHASES:
        x, y = b[phase], u[phase]
        lines.append(f"| {phase} | {x['searches']:,} | {x['p50_ms']:.2f} | {x['p99_ms']:.2f} | {y['p50_ms']:.2f} | "
                     f"{y['p99_ms']:.2f} | {x['p50_ms'] / y['p50_ms']:.2f} | {x['p99_ms'] / y['p99_ms']:.2f} | "
                     f"{x['opens']:,} | {x['rss_mb']:,.0f} | {y['rss_mb']:,.0f} | {x['rss_mb'] / y['rss_mb']:.2f} |")
    lines.append(f"| peak | | | | | | | | | {b['peak_rss_mb']:,.0f} | {u['peak_rss_mb']:,.0f} | "
                 f"{b['peak_rss_mb'] / u['peak_rss_mb']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spaces", type=int, default=10_000)
    ap.add_argument("--turns", type=int, default=50, help="turns per space")
    ap.add_argument("--budget", type=int, default=200, help="max_live_spaces of the bounded mode")
    ap.add_argument("--searches", type=int, default=400, help="searches per phase (warm, cold, zipf)")
    ap.add_argument("--quick", action="store_true", help="300 spaces, budget 50, 200 searches per phase")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", default=None, help="directory for the store (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the store")
    ap.add_argument("--out", default=None, help="write the JSON here")
    ap.add_argument("--child", choices=("build", "bounded", "unbounded"), default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.quick:
        args.spaces, args.budget, args.searches = 300, 50, 200
    if args.spaces < 1 or not 1 <= args.budget < args.spaces or args.turns < 2 or args.searches < 1:
        ap.error("need --spaces >= 1, 1 <= --budget < --spaces, --turns >= 2, --searches >= 1")
    if args.child:
        print(json.dumps(child(args)), flush=True)
        return
    work = args.work or tempfile.mkdtemp(prefix="etamem-many-spaces-")
    try:
        print(f"building {args.spaces:,} spaces x {args.turns} turns (budget {args.budget})", file=sys.stderr, flush=True)
        result = {"spaces": args.spaces, "turns": args.turns, "budget": args.budget, "searches": args.searches,
                  "seed": args.seed, "encoder": ENCODER_NAME, "affect": "vader",
                  "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}",
                  "build": in_subprocess("build", args, work)}
        for mode in ("bounded", "unbounded"):
            print(f"searching, {mode}", file=sys.stderr, flush=True)
            result[mode] = in_subprocess(mode, args, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    bld = result["build"]
    print(f"{args.spaces:,} spaces x {args.turns} turns ({bld['amus']:,} AMUs), budget {args.budget} live spaces; "
          f"text encoder: {ENCODER_NAME} (not MiniLM: the engine is measured), affect: VADER; {result['machine']}")
    print(f"build (bounded): {bld['build_s']:.0f} s, RSS {bld['rss_before_mb']:.0f} -> {bld['rss_after_build_mb']:.0f} MB; "
          f"evictions {bld['residency']['evictions']:,}\n")
    print(table(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
