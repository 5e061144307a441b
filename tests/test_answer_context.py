"""The answer prompt's memory lines: a line that only restates its source turns (shown beside it)
is left out by default (`Config.answer_memory_lines` "distinct"), so a token budget holds more
evidence; lines that add something (a photo's caption, a paraphrase, a version note) stay."""
from __future__ import annotations

from datetime import datetime, timezone

import pytest

from conftest import HashingEncoder
from etamem import Config, Memory
from etamem.answering import format_memories, restates
from etamem.models.affect import VaderAffectTagger
from etamem.records import AMU, Hit, Turn

T = datetime(2023, 5, 8, 13, 56, tzinfo=timezone.utc)
TURN = Turn("D1:3", "s1", "Caroline", "I went to a LGBTQ support group yesterday and it was so powerful.", T)


def _hit(text: str, **kw) -> Hit:
    amu = AMU(f"a{abs(hash(text)) % 1000}", text, "Caroline", T, "s1", ("D1:3",), "neutral", (0.0, 1.0, 0.0))
    return Hit(amu, 1.0, ("event",), ("D1:3",), (TURN,), **kw)


def test_a_rule_rewrite_restates_its_turn_and_new_words_do_not():
    assert restates("Caroline went to a LGBTQ support group yesterday (7 May 2023) and it was so powerful.", [TURN])
    love = Turn("D1:5", "s1", "Caroline", "I love painting with my kids.", T)
    assert restates("Caroline loves painting with her kids.", [love])  # a third-person form, a pronoun
    assert not restates("Caroline shared a photo of a rainbow flag.", [TURN])  # a caption the turn lacks
    assert not restates("Caroline found the support group meeting moving.", [TURN])  # a paraphrase
    assert not restates("Caroline went to a LGBTQ support group.", [])  # nothing shown beside it


def test_format_memories_leaves_out_restating_lines_but_keeps_version_notes():
    same = _hit("Caroline went to a LGBTQ support group yesterday (7 May 2023).")
    other = _hit("Caroline found the support group meeting moving.")
    noted = _hit("Caroline went to a LGBTQ support group.", superseded_by=("a9",))
    sources = {"D1:3": TURN}
    text = format_memories([same, other, noted], sources)
    assert same.amu.text not in text and other.amu.text in text and "no longer current" in text
    assert same.amu.text in format_memories([same, other, noted])  # no sources: every line
    assert format_memories([same], sources) == "(their source turns below say them in full)"


TURNS = [{"turn_id": f"t{i}", "session_id": "s1", "speaker": "Ana", "timestamp": f"2024-05-08T10:{i:02d}:00",
          "text": text} for i, text in enumerate([
              "I adopted a grey cat last week and named her Miso.",
              "My sister Lena lives in Porto and works at a bakery there."])]


def test_answer_prompt_shows_each_turn_once_unless_asked_for_all_lines(chat_server):
    chat_server.responder = lambda body: "Miso"
    enc = HashingEncoder()
    prompts = {}
    for lines in ("distinct", "all"):
        config = Config(llm_model="m", llm_base_url=chat_server.base_url, llm_api_key="k", llm_max_retries=0,
                        llm_background=False, llm_summaries=False, extractor="rules", answer_memory_lines=lines,
                        answer_context="packet")
        with Memory(None, config, text_encoder=enc, affect_tagger=VaderAffectTagger(enc)) as mem:
            mem.add(TURNS, space="u")
            units = [a.text for a in mem.list("u")]
            assert mem.answer("What is the name of Ana's cat?", space="u").text == "Miso"
        prompts[lines] = chat_server.requests[-1]["messages"][-1]["content"]
    memories = {k: p.split("# Source turns")[0] for k, p in prompts.items()}
    assert units and all(u in memories["all"] for u in units)
    assert not any(u in memories["distinct"] for u in units)  # the rules only rewrite the turns
    for t in TURNS:  # the turns themselves are in both
        assert all(t["text"] in p.split("# Source turns")[1] for p in prompts.values())
    assert len(prompts["distinct"]) < len(prompts["all"])


def _turn(i: int, text: str, day: int) -> Turn:
    return Turn(f"D1:{i}", "s1", "Ana", text, datetime(2024, 5, day, 10, tzinfo=timezone.utc))


def _hit_of(turn: Turn, text: str, **kw) -> Hit:
    amu = AMU(f"u{turn.turn_id}{len(text)}", text, "Ana", turn.timestamp, "s1", (turn.turn_id,), "neutral", (0.0, 1.0, 0.0))
    return Hit(amu, 1.0, ("event",), (turn.turn_id,), (turn,), **kw)


class _Reader:
    """Records the prompt; counts a token per word; a prompt budget of `budget` tokens."""

    context_tokens = 4096

    def __init__(self, budget: int | None):
        self.budget, self.prompts = budget, []
        self.tokens = type("T", (), {"count": staticmethod(lambda s: len(s.split()))})()

    def prompt_budget(self):
        return self.budget

    def usage(self):
        return {}

    def complete(self, messages, stage):
        self.prompts.append(messages[-1]["content"])
        return "Porto"


