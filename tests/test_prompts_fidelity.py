"""The ETAMem prompts carry every rule of the seed paper's prompt templates (the table in
docs/prompts.md): each prompt is rendered by the code that sends it, the rendered text holds a
key phrase for each rule, every placeholder is filled, and the reply forms the prompts ask for
are the ones the parsers read."""
from __future__ import annotations

import json
import re
from datetime import datetime, timezone

import pytest

from etamem.answering import compose_answer, says_missing
from etamem.bench.items import BenchQuestion
from etamem.bench.qa import answer_and_judge, answer_prompt
from etamem.bench.systems import Unit
from etamem.extraction.extractors import LLMExtractor
from etamem.records import AMU, Hit, StageCost, Turn
from etamem.views.summaries import LLMSummariser

WHEN = datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc)
ASKED = datetime(2023, 6, 1, tzinfo=timezone.utc)

# (seed rule, key phrase in the rendered prompt; whitespace-insensitive, case-insensitive)
LOCOMO_ANSWER = [
    ("reason over the retrieved facts", r"reason over (the memories|what both speakers said)"),
    ("use the timestamps for temporal questions", r"question about time .{0,60}use the dates"),
    ("prefer the newer of contradicting facts", r"contradicts?( each other| itself)?, prefer the newer"),
    ("short answer, fewer than 5-8 words", r"fewer than 8 words, 5 or fewer"),
    ("relative times become dates", r"relative time expressions .{0,80}into absolute dates"),
    ("names mentioned are not the users", r"are not the users: do not confuse them with the speakers"),
    ("answer naturally, not as a timestamp", r"answer naturally.{0,120}not in a timestamp format"),
]
LONGMEMEVAL_ANSWER = [
    ("answer grounded in the relevant atomic facts", r"ground the answer in the (memories|history): pick the"),
    ("an answer may be inferred", r"may need to be inferred"),
    ('"no information" when the answer cannot be inferred', r"cannot be found in or inferred from .{0,40}"
                                                               r"there is no information"),
    ("the question date is the current date", r"current date \(the question date\): 1 June 2023 "
                                              r"treat this date as today"),
]
RULES = {
    "answer_locomo": LOCOMO_ANSWER,
    "answer_locomo_full": LOCOMO_ANSWER,
    "answer_longmemeval": LONGMEMEVAL_ANSWER,
    "answer_longmemeval_full": LONGMEMEVAL_ANSWER,
    "extract_locomo": [
        ("one atomic fact per line", r"one atomic fact per item, each on one line"),
        ("third-person wording", r"write in the third person"),
        ("names replace pronouns", r"use people's names instead of pronouns"),
        ("context for states when inferable", r"for a state .{0,120}cause or circumstance .{0,60}infer"),
        ("opinions attributed to the speaker", r"attribute opinions, feelings, wishes and plans to the person"),
        ("general statements attributed to the speaker", r"general statement .{0,80}is also caroline's view"),
        ("no chit-chat or filler", r"drop chit-chat and filler"),
    ],
    "extract_longmemeval": [
        ("task / puzzle / riddle / Q&A summarised in one line",
         r"hypothetical task, a puzzle, a riddle, or a general question and answer .{0,160}"
         r"summarise that request in one line"),
        ("otherwise personal atomic facts about the speaker", r"otherwise, extract the personal atomic facts about "
                                                              r"the author"),
        ("third-person facts with a subject", r"third person and names its subject"),
        ("beliefs attributed to the speaker", r"attribute beliefs and opinions to the user"),
        ("inferable context included", r"keep the context that can be inferred"),
        ("no filler", r"drop greetings, thanks, pleasantries and filler"),
    ],
    "summarise": [
        ("a direct summary", r"write the summary directly"),
        ("at most 256 words", r"no more than 256 words"),
        ("numbered contents", r"contents: 1\. child one 2\. child two"),
        ("a Summary field", r"summary:$"),
    ],
    "judge": [
        ("label CORRECT or WRONG", r"label a generated answer to a question as correct or wrong"),
        ("same meaning or topic as the gold answer", r"expresses the same meaning as the gold answer or touches on "
                                                      r"the same topic"),
        ("JSON only, with the label", r"reply with json only .{0,120}\"label\": \"correct\""),
    ],
}


class FakeLLM:
    """Records every prompt; replies with `reply(prompt)` (the orchestration is under test, not a model)."""

    temperature, max_tokens = 0.0, 64

    def __init__(self, reply=lambda prompt: "ok"):
        self.reply, self.prompts = reply, []

    def usage(self) -> dict[str, StageCost]:
        return {"x": StageCost(calls=len(self.prompts))}

    def complete(self, messages, stage="other") -> str:
        self.prompts.append(messages[-1]["content"])
        return self.reply(self.prompts[-1])

    def complete_json(self, messages, stage="other", validate=None, schema=None):
        answer = json.loads(self.complete(messages, stage))
        return validate(answer) if validate else answer


def _question(style: str) -> BenchQuestion:
    category = "1" if style == "locomo" else "temporal-reasoning"
    return BenchQuestion(qid="q1", space="s", question="When did Caroline go to the support group?",
                         answer="7 May 2023", category=category, now="2023-06-01")


def _turn(text: str, speaker: str = "Caroline", turn_id: str = "D1:3") -> Turn:
    return Turn(turn_id=turn_id, session_id="D1", speaker=speaker, text=text, timestamp=WHEN)


