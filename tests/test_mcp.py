"""The MCP server (`etamem.serve.mcp_server`) with the `mcp` package's own client: in process (every
tool, tenancy, errors), over stdio (a real `etamem mcp` process with the default models) and
over streamable HTTP (a real process, the key per request)."""
from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time

import pytest

pytest.importorskip("mcp", reason="the MCP extra: pip install -e '.[mcp]'")
from mcp import Client  # noqa: E402

from conftest import HashingEncoder  # noqa: E402
from etamem import Memory, tenancy  # noqa: E402
from etamem.models.affect import VaderAffectTagger  # noqa: E402
from etamem.serve.mcp_server import build_server  # noqa: E402

TURNS = [{"turn_id": "t1", "session_id": "s1", "speaker": "Ana", "text": "I adopted a grey cat named Miso.",
          "timestamp": "2023-05-08T13:56"},
         {"turn_id": "t2", "session_id": "s1", "speaker": "Ana", "text": "I am training for the Berlin marathon.",
          "timestamp": "2023-05-08T13:57"}]


def payload(result) -> dict:
    assert not result.is_error, result.content[0].text
    return json.loads(result.content[0].text)


def error(result) -> str:
    assert result.is_error, result
    return result.content[0].text


@pytest.fixture
def memory(tmp_path):
    enc = HashingEncoder()
    mem = Memory(tmp_path / "store", text_encoder=enc, affect_tagger=VaderAffectTagger(enc))
    mem.add(TURNS, space="bob")
    yield mem
    mem.close()


def test_tools_in_process_with_tenancy(memory):
    key, record = tenancy.create_key(memory.store, ["alice"])

    async def session(server):
        async with Client(server) as c:
            names = {t.name for t in (await c.list_tools()).tools}
            assert names == {"add_memory", "search_memory", "get_context", "delete_memory", "answer", "memory_history"}
            added = payload(await c.call_tool("add_memory", {"space": "alice", "turns": TURNS}))
            assert added["units"] and added["units"][0]["text"].startswith("Ana adopted")
            hits = payload(await c.call_tool("search_memory", {"space": "alice", "query": "Which cat did Ana adopt?", "top_k": 2}))
            assert "Miso" in hits["hits"][0]["unit"]["text"] and len(hits["hits"]) <= 2
            assert {"supersedes", "superseded_by"} <= set(hits["hits"][0])
            first = hits["hits"][0]["unit"]["amu_id"]
            versions = payload(await c.call_tool("memory_history", {"space": "alice", "unit_id": first}))["versions"]
            assert [v["amu_id"] for v in versions] == [first] and versions[0]["status"] == "active"
            assert "no unit" in error(await c.call_tool("memory_history", {"space": "alice", "unit_id": "nope"}))
            ans = payload(await c.call_tool("answer", {"space": "alice", "question": "What is the cat called?"}))
            assert "Miso" in ans["text"] and ans["evidence"]
            by_query = payload(await c.call_tool("answer", {"space": "alice", "query": "What is the cat called?"}))
            assert by_query["text"] == ans["text"]  # `query`, as search_memory names it
            assert "query" in error(await c.call_tool("answer", {"space": "alice"}))
            assert "not one of the spaces" in error(await c.call_tool("search_memory", {"space": "bob", "query": "cat"}))
            assert "top_k" in error(await c.call_tool("search_memory", {"space": "alice", "query": "x", "top_k": 0}))
            assert "timestamp" in error(await c.call_tool(
                "add_memory", {"space": "alice", "turns": [dict(TURNS[0], turn_id="t3", timestamp="soon")]}))
            unit = hits["hits"][0]["unit"]["amu_id"]
            assert payload(await c.call_tool("delete_memory", {"space": "alice", "unit_id": unit}))["deleted"] == 1
            assert "no AMU" in error(await c.call_tool("delete_memory", {"space": "alice", "unit_id": unit}))
            assert payload(await c.call_tool("delete_memory", {"space": "alice"}))["deleted"] >= 1

    asyncio.run(session(build_server(memory, stdio_key=key)))
    assert memory.spaces() == ["bob"] and len(memory.turns("bob")) == 2  # bob untouched

    async def refused(server, what):
        async with Client(server) as c:
            assert "valid API key" in error(await c.call_tool("search_memory", {"space": "alice", "query": "x"})), what

    memory.store.revoke_api_key(record.key_id)
    asyncio.run(refused(build_server(memory, stdio_key=key), "revoked"))
    asyncio.run(refused(build_server(memory, stdio_key=None), "no key"))


