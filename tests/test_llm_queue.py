"""LLM extraction behind the write (etamem.extraction.background): `add` answers with rule units
at once, the LLM's units replace them when they land, the queue survives a down server, a
reopen and a kill -9, and turns deleted meanwhile stay deleted. Against the scripted local
OpenAI-compatible server (tests/llm_server.py) through the real `openai` client."""
from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from conftest import HashingEncoder
from etamem import Config, Memory
from etamem.models.affect import VaderAffectTagger
from etamem.store.schema import QUEUED
from llm_server import ChatServer

TURNS = [
    {"turn_id": "a1", "session_id": "s1", "speaker": "Ana", "text": "I adopted a grey cat named Miso last week.",
     "timestamp": "2023-05-08T13:56:00"},
    {"turn_id": "a2", "session_id": "s1", "speaker": "Ben", "text": "I started a new job as a nurse in Lyon.",
     "timestamp": "2023-05-08T13:57:00"},
    {"turn_id": "a3", "session_id": "s2", "speaker": "Ana", "text": "My sister is visiting from Toronto in June.",
     "timestamp": "2023-05-20T02:21:00"},
]
_TURN = re.compile(r"Turn to process \((?P<speaker>[^,]+), [^)]*\):\n(?P<text>.*?)\n\nRules:", re.S)


def says(body) -> str:
    """The scripted model: each turn becomes one unit "<speaker> says: <text>" (grounded)."""
    prompt = body["messages"][-1]["content"]
    m = _TURN.search(prompt)
    if m is None:
        return json.dumps({"replaced": []})  # supersession and any other stage: nothing
    return json.dumps({"facts": [f"{m['speaker']} says: {m['text'].strip()}"]})


def memory(path, server, **cfg):
    encoder = HashingEncoder()
    url = server if isinstance(server, str) else server.base_url
    config = Config.from_dict({"llm_model": "test-model", "llm_base_url": url, "llm_api_key": "k",
                               "llm_max_retries": 0, "llm_backoff_s": 0.05, "llm_backoff_max_s": 0.2,
                               "llm_timeout_s": 5, "llm_summaries": False, **cfg})
    return Memory(path, config, text_encoder=encoder, affect_tagger=VaderAffectTagger(encoder))


class Nowhere:
    """An endpoint that is not there (a Memory that must not call the model)."""

    base_url = "http://127.0.0.1:9/v1"


def unit_ids(mem, space="u"):
    return sorted(a.amu_id for a in mem.list(space))


def test_add_answers_with_rule_units_and_the_llm_units_replace_them(tmp_path):
    gate = threading.Event()

    def slow(body):
        gate.wait(10)  # the model answers only once the test has looked at the rule units
        return says(body)

    with ChatServer(slow) as server, memory(tmp_path, server) as mem:
        t0 = time.perf_counter()
        made = mem.add(TURNS, space="u")
        assert time.perf_counter() - t0 < 5  # not the model's time
        assert made and all("#m" not in a.amu_id for a in made)  # the rule extractor's units
        assert "Miso" in mem.search("grey cat Miso", space="u")[0].amu.text
        stats = mem.stats("u")["extraction"]
        assert stats["queued_turns"] == 3 and stats["pending_turns"] == 0
        gate.set()
        landed = mem.flush("u", timeout=30)
        assert sorted(a.amu_id for a in landed) == ["a1#m0", "a2#m0", "a3#m0"]
        assert unit_ids(mem) == ["a1#m0", "a2#m0", "a3#m0"]  # no rule unit left beside them
        hit = mem.search("grey cat Miso", space="u")[0]
        assert hit.amu.text == "Ana says: Ana adopted a grey cat named Miso last week."  # the first person a model leaves is the speaker
        stats = mem.stats("u")["extraction"]
        assert stats["queued_turns"] == 0 and stats["queue"]["landed"] == 3
        assert stats["llm"]["extract"]["calls"] == 3 and stats["llm"]["extract"]["seconds"] > 0
        shape = mem.stats("u")["views"]
        assert shape["event"]["amus"] + shape["affect"]["amus"] == 3 and shape["time"]["amus"] == 3
    with memory(tmp_path, Nowhere) as again:  # the swap is in the store (not started: no call)
        assert unit_ids(again) == ["a1#m0", "a2#m0", "a3#m0"]
        assert again.stats("u")["extraction"]["queued_turns"] == 0


