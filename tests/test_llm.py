"""LLMClient through the real openai client against the local ChatServer."""
from __future__ import annotations

import dataclasses
import socket
import sqlite3
import threading

import pytest

from etamem.config import Config
from etamem.models.llm import LLMClient, LLMError, LLMJSONError, parse_json_strict
from etamem.records import StageCost
from llm_server import ChatServer, Reply

USER = [{"role": "user", "content": "one two three"}]  # 3 prompt "tokens"


def make_client(server, delays=None, **kw):
    """Client on `server`; every backoff delay is appended to `delays` instead of slept."""
    sink = delays if delays is not None else []
    kw.setdefault("max_retries", 5)
    kw.setdefault("backoff_s", 1.0)
    kw.setdefault("backoff_max_s", 30.0)
    kw.setdefault("timeout_s", 10.0)
    return LLMClient("test-model", base_url=server.base_url, api_key="k", sleep=sink.append, **kw)


# --- retries ------------------------------------------------------------------------
def test_retry_on_429_then_success(chat_server):
    chat_server.script(429, 429, "hello there")
    delays = []
    with make_client(chat_server, delays) as client:
        assert client.complete(USER, stage="answer") == "hello there"
    assert len(chat_server.requests) == 3
    assert delays == [1.0, 2.0]


def test_retry_on_5xx_backoff_capped(chat_server):
    chat_server.script(500, 502, 503, 500, "done")
    delays = []
    with make_client(chat_server, delays, backoff_s=0.5, backoff_max_s=3.0) as client:
        assert client.complete(USER, stage="answer") == "done"
    assert len(chat_server.requests) == 5
    assert delays == [0.5, 1.0, 2.0, 3.0]


def test_retry_after_header_honoured_and_capped(chat_server):
    chat_server.script(Reply(status=429, retry_after="3"), Reply(status=429, retry_after="100"), "ok")
    delays = []
    with make_client(chat_server, delays, backoff_max_s=10.0) as client:
        assert client.complete(USER, stage="answer") == "ok"
    assert delays == [3.0, 10.0]


def test_openai_builtin_retries_are_off(chat_server):
    chat_server.script(429, "would succeed on a hidden retry")
    delays = []
    with make_client(chat_server, delays, max_retries=0) as client:
        with pytest.raises(LLMError, match="1 attempt"):
            client.complete(USER, stage="answer")
    assert len(chat_server.requests) == 1
    assert delays == []


def test_non_retryable_400_raises_at_once(chat_server):
    chat_server.script(Reply(status=400, body={"error": {"message": "unknown parameter foo"}}), "never")
    delays = []
    with make_client(chat_server, delays) as client:
        with pytest.raises(LLMError) as info:
            client.complete(USER, stage="extract")
    msg = str(info.value)
    assert "400" in msg and "unknown parameter foo" in msg and "extract" in msg
    assert len(chat_server.requests) == 1
    assert delays == []


def test_retries_exhausted(chat_server):
    chat_server.script(500, 500, 500, "never served")
    delays = []
    with make_client(chat_server, delays, max_retries=2) as client:
        with pytest.raises(LLMError, match="after 3 attempt") as info:
            client.complete(USER, stage="answer")
    assert "500" in str(info.value)
    assert len(chat_server.requests) == 3
    assert chat_server.pending == 1
    assert delays == [1.0, 2.0]
    assert client.usage() == {}


def test_connection_error_retried():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    delays = []
    client = LLMClient("m", base_url=f"http://127.0.0.1:{port}/v1", api_key="k",
                       max_retries=2, sleep=delays.append, timeout_s=5.0)
    with client, pytest.raises(LLMError, match="after 3 attempt"):
        client.complete(USER, stage="answer")
    assert delays == [1.0, 2.0]


def test_timeout_retried(chat_server):
    chat_server.script(Reply(content="too slow", delay_s=1.5), "fast")
    delays = []
    with make_client(chat_server, delays, timeout_s=0.3) as client:
        assert client.complete(USER, stage="answer") == "fast"
    assert len(chat_server.requests) == 2
    assert delays == [1.0]


