"""Benchmark scripts: the routing-miss benchmark's counting (benchmarks/routing_misses.py) on data
where the answer is known and its LoCoMo AMU list; the construction benchmark's target verdicts
and its --breakdown timers."""
import json
import math
import sys
from pathlib import Path

import pytest

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


# --- agent loop, ingestion and Memory.search latency (benchmarks/agent_loop.py, ingest.py, latency.py) ---------
# Tiny sizes on the bundled demo conversation with the hashing encoder and VADER: the scripts' wiring, JSON
# fields and verdicts, not their timings.

def _fast_models(cfg):
    from conftest import HashingEncoder

    return HashingEncoder(), None  # the Memory builds VADER on it (Config(affect_backend="vader"))


def _vader():
    from etamem import Config

    return Config(affect_backend="vader")


def test_agent_loop_generator_copies_are_renamed_redated_and_consecutive():
    from datetime import datetime, timedelta
    from itertools import islice

    from benchmarks.agent_loop import NAMES, copies, load_sources, session_stream
    from etamem.extraction.extractors import RuleExtractor
    from etamem.ingest.inputs import normalise_turns

    sources, info = load_sources("demo")
    assert info["kind"] == "demo" and len(sources) == 1 and sources[0].speakers == ("Maya", "Jonas")
    assert len(set(NAMES)) == len(NAMES) == 199
    cs = list(islice(copies(sources), 4))
    previous_end, seen_ids, seen_texts = None, set(), set()
    for c in cs:
        assert set(c.names) == {"Maya", "Jonas"} and len(set(c.names.values())) == 2
        assert c.shift % timedelta(weeks=1) == timedelta(0)  # whole weeks
        turns = [t for _, session in c.sessions() for t in session]
        stamps = [datetime.fromisoformat(t["timestamp"]) for t in turns]
        if previous_end is not None:
            assert min(stamps) > previous_end  # each copy starts after the previous one ends
        previous_end = max(stamps)
        assert {t["speaker"] for t in turns} == set(c.names.values())
        assert not any(name in t["text"] for t in turns for name in ("Maya", "Jonas"))
        assert not any(name in q for q in c.questions() for name in ("Maya", "Jonas"))
        ids = {t["turn_id"] for t in turns}
        assert not ids & seen_ids and len(ids) == len(turns)
        seen_ids |= ids
        clean = normalise_turns(turns, "s", default_tz="UTC")
        texts = {u for i, t in enumerate(clean) for u in RuleExtractor().extract(t, clean[max(0, i - 4):i])}
        # every AMU about a person differs from the earlier copies' (the generator renames people, not
        # places or pets: a kept short question such as "Is Pixel still hiding?" is the same in every copy)
        texts = {u for u in texts if any(n in u for n in c.names.values())}
        assert texts and not texts & seen_texts
        assert not {f"{t['speaker']}: {t['text']}" for t in turns} & seen_texts
        seen_texts |= texts | {f"{t['speaker']}: {t['text']}" for t in turns}
    assert not set(cs[0].names.values()) & set(cs[1].names.values())  # consecutive copies share no name
    def amus(copy):
        clean = normalise_turns([t for _, s in copy.sessions() for t in s], "s", default_tz="UTC")
        return {u for i, t in enumerate(clean) for u in RuleExtractor().extract(t, clean[max(0, i - 4):i])}

    plain = list(islice(copies(sources, vocatives=False), 2))
    assert "Long time no see." in amus(plain[0]) & amus(plain[1])  # names alone leave such AMUs as they were
    assert f"Long time no see, {cs[1].names['Jonas']}." in amus(cs[1])  # the vocative that makes them differ
    first = [sid for _, sid, _ in islice(session_stream(sources), 5)]
    assert first == ["c0:s1", "c0:s2", "c0:s3", "c1:s1", "c1:s2"]


