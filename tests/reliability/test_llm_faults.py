"""LLM faults during extraction (README, "Using it": what happens when the LLM fails).

Against the local OpenAI-compatible `ChatServer`, through the real `openai` client in
`LLMClient`:
- no reply (timeouts, a 429 storm or 5xx longer than the retries, a rejected request, a dropped
  connection, a body that is not JSON, the endpoint down): the batch stays pending, nothing of it
  is written or extracted by rules, later sessions wait, `add`/`flush` return what they made and
  the next `flush` extracts the pending turns with the LLM (none lost, none twice);
- an unusable reply (cut-off JSON, wrong form, a refusal): that turn goes to the rule extractor,
  counted;
- neither the response cache nor the bench's `CachingExtractor` keeps a bad reply or a fallback.
"""
import contextlib
import json
import logging
import re
import sqlite3
from datetime import datetime, timedelta, timezone

import pytest

from etamem import Config, Memory
from etamem.bench.ablations import CachingExtractor
from etamem.extraction.extractors import LLMExtractor, RuleExtractor
from etamem.models.affect import VaderAffectTagger
from etamem.models.encoders import CachedEncoder
from etamem.models.llm import LLMClient, LLMJSONError, LLMUnavailable
from etamem.records import Turn
from llm_server import Reply

T0 = datetime(2023, 5, 8, 13, 0, tzinfo=timezone.utc)
TURN_RE = re.compile(r"Turn to process \([^)]*\):\n(.*?)\n\nRules:", re.S)
RETRIES = 1
TIMEOUT_S = 0.25
SPACE = "u"

NO_REJECTIONS = {"rejected_units": 0, "rejected_copied_example": 0, "rejected_invented_entity": 0,
                 "rejected_swapped_speaker": 0, "rejected_other_turn": 0}


def session(sid: str, n: int, day: int = 0, marker: str = "") -> list[dict]:
    return [{"session_id": sid, "speaker": ("Ana", "Ben")[i % 2], "turn_id": f"{sid}:{i}",
             "text": f"Ana adopted a grey cat in {sid} number {i}{marker}.",
             "timestamp": (T0 + timedelta(days=day, minutes=i)).isoformat()} for i in range(n)]


def turn_of(request: dict) -> str | None:
    """The turn an extraction request is about (None for other prompts, e.g. summaries)."""
    m = TURN_RE.search(request["messages"][0]["content"])
    return None if m is None else m.group(1).strip()


class Endpoint:
    """Responder: `{"facts": ["LLM: <turn text>"]}` for extraction prompts, "A summary." for the
    others. `bad` is answered (to the first request and to the repair) for turns containing
    "BAD"; while `fault` is set, it makes the reply of every extraction request whose turn
    contains `only` (every one when `only` is empty)."""

    def __init__(self, bad: str | None = None):
        self.bad = bad
        self.fault = None
        self.only = ""

    def __call__(self, request: dict):
        text = turn_of(request)
        if text is None:
            return "A summary."
        if self.fault is not None and self.only in text:
            return self.fault()
        if self.bad is not None and "BAD" in text:
            return self.bad
        return json.dumps({"facts": [f"LLM: {text}"]})


def make_memory(tmp_path, server, encoder, **cfg) -> Memory:
    """A memory that extracts with the LLM inside `add` (the background queue's faults are in
    tests/test_llm_queue.py)."""
    enc = CachedEncoder(encoder)
    cfg.setdefault("llm_background", False)
    config = Config(llm_model="m", llm_base_url=server.base_url, llm_api_key="k", llm_timeout_s=TIMEOUT_S,
                    llm_max_retries=RETRIES, llm_backoff_s=0.01, llm_backoff_max_s=0.02, **cfg)
    return Memory(tmp_path / "store", config, text_encoder=enc, affect_tagger=VaderAffectTagger(enc))


def rows(path, sql: str) -> list[tuple]:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return conn.execute(sql).fetchall()


def cached_replies(mem: Memory) -> list[str]:
    return [r[0] for r in rows(mem.path / "llm_cache.sqlite", "SELECT response FROM responses")]


def extraction(mem: Memory) -> dict:
    """The space's extraction counters (without the queue's and the client's, which these tests
    do not use)."""
    stats = mem.stats(SPACE)["extraction"]
    assert stats.pop("queue") is None and stats.pop("queued_turns") == 0
    stats.pop("llm", None)
    return stats


def rule_units(turn: dict) -> list[str]:
    return RuleExtractor().extract(Turn(turn_id=turn["turn_id"], session_id=turn["session_id"], speaker=turn["speaker"],
                                        text=turn["text"], timestamp=T0))


