"""The benchmark runner end to end on small fixtures in both official formats (a generated
LongMemEval-format file; a slice of the LoCoMo dev file), with answers and judge verdicts
scripted by the local chat-completions server, real MiniLM, BM25, FAISS and SQLite."""
import json
import re

import pytest

from etamem.bench import BenchOptions, run
from etamem.bench.metrics import bleu1, mean, token_f1
from etamem.models.affect import VaderAffectTagger

EXTRACT = re.compile(r"to process \([^\n]*\):\n(.*?)\n\nRules:", re.DOTALL)


# --- fixtures -------------------------------------------------------------------------------
def _session(*pairs, answer_index=None):
    turns = []
    for i, (user, assistant) in enumerate(pairs):
        turn = {"role": "user", "content": user}
        if answer_index == i:
            turn["has_answer"] = True
        turns += [turn, {"role": "assistant", "content": assistant}]
    return turns


SESSIONS = {
    "s_dog": _session(("I adopted a beagle named Biscuit from the shelter.", "Congratulations on adopting Biscuit!"),
                      ("He loves long walks in the park.", "Beagles need lots of exercise."), answer_index=0),
    "s_bike": _session(("I bought a red bicycle for commuting to work.", "A red bicycle sounds great for commuting."),
                       answer_index=0),
    "s_spanish": _session(("I started learning Spanish with an app.", "Learning Spanish is rewarding."),
                          ("My teacher is from Madrid.", "Madrid is a lovely city.")),
    "s_weather": _session(("It rained all day here.", "Rainy days are good for reading."),),
    "s_sold": _session(("I sold my old mountain bike last week.", "Selling an old bike frees up space."),
                       answer_index=0),
}
DATES = {"s_dog": "2023/05/20 (Sat) 02:21", "s_bike": "2023/05/22 (Mon) 10:00", "s_spanish": "2023/05/25 (Thu) 18:30",
         "s_weather": "2023/05/27 (Sat) 09:15", "s_sold": "2023/05/29 (Mon) 20:00"}


def _question(qid, qtype, question, answer, haystack, answer_sessions):
    return {"question_id": qid, "question_type": qtype, "question": question, "answer": answer,
            "question_date": "2023/06/01 (Thu) 12:00", "haystack_session_ids": haystack,
            "haystack_dates": [DATES[s] for s in haystack], "haystack_sessions": [SESSIONS[s] for s in haystack],
            "answer_session_ids": answer_sessions}


def write_longmemeval(path):
    data = [
        _question("q_dog", "single-session-user", "What is the name of the dog I adopted?", "Biscuit",
                  ["s_weather", "s_dog", "s_spanish"], ["s_dog"]),
        _question("q_bikes", "multi-session", "Which bicycles did I buy or sell?", "a red bicycle",
                  ["s_bike", "s_weather", "s_sold", "s_spanish"], ["s_bike", "s_sold"]),
        _question("q_cat_abs", "single-session-user", "What is the name of my cat?",
                  "You did not mention this information.", ["s_weather", "s_spanish", "s_dog"], []),
    ]
    path.write_text(json.dumps(data))
    return data


ANSWERS = {"What is the name of the dog I adopted?": "Biscuit", "Which bicycles did I buy or sell?": "a blue car",
           "What is the name of my cat?": "I don't have that information."}


def responder(request):
    prompt = request["messages"][-1]["content"]
    m = EXTRACT.search(prompt)
    if m:  # extraction: the turn itself as the one fact
        return json.dumps({"facts": [m.group(1).strip()]})
    if "label a generated answer" in prompt:
        gold = re.search(r"Gold answer: (.*)\n", prompt).group(1).strip().lower()
        pred = re.search(r"Generated answer: (.*)\n", prompt).group(1).strip().lower()
        ok = ("don't have" in pred) if "cannot be answered" in prompt else gold.strip(".") in pred
        return json.dumps({"reasoning": "scripted", "label": "CORRECT" if ok else "WRONG"})
    q = re.search(r"Question: (.*)\nAnswer:", prompt)
    if q:
        return ANSWERS.get(q.group(1).strip(), "Not mentioned in the memories.")
    return "A summary."  # node summaries


