"""FTA units: rule and LLM extraction, carry-over and fusion (etamem/fta/units.py)."""
from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone

import pytest

from etamem.extraction.stems import topic_stems
from etamem.fta.rules import content_type, orientation, rewrite_second_person
from etamem.fta.segmentation import segment_session
from etamem.fta.units import (
    FTAUnit,
    LLMUnitExtractor,
    RuleUnitExtractor,
    construct_units,
    content_id,
    fuse,
    parse_unit_reply,
    retrieval_text,
)
from etamem.models.llm import LLMClient, LLMUnavailable
from etamem.models.prompt_files import load_prompt, placeholders
from etamem.records import Turn
from llm_server import Reply

T0 = datetime(2023, 5, 8, 18, 0, tzinfo=timezone.utc)  # a Monday

NO_REJECTIONS = {"rejected_units": 0, "rejected_copied_example": 0, "rejected_invented_entity": 0,
                 "rejected_swapped_speaker": 0, "rejected_other_turn": 0}


@pytest.fixture(scope="module")
def vader():
    from conftest import HashingEncoder
    from etamem.models.affect import VaderAffectTagger

    return VaderAffectTagger(HashingEncoder())


def dialogue(lines, session="s1", start=T0, step=timedelta(minutes=1)) -> list[Turn]:
    return [Turn(f"{session}:{i}", session, sp, text, start + step * i) for i, (sp, text) in enumerate(lines)]


def one_segment(turns):
    return segment_session(turns, mode="session").segments[0]


def by_text(units, needle):
    found = [u for u in units if needle in u.text]
    assert len(found) == 1, (needle, [u.text for u in units])
    return found[0]


# --- rule extraction -----------------------------------------------------------------------
def test_rule_units_rewrite_speakers_pair_questions_with_answers_and_drop_filler(vader):
    turns = dialogue([
        ("Maya", "Hey Leo! How are you?"),
        ("Leo", "Good, thanks!"),
        ("Maya", "I finally tried the sourdough recipe you sent me."),
        ("Leo", "Nice! How long did you let the dough rise?"),
        ("Maya", "Only about four hours, my kitchen is cold."),
        ("Leo", "Haha, nice."),
    ])
    cands = RuleUnitExtractor(vader).extract(one_segment(turns), turns, [])
    units = [c.unit for c in cands]
    assert all(c.completes is None for c in cands)
    assert [u.text for u in units] == [
        "Maya finally tried the sourdough recipe Leo sent Maya.",
        "Leo asked: How long did Maya let the dough rise? Maya: Only about four hours, Maya's kitchen is cold.",
    ]
    qa = units[1]
    assert qa.turn_ids == ("s1:3", "s1:4") and qa.speaker == "Maya" and set(qa.participants) == {"Maya", "Leo"}
    assert units[0].participants == ("Maya", "Leo")  # "you" names Leo
    assert all(u.status == "partial" and u.unit_id is None and u.completeness == "complete" for u in units)
    assert units[0].evidence[0].start_time == turns[2].timestamp


def test_rule_units_are_one_per_turn_with_plans_apart_and_short_named_facts_kept(vader):
    turns = dialogue([
        ("Maya", "I adopted a grey cat last week. Her name is Pixel. She sleeps on my desk all day. Cute!"),
        ("Leo", "I moved to a flat near the river in March. I will paint the kitchen next weekend."),
    ])
    units = [c.unit for c in RuleUnitExtractor(vader).extract(one_segment(turns), turns, [])]
    assert len(units) == 3  # two turns; Leo's plan waits apart for its outcome
    cat = by_text(units, "grey cat")
    assert "Her name is Pixel." in cat.text and "sleeps on Maya's desk" in cat.text and "Cute" not in cat.text
    assert cat.turn_ids == ("s1:0",) and cat.completeness == "complete"
    plan = by_text(units, "paint the kitchen")
    assert "river" not in plan.text and plan.completeness == "pending" and plan.content_type == "homework_or_plan"
    assert by_text(units, "river").turn_ids == ("s1:1",)