# --- no reply: the batch stays pending -------------------------------------------------------
FAULTS = {
    "timeout": lambda: Reply(content='{"facts": []}', delay_s=4 * TIMEOUT_S),
    "429 storm": lambda: Reply(status=429, retry_after="0"),
    "500": lambda: Reply(status=500),
    "503": lambda: Reply(status=503),
    "401 rejected": lambda: Reply(status=401),
    "dropped connection": lambda: Reply(drop=True),
    "body not JSON": lambda: Reply(raw="<html>502 Bad Gateway</html>"),
    "endpoint down": None,  # the server is stopped: connection refused
}
ATTEMPTS = {"401 rejected": 1, "endpoint down": 0}  # requests the server sees for one failed turn


@pytest.mark.parametrize("fault", list(FAULTS))
def test_no_reply_leaves_the_batch_pending_until_the_llm_is_back(fault, chat_server, hashing_encoder, tmp_path,
                                                                caplog):
    ep = chat_server.responder = Endpoint()
    turns = session("s1", 3)
    with make_memory(tmp_path, chat_server, hashing_encoder) as mem:
        if FAULTS[fault] is None:
            chat_server.stop()
        else:
            ep.fault = FAULTS[fault]
        with caplog.at_level(logging.WARNING, logger="etamem.memory"):
            assert mem.add(turns, space=SPACE) == []  # the write is acknowledged, nothing extracted
        assert "extraction deferred" in caplog.text and "3 turns stay pending" in caplog.text
        # only the first turn was tried (with its retries); nothing written, no rule units
        tried = [turn_of(r) for r in chat_server.requests]
        assert len(tried) == ATTEMPTS.get(fault, RETRIES + 1) and set(tried) <= {turns[0]["text"]}
        assert mem.store.count_pending(SPACE) == 3 and mem.store.count_amus(SPACE) == 0
        assert len(mem.turns(SPACE)) == 3
        assert mem.flush(SPACE) == []  # still no reply: still pending
        assert extraction(mem) == {"extractor": "LLMExtractor", "turns": 0, "llm_units": 0, "fallback_turns": 0,
                                   "fallback_units": 0,
                                   "unusable_turns": 0, "unavailable": 2, "pending_turns": 3, **NO_REJECTIONS}
        assert mem.retrieve("grey cat", space=SPACE).pending_turns == 3

        if FAULTS[fault] is None:  # the endpoint comes back
            chat_server.start()
        ep.fault = None
        new = mem.flush(SPACE)
        assert [a.text for a in new] == [f"LLM: {t['text']}" for t in turns]
        assert [a.source_turn_ids for a in new] == [(t["turn_id"],) for t in turns]
        assert mem.flush(SPACE) == []
        assert mem.store.count_pending(SPACE) == 0 and mem.store.count_amus(SPACE) == 3
        assert sorted(a.amu_id for a in mem.list(SPACE)) == sorted(f"{t['turn_id']}#0" for t in turns)
        assert extraction(mem) == {"extractor": "LLMExtractor", "turns": 3, "llm_units": 3, "fallback_turns": 0,
                                   "fallback_units": 0,
                                   "unusable_turns": 0, "unavailable": 2, "pending_turns": 0, **NO_REJECTIONS}
        assert sorted(cached_replies(mem)) == sorted(json.dumps({"facts": [f"LLM: {t['text']}"]}) for t in turns)


def test_a_429_storm_keeps_session_order_and_returns_what_was_made(chat_server, hashing_encoder, tmp_path):
    """Three sessions in one add; the LLM answers 429 to every request about session s2 for
    longer than the retries: s1 is extracted and returned, s2 stays pending and s3 waits
    behind it (not extracted although the LLM would answer); after the storm the next add
    extracts s2, s3 and the new s4 in order, each turn once."""
    ep = chat_server.responder = Endpoint()
    s1, s2, s3, s4 = session("s1", 2, 0), session("s2", 3, 1), session("s3", 2, 2), session("s4", 1, 3)
    with make_memory(tmp_path, chat_server, hashing_encoder) as mem:
        ep.fault, ep.only = (lambda: Reply(status=429, retry_after="0")), " s2 "
        made = mem.add(s1 + s2 + s3, space=SPACE)
        assert [a.text for a in made] == [f"LLM: {t['text']}" for t in s1]
        asked = [turn_of(r) for r in chat_server.requests if turn_of(r) is not None]
        assert asked == [t["text"] for t in s1] + [s2[0]["text"]] * (RETRIES + 1)  # s3 never asked
        assert mem.store.count_pending(SPACE) == len(s2) + len(s3)
        assert sorted(mem.store.open_sessions(SPACE)) == ["s2", "s3"]  # s1 ended, s2/s3 wait
        assert mem.add(s4, space=SPACE) == []  # storm still on: s4 queues behind s2 and s3
        assert mem.store.count_pending(SPACE) == len(s2) + len(s3) + len(s4)
        assert extraction(mem)["unavailable"] == 2

        ep.fault = None
        later = mem.flush(SPACE)
        assert [a.text for a in later] == [f"LLM: {t['text']}" for t in s2 + s3 + s4]
        assert mem.store.count_pending(SPACE) == 0 and mem.store.open_sessions(SPACE) == ["s4"]
        everything = mem.list(SPACE)
        assert [a.source_turn_ids[0] for a in everything] == [t["turn_id"] for t in s1 + s2 + s3 + s4]
        assert extraction(mem)["fallback_turns"] == 0 and extraction(mem)["turns"] == 8


