"""Grounded units: what a model writes enters memory only when its source turn supports it
(`etamem/extraction/grounding.py`, hooked into `LLMExtractor` and FTA-Mem's `LLMUnitExtractor`).

The failures these tests replay were seen with small local models (Qwen2.5-Coder 0.5B / 1.5B):
the prompt's example sentence with the speaker put in, written for turns about something else;
invented facts ("Maya shared a photo of her cat on Saturday"); Maya's half-marathon given to
Jonas. No model runs here: a fake `llm` or the scripted test server replies."""
from __future__ import annotations

import json
import logging
from datetime import datetime, timedelta, timezone
from importlib import resources

import pytest

from etamem.extraction import grounding
from etamem.extraction.extractors import LLMExtractor, RuleExtractor, turn_source, turn_text
from etamem.extraction.grounding import LEGACY_EXAMPLES, Source, check_unit, prompt_examples
from etamem.models.prompt_files import render_prompt
from etamem.records import Turn

WHEN = datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc)  # a Monday
OLD_EXAMPLE = "Jonas feels relieved because the adoption interview went well"  # the 0.5B's copy, nine turns


def turn(text, speaker="Maya", turn_id="D1:1", when=WHEN, **extra) -> Turn:
    return Turn(turn_id=turn_id, session_id="D1", speaker=speaker, text=text, timestamp=when, extra=extra)


def source(text, speaker="Maya", context=(), when=WHEN, **extra) -> Source:
    examples = prompt_examples(render_prompt("extract_locomo", speaker=speaker, text="", date="", context=""))
    ctx = [turn(t, s, f"D1:0{k}", when) for k, (s, t) in enumerate(context)]
    return turn_source(turn(text, speaker, when=when, **extra), ctx, examples, participants=["Maya", "Jonas"])


class FakeLLM:
    """Replies `answer` to every call (applying `validate` like the client does)."""

    def __init__(self, answer):
        self.answer, self.calls = answer, 0

    def complete_json(self, messages, stage="other", validate=None, **kwargs):
        self.calls += 1
        return validate(self.answer) if validate else self.answer


# --- the check ------------------------------------------------------------------------------
REJECTED = [  # (unit, turn text, speaker, reason)
    (OLD_EXAMPLE, "I just got back from the gym, my legs are sore.", "Jonas", "copied_example"),
    ("Jonas feels relieved because <EVENT> went well", "I just got back from the gym.", "Jonas", "copied_example"),
    ("Maya believes that art helps people heal.", "Honestly it's all about money these days.", "Maya",
     "copied_example"),
    ("Jonas ran his first half-marathon", "I ran my first half-marathon last Sunday!", "Maya", "swapped_speaker"),
    ("Jonas finished the Lisbon half marathon in 1 hour 58 minutes.",
     "Jonas! I finished the Lisbon half marathon in 1 hour 58 minutes.", "Maya", "swapped_speaker"),
    ("Maya shared a photo of her cat on Saturday", "Work has been crazy lately.", "Maya", "invented_entity"),
    ("Maya adopted a kitten named Luna", "I got a new kitten!", "Maya", "invented_entity"),
    ("Maya has three cats", "I have two cats at home.", "Maya", "invented_entity"),
    ("Maya ran her first half-marathon on 3 March 2023", "I ran my first half-marathon yesterday!", "Maya",
     "invented_entity"),
    ("Maya went hiking in the Alps with her brother", "I stayed home and baked bread.", "Maya", "invented_entity"),
    ("Maya is moving to Denver in June 2024.", "I'm moving to Denver next month.", "Maya", "invented_entity"),
    # one phrase of the example bringing a word nobody said: what the 0.5B wrote for most demo turns
    ("Maya thinks she feels relieved because Jonas went well.", "Hi Jonas! Long time no see. How was your week?",
     "Maya", "copied_example"),
    ("I think I feel relieved because my thesis went well", "I finally handed in my thesis last Friday.", "Jonas",
     "copied_example"),  # the example's phrase in another inflection
    # the trade-off: a state the turn only implies, in the example's words, is taken as a copy too
    ("Maya feels relieved because the vet said Max is fine.", "Phew, the vet said Max is fine!", "Maya",
     "copied_example"),
]


