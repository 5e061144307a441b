"""Answers with a token budget (`--context-tokens`) and the stratified question sample
(`--sample`): every system's answer prompt within the budget, with the reader's tokenizer, and
a sample whose every prefix holds each category in proportion; LoCoMo slice, scripted local
chat-completions server, real MiniLM, BM25, FAISS and SQLite."""
import json
import re
from collections import Counter

import pytest

from etamem.bench import BenchOptions, run
from etamem.bench.items import BenchConversation, BenchQuestion
from etamem.bench.sample import order, stratified
from etamem.models.affect import VaderAffectTagger
from etamem.models.tokens import estimate_tokens
from test_bench_runner import responder, write_locomo_slice


def _questions(sizes: dict[str, int]) -> list[BenchQuestion]:
    return [BenchQuestion(f"c{i % 3}:{cat}{i}", f"c{i % 3}", f"question {cat}{i}?", "a", cat, None)
            for cat, n in sizes.items() for i in range(n)]


def test_sample_order_is_stratified_seeded_and_nested():
    qs = _questions({"1": 60, "2": 30, "3": 9, "4": 1})
    ranked = order(qs, seed=3)
    assert sorted(q.qid for q in ranked) == sorted(q.qid for q in qs)  # every question once
    assert [q.qid for q in order(list(reversed(qs)), seed=3)] == [q.qid for q in ranked]  # input order is irrelevant
    assert [q.qid for q in order(qs, seed=4)] != [q.qid for q in ranked]
    for n in range(1, len(qs) + 1):  # each prefix: every category within one question of proportional
        counts = Counter(q.category for q in ranked[:n])
        for cat, size in {"1": 60, "2": 30, "3": 9, "4": 1}.items():
            assert abs(counts[cat] - n * size / len(qs)) <= 1, (n, cat)
    # the first 10 are not the first 10 listed (what --per-conversation takes: category 1 only)
    assert {q.category for q in ranked[:10]} >= {"1", "2", "3"}


def test_stratified_subset_keeps_conversation_order_and_nests():
    qs = _questions({"1": 12, "2": 6})
    convs = [BenchConversation(s, [], [q for q in qs if q.space == s]) for s in ("c0", "c1", "c2")]
    small, big = stratified(convs, 6, seed=1), stratified(convs, 12, seed=1)
    ids = lambda cs: [q.qid for c in cs for q in c.questions]  # noqa: E731
    assert len(ids(small)) == 6 and len(ids(big)) == 12 and set(ids(small)) <= set(ids(big))
    for c in big:  # kept in the conversation's own order
        listed = [q.qid for q in next(x for x in convs if x.space == c.space).questions]
        assert [q.qid for q in c.questions] == [x for x in listed if x in {q.qid for q in c.questions}]
    with pytest.raises(ValueError, match="at least 1"):
        stratified(convs, 0)


