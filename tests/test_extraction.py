"""Tests for AMU extraction (rule + LLM orchestration) and prompt rendering."""
from __future__ import annotations

import json
import re
from datetime import datetime, timezone
from pathlib import Path

import pytest

from etamem.extraction.extractors import (
    ExtractionUnavailable,
    LLMExtractor,
    RuleExtractor,
    rewrite_first_person,
    split_sentences,
)
from etamem.models.llm import LLMError, LLMJSONError, LLMUnavailable
from etamem.models.prompt_files import list_prompts, render_prompt, render_template
from etamem.records import Turn

TS = datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc)
LOCOMO_DEV = Path(__file__).resolve().parents[2] / "shared/data/locomo/locomo10-dev.json"

NO_REJECTIONS = {"rejected_units": 0, "rejected_copied_example": 0, "rejected_invented_entity": 0,
                 "rejected_swapped_speaker": 0, "rejected_other_turn": 0}


def turn(text: str, speaker: str = "Caroline", turn_id: str = "D1:1", **extra) -> Turn:
    return Turn(turn_id=turn_id, session_id="s1", speaker=speaker, text=text, timestamp=TS, extra=extra)


# --- sentence splitting -------------------------------------------------------------
def test_split_keeps_abbreviations_and_decimals():
    text = ("Dr. Smith told Mr. Brown to rest. He left at 9 a.m. today and paid 3.5 dollars, "
            "e.g. for the taxi! Was it fun? Yes… it was\nNew line starts here")
    assert split_sentences(text) == [
        "Dr. Smith told Mr. Brown to rest.",
        "He left at 9 a.m. today and paid 3.5 dollars, e.g. for the taxi!",
        "Was it fun?",
        "Yes…",
        "it was",
        "New line starts here",
    ]


def test_split_after_ambiguous_abbreviation_before_capital():
    assert split_sentences("We met at 7 p.m. Then we ate.") == ["We met at 7 p.m.", "Then we ate."]
    assert split_sentences("Books, pens etc. are on the desk.") == ["Books, pens etc. are on the desk."]


# --- filler ---------------------------------------------------------------------------
@pytest.mark.parametrize("text", [
    "Hey Mel! Good to see you!",
    "Thanks, bye!",
    "How are you?",
    "That's awesome!",
    "Haha",
    "Wow, Caroline! Thanks so much! See you soon!",
    "lol",
])
def test_pure_filler_turns_give_nothing(text):
    assert RuleExtractor().extract(turn(text)) == []


def test_leading_interjections_and_vocatives_are_stripped():
    ex = RuleExtractor()
    assert ex.extract(turn("Hi Caroline, I adopted a puppy named Max.", speaker="Melanie")) == [
        "Melanie adopted a puppy named Max."]
    assert ex.extract(turn("Oh, wow, Mel! The new bakery downtown sells great bagels.")) == [
        "The new bakery downtown sells great bagels."]
    assert ex.extract(turn("Yeah, we hiked the canyon trail last weekend haha")) == [
        "Caroline and others hiked the canyon trail last weekend (the weekend of 6 May 2023)"]  # we: speaker + others


def test_content_questions_are_kept():
    units = RuleExtractor().extract(turn("Hey! Did you go to the concert in Boston?", speaker="Jon"))
    assert units == ["Did you go to the concert in Boston?"]


def test_min_words_controls_filler_threshold():
    t = turn("Pottery is fun.")
    assert RuleExtractor(min_words=3).extract(t) == []
    assert RuleExtractor(min_words=1).extract(t) == ["Pottery is fun."]
    # a short statement about the speaker is kept whatever min_words says (see test_short_statements.py)
    assert RuleExtractor(min_words=3).extract(turn("I love pottery.")) == ["Caroline loves pottery."]
    assert RuleExtractor(min_words=3, keep_statements=False).extract(turn("I love pottery.")) == []