def test_agent_loop_measure_size_on_the_demo(tmp_path):
    from benchmarks.agent_loop import load_sources, measure_size, table, targets

    sources, _ = load_sources("demo")
    row = measure_size(70, sources=sources, work_dir=tmp_path, loops=4, cfg=_vader(), models=_fast_models)
    assert row["n"] == 70 and row["amus"] >= 70 and row["build"]["amus_added"] == row["amus"]
    assert row["copies"] >= 2 and row["build"]["amus_per_s"] > 0 and row["build"]["turns_per_s"] > 0
    lp = row["loop"]
    assert lp["loops"] == 4 and lp["amus_after"] >= row["amus"]
    for key in ("add", "add_cpu", "search_after_add", "search_after_add_cpu", "warm_search", "warm_search_cpu",
                "query_encoding"):
        assert lp[key]["n"] == 4 and 0 <= lp[key]["p50_ms"] <= lp[key]["p95_ms"]
    assert lp["ratio_after_add_to_warm_p50"] == lp["search_after_add"]["p50_ms"] / lp["warm_search"]["p50_ms"]
    assert [len(v) for v in lp["samples_ms"].values()] == [4, 4, 4]
    assert row["open"]["open_to_first_search_s"] > 0 and row["open"]["model_load_s"] >= 0
    assert row["open"]["first_search_hits"] > 0 and row["peak_rss_mb"] > 0
    assert row["build"]["stage_seconds"] is None or isinstance(row["build"]["stage_seconds"], dict)
    assert (tmp_path / "agent-70").is_dir()
    assert "| 70 |" in table([row]) and targets([row])["search_after_add"]["points"][0]["n"] == 70


def test_agent_loop_verdicts_on_hand_made_numbers():
    from benchmarks.agent_loop import targets

    def row(n, add, after, warm, open_s):
        p = lambda v: {"p50_ms": v, "p95_ms": v, "mean_ms": v, "n": 1}  # noqa: E731
        return {"n": n, "loop": {"add": p(add), "search_after_add": p(after), "warm_search": p(warm),
                                 "ratio_after_add_to_warm_p50": after / warm},
                "open": {"open_to_first_search_s": open_s, "model_load_s": 2.0}}

    good = [row(1_000, 40.0, 15.0, 10.0, 0.5), row(10_000, 50.0, 14.0, 11.0, 1.0), row(100_000, 60.0, 18.0, 12.0, 5.0)]
    t = targets(good[::-1])  # any order
    assert t["search_after_add"]["met"]
    assert [p["n"] for p in t["search_after_add"]["points"]] == [1_000, 10_000, 100_000]
    assert t["add_growth"]["ratio"] == 1.5 and t["add_growth"]["met"]
    assert t["open_to_first_search"]["measured_s"] == 5.0 and t["open_to_first_search"]["met"]
    assert t["open_to_first_search"]["model_load_s"] == 2.0
    bad = [row(1_000, 40.0, 15.0, 10.0, 0.5), row(100_000, 61.0, 18.1, 12.0, 5.1)]
    t = targets(bad)
    assert not t["search_after_add"]["met"] and [p["met"] for p in t["search_after_add"]["points"]] == [True, False]
    assert not t["add_growth"]["met"] and not t["open_to_first_search"]["met"]
    t = targets([row(1_000, 40.0, 15.0, 10.0, 0.5)])  # one size, no 100k: not measured
    assert t["add_growth"]["met"] is None and t["open_to_first_search"]["met"] is None and t["search_after_add"]["met"]