@pytest.fixture
def models(minilm, monkeypatch):
    for var in ("ETAMEM_LLM_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    return {"text_encoder": minilm, "affect_tagger": VaderAffectTagger(minilm)}


BUDGET = 1000


def test_every_system_answers_within_the_token_budget(tmp_path, locomo_dev, chat_server, models):
    chat_server.responder = responder
    write_locomo_slice(locomo_dev, tmp_path / "slice.json", max_questions=8)
    systems = ["hybrid-turns", "etamem", "fta", "fta-question-only"]
    opts = BenchOptions("locomo", str(tmp_path / "slice.json"), out=str(tmp_path / "out"), systems=systems,
                        model="reader", base_url=chat_server.base_url, sample=4, context_tokens=BUDGET,
                        budget_tokenizer="estimate", overrides={"extractor": "rule", "llm_summaries": False})
    summary = run(opts, **models)
    assert summary["data"]["questions"] == 4
    records = [json.loads(line) for line in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    qa = [r for r in records if r["type"] == "qa"]
    assert len(qa) == 4 * len(systems)
    for r in qa:
        assert r["context_budget"] == BUDGET and r["context_prompt_tokens"] <= BUDGET
        if r["system"] in ("hybrid-turns", "etamem"):
            assert r["context_units"] >= 1  # the budget holds some evidence (an FTA-Mem hit's spans may not fit)
    answers = [p for r in chat_server.requests if re.search(r"Question: .*\nAnswer:\s*$", p := r["messages"][-1]["content"])]
    assert len(answers) >= 8 and max(estimate_tokens(p) for p in answers) <= BUDGET  # what the reader got
    # the flat baseline's 20 turns do not fit: the budget, not --qa-turns, cut the context
    assert all(r["context_units"] < 20 for r in qa if r["system"] == "hybrid-turns")
    report = (tmp_path / "out" / "report.md").read_text()
    assert "## Answers against flat hybrid, paired" in report and "at most 1000 tokens" in report
    assert set(summary["qa_paired"]) == {"etamem", "fta", "fta-question-only"}
    assert summary["qa_paired"]["etamem"]["judge"]["questions"] == 4
    # another budget is another run: the results already there are not mixed with it
    with pytest.raises(ValueError, match="context_tokens"):
        run(BenchOptions("locomo", str(tmp_path / "slice.json"), out=str(tmp_path / "out"), systems=systems,
                         model="reader", base_url=chat_server.base_url, sample=4, context_tokens=BUDGET + 100,
                         budget_tokenizer="estimate", overrides={"extractor": "rule", "llm_summaries": False}),
            **models)


def test_a_token_budget_needs_the_readers_tokenizer(tmp_path, locomo_dev, models):
    write_locomo_slice(locomo_dev, tmp_path / "slice.json")
    with pytest.raises(ValueError, match="tokenizer"):
        run(BenchOptions("locomo", str(tmp_path / "slice.json"), out=str(tmp_path / "out"), no_llm=True,
                         systems=["hybrid-turns"], context_tokens=1500), **models)


def test_a_budget_below_the_prompts_own_text_is_refused(tmp_path, locomo_dev, chat_server, models):
    chat_server.responder = responder
    write_locomo_slice(locomo_dev, tmp_path / "slice.json")
    with pytest.raises(ValueError, match="do not hold the answer prompt"):
        run(BenchOptions("locomo", str(tmp_path / "slice.json"), out=str(tmp_path / "out"), systems=["hybrid-turns"],
                         model="reader", base_url=chat_server.base_url, sample=1, context_tokens=200,
                         budget_tokenizer="estimate", overrides={"extractor": "rule"}), **models)


class _Bench:
    """What qa_context asks of the workbench, recorded (orchestration only)."""

    def time_summaries(self, spec, space, hits):
        return "\n".join(f"[week] summary of {h.name}" for h in hits)

    def with_raw_turns(self, spec, conv, q, hits):
        return list(hits)


def test_the_packet_diagnosis_reads_etamems_ranking_as_its_source_turns_only():
    from datetime import datetime, timedelta, timezone
    from types import SimpleNamespace

    from etamem.bench.qa_context import qa_context
    from etamem.bench.run_stores import Ranking
    from etamem.bench.systems import BY_KEY, Unit
    from etamem.config import Config
    from etamem.records import Turn

    t0 = datetime(2023, 5, 8, 13, tzinfo=timezone.utc)
    turns = [Turn(f"D1:{i}", "s1", ("Ana", "Ben")[i % 2], f"turn number {i} about the lake", t0 + timedelta(minutes=i),
                  "conv") for i in range(6)]
    turn_map = {t.turn_id: t for t in turns}
    units = [Unit(("D1:4",), "Ana's boat is blue", t0, ("event",)), Unit(("D1:1", "D1:4"), "Ben rowed", t0, ("affect",)),
             Unit(("D1:2",), "Ana swam", t0, ("time",))]
    hits = [SimpleNamespace(name=f"h{i}", source_turn_ids=u.sources, amu=SimpleNamespace(text=u.text, timestamp=t0),
                            views=u.views) for i, u in zip((4, 1, 2), units)]
    ranking = Ranking(units, hits=hits)
    q = BenchQuestion("conv:q1", "conv", "What colour is Ana's boat?", "blue", "1", "8 May 2023, 2:00 pm")
    conv = BenchConversation("conv", turns, [q])
    ask = dict(turns=turns, turn_map=turn_map, config=Config(), qa_turns=20)
    full = qa_context(_Bench(), "locomo", BY_KEY["etamem-packet"], conv, q, ranking, **ask)
    flat = qa_context(_Bench(), "locomo", BY_KEY["etamem-as-turns"], conv, q, ranking, **ask)
    assert "Ana's boat is blue" in full.prompt and "summary of h4" in full.prompt
    # the same ranking, read as its source turns in rank order, each once: no unit line, no Time context
    assert [u.sources for u in flat.units] == [("D1:4",), ("D1:1",), ("D1:2",)]
    assert all(u.views == ("turn",) for u in flat.units)
    assert "Ana's boat is blue" not in flat.prompt and "summary of" not in flat.prompt
    assert "Ana: turn number 4 about the lake" in flat.prompt
    # under a budget the same turns are cut in rank order, and the Time context stays out
    budget = estimate_tokens(flat.prompt) - 5
    cut = qa_context(_Bench(), "locomo", BY_KEY["etamem-as-turns"], conv, q, ranking, **ask, budget=budget,
                     count=estimate_tokens)
    assert [u.sources for u in cut.units] == [("D1:4",), ("D1:1",)] and cut.tokens <= budget
    assert "summary of" not in cut.prompt and "summary of" not in cut.retry()
    # ETAMem under the default `answer_context="turns"` gives the reader what the diagnosis gives
    # it; under "packet", what etamem-packet gives it
    assert qa_context(_Bench(), "locomo", BY_KEY["etamem"], conv, q, ranking, **ask).prompt == flat.prompt
    packet = qa_context(_Bench(), "locomo", BY_KEY["etamem"], conv, q, ranking,
                        **{**ask, "config": Config(answer_context="packet")})
    assert packet.prompt == full.prompt


def test_evidence_is_counted_on_what_the_reader_gets():
    """ETAMem's evidence tokens are counted on its source turns under `answer_context` "turns"
    (the default) and on its memory lines and source turns under "packet", tagged apart so a record
    counted one way is counted again the other way."""
    from datetime import datetime, timezone
    from types import SimpleNamespace

    from etamem.bench.budget import CONTEXT, context_tag, context_text
    from etamem.bench.run_stores import Ranking
    from etamem.bench.systems import BY_KEY, Unit
    from etamem.config import Config
    from etamem.records import Turn

    t0 = datetime(2023, 5, 8, 13, tzinfo=timezone.utc)
    turns = {f"D1:{i}": Turn(f"D1:{i}", "s1", "Ana", f"turn number {i} about the lake", t0, "conv") for i in range(3)}
    ranking = Ranking([Unit(("D1:2",), "Ana rowed across the lake", t0, ("event",)),
                       Unit(("D1:0", "D1:2"), "Ana swam", t0, ("affect",))])
    wb = SimpleNamespace(config=Config())
    turned = context_text(wb, BY_KEY["etamem"], "conv", ranking, 2, turns)
    assert "Ana rowed" not in turned and "(turn) Ana: turn number 2 about the lake" in turned
    assert turned.count("turn number 2") == 1 and "turn number 0" in turned
    packet = context_text(wb, BY_KEY["etamem-packet"], "conv", ranking, 2, turns)
    assert "Ana rowed across the lake" in packet and "turn number 2" in packet
    assert context_tag(BY_KEY["etamem"], wb.config) != context_tag(BY_KEY["etamem-packet"], wb.config) == CONTEXT
    assert context_tag(BY_KEY["hybrid-turns"], wb.config) == CONTEXT