def _stages(server):
    out = {"extract": 0, "judge": 0, "answer": 0, "other": 0}
    for r in server.requests:
        p = r["messages"][-1]["content"] if r.get("messages") else ""
        key = ("extract" if EXTRACT.search(p) else "judge" if "label a generated answer" in p
               else "answer" if re.search(r"Question: .*\nAnswer:", p) else "other")
        out[key] += 1
    return out


@pytest.fixture
def bench_models(minilm, monkeypatch):
    for var in ("ETAMEM_LLM_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    return {"text_encoder": minilm, "affect_tagger": VaderAffectTagger(minilm)}


def _numbers(summary):
    keys = ("accuracy", "f1", "bleu1", "answer_tokens_per_question", "judge_tokens_per_question")
    return {k: {"retrieval": s["retrieval"]["metrics"], "qa": s["qa"] and {x: s["qa"][x] for x in keys},
                "build_llm": s["cost"]["build_llm"]} for k, s in summary["systems"].items()}


LME_SYSTEMS = ["full-context", "bm25-turns", "hybrid-turns", "flat-amus", "etamem", "no-amus", "shared-text",
               "shared-affect", "event-only", "no-fallback"]


# --- LongMemEval ----------------------------------------------------------------------------
def test_longmemeval_end_to_end_with_llm(tmp_path, chat_server, bench_models):
    chat_server.responder = responder
    data = write_longmemeval(tmp_path / "longmemeval_s.json")
    out = tmp_path / "out"
    opts = BenchOptions("longmemeval", str(tmp_path / "longmemeval_s.json"), out=str(out), systems=LME_SYSTEMS,
                        model="test-model", base_url=chat_server.base_url)
    summary = run(opts, **bench_models)

    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    retrieval = [r for r in records if r["type"] == "retrieval"]
    qa = [r for r in records if r["type"] == "qa"]
    # abstention skipped for retrieval; full context has no ranking; every system answers all 3
    assert {r["qid"] for r in retrieval} == {"q_dog", "q_bikes"}
    assert len(retrieval) == 2 * (len(LME_SYSTEMS) - 1) and len(qa) == 3 * len(LME_SYSTEMS)
    # the dog question names its gold turn's words: BM25 ranks that session and turn first
    dog = next(r for r in retrieval if r["system"] == "bm25-turns" and r["qid"] == "q_dog")["metrics"]
    assert dog["session_recall_all@5"] == 1.0 and dog["session_ndcg_any@5"] == 1.0
    assert dog["turn_recall_any@5"] == 1.0
    for r in retrieval:
        m = r["metrics"]
        for lvl, ks in (("session", (5, 10)), ("turn", (5, 10, 50))):
            for k in ks:
                assert m[f"{lvl}_recall_all@{k}"] <= m[f"{lvl}_recall_any@{k}"]
    # summary = mean of the records, per question type and overall
    for key in LME_SYSTEMS[1:]:
        got = summary["systems"][key]["retrieval"]["metrics"]["session_recall_all@10"]
        rows = [r["metrics"]["session_recall_all@10"] for r in retrieval if r["system"] == key]
        assert got["all"] == pytest.approx(mean(rows))
    # scripted answers: dog right, bikes wrong, abstention right -> 2/3 for every system
    f1 = mean([token_f1("Biscuit", "Biscuit"), token_f1("a blue car", "a red bicycle"),
               token_f1("I don't have that information.", "You did not mention this information.")])
    assert f1 == pytest.approx((1 + 0 + 2 / 11) / 3)
    for key in LME_SYSTEMS:
        s = summary["systems"][key]["qa"]
        assert s["accuracy"]["all"] == pytest.approx(2 / 3)
        assert s["accuracy"]["multi-session"] == 0.0
        assert s["f1"]["all"] == pytest.approx(f1)
        assert s["bleu1"]["single-session-user"] == pytest.approx(
            mean([bleu1("Biscuit", "Biscuit"), bleu1("I don't have that information.",
                                                       "You did not mention this information.")]))
        assert s["answer_tokens_per_question"] > 0 and s["judge_tokens_per_question"] > 0
    # full context: the whole haystack of the question is in its answer prompt
    full = [r["messages"][-1]["content"] for r in chat_server.requests
            if "# Past conversations" in r["messages"][-1]["content"] and "my cat?" in r["messages"][-1]["content"]]
    assert len(full) == 1 and all(t["content"] in full[0] for s in ("s_weather", "s_spanish", "s_dog")
                                  for t in SESSIONS[s])
    # construction: the LLM extracted each distinct turn once, though sessions repeat across
    # questions and three stores (amu, shared_text, shared_affect) use the same extractor
    distinct_turns = sum(len(SESSIONS[s]) for s in {s for q in data for s in q["haystack_session_ids"]})
    assert _stages(chat_server)["extract"] == distinct_turns
    builds = [r for r in records if r["type"] == "build"]
    assert {(b["construction"], b["space"]) for b in builds} == {
        (c, q["question_id"]) for c in ("amu", "turn", "shared_text", "shared_affect") for q in data}
    cost = summary["systems"]["etamem"]["cost"]
    assert cost["build_llm"]["extract"]["calls"] + cost["build_llm"]["extract"]["cached_calls"] <= distinct_turns
    # routing weights per question type; error analysis on gold turns (none for the abstention)
    routing = summary["systems"]["etamem"]["routing"]
    assert set(routing["weights"]) == {"single-session-user", "multi-session", "all"}
    assert sum(routing["weights"]["all"].values()) == pytest.approx(1.0)
    recall = {r["qid"]: r["evidence_recall"] for r in qa if r["system"] == "etamem"}
    assert recall["q_cat_abs"] is None and recall["q_dog"] is not None
    assert summary["systems"]["etamem"]["qa"]["errors"]["questions"] == 2
    # the abstention's "I don't have that information" asks ETAMem again with raw turns (fallback
    # on, none fused at retrieval), never a baseline or w/o fallback
    again = {r["system"] for r in qa if r["answer_fallback"]}
    assert again <= {"etamem", "no-amus", "shared-text", "shared-affect", "event-only"}
    assert all(r["qid"] == "q_cat_abs" for r in qa if r["answer_fallback"])
    # reports and plots
    report = (out / "report.md").read_text()
    assert "ETAMem full" in report and "J multi-session" in report and "shared affect representation" in report
    assert "| ETAMem full | time | " in report and "## Error analysis" in report
    for name in ("summary.json", "categories.png", "recall_vs_k.png", "cost_accuracy.png", "routing_weights.png"):
        assert (out / name).stat().st_size > 0
    assert (out / "categories.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # rerun: everything is in results.jsonl -> no request at all, identical numbers
    n = len(chat_server.requests)
    again = run(opts, **bench_models)
    assert len(chat_server.requests) == n and _numbers(again) == _numbers(summary)
    # without results.jsonl the LLM cache still makes the rerun free, with identical numbers
    (out / "results.jsonl").unlink()
    again = run(opts, **bench_models)
    assert len(chat_server.requests) == n and _numbers(again) == _numbers(summary)


def test_longmemeval_without_llm_skips_full_context_and_rejects_changed_settings(tmp_path, bench_models):
    write_longmemeval(tmp_path / "lme.json")
    opts = BenchOptions("longmemeval", str(tmp_path / "lme.json"), out=str(tmp_path / "out"),
                        systems=["full-context", "bm25-turns"], questions=["q_dog", "q_cat_abs"])
    summary = run(opts, **bench_models)
    assert list(summary["systems"]) == ["bm25-turns"]
    assert summary["systems"]["bm25-turns"]["qa"] is None
    assert summary["systems"]["bm25-turns"]["retrieval"]["questions"] == 1  # abstention skipped
    assert any("No LLM configured" in n for n in summary["notes"])
    ms = [json.loads(x)["ms"] for x in (tmp_path / "out" / "results.jsonl").read_text().splitlines()
          if json.loads(x)["type"] == "retrieval"]
    assert summary["work_s"] == pytest.approx(sum(ms) / 1000)  # bm25-turns needs no store build
    opts.pool = 7
    with pytest.raises(ValueError, match="other settings"):
        run(opts, **bench_models)
    opts.fresh = True
    assert run(opts, **bench_models)["settings"]["pool"] == 7


# --- LoCoMo ----------------------------------------------------------------------------------
def write_locomo_slice(src, path, sessions=2, max_questions=8):
    """conv-26 cut to its first sessions, with the questions whose evidence lies in them
    (one category-5 question kept to check it is excluded); same record layout."""
    sample = json.loads(src.read_text())[0]
    conv = {k: v for k, v in sample["conversation"].items()
            if not k.startswith("session_") or int(re.match(r"session_(\d+)", k).group(1)) <= sessions}
    keep = [f"D{i}:" for i in range(1, sessions + 1)]
    qa = [q for q in sample["qa"] if q.get("evidence") and all(any(e.startswith(p) for p in keep) for e in q["evidence"])]
    cat5 = [q for q in qa if q["category"] == 5][:1]
    qa = [q for q in qa if q["category"] != 5][:max_questions] + cat5
    path.write_text(json.dumps([{**sample, "conversation": conv, "qa": qa}]))
    return qa


def test_locomo_slice_end_to_end(tmp_path, locomo_dev, chat_server, bench_models):
    chat_server.responder = responder  # LoCoMo questions are not in ANSWERS: "Not mentioned ..."
    qa = write_locomo_slice(locomo_dev, tmp_path / "locomo_slice.json")
    scored = [q for q in qa if q["category"] != 5]
    out = tmp_path / "out"
    systems = ["bm25-turns", "hybrid-turns", "flat-amus", "etamem", "mean-routing", "no-bm25", "time-only",
               "no-hierarchy"]
    opts = BenchOptions("locomo", str(tmp_path / "locomo_slice.json"), out=str(out), systems=systems, no_llm=True)
    summary = run(opts, **bench_models)
    assert summary["data"]["questions"] == len(scored)  # category 5 excluded
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    retrieval = [r for r in records if r["type"] == "retrieval"]
    assert len(retrieval) == len(scored) * len(systems)
    for r in retrieval:  # recall@K never falls as K grows
        m = r["metrics"]
        assert 0 <= m["recall@10"] <= m["recall@20"] <= m["recall@25"] <= 1
    for key in systems:
        by_cat = summary["systems"][key]["retrieval"]["metrics"]["recall@20"]
        rows = [r for r in retrieval if r["system"] == key]
        for cat in {r["category"] for r in rows}:
            assert by_cat[cat] == pytest.approx(mean(r["metrics"]["recall@20"] for r in rows if r["category"] == cat))
    # on two sessions (~40 turns) recall@25 of the turn ranking is high
    assert summary["systems"]["hybrid-turns"]["retrieval"]["metrics"]["recall@25"]["all"] >= 0.5
    report = (out / "report.md").read_text()
    assert "R@20 cat 1" in report or "R@20 cat 2" in report
    assert "flat hybrid RRF (turns)" in report and (out / "recall_vs_k.png").exists()

    # QA through the local server on the same slice (new output dir: other settings)
    opts_qa = BenchOptions("locomo", str(tmp_path / "locomo_slice.json"), out=str(tmp_path / "qa"),
                           systems=["full-context", "bm25-turns"], model="answer-model", judge_model="judge-model",
                           base_url=chat_server.base_url, per_conversation=3)
    summary = run(opts_qa, **bench_models)
    judged = [r for r in chat_server.requests if "label a generated answer" in r["messages"][-1]["content"]]
    # both systems answer alike, so the second judge call of each question is a cache hit
    assert len(judged) == 3 and {r["model"] for r in judged} == {"judge-model"}
    answered = [r for r in chat_server.requests if "Question:" in r["messages"][-1]["content"]
                and "label a generated answer" not in r["messages"][-1]["content"]]
    assert len(answered) == 6 and {r["model"] for r in answered} == {"answer-model"}
    for key in ("full-context", "bm25-turns"):
        qa_s = summary["systems"][key]["qa"]
        assert qa_s["questions"] == 3 and qa_s["accuracy"]["all"] == 0.0 and qa_s["f1"]["all"] == 0.0


def test_locomo_slice_fta_systems(tmp_path, locomo_dev, bench_models):
    """FTA-Mem stores (one per segmentation mode) and their query-time ablations through the
    runner, with the paper's Table 6 columns (units, units per turn, build calls and tokens)."""
    qa = write_locomo_slice(locomo_dev, tmp_path / "locomo_slice.json")
    out = tmp_path / "out"
    systems = ["hybrid-turns", "fta", "fta-session", "fta-turn-pair", "fta-no-links", "fta-no-cue", "fta-no-bm25",
               "etamem-over-fta"]
    opts = BenchOptions("locomo", str(tmp_path / "locomo_slice.json"), out=str(out), systems=systems, no_llm=True)
    summary = run(opts, **bench_models)
    n_turns = summary["systems"]["fta"]["cost"]["build_turns"]
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    builds = {r["construction"]: r for r in records if r["type"] == "build"}
    assert set(builds) == {"fta", "fta_session", "fta_turn_pair"}  # ablations at query time share the fta store
    assert builds["fta"]["turns"] == n_turns and 0 < builds["fta"]["amus"] <= 2 * n_turns
    assert builds["fta_turn_pair"]["amus"] >= builds["fta_session"]["amus"]
    for r in (r for r in records if r["type"] == "retrieval"):
        assert 0 <= r["metrics"]["recall@10"] <= r["metrics"]["recall@20"] <= r["metrics"]["recall@25"] <= 1
    fta = summary["systems"]["fta"]
    assert fta["routing"] is None and fta["retrieval"]["metrics"]["recall@25"]["all"] >= 0.5
    assert summary["systems"]["etamem-over-fta"]["routing"] is not None  # ETAMem's routed views over FTA units
    report = (out / "report.md").read_text()
    assert "| units | units/turn |" in report and "FTA-Mem w/o cue (plain embedding)" in report
    assert "FTA-Mem w/o BM25 (the paper's score)" in report
    assert len(qa) > 0


def test_first_sessions_keeps_the_questions_answerable_there():
    from etamem.bench.data import BenchConversation, BenchQuestion, first_sessions, select

    turns = [{"turn_id": f"D{s}:{i}", "session_id": f"s{s}", "speaker": "A", "text": f"turn {s}.{i}"}
             for s in (1, 2, 3) for i in (1, 2)]
    qs = [BenchQuestion("q1", "c", "?", "a", "1", None, gold_turns=["D1:2"]),
          BenchQuestion("q2", "c", "?", "a", "1", None, gold_turns=["D2:1", "D1:1"]),
          BenchQuestion("q3", "c", "?", "a", "1", None, gold_turns=["D1:1", "D3:1"]),  # evidence past the cut
          BenchQuestion("q4", "c", "?", "a", "5", None)]  # no evidence: nothing says it is answerable there
    cut = first_sessions(BenchConversation("c", turns, qs), 2)
    assert [t["turn_id"] for t in cut.turns] == ["D1:1", "D1:2", "D2:1", "D2:2"]
    assert [q.qid for q in cut.questions] == ["q1", "q2"]
    assert [q.qid for q in select([BenchConversation("c", turns, qs)], sessions=1)[0].questions] == ["q1"]
    assert select([BenchConversation("c", turns, qs[2:3])], sessions=1) == []  # left without questions: dropped
    with pytest.raises(ValueError, match="sessions"):
        select([BenchConversation("c", turns, qs)], sessions=-1)


def test_locomo_first_sessions_built_by_the_llm_without_answers(tmp_path, locomo_dev, chat_server, bench_models):
    """--sessions N --no-qa: the LLM extracts every turn of the first session, nothing is
    answered or judged, and the build record counts the extractor's turns and rejected units."""
    chat_server.responder = responder
    out = tmp_path / "out"
    opts = BenchOptions("locomo", str(locomo_dev), out=str(out), systems=["full-context", "etamem"],
                        conversations=["conv-26"], sessions=1, no_qa=True, model="m", base_url=chat_server.base_url,
                        overrides={"extractor": "llm", "llm_summaries": False, "supersession": "rules"})
    summary = run(opts, **bench_models)
    sample = next(s for s in json.loads(locomo_dev.read_text()) if s["sample_id"] == "conv-26")
    n_turns = len(sample["conversation"]["session_1"])
    answerable = [q for q in sample["qa"] if q["category"] != 5 and q.get("evidence")
                  and all(e.startswith("D1:") for e in q["evidence"])]
    assert list(summary["systems"]) == ["etamem"]  # full context needs answers
    assert summary["systems"]["etamem"]["retrieval"]["questions"] == len(answerable) > 0
    stages = _stages(chat_server)
    assert stages["extract"] == n_turns and stages["answer"] == stages["judge"] == 0
    builds = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines() if '"build"' in x]
    assert len(builds) == 1 and builds[0]["turns"] == n_turns
    assert builds[0]["extraction"]["turns"] == n_turns and builds[0]["extraction"]["rejected_units"] == 0
    assert builds[0]["extraction"]["llm_units"] == n_turns  # the scripted model: each turn as its one fact
    assert f"| {n_turns} / 0, 0 |" in (out / "report.md").read_text()
    assert summary["settings"]["sessions"] == 1
    assert any("--no-qa" in n for n in summary["notes"]) and any("first 1 sessions" in n for n in summary["notes"])
    with pytest.raises(ValueError, match="locomo only"):
        run(BenchOptions("prefeval", str(locomo_dev), out=str(tmp_path / "p"), sessions=1), **bench_models)


def test_cli_bench_prints_table_and_wall_time(tmp_path, locomo_dev, monkeypatch, capsys):
    from etamem.cli import main

    monkeypatch.delenv("ETAMEM_LLM_MODEL", raising=False)
    write_locomo_slice(locomo_dev, tmp_path / "slice.json", sessions=1, max_questions=3)
    rc = main(["-q", "bench", "locomo", str(tmp_path / "slice.json"), "--systems", "bm25-turns", "--out",
               str(tmp_path / "out"), "--set", "affect_backend=vader", "--no-plots", "--ks", "5", "20"])
    text = capsys.readouterr().out
    assert rc == 0
    assert "| flat BM25 (turns) |" in text and "R@20 cat" in text and "Wall time" in text
    assert not (tmp_path / "out" / "categories.png").exists()
    assert main(["bench", "locomo", str(tmp_path / "slice.json"), "--systems", "nope"]) == 2


def test_python_m_benchmarks_delegates_to_the_runner():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "benchmarks", "--help"], capture_output=True, text=True, check=True)
    assert "python -m benchmarks" in out.stdout and "no-hierarchy" in out.stdout and "--per-conversation" in out.stdout
