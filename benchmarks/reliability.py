"""Reliability figures for README ("Reliability"), from one command:

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
- fuzz: `tests/reliability/test_fuzz.py` (hypothesis) with N examples per property: cases, failures.

It reuses the suite's workers (`tests/reliability/`); it needs the test extra (`pip install -e ".[cpu,test]"`).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
REL = ROOT / "tests" / "reliability"
sys.path[:0] = [str(REL), str(ROOT / "tests")]

from conftest import LOCOMO_DEV  # noqa: E402
from rel_common import conversation, fast_memory, files_containing, view_problems  # noqa: E402

WORKER = str(REL / "rel_worker.py")
SOURCE = f"locomo:{LOCOMO_DEV}" if LOCOMO_DEV.exists() else "demo"


def spawn(*args, env=None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, WORKER, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})})


def acks(text: str) -> list[str]:
    return [line.split()[1] for line in text.splitlines() if line.startswith("ok ")]


def crash(seeds: int, work: Path) -> dict:
    survived = lost = doubled = 0
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        root = work / f"crash{seed}"
        if seed % 2:
            child = spawn("ingest", root, SOURCE, env={"ETAMEM_KILL_AT_STATEMENT": str(int(rng.integers(30, 1500)))})
            acked = acks(child.communicate(timeout=900)[0])
        else:
            child = spawn("ingest", root, SOURCE)
            acked, target = [], int(rng.integers(1, 40))
            for line in child.stdout:
                acked += acks(line)
                if len(acked) >= target:
                    break
            time.sleep(float(rng.uniform(0, 0.05)))
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=60)
            acked += acks(child.stdout.read())
        try:
            mem = fast_memory(root)
            turns = {t.turn_id for t in mem.turns("conv")}
            units = [a.amu_id for a in mem.list("conv")]
            lost += len(set(acked) - turns)
            doubled += len(units) - len(set(units))
            ok = not view_problems(mem.store, "conv") and set(acked) <= turns and len(units) == len(set(units))
            mem.flush("conv")
            ok = ok and mem.store.count_pending("conv") == 0 and bool(mem.search("What happened?", space="conv"))
            mem.close()
            survived += ok
        except Exception as exc:  # noqa: BLE001 - a store that does not open is a failed kill, counted
            print(f"seed {seed}: {type(exc).__name__}: {exc}", file=sys.stderr)
    return {"kills": seeds, "survived": survived, "turns_lost": lost, "units_doubled": doubled, "source": SOURCE}


def processes(n: int, work: Path) -> dict:
    root, stop = work / "procs", work / "procs.stop"
    fast_memory(root).add({"session_id": "seed", "speaker": "Ben", "turn_id": "seed:0", "text": "The garden needs water.",
                           "timestamp": "2023-05-01T10:00:00+00:00"}, space="shared")
    writers = [spawn("writer", root, "shared", f"w{k}", n) for k in range(2)]
    readers = [spawn("reader", root, "shared", stop, f"w0tok{n - 1}", f"w1tok{n - 1}") for _ in range(2)]
    outs = [w.communicate(timeout=900) for w in writers]
    stop.touch()
    reads = [r.communicate(timeout=900) for r in readers]
    errors = sum(p.returncode != 0 for p in writers + readers)
    reports = [json.loads(out.strip().splitlines()[-1]) for out, _ in reads if out.strip()]
    errors += sum(len(r["errors"]) for r in reports)
    acked = [t for out, _ in outs for t in acks(out)]
    mem = fast_memory(root)
    turns = {t.turn_id for t in mem.turns("shared")}
    errors += len(set(acked) - turns) + bool(view_problems(mem.store, "shared"))
    mem.close()
    return {"operations": len(acked) + sum(r["searches"] for r in reports), "writes": len(acked),
            "searches": sum(r["searches"] for r in reports), "errors": errors,
            "readers_followed": sum(all(r["found"].values()) for r in reports), "readers": len(readers)}


def isolation(work: Path) -> dict:
    mem = fast_memory(work / "isolation")
    names = [f"user-{i:02d}" for i in range(50)]
    for name in names:
        mem.add(conversation(f"{name}/", 2, 5), space=name)
    queries = ["hiking with my sister", "wonderful garden", "violin last weekend", "tea", "museum sunset",
               "marathon", "What did Ana enjoy?", "coffee and chess", "puppy", "festival camping"]
    leaks, searches, before = 0, 0, {}
    for _ in range(2):
        for name in names:
            for q in queries:
                hits = mem.search(q, space=name, top_k=10)
                searches += 1
                leaks += sum(not t.startswith(f"{name}/") for h in hits for t in h.source_turn_ids)
                before[(name, q)] = [(h.amu.amu_id, round(h.score, 6)) for h in hits]
    counts = {n: (len(mem.turns(n)), len(mem.list(n))) for n in names}
    mem.delete(names[7])
    changed = sum((len(mem.turns(n)), len(mem.list(n))) != counts[n]
                  or any([(h.amu.amu_id, round(h.score, 6)) for h in mem.search(q, space=n, top_k=10)]
                         != before[(n, q)] for q in queries)
                  for n in names if n != names[7])
    mem.close()
    return {"spaces": len(names), "searches": searches, "leaks": leaks, "spaces_changed_by_a_delete": changed}


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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=50, help="SIGKILLs (default 50)")
    ap.add_argument("--writes", type=int, default=100, help="adds per writer process (default 100)")
    ap.add_argument("--fuzz-examples", type=int, default=200, help="hypothesis examples per property (default 200)")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "reliability.json"))
    args = ap.parse_args(argv)
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="etamem-reliability-") as tmp:
        work = Path(tmp)
        result = {"crash": crash(args.seeds, work), "processes": processes(args.writes, work),
                  "isolation": isolation(work), "forgetting": forgetting(work), "fuzz": fuzz(args.fuzz_examples, work)}
    result["wall_s"] = round(time.time() - t0, 1)
    result["date"] = time.strftime("%Y-%m-%d")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    c, p, i, f, z = (result[k] for k in ("crash", "processes", "isolation", "forgetting", "fuzz"))
    print("| check | figure |\n| --- | --- |")
    print(f"| crash: SIGKILLs survived / turns lost / units doubled | {c['survived']} of {c['kills']} / "
          f"{c['turns_lost']} / {c['units_doubled']} |")
    print(f"| processes: operations / errors / readers that followed | {p['operations']} ({p['writes']} adds, "
          f"{p['searches']} searches) / {p['errors']} / {p['readers_followed']} of {p['readers']} |")
    print(f"| isolation: searches / leaks / spaces changed by another's delete | {i['searches']} over {i['spaces']} "
          f"spaces / {i['leaks']} / {i['spaces_changed_by_a_delete']} |")
    print(f"| forgetting: canary files after delete / search hits after | {f['canary_files_after']} / "
          f"{f['canary_hits_after']} (6 cases: 3 deletes x offline, LLM) |")
    print(f"| fuzz: cases / failures | {z.get('cases')} / {z.get('failures')} |")
    print(f"({result['wall_s']} s; {args.out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
