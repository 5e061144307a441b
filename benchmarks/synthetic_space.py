"""A large synthetic space built through `Memory.add` with a cheap encoder, resumable.

    python -m benchmarks.synthetic_space DIR N [--per-add 500]

The turns are `benchmarks.open_snapshot`'s short chat messages (four speakers, sessions of ten
adds), but each add's turns come from a generator seeded by the add's number, so that a build
stopped part way (killed, out of time) resumes where it stopped: the next build of the same
directory starts again at the add holding the last stored turn (`add` is idempotent for turns
with ids). The text encoder is `open_snapshot.HashingEncoder` (hashed bag of words, 384
dimensions) and the affect tagger VADER over it, so no model is loaded: what is timed is the
engine. `latency.py --synthetic-encoder` uses this builder for its `Memory.search` part.
A marker file (`synthetic_build.json`) records a finished build; progress goes to stderr.

Recall probe (generator version 2): one turn of every add is replaced by a fact about a pet with a
made-up name no other turn holds ("my parrot zkbd plays with the green bell more than anything"),
and `probes` gives for each such add the question "what does my parrot zkbd play with more than
anything?" and the turn that answers it. Exact flat search finds each at the top (its words are
shared with no other turn but a few hundred probes); a search that prunes the turn's leaf or
session, or an approximate index that misses it, shows up as a recall loss
(`benchmarks.latency_synthetic`).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

from benchmarks.open_snapshot import HashingEncoder, memory  # noqa: F401 - HashingEncoder: the build's encoder

SPACE = "u"
MARKER = "synthetic_build.json"
GENERATOR_VERSION = 2  # 2: a recall probe in every add
WINDOW = 5000  # units per reported build-cost window
NAMES = ["Ana", "Ben", "Caro", "Dev"]
OBJECTS = ["cat", "marathon", "sourdough", "Lisbon", "novel", "cello", "garden", "guitar", "chess", "sailing",
           "coffee", "opera"]
VERBS = ["love", "hate", "started", "finished", "planned", "miss", "bought"]
ADJECTIVES = ["great", "awful", "calm", "busy", "new"]
QUESTIONS = ["what about my sourdough and the cat?", "when did I start the cello?", "do I still love sailing?",
             "which novel did I finish?", "what did Ben say about the garden?", "how is the marathon going?",
             "did Caro buy a new guitar?", "what do I hate about coffee?", "is the opera calm?",
             "what did Dev plan in Lisbon?"]


PETS, COLOURS, TOYS = ["dog", "parrot", "tortoise", "hamster"], ["blue", "orange", "green", "purple"], \
    ["ball", "rope", "bell", "feather"]


def probe_name(batch_no: int) -> str:
    """The made-up pet name of add `batch_no`'s probe: "zk" + the number in letters (a-z)."""
    letters, n = "", batch_no
    while True:
        letters, n = chr(97 + n % 26) + letters, n // 26
        if not n:
            return f"zk{letters}"


def probe_slot(batch_no: int, per_add: int) -> int:
    """Which turn of add `batch_no` is its probe."""
    return (batch_no * 7919 + 13) % per_add


def add_turns(batch_no: int, per_add: int) -> list[dict]:
    """The turns of add number `batch_no` (the same for every build), its probe among them."""
    rng = random.Random(batch_no)
    turns = [{"turn_id": f"b{batch_no}-{i}", "session_id": f"s{batch_no // 10}", "speaker": NAMES[i % 4],
              "text": f"I {rng.choice(VERBS)} my {rng.choice(OBJECTS)} and the {rng.choice(ADJECTIVES)} "
                      f"{rng.choice(OBJECTS)} number {rng.randrange(10 ** 6)}.",
              "timestamp": f"20{20 + batch_no // 3000:02d}-{1 + batch_no // 250 % 12:02d}-{1 + batch_no % 28:02d}"
                           f"T10:{i % 60:02d}"}
             for i in range(per_add)]
    k = batch_no % 4
    turns[probe_slot(batch_no, per_add)]["text"] = (f"my {PETS[k]} {probe_name(batch_no)} plays with the {COLOURS[k]} "
                                                    f"{TOYS[(k + 1) % 4]} more than anything")
    return turns