@pytest.mark.parametrize("unit,text,speaker,reason", REJECTED)
def test_ungrounded_units_are_rejected_with_their_reason(unit, text, speaker, reason):
    verdict = check_unit(unit, source(text, speaker))
    assert not verdict and verdict.reason == reason and verdict.detail, verdict


ACCEPTED = [  # (unit, turn text, speaker, context): legitimate rewrites
    ("Maya went to a support group on 7 May 2023.", "I went to a support group yesterday.", "Maya", ()),
    ("Maya ran her first half-marathon on 7 May 2023.", "I ran my first half-marathon last Sunday!", "Maya", ()),
    ("Maya ran her first half-marathon on 30 April 2023.", "I ran my first half-marathon last Sunday!", "Maya", ()),
    ("Maya is moving to Denver in June 2023.", "I'm moving to Denver next month.", "Maya", ()),
    ("Maya feels exhausted because work has been very busy.", "I'm so tired, work has been crazy.", "Maya", ()),
    ("Maya obtained her driver's license.", "I finally got my driver's license!", "Maya", ()),
    ("Jonas finished the half-marathon.", "Did you finish the half-marathon?", "Maya", ()),
    ("Jonas ran a half-marathon.", "I'm so proud of that run!", "Maya", [("Jonas", "I ran a half-marathon!")]),
    ("Maya believes that art helps people heal.", "Painting helps me cope, art heals people.", "Maya", ()),
    ("Maya feels relieved because the vet said Max is fine.", "Phew, I feel so relieved: the vet said Max is fine!",
     "Maya", ()),
    ("Maya shared a photo of a sunset over the lake.", "Look at this!", "Maya", ()),
    ("Maya and others went camping at the lake in the week of 1 May 2023.", "We went camping at the lake last week.",
     "Maya", ()),
    ("Maya visited her grandmother in the spring of 2022.", "I visited my grandma last spring.", "Maya", ()),
]


@pytest.mark.parametrize("unit,text,speaker,context", ACCEPTED)
def test_legitimate_rewrites_are_accepted(unit, text, speaker, context):
    extra = {"blip_caption": "a photo of a sunset over the lake"} if "photo" in unit else {}
    verdict = check_unit(unit, source(text, speaker, context, **extra))
    assert verdict, verdict


def test_role_labels_i_to_the_user_and_a_swapped_role():
    src = turn_source(turn("I own a red bike.", "user"), [turn("What do you ride?", "assistant", "D1:0")])
    assert check_unit("The user owns a red bike.", src)
    verdict = check_unit("The assistant owns a red bike.", src)
    assert verdict.reason == "swapped_speaker"


def _demo():
    doc = json.loads(resources.files("etamem.data").joinpath("demo_conversation.json").read_text(encoding="utf-8"))
    turns = [Turn(turn_id=t["turn_id"], session_id=t["session_id"], speaker=t["speaker"], text=t["text"],
                  timestamp=datetime.fromisoformat(t["timestamp"]),
                  extra={"blip_caption": t["blip_caption"]} if t.get("blip_caption") else {}) for t in doc["turns"]]
    return {t.turn_id: (t, [u for u in turns[:i] if u.session_id == t.session_id]) for i, t in enumerate(turns)}


def _demo_source(turn_id):
    t, context = _demo()[turn_id]
    examples = prompt_examples(render_prompt("extract_locomo", speaker=t.speaker, text="", date="", context=""))
    return turn_source(t, context[-LLMExtractor.CONTEXT_TURNS:], examples, participants=["Maya", "Jonas"])


