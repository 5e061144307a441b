"""The HTTP API (`etamem.serve.app`): tenancy on every route (own space, another's, no key, revoked
key), enforced by the engine itself; JSON errors naming the field; body limits; key management;
metrics. In-process through Starlette's TestClient over a real store (SQLite, real FAISS/BM25)
with a text-dependent hashing encoder; `test_serve_process.py` runs the real server process."""
from __future__ import annotations

from urllib.parse import quote

import pytest

pytest.importorskip("fastapi", reason="the server extra: pip install -e '.[serve]'")
from fastapi.testclient import TestClient  # noqa: E402

from conftest import HashingEncoder  # noqa: E402
from etamem import Memory, tenancy  # noqa: E402
from etamem.models.affect import VaderAffectTagger  # noqa: E402
from etamem.serve.app import create_app  # noqa: E402

ADMIN = "admin-key-for-tests-0123456789abcdef"
TURNS = [{"turn_id": "t1", "session_id": "s1", "speaker": "Ana", "text": "I adopted a grey cat named Miso.",
          "timestamp": "2023-05-08T13:56"},
         {"turn_id": "t2", "session_id": "s1", "speaker": "Ben", "text": "I am training for the Berlin marathon.",
          "timestamp": "2023-05-08T13:57"}]


def fast_memory(path) -> Memory:
    enc = HashingEncoder()
    return Memory(path, text_encoder=enc, affect_tagger=VaderAffectTagger(enc))


@pytest.fixture
def served(tmp_path):
    """(client, memory, keys): spaces 'alice' and 'bob' with two turns each; keys for each, and a
    revoked one for alice."""
    mem = fast_memory(tmp_path / "store")
    for space in ("alice", "bob"):
        mem.add(TURNS, space=space)
    keys = {name: tenancy.create_key(mem.store, [name])[0] for name in ("alice", "bob")}
    revoked, record = tenancy.create_key(mem.store, ["alice"])
    mem.store.revoke_api_key(record.key_id)
    keys["revoked"] = revoked
    keys["admin"] = ADMIN
    app = create_app(mem, admin_key=ADMIN, max_request_bytes=64 << 10, close_on_shutdown=False)
    with TestClient(app) as client:
        yield client, mem, keys
    mem.close()


def auth(key):
    return {} if key is None else {"Authorization": f"Bearer {key}"}


def routes(mem, space: str) -> list[tuple[str, str, dict | None]]:
    """Every memory route on `space` (ids from alice's space: the same texts and ids in bob's)."""
    unit = quote(mem.list("alice")[0].amu_id, safe="")  # unit ids hold '#' and ':'
    return [
        ("POST", f"/v1/spaces/{space}/turns", {"turns": [dict(TURNS[0], turn_id="t9", text="New fact about tea.")]}),
        ("POST", f"/v1/spaces/{space}/search", {"query": "What pet does Ana have?"}),
        ("POST", f"/v1/spaces/{space}/answer", {"question": "What pet does Ana have?"}),
        ("POST", f"/v1/spaces/{space}/context", {"query": "What pet does Ana have?"}),
        ("GET", f"/v1/spaces/{space}/units", None),
        ("GET", f"/v1/spaces/{space}/units/{unit}", None),
        ("GET", f"/v1/spaces/{space}/history/{unit}", None),
        ("GET", f"/v1/spaces/{space}/stats", None),
        ("DELETE", f"/v1/spaces/{space}/units/{unit}", None),
        ("DELETE", f"/v1/spaces/{space}/turns/t2", None),
        ("DELETE", f"/v1/spaces/{space}?confirm={space}", None),
    ]


ROUTE_NAMES = ["add", "search", "answer", "context", "list", "get", "history", "stats", "delete-unit", "delete-turn", "delete-space"]


@pytest.mark.parametrize("route", range(len(ROUTE_NAMES)), ids=ROUTE_NAMES)
@pytest.mark.parametrize("who,expected", [("alice", 200), ("bob", 403), (None, 401), ("revoked", 401),
                                          ("etm_nothere_abc", 401), ("admin", 200)])
