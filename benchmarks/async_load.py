"""AsyncMemory under load: event-loop stalls and throughput, against the sync Memory in threads.

    python -m benchmarks.async_load [--coroutines 50] [--spaces 10] [--rounds 3] [--workers 4]
        [--encoder minilm|hashing] [--quick] [--out FILE.json]

`--coroutines` workers over `--spaces` spaces (worker w on space w % spaces), each doing
`--rounds` rounds of one `add` (two chat-like turns with ids) and two `search`es (top_k 5) of its
space, on a fresh store in a temporary directory per mode, the models warmed first:

- `async`: `AsyncMemory(memory, max_workers=--workers)`, the workers as coroutines under one
  `asyncio.gather`;
- `threads`: the sync `Memory`, each worker in its own thread (`--coroutines` threads), the
  baseline for throughput;
- `blocking`: the sync `Memory` called from the coroutines on the event loop (what an async
  agent does without AsyncMemory), one round only: the reference for the stalls.

In every mode an event loop in the main thread runs a probe coroutine that sleeps 5 ms in a loop
and records how late it wakes (the stall an async server's other requests would see). Reported:
calls per second, p50/p99 call latency, max/p99 loop lateness. The text encoder: the real MiniLM
(default) or the hashed bag of words of the tests (`--encoder hashing`). Printed as a markdown
table; `--out` (default benchmarks/results/async_load.json) gets the JSON.
`--quick`: 20 coroutines, 5 spaces, one round, hashing encoder (a smoke-sized run).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import threading
import time
from pathlib import Path

try:
    from .serve_load import percentile
except ImportError:
    from serve_load import percentile

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "benchmarks" / "results" / "async_load.json"
PROBE_PERIOD = 0.005
PETS = ["cat", "dog", "parrot", "rabbit", "turtle", "hamster", "goldfish"]
PLACES = ["Lisbon", "Oslo", "Kyoto", "Lima", "Cairo", "Quito", "Hanoi"]
QUERIES = ["Which pet did the user adopt?", "Where is the user travelling next month?"]


def make_encoder(kind: str):
    if kind == "hashing":
        sys.path.insert(0, str(REPO / "tests"))
        from conftest import HashingEncoder

        return HashingEncoder(384)
    from etamem.models.encoders import SentenceTransformerEncoder

    return SentenceTransformerEncoder("minilm", device="cpu")


def make_memory(encoder, path: str):
    from etamem import Memory
    from etamem.models.affect import VaderAffectTagger
    from etamem.models.encoders import CachedEncoder

    enc = CachedEncoder(encoder)
    mem = Memory(path, text_encoder=enc, affect_tagger=VaderAffectTagger(enc))
    enc.persist = mem.store
    return mem.warm()


def turns(space: str, w: int, r: int) -> list[dict]:
    pet, place = PETS[(w + r) % len(PETS)], PLACES[(3 * w + r) % len(PLACES)]
    return [{"id": f"{space}:w{w}:r{r}:0", "session_id": f"w{w}", "role": "user",
             "content": f"I adopted a {pet} last spring and named it Pixel {r}."},
            {"id": f"{space}:w{w}:r{r}:1", "session_id": f"w{w}", "role": "user",
             "content": f"Next month I am travelling to {place} with my sister."}]


def worker_calls(space: str, w: int, rounds: int):
    """The worker's calls in order: (method name, args, kwargs)."""
    for r in range(rounds):
        yield "add", (turns(space, w, r),), {"space": space}
        for q in QUERIES:
            yield "search", (q,), {"space": space, "top_k": 5}


async def probe(stop: asyncio.Event) -> list[float]:
    late = []
    while not stop.is_set():
        t0 = time.perf_counter()
        await asyncio.sleep(PROBE_PERIOD)
        late.append(time.perf_counter() - t0 - PROBE_PERIOD)
    return late


async def drive(run_workers) -> tuple[float, list[float], list[float]]:
    """(wall seconds, call latencies, probe lateness) of `await run_workers(latencies)` beside the probe."""
    stop = asyncio.Event()
    probe_task = asyncio.create_task(probe(stop))
    await asyncio.sleep(0.05)
    latencies: list[float] = []
    t0 = time.perf_counter()
    try:
        await run_workers(latencies)
    finally:
        wall = time.perf_counter() - t0
        stop.set()
    return wall, latencies, await probe_task


