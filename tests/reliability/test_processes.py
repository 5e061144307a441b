"""Many processes, one store; crashes at random points (DESIGN §11).

- Two writer and two reader processes on one space: the store opens afterwards, every
  acknowledged turn is there once, views validate, readers followed the writers' commits.
- A process ingesting a conversation turn by turn is SIGKILLed at a random time or at a random
  SQL statement (4 seeds by default, 50 with --run-slow): the store opens, every turn whose `add` returned is present,
  no unit is lost or doubled, the views validate, and the rest of the ingest completes.
"""
import json

import pytest

from conftest import LOCOMO_DEV
from rel_common import crash_once, fast_memory, spawn, view_problems

SOURCE = f"locomo:{LOCOMO_DEV}" if LOCOMO_DEV.exists() else "demo"  # the demo conversation ships with etamem


def check_store(root, space, acked: list[str]) -> object:
    """Opens, holds every acknowledged turn once, no unit twice, saved views valid; returns the Memory."""
    mem = fast_memory(root)
    turns = [t.turn_id for t in mem.turns(space)]
    assert len(turns) == len(set(turns))
    assert set(acked) <= set(turns), sorted(set(acked) - set(turns))[:5]
    units = [a.amu_id for a in mem.list(space)]
    assert len(units) == len(set(units))
    assert not view_problems(mem.store, space)
    return mem


def test_two_writers_and_two_readers(tmp_path):
    root = tmp_path / "s"
    fast_memory(root).add({"session_id": "seed", "speaker": "Ben", "turn_id": "seed:0", "text": "The garden needs water.",
                           "timestamp": "2023-05-01T10:00:00+00:00"}, space="shared")
    n = 25
    stop = tmp_path / "stop"
    writers = [spawn("writer", root, "shared", f"w{k}", n) for k in range(2)]
    readers = [spawn("reader", root, "shared", stop, f"w0tok{n - 1}", f"w1tok{n - 1}") for _ in range(2)]
    outs = [w.communicate(timeout=300) for w in writers]
    stop.touch()
    reads = [r.communicate(timeout=300) for r in readers]
    for (out, err), w in zip(outs, writers):
        assert w.returncode == 0, err[-2000:]
        assert out.count("ok ") == n
    reports = []
    for (out, err), r in zip(reads, readers):
        assert r.returncode == 0, err[-2000:]
        reports.append(json.loads(out.strip().splitlines()[-1]))
    assert all(rep["errors"] == [] for rep in reports), reports
    assert all(all(rep["found"].values()) for rep in reports), reports  # readers follow the writers' commits
    assert all(rep["searches"] > 0 for rep in reports)
    acked = [line.split()[1] for out, _ in outs for line in out.splitlines() if line.startswith("ok ")]
    mem = check_store(root, "shared", acked)
    assert len(mem.turns("shared")) == 2 * n + 1 and mem.store.count_pending("shared") == 0
    mem.close()


def check_crash(report: dict) -> None:
    assert report["lost"] == 0 and report["doubled"] == 0, report
    assert report["views_ok"] and report["searchable"], report
    assert report["completed"], report


@pytest.mark.parametrize("seed", range(4))
def test_sigkill_during_ingest(tmp_path, seed):
    check_crash(crash_once(tmp_path, seed, SOURCE))


@pytest.mark.slow
def test_sigkill_fifty_seeds(tmp_path):
    for seed in range(4, 54):
        check_crash(crash_once(tmp_path, seed, SOURCE))
