"""Every system of the `fta-paper` group (the FTA-Mem paper's Tables 6-8 and Fig. 3) on a tiny
generated LoCoMo-format file: offline (retrieval metrics) and through the local LLM server (the
QA path end to end: segmentation, extraction, links, rewrite, answer, judge)."""
from __future__ import annotations

import json
import re

import pytest

from etamem.bench import BenchOptions, run
from etamem.bench.systems import GROUPS
from etamem.models.affect import VaderAffectTagger

S1 = [("Caroline", "I went to a support group for trans people yesterday, it was so moving."),
      ("Melanie", "That sounds powerful. How did it make you feel?"),
      ("Caroline", "Accepted and hopeful. I want to study counseling next year."),
      ("Melanie", "You would be a great counselor. I painted a sunrise over the lake last week."),
      ("Caroline", "I love that! Do you paint often?"),
      ("Melanie", "Every weekend, it calms me down after work."),
      ("Caroline", "By the way, my grandma gave me a necklace from Sweden."),
      ("Melanie", "What a lovely gift from her.")]
S2 = [("Melanie", "Guess what, we went camping in the mountains with the kids last weekend."),
      ("Caroline", "Fun! Did the kids like it?"),
      ("Melanie", "They loved roasting marshmallows by the fire."),
      ("Caroline", "I signed up for the counseling course today, classes start in September."),
      ("Melanie", "I am so proud of you!"),
      ("Caroline", "Thanks, the support group really pushed me to do it.")]
QA = [("When did Caroline go to the support group?", "7 May 2023", ["D1:1"], 2),
      ("What did Melanie paint?", "a sunrise over the lake", ["D1:4"], 1),
      ("Where did Melanie go camping?", "the mountains", ["D2:1"], 1),
      ("What course did Caroline sign up for?", "counseling", ["D2:4", "D1:3"], 4)]


def write_tiny_locomo(path):
    conv = {"speaker_a": "Caroline", "speaker_b": "Melanie",
            "session_1_date_time": "1:56 pm on 8 May, 2023", "session_2_date_time": "3:10 pm on 12 June, 2023"}
    for s, turns in ((1, S1), (2, S2)):
        conv[f"session_{s}"] = [{"speaker": spk, "dia_id": f"D{s}:{i}", "text": text}
                                for i, (spk, text) in enumerate(turns, 1)]
    qa = [{"question": q, "answer": a, "evidence": e, "category": c} for q, a, e, c in QA]
    path.write_text(json.dumps([{"sample_id": "conv-tiny", "conversation": conv, "qa": qa}]))


def responder(request):
    """The FTA calls answered in the forms of the paper's prompts (one segment per window, one
    unit per turn, no link updates), the rewrite as the question, answers and verdicts."""
    prompt = request["messages"][-1]["content"]
    turns = re.findall(r"^\[(\d+)\] \([^)]*\) ([^:]+): (.*)$", prompt, re.M)
    if '"segments"' in prompt:
        return json.dumps({"segments": [{"turn_span": [int(turns[0][0]), int(turns[-1][0])],
                                         "boundary_trigger": "topic_change"}]})
    if '"memory_units"' in prompt:
        return json.dumps({"memory_units": [
            {"summary": "x", "time_orientation": "past", "content_type": "event", "event_time": "unknown",
             "content": {"text": f"{name} said: {text}", "participants": [name], "emotion_or_state": "unknown",
                         "intention_or_plan": "unknown"}, "evidence_turn_span": [int(i), int(i)], "status": "complete"}
            for i, name, text in turns]})
    if '"memory_updates"' in prompt:
        return json.dumps({"memory_updates": []})
    if "Search query:" in prompt:
        return re.search(r"^Question: (.*)$", prompt, re.M).group(1)
    if "label a generated answer" in prompt:
        return json.dumps({"reasoning": "scripted", "label": "WRONG"})
    return "Not mentioned in the memories."


@pytest.fixture
def models(minilm, monkeypatch):
    for var in ("ETAMEM_LLM_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    return {"text_encoder": minilm, "affect_tagger": VaderAffectTagger(minilm)}


def test_every_fta_paper_system_runs_offline_and_with_the_llm(tmp_path, models, chat_server):
    data = tmp_path / "locomo_tiny.json"
    write_tiny_locomo(data)
    systems = GROUPS["fta-paper"]
    assert {"fta", "fta-session", "fta-turn-pair", "fta-fixed-window", "fta-no-rewrite", "fta-no-cue",
            "fta-flat-packet", "fta-no-aux", "fta-no-time", "fta-no-links", "fta-no-affect", "fta-fact-only",
            "fta-question-only"} == set(systems)
    # offline: retrieval metrics for every system
    summary = run(BenchOptions("locomo", str(data), out=str(tmp_path / "offline"), systems=["fta-paper"],
                               no_llm=True), **models)
    records = [json.loads(x) for x in (tmp_path / "offline" / "results.jsonl").read_text().splitlines()]
    retrieval = [r for r in records if r["type"] == "retrieval"]
    assert {r["system"] for r in retrieval} == set(systems) and len(retrieval) == len(QA) * len(systems)
    recall = {k: summary["systems"][k]["retrieval"]["metrics"]["recall@10"]["all"] for k in systems}
    assert recall["fta"] > 0.5
    assert recall["fta-question-only"] == 0.0  # no memory: nothing retrieved
    assert recall["fta-no-rewrite"] == recall["fta"]  # without an LLM there is no rewrite to leave out
    builds = {r["construction"] for r in records if r["type"] == "build"}
    assert builds == {"fta", "fta_session", "fta_turn_pair", "fta_fixed", "fta_no_time", "fta_no_affect",
                      "fta_fact_only"}

    # through the local LLM server: every system answers every question from its own packet
    chat_server.responder = responder
    run(BenchOptions("locomo", str(data), out=str(tmp_path / "llm"), systems=["fta-paper"], model="test-model",
                     base_url=chat_server.base_url), **models)
    records = [json.loads(x) for x in (tmp_path / "llm" / "results.jsonl").read_text().splitlines()]
    qa = [r for r in records if r["type"] == "qa"]
    assert {r["system"] for r in qa} == set(systems) and len(qa) == len(QA) * len(systems)
    prompts = [r["messages"][-1]["content"] for r in chat_server.requests]
    assert any("Search query:" in p for p in prompts)  # the rewrite ran (fta), ...
    answers = [p for p in prompts if "# Primary memory units" in p]
    assert len(answers) >= len(QA)  # (an identical packet of another system is a cache hit)
    # ... the question-only baseline answered from an empty packet, fact-only shows no dates
    assert any("# Primary memory units\n(none)" in p and "# Auxiliary memory\n(none)" in p for p in answers)
    assert any("# Primary memory units\nM1. Caroline said:" in p for p in answers)