def test_rule_units_resolve_times_orientation_content_type_and_affect(vader):
    turns = dialogue([
        ("Lena", "We went camping at the lake last weekend and it was wonderful."),
        ("Paul", "Lucky you."),
        ("Lena", "I'm going to run a half marathon next month."),
        ("Paul", "You should buy proper running shoes first."),
        ("Lena", "I feel anxious and exhausted these days."),
        ("Paul", "My sister married her boyfriend in 2019."),
    ])
    units = [c.unit for c in RuleUnitExtractor(vader).extract(one_segment(turns), turns, [])]
    camp = by_text(units, "camping")
    assert camp.text == "Lena said: We went camping at the lake last weekend and it was wonderful."
    assert (camp.time.orientation, camp.content_type, camp.affect.label) == ("past", "event", "positive")
    assert camp.time.expression == "last weekend"
    assert (camp.time.event_start, camp.time.event_end) == (datetime(2023, 5, 6, tzinfo=timezone.utc),
                                                            datetime(2023, 5, 8, tzinfo=timezone.utc))
    plan = by_text(units, "half marathon")
    assert (plan.time.orientation, plan.content_type, plan.completeness, plan.awaiting) == \
        ("future", "homework_or_plan", "pending", "outcome")
    assert plan.time.event_start == datetime(2023, 6, 1, tzinfo=timezone.utc)
    assert plan.affect.intention == "run a half marathon next month"
    advice = by_text(units, "running shoes")
    assert advice.content_type == "support_interaction" and advice.speaker == "Paul"
    assert advice.text == "Paul said: Lena should buy proper running shoes first."  # attributed: Paul's advice
    assert advice.participants == ("Paul", "Lena")
    state = by_text(units, "anxious")
    assert (state.content_type, state.time.orientation, state.affect.label) == ("current_state", "present", "negative")
    assert state.affect.emotions == ("anxious", "exhausted") and state.affect.intensity > 0.3
    wedding = by_text(units, "married")
    assert wedding.content_type == "relationship_event" and wedding.time.event_start.year == 2019
    assert sum(s for s in camp.affect.scores) == pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize("text,expected", [
    ("I will call her tomorrow.", "future"), ("I called her yesterday.", "past"), ("I live in Paris.", "present"),
    ("I moved to Paris two years ago and I'll stay.", "mixed"), ("Interesting.", "unknown"),
    ("I'm excited about the trip.", "present"),
])
def test_orientation_rules(text, expected):
    from etamem.fta.rules import resolve_event_time

    assert orientation(text, resolve_event_time(text, T0), T0) == expected


@pytest.mark.parametrize("text,orient,expected", [
    ("I want to end it all.", "present", "risk_signal"),
    ("Have you tried a warm bath before bed?", "unknown", "support_interaction"),
    ("I'm going to repaint the kitchen.", "future", "homework_or_plan"),
    ("My mom was in the hospital.", "past", "relationship_event"),
    ("I'm so stressed at work.", "present", "current_state"),
    ("I think jazz is the best music.", "present", "belief_candidate"),
    ("I ran a 10k on Sunday.", "past", "event"),
    ("The museum opens at nine.", "present", "general_fact"),
])
def test_content_type_rules(text, orient, expected):
    assert content_type(text, orient) == expected


def test_second_person_rewrite_and_topic_stems():
    assert rewrite_second_person("Are you still going to Lisbon with your sister?", "Leo") == \
        "Is Leo still going to Lisbon with Leo's sister?"
    assert rewrite_second_person("Have you tried it? You're right, you'll love it.", "Ann") == \
        "Has Ann tried it? Ann is right, Ann will love it."
    assert topic_stems("We will go camping next month") == topic_stems("We went camping last weekend") == {"camp"}
    # a speaker's name is no topic, possessive or not (a plan is not completed by any sentence naming her)
    names = frozenset({"melanie"})
    assert topic_stems("Melanie's kids love Melanie\u2019s saxophone teacher", names) == {"kid", "lov", "saxophon",
                                                                                          "teacher"}


# --- carry-over and fusion -------------------------------------------------------------------
PLAN_DIALOGUE = [
    ("Lena", "We are planning to go camping at the lake next month."),     # segment 1: a plan (pending)
    ("Paul", "Fun! Are you bringing the kids?"),
    ("Lena", "Yes, both of them, it is their first time in a tent."),
    ("Paul", "Pack extra blankets, nights by the lake get cold."),
    ("Lena", "My doctor told me my cholesterol is high and I'm worried."),  # segment 2: another topic
    ("Paul", "Oh no, what did she suggest?"),
    ("Lena", "Cutting down on red meat and walking thirty minutes a day."),
    ("Paul", "That sounds doable."),
    ("Lena", "Oh, and we went camping at the lake last weekend after all, it was great!"),  # segment 3: outcome
    ("Paul", "So you moved the trip earlier? How did the kids like the tent?"),
    ("Lena", "They loved it and slept like logs."),
]


