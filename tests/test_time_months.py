"""The Time forest files a day under its own month (issue 49, item 8): 2 March 2024 (ISO week 9,
whose Monday is 26 February) under March, not February; a store of an earlier version keeps its
days where they were, and new units of such a day join it there without leaving empty nodes."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np

from etamem.views import time_forest
from etamem.views.time_forest import TimeForest, time_path

UTC = timezone.utc


def old_time_path(start, session_id):
    """The earlier rule: a week under the month of its Monday."""
    day0 = datetime(start.year, start.month, start.day, tzinfo=start.tzinfo)
    monday = day0 - timedelta(days=day0.weekday())
    iso = monday.isocalendar()
    month0 = datetime(monday.year, monday.month, 1, tzinfo=start.tzinfo)
    return [(f"M:{month0:%Y-%m}", "month", month0, month0 + timedelta(days=31)),
            (f"W:{iso.year}-W{iso.week:02d}", "week", monday, monday + timedelta(days=7)),
            (f"D:{day0:%Y-%m-%d}", "day", day0, day0 + timedelta(days=1)),
            (f"S:{session_id}", "session", start, start)]


def vec(i: int) -> np.ndarray:
    v = np.zeros(4, np.float32)
    v[i % 4] = 1.0
    return v


def test_a_day_hangs_under_its_own_month():
    ids = [p[0] for p in time_path(datetime(2024, 3, 2, 18, tzinfo=UTC), "s1")]
    assert ids == ["M:2024-03", "W:2024-W09/2024-03", "D:2024-03-02", "S:s1"]
    ids = [p[0] for p in time_path(datetime(2024, 2, 27, tzinfo=UTC), "s0")]
    assert ids == ["M:2024-02", "W:2024-W09", "D:2024-02-27", "S:s0"]
    forest = TimeForest(4)
    forest.insert("a", vec(0), datetime(2024, 2, 27, tzinfo=UTC), "s0")
    forest.insert("b", vec(1), datetime(2024, 3, 2, 18, tzinfo=UTC), "s1")
    assert forest.path("S:s1") == ["S:s1", "D:2024-03-02", "W:2024-W09/2024-03", "M:2024-03"]
    week = forest.nodes["W:2024-W09/2024-03"]
    assert week.start <= datetime(2024, 3, 2, 18, tzinfo=UTC) and week.parent == "M:2024-03"
    assert forest.roots == ["M:2024-02", "M:2024-03"]


def test_a_day_an_earlier_version_filed_stays_and_takes_new_units(monkeypatch):
    forest = TimeForest(4)
    monkeypatch.setattr(time_forest, "time_path", old_time_path)
    forest.insert("a", vec(0), datetime(2024, 3, 2, 10, tzinfo=UTC), "s1")  # as an earlier version filed it
    monkeypatch.undo()
    assert forest.path("S:s1")[-1] == "M:2024-02"
    forest.insert("b", vec(1), datetime(2024, 3, 2, 20, tzinfo=UTC), "s2")  # same day, new session
    forest.insert("c", vec(2), datetime(2024, 3, 3, 9, tzinfo=UTC), "s3")  # a new day: its own month
    assert forest.path("S:s2") == ["S:s2", "D:2024-03-02", "W:2024-W09", "M:2024-02"]
    assert forest.path("S:s3")[-1] == "M:2024-03"
    assert all(n.count > 0 for n in forest.nodes.values()), {k: n.count for k, n in forest.nodes.items()}
    assert forest.nodes["D:2024-03-02"].count == 2 and forest.nodes["M:2024-02"].count == 2