def test_a_down_server_leaves_turns_queued_and_searchable_until_it_is_back(tmp_path):
    server = ChatServer(says).start()
    url = server.base_url
    server.stop()
    with memory(tmp_path, url) as mem:
        rule = mem.add(TURNS, space="u")
        assert rule and mem.flush("u", timeout=20) == rule  # no reply: flush returns, the turns stay queued
        stats = mem.stats("u")["extraction"]
        assert stats["queued_turns"] == 3 and stats["queue"]["unavailable"] >= 1
        assert unit_ids(mem) == sorted(a.amu_id for a in rule)
        assert "Lyon" in mem.search("nurse job Lyon", space="u")[0].amu.text
        server.start()  # the same port again
        try:
            assert len(mem.flush("u", timeout=30)) == 3
            assert unit_ids(mem) == ["a1#m0", "a2#m0", "a3#m0"]
        finally:
            server.stop()


def test_a_reply_the_grounding_check_rejects_keeps_the_rule_units(tmp_path):
    def invents(body):
        return json.dumps({"facts": ["Zoltan flew to Reykjavik with 42 parrots."]})

    with ChatServer(invents) as server, memory(tmp_path, server) as mem:
        rule = mem.add(TURNS[:1], space="u")
        assert mem.flush("u", timeout=30) == rule
        assert unit_ids(mem) == [a.amu_id for a in rule]
        stats = mem.stats("u")["extraction"]
        assert stats["queue"]["kept_rules"] == 1 and stats["rejected_units"] == 1 and stats["queued_turns"] == 0


def test_a_turn_deleted_while_queued_stays_deleted(tmp_path):
    gate = threading.Event()

    def slow(body):
        gate.wait(10)
        return says(body)

    with ChatServer(slow) as server, memory(tmp_path, server) as mem:
        mem.add(TURNS[:2], space="u")
        mem.delete("u", turn_id="a1")
        gate.set()
        mem.flush("u", timeout=30)
        assert [t.turn_id for t in mem.turns("u")] == ["a2"]
        assert unit_ids(mem) == ["a2#m0"]
        assert not any("Miso" in h.amu.text for h in mem.search("grey cat Miso", space="u"))


def test_the_queue_resumes_in_the_next_process_that_opens_the_store(tmp_path):
    server = ChatServer(says).start()
    url = server.base_url
    server.stop()
    with memory(tmp_path, url) as mem:
        mem.add(TURNS, space="u")
        mem.add(TURNS[:1], space="v")
    server.start()
    try:
        with memory(tmp_path, server) as mem:  # no add: opening the store takes the queue up again
            deadline = time.monotonic() + 30
            while mem.store.count_queued("u") + mem.store.count_queued("v") and time.monotonic() < deadline:
                time.sleep(0.1)
            assert unit_ids(mem, "u") == ["a1#m0", "a2#m0", "a3#m0"] and unit_ids(mem, "v") == ["a1#m0"]
    finally:
        server.stop()


def test_background_off_extracts_in_the_write(tmp_path):
    with ChatServer(says) as server, memory(tmp_path, server, llm_background=False) as mem:
        made = mem.add(TURNS, space="u")
        assert [a.amu_id for a in made] == ["a1#0", "a2#0", "a3#0"] and made[0].text.startswith("Ana says:")
        assert mem.stats("u")["extraction"]["queue"] is None


