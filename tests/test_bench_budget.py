"""Evidence within the reader's budget (etamem/bench/budget.py): the per-gold-turn token counts
against a brute-force cut of every context prefix, the shares and paired differences of the
summary, and the runner's records on a slice of the LoCoMo dev file."""
import json
import random

import pytest

from etamem.bench import BenchOptions, budget, run
from etamem.models.affect import VaderAffectTagger
from etamem.models.tokens import estimate_tokens


def _ranking(rng: random.Random, n_units: int, n_turns: int) -> tuple[list[tuple[str, ...]], list[str]]:
    sources = [tuple(f"t{rng.randrange(n_turns)}" for _ in range(rng.randint(1, 3))) for _ in range(n_units)]
    texts = [" ".join("w" * rng.randint(1, 6) for _ in range(rng.randint(1, 40))) for _ in range(n_units)]
    return sources, texts


def test_evidence_tokens_match_a_brute_force_cut_of_every_prefix():
    rng = random.Random(7)
    for _ in range(200):
        sources, texts = _ranking(rng, rng.randint(0, 25), 30)
        gold = [f"t{rng.randrange(34)}" for _ in range(rng.randint(1, 4))]  # some never ranked
        header = "x" * rng.randint(0, 20)

        def render(n, texts=texts, header=header):
            return "\n".join([header] + texts[:n])
        calls = []

        def count(text):
            calls.append(text)
            return len(text.split())
        got = budget.evidence_tokens(sources, gold, render, count)
        assert len(calls) <= len(set(gold))  # one count per distinct prefix, never per unit
        for b in (0, 5, 20, 60, 150, 400):
            fits = max(n for n in range(len(texts) + 1) if n == 0 or count(render(n)) <= b)
            if count(render(0)) > b:
                fits = -1  # not even the empty context fits: nothing reaches the reader
            inside = {t for s in sources[:max(fits, 0)] for t in s}
            for turn, tokens in zip(gold, got):
                assert (tokens is not None and tokens <= b) == (turn in inside), (turn, tokens, b)


def test_within_and_first_tokens():
    assert budget.within([100, None, 900], 500) == (1.0, 0.0, 1 / 3)
    assert budget.within([100, 300], 300) == (1.0, 1.0, 1.0)
    assert budget.within([None], 2000) == (0.0, 0.0, 0.0)
    assert budget.first_tokens([None, 700, 300]) == 300 and budget.first_tokens([None]) is None


def _records(system: str, counts: dict[str, list]) -> dict:
    return {("retrieval", system, q): {"qid": q, "space": q.split(":")[0], "evidence_tokens": c,
                                       "evidence_tokenizer": "words", "metrics": {}} for q, c in counts.items()}


def test_summary_shares_intervals_and_paired_difference():
    base = _records("hybrid-turns", {"a:1": [400], "a:2": [1500], "b:1": [None], "b:2": [2500, 100]})
    mine = _records("etamem", {"a:1": [200], "a:2": [800], "b:1": [1900], "b:2": [2500, 600]})
    s = budget.summarise({**base, **mine}, ["etamem", "hybrid-turns", "absent"])
    assert set(s["systems"]) == {"etamem", "hybrid-turns"}
    e, h = s["systems"]["etamem"], s["systems"]["hybrid-turns"]
    assert h["budgets"]["500"]["any"] == pytest.approx(0.5) and e["budgets"]["1000"]["any"] == pytest.approx(0.75)
    assert e["budgets"]["2000"]["all"] == pytest.approx(0.75) and e["budgets"]["2000"]["recall"] == pytest.approx(0.875)
    d = e["budgets"]["1000"]["vs_baseline"]
    assert d["questions"] == 4 and d["difference"] == pytest.approx(0.75 - 0.5) and d["up"] == 1 and d["down"] == 0
    lo, hi = e["budgets"]["1000"]["any_interval"]
    assert lo <= 0.75 <= hi
    assert "vs_baseline" not in h["budgets"]["1000"]
    assert e["median_first_tokens"] == 700 and h["median_first_tokens"] == 400
    assert h["reached_in_pool"] == pytest.approx(0.75)
    rows = budget.table(s, {"etamem": "ETAMem full"})
    assert rows[2].startswith("| ETAMem full | 25.0 [") and "+25.0 [" in rows[2]
    assert rows[3].startswith("| hybrid-turns |") and "| – |" in rows[3]
    assert budget.summarise(base, ["etamem"]) is None


def test_runner_records_evidence_tokens_and_reports_them(tmp_path, locomo_dev, minilm, monkeypatch):
    from test_bench_runner import write_locomo_slice

    for var in ("ETAMEM_LLM_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    bench_models = {"text_encoder": minilm, "affect_tagger": VaderAffectTagger(minilm)}
    write_locomo_slice(locomo_dev, tmp_path / "slice.json")
    out = tmp_path / "out"
    systems = ["hybrid-turns", "etamem", "fta"]
    opts = BenchOptions("locomo", str(tmp_path / "slice.json"), out=str(out), systems=systems, no_llm=True,
                        per_conversation=6, budget_tokenizer="estimate", plots=False)
    summary = run(opts, **bench_models)
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    retrieval = [r for r in records if r["type"] == "retrieval"]
    assert retrieval and all(r["evidence_tokenizer"].startswith("estimate") for r in retrieval)
    from etamem.bench.data import load

    conv = load("locomo", str(tmp_path / "slice.json"))[0]
    gold = {q.qid: q.gold_turns for q in conv.questions}
    turns = {t["turn_id"]: t for t in conv.turns}
    for r in retrieval:
        assert len(r["evidence_tokens"]) == len(gold[r["qid"]])
        shares = [budget.within(r["evidence_tokens"], b)[0] for b in budget.BUDGETS]
        assert shares == sorted(shares)  # a larger budget never loses evidence
        for turn, tokens in zip(gold[r["qid"]], r["evidence_tokens"]):  # the context holds the turn's words
            assert tokens is None or tokens >= estimate_tokens(turns[turn]["text"])
    fta = [r for r in retrieval if r["system"] == "fta" and r["evidence_tokens"][0] is not None]
    assert fta and min(r["evidence_tokens"][0] for r in fta) > 0
    b = summary["budget"]
    assert set(b["systems"]) == set(systems) and b["baseline"] == "hybrid-turns"
    assert "## Evidence within the reader's budget" in (out / "report.md").read_text()
    # a rerun with the same tokenizer ranks nothing again
    before = (out / "results.jsonl").read_text()
    run(opts, **bench_models)
    assert (out / "results.jsonl").read_text() == before
