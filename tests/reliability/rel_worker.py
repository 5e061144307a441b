"""Worker processes of the reliability suite (run as `python rel_worker.py ROLE ...`).

    ingest STORE SOURCE [START]     add the turns of SOURCE (`locomo:<file>` first conversation,
                                    or `demo`) one by one; print `ok <turn_id>` after each add returns
    writer STORE SPACE PREFIX N     N single-turn adds (a new session every 5), token `<prefix>tok<i>`
    reader STORE SPACE STOPFILE TOKENS...
                                    search until STOPFILE exists, then once more for every token;
                                    print one JSON line: searches, errors, units seen per prefix, found
"""
import json
import os
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

from rel_common import demo_turns, fast_memory  # noqa: E402

T0 = datetime(2023, 5, 8, 13, 0, tzinfo=timezone.utc)


def source_turns(source: str) -> list[dict]:
    if source == "demo":
        return demo_turns()
    from etamem.ingest.datasets import read_locomo

    conv = next(iter(read_locomo(source.split(":", 1)[1])))
    return conv.turns


def kill_at_statement(mem, n: int) -> None:
    """SIGKILL this process when its store connection starts its n-th SQL statement (a crash
    at an exact point: inside a transaction, at its COMMIT, between two)."""
    import signal

    count = [0]

    def trace(_sql):
        count[0] += 1
        if count[0] >= n:
            os.kill(os.getpid(), signal.SIGKILL)

    mem.store._conn.set_trace_callback(trace)  # test-only access to the connection


def ingest(store, source, start="0"):
    mem = fast_memory(store)
    if os.environ.get("ETAMEM_KILL_AT_STATEMENT"):
        kill_at_statement(mem, int(os.environ["ETAMEM_KILL_AT_STATEMENT"]))
    for t in source_turns(source)[int(start):]:
        mem.add(t, space="conv")
        print("ok", t["turn_id"], flush=True)
    mem.close()


def writer(store, space, prefix, n):
    mem = fast_memory(store)
    for i in range(int(n)):
        turn = {"session_id": f"{prefix}-s{i // 5}", "speaker": "Ana", "turn_id": f"{prefix}:{i}",
                "text": f"Note {prefix}tok{i}: I planted tomatoes in the garden with my neighbour today.",
                "timestamp": (T0 + timedelta(hours=i)).isoformat()}
        mem.add(turn, space=space)
        print("ok", turn["turn_id"], flush=True)
    mem.close()


def reader(store, space, stopfile, *tokens):
    mem = fast_memory(store)
    searches, errors, seen = 0, [], {}
    while not os.path.exists(stopfile):
        try:
            for h in mem.search("tomatoes garden neighbour", space=space, top_k=50):
                for t in h.source_turn_ids:
                    seen.setdefault(t.split(":")[0], set()).add(t)
            searches += 1
        except Exception as exc:  # noqa: BLE001 - counted and reported
            errors.append(f"{type(exc).__name__}: {exc}")
        time.sleep(0.01)
    found = {}
    for tok in tokens:
        hits = mem.search(f"note {tok}", space=space, top_k=5, )
        found[tok] = any(tok in h.amu.text for h in hits)
    print(json.dumps({"searches": searches, "errors": errors, "seen": {k: len(v) for k, v in seen.items()},
                      "found": found}), flush=True)
    mem.close()


if __name__ == "__main__":
    role, *args = sys.argv[1:]
    {"ingest": ingest, "writer": writer, "reader": reader}[role](*args)
