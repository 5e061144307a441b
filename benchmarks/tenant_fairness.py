"""Tenant fairness: one tenant's search latency, idle and while another tenant sends its worst legal reads.

    python -m benchmarks.tenant_fairness [--searches 30] [--rounds 3] [--hostile 4] [--seconds-warm 3]
        [--bounds default|off|both] [--writer] [--out FILE.json]

A real `etamem serve` process (the command line, default offline models: MiniLM + VADER) on a
store in a temporary directory, every tenant with its own key. Tenant A's space holds `--a-turns`
turns, tenant B's 40. B searches her space (one client, one search after another), `--searches`
at a time, in `--rounds` alternating phases (a shared machine's drift hits both): idle, then
while A runs `--hostile` clients each sending back to back searches of `top_k=10000` with a
6,000-character query (ordinary English, no emoji: the emoji cost of the affect tagger is
another fix's), and with `--writer` one more A client adding long turns (10 x 20,000 characters
per request). A's clients retry at once on 429 (they ignore Retry-After: the worst a client may
do; with POLITE=1 in the environment they sleep it). `--bounds off` starts the server with
`--max-reads-per-key 0 --max-read-work 0` (no per-key read bound, as before the bound existed);
`both` (the default) runs off, then default. Prints a markdown table (B's p50/p95 over all idle
and all loaded phases, the p50 ratio, target <= 3x; A's searches answered and refused) and
writes JSON to benchmarks/results/tenant_fairness.json. The clients run on the same machine as
the server.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

try:  # python -m benchmarks.tenant_fairness, or imported with benchmarks/ on sys.path
    from .noisy_tenant import long_text
    from .serve_load import free_port, percentile, wait_until_healthy
except ImportError:
    from noisy_tenant import long_text
    from serve_load import free_port, percentile, wait_until_healthy

REPO = Path(__file__).resolve().parents[1]
POLITE = bool(os.environ.get("POLITE"))
OUT = REPO / "benchmarks" / "results"
ADMIN = "tenant-fairness-benchmark-admin-key-0123456789"
QUERIES = ["What did Ana enjoy with her sister?", "the museum at sunset", "violin lessons", "coffee and chess",
           "When did she go hiking?", "the festival", "tea in the garden", "marathon training"]
WORDS = ("hiking", "guitar", "garden", "painting", "marathon", "bakery", "violin", "sunset", "tea", "coffee",
         "museum", "chess", "festival", "puppy", "river", "lecture")


def turns(prefix: str, n: int) -> list[dict]:
    return [{"turn_id": f"{prefix}{i}", "session_id": f"{prefix}s{i // 20}", "speaker": ("Ana", "Ben")[i % 2],
             "text": f"I went to the {WORDS[i % len(WORDS)]} with my sister on day {i}; the "
                     f"{WORDS[(3 * i + 5) % len(WORDS)]} was wonderful and we talked for {2 + i % 40} minutes.",
             "timestamp": f"2024-{1 + (i // 20) % 12:02d}-{1 + (i // 20) % 28:02d}T{9 + i % 10:02d}:{i % 60:02d}"}
            for i in range(n)]


def _env() -> dict:
    old = os.environ.get("PYTHONPATH")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "ETAMEM_ADMIN_KEY": ADMIN,
           "PYTHONPATH": os.pathsep.join(([old] if old else []) + [str(REPO)])}
    env.pop("ETAMEM_LLM_MODEL", None)
    return env


def _search_b(url: str, key: str, n: int) -> list[float]:
    """`n` searches of B, one after another; latencies in ms (a non-200 is an error)."""
    import httpx

    lat = []
    with httpx.Client(base_url=url, timeout=300, headers={"Authorization": f"Bearer {key}"}) as http:
        for i in range(n):
            t0 = time.perf_counter()
            r = http.post("/v1/spaces/b/search", json={"query": QUERIES[i % len(QUERIES)]})
            lat.append((time.perf_counter() - t0) * 1000)
            if r.status_code != 200:
                raise RuntimeError(f"tenant B's search answered {r.status_code}: {r.text[:200]}")
    return lat


def _hostile(url: str, key: str, stop: threading.Event, tally: dict, lock: threading.Lock, seed: int) -> None:
    import httpx

    query = long_text(6000, seed)
    with httpx.Client(base_url=url, timeout=600, headers={"Authorization": f"Bearer {key}"}) as http:
        while not stop.is_set():
            t0 = time.perf_counter()
            r = http.post("/v1/spaces/a/search", json={"query": query, "top_k": 10_000})
            with lock:
                tally.setdefault(r.status_code, []).append(time.perf_counter() - t0)
            if r.status_code == 429 and POLITE:
                time.sleep(float(r.headers.get("retry-after", "1")))


def _writer(url: str, key: str, stop: threading.Event, tally: dict, lock: threading.Lock) -> None:
    import httpx

    n = 0
    with httpx.Client(base_url=url, timeout=600, headers={"Authorization": f"Bearer {key}"}) as http:
        while not stop.is_set():
            body = [{"turn_id": f"long{n}-{j}", "session_id": f"long{n}", "speaker": "Ana",
                     "text": long_text(20_000, n * 100 + j), "timestamp": f"2024-06-{1 + n % 28:02d}T10:{j:02d}"}
                    for j in range(10)]
            t0 = time.perf_counter()
            r = http.post("/v1/spaces/a/turns", json={"turns": body})
            with lock:
                tally.setdefault(f"add {r.status_code}", []).append(time.perf_counter() - t0)
            n += 1


def run(work: Path, *, searches: int = 40, hostile: int = 4, a_turns: int = 400, bounds: str = "default",
        writer: bool = False, warm_s: float = 3.0, rounds: int = 3) -> dict:
    """Fill the spaces, start the server, B's latency idle then under A's load; the figures."""
    from etamem import Memory, tenancy

    store = work / "store"
    mem = Memory(store)
    mem.add(turns("a", a_turns), space="a")
    mem.add(turns("b", 40), space="b")
    keys = {name: tenancy.create_key(mem.store, [name])[0] for name in ("a", "b")}
    mem.close()

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "etamem", "-q", "serve", str(store), "--port", str(port)]
    if bounds == "off":
        cmd += ["--max-reads-per-key", "0", "--max-read-work", "0"]
    log = open(work / "server.log", "w")
    proc = subprocess.Popen(cmd, env=_env(), cwd=work, stdout=log, stderr=log)
    tally: dict = {}
    try:
        wait_until_healthy(proc, url, work / "server.log", timeout_s=300)
        _search_b(url, keys["b"], 5)  # warm-up
        idle, loaded, loaded_s = [], [], 0.0
        for _ in range(rounds):  # idle and loaded phases alternate: a shared machine's drift hits both
            idle += _search_b(url, keys["b"], searches)
            stop, lock = threading.Event(), threading.Lock()
            clients = [threading.Thread(target=_hostile, args=(url, keys["a"], stop, tally, lock, i), daemon=True)
                       for i in range(hostile)]
            if writer:
                clients.append(threading.Thread(target=_writer, args=(url, keys["a"], stop, tally, lock),
                                                daemon=True))
            for t in clients:
                t.start()
            time.sleep(warm_s)  # A's first heavy requests are in
            t0 = time.perf_counter()
            loaded += _search_b(url, keys["b"], searches)
            loaded_s += time.perf_counter() - t0
            stop.set()
            for t in clients:
                t.join(600)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
    a_ok = tally.get(200, [])
    return {"bounds": bounds, "idle_p50_ms": round(percentile(idle, 0.5), 1),
            "idle_p95_ms": round(percentile(idle, 0.95), 1),
            "loaded_p50_ms": round(percentile(loaded, 0.5), 1), "loaded_p95_ms": round(percentile(loaded, 0.95), 1),
            "p50_ratio": round(percentile(loaded, 0.5) / percentile(idle, 0.5), 2), "searches": searches * rounds,
            "rounds": rounds,
            "loaded_seconds": round(loaded_s, 1), "hostile_clients": hostile, "writer": writer, "a_turns": a_turns,
            "a_searches_answered": len(a_ok), "a_search_p50_s": round(percentile(a_ok, 0.5), 2) if a_ok else None,
            "a_refused_429": len(tally.get(429, [])),
            "a_other": {str(k): len(v) for k, v in tally.items() if k not in (200, 429)},
            "cpus": os.cpu_count()}


def table(rows: list[dict]) -> str:
    out = ["| per-key read bound | B idle p50 / p95 ms | B loaded p50 / p95 ms | p50 ratio | A's heavy searches "
           "answered / 429 |", "|---|---|---|---|---|"]
    for r in rows:
        shown = "off (`--max-reads-per-key 0 --max-read-work 0`)" if r["bounds"] == "off" else "default"
        out.append(f"| {shown} | {r['idle_p50_ms']} / {r['idle_p95_ms']} | {r['loaded_p50_ms']} / "
                   f"{r['loaded_p95_ms']} | **{r['p50_ratio']}x** | {r['a_searches_answered']} / "
                   f"{r['a_refused_429']} |")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--searches", type=int, default=30, help="B's searches per phase, idle and loaded")
    p.add_argument("--rounds", type=int, default=3, help="idle / loaded phase pairs, alternating")
    p.add_argument("--hostile", type=int, default=4, help="A's clients sending heavy searches")
    p.add_argument("--a-turns", type=int, default=400, help="turns in A's space")
    p.add_argument("--bounds", choices=["default", "off", "both"], default="both")
    p.add_argument("--writer", action="store_true", help="one more A client adding long turns")
    p.add_argument("--seconds-warm", type=float, default=3.0)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    rows = []
    for bounds in (["off", "default"] if args.bounds == "both" else [args.bounds]):
        with tempfile.TemporaryDirectory() as tmp:
            rows.append(run(Path(tmp), searches=args.searches, hostile=args.hostile, a_turns=args.a_turns,
                            bounds=bounds, writer=args.writer, warm_s=args.seconds_warm,
                            rounds=args.rounds))
        print(json.dumps(rows[-1]), file=sys.stderr)
    print(table(rows))
    out = args.out or OUT / "tenant_fairness.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
