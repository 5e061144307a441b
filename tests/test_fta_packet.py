"""FTA-Mem memory packet, query rewrite and answer calls (etamem/fta/packet.py)."""
from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone

import pytest

from etamem.answering import says_missing
from etamem.fta.packet import SECTIONS, answer_from_packet, clean_rewrite, render_packet, rewrite_query
from etamem.fta.units import AffectAnchor, EvidenceSpan, FactAnchor, FTAUnit, TimeAnchor
from etamem.models.llm import LLMClient
from etamem.models.prompt_files import load_prompt, placeholders
from etamem.records import Turn
from llm_server import Reply

T0 = datetime(2023, 5, 8, 18, 0, tzinfo=timezone.utc)


def unit(text, uid, *, said=T0, status="final", completeness="complete", label="neutral", emotions=(),
         event=None, expression="", orientation="past", intention="") -> FTAUnit:
    start, end = event if event is not None else (None, None)
    scores = (0.0, 0.2, 0.8) if label == "positive" else (0.0, 1.0, 0.0)
    return FTAUnit(
        fact=FactAnchor(text, "event", ("Caroline",), text),
        time=TimeAnchor(said, orientation, start, end, expression),
        affect=AffectAnchor(label, scores, abs(scores[2] - scores[0]), tuple(emotions), intention),
        evidence=(EvidenceSpan("s1", ("s1:0",), said, said),), speaker="Caroline", completeness=completeness,
        status=status, unit_id=uid)


OLD = unit("Caroline works at a bakery.", "fta-old", said=T0 - timedelta(days=30), status="superseded",
           orientation="present")
NEW = unit("Caroline went to an LGBTQ support group last week; it made her feel proud.", "fta-new",
           label="positive", emotions=("proud",), expression="last week",
           event=(datetime(2023, 5, 1, tzinfo=timezone.utc), datetime(2023, 5, 8, tzinfo=timezone.utc)))
PLAN = unit("Caroline plans to apply to counselling school.", "fta-plan", completeness="pending",
            orientation="future", intention="apply to counselling school")
JOB = unit("Caroline now works at a youth centre.", "fta-job", said=T0 - timedelta(days=2), orientation="present")
TURNS = [Turn("s1:0", "s1", "caroline", "I went to a LGBTQ support group last week!", T0),
         Turn("s1:1", "s1", "Melanie", "That's amazing, Caroline!", T0 + timedelta(minutes=1))]


# --- packet ------------------------------------------------------------------------------------
def test_packet_has_four_sections_with_dates_anchors_status_and_links():
    text = render_packet([OLD, NEW, PLAN], [(JOB, "superseded_by", "fta-old")], [("s1", TURNS)],
                         "Caroline: transgender woman; wants to become a counsellor.")
    heads = [text.index(h) for h in SECTIONS]
    assert heads == sorted(heads)
    primary, neighbours, spans, aux = (text[a:b] for a, b in zip(heads, heads[1:] + [len(text)]))
    lines = primary.splitlines()[1:]
    assert lines[0].startswith("M1. [8 April 2023] Caroline works at a bakery. | time: present")
    assert "status: SUPERSEDED by a newer unit" in lines[0]
    assert lines[1] == ('M2. [8 May 2023] Caroline went to an LGBTQ support group last week; it made her feel proud. '
                        '| time: past; "last week" = 1 May 2023 to 7 May 2023 | affect: positive (proud) '
                        '| status: current')
    assert "intends to apply to counselling school" in lines[2]
    assert "current (pending: outcome not yet known)" in lines[2]
    assert neighbours.splitlines()[1].startswith("N1. [6 May 2023] Caroline now works at a youth centre.")
    assert neighbours.rstrip().endswith("| link: newer version: replaces M1")
    assert spans.strip().splitlines()[1:] == ["Session s1 (8 May 2023):",
                                      "  [8 May 2023] Caroline: I went to a LGBTQ support group last week!",
                                      "  [8 May 2023] Melanie: That's amazing, Caroline!"]
    assert "Caroline: transgender woman; wants to become a counsellor." in aux
    # every section says so when it is empty
    empty = render_packet([NEW], [], [], "")
    assert empty.count("(none)") == 3 and all(h in empty for h in SECTIONS)


def test_packet_relations_read_from_the_primary_side():
    text = render_packet([NEW], [(OLD, "supersedes", "fta-new"), (JOB, "same_episode_as", "fta-missing"),
                                 (PLAN, "contradicted_by", "fta-new")], [], "")
    assert "| link: older version, replaced by M1" in text
    assert "| link: same episode as fta-missing" in text   # a primary not in the packet: its id
    assert "| link: contradicts M1" in text


