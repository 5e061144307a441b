"""Presets (etamem/presets.py): the papers' methods, the project's additions as named switches, the
preset a store was built with, `--preset` on the command lines and the bench, and the paired
statistics the bench reports steps with (checked against brute-force references)."""
from __future__ import annotations

import argparse
import itertools
import logging
from pathlib import Path

import numpy as np
import pytest

from etamem import Config, Memory
from etamem.bench.metrics import clustered_bootstrap_interval, paired_p_value
from etamem.bench.paired import ladder, paired
from etamem.bench.systems import GROUPS, LADDER, resolve_systems, sweep_specs
from etamem.cli.common import config_from_args
from etamem.presets import ADDITIONS, CHOICES, FTA_PAPER, additions_off, differences, preset_values

DOCS = Path(__file__).resolve().parents[1] / "docs" / "presets.md"


def test_default_preset_is_the_config_defaults_and_paper_turns_every_addition_off():
    assert Config.preset("default") == Config()
    paper = Config.preset("paper")
    assert paper.preset_name == "paper"
    for addition in ADDITIONS:
        for field, value in addition.paper:
            assert getattr(paper, field) == value, (addition.name, field)
            assert getattr(Config(), field) != value, f"{addition.name}: {field} is already the paper's by default"
    # the seed's Fig. 4 values
    assert (paper.bm25_weight, paper.top_k, paper.beam_width, paper.route_budget) == (0.1, 20, 10, 20)
    assert Config.preset("paper", top_k=10).top_k == 10


def test_fta_paper_preset_sets_k_per_dataset():
    locomo = Config.preset("paper", method="fta", dataset="locomo")
    other = Config.preset("paper", method="fta")
    assert locomo.method == other.method == "fta"
    assert (locomo.top_k, other.top_k) == (25, 10)
    for field, value in FTA_PAPER.items():
        assert getattr(locomo, field) == value
    assert Config.preset("default", method="fta").method == "fta"


@pytest.mark.parametrize("call", [lambda: Config.preset("papers"), lambda: Config.preset("paper", method="x"),
                                  lambda: Config(preset_name="mine").validate(),
                                  lambda: additions_off(["no-such-switch"])])
def test_bad_preset_names_are_refused(call):
    with pytest.raises(ValueError):
        call()


def test_the_store_records_its_preset_and_a_read_under_another_warns(tmp_path, caplog):
    path = tmp_path / "store"
    with Memory(path, Config.preset("paper")) as mem:
        assert mem.store.get_meta("preset") == "paper"
    with caplog.at_level(logging.WARNING, logger="etamem"):
        Memory(path, Config.preset("paper")).close()
    assert not [r for r in caplog.records if "preset" in r.getMessage()]
    with caplog.at_level(logging.WARNING, logger="etamem"):
        Memory(path, Config()).close()
    warned = [r.getMessage() for r in caplog.records if "preset" in r.getMessage()]
    assert warned and "'paper'" in warned[0] and "'default'" in warned[0]


def test_cli_preset_is_the_base_of_config_and_set_applies_on_top():
    args = argparse.Namespace(config=None, set=["top_k=7"], preset="paper")
    cfg = config_from_args(args)
    assert (cfg.preset_name, cfg.beam_width, cfg.top_k) == ("paper", 10, 7)
    fta = config_from_args(argparse.Namespace(config=None, set=["method=\"fta\""], preset="paper"))
    assert fta.method == "fta" and fta.fta_bm25_weight == 0.0
    assert config_from_args(argparse.Namespace(config=None, set=None, preset=None)) == Config()


def test_every_cli_command_with_config_takes_preset():
    from etamem.cli.commands import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    with_set = [name for name, p in sub.choices.items() if any("--set" in a.option_strings for a in p._actions)]
    assert len(with_set) >= 8
    for name in with_set:
        assert any("--preset" in a.option_strings for a in sub.choices[name]._actions), name


def test_differences_list_what_moved_from_the_preset():
    base = preset_values("paper")
    cfg = Config.preset("paper", top_k=7).to_dict()
    assert differences(cfg, {**Config().to_dict(), **base}) == {"top_k": (20, 7)}


def test_ladder_goes_from_the_papers_query_time_settings_to_the_runs_own():
    assert GROUPS["paper-to-default"] == [s.key for s in LADDER]
    assert dict(LADDER[0].overrides) == additions_off(query_time_only=True)
    assert LADDER[-1].overrides == ()
    steps = [a for a in ADDITIONS if a.query_time]
    assert len(LADDER) == len(steps) + 1
    assert "ladder-0" not in GROUPS["all"]  # not run unless asked
    assert resolve_systems(["paper-to-default"])[1].label == f"+ {steps[0].name}"


def test_sweep_specs_parse_aliases_and_refuse_bad_input():
    specs = sweep_specs(["beta=0.0,0.3", "B=5"])
    assert [s.overrides for s in specs] == [(("bm25_weight", 0.0),), (("bm25_weight", 0.3),), (("beam_width", 5),)]
    assert {s.kind for s in sweep_specs(["lambda=0.5"], method="fta")} == {"fta"}
    for bad in (["beta"], ["nope=1"], ["beta=2.0"], ["K="]):
        with pytest.raises(ValueError):
            sweep_specs(bad)