def test_ingest_parts_on_the_demo_and_the_encoder_alone_baseline(tmp_path):
    from benchmarks.ingest import measure_part, stage_table, table

    rows = [measure_part("locomo", store_dir=tmp_path / "a", data="demo", cfg=_vader(), models=_fast_models),
            measure_part("synthetic", store_dir=tmp_path / "b", data="demo", synthetic_amus=60, cfg=_vader(),
                         models=_fast_models)]
    for r in rows:
        assert r["data"]["kind"] == "demo" and r["spaces"] == 1 and r["amus"] > 0 and r["turns"] > 0
        assert r["amus_per_s"] > 0 and r["turns_per_s"] > 0 and r["ingest_s"] > 0 and r["first_searches"] == 1
        tx = r["texts"]
        assert tx["amu"] == r["amus"] and tx["turn"] == r["turns"]
        assert max(tx["amu_distinct"], tx["turn_distinct"]) <= tx["distinct"]
        assert tx["distinct"] <= tx["amu_distinct"] + tx["turn_distinct"]
        assert r["encoder_alone"]["texts"] == tx["distinct"] and r["encoder_alone"]["batch"] == 64
        assert r["encoder"] == "hashing-test-encoder"
        v = r["verdict"]
        assert v["ratio"] == r["ingest_s"] / r["encoder_alone"]["encode_s"] and v["met"] == (v["ratio"] <= 1.5)
        assert r["stage_seconds"] is None or isinstance(r["stage_seconds"], dict)
    assert rows[0]["turns"] == 35 and rows[1]["amus"] >= 60 and rows[1]["copies"] >= 2
    assert "| synthetic |" in table(rows)
    st = stage_table(rows)
    assert st is None or "| locomo |" in st


def test_ingest_baseline_batches_and_verdict_on_hand_made_numbers():
    import numpy as np

    from benchmarks.agent_loop import uncached
    from benchmarks.ingest import encoder_alone, verdict
    from etamem.models.encoders import CachedEncoder

    class Counting:
        name, dim = "counting", 4

        def __init__(self):
            self.batches = []

        def encode(self, texts):
            self.batches.append(len(texts))
            return np.ones((len(texts), 4), np.float32) / 2

    inner = Counting()
    assert uncached(CachedEncoder(inner)) is inner and uncached(inner) is inner
    out = encoder_alone(inner, [f"t{i}" for i in range(130)])
    assert inner.batches == [64, 64, 2] and out["texts"] == 130 and out["encode_s"] >= 0

    def row(ingest, base, first=0.0):
        return {"ingest_s": ingest, "first_search_s": first, "encoder_alone": {"encode_s": base}}

    assert verdict(row(3.0, 2.0))["met"] and verdict(row(3.0, 2.0))["ratio"] == 1.5
    v = verdict(row(3.1, 2.0, first=1.0))
    assert not v["met"] and v["ratio_with_first_search"] == 4.1 / 2.0
    assert verdict(row(1.0, 0.0))["met"] is None


def test_latency_memory_search_on_the_demo_reuses_a_kept_store(tmp_path):
    from benchmarks.agent_loop import load_sources
    from benchmarks.latency import memory_latency, memory_targets

    sources, info = load_sources("demo")
    kw = dict(sources=sources, data_info=info, store_dir=tmp_path / "m", queries=5, cfg=_vader(), models=_fast_models)
    first, again = memory_latency(50, **kw), memory_latency(50, **kw)
    assert not first["store_reused"] and again["store_reused"] and first["amus"] == again["amus"] >= 50
    for r in (first, again):
        assert r["queries"] == 5 and r["distinct_queries"] == 5
        assert r["search"]["p50_ms"] > 0 and r["query_encoding"]["p50_ms"] >= 0
    assert memory_targets([first])["met"] is None
    # a baseline that changes how the indexes are built gets its own Memory, and its own indexes
    paired = memory_latency(50, **kw, compare={"bm25_stemmer": "none"})["compare"]
    assert paired["bm25_stemmers"] == {"default": "english", "baseline": "none"}
    assert paired["default_cached"]["p50_ms"] > 0 and paired["baseline_cached"]["p50_ms"] > 0
    r = dict(first, n=100_000, search={"p50_ms": 30.0}, query_encoding={"p50_ms": 5.0})
    assert memory_targets([r])["met"] and memory_targets([r])["limit_ms"] == 30.0
    r["search"] = {"p50_ms": 30.5}
    assert not memory_targets([r])["met"]
    # the encoding as the search does it (the question, and without the names when it names a speaker)
    assert first["query_encoding_as_searched"]["p50_ms"] > 0 and 0 <= first["queries_naming_a_speaker"] <= 5
    r["query_encoding_as_searched"] = {"p50_ms": 6.0}
    t = memory_targets([r])
    assert t["limit_as_searched_ms"] == 31.0 and t["met_as_searched"] and not t["met"]


