"""Chat-shaped memory through the interfaces (issue 29): OpenAI-style `{"role", "content"}`
messages without ids or timestamps go in over HTTP, MCP and `etamem ingest --format chat`, and
come back as hits whose `source_turns` hold the message; the context route / tool gives a packet
holding it. HTTP and MCP in process over a real store with the hashing encoder (as
`test_serve.py` / `test_mcp.py`); the ingest with the default offline models (as
`test_package_cli.py`)."""
from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone

import pytest

from conftest import HashingEncoder
from etamem import Memory, tenancy
from etamem.models.affect import VaderAffectTagger

MESSAGES = [{"role": "user", "content": "I adopted a grey cat named Miso."},
            {"role": "assistant", "content": [{"type": "text", "text": "Miso is a lovely name for a cat."}]},
            {"role": "user", "content": "I am training for the Berlin marathon."}]
QUERY = "What is the name of the cat?"
CAT = "I adopted a grey cat named Miso."


def fast_memory(path) -> Memory:
    enc = HashingEncoder()
    return Memory(path, text_encoder=enc, affect_tagger=VaderAffectTagger(enc))


def check_source_turns(hits: list[dict]) -> None:
    """Every hit carries its source turns, in the order of its source turn ids, each with an
    aware ISO timestamp."""
    assert hits
    for h in hits:
        turns = h["source_turns"]
        assert [t["turn_id"] for t in turns] == h["source_turn_ids"], h
        for t in turns:
            assert set(t) == {"turn_id", "session_id", "speaker", "timestamp", "text"}
            assert datetime.fromisoformat(t["timestamp"]).tzinfo is not None


def the_message(hits: list[dict], text: str = CAT) -> dict:
    """The source turn holding `text`, checked to be a user message stamped about now."""
    found = [t for h in hits for t in h["source_turns"] if t["text"] == text]
    assert found, [t["text"] for h in hits for t in h["source_turns"]]
    turn = found[0]
    assert turn["speaker"] == "user" and turn["turn_id"] and turn["session_id"]
    assert abs(datetime.fromisoformat(turn["timestamp"]) - datetime.now(timezone.utc)) < timedelta(minutes=10)
    return turn


# --- HTTP ----------------------------------------------------------------------------------------
@pytest.fixture
def http(tmp_path):
    """(client, memory, key for space 'ana', admin key)."""
    pytest.importorskip("fastapi", reason="the server extra: pip install -e '.[serve]'")
    from fastapi.testclient import TestClient

    from etamem.serve.app import create_app

    admin = "admin-key-for-chat-tests-0123456789abc"
    mem = fast_memory(tmp_path / "store")
    key, _ = tenancy.create_key(mem.store, ["ana"])
    with TestClient(create_app(mem, admin_key=admin, close_on_shutdown=False)) as client:
        yield client, mem, key, admin
    mem.close()


def bearer(key: str) -> dict:
    return {"Authorization": f"Bearer {key}"}


def test_http_messages_without_ids_or_times_round_trip(http):
    client, mem, key, _ = http
    r = client.post("/v1/spaces/ana/turns", json={"turns": MESSAGES}, headers=bearer(key))
    assert r.status_code == 200 and r.json()["units"], r.text
    stored = mem.turns("ana")
    assert [t.speaker for t in stored] == ["user", "assistant", "user"]
    assert len({t.session_id for t in stored}) == 1  # one open session by default
    r = client.post("/v1/spaces/ana/search", json={"query": QUERY, "top_k": 5}, headers=bearer(key))
    assert r.status_code == 200, r.text
    hits = r.json()["hits"]
    check_source_turns(hits)
    turn = the_message(hits)
    assert turn["turn_id"] in {t.turn_id for t in stored}
    r = client.post("/v1/spaces/ana/context", json={"query": QUERY, "top_k": 5}, headers=bearer(key))
    assert r.status_code == 200, r.text
    body = r.json()
    assert isinstance(body["context"], str) and "Miso" in body["context"]
    check_source_turns(body["hits"])
    r = client.post("/v1/spaces/ana/answer", json={"question": QUERY}, headers=bearer(key))
    assert r.status_code == 200 and r.json()["hits"], r.text
    check_source_turns(r.json()["hits"])


