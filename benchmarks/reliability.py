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
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REL = ROOT / "tests" / "reliability"
sys.path[:0] = [str(REL), str(ROOT / "tests")]

from conftest import LOCOMO_DEV  # noqa: E402
from rel_common import crash_once, files_containing, isolation_run, processes_run  # noqa: E402

SOURCE = f"locomo:{LOCOMO_DEV}" if LOCOMO_DEV.exists() else "demo"


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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=50, help="SIGKILLs (default 50)")
    ap.add_argument("--writes", type=int, default=100, help="adds per writer process (default 100)")
    ap.add_argument("--fuzz-examples", type=int, default=200, help="hypothesis examples per property (default 200)")
    ap.add_argument("--parts", default="crash,processes,isolation,forgetting,fuzz",
                    help="comma-separated; parts not run keep their figures from --out")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "reliability.json"))
    args = ap.parse_args(argv)
    parts = {"crash": lambda w: crash(args.seeds, w), "processes": lambda w: processes(args.writes, w),
             "isolation": isolation, "forgetting": forgetting, "fuzz": lambda w: fuzz(args.fuzz_examples, w)}
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
    c, p, i, f, z = (result[k] for k in ("crash", "processes", "isolation", "forgetting", "fuzz"))
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
    walls = ", ".join(f"{k} {result[k]['wall_s']} s" for k in parts)
    print(f"(time per part: {walls}; {args.out})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