def test_search_filters_and_metadata_as_tool_arguments(memory):
    """add_memory takes metadata (turns and messages); search_memory, get_context and answer take
    `filters` (top_k matching hits whenever that many match); a bad filter is a tool error naming
    the field."""
    key, _ = tenancy.create_key(memory.store, ["alice"])
    turns = [{"turn_id": f"f{i}", "session_id": f"w{i % 3}", "speaker": ["Ana", "Ben"][i % 2],
              "text": f"Note {i}: the garden needs water and the cat needs food.",
              "timestamp": f"2023-06-{i + 1:02d}T10:00", "metadata": {"channel": ["email", "chat"][i % 2], "n": i}}
             for i in range(10)]
    turns.append({"role": "user", "content": "The garden party is on Sunday.", "id": "m1",
                  "timestamp": "2023-07-01T10:00", "metadata": {"channel": "sms"}})

    async def session(server):
        async with Client(server) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            for name in ("search_memory", "get_context", "answer"):
                assert "filters" in tools[name].input_schema["properties"], name
            payload(await c.call_tool("add_memory", {"space": "alice", "turns": turns}))
            args = {"space": "alice", "query": "garden water cat", "top_k": 3,
                    "filters": {"speaker": "ben", "metadata": {"channel": "chat"}}}
            hits = payload(await c.call_tool("search_memory", args))["hits"]
            assert len(hits) == 3 and all(h["unit"]["speaker"] == "Ben" and h["metadata"]["channel"] == "chat"
                                          for h in hits)
            hits = payload(await c.call_tool("search_memory", {"space": "alice", "query": "garden",
                                                               "filters": {"role": "user"}}))["hits"]
            assert hits and all(h["metadata"] == {"channel": "sms"} for h in hits)
            hits = payload(await c.call_tool("search_memory", {
                "space": "alice", "query": "garden", "top_k": 20,
                "filters": {"since": "2023-06-03", "until": "2023-06-06"}}))["hits"]
            assert {h["source_turn_ids"][0] for h in hits} == {"f2", "f3", "f4"}
            text = payload(await c.call_tool("get_context", {"space": "alice", "query": "garden",
                                                             "filters": {"metadata": {"n": 4}}}))["context"]
            assert "Note 4" in text and "Note 5" not in text
            ans = payload(await c.call_tool("answer", {"space": "alice", "question": "garden?",
                                                       "filters": {"metadata": {"n": 6}}}))
            assert ans["evidence"] and all(h["source_turn_ids"] == ["f6"] for h in ans["evidence"])
            assert "filters.since" in error(await c.call_tool("search_memory", {
                "space": "alice", "query": "garden", "filters": {"since": "soon"}}))
            assert "filters" in error(await c.call_tool("search_memory", {
                "space": "alice", "query": "garden", "filters": {"colour": "red"}}))
            assert "metadata" in error(await c.call_tool("add_memory", {
                "space": "alice", "turns": [dict(turns[0], turn_id="x", metadata={"a": {"b": 1}})]}))

    asyncio.run(session(build_server(memory, stdio_key=key)))


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("ETAMEM_LLM_MODEL", "ETAMEM_ADMIN_KEY")}
    env.update(HF_HUB_OFFLINE="1", **extra)
    return env


def test_stdio_process_with_the_default_models(tmp_path):
    from mcp import StdioServerParameters

    store = tmp_path / "store"
    key = subprocess.run([sys.executable, "-m", "etamem", "keys", "create", str(store), "--spaces", "ana"],
                         capture_output=True, text=True, check=True, cwd=tmp_path).stdout.strip()
    params = StdioServerParameters(command=sys.executable, args=["-m", "etamem", "-q", "mcp", str(store)],
                                   env=_env(ETAMEM_API_KEY=key), cwd=str(tmp_path))

    async def session():
        async with Client(params, read_timeout_seconds=180) as c:
            payload(await c.call_tool("add_memory", {"space": "ana", "turns": TURNS}))
            hits = payload(await c.call_tool("search_memory", {"space": "ana", "query": "What is the cat's name?"}))
            assert "Miso" in hits["hits"][0]["unit"]["text"]
            assert "not one of the spaces" in error(await c.call_tool("search_memory", {"space": "x", "query": "a"}))

    asyncio.run(session())
    with Memory(store) as mem:
        assert [t.turn_id for t in mem.turns("ana")] == ["t1", "t2"]


def test_streamable_http_process_takes_the_key_per_request(tmp_path):
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    store = tmp_path / "store"
    key = subprocess.run([sys.executable, "-m", "etamem", "keys", "create", str(store), "--spaces", "ana"],
                         capture_output=True, text=True, check=True, cwd=tmp_path).stdout.strip()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "etamem", "-q", "mcp", str(store), "--transport", "http",
                             "--port", str(port)], env=_env(), cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}/mcp"

    async def call(headers, tool, args):
        async with httpx2.AsyncClient(headers=headers, timeout=180) as http:
            async with Client(streamable_http_client(url, http_client=http)) as c:
                return await c.call_tool(tool, args)

    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.2)
        auth = {"Authorization": f"Bearer {key}"}
        payload(asyncio.run(call(auth, "add_memory", {"space": "ana", "turns": TURNS})))
        hits = payload(asyncio.run(call(auth, "search_memory", {"space": "ana", "query": "What is the cat's name?"})))
        assert "Miso" in hits["hits"][0]["unit"]["text"]
        assert "valid API key" in error(asyncio.run(call({}, "search_memory", {"space": "ana", "query": "cat"})))
        assert "valid API key" in error(asyncio.run(call({"Authorization": "Bearer etm_x_y"}, "search_memory",
                                                         {"space": "ana", "query": "cat"})))
    finally:
        proc.terminate()
        proc.wait(60)
