"""Agent loop: writes interleaved with searches through the public `Memory` API, per store size.

    python -m benchmarks.agent_loop [--sizes 1000 10000 100000] [--loops 200] [--data PATH]
        [--out FILE.json] [--work DIR] [--keep] [--seed 0] [--max-loop-s S] [--report FILE.json]

Per size N, in a fresh subprocess (so the peak RSS, `ru_maxrss`, is per size), with the default
`Config()` (raw-turn fallback on), text encoder and affect tagger:

1. Build one space of about N AMUs from LoCoMo turns (default `../shared/data/locomo/
   locomo10-dev.json` beside the checkout; `--data demo`, or the default file being absent,
   uses the bundled `etamem/data/demo_conversation.json` instead and the JSON says so). The
   conversations are repeated as often as needed; every copy is re-dated (shifted by whole
   weeks to start after the previous copy ends) and its two speakers are renamed (speaker
   field, text, photo captions and questions) from a list of 199 distinct first names, so
   copies' raw turns differ and the rule extractor's first-person rewrite gives AMUs that
   differ too (`distinct_amu_text_share` reports how many AMU texts are still repeats).
   One `add` per session, as bulk ingestion goes; adding stops at the first session after
   which the space holds >= N AMUs, then `end_session`. Timed: the `add`/`end_session` calls
   (models loaded before, reported apart), as AMUs/s and turns/s.
2. The agent loop: `--loops` times {add one new turn (the same turns at every N: the first
   conversation's sessions in a copy of their own (`loop_copy`), re-dated to follow the space's
   last turn, one turn per `add`, session boundaries as in the data, so every size encodes the
   same texts and add times compare the engine, not the text lengths); then `search` one question (LoCoMo questions of a copy in the
   space, names replaced to match it; distinct, drawn with `--seed`)}; then the same
   questions again as warm searches, with no add in between (after one untimed search). All
   searches use top_k=20. The loop's questions are encoded once before the loop, so the
   store's vector cache serves them in both phases and the search-after-add / warm ratio
   compares index work, not the encoder (query encoding is timed apart, uncached). One
   untimed search precedes the loop (its time is `first_search_after_build_ms`).
   Per operation: wall ms and CPU ms (`time.process_time`, all threads).
3. Open to first search: `close()`, then load the models through a throwaway in-memory
   `Memory()` (`.text_encoder`, `.affect_tagger`; timed as model load), pass them to
   `Memory(path, cfg, text_encoder=..., affect_tagger=...)` and time from that constructor
   to the end of the first `search` (a question not asked before). The injected encoder is
   the cache wrapper the throwaway built; its persistent cache is pointed at the reopened
   store (`encoder.persist = mem.store`), as `Memory(path)` itself wires it, otherwise every
   cached vector would be recomputed.

Targets (verdicts in the JSON and the printed table): search-after-add p50 <= 1.5 x warm
search p50 at every N; add p50 at the largest N <= 1.5 x add p50 at the smallest N;
open-to-first-search at 100k <= 5 s (model load reported apart).

Stores live under `--work DIR` (default: a temporary directory), one `agent-N` directory
per size, removed at the end unless `--keep`. Progress (turns, AMUs, elapsed) goes to stderr
every ~5% of the build. `--max-loop-s` stops the add+search loop early (0: never); on
code that rebuilds the indexes after every write, 200 loops at 100k take hours.
"""
from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from itertools import count
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import numpy as np

from benchmarks.conversation_copies import (  # noqa: F401 - also re-exported for the other benchmarks
    DEFAULT_DATA,
    DEMO,
    GENERATOR_VERSION,
    NAMES,
    Copy,
    Source,
    copies,
    load_sources,
    names_for,
    session_stream,
    source_from_turns,
)

REPO = Path(__file__).resolve().parents[1]
SPACE = "agent"
TOP_K = 20
TARGET_AFTER_ADD_RATIO = 1.5  # search-after-add p50 / warm p50, at every N
TARGET_ADD_GROWTH = 1.5  # add p50 at the largest N / at the smallest N
TARGET_OPEN_S, TARGET_OPEN_AT = 5.0, 100_000