# --- first-person rewrite ---------------------------------------------------------------
@pytest.mark.parametrize("src,expected", [
    ("I'm happy", "Caroline is happy"),
    ("I’m happy", "Caroline is happy"),
    ("I am tired", "Caroline is tired"),
    ("I was there", "Caroline was there"),
    ("I've got a cat", "Caroline has got a cat"),
    ("I have a dog", "Caroline has a dog"),
    ("I'll paint tomorrow", "Caroline will paint tomorrow"),
    ("I'd love that", "Caroline would love that"),
    ("I do yoga", "Caroline does yoga"),
    ("I don't swim", "Caroline doesn't swim"),
    ("I went home", "Caroline went home"),
    ("give it to me", "give it to Caroline"),
    ("my sister called", "Caroline's sister called"),
    ("the book is mine", "the book is Caroline's"),
    ("I made it myself", "Caroline made it themselves"),
    ("i'm late and i forgot", "Caroline is late and forgot"),
    ("we went to our house with you", "we went to our house with you"),
    ("it was fun, i.e. great", "it was fun, i.e. great"),
])
def test_rewrite_first_person(src, expected):
    assert rewrite_first_person(src, "Caroline") == expected


def test_units_are_capitalised_and_rewritten():
    text = "my brother and I visited Lisbon in March. it rained during the whole trip."
    assert RuleExtractor().extract(turn(text)) == [
        "Caroline's brother and Caroline visited Lisbon in March.", "It rained during the whole trip."]


# --- captions ---------------------------------------------------------------------------
def test_caption_becomes_a_unit():
    caption = "a photo of a painting of a sunset over a lake"
    t = turn("Look at this!", speaker="Melanie", blip_caption=caption)
    assert RuleExtractor().extract(t) == ["Melanie shared a photo of a painting of a sunset over a lake."]


def test_caption_appended_after_text_units():
    t = turn("I painted this last year.", speaker="Melanie", blip_caption="a red barn")
    assert RuleExtractor().extract(t) == [
        "Melanie painted this last year (2022).", "Melanie shared a photo of a red barn."]


def test_deterministic():
    t = turn("Hey! I'm visiting Dr. Lee in Ohio next week. Bye!")
    expected = ["Caroline is visiting Dr. Lee in Ohio next week (the week of 15 May 2023)."]
    assert RuleExtractor().extract(t) == RuleExtractor().extract(t) == expected


# --- real LoCoMo turns ------------------------------------------------------------------------
def _locomo_turns():
    if not LOCOMO_DEV.is_file():
        pytest.skip(f"LoCoMo dev file not found at {LOCOMO_DEV}")
    conv = json.loads(LOCOMO_DEV.read_text(encoding="utf-8"))[0]["conversation"]
    return {t["dia_id"]: t for t in conv["session_1"]}


def test_locomo_turns():
    raw = _locomo_turns()
    ex = RuleExtractor()

    def make(dia_id):
        t = raw[dia_id]
        extra = {"blip_caption": t["blip_caption"]} if "blip_caption" in t else {}
        return Turn(dia_id, "session_1", t["speaker"], t["text"], TS, extra=extra)

    assert ex.extract(make("D1:1")) == []  # "Hey Mel! Good to see you! How have you been?"
    content_ids = ["D1:2", "D1:3", "D1:5", "D1:7", "D1:9", "D1:11", "D1:14", "D1:16", "D1:18"]
    for dia_id in content_ids:
        t = make(dia_id)
        units = ex.extract(t)
        assert units, f"{dia_id} gave no unit: {t.text!r}"
        for u in units:
            assert not re.search(r"\b(I|I'm|I've|me|my|myself)\b", u), (dia_id, u)
    d13 = "Caroline went to a LGBTQ support group yesterday (7 May 2023) and it was so powerful."
    assert d13 in ex.extract(make("D1:3"))
    assert any(u.startswith("Caroline shared a photo of a dog") for u in ex.extract(make("D1:5")))


# --- LLM extractor (orchestration with fakes) -----------------------------------------------------
class FakeLLM:
    """`complete_json` as LLMClient does it: the answer, or the exception, `validate` applied."""

    def __init__(self, answer, apply_validate=True):
        self.answer = answer
        self.apply_validate = apply_validate
        self.calls = []

    def complete_json(self, messages, *, stage, validate=None, schema=None):
        self.calls.append((messages, stage))
        if isinstance(self.answer, Exception):
            raise self.answer
        if validate is not None and self.apply_validate:
            try:
                return validate(self.answer)
            except ValueError as exc:
                raise LLMJSONError(str(exc)) from exc
        return self.answer