# --- request shape -------------------------------------------------------------------
def test_request_carries_model_and_params(chat_server):
    chat_server.script("x")
    with make_client(chat_server, temperature=0.0, max_tokens=77) as client:
        client.complete(USER, stage="answer", seed=7, stop=["END"])
    req = chat_server.requests[0]
    assert req["model"] == "test-model"
    assert req["messages"] == USER
    assert req["temperature"] == 0.0 and req["max_tokens"] == 77
    assert req["seed"] == 7 and req["stop"] == ["END"]


def test_server_also_serves_unprefixed_path():
    with ChatServer(responder=lambda req: "plain") as srv:
        client = LLMClient("m", base_url=srv.base_url[: -len("/v1")], api_key="k")
        with client:
            assert client.complete(USER, stage="answer") == "plain"
        assert len(srv.requests) == 1


# --- JSON ----------------------------------------------------------------------------
def test_json_repaired_on_second_reply(chat_server):
    chat_server.script('{"facts": [1, 2', '{"facts": [1, 2]}')
    with make_client(chat_server) as client:
        assert client.complete_json(USER, stage="extract") == {"facts": [1, 2]}
        assert client.usage()["extract"].calls == 2
    assert len(chat_server.requests) == 2
    repair = chat_server.requests[1]["messages"]
    assert repair[:1] == USER
    assert repair[1] == {"role": "assistant", "content": '{"facts": [1, 2'}
    assert repair[2]["role"] == "user" and "not valid JSON" in repair[2]["content"]


def test_json_invalid_twice_raises(chat_server):
    chat_server.script("Sure! Here are the facts.", "Sorry, still prose here")
    with make_client(chat_server) as client:
        with pytest.raises(LLMJSONError) as info:
            client.complete_json(USER, stage="extract")
    msg = str(info.value)
    assert "'extract'" in msg and "still prose here" in msg and "not valid JSON" in msg
    assert isinstance(info.value, LLMError)
    assert len(chat_server.requests) == 2


def test_fenced_json_parsed_without_repair(chat_server):
    chat_server.script('  ```json\n{"label": "CORRECT"}\n```\n')
    with make_client(chat_server) as client:
        assert client.complete_json(USER, stage="judge") == {"label": "CORRECT"}
    assert len(chat_server.requests) == 1


def test_parse_json_strict():
    assert parse_json_strict(' [1, "a"] ') == [1, "a"]
    assert parse_json_strict("```\n{}\n```") == {}
    for bad in ('Answer: {"a": 1}', '{"a": 1} trailing', "NaN", '{"a": Infinity}', "```json\n{} ```x"):
        with pytest.raises(ValueError):
            parse_json_strict(bad)


def untimed(cost: StageCost) -> StageCost:
    """`cost` without its seconds (wall time varies from run to run)."""
    return dataclasses.replace(cost, seconds=0.0)


# --- cache ---------------------------------------------------------------------------
def test_cache_hit_and_persistence(chat_server, tmp_path):
    path = tmp_path / "sub" / "dir" / "llm_cache.sqlite"
    chat_server.responder = lambda req: f"reply {len(chat_server.requests)}"
    with make_client(chat_server, cache_path=str(path)) as client:
        first = client.complete(USER, stage="answer")
        assert client.complete(USER, stage="answer") == first
        assert len(chat_server.requests) == 1
        client.complete(USER, stage="answer", temperature=0.5)  # other params: other key
        assert len(chat_server.requests) == 2
        assert untimed(client.usage()["answer"]) == StageCost(calls=2, cached_calls=1, prompt_tokens=6,
                                                              completion_tokens=4)
        assert client.usage()["answer"].seconds > 0  # two requests timed, the cached one not
    assert path.exists()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with make_client(chat_server, cache_path=str(path)) as again:
        assert again.complete(USER, stage="answer") == first
        assert again.usage() == {"answer": StageCost(calls=0, cached_calls=1)}
    assert len(chat_server.requests) == 2


