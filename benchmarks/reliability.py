"""Reliability figures for docs/reliability.md, from one command:

    python benchmarks/reliability.py [--seeds 50] [--fuzz-examples 200] [--out benchmarks/results/reliability.json]

- crash: a process ingesting a conversation turn by turn (the first LoCoMo dev conversation when
  ../shared/data is there, else the bundled demo) is SIGKILLed at a random time (even seeds) or
  at a random SQL statement (odd seeds); the store is reopened: kills survived (opens, views
  valid, every acknowledged turn present, no unit twice), turns lost, units doubled;
- processes: 2 writer and 2 reader processes on one space: operations, errors, readers that
  followed the writers' last commits;
- isolation: the same texts in 50 spaces, 1,000 searches: hits from another space; then one
  space deleted: other spaces whose counts or results changed;
- forgetting: a canary added, deleted by each of the three deletes, offline and with an LLM
  (local scripted endpoint): files of the store still holding its bytes, searches showing it;
- fuzz: `tests/reliability/test_fuzz.py` (hypothesis) with N examples per property: cases, failures;
- identity: a second process holds a space open while the first deletes it and recreates it
  without one sensitive turn, written as many times as before (same generation): searches of
  the second process showing the removed turn, before and after it closes;
- summaries: random unit deletes in a space large enough for tree maintenance to move units
  (`rel_summaries.stale_summary_run`, 4 seeds): node summaries or representative lists still
  quoting a deleted unit;
- responsiveness: the real server, other tenants' search p99 idle and while one tenant sends
  back-to-back maximum-size adds (`benchmarks/noisy_tenant.py`);
- text: adversarial inputs of 10k-100k characters (whitespace and punctuation runs, repeated
  interjections, dates, ...) against ordinary text of the same length, through the write and
  query paths (`benchmarks/adversarial_text.py`): the worst ratio;
- characters: texts of one character class (emoji, CJK, combining marks, right-to-left, symbols,
  whitespace runs, mixed) of 2,000 and 20,000 characters through `Memory.add` and `Memory.search`
  as users open it, against ordinary text (`benchmarks/character_classes.py`): the worst ratios;
- timing: 20 rounds of 30 guesses, a secret in one tenant's space, another tenant timing
  searches of her own space: rounds where the secret was the fastest guess;
- slow clients: 40 connections to the real server that send a head and stall, trickle a body,
  or announce 8 MB without a key: connections the server closed by its deadlines, memory added,
  `/health` latency meanwhile;
- corruption: every case of `rel_corruption` (damaged derived files; and with their checksum
  forged in the store): rebuilt / crashed / silently changed.

It reuses the suite's workers (`tests/reliability/`); it needs the test extra (`pip install -e ".[cpu,test]"`).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REL = ROOT / "tests" / "reliability"
sys.path[:0] = [str(REL), str(ROOT / "tests"), str(ROOT / "benchmarks")]

from conftest import LOCOMO_DEV  # noqa: E402
from rel_common import crash_once, files_containing, isolation_run, processes_run  # noqa: E402

SOURCE = f"locomo:{LOCOMO_DEV}" if LOCOMO_DEV.exists() else "demo"


PARTS = ("crash", "processes", "isolation", "forgetting", "fuzz", "identity", "summaries", "responsiveness", "text",
         "timing", "slow_clients", "corruption", "characters")


def crash(seeds: int, work: Path) -> dict:
    rows = [crash_once(work, seed, SOURCE) for seed in range(seeds)]
    for r in rows:
        if r.get("resume_error"):
            print(f"seed {r['seed']}: resume failed: {r['resume_error']}", file=sys.stderr)
    survived = sum(r["lost"] == 0 and r["doubled"] == 0 and r["views_ok"] and r["searchable"] and r["completed"]
                   for r in rows)
    return {"kills": seeds, "survived": survived, "turns_lost": sum(r["lost"] for r in rows),
            "doubled": sum(r["doubled"] for r in rows), "acked": sum(r["acked"] for r in rows), "source": SOURCE,
            "seeds": rows}


def processes(n: int, work: Path) -> dict:
    run = processes_run(work, n)
    reports = run["reports"]
    errors = (sum(rc != 0 for rc in run["writer_rcs"] + run["reader_rcs"]) + sum(len(r["errors"]) for r in reports)
              + run["lost"] + run["doubled"] + (not run["views_ok"]))
    searches = sum(r["searches"] for r in reports)
    return {"operations": len(run["acked"]) + searches, "writes": len(run["acked"]), "searches": searches,
            "errors": errors, "readers_followed": sum(all(r["found"].values()) for r in reports),
            "readers": len(run["reader_rcs"])}


def isolation(work: Path) -> dict:
    run = isolation_run(work / "isolation")
    return {k: run[k] for k in ("spaces", "searches", "leaks", "spaces_changed_by_a_delete")}


def forgetting(work: Path) -> dict:
    from llm_server import ChatServer
    from test_forgetting import CANARY, canary_memory, echo_llm, seen

    rows = []
    with ChatServer() as server:
        server.responder = echo_llm
        for llm in (False, True):
            for how in ("amu", "turn", "space"):
                root = work / f"canary-{how}-{int(llm)}"
                mem = canary_memory(root, server if llm else None)
                if llm:
                    mem.answer("What is Ana's gym locker code?", space="u")
                held_before = len(files_containing(root, CANARY.encode()))
                unit = next(a for a in mem.list("u") if CANARY in a.text)
                mem.delete("u", unit.amu_id) if how == "amu" else mem.delete("u", turn_id="c:0") if how == "turn" \
                    else mem.delete("u")
                mem.checkpoint()
                shown = 0 if how == "space" else sum(CANARY in t for t in seen(mem, "u"))
                mem.close()
                rows.append({"delete": how, "llm": llm, "files_before": held_before,
                             "files_after": len(files_containing(root, CANARY.encode())), "search_hits_after": shown})
    return {"cases": rows, "canary_files_after": sum(r["files_after"] for r in rows),
            "canary_hits_after": sum(r["search_hits_after"] for r in rows)}


def fuzz(examples: int, work: Path) -> dict:
    report = work / "fuzz.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "ETAMEM_FUZZ_EXAMPLES": str(examples), "ETAMEM_FUZZ_REPORT": str(report)}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(REL / "test_fuzz.py")],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    data = json.loads(report.read_text()) if report.exists() else {"cases": 0, "failures": None}
    data["pytest"] = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else run.stderr[-500:]
    return data


def identity(work: Path, rounds: int = 5) -> dict:
    """A process (a second `Memory`) keeps serving a space another deletes and recreates."""
    from rel_common import conversation, fast_memory

    shown = 0
    for r in range(rounds):
        root = work / f"identity{r}"
        a, b = fast_memory(root), fast_memory(root)
        secret = f"My bank PIN is zq{r}x{r}q and nobody knows it."
        turns = conversation("u", 2, 3)
        turns[1] = {**turns[1], "text": secret}
        for t in turns:  # one write per turn
            a.add([t], space="u")
        generation = a.store.generation("u")
        b.search("bank PIN", space="u")  # b holds the space live
        a.delete("u")
        edited = [t for t in turns if t["text"] != secret]
        i = 0
        while a.store.generation("u") < generation:
            a.add([{**edited[i % len(edited)], "turn_id": f"r{i}"}], space="u")
            i += 1
        shown += sum(secret in h.amu.text for h in b.search("bank PIN", space="u", top_k=20))
        b.close()
        c = fast_memory(root)
        shown += sum(secret in h.amu.text for h in c.search("bank PIN", space="u", top_k=20))
        for m in (a, c):
            m.close()
    return {"rounds": rounds, "search_hits_of_deleted": shown}


def summaries(work: Path, seeds: int = 4) -> dict:
    from rel_summaries import stale_summary_run

    runs = [stale_summary_run(work / f"summaries{s}", s) for s in range(seeds)]
    return {"seeds": seeds, "deletes": sum(r["deletes"] for r in runs), "stale_quotes": sum(r["stale_quotes"] for r in runs),
            "nodes": sum(r["nodes"] for r in runs)}


def responsiveness(work: Path) -> dict:
    from noisy_tenant import run

    return run(work / "noisy")


def text(work: Path) -> dict:
    from adversarial_text import run

    r = run(work / "text")
    return {k: r[k] for k in ("cases", "worst_ratio", "worst_case")}


def characters(work: Path) -> dict:
    from character_classes import run

    r = run(work / "characters")
    return {k: r[k] for k in ("cases", "affect_tagger", "worst_add_ratio", "worst_add_case", "worst_search_ratio",
                              "worst_search_case", "within_target")}


def timing(work: Path) -> dict:
    from test_cache_scope import timing_oracle_run

    return timing_oracle_run(work / "timing")


def slow_clients(work: Path, n: int = 40, deadline_s: float = 3.0) -> dict:
    """`n` hostile connections against the real server with `deadline_s` head and body deadlines."""
    import resource
    import socket
    import threading

    import httpx
    import uvicorn

    from etamem import tenancy
    from etamem.serve.app import create_app
    from etamem.serve.guard import server_config
    from rel_common import conversation, fast_memory

    mem = fast_memory(work / "slow")
    mem.add(conversation("u", 1, 3), space="alice")
    key = tenancy.create_key(mem.store, ["alice"])[0]
    app = create_app(mem, warm=False, close_on_shutdown=False, body_timeout_s=deadline_s)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(server_config(app, host="127.0.0.1", port=port, log_config=None, head_timeout_s=deadline_s))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    heads = [
        "POST /v1/spaces/alice/search HTTP/1.1\r\nHost: t\r\n",  # a head that never ends
        f"POST /v1/spaces/alice/turns HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {key}\r\n"
        "Content-Type: application/json\r\nContent-Length: 8000000\r\n\r\n{",  # a body that never comes
        "POST /v1/spaces/alice/turns HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        "Content-Length: 8000000\r\n\r\n",  # 8 MB announced without a key
    ]
    socks = []
    for i in range(n):
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        sock.sendall(heads[i % len(heads)].encode())
        socks.append(sock)
    health = []
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
        t_end = time.monotonic() + deadline_s + 3
        while time.monotonic() < t_end:
            t0 = time.perf_counter()
            http.get("/health")
            health.append((time.perf_counter() - t0) * 1000)
            time.sleep(0.1)
    closed = 0
    for sock in socks:
        sock.settimeout(0.5)
        try:
            while sock.recv(65536):
                pass
            closed += 1
        except (socket.timeout, OSError):
            pass
        sock.close()
    added_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
    server.should_exit = True
    thread.join(20)
    mem.close()
    health.sort()
    return {"connections": n, "closed_by_deadline": closed, "deadline_s": deadline_s,
            "max_rss_added_mb": round(added_mb, 1), "health_p99_ms": round(health[int(0.99 * (len(health) - 1))], 1)}


def corruption(work: Path) -> dict:
    from rel_corruption import corruption_run

    out = {}
    for mode in ("plain", "restamped"):
        r = corruption_run(work / f"corruption-{mode}", mode)
        out[mode] = {k: r[k] for k in ("cases", "rebuilt", "crashed", "changed", "harmless")}
        out[mode]["not_rebuilt"] = r["bad"]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=50, help="SIGKILLs (default 50)")
    ap.add_argument("--writes", type=int, default=100, help="adds per writer process (default 100)")
    ap.add_argument("--fuzz-examples", type=int, default=200, help="hypothesis examples per property (default 200)")
    ap.add_argument("--parts", default=",".join(PARTS),
                    help="comma-separated; parts not run keep their figures from --out")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "reliability.json"))
    args = ap.parse_args(argv)
    parts = {"crash": lambda w: crash(args.seeds, w), "processes": lambda w: processes(args.writes, w),
             "isolation": isolation, "forgetting": forgetting, "fuzz": lambda w: fuzz(args.fuzz_examples, w),
             "identity": identity, "summaries": summaries, "responsiveness": responsiveness, "text": text,
             "timing": timing, "slow_clients": slow_clients, "corruption": corruption, "characters": characters}
    assert list(parts) == list(PARTS)
    wanted = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = [p for p in wanted if p not in parts]
    if unknown:
        ap.error(f"--parts: unknown {unknown}; choose from {sorted(parts)}")
    out = Path(args.out)
    result = json.loads(out.read_text()) if out.exists() else {}
    with tempfile.TemporaryDirectory(prefix="etamem-reliability-") as tmp:
        for name in wanted:
            t0 = time.time()
            result[name] = parts[name](Path(tmp))
            result[name]["wall_s"] = round(time.time() - t0, 1)
            result[name]["date"] = time.strftime("%Y-%m-%d")
            print(f"{name}: {time.time() - t0:.0f} s", file=sys.stderr)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    missing = [p for p in parts if p not in result]
    if missing:
        print(f"no figures yet for {missing}: run with --parts {','.join(missing)}", file=sys.stderr)
        return 1
    c, p, i, f, z = (result[k] for k in ("crash", "processes", "isolation", "forgetting", "fuzz"))  # noqa: E741
    print("| check | figure |\n| --- | --- |")
    print(f"| crash: SIGKILLs survived / acknowledged turns lost / turns or units doubled | {c['survived']} of {c['kills']} / "
          f"{c['turns_lost']} / {c['doubled']} |")
    print(f"| processes: operations / errors / readers that followed | {p['operations']} ({p['writes']} adds, "
          f"{p['searches']} searches) / {p['errors']} / {p['readers_followed']} of {p['readers']} |")
    print(f"| isolation: searches / leaks / spaces changed by another's delete | {i['searches']} over {i['spaces']} "
          f"spaces / {i['leaks']} / {i['spaces_changed_by_a_delete']} |")
    print(f"| forgetting: canary files after delete / search hits after | {f['canary_files_after']} / "
          f"{f['canary_hits_after']} (6 cases: 3 deletes x offline, LLM) |")
    print(f"| fuzz: cases / failures | {z.get('cases')} / {z.get('failures')} |")
    d, m, n, x, t, w, k = (result[k] for k in ("identity", "summaries", "responsiveness", "text", "timing", "slow_clients",
                                                "corruption"))
    print(f"| cross-process forgetting: searches showing a space's deleted turn after another process deleted and "
          f"recreated it at the same generation | {d['search_hits_of_deleted']} in {d['rounds']} rounds |")
    print(f"| stale summaries: quotes of deleted units after {m['deletes']} random deletes ({m['seeds']} seeds) | "
          f"{m['stale_quotes']} |")
    print(f"| server responsiveness: other tenants' search p99 idle / while one tenant sends maximum-size adds | "
          f"{n['idle_p99_ms']:.0f} ms / {n['loaded_p99_ms']:.0f} ms ({n['ratio']:.2f}x) |")
    print(f"| adversarial text: worst time against ordinary text of the same length ({x['cases']} cases) | "
          f"{x['worst_ratio']:.2f}x ({x['worst_case']}) |")
    print(f"| timing oracle: rounds where another space's secret was the fastest of {t['guesses']} guesses | "
          f"{t['secret_fastest']} of {t['rounds']} (chance {t['chance']:.2f}) |")
    print(f"| slow clients: connections closed by the {w['deadline_s']:.0f} s deadlines / memory added / /health p99 | "
          f"{w['closed_by_deadline']} of {w['connections']} / {w['max_rss_added_mb']} MB / {w['health_p99_ms']} ms |")
    kp, kr = k["plain"], k["restamped"]
    print(f"| derived-file corruptions: rebuilt / crashed / silently changed | {kp['rebuilt']} / {kp['crashed']} / "
          f"{kp['changed']} of {kp['cases']} (checksum forged in the store too: {kr['rebuilt']} / {kr['crashed']} / "
          f"{kr['changed']}, {kr['harmless']} harmless, of {kr['cases']}) |")
    h = result["characters"]
    print(f"| character classes: emoji, CJK, combining marks, RTL, symbols, whitespace runs, mixed at 2k / 20k "
          f"characters, add / search against ordinary text ({h['cases']} cases) | worst add {h['worst_add_ratio']:.2f}x "
          f"({h['worst_add_case']}), worst search {h['worst_search_ratio']:.2f}x ({h['worst_search_case']}) |")
    walls = ", ".join(f"{k} {result[k]['wall_s']} s" for k in parts)
    print(f"(time per part: {walls}; {args.out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