def test_every_route_by_caller(served, route, who, expected):
    client, mem, keys = served
    before = {s: (len(mem.turns(s)), len(mem.list(s))) for s in ("alice", "bob")}
    method, path, body = routes(mem, "alice")[route]
    r = client.request(method, path, json=body, headers=auth(keys.get(who, who)))
    assert r.status_code == expected, r.text
    if expected != 200:
        err = r.json()["error"]
        assert err["code"] == {401: "unauthorized", 403: "forbidden"}[expected] and err["message"]
        assert "Miso" not in r.text
        if expected == 401:
            assert r.headers["www-authenticate"] == "Bearer"
        after = {s: (len(mem.turns(s)) if s in mem.spaces() else 0, len(mem.list(s)) if s in mem.spaces() else 0)
                 for s in ("alice", "bob")}
        assert after == before  # a refused request changed nothing
    # bob's space is never touched by any caller of alice's routes
    assert [t.turn_id for t in mem.turns("bob")] == ["t1", "t2"]


def test_spaces_lists_only_the_callers(served):
    client, _, keys = served
    assert client.get("/v1/spaces", headers=auth(keys["alice"])).json() == {"spaces": ["alice"]}
    assert client.get("/v1/spaces", headers=auth(keys["admin"])).json() == {"spaces": ["alice", "bob"]}
    assert client.get("/v1/spaces").status_code == 401
    assert client.get("/health").json()["status"] == "ok"  # the only route without a key


def test_the_engine_refuses_another_space_whatever_the_route_does(served):
    """A route that forgot its check: the engine call itself runs in the caller's scope."""
    _, mem, _ = served
    with tenancy.scope(["alice"]):
        assert mem.spaces() == ["alice"]
        assert mem.search("cat", "alice")
        for call in (lambda: mem.search("cat", "bob"), lambda: mem.list("bob"), lambda: mem.turns("bob"),
                     lambda: mem.add(TURNS, space="bob"), lambda: mem.delete("bob"), lambda: mem.stats("bob"),
                     lambda: mem.get(mem.list("alice")[0].amu_id, "bob"), lambda: mem.answer("cat?", space="bob"),
                     lambda: mem.flush("bob"), lambda: mem.end_session("bob"), lambda: mem.reindex()):
            with pytest.raises(tenancy.SpaceForbidden):
                call()
        with tenancy.scope(["alice", "bob"]):  # nested scopes only narrow
            with pytest.raises(tenancy.SpaceForbidden):
                mem.list("bob")
    assert mem.spaces() == ["alice", "bob"] and len(mem.list("bob")) == len(mem.list("alice"))


def test_errors_are_json_naming_the_field(served):
    client, _, keys = served
    h = auth(keys["alice"])
    r = client.post("/v1/spaces/alice/turns", json={"turns": [dict(TURNS[0], turn_id="x", timestamp="soon")]},
                    headers=h)
    assert r.status_code == 422 and r.json()["error"]["field"] == "turns[0].timestamp", r.text
    r = client.post("/v1/spaces/alice/search", json={"query": "cat", "top_k": 0}, headers=h)
    assert r.status_code == 422 and r.json()["error"]["field"] == "top_k"
    r = client.post("/v1/spaces/alice/turns", json={"turns": "not a list"}, headers=h)
    assert r.status_code == 422 and r.json()["error"]["field"] == "turns"
    r = client.post("/v1/spaces/alice/turns", content=b"{not json", headers={**h, "content-type": "application/json"})
    assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request"
    r = client.get("/v1/spaces/alice/units/nope", headers=h)
    assert r.status_code == 404 and "no AMU 'nope'" in r.json()["error"]["message"]
    admin = auth(keys["admin"])
    r = client.get("/v1/spaces/carol/units", headers=admin)
    assert r.status_code == 404 and r.json()["error"]["field"] == "space"
    r = client.post("/v1/spaces/carol/search", json={"query": "cat"}, headers=admin)  # nothing stored yet: no hits
    assert r.status_code == 200 and r.json()["hits"] == [], r.text
    r = client.post("/v1/spaces/alice/turns", json={"turns": [dict(TURNS[0], text="other text")]}, headers=h)
    assert r.status_code == 422 and "already stored" in r.json()["error"]["message"]
    r = client.post("/v1/spaces/alice/turns", json={"turns": TURNS}, headers=h)  # a retry: idempotent
    assert r.status_code == 200 and r.json()["units"]