def probes(adds: int, per_add: int = 500, at_most: int = 100) -> list[tuple[str, str]]:
    """(question, turn id of its answer) for up to `at_most` of the first `adds` adds' probes,
    spread evenly over them (oldest to newest)."""
    chosen = range(adds) if adds <= at_most else sorted({round(i * (adds - 1) / (at_most - 1)) for i in range(at_most)})
    return [(f"what does my {PETS[b % 4]} {probe_name(b)} play with more than anything?", f"b{b}-{probe_slot(b, per_add)}")
            for b in chosen]


def questions(k: int, seed: int = 0) -> list[str]:
    """k distinct questions in the generator's words (a question template with a number)."""
    rng = random.Random(seed)
    return [f"{rng.choice(QUESTIONS)[:-1]} number {rng.randrange(10 ** 6)}?" for _ in range(k)]


def build(path: Path, n: int, per_add: int = 500, log=None, stop_after_s: float | None = None) -> dict:
    """Build (or resume) a space of about n units under `path`; the figures of this call.
    `stop_after_s`: add nothing more once this many seconds have passed (the build stays
    resumable; 0: only reopen what is there)."""
    key = {"n": n, "per_add": per_add, "generator": GENERATOR_VERSION}
    marker = path / MARKER
    if marker.is_file():
        done = json.loads(marker.read_text())
        if done["key"] == key:
            return {**done["build"], "resumed": False, "reused": True}
    mem = memory(path)
    start_units = mem.index_info(SPACE)["amus"] if SPACE in mem.spaces() else 0
    turns_stored = mem.store.count_turns(SPACE) if start_units else 0
    batch_no = turns_stored // per_add
    units, adds, t0, c0 = start_units, 0, time.perf_counter(), time.process_time()
    ms_per_unit = []  # (units after the add, wall ms per unit, CPU ms per unit)
    windows, window = [], [0, 0.0, 0.0]  # per `WINDOW` units: wall and CPU ms per unit
    finished = True
    while units < n:
        if stop_after_s is not None and time.perf_counter() - t0 >= stop_after_s:
            finished = False
            break
        t, c = time.perf_counter(), time.process_time()
        made = mem.add(add_turns(batch_no, per_add), space=SPACE)
        units = mem.index_info(SPACE)["amus"] if not made else units + len(made)
        batch_no += 1
        adds += 1
        if batch_no % 10 == 0:
            mem.end_session(SPACE)
        if made:
            ms_per_unit.append((units, 1000 * (time.perf_counter() - t) / len(made)))
            window = [window[0] + len(made), window[1] + time.perf_counter() - t, window[2] + time.process_time() - c]
            if window[0] >= WINDOW:
                windows.append({"units": units, "ms_per_unit": 1000 * window[1] / window[0],
                                "cpu_ms_per_unit": 1000 * window[2] / window[0], "load_avg_1m": os.getloadavg()[0]})
                window = [0, 0.0, 0.0]
                if log is not None:
                    log(json.dumps(windows[-1]))
        if log is not None and adds % 20 == 0:
            log(f"[synthetic n={n:,}] {units:,} units, {time.perf_counter() - t0:.0f} s this run, "
                f"{ms_per_unit[-1][1]:.2f} ms/unit last add, load {os.getloadavg()[0]:.1f}")
    if finished:
        mem.end_session(SPACE)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    mem.close()  # the derived files with their snapshot
    out = {"units": units, "units_before": start_units, "units_added": units - start_units, "adds": adds,
           "per_add": per_add, "build_s": wall, "build_cpu_s": cpu,
           "amus_per_s": (units - start_units) / wall if wall else None,
           "finished": finished, "resumed": start_units > 0, "reused": False, "windows": windows,
           "load_avg_1m": os.getloadavg()[0]}
    if finished:
        marker.write_text(json.dumps({"key": key, "build": out}))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dir")
    ap.add_argument("n", type=int)
    ap.add_argument("--per-add", type=int, default=500)
    ap.add_argument("--stop-after-s", type=float, default=None)
    args = ap.parse_args(argv)
    out = build(Path(args.dir), args.n, args.per_add, log=lambda m: print(m, file=sys.stderr, flush=True),
                stop_after_s=args.stop_after_s)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