def test_no_rule_unit_of_the_demo_is_rejected():
    """The rule extractor's own units of the bundled demo all pass: no false rejection."""
    rejected, total = [], 0
    for t, context in _demo().values():
        src = _demo_source(t.turn_id)
        for unit in RuleExtractor().extract(t, context):
            total += 1
            if not (verdict := check_unit(unit, src)):
                rejected.append((t.turn_id, unit, verdict))
    assert total > 30 and rejected == []


DEMO_PARAPHRASES = [  # what a good model writes for the demo's turns
    ("s1:2", "Jonas handed in his thesis on coastal erosion on 1 March 2024."),
    ("s1:2", "Jonas submitted his thesis about coastal erosion on 23 February 2024."),
    ("s1:4", "Jonas feels relieved that his thesis is done."),
    ("s1:4", "Jonas's supervisor is Dr. Okafor."),
    ("s1:4", "Jonas's thesis defense will take place in April 2024."),
    ("s1:5", "Maya adopted a grey cat named Pixel from the shelter on Elm Street."),
    ("s1:7", "Pixel hides under the sofa most of the day."),
    ("s1:7", "Pixel purrs when Maya reads in the evening."),
    ("s1:9", "Maya's race is on 14 April 2024."),
    ("s1:9", "Maya runs 30 kilometres a week, mostly along the river."),
    ("s1:11", "Maya's left knee hurts after long runs, which worries her."),
    ("s2:1", "Jonas received a job offer from the Marine Research Institute in Bremen."),
    ("s2:3", "Jonas will start on 1 June 2024 as a junior researcher studying sediment transport."),
    ("s2:5", "Jonas is looking for a flat near the harbour in Bremen."),
    ("s2:5", "Jonas feels sad about moving away from his friends."),
    ("s2:6", "Maya saw a physiotherapist on Tuesday, 12 March 2024."),
    ("s2:7", "The physiotherapist said Maya's knee pain comes from weak hip muscles."),
    ("s2:7", "The physiotherapist gave Maya daily exercises."),
    ("s2:9", "Pixel slept on Maya's keyboard on 15 March 2024 while Maya was working."),
    ("s2:9", "Maya loves her cat Pixel."),
    ("s2:11", "Maya started learning Portuguese with an app so she can order food in Lisbon."),
    ("s3:1", "Maya finished the Lisbon half marathon in 1 hour 58 minutes."),
    ("s3:3", "Maya had no knee pain in the half marathon thanks to the hip exercises."),
    ("s3:3", "Maya is proud of herself."),
    ("s3:4", "Jonas passed his thesis defense with distinction on 11 April 2024."),
    ("s3:6", "Jonas was frustrated that the flat he wanted in Bremen went to someone else."),
    ("s3:8", "Jonas will view two flats in the Neustadt district the week of 22 April 2024."),
    ("s3:9", "Pixel now sleeps on Maya's bed every night."),
    # context that resolves what the turn leaves implicit: the job of "On 1 June", whose knee
    ("s2:3", "Jonas will start his job at the Marine Research Institute in Bremen on 1 June 2024."),
    ("s3:3", "Maya's knee did not hurt in the race because the hip exercises worked."),
    ("s3:6", "Jonas felt frustrated because the flat he wanted in Bremen went to someone else."),
    ("s1:8", "Jonas asked whether Maya is still training for the Lisbon half marathon."),
    ("s1:8", "Maya is training for the Lisbon half marathon."),
    # the question reported as asked: the listener stays "you" (FTA-Mem's "<name> said: <turn>")
    ("s1:8", "Jonas said: That sounds adorable. Are you still training for the Lisbon half marathon?"),
]


@pytest.mark.parametrize("turn_id,unit", DEMO_PARAPHRASES)
def test_paraphrases_of_the_demo_are_accepted(turn_id, unit):
    verdict = check_unit(unit, _demo_source(turn_id))
    assert verdict, verdict