def _render(name: str) -> str:
    """`name` rendered the way the code that sends it renders it."""
    if name.startswith("answer_"):
        style = name.split("_")[1]
        turn = _turn("I went to a support group yesterday.")
        if name.endswith("_full"):
            return answer_prompt(style, _question(style), conversation=[turn])
        unit = Unit(sources=("D1:3",), text="Caroline went to a support group on 7 May 2023.", timestamp=WHEN,
                    views=("event",))
        return answer_prompt(style, _question(style), units=[unit], turns={"D1:3": turn},
                             time_summaries="2023-W19: Caroline went to a support group.")
    if name.startswith("extract_"):
        llm = FakeLLM()
        extractor = LLMExtractor(llm, style=name.split("_")[1])
        speaker = "Caroline" if name == "extract_locomo" else "user"
        return extractor.build_messages(_turn("I went to a support group yesterday.", speaker),
                                        [_turn("Hey! How have you been?", "Melanie", "D1:2")])[-1]["content"]
    if name == "summarise":
        llm = FakeLLM(lambda prompt: "A summary.")
        assert LLMSummariser(llm, kind="day")(["child one", "", "child two"], ["rep"]) == "A summary."
        return llm.prompts[-1]
    if name == "judge":
        judge = FakeLLM(lambda prompt: json.dumps({"label": "CORRECT"}))
        answer_and_judge("Question: q\nAnswer:", _question("locomo"), FakeLLM(lambda p: "7 May 2023"), judge)
        return judge.prompts[-1]
    raise AssertionError(name)


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


@pytest.mark.parametrize("name", sorted(RULES))
def test_prompt_carries_every_seed_rule(name):
    text = _flat(_render(name))
    missing = [rule for rule, pattern in RULES[name] if not re.search(pattern, text, re.I)]
    assert not missing, f"{name}: the rendered prompt lacks the seed rule(s) {missing}"


@pytest.mark.parametrize("name", sorted(RULES))
def test_every_placeholder_is_rendered(name):
    text = _render(name)
    assert not re.search(r"\{[A-Za-z_][A-Za-z0-9_]*\}", text), f"{name}: a placeholder was left unrendered"
    assert "{{" not in text and "}}" not in text, f"{name}: a doubled brace was left"


@pytest.mark.parametrize("name", ["answer_locomo", "answer_longmemeval"])
def test_memory_answer_renders_the_same_rules(name):
    """`Memory.answer`'s renderer (`compose_answer`) fills the same template as the bench's."""
    style = name.split("_")[1]
    amu = AMU(amu_id="a1", text="Caroline went to a support group on 7 May 2023.", speaker="Caroline",
              timestamp=WHEN, session_id="D1", source_turn_ids=("D1:3",))
    llm = FakeLLM(lambda prompt: "7 May 2023")
    answer = compose_answer("When did Caroline go to the support group?", [Hit(amu, 1.0, ("event",), ("D1:3",))],
                            {"D1:3": _turn("I went to a support group yesterday.")}, llm=llm, style=style,
                            question_date=ASKED, time_summaries="2023-W19: a week.")
    assert answer.text == "7 May 2023"
    text = _flat(llm.prompts[-1])
    assert not re.search(r"\{[A-Za-z_][A-Za-z0-9_]*\}", llm.prompts[-1])
    assert all(re.search(pattern, text, re.I) for _, pattern in RULES[name]), name
    assert "caroline went to a support group on 7 may 2023" in text and "2023-w19: a week." in text


@pytest.mark.parametrize("name", sorted(n for n in RULES if n.startswith("answer_")))
def test_answer_prompts_end_with_the_question_and_a_missing_phrase_the_fallback_reads(name):
    """The reply for missing information is one `says_missing` recognises (it triggers the raw-turn retry)."""
    raw = _render(name)
    assert raw.rstrip().endswith("Question: When did Caroline go to the support group?\nAnswer:")
    quoted = re.findall(r'"([^"]+)"', raw.split("# How to answer")[1])
    assert [q for q in quoted if says_missing(q)], f"{name}: no missing-information reply the fallback recognises"


def test_judge_reply_forms_are_the_ones_the_parser_reads():
    """Both JSON forms the judge prompt shows parse to the verdict they name."""
    text = _render("judge")
    forms = [json.loads(line) for line in text.splitlines() if line.startswith("{")]
    assert [f["label"] for f in forms] == ["CORRECT", "WRONG"]
    for form in forms:
        judge = FakeLLM(lambda prompt, form=form: json.dumps(form))
        rec = answer_and_judge("Question: q\nAnswer:", _question("locomo"), FakeLLM(lambda p: "x"), judge)
        assert rec["correct"] is (form["label"] == "CORRECT")


@pytest.mark.parametrize("name", ["extract_locomo", "extract_longmemeval"])
def test_extraction_reply_form_is_the_one_the_parser_reads(name):
    """The JSON form the extraction prompt shows, sent back as the reply, gives its facts."""
    def reply(prompt):
        return [line for line in prompt.splitlines() if line.startswith('{"facts"')][-1]

    extractor = LLMExtractor(FakeLLM(reply), style=name.split("_")[1])
    result = extractor.extract_result(_turn("I went to a support group yesterday."))
    assert result.units == ["first fact", "second fact"] and not result.fallback
