"""Shared pieces of the reliability suite: a fast memory (hashing encoder + VADER, real
SQLite, FAISS/BM25 indexes) and conversations with markers that make leaks visible."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

from conftest import HashingEncoder
from etamem import Config, Memory
from etamem.models.affect import VaderAffectTagger
from etamem.models.encoders import CachedEncoder
from etamem.views.validation import check_rows

T0 = datetime(2023, 5, 8, 13, 0, tzinfo=timezone.utc)
WORDS = ("hiking", "guitar", "garden", "painting", "marathon", "bakery", "violin", "sunset", "tea", "coffee",
         "museum", "beach", "novel", "puppy", "kitten", "recipe", "festival", "camping", "yoga", "chess")
DEMO = Path(__file__).resolve().parents[2] / "etamem" / "data" / "demo_conversation.json"


def fast_memory(path, **cfg) -> Memory:
    """A `Memory` on the real store and indexes with a text-dependent hashing encoder (no model load)."""
    enc = CachedEncoder(HashingEncoder())
    mem = Memory(path, Config(**cfg), text_encoder=enc, affect_tagger=VaderAffectTagger(enc))
    enc.persist = mem.store  # vectors cached in the store, as the default encoder does
    return mem


def conversation(prefix: str, n_sessions: int, per_session: int, day0: int = 0) -> list[dict]:
    """Turns with ids `<prefix>s<session>:<i>`; texts depend only on (session, i), so two prefixes
    give the same texts under different ids."""
    out = []
    for s in range(n_sessions):
        start = T0 + timedelta(days=day0 + 3 * s)
        for i in range(per_session):
            a, b = WORDS[(7 * s + i) % len(WORDS)], WORDS[(3 * s + 5 * i + 1) % len(WORDS)]
            out.append({"session_id": f"{prefix}s{s}", "speaker": ("Ana", "Ben")[i % 2], "turn_id": f"{prefix}s{s}:{i}",
                        "text": f"I really enjoyed the {a} last weekend with my sister. The {b} was wonderful.",
                        "timestamp": (start + timedelta(minutes=i)).isoformat()})
    return out


def demo_turns() -> list[dict]:
    return json.loads(DEMO.read_text(encoding="utf-8"))["turns"]


def view_problems(store, space: str) -> dict[str, list[str]]:
    """`check_rows` of every saved view of the space against its active units."""
    from etamem.views.space_views import route

    units = store.amus(space)
    out = {}
    for view, (state_json, _, rows, _) in store.load_views(space).items():
        state = json.loads(state_json)
        if view == "time":
            out[view] = check_rows(rows, {a.amu_id for a in units}, [r["node_id"] for r in rows if r["parent_id"] is None],
                                   session_of={a.amu_id: a.session_id for a in units})
        else:
            out[view] = check_rows(rows, {a.amu_id for a in units if route(a.polarity) == view}, [str(state["root"])],
                                   n_nodes=int(state["n_nodes"]))
    return {v: p for v, p in out.items() if p}


def files_containing(root, needle: bytes) -> list[str]:
    """Every file under `root` whose bytes contain `needle`."""
    return sorted(str(p.relative_to(root)) for p in Path(root).rglob("*") if p.is_file() and needle in p.read_bytes())


WORKER = str(Path(__file__).with_name("rel_worker.py"))


def spawn(*args, env=None) -> subprocess.Popen:
    """`rel_worker.py ARGS` in a new process (text pipes)."""
    return subprocess.Popen([sys.executable, WORKER, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "HF_HUB_OFFLINE": "1", **(env or {})})


def acks(text: str) -> list[str]:
    return [line.split()[1] for line in text.splitlines() if line.startswith("ok ")]


def crash_once(work: Path, seed: int, source: str, *, resume: bool = True) -> dict:
    """Ingest `source` turn by turn in a process SIGKILLed at a random time (even seeds: after a
    random number of acknowledged adds plus a random delay) or at a random SQL statement of its
    store connection (odd seeds), then reopen the store and check it. Returns the figures:
    acked, stored, lost (acknowledged but absent), doubled (units or turns twice), views_ok,
    searchable (pending turns flushed, search answers), completed (a new process resumed the
    ingest to the end with a consistent store)."""
    rng = np.random.default_rng(seed)
    root = work / f"crash{seed}"
    if seed % 2:
        child = spawn("ingest", root, source, env={"ETAMEM_KILL_AT_STATEMENT": str(int(rng.integers(30, 1500)))})
        acked = acks(child.communicate(timeout=900)[0])
    else:
        child = spawn("ingest", root, source)
        acked, target = [], int(rng.integers(1, 40))
        for line in child.stdout:
            acked += acks(line)
            if len(acked) >= target:
                break
        time.sleep(float(rng.uniform(0, 0.05)))
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
        acked += acks(child.stdout.read())
    out = {"seed": seed, "acked": len(acked)}
    mem = fast_memory(root)  # must open, whatever the kill left
    turns = [t.turn_id for t in mem.turns("conv")] if "conv" in mem.spaces() else []
    units = [a.amu_id for a in mem.list("conv")] if turns else []
    out.update(stored=len(turns), lost=len(set(acked) - set(turns)),
               doubled=len(turns) - len(set(turns)) + len(units) - len(set(units)),
               views_ok=not turns or not view_problems(mem.store, "conv"))
    if turns:
        mem.flush("conv")  # turns stored but not extracted when the process died
        out["searchable"] = mem.store.count_pending("conv") == 0 and bool(mem.search("What happened?", space="conv"))
    else:
        out["searchable"] = True
    mem.close()
    if resume:
        rest = spawn("ingest", root, source, len(turns))  # the ingest resumes where the store stops
        _, err = rest.communicate(timeout=900)
        mem = fast_memory(root)
        units = [a.amu_id for a in mem.list("conv")]
        out["completed"] = (rest.returncode == 0 and set(acked) <= {t.turn_id for t in mem.turns("conv")}
                            and len(units) == len(set(units)) and not view_problems(mem.store, "conv"))
        out["resume_error"] = "" if rest.returncode == 0 else err[-1000:]
        mem.close()
    return out


ISOLATION_QUERIES = ["hiking with my sister", "wonderful garden", "violin last weekend", "tea", "museum sunset",
                     "marathon", "What did Ana enjoy?", "coffee and chess", "puppy", "festival camping"]


def isolation_run(path, n_spaces: int = 50, deleted: int = 7) -> dict:
    """The same texts in `n_spaces` spaces under different turn ids, every query searched twice in
    each: searches, leaks (hits whose unit or source turn is another space's); then space number
    `deleted` is deleted: whether it is gone, the spaces left, and the other spaces whose counts
    or results changed."""
    mem = fast_memory(path)
    names = [f"user-{i:02d}" for i in range(n_spaces)]
    for name in names:
        mem.add(conversation(f"{name}/", 2, 5), space=name)

    def results(name, q):
        return [(h.amu.amu_id, round(h.score, 6)) for h in mem.search(q, space=name, top_k=10)]

    leaks, searches, before = 0, 0, {}
    for _ in range(2):
        for name in names:
            for q in ISOLATION_QUERIES:
                hits = mem.search(q, space=name, top_k=10)
                searches += 1
                leaks += sum(not t.startswith(f"{name}/") for h in hits for t in h.source_turn_ids)
                leaks += sum(h.amu.space != name for h in hits)
                before[(name, q)] = [(h.amu.amu_id, round(h.score, 6)) for h in hits]
    counts = {n: (len(mem.turns(n)), len(mem.list(n))) for n in names}
    gone = names[deleted]
    mem.delete(gone)
    changed = [n for n in names if n != gone and ((len(mem.turns(n)), len(mem.list(n))) != counts[n]
                                                 or any(results(n, q) != before[(n, q)] for q in ISOLATION_QUERIES))]
    out = {"spaces": n_spaces, "searches": searches, "leaks": leaks, "deleted_gone": gone not in mem.spaces(),
           "spaces_left": len(mem.spaces()), "spaces_changed_by_a_delete": len(changed)}
    mem.close()
    return out


def processes_run(work: Path, n: int, timeout: float = 900, store=None) -> dict:
    """2 writer processes (`n` single-turn adds each) and 2 reader processes (searching until
    the writers are done, then for each writer's last token) on one space of a seeded store
    (`store`: a `Memory` target, by default a directory under `work`). Returns the figures: per
    process return codes and stderr tails, acknowledged adds, reader reports, and what the
    store holds afterwards."""
    root, stop = work / "procs" if store is None else store, work / "procs.stop"
    seed = fast_memory(root)
    seed.add({"session_id": "seed", "speaker": "Ben", "turn_id": "seed:0", "text": "The garden needs water.",
              "timestamp": "2023-05-01T10:00:00+00:00"}, space="shared")
    seed.close()
    writers = [spawn("writer", root, "shared", f"w{k}", n) for k in range(2)]
    readers = [spawn("reader", root, "shared", stop, f"w0tok{n - 1}", f"w1tok{n - 1}") for _ in range(2)]
    outs = [w.communicate(timeout=timeout) for w in writers]
    stop.touch()
    reads = [r.communicate(timeout=timeout) for r in readers]
    acked = [t for out, _ in outs for t in acks(out)]
    mem = fast_memory(root)
    turns = [t.turn_id for t in mem.turns("shared")]
    units = [a.amu_id for a in mem.list("shared")]
    out = {"writer_rcs": [w.returncode for w in writers], "reader_rcs": [r.returncode for r in readers],
           "stderr": [err[-2000:] for _, err in outs + reads], "acked_per_writer": [len(acks(o)) for o, _ in outs],
           "acked": acked, "reports": [json.loads(o.strip().splitlines()[-1]) for o, _ in reads if o.strip()],
           "turns": len(turns), "lost": len(set(acked) - set(turns)),
           "doubled": len(turns) - len(set(turns)) + len(units) - len(set(units)),
           "views_ok": not view_problems(mem.store, "shared"), "pending": mem.store.count_pending("shared")}
    mem.close()
    return out