def test_the_client_sends_one_request_at_a_time_by_default_and_the_wait_is_not_its_timeout(tmp_path):
    from etamem.models.llm import LLMClient

    inflight, most = [0], [0]
    lock = threading.Lock()

    def slow(body):
        with lock:
            inflight[0] += 1
            most[0] = max(most[0], inflight[0])
        time.sleep(0.6)
        with lock:
            inflight[0] -= 1
        return "ok"

    with ChatServer(slow) as server:
        config = Config.from_dict({"llm_model": "m", "llm_base_url": server.base_url, "llm_api_key": "k",
                                   "llm_timeout_s": 1.0, "llm_max_retries": 0})
        client = LLMClient.from_config(config)
        threads = [threading.Thread(target=client.complete, args=([{"role": "user", "content": f"q{i}"}],),
                                    kwargs={"stage": "answer"}) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert most[0] == 1  # the third waited ~1.2 s for a slot and still did not time out
        assert client.usage()["answer"].calls == 3


KILLED = textwrap.dedent("""
    import sys, json
    sys.path[:0] = {paths!r}
    from test_llm_queue import memory, TURNS
    class Remote:
        base_url = {url!r}
    mem = memory({path!r}, Remote)
    for i in range(40):
        mem.add({{"turn_id": f"k{{i}}", "session_id": f"s{{i // 10}}", "speaker": "Ana",
                 "text": f"I planted {{i}} tulips in the garden of house number {{i}}."}}, space="u")
    print("added", flush=True)
    mem.flush("u", timeout=120)
    print("flushed", flush=True)
""")


def test_kill_9_mid_queue_loses_nothing_and_doubles_nothing(tmp_path):
    served = []

    def slowish(body):
        served.append(1)
        time.sleep(0.05)
        return says(body)

    with ChatServer(slowish) as server:
        here = os.path.dirname(__file__)
        code = KILLED.format(paths=[here, os.path.dirname(here)], url=server.base_url, path=str(tmp_path))
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                                env={**os.environ, "HF_HUB_OFFLINE": "1"})
        assert proc.stdout.readline().strip() == "added"
        deadline = time.monotonic() + 60
        while len(served) < 12 and time.monotonic() < deadline:  # some turns landed, most still queued
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        db = sqlite3.connect(tmp_path / "memory.sqlite")
        states = dict(db.execute("SELECT turn_id, extracted FROM turns WHERE space='u'").fetchall())
        db.close()
        assert len(states) == 40 and set(states.values()) <= {1, QUEUED}
        assert 0 < sum(v == QUEUED for v in states.values()) < 40  # killed mid-queue
        with memory(tmp_path, server) as mem:
            mem.flush("u", timeout=60)
            units = mem.list("u")
            by_turn: dict[str, list[str]] = {}
            for a in units:
                by_turn.setdefault(a.source_turn_ids[0], []).append(a.amu_id)
            assert sorted(by_turn) == sorted(states)  # every turn has units ...
            assert all(ids == [f"{t}#m0"] for t, ids in by_turn.items())  # ... the LLM's, once
            assert mem.stats("u")["extraction"]["queued_turns"] == 0
            hits = mem.search("tulips house number 17", space="u", top_k=3)
            assert any(h.amu.amu_id == "k17#m0" for h in hits)


def test_a_format_6_store_opens_and_is_upgraded(tmp_path):
    from etamem.store.sql import FORMAT_VERSION

    with memory(tmp_path, Nowhere, llm_model=None, llm_base_url=None) as mem:
        mem.add(TURNS, space="u")
    db = sqlite3.connect(tmp_path / "memory.sqlite")
    db.execute("UPDATE meta SET value='6' WHERE key='format_version'")
    db.commit()
    db.close()
    with memory(tmp_path, Nowhere, llm_model=None, llm_base_url=None) as mem:
        assert mem.store.upgraded_from == 6 and mem.store.get_meta("format_version") == str(FORMAT_VERSION)
        assert len(mem.turns("u")) == 3 and mem.search("Miso", space="u")


@pytest.mark.parametrize("background", [True, False])
def test_flush_of_an_unknown_space_raises(tmp_path, background):
    from etamem.records import UnknownSpaceError

    with ChatServer(says) as server, memory(tmp_path, server, llm_background=background) as mem:
        with pytest.raises(UnknownSpaceError):
            mem.flush("nope")


def test_the_servers_metrics_show_the_queue_and_the_llm_cost(tmp_path):
    """`/metrics` (admin): the store's queued turns, the queue's outcomes and the client's calls,
    tokens and seconds per stage; no space named."""
    pytest.importorskip("fastapi", reason="the server extra: pip install -e '.[serve]'")
    from fastapi.testclient import TestClient

    from etamem.serve.app import create_app

    admin = "admin-key-for-tests-0123456789abcdef"
    gate = threading.Event()

    def slow(body):
        gate.wait(10)
        return says(body)

    with ChatServer(slow) as server, memory(tmp_path, server) as mem:
        app = create_app(mem, admin_key=admin, close_on_shutdown=False)
        with TestClient(app) as client:
            headers = {"Authorization": f"Bearer {admin}"}
            assert client.post("/v1/spaces/secret-space/turns", json={"turns": TURNS}, headers=headers).status_code == 200
            text = client.get("/metrics", headers=headers).text
            assert "etamem_llm_queued_turns 3" in text or "etamem_llm_queued_turns 2" in text  # one may be asked
            gate.set()
            mem.flush("secret-space")
            text = client.get("/metrics", headers=headers).text
    assert "etamem_llm_queued_turns 0" in text
    assert 'etamem_llm_queue_turns_total{outcome="landed"} 3' in text
    assert 'etamem_llm_calls_total{stage="extract"} 3' in text
    seconds = re.search(r'etamem_llm_seconds_total\{stage="extract"\} ([0-9.]+)', text)
    assert seconds and float(seconds.group(1)) > 0
    assert re.search(r'etamem_llm_prompt_tokens_total\{stage="extract"\} [1-9]', text)
    assert "secret" not in text