def test_fta_units_density_on_the_dev_file(locomo_dev):
    from benchmarks.fta_units_density import measure, render

    result = measure(str(locomo_dev), "session")
    total = result["total"]
    assert total["turns"] == sum(r["turns"] for r in result["rows"]) > 3000
    assert 0.5 <= total["units_per_turn"] <= 1.0  # issue 17's target (the paper: 0.73)
    assert total["gold_coverage"] >= 0.97  # almost every evidence turn is cited by some unit
    assert "| all |" in render(result)


def test_compare_runs_per_space_on_hand_made_results(tmp_path, capsys):
    import json

    from benchmarks.compare_runs import compare, main

    def write(folder, recalls):
        folder.mkdir()
        with open(folder / "results.jsonl", "w") as f:
            f.write(json.dumps({"type": "build", "space": "a"}) + "\n")
            for (system, space, qid), r in recalls.items():
                f.write(json.dumps({"type": "retrieval", "system": system, "qid": qid, "space": space,
                                    "metrics": {"recall@20": r}}) + "\n")

    write(tmp_path / "b", {("etamem", "a", "a:q0"): 0.5, ("etamem", "a", "a:q1"): 1.0, ("etamem", "c", "c:q0"): 1.0,
                           ("other", "a", "a:q0"): 0.0})
    write(tmp_path / "f", {("etamem", "a", "a:q0"): 1.0, ("etamem", "a", "a:q1"): 1.0, ("etamem", "c", "c:q0"): 0.5,
                           ("etamem", "a", "a:q9"): 0.0})  # a:q9 is in one run only: not counted
    rows = compare(tmp_path / "b", tmp_path / "f", "etamem")
    assert rows == [{"space": "a", "questions": 2, "before": 0.75, "after": 1.0},
                    {"space": "c", "questions": 1, "before": 1.0, "after": 0.5}]
    assert main([str(tmp_path / "b"), str(tmp_path / "f"), "--systems", "etamem"]) == 0
    out = capsys.readouterr().out
    assert "| a | 2 | 0.750 | 1.000 | +25.0 |" in out and "1 of 2 spaces gained" in out
    # overall: (+0.5 + 0 - 0.5) / 3 = 0; one question up, one down; the interval holds the mean
    assert "overall: +0.00 points over 3 questions" in out and "1 up, 1 down" in out
    # another metric by name (LoCoMo-Plus rows: recall_any@k): the rows that have it
    with open(tmp_path / "f" / "results.jsonl", "a") as f:
        f.write(json.dumps({"type": "retrieval", "system": "etamem", "qid": "a:q0", "space": "a",
                            "metrics": {"recall_any@10": 1.0}}) + "\n")
    with open(tmp_path / "b" / "results.jsonl", "a") as f:
        f.write(json.dumps({"type": "retrieval", "system": "etamem", "qid": "a:q0", "space": "a",
                            "metrics": {"recall_any@10": 0.0}}) + "\n")
    assert main([str(tmp_path / "b"), str(tmp_path / "f"), "--systems", "etamem", "--metric", "recall_any",
                 "--k", "10"]) == 0
    out = capsys.readouterr().out
    assert "etamem: recall_any@10 per space" in out and "overall: +100.00 points over 1 questions" in out