# --- an unusable reply: that turn goes to the rules ---------------------------------------------
BAD_REPLIES = {
    "cut-off JSON": '{"facts": ["Ana adopted a gr',
    "facts not a list": '{"facts": 3}',
    "a list of numbers": "[1, 2]",
    "no facts list": '{"answer": "Ana adopted a cat."}',
    "refusal": "I can't help with that.",
}


@pytest.mark.parametrize("bad", list(BAD_REPLIES))
def test_an_unusable_reply_is_extracted_by_rules_counted_and_not_cached(bad, chat_server, hashing_encoder, tmp_path):
    reply = BAD_REPLIES[bad]
    chat_server.responder = Endpoint(bad=reply)
    turns = session("s1", 3)
    turns[1]["text"] = "Ben sold his old red bike to BAD Carl."
    with make_memory(tmp_path, chat_server, hashing_encoder) as mem:
        made = mem.add(turns, space=SPACE)
        fallback = rule_units(turns[1])
        assert fallback and not any(u.startswith("LLM:") for u in fallback)
        assert [a.text for a in made] == [f"LLM: {turns[0]['text']}", *fallback, f"LLM: {turns[2]['text']}"]
        assert mem.store.count_pending(SPACE) == 0
        assert extraction(mem) == {"extractor": "LLMExtractor", "turns": 3, "llm_units": 2, "fallback_turns": 1,
                                   "fallback_units": len(fallback),
                                   "unusable_turns": 1, "unavailable": 0, "pending_turns": 0, **NO_REJECTIONS}
        not_json = bad in ("cut-off JSON", "refusal")
        assert [turn_of(r) for r in chat_server.requests].count(turns[1]["text"]) == (2 if not_json else 1)
        # the response cache keeps the two good replies only: a rerun asks again for the bad turn
        assert sorted(cached_replies(mem)) == sorted(json.dumps({"facts": [f"LLM: {t['text']}"]})
                                                     for t in (turns[0], turns[2]))


# --- the caches --------------------------------------------------------------------------------
def test_caching_extractor_keeps_neither_fallbacks_nor_failed_turns(chat_server, hashing_encoder, tmp_path):
    ep = chat_server.responder = Endpoint(bad="I can't help with that.")
    llm = LLMClient("m", base_url=chat_server.base_url, api_key="k", timeout_s=TIMEOUT_S, max_retries=RETRIES,
                    backoff_s=0.01, cache_path=str(tmp_path / "llm_cache.sqlite"))
    cache_path = tmp_path / "extractions.sqlite"
    caching = CachingExtractor(LLMExtractor(llm, fallback=RuleExtractor()), str(cache_path), "llm:m:locomo")
    enc = CachedEncoder(hashing_encoder)
    turns = session("s1", 5)
    turns[1]["text"] = "Ben sold his old red bike to BAD Carl."

    def cached_units():
        return sorted(u for (blob,) in rows(cache_path, "SELECT units FROM extractions") for u in json.loads(blob))

    with Memory(None, text_encoder=enc, affect_tagger=VaderAffectTagger(enc), llm=llm, extractor=caching) as mem:
        made = mem.add(turns[:3], space=SPACE)
        assert [a.text for a in made] == [f"LLM: {turns[0]['text']}", *rule_units(turns[1]),
                                          f"LLM: {turns[2]['text']}"]
        assert cached_units() == sorted(f"LLM: {turns[i]['text']}" for i in (0, 2))  # not the fallback
        ep.fault = lambda: Reply(status=500)
        assert mem.add(turns[3:], space=SPACE) == []
        assert cached_units() == sorted(f"LLM: {turns[i]['text']}" for i in (0, 2))  # nothing for the outage
        assert mem.store.count_pending(SPACE) == 2
        stats = extraction(mem)
        assert stats["extractor"] == "CachingExtractor" and stats["fallback_turns"] == 1
        assert stats["unavailable"] == 1 and stats["pending_turns"] == 2
        ep.fault = None
        assert [a.text for a in mem.flush(SPACE)] == [f"LLM: {t['text']}" for t in turns[3:]]
        assert cached_units() == sorted(f"LLM: {turns[i]['text']}" for i in (0, 2, 3, 4))
        # the same turns again: the LLM's units come from the cache, the fallback turn is asked again
        n = len(chat_server.requests)
        again = [caching.extract_result(Turn(turn_id=t["turn_id"], session_id="s1", speaker=t["speaker"],
                                             text=t["text"], timestamp=datetime.fromisoformat(t["timestamp"])),
                                        [Turn(turn_id=p["turn_id"], session_id="s1", speaker=p["speaker"],
                                              text=p["text"], timestamp=datetime.fromisoformat(p["timestamp"]))
                                         for p in turns[:i]])
                 for i, t in enumerate(turns[:2])]
        assert again[0] == ([f"LLM: {turns[0]['text']}"], False) and again[1].fallback
        assert caching.hits == 1 and len(chat_server.requests) == n + 2  # the bad turn: reply + repair


