"""Prompts that fit the model's context (etamem.models.tokens): the binary search against a
brute-force reference, the server's tokenizer or the estimate, and the two callers that build long
prompts — `Memory.answer` keeps the best evidence that fits, LLM extraction drops context turns
and leaves a turn too long for the model to the rules."""
from __future__ import annotations

import json
import logging
import random
import re

import pytest

from conftest import HashingEncoder
from etamem import Config, Memory
from etamem.models.affect import VaderAffectTagger
from etamem.models.llm import LLMClient
from etamem.models.tokens import BYTES_PER_TOKEN, TokenCounter, estimate_tokens, fit, pack


def test_fit_finds_the_largest_prefix_that_fits_as_brute_force_does():
    rng = random.Random(5)
    for _ in range(300):
        sizes = [rng.randint(1, 50) for _ in range(rng.randint(0, 30))]
        head = rng.randint(0, 40)
        budget = rng.randint(0, 600)

        def render(k, sizes=sizes, head=head):
            return "x" * (head + sum(sizes[:k]))

        prompt, kept = fit(render, len(sizes), budget, len)
        best = max((k for k in range(len(sizes) + 1) if len(render(k)) <= budget), default=0)
        assert kept == best and prompt == render(best)


def test_pack_puts_evidence_first_then_the_supplement_lines_that_fit_as_brute_force_does():
    rng = random.Random(6)
    for _ in range(300):
        sizes = [rng.randint(1, 50) for _ in range(rng.randint(0, 20))]
        lines = ["y" * rng.randint(1, 60) for _ in range(rng.randint(0, 6))]
        head, budget = rng.randint(0, 40), rng.randint(0, 800)

        def render(k, extra, sizes=sizes, head=head):
            return "x" * (head + sum(sizes[:k])) + extra

        prompt, kept, kept_lines = pack(render, len(sizes), lines, budget, len)
        if len(render(len(sizes), "\n".join(lines))) <= budget:
            assert (kept, kept_lines) == (len(sizes), len(lines))
            continue
        best = max((k for k in range(len(sizes) + 1) if len(render(k, "")) <= budget), default=0)
        best_lines = max((j for j in range(len(lines) + 1) if len(render(best, "\n".join(lines[:j]))) <= budget),
                         default=0)
        assert (kept, kept_lines) == (best, best_lines)
        assert prompt == render(best, "\n".join(lines[:best_lines]))


def test_the_estimate_errs_long():
    assert estimate_tokens("") == 0
    text = "The quick brown fox jumps over the lazy dog. " * 20
    assert estimate_tokens(text) >= len(text.split())  # never fewer tokens than words here
    assert estimate_tokens("猫" * 30) == 30  # 3 UTF-8 bytes each
    assert BYTES_PER_TOKEN <= 4


def test_the_counter_asks_the_servers_tokenizer_or_estimates_for_good(chat_server):
    counter = TokenCounter(chat_server.base_url, "m")
    assert counter.count("one two three four") == estimate_tokens("one two three four")  # 404: estimate
    assert counter.exact is False
    chat_server.tokenizer = True
    assert counter.count("one two three four") == estimate_tokens("one two three four")  # not asked again
    exact = TokenCounter(chat_server.base_url, "m")
    assert exact.count("one two three four") == 4 and exact.exact is True
    assert chat_server.token_counts == [4]
    assert TokenCounter("http://127.0.0.1:9/v1", "m").count("a b") == estimate_tokens("a b")  # down: estimate
    assert TokenCounter(None, "m").exact is False


def _memory(server, **cfg) -> Memory:
    enc = HashingEncoder()
    config = Config(llm_model="m", llm_base_url=server.base_url, llm_api_key="k", llm_max_retries=0,
                    llm_background=False, llm_summaries=False, supersession="rules", **cfg)
    return Memory(None, config, text_encoder=enc, affect_tagger=VaderAffectTagger(enc))


TURNS = [{"turn_id": f"t{i}", "session_id": "s1", "speaker": "Ana", "timestamp": f"2024-05-08T10:{i:02d}:00",
          "text": f"I visited the harbour museum number {i} and liked the old ships there very much."}
         for i in range(30)]


@pytest.mark.parametrize("context", ["packet", "turns"])
def test_answer_keeps_the_best_evidence_that_fits_the_context(chat_server, caplog, context):
    chat_server.tokenizer = True

    def reply(body):
        prompt = body["messages"][-1]["content"]
        if "Turn to process" in prompt:
            turn = prompt.split("Turn to process")[-1]  # not a context turn's museum
            return json.dumps({"facts": [re.search(r"I visited the harbour museum number \d+", turn)[0]
                                         .replace("I visited", "Ana visited")]})
        return "museum"

    chat_server.responder = reply
    with _memory(chat_server, top_k=30, answer_context=context) as unbounded:
        unbounded.add(TURNS, space="u")
        full = unbounded.answer("Which harbour museum did Ana visit?", space="u")
    full_words = len(chat_server.requests[-1]["messages"][-1]["content"].split())
    chat_server.requests.clear()
    with _memory(chat_server, top_k=30, llm_context_tokens=full_words // 2 + 200, llm_max_tokens=100,
                 answer_context=context) as mem:
        mem.add(TURNS, space="u")
        with caplog.at_level(logging.WARNING, logger="etamem.answering"):
            ans = mem.answer("Which harbour museum did Ana visit?", space="u")
    prompt = chat_server.requests[-1]["messages"][-1]["content"]
    assert ans.llm_used and len(full.hits) == len(ans.hits) == 30
    assert len(prompt.split()) <= full_words // 2 + 200 - 100 - 16  # within the budget, by the server's count
    def shown(h):  # a memory line ("packet") or the hit's source turn ("turns")
        return h.amu.text if context == "packet" else f"Ana: {h.source_turns[0].text}"
    kept = [shown(h) for h in ans.hits if shown(h) in prompt]
    assert 0 < len(kept) < 30
    assert kept == [shown(h) for h in ans.hits[:len(kept)]]  # the best ones, in rank order
    assert "fit the model's context" in caplog.text