def test_paired_interval_against_a_brute_force_bootstrap(tmp_path):
    import json

    import numpy as np
    import pytest

    from benchmarks.compare_runs import paired_interval

    rng = np.random.default_rng(3)
    before, after = rng.integers(0, 2, 40).astype(float), rng.integers(0, 2, 40).astype(float)
    for name, values in (("b", before), ("f", after)):
        (tmp_path / name).mkdir()
        with open(tmp_path / name / "results.jsonl", "w") as f:
            for i, r in enumerate(values):
                f.write(json.dumps({"type": "retrieval", "system": "s", "qid": f"q{i:02d}", "space": "x",
                                    "metrics": {"recall@20": r}}) + "\n")
    got = paired_interval(tmp_path / "b", tmp_path / "f", "s", resamples=400, seed=1)
    diff = after - before  # questions in qid order, as the runs list them
    means = [diff[np.random.default_rng(1).integers(0, 40, (400, 40))[r]].mean() for r in range(400)]
    assert got["difference"] == pytest.approx(diff.mean())
    assert (got["low"], got["high"]) == pytest.approx((np.percentile(means, 2.5), np.percentile(means, 97.5)))
    assert (got["up"], got["down"]) == (int((diff > 0).sum()), int((diff < 0).sum()))


# --- the judge check (benchmarks/judge_check.py) ---------------------------------------------
def test_judge_check_agreement_and_a_stable_sample(tmp_path):
    from benchmarks.judge_check import agreement, judged, main, sample

    out = agreement([True, True, False, False], [True, False, False, False])
    # by hand: p_o = 3/4, p_e = 1/2 * 1/4 + 1/2 * 3/4 = 1/2, kappa = (3/4 - 1/2) / (1 - 1/2)
    assert out["agreement"] == 0.75 and out["kappa"] == pytest.approx(0.5)
    assert (out["judge_correct_hand_wrong"], out["judge_wrong_hand_correct"]) == (1, 0)
    lines = [{"type": "qa", "system": s, "qid": f"c:q{i}", "space": "c", "correct": i % 3 != 0, "gold": "g",
              "prediction": "p"} for s in ("etamem", "hybrid-turns") for i in range(30)]
    lines.append({"type": "qa", "system": "etamem", "qid": "c:q99", "space": "c", "correct": None})  # no verdict
    results = tmp_path / "results.jsonl"
    results.write_text("\n".join(json.dumps(x) for x in lines) + "\n{cut")
    records = judged(results)
    assert len(records) == 60
    first = sample(records, 10, seed=1)
    assert len(set(first)) == 10 and sample(records, 20, seed=1)[:10] == first  # nested
    fewer = {k: v for k, v in records.items() if k != first[-1]}
    assert sample(fewer, 9, seed=1) == first[:-1]  # a record more or less does not reshuffle the rest
    labels = tmp_path / "labels.json"
    labels.write_text(json.dumps({"labels": {k: records[k]["correct"] for k in first}}))
    assert main(["agree", str(results), "--labels", str(labels)])["agreement"] == 1.0


def test_strip_results_keeps_the_numbers_and_the_keys_a_rerun_skips(tmp_path):
    from benchmarks.strip_results import main as strip_main
    from etamem.bench.runner import ResultLog

    recs = [{"type": "build", "construction": "amu", "space": "c", "wall_s": 1.0},
            {"type": "retrieval", "system": "etamem", "qid": "c:q1", "space": "c", "metrics": {"recall@20": 1.0}},
            {"type": "qa", "system": "etamem", "qid": "c:q1", "space": "c", "prediction": "Paris", "gold": "Paris",
             "first_prediction": "Not mentioned.", "correct": True, "f1": 1.0}]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs) + '{"cut')
    (run_dir / "settings.json").write_text('{"dataset": "locomo"}')
    out = tmp_path / "kept" / "results.jsonl"
    assert strip_main([str(run_dir / "results.jsonl"), str(out)]) == 0
    kept = ResultLog(out)
    assert set(kept.records) == set(ResultLog(run_dir / "results.jsonl").records)  # a rerun skips the same items
    qa = kept.records[("qa", "etamem", "c:q1")]
    assert qa["correct"] is True and qa["f1"] == 1.0 and not {"prediction", "gold", "first_prediction"} & set(qa)
    assert "Paris" not in out.read_text() and (out.parent / "settings.json").exists()
