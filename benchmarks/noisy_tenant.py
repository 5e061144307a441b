"""Noisy tenant: other tenants' search latency while one tenant sends maximum-size adds.

    python -m benchmarks.noisy_tenant [--searches 60] [--request-kb 1024] [--turn-chars 40000] [--out FILE.json]

A real `etamem serve` stack (uvicorn on loopback with `etamem.serve.guard.server_config`, the app from
`create_app`) in its own process, on a store in a temporary directory, with the fast hashing test
encoder and VADER (`tests/reliability/rel_common.fast_memory`: the real MiniLM model is too slow on
a 2-core machine to make maximum-size adds in reasonable time). Four tenants' spaces are filled
first; three quiet tenants then search their own spaces (one client thread each) while the server
is idle, and again while the fourth tenant sends back-to-back adds of as many `--turn-chars` turns
as fit in one request of `--request-kb` (the server's request limit). Prints a markdown table
(p50/p99 idle and loaded, the p99 ratio; target < 2x) and writes JSON to
benchmarks/results/noisy_tenant.json. The clients run on the same machine as the server.
`run(work)` returns {"idle_p99_ms", "loaded_p99_ms", "ratio", ...}.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

try:  # python -m benchmarks.noisy_tenant, or imported with benchmarks/ on sys.path (benchmarks/reliability.py)
    from .serve_load import free_port, percentile, wait_until_healthy
except ImportError:
    from serve_load import free_port, percentile, wait_until_healthy

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "benchmarks" / "results" / "noisy_tenant.json"
ADMIN = "noisy-tenant-benchmark-admin-key-0123456789"
QUERIES = ["hiking with my sister", "wonderful garden", "violin last weekend", "tea", "museum sunset",
           "marathon", "What did Ana enjoy?", "coffee and chess", "puppy", "festival camping"]
WORDS = ("hiking", "guitar", "garden", "painting", "marathon", "bakery", "violin", "sunset", "tea", "coffee")


def _paths_env() -> dict:
    extra = [str(REPO), str(REPO / "tests"), str(REPO / "tests" / "reliability")]
    old = os.environ.get("PYTHONPATH")
    return {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join(([old] if old else []) + extra)}


def _fast_memory(store):
    sys.path[:0] = [str(REPO / "tests"), str(REPO / "tests" / "reliability")]
    from rel_common import fast_memory

    return fast_memory(store)


def serve(store: str, port: int, max_bytes: int) -> None:
    """The server process: the real app and uvicorn settings over `store` with the fast encoder."""
    from etamem.serve.app import create_app

    mem = _fast_memory(store)
    app = create_app(mem, admin_key=ADMIN, max_request_bytes=max_bytes)
    try:
        from etamem.serve.guard import run_server, server_config
    except ImportError:  # an older checkout, measured for comparison: plain uvicorn
        import uvicorn

        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
        return
    run_server(server_config(app, host="127.0.0.1", port=port))


def long_text(n: int, seed: int) -> str:
    r, out, size = random.Random(seed), [], 0
    while size < n:
        s = (f"On {r.choice(['Monday', 'Tuesday', 'Friday'])} I went to the {r.choice(WORDS)} with my friend "
             f"{r.choice(['Ana', 'Ben', 'Cleo'])} and we talked about the {r.choice(WORDS)} for {r.randint(2, 50)} "
             f"minutes. ")
        out.append(s)
        size += len(s)
    return "".join(out)[:n]


def max_size_add(n: int, turn_chars: int, max_bytes: int) -> bytes:
    """A request body of as many `turn_chars` turns as fit in `max_bytes` (ids unique per `n`)."""
    turns = []
    while True:
        turn = {"turn_id": f"big{n}-{len(turns)}", "session_id": f"big{n}", "speaker": "Ana",
                "text": long_text(turn_chars, n * 1000 + len(turns)),
                "timestamp": f"2024-02-{1 + n % 28:02d}T{10 + len(turns) % 10:02d}:{len(turns) % 60:02d}"}
        if len(json.dumps({"turns": turns + [turn]})) > max_bytes - 256:
            break
        turns.append(turn)
    return json.dumps({"turns": turns}).encode()




def _searches(url: str, keys: dict[str, str], quiet: list[str], n: int) -> list[float]:
    """`n` searches per quiet tenant, one thread each; latencies in ms (any non-200 is an error)."""
    import httpx

    lat, errors, lock = [], [], threading.Lock()

    def client(name: str) -> None:
        with httpx.Client(base_url=url, timeout=120, headers={"Authorization": f"Bearer {keys[name]}"}) as http:
            for i in range(n):
                t0 = time.perf_counter()
                r = http.post(f"/v1/spaces/{name}/search", json={"query": QUERIES[i % len(QUERIES)]})
                ms = (time.perf_counter() - t0) * 1000
                with lock:
                    (lat if r.status_code == 200 else errors).append(ms if r.status_code == 200 else r.status_code)

    threads = [threading.Thread(target=client, args=(name,)) for name in quiet]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise RuntimeError(f"searches failed: {errors[:5]}")
    return lat


def run(work: Path, *, searches: int = 60, request_bytes: int = 1 << 20, turn_chars: int = 40_000,
        quiet_tenants: int = 3) -> dict:
    """Fill the spaces, start the server, measure idle then loaded search latency; the figures."""
    import httpx

    from etamem import tenancy

    work.mkdir(parents=True, exist_ok=True)
    store = work / "store"
    mem = _fast_memory(store)
    from rel_common import conversation

    names = [f"quiet{i}" for i in range(quiet_tenants)] + ["noisy"]
    for name in names:
        mem.add(conversation(f"{name}/", 4, 10), space=name)
    keys = {name: tenancy.create_key(mem.store, [name])[0] for name in names}
    mem.close()

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(work / "server.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "benchmarks.noisy_tenant", "--serve", str(store), str(port),
                             str(request_bytes)], env=_paths_env(), cwd=REPO, stdout=log, stderr=log)
    try:
        wait_until_healthy(proc, url, work / "server.log")
        quiet = names[:-1]
        _searches(url, keys, quiet, 5)  # warm-up
        idle = _searches(url, keys, quiet, searches)

        stop, adds = threading.Event(), []
        bodies = [max_size_add(n, turn_chars, request_bytes) for n in range(2)]

        def noisy() -> None:
            with httpx.Client(base_url=url, timeout=600,
                              headers={"Authorization": f"Bearer {keys['noisy']}",
                                       "Content-Type": "application/json"}) as http:
                n = 0
                while not stop.is_set():
                    body = bodies[n % 2].replace(b'"big', f'"r{n}big'.encode())  # fresh ids every time
                    t0 = time.perf_counter()
                    r = http.post("/v1/spaces/noisy/turns", content=body)
                    adds.append((r.status_code, time.perf_counter() - t0, len(body)))
                    n += 1

        writer = threading.Thread(target=noisy, daemon=True)
        writer.start()
        time.sleep(1.0)  # the first maximum-size add is being parsed / extracted
        loaded = _searches(url, keys, quiet, searches)
        stop.set()
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
    idle_p99, loaded_p99 = percentile(idle, 0.99), percentile(loaded, 0.99)
    return {"idle_p50_ms": round(percentile(idle, 0.5), 1), "idle_p99_ms": round(idle_p99, 1),
            "loaded_p50_ms": round(percentile(loaded, 0.5), 1), "loaded_p99_ms": round(loaded_p99, 1),
            "ratio": round(loaded_p99 / idle_p99, 2), "searches": len(idle) + len(loaded),
            "quiet_tenants": quiet_tenants, "add_request_bytes": len(bodies[0]), "turn_chars": turn_chars,
            "turns_per_add": bodies[0].count(b'"turn_id"'),
            "adds_done": sum(1 for s, _, _ in adds if s == 200), "add_statuses": sorted({s for s, _, _ in adds}),
            "add_seconds": [round(t, 1) for _, t, _ in adds],
            "encoder": "hashing test encoder (tests/conftest.py HashingEncoder) + VADER", "cpus": os.cpu_count()}


def table(r: dict) -> str:
    return "\n".join([
        "| searches (quiet tenants) | p50 ms | p99 ms |", "|---|---|---|",
        f"| idle | {r['idle_p50_ms']} | {r['idle_p99_ms']} |",
        f"| one tenant adding {r['add_request_bytes'] // 1024} KB requests ({r['turns_per_add']} x "
        f"{r['turn_chars']} chars) | {r['loaded_p50_ms']} | {r['loaded_p99_ms']} |",
        f"\np99 ratio loaded / idle: **{r['ratio']}x** (target < 2x); {r['adds_done']} maximum-size adds answered "
        f"meanwhile; {r['cpus']} CPUs shared by the server and the clients."])


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--searches", type=int, default=60, help="searches per quiet tenant, idle and loaded")
    p.add_argument("--request-kb", type=int, default=1024, help="the request limit, and the size of each add")
    p.add_argument("--turn-chars", type=int, default=40_000)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        result = run(Path(tmp), searches=args.searches, request_bytes=args.request_kb << 10,
                     turn_chars=args.turn_chars)
    print(table(result))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