def test_a_plan_is_carried_and_fused_when_completed_two_segments_later(vader):
    turns = dialogue(PLAN_DIALOGUE)
    segments = segment_session(turns, mode="fixed", window=4).segments
    assert [(s.start, s.end) for s in segments] == [(0, 3), (4, 7), (8, 10)]
    seen_carried = []

    class Spy(RuleUnitExtractor):
        def extract(self, segment, seg_turns, carried):
            seen_carried.append([u.text for u in carried])
            return super().extract(segment, seg_turns, carried)

    result = construct_units(turns, segments, Spy(vader))
    plan_text = "Lena said: We are planning to go camping at the lake next month."
    assert seen_carried == [[], [plan_text], [plan_text]]  # carried through segment 2 into segment 3
    assert result.fused == 1 and result.finalised_incomplete == 0
    camping = [u for u in result.units if "camping" in u.text]
    assert len(camping) == 1, "the completion is fused, not stored on its own"
    fused = camping[0]
    assert fused.text.startswith(plan_text) and "went camping at the lake last weekend" in fused.text
    assert [span.turn_ids for span in fused.evidence] == [("s1:0",), ("s1:8",)]  # both evidence spans
    assert fused.turn_ids == ("s1:0", "s1:8")
    assert (fused.status, fused.completeness, fused.awaiting) == ("final", "complete", "")
    assert fused.unit_id is not None and fused.unit_id == content_id(fused)
    assert fused.time.dialogue_time == turns[0].timestamp  # first mention
    assert fused.time.orientation == "mixed" and fused.time.expression == "next month; last weekend"
    assert fused.time.event_start == datetime(2023, 5, 6, tzinfo=timezone.utc)  # the outcome's time
    assert fused.content_type == "event" and fused.affect.label == "positive"
    assert fused.affect.intention.startswith("go camping")
    assert result.units[-1] is fused  # finalised when completed, after segment 3's other units
    assert all(u.status == "final" and u.unit_id for u in result.units)
    assert len({u.unit_id for u in result.units}) == len(result.units)
    again = construct_units(turns, segments, RuleUnitExtractor(vader))
    assert again.units == result.units  # deterministic


def test_incomplete_units_are_finalised_at_session_end_never_dropped(vader):
    s1 = dialogue([("Ann", "I'm going to visit my aunt in Oslo next week."), ("Bob", "Sounds lovely."),
                   ("Ann", "The weather has been terrible lately."), ("Bob", "Did you ever fix the old bike?")])
    s2 = dialogue([("Ann", "I bought a new lamp."), ("Bob", "Nice.")], session="s2", start=T0 + timedelta(days=3))
    segments = segment_session(s1, mode="fixed", window=2, keep_qa=False).segments + \
        segment_session(s2, mode="session").segments
    result = construct_units(s1 + s2, segments, RuleUnitExtractor(vader))
    plan = by_text(result.units, "Oslo")
    question = by_text(result.units, "bike")
    assert (plan.status, plan.completeness, plan.awaiting) == ("final", "pending", "outcome")
    assert (question.status, question.completeness, question.awaiting) == ("final", "partial", "answer")
    assert question.text == "Bob asked: Did Ann ever fix the old bike?"
    assert result.finalised_incomplete == 2 and result.fused == 0
    # the previous session's waiting units are finalised before the next session's units
    assert [u.session_id for u in result.units] == ["s1", "s1", "s1", "s2"]


def test_a_question_at_a_segment_end_is_answered_in_the_next_segment(vader):
    turns = dialogue([("Ann", "I went to Rome in April."), ("Bob", "Cool, did you see the Colosseum?"),
                      ("Ann", "Yes, it was huge and a bit crowded."), ("Bob", "I'd love to go someday.")])
    segments = segment_session(turns, mode="turn-pair").segments
    assert [(s.start, s.end) for s in segments] == [(0, 1), (2, 3)]
    result = construct_units(turns, segments, RuleUnitExtractor(vader))
    qa = by_text(result.units, "Colosseum")
    assert qa.text == "Bob asked: Did Ann see the Colosseum? Ann said: It was huge and a bit crowded."
    assert qa.turn_ids == ("s1:1", "s1:2") and qa.completeness == "complete" and result.fused == 1


