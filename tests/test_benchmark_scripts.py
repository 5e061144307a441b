"""Benchmark scripts: the routing-miss benchmark's counting (benchmarks/routing_misses.py) on data
where the answer is known and its LoCoMo AMU list; the construction benchmark's target verdicts
and its --breakdown timers."""
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ is not installed

from benchmarks.construction import generate  # noqa: E402
from benchmarks.routing_misses import locomo_amus, measure  # noqa: E402


def test_routing_miss_counts_exact_and_root_started_insertion():
    X = generate(1500, 24, 10, 0.3, 1, "flat")  # 150 independent clusters
    exact = measure(X, 10**6, 50)  # the top level is every leaf: no needless leaf
    root = measure(X, 0, 50)
    assert exact["amus"] == root["amus"] == 1500
    assert exact["needless_share"] == 0.0 and 0 < exact["opened_share"] < 0.5
    assert root["needless_share"] > 0.0 and root["opened_share"] > exact["opened_share"]


def test_locomo_amus_are_the_rule_extractor_units(locomo_dev):
    texts = locomo_amus(locomo_dev)
    assert len(texts) > 5000 and all(t.strip() for t in texts)


def test_construction_verdicts_on_known_costs():
    """The two readings of the log-growth target and the work slopes, on hand-made rows."""
    from benchmarks.construction import path_per_amu, targets, work_slopes

    def row(n, us, path):
        return {"amus": n, "us_per_amu": us, "stats": {"pending_updates": path * n}}

    log_cost = [row(10**k, 49.0 * k + 4.0, 1.0 * k) for k in (4, 5, 6)]  # just under proportional to ln n
    t = targets(log_cost)
    assert t["rate"]["measured"] == 1e6 / 249.0 and t["rate"]["met"]
    assert t["log_growth"]["met"] and t["log_growth"]["slope_met"]
    offset = [row(10**k, 60.0 * k - 100.0, k - 2.0) for k in (4, 5, 6)]  # a + b ln n, a < 0: offset reading only
    t = targets(offset)
    assert not t["log_growth"]["met"] and t["log_growth"]["slope_met"]
    assert [round(s, 6) for s in work_slopes(offset)] == [round(1 / math.log(10), 6)] * 2
    faster = [row(10**4, 200.0, 4.0), row(10**5, 260.0, 5.0), row(10**6, 400.0, 5.5)]  # slope rises: 26 -> 61
    t = targets(faster)
    assert not t["log_growth"]["slope_met"] and t["rate"]["measured"] < 4000
    assert path_per_amu(faster[2]) == 5.5 and work_slopes(faster)[1] < work_slopes(faster)[0]


def test_breakdown_timers_see_the_tree_steps_and_change_nothing():
    from benchmarks.construction import BREAKDOWN, time_steps
    from etamem.config import Config
    from etamem.views.semantic_tree import SemanticTree

    X = generate(600, 16, 20, 0.3, 2, "nested")
    trees = [SemanticTree.from_config(16, Config()) for _ in range(2)]
    spent = time_steps(trees[1])
    for tree in trees:
        for s in range(0, 600, 50):
            tree.insert_many([f"a{i}" for i in range(s, s + 50)], X[s:s + 50])
            tree.maintain()
    assert trees[0].snapshot() == trees[1].snapshot() and set(spent) == set(BREAKDOWN)
    assert all(spent[k] > 0 for k in ("descend_many", "_update_paths", "_maybe_split", "_refresh_summaries"))