@pytest.mark.parametrize("turn_id,unit,reason", [
    ("s3:1", "Jonas finished the Lisbon half marathon in 1 hour 58 minutes.", "swapped_speaker"),
    ("s3:1", "Maya finished the Lisbon half marathon in 1 hour 45 minutes.", "invented_entity"),
    ("s1:5", "Maya adopted a grey cat named Luna from the shelter on Elm Street.", "invented_entity"),
    ("s1:13", "Maya feels relieved because the adoption interview went well.", "copied_example"),
    ("s2:11", "Maya shared a photo of her cat on Saturday.", "invented_entity"),
    # the 1.5B's kept units read by hand: another turn's fact under this turn, the listener's fact
    # given to the speaker
    ("s1:6", "Jonas adopted a grey cat named Pixel.", "other_turn"),
    ("s2:10", "Pixel slept on Maya's keyboard while she was working.", "other_turn"),
    ("s1:8", "Jonas is training for the Lisbon half marathon.", "swapped_speaker"),
    ("s2:5", "Jonas got a job offer from the Marine Research Institute in Bremen.", "other_turn"),
])
def test_demo_failures_are_rejected(turn_id, unit, reason):
    assert check_unit(unit, _demo_source(turn_id)).reason == reason


@pytest.mark.parametrize("check,unit,text,speaker", [
    ("_copied", "Maya believes life is too short to wait.", "I love my life in Lisbon.", "Maya"),
    ("_swapped", "Jonas ran his first half-marathon", "I ran my first half-marathon last Sunday!", "Maya"),
    ("_invented", "Maya adopted a kitten named Luna", "I got a new kitten!", "Maya"),
    ("_listener_fact", "Jonas is training for the Lisbon half marathon.",
     "That sounds adorable. Are you still training for the Lisbon half marathon?", "Jonas"),
])
def test_each_protection_is_what_rejects_its_case(monkeypatch, check, unit, text, speaker):
    """Red when disabled: with that one check off, its case gets in."""
    assert not check_unit(unit, source(text, speaker))
    monkeypatch.setattr(grounding, check, lambda *args: None)
    assert check_unit(unit, source(text, speaker))


def test_the_other_turn_protection_is_what_rejects_another_turns_fact(monkeypatch):
    """Red when disabled: "Jonas adopted a grey cat named Pixel" for Jonas's "Aww, a cat!" gets in."""
    unit, src = "Jonas adopted a grey cat named Pixel.", _demo_source("s1:6")
    assert check_unit(unit, src).reason == "other_turn"
    monkeypatch.setattr(grounding, "_other_turn", lambda *args: None)
    assert check_unit(unit, _demo_source("s1:6"))


def test_prompt_examples_use_placeholders_and_the_legacy_examples_stay_known():
    for name, speaker in (("extract_locomo", "Maya"), ("extract_longmemeval", "User")):
        rendered = render_prompt(name, speaker=speaker, text="", date="", context="")
        examples = prompt_examples(rendered)
        assert any("<" in e for e in examples), name
        assert not any(legacy in rendered for legacy in LEGACY_EXAMPLES), name
    assert "<NAME> feels relieved because <EVENT> went well" in prompt_examples(
        render_prompt("extract_locomo", speaker="Maya", text="", date="", context=""))


# --- LLMExtractor --------------------------------------------------------------------------
def test_a_copied_example_sends_the_turn_to_the_rule_extractor_counted_and_logged(caplog):
    llm = FakeLLM({"facts": ["Maya finished the race in Lisbon.", OLD_EXAMPLE.replace("Jonas", "Maya")]})
    ex = LLMExtractor(llm, fallback=RuleExtractor())
    t = turn("I finished the race in Lisbon on Sunday. I am so proud!", turn_id="s3:3")
    with caplog.at_level(logging.WARNING, logger="etamem.extraction.extractors"):
        result = ex.extract_result(t)
    assert result.fallback and result.units == RuleExtractor().extract(t)
    assert ex.stats == {"turns": 1, "llm_units": 0, "fallback_turns": 1, "fallback_units": len(result.units),
                        "unusable_turns": 0, "rejected_units": 1, "rejected_copied_example": 1, "rejected_invented_entity": 0,
                        "rejected_swapped_speaker": 0, "rejected_other_turn": 0}
    assert "s3:3" in caplog.text and "copied_example" in caplog.text