USER = [{"role": "user", "content": "Extract the facts."}]


def facts_list(value):
    if not isinstance(value, dict) or not isinstance(value.get("facts"), list):
        raise ValueError("facts: not a list")
    return value


def test_response_cache_keeps_only_usable_replies(chat_server, tmp_path):
    path = str(tmp_path / "llm_cache.sqlite")

    def keys():
        return len(rows(path, "SELECT key FROM responses"))

    with LLMClient("m", base_url=chat_server.base_url, api_key="k", max_retries=0, cache_path=path) as client:
        chat_server.script("Sure, here you go!", "Still not JSON")
        with pytest.raises(LLMJSONError, match="not valid JSON"):
            client.complete_json(USER, stage="extract")
        assert keys() == 0
        chat_server.script('{"facts": 3}')
        with pytest.raises(LLMJSONError, match="expected form"):
            client.complete_json(USER, stage="extract", validate=facts_list)
        assert keys() == 0 and len(chat_server.requests) == 3
        chat_server.script("Sure, here you go!", 500)  # an unusable reply, then no reply to the repair
        with pytest.raises(LLMUnavailable):
            client.complete_json(USER, stage="extract")
        assert keys() == 0 and len(chat_server.requests) == 5
        chat_server.script('{"facts": ["Ana has a cat."]}')
        assert client.complete_json(USER, stage="extract") == {"facts": ["Ana has a cat."]}
        assert client.complete_json(USER, stage="extract") == {"facts": ["Ana has a cat."]}  # now cached
        assert keys() == 1 and len(chat_server.requests) == 6
        # an unusable reply a cache from an older version kept is dropped, not replayed forever
        other = [{"role": "user", "content": "Other turn."}]
        chat_server.script("prose kept by an old cache")
        client.complete(other, stage="extract")  # plain text: cached as before
        assert keys() == 2
        chat_server.script("more prose")
        with pytest.raises(LLMJSONError):
            client.complete_json(other, stage="extract")  # the cached prose, then a failed repair
        assert keys() == 1 and len(chat_server.requests) == 8


def test_a_bench_build_with_turns_left_pending_fails_and_is_built_again(chat_server, hashing_encoder, tmp_path):
    """The benchmark never evaluates a store with pending turns: `build` raises, `is_built` says
    no, and the next build (LLM back) makes it whole."""
    from etamem.bench.data import BenchConversation
    from etamem.bench.run_stores import Workbench

    ep = chat_server.responder = Endpoint()
    llm = LLMClient("m", base_url=chat_server.base_url, api_key="k", timeout_s=TIMEOUT_S, max_retries=RETRIES,
                    backoff_s=0.01, cache_path=str(tmp_path / "llm_cache.sqlite"))
    wb = Workbench(Config(), tmp_path / "bench", text_encoder=hashing_encoder,
                   affect_tagger=VaderAffectTagger(hashing_encoder), llm=llm)
    conv = BenchConversation("c1", session("s1", 2, 0) + session("s2", 2, 1), [])
    try:
        ep.fault, ep.only = (lambda: Reply(status=503)), " s2 "
        with pytest.raises(LLMUnavailable, match="2 turns not extracted"):
            wb.build("amu", conv)
        assert not wb.is_built("amu", conv)
        ep.fault = None
        rec = wb.build("amu", conv)
        assert wb.is_built("amu", conv) and rec["amus"] == 4
        assert [a.text for a in wb.memory("amu").list("c1")] == [f"LLM: {t['text']}" for t in conv.turns]
    finally:
        wb.close()
        llm.close()