def test_request_bodies_over_the_limit_get_413(served):
    client, mem, keys = served
    big = {"turns": [dict(TURNS[0], turn_id="big", text="word " * 20_000)]}  # ~100 KB > 64 KB
    r = client.post("/v1/spaces/alice/turns", json=big, headers=auth(keys["alice"]))
    assert r.status_code == 413 and r.json()["error"]["code"] == "too_large"

    def chunks():  # no Content-Length: counted while streaming
        for _ in range(20):
            yield b" " * 8192

    r = client.post("/v1/spaces/alice/turns", content=chunks(),
                    headers={**auth(keys["alice"]), "content-type": "application/json"})
    assert r.status_code == 413
    assert "big" not in {t.turn_id for t in mem.turns("alice")}


def test_keys_are_managed_by_the_admin_and_revocation_takes_effect(served):
    client, mem, keys = served
    assert client.post("/v1/keys", json={"spaces": ["carol"]}, headers=auth(keys["alice"])).status_code == 403
    r = client.post("/v1/keys", json={"spaces": ["carol"], "note": "carol's agent"}, headers=auth(ADMIN))
    assert r.status_code == 200, r.text
    carol = r.json()["key"]
    assert client.post("/v1/spaces/carol/turns", json={"turns": TURNS}, headers=auth(carol)).status_code == 200
    assert client.post("/v1/spaces/alice/search", json={"query": "cat"}, headers=auth(carol)).status_code == 403
    listed = client.get("/v1/keys", headers=auth(ADMIN)).json()["keys"]
    assert {k["key_id"]: k["spaces"] for k in listed}[r.json()["key_id"]] == ["carol"]
    assert carol not in str(listed) and carol.split("_", 2)[2] not in str(mem.store.api_keys())  # hashes only
    assert client.delete(f"/v1/keys/{r.json()['key_id']}", headers=auth(ADMIN)).status_code == 200
    assert client.post("/v1/spaces/carol/search", json={"query": "cat"}, headers=auth(carol)).status_code == 401
    assert client.delete("/v1/keys/nope", headers=auth(ADMIN)).status_code == 404


def test_metrics_count_routes_and_time_operations(served):
    client, _, keys = served
    client.post("/v1/spaces/alice/search", json={"query": "cat"}, headers=auth(keys["alice"]))
    client.post("/v1/spaces/bob/search", json={"query": "cat"}, headers=auth(keys["alice"]))
    assert client.get("/metrics", headers=auth(keys["alice"])).status_code == 403
    text = client.get("/metrics", headers=auth(ADMIN)).text
    assert 'etamem_requests_total{route="/v1/spaces/{space}/search",method="POST",status="200"} 1' in text
    assert 'etamem_refused_total{status="403"}' in text
    assert 'etamem_operation_seconds_count{operation="search_memory"} 2' in text  # the refused one too
    assert "bob" not in text and "alice" not in text  # no space names in metrics