def run_mode(mode: str, encoder, args) -> dict:
    from etamem import AsyncMemory

    spaces = [f"space{i}" for i in range(args.spaces)]
    rounds = 1 if mode == "blocking" else args.rounds
    with tempfile.TemporaryDirectory(prefix=f"etamem-async-{mode}-") as work:
        mem = make_memory(encoder, work)
        amem = AsyncMemory(mem, max_workers=args.workers) if mode == "async" else None

        async def as_coroutines(latencies):
            async def worker(w):
                for name, a, kw in worker_calls(spaces[w % len(spaces)], w, rounds):
                    t = time.perf_counter()
                    if amem is not None:
                        await getattr(amem, name)(*a, **kw)
                        latencies.append(time.perf_counter() - t)
                    else:  # blocking: the sync call on the loop
                        getattr(mem, name)(*a, **kw)
                        latencies.append(time.perf_counter() - t)
                        await asyncio.sleep(0)

            await asyncio.gather(*(worker(w) for w in range(args.coroutines)))

        async def as_threads(latencies):
            lock = threading.Lock()

            def worker(w):
                for name, a, kw in worker_calls(spaces[w % len(spaces)], w, rounds):
                    t = time.perf_counter()
                    getattr(mem, name)(*a, **kw)
                    with lock:
                        latencies.append(time.perf_counter() - t)

            threads = [threading.Thread(target=worker, args=(w,)) for w in range(args.coroutines)]
            for th in threads:
                th.start()
            while any(th.is_alive() for th in threads):
                await asyncio.sleep(0.01)
            for th in threads:
                th.join()

        wall, lat, late = asyncio.run(drive(as_threads if mode == "threads" else as_coroutines))
        if amem is not None:
            asyncio.run(amem.aclose())
        stored = sum(len(mem.turns(s)) for s in spaces)
        mem.close()
    expected = args.coroutines * rounds * 2
    if stored != expected:
        raise RuntimeError(f"{mode}: {stored} turns stored, expected {expected}")
    return {"calls": len(lat), "wall_s": round(wall, 3), "calls_per_s": round(len(lat) / wall, 1),
            "call_p50_ms": round(percentile(lat, 0.5) * 1e3, 1), "call_p99_ms": round(percentile(lat, 0.99) * 1e3, 1),
            "stall_max_ms": round(max(late) * 1e3, 1), "stall_p99_ms": round(percentile(late, 0.99) * 1e3, 1),
            "probe_wakeups": len(late)}


def table(result: dict) -> str:
    rows = ["| mode | calls | calls/s | call p50 ms | call p99 ms | loop stall p99 ms | loop stall max ms |",
            "|---|---|---|---|---|---|---|"]
    for mode, m in result["modes"].items():
        rows.append(f"| {mode} | {m['calls']} | {m['calls_per_s']} | {m['call_p50_ms']} | {m['call_p99_ms']} | "
                    f"{m['stall_p99_ms']} | {m['stall_max_ms']} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--coroutines", type=int, default=50)
    ap.add_argument("--spaces", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3, help="rounds of (add, two searches) per worker")
    ap.add_argument("--workers", type=int, default=4, help="AsyncMemory's max_workers")
    ap.add_argument("--encoder", choices=("minilm", "hashing"), default="minilm")
    ap.add_argument("--modes", default="async,threads,blocking")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    if args.quick:
        args.coroutines, args.spaces, args.rounds, args.encoder = 20, 5, 1, "hashing"
    encoder = make_encoder(args.encoder)
    result = {"machine": f"{platform.machine()}, {os.cpu_count()} CPUs, python {platform.python_version()}",
              "config": {k: getattr(args, k) for k in ("coroutines", "spaces", "rounds", "workers", "encoder")},
              "probe_period_ms": PROBE_PERIOD * 1e3, "modes": {}}
    result["load_average_before"] = [round(x, 2) for x in os.getloadavg()]
    for mode in args.modes.split(","):
        print(f"{mode} ...", file=sys.stderr, flush=True)
        result["modes"][mode] = run_mode(mode, encoder, args)
    result["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    print(table(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
