"""The routing-miss benchmark's counting (benchmarks/routing_misses.py) on data where the answer
is known, and its LoCoMo AMU list."""
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