def test_flat_packet_is_one_plain_list_of_units_with_dates():
    text = render_packet([OLD, NEW], [(JOB, "superseded_by", "fta-old"), (NEW, "same_episode_as", "fta-old")],
                         [("s1", TURNS)], "profile text", flat=True)
    assert text.splitlines() == ["- [8 April 2023] Caroline works at a bakery.",
                                 "- [8 May 2023] Caroline went to an LGBTQ support group last week; it made her "
                                 "feel proud.",
                                 "- [6 May 2023] Caroline now works at a youth centre."]
    assert render_packet([], [], [], "", flat=True) == "(none)"


# --- rewrite --------------------------------------------------------------------------------
def test_rewrite_prompt_and_answer_prompts_have_their_placeholders():
    assert placeholders(load_prompt("fta_rewrite")) == {"question", "date"}
    for name, missing in (("fta_answer", "Not mentioned in the memories."),
                          ("fta_answer_longmemeval", "I don't have that information.")):
        template = load_prompt(name)
        assert placeholders(template) == {"question", "packet", "question_date"}
        assert missing in template and says_missing(missing)


def test_clean_rewrite_strips_labels_quotes_and_fences():
    assert clean_rewrite('Search query: "Caroline support group date"\nbecause ...') == "Caroline support group date"
    assert clean_rewrite("```\nCaroline counselling plans\n```") == "Caroline counselling plans"
    assert clean_rewrite("  \n ``` \n") == ""
    assert clean_rewrite("x" * 2000) == ""


def test_rewrite_query_makes_one_call_and_falls_back_to_the_question(chat_server, caplog):
    q = "When did Caroline go to the support group?"
    chat_server.script("Query: Caroline LGBTQ support group visit date event",
                       "   ",            # empty reply
                       "``` ```",       # nothing usable
                       Reply(status=401))
    llm = LLMClient("test-model", base_url=chat_server.base_url, max_retries=0)
    assert rewrite_query(llm, q, now=T0) == "Caroline LGBTQ support group visit date event"
    prompt = chat_server.requests[0]["messages"][-1]["content"]
    assert q in prompt and "8 May 2023" in prompt and chat_server.requests[0]["temperature"] == 0
    with caplog.at_level(logging.WARNING, logger="etamem.fta.packet"):
        assert rewrite_query(llm, q + " (2)") == q + " (2)"
        assert rewrite_query(llm, q + " (3)") == q + " (3)"
        assert rewrite_query(llm, q + " (4)") == q + " (4)"  # LLMUnavailable: logged, not raised
    assert sum("rewrite" in r.getMessage() for r in caplog.records) == 3
    assert llm.usage()["fta_rewrite"].calls == 3 and len(chat_server.requests) == 4  # HTTP 401 counts no call
    assert rewrite_query(None, q) == q and len(chat_server.requests) == 4


# --- answer ---------------------------------------------------------------------------------
def test_answer_from_packet_is_one_answer_call_at_temperature_zero(chat_server):
    packet = render_packet([NEW], [], [("s1", TURNS)], "")
    chat_server.script("  1-7 May 2023 \n", "Not mentioned in the memories.", "I don't have that information.")
    llm = LLMClient("test-model", base_url=chat_server.base_url, max_retries=0, temperature=0.7)
    q = "When did Caroline go to the LGBTQ support group?"
    assert answer_from_packet(llm, q, packet, question_date=T0) == "1-7 May 2023"
    req = chat_server.requests[0]
    prompt = req["messages"][-1]["content"]
    assert req["temperature"] == 0 and packet in prompt and "Question date: 8 May 2023" in prompt
    assert prompt.rstrip().endswith(f"Question: {q}\nAnswer:")
    assert says_missing(answer_from_packet(llm, "What is Caroline's cat called?", packet, question_date=None))
    assert says_missing(answer_from_packet(llm, "What is my cat called?", packet, question_date=T0,
                                           style="longmemeval"))
    assert "Question date: unknown" in chat_server.requests[1]["messages"][-1]["content"]
    assert "Current date (the question date): 8 May 2023" in chat_server.requests[2]["messages"][-1]["content"]
    assert llm.usage()["answer"].calls == 3 and "fta_rewrite" not in llm.usage()
    with pytest.raises(ValueError, match="style"):
        answer_from_packet(llm, q, packet, question_date=T0, style="essay")
