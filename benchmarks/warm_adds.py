"""The first adds of a process after `Memory.warm()`: does the first or second write still load
something on first use? (docs/reliability.md, 'A complete warm-up').

    python -m benchmarks.warm_adds [--adds 8] [--no-warm] [--repeats 3] [--out FILE.json]

Each repeat runs in a fresh subprocess (nothing cached in the process): the default `Config()`
and models on a new store, `warm()` (unless `--no-warm`), then `--adds` adds, each one user
message and the assistant's reply of an agent's chat (the statements compare with the stored
ones: the attribute slots of `etamem.facts.slots` are asked from the second add on). Printed
and written: warm-up seconds, the first, second and later adds' seconds (later: the median of
adds 3..n), and the ratios first / later and second / later, each run's then their median
(target: both <= 1.5).
"""
from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone

log = logging.getLogger(__name__)

CHAT = [("I live in Chicago, near the lake.", "Chicago is lovely in summer."),
        ("I work at Acme as an engineer.", "Engineering at Acme sounds interesting."),
        ("I'm vegetarian, no meat for ten years.", "Ten years is a long time, well done."),
        ("My sister Ana has a dog named Rex.", "Rex is a great name for a dog."),
        ("I just started at Globex, new job!", "Congratulations on the new job!"),
        ("I drive a Prius to work.", "A Prius is economical for commuting."),
        ("My budget for the trip is $2000.", "That should cover a week in Portugal."),
        ("I moved to Milwaukee last month.", "How are you finding Milwaukee?"),
        ("I run 5 km every Sunday.", "That is a good habit."),
        ("My favourite band is Radiohead.", "Radiohead have a great catalogue.")]
T0 = datetime(2024, 3, 1, 9, tzinfo=timezone.utc)


def one_run(adds: int, warm: bool) -> dict:
    """One process's figures (run in the subprocess)."""
    from etamem import Config, Memory

    with tempfile.TemporaryDirectory(prefix="warm-adds-") as tmp:
        t = time.perf_counter()
        mem = Memory(f"{tmp}/s", Config())
        if warm:
            mem.warm()
        warm_s = time.perf_counter() - t
        seconds = []
        for i in range(adds):
            user, reply = CHAT[i % len(CHAT)]
            ts = T0 + timedelta(days=3 * i)
            turns = [{"role": "user", "content": user, "timestamp": ts.isoformat()},
                     {"role": "assistant", "content": reply, "timestamp": (ts + timedelta(seconds=20)).isoformat()}]
            t = time.perf_counter()
            mem.add(turns, space="u")
            seconds.append(time.perf_counter() - t)
        mem.close()
    return {"warm_s": warm_s, "add_s": seconds}


def summarise(runs: list[dict], warm: bool) -> dict:
    """Medians over the runs; the ratios are each run's (add 1 or 2 over the median of its adds
    3..n, so a busy moment of a shared machine weighs on both sides of one ratio), then their median."""
    def med(values) -> float:
        return statistics.median(list(values))

    later = [med(r["add_s"][2:]) for r in runs]
    first = med(r["add_s"][0] / lt for r, lt in zip(runs, later))
    second = med(r["add_s"][1] / lt for r, lt in zip(runs, later))
    return {"warm": warm, "repeats": len(runs), "warm_s": med(r["warm_s"] for r in runs),
            "first_add_s": med(r["add_s"][0] for r in runs), "second_add_s": med(r["add_s"][1] for r in runs),
            "later_add_s": med(later), "first_over_later": first, "second_over_later": second,
            "met": first <= 1.5 and second <= 1.5, "runs": runs}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--adds", type=int, default=8, help="adds per process (at least 3)")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes")
    parser.add_argument("--no-warm", action="store_true", help="skip Memory.warm() (the cold case)")
    parser.add_argument("--out", help="write the figures as JSON here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.adds < 3:
        parser.error("--adds: at least 3")
    if args.child:
        print(json.dumps(one_run(args.adds, not args.no_warm)))
        return
    runs = []
    for _ in range(args.repeats):
        cmd = [sys.executable, "-m", "benchmarks.warm_adds", "--child", "--adds", str(args.adds)]
        out = subprocess.run(cmd + (["--no-warm"] if args.no_warm else []), capture_output=True, text=True,
                             check=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    result = summarise(runs, not args.no_warm)
    print(f"warm() {result['warm_s']:.2f} s | add 1 {result['first_add_s']:.3f} s | add 2 "
          f"{result['second_add_s']:.3f} s | later adds (median) {result['later_add_s']:.3f} s | "
          f"1st / later {result['first_over_later']:.2f} | 2nd / later {result['second_over_later']:.2f} | "
          f"target <= 1.5: {'met' if result['met'] else 'NOT met'}")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
