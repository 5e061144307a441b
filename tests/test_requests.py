"""Issue 49, item 2: a user's requests to the assistant and the assistant's pleasantries are not
facts. The rule extractor makes no unit of them (the turn stays stored, searchable as a raw
turn), keeps what a request states about the user in a clause of its own, and the Affect view
gets no request; statements still all give a unit; "How do I ...?" is not rewritten to "How do
the user ...?"."""
from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from etamem import Config, Memory
from etamem.extraction.extractors import RuleExtractor
from etamem.extraction.person_rewrite import rewrite_first_person
from etamem.extraction.requests import is_pleasantry, is_request, statement_clauses
from etamem.integrations.recall import answering_context
from etamem.models.affect import VaderAffectTagger
from etamem.models.encoders import CachedEncoder
from etamem.records import Turn

DATA = json.loads((Path(__file__).parent / "data" / "requests.json").read_text(encoding="utf-8"))
TS = datetime(2024, 3, 12, 9, 30, tzinfo=timezone.utc)


def said(text: str, speaker: str = "user") -> list[str]:
    return RuleExtractor().extract(Turn(turn_id="t1", session_id="s1", speaker=speaker, text=text, timestamp=TS))


def test_the_set_is_large_enough():
    assert len(DATA["requests"]) >= 20 and len(DATA["statements"]) >= 20 and len(DATA["pleasantries"]) >= 5


@pytest.mark.parametrize("text", DATA["requests"])
def test_a_request_makes_no_unit(text):
    assert is_request(text)
    assert said(text) == []


@pytest.mark.parametrize("text", DATA["pleasantries"])
def test_a_pleasantry_makes_no_unit(text):
    assert said(text, "assistant") == []


@pytest.mark.parametrize("item", DATA["statements"], ids=[s["text"] for s in DATA["statements"]])
def test_a_statement_still_makes_its_unit(item):
    units = said(item["text"])
    assert any(item["key"].lower() in u.lower() for u in units), units
    assert not any(u.rstrip(".").endswith("?") or "can you" in u.lower() for u in units), units


def test_what_a_request_states_is_kept_without_the_request():
    assert said("I'm vegan, can you suggest some recipes?") == ["The user is vegan."]
    assert said("Since I just moved to Porto, where should I shop for furniture?") == ["The user just moved to Porto."]
    assert statement_clauses("Can you find vegan recipes for my sister's party?") == []  # left to the LLM
    assert is_pleasantry("Happy to help!") and not is_pleasantry("I'm happy with my new job.")


def test_an_assistants_acknowledgement_is_no_fact():
    """"Got it, thanks for letting me know." makes no unit (each of them was a unit, superseding
    its own copies, in the update bench's memories); a statement after "thanks" or "okay" stays."""
    for ack in ("Got it, thanks for letting me know.", "Thanks for telling me, noted.", "Okay, noted!",
                "Good to know, I'll remember that.", "Thanks for the update.", "Got it."):
        assert is_pleasantry(ack), ack
        assert said(ack, "assistant") == [], ack
    for fact in ("Thanks, my sister loved the gift.", "Okay, I moved to Leeds.", "Got it, you live in Leeds now."):
        assert not is_pleasantry(fact), fact


def test_questions_between_named_people_stay():
    assert said("Did you go to the concert in Boston?", "Jon") == ["Did you go to the concert in Boston?"]


def test_the_person_rewrite_keeps_a_question_grammatical():
    assert rewrite_first_person("How do I set up a budget spreadsheet?", "the user") == \
        "How does the user set up a budget spreadsheet?"
    assert rewrite_first_person("Am I late?", "the user") == "Is the user late?"
    assert rewrite_first_person("Don't I have a meeting?", "Maya") == "Doesn't Maya have a meeting?"
    assert said("How do I set up a budget?", "user") == []
    assert RuleExtractor(drop_requests=False).extract(
        Turn(turn_id="t", session_id="s", speaker="user", text="How do I set up a budget spreadsheet?", timestamp=TS)
    ) == ["How does the user set up a budget spreadsheet?"]


def _memory(minilm) -> Memory:
    enc = CachedEncoder(minilm)
    return Memory(None, Config(), text_encoder=enc, affect_tagger=VaderAffectTagger(enc))


def test_requests_stay_turns_but_no_unit_and_not_in_the_affect_view(minilm):
    mem = _memory(minilm)
    messages = []
    for i, text in enumerate(DATA["requests"]):
        messages += [{"role": "user", "content": text}, {"role": "assistant", "content": DATA["pleasantries"][i % 8]}]
    messages += [{"role": "user", "content": s["text"]} for s in DATA["statements"]]
    mem.add(messages, space="ana")
    turns = mem.turns("ana")
    assert len(turns) == len(messages)  # every message stays stored
    asked = {t.turn_id for t in turns if t.text in DATA["requests"] or t.text in DATA["pleasantries"]}
    units = mem.list("ana")
    assert not [u.text for u in units if set(u.source_turn_ids) & asked]
    affect = set(mem.views("ana").affect.row_of)
    assert not [u.text for u in units if u.amu_id in affect and set(u.source_turn_ids) & asked]
    hits = mem.search("shopping list for the week", space="ana", top_k=5)  # the raw turn is still found
    assert any("shopping list" in t.text for h in hits for t in h.source_turns)
    mem.close()


def test_the_message_being_answered_is_left_out(minilm):
    mem = _memory(minilm)
    mem.add([{"role": "user", "content": "I just moved to Lisbon for a new job."}], space="ana")
    question = "Where do I live now? I just moved, remember?"
    mem.add([{"role": "user", "content": question}], space="ana")
    plain = mem.context_packet(question, "ana", top_k=3)
    assert any(question in t.text for h in plain.hits for t in h.source_turns)  # what the adapters got before
    packet = answering_context(mem, question, "ana", top_k=3)
    assert packet.hits and not any(question in t.text for h in packet.hits for t in h.source_turns)
    assert "Lisbon" in packet.text and "Where do I live" not in packet.text
    mem.close()