def test_carry_limit_and_an_unfinished_session(vader):
    lines = [("Ann", f"I will {verb} next week.") for verb in
             ("paint the fence", "call the bank", "wash the car", "visit grandma")]
    turns = dialogue(lines)
    segments = segment_session(turns, mode="fixed", window=1 + 1).segments  # [0,1], [2,3]
    capped = construct_units(turns, segments, RuleUnitExtractor(vader), max_carried=1)
    assert len(capped.units) == 4 and capped.finalised_incomplete == 4
    running = construct_units(turns, segments, RuleUnitExtractor(vader), complete=False)
    assert running.units == [] and len(running.carried) == 4 and all(u.unit_id is None for u in running.carried)
    more = dialogue([("Ann", "I will paint the fence next week."),
                     ("Ann", "Ann painted the fence today, it looks great.")])
    more = [replace(t, turn_id=f"s1:{10 + i}") for i, t in enumerate(more)]
    cont = construct_units(more, segment_session(more[1:], mode="session").segments, RuleUnitExtractor(vader),
                           carried=running.carried)
    fence = by_text(cont.units, "fence")
    assert fence.completeness == "complete" and fence.turn_ids == ("s1:0", "s1:11") and cont.fused == 1


def test_fuse_is_pure_and_keeps_both_spans(vader):
    turns = dialogue(PLAN_DIALOGUE)
    ext = RuleUnitExtractor(vader)
    plan = ext.extract(one_segment(turns[:1]), turns[:1], [])[0].unit
    done = ext.extract(one_segment(turns[8:9]), turns[8:9], [])[0].unit
    merged = fuse(plan, done)
    assert plan.completeness == "pending" and merged.completeness == "complete"
    assert merged.evidence == plan.evidence + done.evidence and merged.status == plan.status
    assert fuse(merged, done).evidence == merged.evidence  # the same span is not added twice


def test_retrieval_text_carries_the_time_and_affect_anchors(vader):
    turns = dialogue([("Lena", "We went camping at the lake last weekend and it was wonderful.")])
    unit = RuleUnitExtractor(vader).extract(one_segment(turns), turns, [])[0].unit
    text = retrieval_text(unit)
    assert unit.text in text and "past; last weekend (6 May 2023)" in text and "said 8 May 2023" in text
    assert "feeling: positive" in text


# --- LLM extraction -------------------------------------------------------------------------
def units_reply(*units):
    return json.dumps({"memory_units": list(units)})


def test_extract_prompt_renders_every_placeholder():
    assert placeholders(load_prompt("fta_extract")) == {"date", "segment", "carried", "first", "last", "content_types"}


def test_parse_unit_reply_validates_and_normalises():
    seg = segment_session(dialogue(PLAN_DIALOGUE), mode="fixed", window=4).segments[1]  # turns 4-7
    items = parse_unit_reply({"memory_units": [
        {"text": "  Lena's  cholesterol is high. ", "content_type": "Current State", "time_orientation": "present",
         "evidence_turn_span": [3, 5], "status": "complete", "participants": "Lena, Paul", "completes": "P2"},
        {"content": {"text": "Paul finds it doable", "participants": ["Paul"]}, "content_type": "nonsense",
         "status": "whatever", "completes": "P9"},
    ]}, seg, n_carried=2)
    assert items[0]["text"] == "Lena's cholesterol is high." and items[0]["content_type"] == "current_state"
    assert items[0]["span"] == (4, 5) and items[0]["participants"] == ("Lena", "Paul") and items[0]["completes"] == 1
    assert items[1]["content_type"] == "general_fact" and items[1]["status"] == "unknown"
    assert items[1]["span"] == (4, 7) and items[1]["completes"] is None
    assert parse_unit_reply({"memory_units": []}, seg, 0) == []
    for bad in ({"units": []}, {"memory_units": [{"text": ""}]}, {"memory_units": ["text"]},
                {"memory_units": [{"text": "x", "evidence_turn_span": [0, 2]}]},
                {"memory_units": [{"text": "x", "evidence_turn_span": "4-5"}]}):
        with pytest.raises(ValueError):
            parse_unit_reply(bad, seg, 0)