def test_answer_leaves_out_time_context_before_any_evidence(chat_server):
    """A budget that holds every memory but not all of the Time context: the summaries give way
    (the old order, summaries fixed and memories cut, lost evidence instead)."""
    chat_server.tokenizer = True
    chat_server.responder = lambda body: "museum"
    turns = [{**t, "session_id": f"s{i % 3}", "timestamp": f"2024-05-{8 + i % 3:02d}T10:{i:02d}:00"}
             for i, t in enumerate(TURNS)]
    question = "Which harbour museum did Ana visit?"

    def section(prompt):
        return prompt.split("# Time context")[1].split("\n# ")[0].splitlines()[1:]
    with _memory(chat_server, top_k=30, extractor="rules", answer_context="packet") as unbounded:
        unbounded.add(turns, space="u")
        unbounded.answer(question, space="u")
    full = chat_server.requests[-1]["messages"][-1]["content"]
    time_lines = [line for line in section(full) if line.strip()]
    assert len(time_lines) >= 3
    cut = len(full.split()) - len(" ".join(time_lines).split()) // 2
    with _memory(chat_server, top_k=30, extractor="rules", llm_context_tokens=cut + 100 + 16,
                 llm_max_tokens=100, answer_context="packet") as mem:
        mem.add(turns, space="u")
        ans = mem.answer(question, space="u")
    prompt = chat_server.requests[-1]["messages"][-1]["content"]
    assert len(prompt.split()) <= cut
    assert len(ans.hits) == 30 and all(h.amu.text in prompt for h in ans.hits)  # every memory kept
    kept = [line for line in section(prompt) if line.strip()]
    assert len(kept) < len(time_lines) and kept == time_lines[:len(kept)]


def test_extraction_drops_context_turns_then_leaves_a_turn_too_long_to_the_rules(chat_server, caplog):
    chat_server.tokenizer = True
    chat_server.responder = lambda body: json.dumps({"facts": []})
    long_turn = {"turn_id": "long", "session_id": "s1", "speaker": "Ana", "timestamp": "2024-05-08T11:00:00",
                 "text": "I walked along the river to the old mill. " * 200}
    # each context turn adds 16 words to the 445 of a prompt without one: 476 words hold two of them
    with _memory(chat_server, llm_context_tokens=476 + 200 + 16, llm_max_tokens=200) as mem:
        mem.add(TURNS[:5], space="u")
        asked = len(chat_server.requests)
        assert asked == 5
        fifth = chat_server.requests[4]["messages"][-1]["content"]
        assert TURNS[3]["text"] in fifth and TURNS[2]["text"] in fifth and TURNS[1]["text"] not in fifth
        with caplog.at_level(logging.WARNING, logger="etamem.extraction.extractors"):
            mem.add(long_turn, space="u")
        assert len(chat_server.requests) == asked  # never sent: it would be a 400
        assert "does not fit the model's context" in caplog.text
        stats = mem.stats("u")["extraction"]
        assert stats["fallback_turns"] == 1 and stats["turns"] == 6
        assert any(a.source_turn_ids == ("long",) for a in mem.list("u"))  # the rules' units: nothing lost
    for request in chat_server.requests:
        assert len(request["messages"][-1]["content"].split()) <= 476


def test_a_client_without_a_known_context_sends_the_prompt_as_built(chat_server):
    client = LLMClient("m", base_url=chat_server.base_url, api_key="k")
    assert client.prompt_budget() is None
    sized = LLMClient("m", base_url=chat_server.base_url, api_key="k", context_tokens=4096, max_tokens=512)
    assert sized.prompt_budget() == 4096 - 512 - 16 and sized.prompt_budget(100) == 4096 - 100 - 16


def test_the_context_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("ETAMEM_LLM_CONTEXT_TOKENS", "4096")
    assert Config().resolved_llm_context_tokens() == 4096
    assert Config(llm_context_tokens=2048).resolved_llm_context_tokens() == 2048
    monkeypatch.setenv("ETAMEM_LLM_CONTEXT_TOKENS", "lots")
    with pytest.raises(ValueError, match="ETAMEM_LLM_CONTEXT_TOKENS"):
        Config().resolved_llm_context_tokens()


@pytest.mark.parametrize("base_url,expected", [
    ("http://127.0.0.1:8080/v1", 600.0), ("http://localhost:8000/v1", 600.0), ("http://[::1]:9000/v1", 600.0),
    ("https://api.openai.com/v1", 60.0), ("http://10.0.0.5:8000/v1", 60.0), (None, 60.0),
])
def test_the_request_timeout_follows_the_endpoint(monkeypatch, base_url, expected):
    """A CPU server on this machine takes 10-100 s a call: a loopback endpoint gets 600 s, a
    remote one 60 s; a value given is kept."""
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert Config(llm_base_url=base_url).resolved_llm_timeout_s() == expected
    assert Config(llm_base_url=base_url, llm_timeout_s=5).resolved_llm_timeout_s() == 5
    with pytest.raises(ValueError, match="llm_timeout_s"):
        Config(llm_timeout_s=-1).validate()


def test_the_client_takes_the_resolved_timeout(monkeypatch):
    from etamem.models.llm import LLMClient

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with LLMClient.from_config(Config(llm_model="m", llm_base_url="http://127.0.0.1:1/v1")) as client:
        assert client.timeout_s == 600.0