def test_docs_page_lists_every_addition_and_choice():
    text = DOCS.read_text(encoding="utf-8")
    for addition in ADDITIONS:
        assert f"`{addition.name}`" in text, addition.name
    for setting, *_ in CHOICES:
        assert setting in text, setting


# --- paired statistics, against brute-force references -------------------------------------

def test_clustered_bootstrap_matches_a_loop_over_resampled_conversations():
    rng = np.random.default_rng(5)
    values = rng.random(30)
    clusters = [f"c{i % 4}" for i in range(30)]
    got = clustered_bootstrap_interval(values, clusters, resamples=300, seed=2)
    labels = sorted(set(clusters))
    draws = np.random.default_rng(2).integers(0, len(labels), (300, len(labels)))
    means = []
    for row in draws:
        picked = [v for j in row for v, c in zip(values, clusters) if c == labels[j]]
        means.append(np.mean(picked))
    assert got == pytest.approx((np.percentile(means, 2.5), np.percentile(means, 97.5)))
    assert clustered_bootstrap_interval([], []) is None
    with pytest.raises(ValueError):
        clustered_bootstrap_interval([1.0], [])


def test_sign_flip_p_value_approaches_the_exact_enumeration():
    d = np.array([0.5, 0.2, -0.1, 0.4, 0.3, 0.0, 0.25, -0.05])
    clusters = ["a", "a", "b", "c", "d", "e", "f", "f"]
    sums = np.array([0.7, -0.1, 0.4, 0.3, 0.0, 0.2])  # per cluster, in label order
    exact = np.mean([abs(np.dot(s, sums)) >= abs(sums.sum()) - 1e-12
                     for s in itertools.product((-1, 1), repeat=6)])
    assert paired_p_value(d, clusters, resamples=40_000) == pytest.approx(exact, abs=0.01)
    exact_q = np.mean([abs(np.dot(s, d)) >= abs(d.sum()) - 1e-12 for s in itertools.product((-1, 1), repeat=8)])
    assert paired_p_value(d, resamples=40_000) == pytest.approx(exact_q, abs=0.01)
    assert paired_p_value([]) is None


def test_ladder_rows_pair_each_step_with_the_one_before():
    records = {}
    for system, vals in (("ladder-0", [0.0, 1.0, 0.5, 0.0]), ("ladder-1", [1.0, 1.0, 0.5, 1.0])):
        for i, v in enumerate(vals):
            records[("retrieval", system, f"q{i}")] = {"qid": f"q{i}", "space": f"s{i % 2}",
                                                       "metrics": {"recall@20": v}}
    rows = ladder(records, ["ladder-0", "ladder-1"], {"ladder-0": "paper", "ladder-1": "+ x"}, "recall@20")
    assert [r["label"] for r in rows] == ["paper", "+ x"] and "step" not in rows[0]
    step = rows[1]["step"]
    assert step["difference"] == pytest.approx(0.5) and (step["up"], step["down"]) == (2, 0)
    assert step["conversations"] == 2 and step["p_value"] == pytest.approx(0.5, abs=0.03)  # 2 of 4 flips reach it
    assert paired({}, {})["questions"] == 0


def test_question_kinds_of_the_routing_figure():
    from etamem.bench.question_kinds import question_kind
    from etamem.bench.report import routing_kind_table

    assert question_kind("How did Caroline feel after the race?") == "emotion"
    assert question_kind("What does Melanie think about adoption?") == "opinion"
    assert question_kind("When did Caroline go to the support group?") == "experience"
    weights = {"emotion": {"event": 0.4, "affect": 0.6}, "all": {"event": 0.5, "affect": 0.5}}
    summary = {"systems": {"etamem": {"label": "ETAMem", "routing_by_kind": {"weights": weights}},
                           "bm25": {"label": "BM25", "routing_by_kind": None}},
               "data": {"question_kinds": {"emotion": 1, "experience": 0, "opinion": 0}}}
    text = "\n".join(routing_kind_table(summary))
    assert "| ETAMem | affect | 0.600 | – | – | 0.500 |" in text and "a proxy" in text and "BM25" not in text


def test_answer_figures_carry_their_interval():
    from etamem.bench.report import summarise
    from etamem.bench.systems import BY_KEY

    class Q:
        def __init__(self, i):
            self.qid, self.question, self.category, self.skipped_evidence, self.gold_turns = f"q{i}", "x?", "1", 0, ["t"]

    class C:
        space, questions = "s", [Q(i) for i in range(4)]

    records = {("qa", "etamem", f"q{i}"): {"qid": f"q{i}", "category": "1", "correct": bool(i % 2), "f1": i / 4,
                                           "bleu1": 0.5, "prompt_tokens": 1, "completion_tokens": 1, "judge_tokens": 1,
                                           "answer_ms": 1.0, "evidence_recall": 1.0} for i in range(4)}
    summary = summarise("locomo", [C()], [BY_KEY["etamem"]], records, {"file": "f", "ks": [20]}, wall_s=0, notes=[])
    from etamem.bench.report import qa_table

    row = next(line for line in qa_table(summary) if line.startswith("| ETAMem"))
    assert "0.500 [" in row and "0.375 [" in row  # accuracy and F1 over all, each with its interval