def test_each_reason_is_counted_and_a_grounded_reply_is_kept():
    ex = LLMExtractor(FakeLLM({"facts": ["Jonas ran his first half-marathon.", "Maya adopted a kitten named Luna."]}))
    ex.extract(turn("How was your weekend?", "Jonas", "D1:0"))  # Jonas speaks in this space
    before = ex.stats
    ex.extract_result(turn("I ran my first half-marathon! I got a new kitten too."))
    stats = {k: v - before[k] for k, v in ex.stats.items()}
    assert (stats["rejected_units"], stats["rejected_swapped_speaker"], stats["rejected_invented_entity"]) == (2, 1, 1)
    assert stats["fallback_turns"] == 1 and stats["rejected_copied_example"] == 0
    good = LLMExtractor(FakeLLM({"facts": ["Maya went to a support group on 7 May 2023."]}))
    result = good.extract_result(turn("I went to a support group yesterday."))
    assert result.units == ["Maya went to a support group on 7 May 2023."] and not result.fallback
    assert good.stats["rejected_units"] == 0 and good.stats["fallback_turns"] == 0


def test_grounding_off_lets_the_copy_in():
    """The protection shown red once: with `grounding=False` the copy is stored as written."""
    t = turn("I just got back from the gym.", speaker="Jonas")
    off = LLMExtractor(FakeLLM({"facts": [OLD_EXAMPLE]}), grounding=False).extract_result(t)
    on = LLMExtractor(FakeLLM({"facts": [OLD_EXAMPLE]})).extract_result(t)
    assert off.units == [OLD_EXAMPLE] and not off.fallback
    assert on.fallback and OLD_EXAMPLE not in on.units


def test_memory_stats_report_the_rejections(hashing_encoder):
    from etamem import Memory
    from etamem.models.affect import VaderAffectTagger

    llm = FakeLLM({"facts": [OLD_EXAMPLE]})
    mem = Memory(None, text_encoder=hashing_encoder, affect_tagger=VaderAffectTagger(hashing_encoder),
                 extractor=LLMExtractor(llm))
    mem.add([{"turn_id": "a1", "session_id": "s1", "speaker": "Jonas", "text": "I just got back from the gym.",
              "timestamp": "2023-05-08T13:56:00"}], space="u1")
    mem.flush("u1")  # the LLM's extraction runs behind the write
    extraction = mem.stats("u1")["extraction"]
    assert extraction["rejected_units"] == 1 and extraction["rejected_copied_example"] == 1
    assert extraction["fallback_turns"] == 1 and extraction["rejected_swapped_speaker"] == 0
    assert [a.text for a in mem.list("u1")] == ["Jonas just got back from the gym."]


# --- FTA-Mem's LLM units -------------------------------------------------------------------------
FTA_T0 = datetime(2023, 5, 8, 18, 0, tzinfo=timezone.utc)
FTA_DIALOGUE = [
    ("Maya", "I ran my first half-marathon yesterday!"),
    ("Jonas", "Wow, congratulations! How did it go?"),
    ("Maya", "Slow but steady, I finished in two hours."),
    ("Jonas", "That is great."),
]


def _fta(chat_server, *replies):
    from conftest import HashingEncoder
    from etamem.fta.llm_units import LLMUnitExtractor
    from etamem.fta.segmentation import segment_session
    from etamem.fta.units import construct_units
    from etamem.models.affect import VaderAffectTagger
    from etamem.models.llm import LLMClient

    turns = [Turn(f"s1:{i}", "s1", sp, text, FTA_T0 + timedelta(minutes=i)) for i, (sp, text) in enumerate(FTA_DIALOGUE)]
    segments = segment_session(turns, mode="session").segments
    chat_server.script(*replies)
    ext = LLMUnitExtractor(LLMClient("test-model", base_url=chat_server.base_url, max_retries=0),
                           VaderAffectTagger(HashingEncoder()))
    return ext, construct_units(turns, segments, ext)