def test_llm_extractor_renders_prompt_and_returns_facts():
    llm = FakeLLM({"facts": ["Caroline went to a support group on 7 May 2023.", "  ", 3]})
    ex = LLMExtractor(llm, style="locomo")
    ctx = [turn("Hey Caroline! How have you been?", speaker="Melanie", turn_id="D1:0")]
    t = turn("I went to a support group yesterday.", blip_caption="a rainbow flag")
    assert ex.extract(t, ctx) == ["Caroline went to a support group on 7 May 2023."]
    (messages, stage), = llm.calls
    assert stage == "extract"
    prompt = "\n".join(m["content"] for m in messages)
    assert "Caroline" in prompt
    assert "I went to a support group yesterday." in prompt
    assert "a rainbow flag" in prompt
    assert "Monday, 8 May 2023" in prompt
    assert "Melanie: Hey Caroline! How have you been?" in prompt
    assert ex.stats == {"turns": 1, "llm_units": 1, "fallback_turns": 0, "fallback_units": 0,
                        "unusable_turns": 0, **NO_REJECTIONS}


def test_llm_extractor_accepts_bare_list_and_empty_answer():
    ex = LLMExtractor(FakeLLM(["The user owns a red bike."]), style="longmemeval")
    assert ex.extract(turn("I own a red bike.", speaker="user")) == ["The user owns a red bike."]
    empty = LLMExtractor(FakeLLM({"facts": []}))
    assert empty.extract(turn("I went hiking in the Alps with Mel.")) == []
    assert empty.stats["fallback_turns"] == 0 and empty.stats["turns"] == 1


@pytest.mark.parametrize("apply_validate", [True, False])
@pytest.mark.parametrize("answer", [
    LLMJSONError("not JSON after repair"), LLMError("reply without text"), {"nope": 1}, {"facts": 3}, "text",
    [1, 2]])
def test_unusable_llm_reply_falls_back_to_rules(answer, apply_validate):
    ex = LLMExtractor(FakeLLM(answer, apply_validate), fallback=RuleExtractor())
    t = turn("Hey! I'm moving to Denver next month.")
    assert ex.extract(t) == ["Caroline is moving to Denver next month (June 2023)."]
    assert ex.extract_result(t) == (["Caroline is moving to Denver next month (June 2023)."], True)
    assert ex.stats == {"turns": 2, "llm_units": 0, "fallback_turns": 2, "fallback_units": 2,
                        "unusable_turns": 2, **NO_REJECTIONS}


def test_no_llm_reply_raises_and_extracts_nothing():
    ex = LLMExtractor(FakeLLM(LLMUnavailable("connection refused")), fallback=RuleExtractor())
    with pytest.raises(ExtractionUnavailable, match="D1:1.*connection refused") as info:
        ex.extract(turn("I'm moving to Denver next month."))
    assert isinstance(info.value, LLMUnavailable) and isinstance(info.value.__cause__, LLMUnavailable)
    assert ex.stats == {"turns": 0, "llm_units": 0, "fallback_turns": 0, "fallback_units": 0,
                        "unusable_turns": 0, **NO_REJECTIONS}


def test_other_llm_exceptions_propagate():
    ex = LLMExtractor(FakeLLM(ValueError("boom")), fallback=RuleExtractor())
    with pytest.raises(ValueError, match="boom"):
        ex.extract(turn("I'm moving to Denver next month."))
    assert ex.stats["turns"] == 0


def test_llm_extractor_rejects_unknown_style():
    with pytest.raises(ValueError, match="style"):
        LLMExtractor(FakeLLM([]), style="novel")


# --- prompts -----------------------------------------------------------------------------------
def test_prompts_listed_and_render():
    assert {"extract_locomo", "extract_longmemeval"} <= set(list_prompts())
    text = render_prompt("extract_longmemeval", speaker="user", text="I like tea.",
                         date="1 May 2023", context="(none)")
    assert "I like tea." in text and '{"facts":' in text and "{speaker}" not in text


def test_render_prompt_missing_placeholder_raises():
    with pytest.raises(ValueError, match="context"):
        render_prompt("extract_locomo", speaker="A", text="t", date="d")
    with pytest.raises(ValueError, match="who"):
        render_template("Hello {who}, {{literal}}")
    assert render_template("Hello {who}, {{literal}}", who="Mel", extra=1) == "Hello Mel, {literal}"


def test_render_prompt_unknown_name_raises():
    with pytest.raises(ValueError, match="not found"):
        render_prompt("no_such_prompt_xyz")
    with pytest.raises(ValueError):
        render_prompt("../setup")