def test_llm_extraction_carries_partial_units_in_the_prompt_and_fuses_completions(chat_server, vader):
    turns = dialogue(PLAN_DIALOGUE)
    segments = segment_session(turns, mode="fixed", window=4).segments
    chat_server.script(
        units_reply({"text": "Lena plans to go camping at the lake with her two kids next month.",
                     "content_type": "homework_or_plan", "time_orientation": "future", "event_time": "next month",
                     "participants": ["Lena"], "emotion_or_state": "excited", "intention_or_plan": "go camping",
                     "evidence_turn_span": [0, 2], "status": "pending", "completes": None}),
        units_reply({"text": "Lena's doctor told her that her cholesterol is high; she should eat less red meat "
                             "and walk thirty minutes a day.", "content_type": "current_state",
                     "time_orientation": "present", "event_time": "unknown", "participants": ["Lena"],
                     "emotion_or_state": "worried", "evidence_turn_span": [4, 6], "status": "complete"}),
        units_reply({"text": "Lena went camping at the lake last weekend; the kids loved the tent.",
                     "content_type": "event", "time_orientation": "past", "event_time": "2023-05-06",
                     "participants": ["Lena"], "emotion_or_state": "happy", "evidence_turn_span": [8, 10],
                     "status": "complete", "completes": "P1"}),
    )
    llm = LLMClient("test-model", base_url=chat_server.base_url, max_retries=0)
    ext = LLMUnitExtractor(llm, vader)
    result = construct_units(turns, segments, ext)
    assert llm.usage()["fta_extract"].calls == 3 == len(segments)  # one call per segment
    assert ext.stats == {"segments": 3, "llm_segments": 3, "fallback_segments": 0, "llm_units": 3, "fallback_units": 0,
                         **NO_REJECTIONS}
    prompts = [r["messages"][-1]["content"] for r in chat_server.requests]
    assert "(none)" in prompts[0]
    for p in prompts[1:]:
        assert "P1: Lena plans to go camping at the lake with her two kids next month. (status pending" in p
    assert "[8] (id s1:8;" in prompts[2] and "[7]" not in prompts[2]
    assert result.fused == 1 and len(result.units) == 2
    camp = by_text(result.units, "camping")
    assert camp.turn_ids == ("s1:0", "s1:1", "s1:2", "s1:8", "s1:9", "s1:10")
    assert camp.completeness == "complete" and camp.status == "final" and camp.affect.emotions == ("excited", "happy")
    assert camp.time.event_start == datetime(2023, 5, 6, tzinfo=timezone.utc)
    health = by_text(result.units, "cholesterol")
    assert health.affect.emotions == ("worried",) and health.time.orientation == "present"


def test_llm_extraction_falls_back_to_rules_on_an_unusable_reply(chat_server, vader):
    turns = dialogue(PLAN_DIALOGUE)
    segments = segment_session(turns, mode="fixed", window=4).segments
    chat_server.script(
        json.dumps({"facts": ["not the expected form"]}),                    # JSON, wrong shape: no repair round
        units_reply({"text": "x", "evidence_turn_span": [0, 1]}),           # span outside segment 4-7
        units_reply(),                                                      # valid: nothing to remember
    )
    llm = LLMClient("test-model", base_url=chat_server.base_url, max_retries=0)
    ext = LLMUnitExtractor(llm, vader)
    result = construct_units(turns, segments, ext)
    assert llm.usage()["fta_extract"].calls == 3
    stats = ext.stats
    assert (stats["segments"], stats["llm_segments"], stats["fallback_segments"]) == (3, 1, 2)
    assert stats["fallback_units"] > 0 and stats["llm_units"] == 0
    # the rule fallback of segment 1 produced the plan, carried (pending) to the end of the session
    plan = by_text(result.units, "planning to go camping")
    assert plan.completeness == "pending" and result.finalised_incomplete == 1


def test_llm_extraction_without_a_reply_raises(chat_server, vader):
    chat_server.script(Reply(status=401))
    turns = dialogue(PLAN_DIALOGUE[:2])
    ext = LLMUnitExtractor(LLMClient("m", base_url=chat_server.base_url, max_retries=0), vader)
    with pytest.raises(LLMUnavailable):
        construct_units(turns, segment_session(turns, mode="session").segments, ext)


def test_units_know_their_spans_and_status_vocabulary(vader):
    turns = dialogue(PLAN_DIALOGUE[:1])
    unit = RuleUnitExtractor(vader).extract(one_segment(turns), turns, [])[0].unit
    assert isinstance(unit, FTAUnit) and unit.carried and unit.session_id == "s1"
    assert not replace(unit, completeness="complete").carried