def _unit(text, span=(0, 2), **extra):
    return json.dumps({"memory_units": [{"text": text, "content_type": "event", "time_orientation": "past",
                                         "participants": ["Maya"], "evidence_turn_span": list(span),
                                         "status": "complete", **extra}]})


def test_fta_grounded_units_are_kept(chat_server):
    ext, result = _fta(chat_server, _unit("Maya ran her first half-marathon on 7 May 2023 and finished in two hours."))
    assert [u.text for u in result.units] == ["Maya ran her first half-marathon on 7 May 2023 and finished in two hours."]
    assert ext.stats["rejected_units"] == 0 and ext.stats["llm_segments"] == 1


@pytest.mark.parametrize("text,reason,extra", [
    ("Jonas ran his first half-marathon and finished in two hours.", "swapped_speaker", {}),
    ("Maya feels relieved because <EVENT> went well.", "copied_example", {}),
    ("Maya ran her first half-marathon in Boston with her sister Clara.", "invented_entity", {}),
    ("Maya ran her first half-marathon.", "invented_entity", {"participants": ["Maya", "Clara"]}),
])
def test_fta_a_segment_with_an_ungrounded_unit_falls_back_to_the_rule_units(chat_server, text, reason, extra):
    ext, result = _fta(chat_server, _unit(text, **extra))
    stats = ext.stats
    assert stats["fallback_segments"] == 1 and stats["llm_segments"] == 0 and stats["rejected_units"] == 1
    assert stats[f"rejected_{reason}"] == 1
    assert text not in [u.text for u in result.units] and result.units  # the rule units instead


def test_fta_grounding_off_lets_the_swap_in(chat_server):
    from etamem.fta import llm_units

    text = "Jonas ran his first half-marathon and finished in two hours."
    original = llm_units.LLMUnitExtractor.__init__.__kwdefaults__["grounding"]
    llm_units.LLMUnitExtractor.__init__.__kwdefaults__["grounding"] = False
    try:
        ext, result = _fta(chat_server, _unit(text))
    finally:
        llm_units.LLMUnitExtractor.__init__.__kwdefaults__["grounding"] = original
    assert [u.text for u in result.units] == [text] and ext.stats["rejected_units"] == 0


def test_turn_source_shows_the_caption_and_names_the_participants():
    t = turn("Look!", blip_caption="a photo of a cat")
    src = turn_source(t, [turn("Hi Maya", "Jonas", "D1:0")])
    assert src.turns == (("Maya", turn_text(t)),) and {"Maya", "Jonas"} <= set(src.participants)


# --- the supersession classifier: no model text enters memory -------------------------------------
def test_supersession_replies_name_offered_ids_only_and_their_text_is_not_used():
    """`LLMSupersession` links stored units by the ids it offered; any text in the reply is
    dropped, an id it did not offer makes the reply unusable (the rules decide instead)."""
    from etamem.facts.llm_supersession import parse_reply

    reply = {"replaced": [{"id": "u1", "confidence": "high", "text": OLD_EXAMPLE}]}
    assert parse_reply(reply, ["u1", "u2"]) == [("u1", 0.9)]
    with pytest.raises(ValueError):
        parse_reply({"replaced": [{"id": OLD_EXAMPLE}]}, ["u1"])


def test_first_person_left_by_the_model_is_written_as_the_speaker():
    """The 0.5B left "I" in units ("I think I feel ..."): a unit says whose fact it is."""
    ex = LLMExtractor(FakeLLM({"facts": ["I am so relieved the thesis is done.", "Jonas's supervisor is Dr. Okafor."]}))
    t = turn("Thanks! I am so relieved it is done. My supervisor, Dr. Okafor, said the defense will be in April.",
             "Jonas", "s1:4")
    result = ex.extract_result(t)
    assert not result.fallback
    assert result.units == ["Jonas is so relieved the thesis is done.", "Jonas's supervisor is Dr. Okafor."]