def test_operations_make_opentelemetry_spans(served):
    sdk = pytest.importorskip("opentelemetry.sdk.trace", reason="the test extra: opentelemetry-sdk")
    from opentelemetry import trace
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = sdk.TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)  # once per process; other tests do not read spans
    if trace.get_tracer_provider() is not provider:
        pytest.skip("another tracer provider is already set in this process")
    client, _, keys = served
    client.post("/v1/spaces/alice/search", json={"query": "cat"}, headers=auth(keys["alice"]))
    client.post("/v1/spaces/alice/turns", json={"turns": TURNS}, headers=auth(keys["alice"]))
    spans = [s for s in exporter.get_finished_spans() if "gen_ai.operation.name" in (s.attributes or {})]
    assert [s.name for s in spans] == ["search_memory", "update_memory"]  # (FastAPI makes spans of its own too)
    assert spans[0].attributes["gen_ai.operation.name"] == "search_memory"
    assert not any("alice" in str(v) or "cat" == v for s in spans for v in s.attributes.values())


@pytest.fixture(params=["sqlite", "postgres"])
def shared_target(request, tmp_path):
    return str(tmp_path / "shared") if request.param == "sqlite" else request.getfixturevalue("pg_url")


def test_two_servers_on_one_store_see_each_others_writes_within_one_request(shared_target):
    """Two server instances (each its own Memory, as two processes would have) on one store: a
    write answered by one is found by the other's very next request, a delete likewise."""
    first, second = fast_memory(shared_target), fast_memory(shared_target)
    key, _ = tenancy.create_key(first.store, ["alice"])
    a = TestClient(create_app(first, admin_key=ADMIN, close_on_shutdown=False))
    b = TestClient(create_app(second, admin_key=ADMIN, close_on_shutdown=False))
    with a, b:
        assert a.post("/v1/spaces/alice/turns", json={"turns": TURNS[:1]}, headers=auth(key)).status_code == 200
        hits = b.post("/v1/spaces/alice/search", json={"query": "grey cat Miso"}, headers=auth(key)).json()["hits"]
        assert "Miso" in hits[0]["unit"]["text"]
        assert b.post("/v1/spaces/alice/turns", json={"turns": TURNS[1:]}, headers=auth(key)).status_code == 200
        hits = a.post("/v1/spaces/alice/search", json={"query": "Berlin marathon"}, headers=auth(key)).json()["hits"]
        assert "marathon" in hits[0]["unit"]["text"]
        assert b.delete("/v1/spaces/alice/turns/t1", headers=auth(key)).json()["deleted"] == 1
        units = a.get("/v1/spaces/alice/units", headers=auth(key)).json()["units"]
        assert [u["source_turn_ids"] for u in units] == [["t2"]]
    first.close()
    second.close()


def test_a_lost_database_connection_is_a_503_to_retry(served, monkeypatch):
    from etamem.store.pg_pool import ConnectionLost

    client, mem, keys = served

    def lost(*args, **kwargs):
        raise ConnectionLost("the connection to PostgreSQL was lost; the write was rolled back.")

    monkeypatch.setattr(mem, "retrieve", lost)
    r = client.post("/v1/spaces/alice/search", json={"query": "cat"}, headers=auth(keys["alice"]))
    assert r.status_code == 503 and r.headers["Retry-After"] == "1"
    assert r.json()["error"]["code"] == "store_unavailable" and "Retry the request" in r.json()["error"]["message"]