def test_http_mixed_shapes_retries_and_errors(http):
    """Turns and messages in one list; a message with an id is stored once however often it is
    sent; the engine's field names and the JSON error body are kept for messages too."""
    client, mem, key, _ = http
    items = [{"speaker": "Ana", "text": "My sister Lea lives in Porto."},
             {"role": "user", "content": "I bought a red bicycle.", "id": "m1"},
             {"role": "system", "content": "You are a helpful assistant."}]  # skipped
    for _ in range(2):
        r = client.post("/v1/spaces/ana/turns", json={"turns": items}, headers=bearer(key))
        assert r.status_code == 200, r.text
    texts = [t.text for t in mem.turns("ana")]
    assert texts.count("I bought a red bicycle.") == 1 and "You are a helpful assistant." not in texts
    assert texts.count("My sister Lea lives in Porto.") == 2  # no turn_id: a new turn each time
    for bad, field in (({"role": "user", "content": "hi", "timestamp": "soon"}, "turns[1].timestamp"),
                       ({"role": "user", "content": 5}, "turns[1].content"),
                       ({"role": "user", "content": "hi", "colour": "red"}, "turns[1]")):
        r = client.post("/v1/spaces/ana/turns", json={"turns": [MESSAGES[0], bad]}, headers=bearer(key))
        assert r.status_code == 422, r.text
        assert r.json()["error"]["code"] == "invalid_request" and r.json()["error"]["field"] == field, r.text
    r = client.post("/v1/spaces/ana/turns", json={"turns": [MESSAGES[0], "not an object"]}, headers=bearer(key))
    assert r.status_code == 422 and r.json()["error"]["field"] == "turns[1]", r.text


def test_http_context_route_tenancy_and_an_empty_space(http):
    client, mem, key, admin = http
    assert client.post("/v1/spaces/ana/context", json={"query": QUERY}).status_code == 401
    r = client.post("/v1/spaces/bob/context", json={"query": QUERY}, headers=bearer(key))
    assert r.status_code == 403 and r.json()["error"]["field"] == "space"
    r = client.post("/v1/spaces/ana/context", json={"query": QUERY}, headers=bearer(key))  # nothing stored yet
    assert r.status_code == 200 and r.json()["hits"] == [] and isinstance(r.json()["context"], str), r.text
    r = client.post("/v1/spaces/ana/context", json={"query": QUERY, "top_k": 0}, headers=bearer(key))
    assert r.status_code == 422 and r.json()["error"]["field"] == "top_k"
    assert mem.spaces() == []


def test_http_startup_loads_the_models(tmp_path):
    pytest.importorskip("fastapi", reason="the server extra: pip install -e '.[serve]'")
    from fastapi.testclient import TestClient

    from etamem.serve.app import create_app

    mem = fast_memory(tmp_path / "store")
    calls = []
    warm = mem.warm
    mem.warm = lambda: calls.append("warm") or warm()
    app = create_app(mem, close_on_shutdown=False)
    assert calls == []
    with TestClient(app) as client:
        assert calls == ["warm"]  # at startup, before any request
        assert client.get("/health").status_code == 200
    assert calls == ["warm"]
    mem.close()


def test_uvicorn_accepts_connections_only_once_the_models_are_loaded(tmp_path):
    """The lifespan startup (where `warm` runs) ends before uvicorn binds its port."""
    pytest.importorskip("uvicorn", reason="the server extra: pip install -e '.[serve]'")
    import socket
    import threading
    import time

    import uvicorn

    from etamem.serve.app import create_app

    mem = fast_memory(tmp_path / "store")
    warm, warmed = mem.warm, []
    mem.warm = lambda: (time.sleep(1.0), warm(), warmed.append(time.monotonic()))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(mem), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.02)
        accepted = time.monotonic()
        assert warmed and warmed[0] <= accepted
    finally:
        server.should_exit = True
        thread.join(30)