def build_space(mem, space: str, stream: Iterator, n: int, log: Callable[[str], None] | None = None,
                report_every: float = 0.05) -> tuple[dict, list[Copy]]:
    """Add sessions from `stream` (one `add` per session) until the space holds >= n AMUs,
    then `end_session`. Only the engine's calls are timed. Returns the figures and the copies
    that contributed turns; `stream` is left at the first session not added."""
    amus = turns = sessions = 0
    used: list[Copy] = []
    engine_s = cpu_s = 0.0
    t_start = time.perf_counter()
    step = max(1, int(n * report_every))
    next_report = step
    for copy, _, session in stream:
        if not used or used[-1] is not copy:
            used.append(copy)
        t, c = time.perf_counter(), time.process_time()
        new = mem.add(session, space=space)
        engine_s += time.perf_counter() - t
        cpu_s += time.process_time() - c
        amus += len(new)
        turns += len(session)
        sessions += 1
        if log is not None and amus >= next_report:
            log(f"[n={n:,}] {turns:,} turns, {amus:,} AMUs ({amus / n:.0%}), {sessions:,} sessions, "
                f"{time.perf_counter() - t_start:.0f}s elapsed")
            next_report = (amus // step + 1) * step
        if amus >= n:
            break
    t, c = time.perf_counter(), time.process_time()
    mem.end_session(space)
    engine_s += time.perf_counter() - t
    cpu_s += time.process_time() - c
    return {"amus_added": amus, "turns": turns, "sessions": sessions, "copies": len(used),
            "build_s": engine_s, "build_cpu_s": cpu_s,
            "amus_per_s": amus / engine_s if engine_s else float("inf"),
            "turns_per_s": turns / engine_s if engine_s else float("inf"),
            "wall_s": time.perf_counter() - t_start}, used


def sample_questions(used: list[Copy], k: int, rng: np.random.Generator) -> list[str]:
    """k questions of the given copies (names of each copy), distinct while there are enough."""
    pool = [(c, i) for c in used for i in range(len(c.source.questions))]
    if not pool:
        raise ValueError("no questions in the data")
    picks = rng.choice(len(pool), size=k, replace=len(pool) < k)
    return [pool[p][0].questions()[pool[p][1]] for p in picks]


# --- measuring ------------------------------------------------------------------------------
def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def torch_threads() -> int | None:
    """torch's intra-op threads when torch is loaded (the encoder's), else None."""
    torch = sys.modules.get("torch")
    return int(torch.get_num_threads()) if torch is not None else None


def percentiles(ms: list[float]) -> dict:
    if not ms:
        return {"p50_ms": None, "p95_ms": None, "mean_ms": None, "n": 0}
    a = np.asarray(ms, np.float64)
    return {"p50_ms": float(np.percentile(a, 50)), "p95_ms": float(np.percentile(a, 95)),
            "mean_ms": float(a.mean()), "n": len(ms)}


def stage_seconds(mem) -> dict | None:
    """`mem.stage_seconds` (stage -> accumulated seconds) when the engine has it, else None."""
    s = getattr(mem, "stage_seconds", None)
    return {k: float(v) for k, v in s.items()} if isinstance(s, Mapping) else None


def stage_diff(before: dict | None, after: dict | None) -> dict | None:
    if after is None:
        return None
    before = before or {}
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


def uncached(encoder):
    """The model under any cache wrappers (`CachedEncoder.inner`), for timing encoding alone."""
    while hasattr(encoder, "inner"):
        encoder = encoder.inner
    return encoder


ModelFactory = Callable[[Any], tuple[Any, Any]]  # config -> (text_encoder, affect_tagger or None)


def load_models(cfg, factory: ModelFactory | None = None) -> tuple[Any, Any, float]:
    """(text encoder, affect tagger, seconds): through a throwaway in-memory `Memory()` (or
    `factory(cfg)`, for tests)."""
    from etamem import Memory

    t = time.perf_counter()
    if factory is not None:
        enc, tagger = factory(cfg)
    else:
        tmp = Memory(None, cfg)
        enc, tagger = tmp.text_encoder, tmp.affect_tagger
        tmp.close()
        if hasattr(enc, "persist"):
            enc.persist = None  # the throwaway's store is closed; open_memory wires the real one
    return enc, tagger, time.perf_counter() - t


def open_memory(path, cfg, enc, tagger):
    """`Memory(path, cfg, text_encoder=enc, affect_tagger=tagger)`, with a cache-wrapped encoder's
    persistent cache pointed at this store, as `Memory(path)` wires its own encoder."""
    from etamem import Memory

    mem = Memory(path, cfg, text_encoder=enc, affect_tagger=tagger)
    if hasattr(enc, "persist") and getattr(mem, "store", None) is not None:
        enc.persist = mem.store
    return mem


def new_memory(path, cfg, models: ModelFactory | None = None):
    """A Memory on `path` with its models loaded (seconds reported): the default lazily built
    ones, or `models(cfg)`'s."""
    from etamem import Memory

    t = time.perf_counter()
    if models is None:
        mem = Memory(path, cfg)
    else:
        enc, tagger = models(cfg)
        mem = open_memory(path, cfg, enc, tagger)
    mem.text_encoder, mem.affect_tagger  # noqa: B018 - load them now, not inside the first add
    getattr(mem, "extractor", None)  # and the extractor (resolving it imports the LLM client)
    return mem, time.perf_counter() - t


def timed(fn, *a, **k) -> tuple[Any, float, float]:
    t, c = time.perf_counter(), time.process_time()
    out = fn(*a, **k)
    return out, 1000 * (time.perf_counter() - t), 1000 * (time.process_time() - c)


LOOP_COPY = 10_000  # first copy index of the loop's turns (the built copies are far fewer)


def loop_copy(mem, sources: list[Source]) -> Copy:
    """The agent loop's turns: the first source in a copy of its own, re-dated to start the
    week after the space's last turn; its index is the first from LOOP_COPY whose turn ids the
    store does not hold yet (a kept store may hold an earlier run's loop turns)."""
    src, week = sources[0], timedelta(weeks=1)
    last = mem.turns(SPACE)[-1].timestamp
    stored = {t.turn_id.split(":", 1)[0] for t in mem.turns(SPACE)}
    k = next(i for i in count(LOOP_COPY) if f"c{i}" not in stored)
    shift = (math.ceil((last - src.first) / week) + 1) * week
    # names no built copy uses (a built copy of the same source with the same names would make
    # the loop's texts cache hits): the usual names with a surname of the loop copy
    names = [f"{name} Loop{k - LOOP_COPY + 1}" for name in names_for(k, len(src.speakers))]
    return Copy(k, src, dict(zip(src.speakers, names)), shift)


def skip_stored(mem, stream: Iterator) -> tuple[list[Copy], Iterator]:
    """For a kept store: the copies its sessions came from, and the stream from the first turn
    not stored yet (earlier runs' loop turns included)."""
    stored = {t.turn_id for t in mem.turns(SPACE)}
    used: list[Copy] = []
    for copy, sid, session in stream:
        fresh = [t for t in session if t["turn_id"] not in stored]
        if len(fresh) < len(session) and (not used or used[-1] is not copy):
            used.append(copy)
        if fresh:
            return used, itertools.chain([(copy, sid, fresh)], stream)
    return used, iter(())


def measure_size(n: int, *, sources: list[Source], work_dir, loops: int = 200, seed: int = 0, cfg=None,
                 models: ModelFactory | None = None, max_loop_s: float = 0.0,
                 log: Callable[[str], None] | None = None, reuse: dict | None = None) -> dict:
    """Build, agent loop, warm searches and open-to-first-search for one size (see the module doc).
    `reuse`: a row of an earlier run whose kept store is used as built (its build figures are
    reported, marked `reused`); the loop continues the stream after the turns it holds."""
    from etamem import Config

    cfg = cfg if cfg is not None else Config()
    rng = np.random.default_rng(seed)
    path = Path(work_dir) / f"agent-{n}"
    if path.exists() and reuse is None:
        shutil.rmtree(path)
    import_mb = peak_mb()
    mem, model_load_s = new_memory(path, cfg, models)
    stream = session_stream(sources)
    if reuse is not None:
        used, stream = skip_stored(mem, stream)
        build = dict(reuse["build"], reused=True)
        t = time.perf_counter()
        mem.search("warm up", SPACE, top_k=TOP_K)  # opens the space (indexes loaded or rebuilt): untimed
        build["reopen_s"] = time.perf_counter() - t
    else:
        before = stage_seconds(mem)
        build, used = build_space(mem, SPACE, stream, n, log)
        build["stage_seconds"] = stage_diff(before, stage_seconds(mem))
        build["model_load_s"] = model_load_s
    amus = mem.list(SPACE)
    build_mb = peak_mb()

    questions = sample_questions(used, loops + 2, rng)
    loop_q, open_q, second_q = questions[:loops], questions[loops], questions[loops + 1]
    mem.text_encoder.encode(loop_q)  # the vector cache serves them in both phases (see module doc)
    _, first_ms, _ = timed(mem.search, loop_q[0], SPACE, top_k=TOP_K)

    turn_iter = ((sid, turn) for sid, session in loop_copy(mem, sources).sessions() for turn in session)
    add_ms, add_cpu, after_ms, after_cpu, hits_after, loop_sessions = [], [], [], [], [], set()
    before = stage_seconds(mem)
    t_loop = time.perf_counter()
    for i in range(loops):
        if max_loop_s and time.perf_counter() - t_loop > max_loop_s:
            break
        sid, turn = next(turn_iter)
        loop_sessions.add(sid)
        _, ms, cpu = timed(mem.add, turn, space=SPACE)
        add_ms.append(ms)
        add_cpu.append(cpu)
        hits, ms, cpu = timed(mem.search, loop_q[i], SPACE, top_k=TOP_K)
        after_ms.append(ms)
        after_cpu.append(cpu)
        hits_after.append(len(hits))
    done = len(add_ms)
    loop_stages = stage_diff(before, stage_seconds(mem))
    if log is not None:
        log(f"[n={n:,}] agent loop: {done} adds + searches in {time.perf_counter() - t_loop:.0f}s")
    mem.search(loop_q[0], SPACE, top_k=TOP_K)  # untimed: the first search after the last add
    warm_ms, warm_cpu = [], []
    for q in loop_q[:done]:
        _, ms, cpu = timed(mem.search, q, SPACE, top_k=TOP_K)
        warm_ms.append(ms)
        warm_cpu.append(cpu)
    enc = uncached(mem.text_encoder)
    enc.encode([loop_q[0]])
    encode_ms = [timed(enc.encode, [q])[1] for q in loop_q[:done]]
    n_amus_after = len(mem.list(SPACE))
    mem.close()

    enc, tagger, load_s = load_models(cfg, models)
    t, c = time.perf_counter(), time.process_time()
    mem = open_memory(path, cfg, enc, tagger)
    first_hits = mem.search(open_q, SPACE, top_k=TOP_K)
    open_s, open_cpu = time.perf_counter() - t, time.process_time() - c
    _, second_ms, _ = timed(mem.search, second_q, SPACE, top_k=TOP_K)
    mem.close()

    after, warm = percentiles(after_ms), percentiles(warm_ms)
    ratio = after["p50_ms"] / warm["p50_ms"] if done and warm["p50_ms"] else None
    texts = [a.text for a in amus]
    return {
        "n": n, "amus": len(amus), "turns": build["turns"], "sessions": build["sessions"], "copies": build["copies"],
        "distinct_amu_text_share": len(set(texts)) / len(texts) if texts else None,
        "build": build,
        "first_search_after_build_ms": first_ms,
        "loop": {"loops": done, "loops_requested": loops, "sessions": len(loop_sessions),
                 "amus_after": n_amus_after, "mean_hits": float(np.mean(hits_after)) if hits_after else None,
                 "add": percentiles(add_ms), "add_cpu": percentiles(add_cpu),
                 "search_after_add": after, "search_after_add_cpu": percentiles(after_cpu),
                 "warm_search": warm, "warm_search_cpu": percentiles(warm_cpu),
                 "ratio_after_add_to_warm_p50": ratio, "query_encoding": percentiles(encode_ms),
                 "stage_seconds": loop_stages,
                 "samples_ms": {"add": [round(x, 3) for x in add_ms],
                                "search_after_add": [round(x, 3) for x in after_ms],
                                "warm_search": [round(x, 3) for x in warm_ms]}},
        "open": {"model_load_s": load_s, "open_to_first_search_s": open_s, "open_to_first_search_cpu_s": open_cpu,
                 "first_search_hits": len(first_hits), "second_search_ms": second_ms},
        "peak_rss_mb": peak_mb(), "build_peak_rss_mb": build_mb, "import_peak_rss_mb": import_mb,
        "load_avg_1m": os.getloadavg()[0], "torch_threads": torch_threads(),
    }


# --- targets and report ------------------------------------------------------------------------
def targets(rows: list[dict]) -> dict:
    """The three targets' verdicts on measured rows (sorted by n); `met` is None when not measured."""
    rows = sorted(rows, key=lambda r: r["n"])
    points = [{"n": r["n"], "ratio": r["loop"]["ratio_after_add_to_warm_p50"],
               "met": None if r["loop"]["ratio_after_add_to_warm_p50"] is None
               else r["loop"]["ratio_after_add_to_warm_p50"] <= TARGET_AFTER_ADD_RATIO} for r in rows]
    ratio = {"target": f"search-after-add p50 <= {TARGET_AFTER_ADD_RATIO} x warm search p50 at every N",
             "points": points,
             "met": None if not points or any(p["met"] is None for p in points) else all(p["met"] for p in points)}
    growth = {"target": f"add p50 at the largest N <= {TARGET_ADD_GROWTH} x add p50 at the smallest N",
              "smallest": rows[0]["n"] if rows else None, "largest": rows[-1]["n"] if rows else None,
              "ratio": None, "met": None}
    if len(rows) > 1:
        a, b = rows[0]["loop"]["add"]["p50_ms"], rows[-1]["loop"]["add"]["p50_ms"]
        if a and b is not None:
            growth["ratio"] = b / a
            growth["met"] = b / a <= TARGET_ADD_GROWTH
    at = [r for r in rows if r["n"] == TARGET_OPEN_AT]
    opened = {"target": f"open-to-first-search at {TARGET_OPEN_AT:,} AMUs <= {TARGET_OPEN_S:g} s "
                        "(+ model load, reported apart)",
              "measured_s": at[0]["open"]["open_to_first_search_s"] if at else None,
              "model_load_s": at[0]["open"]["model_load_s"] if at else None,
              "met": (at[0]["open"]["open_to_first_search_s"] <= TARGET_OPEN_S) if at else None}
    return {"search_after_add": ratio, "add_growth": growth, "open_to_first_search": opened}


def verdict(met) -> str:
    return "not measured" if met is None else ("met" if met else "NOT met")


def fmt(x, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def table(rows: list[dict]) -> str:
    head = ["N", "AMUs", "turns", "build AMUs/s", "add p50/p95 ms", "search after add p50/p95 ms",
            "warm search p50/p95 ms", "after/warm p50", "add CPU p50 ms", "after CPU p50 ms", "warm CPU p50 ms",
            "query enc. p50 ms", "open->1st search s", "model load s", "peak RSS MB", "load"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        lp = r["loop"]
        pp = lambda d: f"{fmt(d['p50_ms'])}/{fmt(d['p95_ms'])}"  # noqa: E731
        cells = [f"{r['n']:,}", f"{r['amus']:,}", f"{r['turns']:,}", f"{r['build']['amus_per_s']:,.0f}",
                 pp(lp["add"]), pp(lp["search_after_add"]), pp(lp["warm_search"]),
                 fmt(lp["ratio_after_add_to_warm_p50"], ".2f"), fmt(lp["add_cpu"]["p50_ms"]),
                 fmt(lp["search_after_add_cpu"]["p50_ms"]), fmt(lp["warm_search_cpu"]["p50_ms"]),
                 fmt(lp["query_encoding"]["p50_ms"]), f"{r['open']['open_to_first_search_s']:.2f}",
                 f"{r['open']['model_load_s']:.1f}", f"{r['peak_rss_mb']:,.0f}", f"{r['load_avg_1m']:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def report(doc: dict) -> None:
    info, a, rows = doc["machine"], doc["args"], doc["results"]
    print(f"machine: {info['cpu_count']} CPUs, {info['processor']}, {info['platform']}; python {info['python']}, "
          f"numpy {info['numpy']}; 1-minute load at start {info['load_avg_1m_start']:.1f}")
    print(f"command: {doc['command']}")
    d = doc["data"]
    print(f"data: {d['kind']} ({d['path']}){'; ' + d['note'] if d.get('note') else ''}; loops {a['loops']}, "
          f"top_k {TOP_K}, seed {a['seed']}, default Config (fallback on); wall time {doc['wall_s']:.0f}s\n")
    print(table(rows))
    print("\nadd: one turn per call; search after add: the search that follows each add; warm: the same questions "
          "again, no add in between (questions pre-encoded, so both exclude the encoder; query enc.: the model "
          "alone, uncached). CPU: process time, all threads. open->1st search: Memory(path) with loaded models "
          "to the end of the first search. load: 1-minute load average at the end of the size (2 cores).")
    for r in rows:
        b, lp = r["build"], r["loop"]
        stages = b.get("stage_seconds")
        extra = "" if not stages else "; build stages s: " + ", ".join(f"{k} {v:.1f}" for k, v in stages.items())
        short = "" if lp["loops"] == lp["loops_requested"] else f" (stopped by --max-loop-s at {lp['loops']})"
        reused = " [store kept from an earlier run: its build figures]" if b.get("reused") else ""
        print(f"- {r['n']:,}{reused}: build {b['build_s']:.1f}s ({b['turns_per_s']:,.0f} turns/s, {b['sessions']:,} sessions, "
              f"{b['copies']} copies, distinct AMU texts {r['distinct_amu_text_share']:.1%}; models loaded before "
              f"it in {b['model_load_s']:.1f}s, imports included), first search after "
              f"build {r['first_search_after_build_ms']:.0f} ms; loop{short}: {lp['sessions']} sessions; "
              f"second search after reopen {r['open']['second_search_ms']:.0f} ms{extra}")
    t = doc["targets"]
    print("\nTargets:")
    pts = ", ".join(f"{p['n']:,}: {fmt(p['ratio'], '.2f')}" for p in t["search_after_add"]["points"])
    print(f"- {t['search_after_add']['target']}: {pts} -> {verdict(t['search_after_add']['met'])}")
    g = t["add_growth"]
    gm = "n/a (one size)" if g["ratio"] is None else f"{g['largest']:,} vs {g['smallest']:,}: x{g['ratio']:.2f}"
    print(f"- {g['target']}: {gm} -> {verdict(g['met'])}")
    o = t["open_to_first_search"]
    om = "n/a" if o["measured_s"] is None else f"{o['measured_s']:.2f} s (model load {o['model_load_s']:.1f} s)"
    print(f"- {o['target']}: {om} -> {verdict(o['met'])}")


def machine_info() -> dict:
    return {"cpu_count": os.cpu_count(), "python": platform.python_version(), "numpy": np.__version__,
            "platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "load_avg_1m_start": os.getloadavg()[0]}


def log_stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def reopen_child(store, cfg=None, question: str = "What did they do last weekend?") -> dict:
    """Open-to-first-search of an existing store in this (fresh) process: models loaded first
    (reported apart), then `Memory(path)` -> the space opened (views loaded, indexes loaded from
    derived files or rebuilt) -> the first search."""
    from etamem import Config

    cfg = cfg if cfg is not None else Config()
    enc, tagger, load_s = load_models(cfg)
    t, c = time.perf_counter(), time.process_time()
    mem = open_memory(store, cfg, enc, tagger)
    space = mem.spaces()[0]
    live_t = time.perf_counter()
    mem.views(space)
    open_s = time.perf_counter() - live_t
    hits = mem.search(question, space, top_k=TOP_K)
    total, cpu = time.perf_counter() - t, time.process_time() - c
    info = mem.index_info(space)
    loaded = info["saved"] is not None and info["saved"] == info["generation"]
    mem.close()  # saves the derived files when they were rebuilt
    return {"store": str(store), "amus": mem_amus(store), "model_load_s": load_s, "open_to_first_search_s": total,
            "open_to_first_search_cpu_s": cpu, "space_open_s": open_s, "derived_files_loaded": loaded,
            "hits": len(hits), "load_avg_1m": os.getloadavg()[0], "peak_rss_mb": peak_mb()}


def mem_amus(store) -> int:
    import sqlite3

    with sqlite3.connect(Path(store) / "memory.sqlite") as conn:
        return int(conn.execute("SELECT COUNT(*) FROM amus WHERE status='active'").fetchone()[0])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    ap.add_argument("--loops", type=int, default=200, help="add+search iterations (and as many warm searches)")
    ap.add_argument("--data", default=None,
                    help=f"LoCoMo file (default {DEFAULT_DATA}, or the bundled demo when absent); 'demo': the demo")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", default=None, help="directory for the stores (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the stores (agent-N under --work)")
    ap.add_argument("--max-loop-s", type=float, default=0.0, help="stop the add+search loop after this long (0: never)")
    ap.add_argument("--out", default=None, help="write all results to this JSON file")
    ap.add_argument("--report", default=None, metavar="FILE.json", help="print the table of a saved run and exit")
    ap.add_argument("--reuse", default=None, metavar="FILE.json",
                    help="use the stores kept (--keep) by the run saved in FILE.json as built, reporting its build "
                         "figures; the loop continues after the turns they hold (for re-measuring a changed engine)")
    ap.add_argument("--reopen", default=None, metavar="STORE",
                    help="only time open-to-first-search of an existing store, --repeat times, each in a fresh process")
    ap.add_argument("--repeat", type=int, default=3, help="with --reopen: how many fresh processes")
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--reopen-child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.reopen_child:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        print(json.dumps(reopen_child(args.reopen_child)), flush=True)
        return
    if args.reopen:
        env = dict(os.environ, HF_HUB_OFFLINE=os.environ.get("HF_HUB_OFFLINE", "1"))
        runs = []
        for _ in range(args.repeat):
            out = subprocess.run([sys.executable, "-m", "benchmarks.agent_loop", "--reopen-child", args.reopen],
                                 stdout=subprocess.PIPE, text=True, check=True, env=env, cwd=REPO).stdout
            runs.append(json.loads(out.strip().splitlines()[-1]))
            r = runs[-1]
            print(f"open-to-first-search {r['open_to_first_search_s']:.2f} s (space open {r['space_open_s']:.2f} s, "
                  f"derived files {'loaded' if r['derived_files_loaded'] else 'rebuilt'}; model load "
                  f"{r['model_load_s']:.1f} s apart), {r['amus']:,} AMUs, load {r['load_avg_1m']:.1f}")
        if args.out:
            Path(args.out).write_text(json.dumps({"command": "python -m benchmarks.agent_loop " + " ".join(
                sys.argv[1:] if argv is None else argv), "machine": machine_info(), "runs": runs}, indent=1))
        return
    if args.report:
        with open(args.report) as f:
            report(json.load(f))
        return
    if args.child is not None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        sources, _ = load_sources(args.data)
        reuse = None
        if args.reuse:
            with open(args.reuse) as f:
                reuse = next(r for r in json.load(f)["results"] if r["n"] == args.child)
        row = measure_size(args.child, sources=sources, work_dir=args.work, loops=args.loops, seed=args.seed,
                           max_loop_s=args.max_loop_s, log=log_stderr, reuse=reuse)
        print(json.dumps(row), flush=True)
        return

    command = "python -m benchmarks.agent_loop " + " ".join(sys.argv[1:] if argv is None else argv)
    _, data_info = load_sources(args.data)  # fails early on a missing explicit file
    data = args.data if args.data in (None, DEMO) else str(Path(args.data).resolve())
    own_work = args.work is None
    work = Path(tempfile.mkdtemp(prefix="etamem-agent-loop-")) if own_work else Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, HF_HUB_OFFLINE=os.environ.get("HF_HUB_OFFLINE", "1"))
    sizes, t_start, rows, machine = sorted(args.sizes), time.perf_counter(), [], machine_info()
    try:
        for n in sizes:
            log_stderr(f"size {n:,}: starting a fresh subprocess (stores under {work})")
            cmd = [sys.executable, "-m", "benchmarks.agent_loop", "--child", str(n), "--work", str(work),
                   "--loops", str(args.loops), "--seed", str(args.seed), "--max-loop-s", str(args.max_loop_s),
                   *(["--data", data] if data is not None else []),
                   *(["--reuse", str(Path(args.reuse).resolve())] if args.reuse else [])]
            proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, check=True, env=env, cwd=REPO)
            rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    finally:
        if not args.keep:
            if own_work:
                shutil.rmtree(work, ignore_errors=True)
            else:
                for n in sizes:
                    shutil.rmtree(work / f"agent-{n}", ignore_errors=True)
    doc = {"command": command, "machine": machine, "data": data_info,
           "args": {k: v for k, v in vars(args).items() if k not in ("child", "report")},
           "wall_s": time.perf_counter() - t_start, "results": rows, "targets": targets(rows)}
    report(doc)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)
        print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
