"""Many processes, one store; crashes at random points (DESIGN §11).

- Two writer and two reader processes on one space: the store opens afterwards, every
  acknowledged turn is there once, views validate, readers followed the writers' commits.
- A process ingesting a conversation turn by turn is SIGKILLed at a random time or at a random
  SQL statement (4 seeds by default, 50 with --run-slow): the store opens, every turn whose `add` returned is present,
  no unit is lost or doubled, the views validate, and the rest of the ingest completes.
"""
import pytest

from conftest import LOCOMO_DEV
from rel_common import crash_once, processes_run

SOURCE = f"locomo:{LOCOMO_DEV}" if LOCOMO_DEV.exists() else "demo"  # the demo conversation ships with etamem


def test_two_writers_and_two_readers(tmp_path):
    n = 25
    run = processes_run(tmp_path, n, timeout=300)
    assert run["writer_rcs"] == [0, 0] and run["reader_rcs"] == [0, 0], run["stderr"]
    assert run["acked_per_writer"] == [n, n]
    reports = run["reports"]
    assert len(reports) == 2
    assert all(rep["errors"] == [] for rep in reports), reports
    assert all(all(rep["found"].values()) for rep in reports), reports  # readers follow the writers' commits
    assert all(rep["searches"] > 0 for rep in reports)
    assert run["lost"] == 0 and run["doubled"] == 0 and run["views_ok"], run
    assert run["turns"] == 2 * n + 1 and run["pending"] == 0


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