def test_turns_context_shows_source_turns_once_oldest_first_cut_in_rank_order():
    from etamem.answering import compose_answer, turn_lines

    old = _turn(1, "I live in Lisbon, right by the river.", 1)
    new = _turn(2, "We finally moved to Porto last weekend!", 20)
    cat = _turn(3, "My cat Miso hates the new flat's stairs.", 21)
    hits = [_hit_of(cat, "Ana has a cat named Miso."), _hit_of(new, "Ana moved to Porto.", supersedes=("x",)),
            _hit_of(new, "Ana moved last weekend."), _hit_of(old, "Ana lives in Lisbon.", superseded_by=("y",))]
    lines = [body for _, body in turn_lines(hits, {t.turn_id: t for t in (old, new, cat)})]
    assert len(lines) == 3 and cat.text in lines[0] and new.text in lines[1]  # rank order, each turn once
    assert lines[1].endswith("[current; replaces an earlier memory]") and "no longer current" in lines[2]
    assert "(turn) Ana: " in lines[0]
    sources = {t.turn_id: t for t in (old, new, cat)}
    reader = _Reader(None)
    compose_answer("Where does Ana live?", hits, sources, llm=reader, style="locomo", question_date=None,
                   time_summaries="2024-W18: Ana talked about moving", context="turns")
    memories = reader.prompts[-1].split("# Memories")[1].split("# Source turns")[0]
    assert memories.index(old.text) < memories.index(new.text) < memories.index(cat.text)  # shown oldest first
    assert not any(h.amu.text in reader.prompts[-1] for h in hits)  # no unit lines
    assert "talked about moving" not in reader.prompts[-1]  # no Time context
    full = len(reader.prompts[-1].split())
    cut = _Reader(full - len(old.text.split()) - 4)  # room for two of the three turns: the best two
    compose_answer("Where does Ana live?", hits, sources, llm=cut, style="locomo", question_date=None, context="turns")
    assert new.text in cut.prompts[-1] and cat.text in cut.prompts[-1] and old.text not in cut.prompts[-1]


def test_memory_answer_reads_turns_only_when_configured(chat_server):
    chat_server.responder = lambda body: "Miso"
    enc = HashingEncoder()
    config = Config(llm_model="m", llm_base_url=chat_server.base_url, llm_api_key="k", llm_max_retries=0,
                    llm_background=False, llm_summaries=False, extractor="rules", answer_memory_lines="all",
                    answer_context="turns")
    with Memory(None, config, text_encoder=enc, affect_tagger=VaderAffectTagger(enc)) as mem:
        mem.add(TURNS, space="u")
        units = [a.text for a in mem.list("u")]
        assert mem.answer("What is the name of Ana's cat?", space="u").text == "Miso"
    prompt = chat_server.requests[-1]["messages"][-1]["content"]
    assert f"(turn) Ana: {TURNS[0]['text']}" in prompt and not any(u in prompt for u in units if u != TURNS[0]["text"])
    assert "the memories above are the conversation turns themselves" in prompt
    with pytest.raises(ValueError, match="answer_context"):
        Config(answer_context="lines").validate()


def test_short_answer_style_sends_the_evidence_with_one_line_of_instructions(chat_server):
    """`answer_style="short"` (a small local reader): the evidence turns and the question under
    `prompts/answer_short.txt`, none of the seed prompt's instructions; the bench gives every system
    that style when the run's config asks for it, else the dataset's."""
    from etamem.bench.qa_context import answer_style

    chat_server.responder = lambda body: "Miso"
    enc = HashingEncoder()
    for context in ("turns", "packet"):  # no source-turn section: the turns themselves either way
        config = Config(llm_model="m", llm_base_url=chat_server.base_url, llm_api_key="k", llm_max_retries=0,
                        llm_background=False, llm_summaries=False, extractor="rules", answer_style="short",
                        answer_context=context)
        with Memory(None, config, text_encoder=enc, affect_tagger=VaderAffectTagger(enc)) as mem:
            mem.add(TURNS, space="u")
            assert mem.answer("What is the name of Ana's cat?", space="u").text == "Miso"
        prompt = chat_server.requests[-1]["messages"][-1]["content"]
        assert f"Ana: {TURNS[0]['text']}" in prompt and "Question: What is the name of Ana's cat?" in prompt
        assert "# How to answer" not in prompt and "source turns below" not in prompt and len(prompt.split()) < 120
    assert answer_style("locomo", config) == "short" and answer_style("locomo", Config()) == "locomo"
    assert answer_style("longmemeval", Config(answer_style="longmemeval")) == "longmemeval"
    with pytest.raises(ValueError, match="answer_style"):
        Config(answer_style="tiny").validate()