def test_search_filters_and_metadata(served):
    """Metadata comes in with turns and messages and goes out on hits; `filters` on search,
    context and answer keeps only matching units (top_k of them when that many match); bad
    filters are 422 naming the field."""
    client, mem, keys = served
    h = auth(keys["alice"])
    turns = [{"turn_id": f"f{i}", "session_id": f"w{i % 3}", "speaker": ["Ana", "Ben"][i % 2],
              "text": f"Note {i}: the garden needs water and the cat needs food.",
              "timestamp": f"2023-06-{i + 1:02d}T10:00", "metadata": {"channel": ["email", "chat"][i % 2], "n": i}}
             for i in range(12)]
    turns.append({"role": "user", "content": "The garden party is on Sunday.", "id": "m1", "session_id": "w9",
                  "timestamp": "2023-07-01T10:00", "metadata": {"channel": "sms"}})
    assert client.post("/v1/spaces/alice/turns", json={"turns": turns}, headers=h).status_code == 200
    body = {"query": "garden water cat", "top_k": 4, "filters": {"speaker": "Ben", "metadata": {"channel": "chat"}}}
    hits = client.post("/v1/spaces/alice/search", json=body, headers=h).json()["hits"]
    assert len(hits) == 4 and all(x["unit"]["speaker"] == "Ben" and x["metadata"]["channel"] == "chat" for x in hits)
    body = {"query": "garden", "top_k": 10, "filters": {"role": "user"}}
    hits = client.post("/v1/spaces/alice/search", json=body, headers=h).json()["hits"]
    assert hits and all(x["metadata"] == {"channel": "sms"} for x in hits)
    body = {"query": "garden", "top_k": 20, "filters": {"session_id": ["w0", "w1"], "since": "2023-06-03",
                                                        "until": "2023-06-08"}}
    hits = client.post("/v1/spaces/alice/search", json=body, headers=h).json()["hits"]
    want = {t["turn_id"] for t in turns[2:7] if t.get("session_id") in ("w0", "w1")}
    assert {x["source_turn_ids"][0] for x in hits} == want
    ctx = client.post("/v1/spaces/alice/context", json={"query": "garden", "filters": {"metadata": {"n": 5}}},
                      headers=h).json()
    assert [x["source_turn_ids"] for x in ctx["hits"]] == [["f5"]] and "Note 5" in ctx["context"]
    ans = client.post("/v1/spaces/alice/answer", json={"question": "garden?", "filters": {"metadata": {"n": 7}}},
                      headers=h).json()
    assert ans["hits"] and all(x["source_turn_ids"] == ["f7"] for x in ans["hits"])
    for bad, field in [({"since": "soon"}, "filters.since"), ({"colour": "red"}, "filters"),
                       ({"metadata": {"a": [1]}}, "filters.metadata.a"), ("Ben", "filters")]:
        r = client.post("/v1/spaces/alice/search", json={"query": "garden", "filters": bad}, headers=h)
        assert r.status_code == 422 and r.json()["error"]["field"] == field, (bad, r.text)
    r = client.post("/v1/spaces/alice/turns", json={"turns": [dict(turns[0], turn_id="x", metadata={"a": {"b": 1}})]},
                    headers=h)
    assert r.status_code == 422 and r.json()["error"]["field"] == "turns[0].metadata.a", r.text
    schema = client.get("/openapi.json").json()
    parts = schema["components"]["schemas"]
    for route in ("search", "answer", "context"):
        assert parts[f"Body_{route}_v1_spaces__space__{route}_post"]["properties"]["filters"]["anyOf"][0] == {
            "$ref": "#/components/schemas/SearchFilters"}
    assert set(parts["SearchFilters"]["properties"]) == {"speaker", "role", "session_id", "since", "until", "metadata"}
    assert "metadata" in parts["TurnItem"]["properties"] and "metadata" in parts["MessageItem"]["properties"]


def test_answer_takes_query_as_search_does_and_question_still(served):
    """`/answer` reads `query` (as `/search` and `/context` do) and keeps `question`; neither, or two
    different ones, is a 422 naming `query`."""
    client, mem, keys = served
    h = auth(keys["alice"])
    by_query = client.post("/v1/spaces/alice/answer", json={"query": "What pet does Ana have?"}, headers=h)
    by_question = client.post("/v1/spaces/alice/answer", json={"question": "What pet does Ana have?"}, headers=h)
    assert by_query.status_code == by_question.status_code == 200, by_query.text
    assert by_query.json()["text"] == by_question.json()["text"]
    for body in ({}, {"query": "cat?", "question": "dog?"}):
        r = client.post("/v1/spaces/alice/answer", json=body, headers=h)
        assert r.status_code == 422 and r.json()["error"]["field"] == "query", r.text
