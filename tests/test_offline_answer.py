"""The answer without an LLM (issue 49, item 6): the best stated fact for the question's kind (a
date for when, a place for where, a count for how many), never a request or a pleasantry; the
bundled demo answers its own questions. Token F1 on LoCoMo dev: benchmarks/offline_answers.py."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from importlib import resources

import pytest

from etamem import Memory
from etamem.offline_answer import is_statement, kind_answer, question_kinds
from etamem.records import AMU, Hit

DEMO = json.loads(resources.files("etamem.data").joinpath("demo_conversation.json").read_text(encoding="utf-8"))


def hit(i: int, text: str, session: str = "s1", speaker: str = "user", superseded: bool = False) -> Hit:
    amu = AMU(f"u{i}", text, speaker, datetime(2024, 1, 1 + i, tzinfo=timezone.utc), session, (f"t{i}",))
    return Hit(amu, 1.0 - 0.1 * i, ("event",), (f"t{i}",), superseded_by=("later",) if superseded else ())


@pytest.fixture(autouse=True)
def _no_llm(monkeypatch):
    monkeypatch.delenv("ETAMEM_LLM_MODEL", raising=False)


@pytest.mark.parametrize("question, kinds", [
    ("When does Jonas start his new job, and where?", ["when", "where"]),
    ("Where did Caroline move from 4 years ago?", ["where"]),
    ("How many children does Melanie have?", ["count"]),
    ("Who did Maya go hiking with?", ["who"]),
    ("Why did Maya's knee hurt?", ["why"]),
    ("What is the name of Maya's cat?", ["fact"]),
])
def test_question_kinds(question, kinds):
    assert question_kinds(question) == kinds


def test_requests_questions_and_pleasantries_are_not_answers():
    for text in ("Can you help the user plan meals for the week?", "Sure! Any dietary restrictions?",
                 "Thanks!", "How do I set up a budget spreadsheet?", "Long time no see."):
        assert not is_statement(text), text
    hits = [hit(0, "Sure! Any dietary restrictions?"), hit(1, "Can you help the user plan meals for the week?"),
            hit(2, "The user is vegan.")]
    assert kind_answer("What does the user eat?", hits) == "The user is vegan."


def test_each_kind_gets_the_statement_that_holds_it():
    hits = [hit(0, "Maya loves her running club."), hit(1, "Maya has run three marathons so far."),
            hit(2, "Maya moved to Lisbon in 2021.")]
    assert kind_answer("How many marathons has Maya run?", hits) == "Maya has run three marathons so far."
    assert kind_answer("Where does Maya live?", hits) == "Maya moved to Lisbon in 2021."
    assert kind_answer("When did Maya move?", hits) == "Maya moved to Lisbon in 2021 (3 January 2024)."


def test_the_current_version_of_a_fact_answers():
    hits = [hit(0, "The user works at Acme.", superseded=True), hit(1, "The user works at Globex.")]
    assert kind_answer("Where does the user work?", hits) == "The user works at Globex."


def test_the_demo_answers_its_own_questions_offline(tmp_path):
    """Real encoder and default config: each answer holds a unit of the question's evidence turns,
    and the two-part question gets both parts (1 June, the Marine Research Institute in Bremen)."""
    mem = Memory(tmp_path / "demo")
    mem.add(DEMO["turns"], space=DEMO["space"])
    for q in DEMO["questions"]:
        ans = mem.answer(q["question"], DEMO["space"], now=q["now"])
        assert not ans.llm_used
        evidence = [u.text.rstrip(".") for u in mem.list(DEMO["space"]) if set(u.source_turn_ids) & set(q["evidence"])]
        assert any(e in ans.text for e in evidence), (q["question"], ans.text)
        assert "?" not in ans.text, (q["question"], ans.text)
    job = mem.answer("When does Jonas start his new job, and where?", DEMO["space"], now="2024-04-21").text
    assert "1 June" in job and "Marine Research Institute in Bremen" in job, job
    mem.close()