def test_cache_keyed_by_model(chat_server, tmp_path):
    path = str(tmp_path / "c.sqlite")
    chat_server.script("from a", "from b")
    with make_client(chat_server, cache_path=path) as a:
        assert a.complete(USER, stage="answer") == "from a"
    with LLMClient("other-model", base_url=chat_server.base_url, api_key="k", cache_path=path) as b:
        assert b.complete(USER, stage="answer") == "from b"
    assert len(chat_server.requests) == 2


def test_cached_invalid_reply_goes_through_repair(chat_server, tmp_path):
    path = str(tmp_path / "c.sqlite")
    chat_server.script("not json", '{"ok": true}')
    with make_client(chat_server, cache_path=path) as client:
        assert client.complete_json(USER, stage="extract") == {"ok": True}
    with make_client(chat_server, cache_path=path) as client:
        assert client.complete_json(USER, stage="extract") == {"ok": True}
        assert client.usage()["extract"] == StageCost(calls=0, cached_calls=2)
    assert len(chat_server.requests) == 2


def test_no_cache_without_path(chat_server):
    with make_client(chat_server) as client:
        client.complete(USER, stage="answer")
        client.complete(USER, stage="answer")
    assert len(chat_server.requests) == 2


# --- accounting ----------------------------------------------------------------------
def test_usage_per_stage(chat_server):
    chat_server.script("alpha beta", "gamma", "delta epsilon zeta")
    answer_msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "why"}]
    with make_client(chat_server) as client:
        client.complete(USER, stage="extract")
        client.complete(USER, stage="extract")
        client.complete(answer_msgs, stage="answer")
        usage = client.usage()
        assert all(cost.seconds > 0 for cost in usage.values())
        assert {stage: untimed(cost) for stage, cost in usage.items()} == {
            "extract": StageCost(calls=2, cached_calls=0, prompt_tokens=6, completion_tokens=3),
            "answer": StageCost(calls=1, cached_calls=0, prompt_tokens=3, completion_tokens=3),
        }
        usage.clear()  # a copy: the client's counters are untouched
        assert client.usage()["answer"].calls == 1
        client.reset_usage()
        assert client.usage() == {}


def test_usage_thread_safe(chat_server):
    chat_server.responder = lambda req: "one two"
    with make_client(chat_server) as client:
        def work(i):
            for j in range(5):
                client.complete([{"role": "user", "content": f"q {i} {j}"}], stage="summarise")
        threads = [threading.Thread(target=work, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert untimed(client.usage()["summarise"]) == StageCost(calls=30, prompt_tokens=90, completion_tokens=60)
    assert len(chat_server.requests) == 30


# --- configuration -------------------------------------------------------------------
def test_from_config_none_without_model(monkeypatch):
    monkeypatch.delenv("ETAMEM_LLM_MODEL", raising=False)
    assert LLMClient.from_config(Config()) is None


def test_from_config_reads_environment(chat_server, monkeypatch, tmp_path):
    monkeypatch.setenv("ETAMEM_LLM_MODEL", "env-model")
    monkeypatch.setenv("OPENAI_BASE_URL", chat_server.base_url)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    cfg = Config(llm_max_retries=1, llm_max_tokens=99)
    client = LLMClient.from_config(cfg, cache_path=str(tmp_path / "fallback.sqlite"))
    assert client is not None
    with client:
        assert client.model == "env-model" and client.max_retries == 1
        assert client.cache_path == str(tmp_path / "fallback.sqlite")
        chat_server.script("hi")
        assert client.complete(USER, stage="answer") == "hi"
    req = chat_server.requests[0]
    assert req["model"] == "env-model" and req["max_tokens"] == 99


def test_from_config_prefers_config_values(chat_server, monkeypatch, tmp_path):
    monkeypatch.setenv("ETAMEM_LLM_MODEL", "env-model")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("OPENAI_API_KEY", "env-key")
    cache = str(tmp_path / "cfg.sqlite")
    cfg = Config(llm_model="cfg-model", llm_base_url=chat_server.base_url, llm_cache_path=cache)
    with LLMClient.from_config(cfg, cache_path=str(tmp_path / "ignored.sqlite")) as client:
        assert client.model == "cfg-model" and client.cache_path == cache
        assert client.complete(USER, stage="answer") == "ok"
    assert chat_server.requests[0]["model"] == "cfg-model"