def test_openapi_describes_both_item_shapes(http):
    client = http[0]
    spec = client.get("/openapi.json").json()
    schemas = spec["components"]["schemas"]
    body = spec["paths"]["/v1/spaces/{space}/turns"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    turns = schemas[body["$ref"].split("/")[-1]]["properties"]["turns"]
    shapes = {ref["$ref"].split("/")[-1] for ref in turns["items"]["anyOf"]}
    assert shapes == {"TurnItem", "MessageItem"}
    assert set(schemas["TurnItem"]["required"]) == {"speaker", "text"}
    assert {"session_id", "timestamp", "turn_id", "extra"} <= set(schemas["TurnItem"]["properties"])
    assert set(schemas["MessageItem"]["required"]) == {"role", "content"}
    assert {"name", "id", "timestamp", "created_at", "session_id"} <= set(schemas["MessageItem"]["properties"])
    assert "/v1/spaces/{space}/context" in spec["paths"]


# --- MCP -----------------------------------------------------------------------------------------
def test_mcp_messages_without_ids_or_times_round_trip(tmp_path):
    pytest.importorskip("mcp", reason="the MCP extra: pip install -e '.[mcp]'")
    from mcp import Client

    from etamem.serve.mcp_server import build_server

    mem = fast_memory(tmp_path / "store")
    key, _ = tenancy.create_key(mem.store, ["ana"])

    def payload(result) -> dict:
        assert not result.is_error, result.content[0].text
        return json.loads(result.content[0].text)

    async def session():
        async with Client(build_server(mem, stdio_key=key)) as c:
            tools = {t.name: t for t in (await c.list_tools()).tools}
            assert "get_context" in tools
            schema = tools["add_memory"].input_schema
            items = schema["properties"]["turns"]["items"]["anyOf"]
            shapes = {ref["$ref"].split("/")[-1]: schema["$defs"][ref["$ref"].split("/")[-1]] for ref in items}
            assert {"role", "content", "name", "id", "timestamp"} <= set(shapes["MessageItem"]["properties"])
            assert {"speaker", "text", "session_id", "turn_id", "extra"} <= set(shapes["TurnItem"]["properties"])
            added = payload(await c.call_tool("add_memory", {"space": "ana", "turns": MESSAGES}))
            assert added["units"]
            hits = payload(await c.call_tool("search_memory", {"space": "ana", "query": QUERY, "top_k": 5}))["hits"]
            check_source_turns(hits)
            the_message(hits)
            ctx = payload(await c.call_tool("get_context", {"space": "ana", "query": QUERY}))
            assert "Miso" in ctx["context"]
            evidence = payload(await c.call_tool("answer", {"space": "ana", "question": QUERY}))["evidence"]
            check_source_turns(evidence)
            # a message with an id and parts is stored once; unset fields are not sent as nulls
            item = {"role": "user", "id": "m1", "name": "Ana",
                    "content": [{"type": "text", "text": "I bought a red bicycle."}, {"type": "image_url"}]}
            for _ in range(2):
                payload(await c.call_tool("add_memory", {"space": "ana", "turns": [item]}))
            result = await c.call_tool("get_context", {"space": "bob", "query": QUERY})
            assert result.is_error and "not one of the spaces" in result.content[0].text

    asyncio.run(session())
    stored = mem.turns("ana")
    assert [t.speaker for t in stored] == ["user", "assistant", "user", "user"]
    assert stored[-1].turn_id == "m1" and stored[-1].text == "I bought a red bicycle."
    mem.close()


# --- etamem ingest --format chat -----------------------------------------------------------------
def test_read_chat_names_file_and_line(tmp_path):
    from etamem.ingest.datasets import read_chat, read_conversations

    p = tmp_path / "chat.jsonl"
    p.write_text(json.dumps(MESSAGES[0]) + "\n" + json.dumps({**MESSAGES[2], "space": "b"}) + "\n")
    convs = list(read_conversations(p, "chat"))
    assert [(c.space, c.turns) for c in convs] == [("default", [MESSAGES[0]]), ("b", [MESSAGES[2]])]
    assert convs[1].labels == [f"{p}:2: message"]
    p.write_text(json.dumps(MESSAGES[0]) + "\n{oops\n")
    with pytest.raises(ValueError, match=r"chat.jsonl:2:2: invalid JSON"):
        list(read_chat(p))


def test_cli_ingest_chat(tmp_path, capsys, monkeypatch):
    from etamem.cli import main
    from etamem.serve.app import hit_json

    monkeypatch.delenv("ETAMEM_LLM_MODEL", raising=False)
    chat, store = tmp_path / "chat.jsonl", tmp_path / "store"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(MESSAGES[0]) + "\n" + json.dumps({"role": "user", "content": "hi", "timestamp": "soon"})
                   + "\n")
    run = ["-q", "ingest", "--format", "chat", "--store", str(store), "--no-progress"]
    assert main([*run, str(bad)]) == 2  # the whole file is checked first: nothing stored
    err = capsys.readouterr().err
    assert "bad.jsonl:2: message.timestamp" in err, err
    chat.write_text("".join(json.dumps(m) + "\n" for m in MESSAGES) + "\n"
                    + json.dumps({"role": "user", "content": "I live in Lyon.", "space": "other"}) + "\n")
    assert main([*run, str(chat)]) == 0
    out = capsys.readouterr().out
    assert "default: turns 3 (added 3, already present 0)" in out and "other: turns 1" in out, out
    with Memory(store) as mem:
        assert mem.spaces() == ["default", "other"] and len(mem.turns("default")) == 3  # none from bad.jsonl
        hits = [hit_json(h) for h in mem.search(QUERY, "default", top_k=5)]
        check_source_turns(hits)
        the_message(hits)
        assert "Miso" in mem.context(QUERY, "default")
