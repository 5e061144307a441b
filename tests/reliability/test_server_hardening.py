"""A server no client can stall or abuse: keys checked before a body is read, bounded buffering,
head and body deadlines, quiet client disconnects (a real uvicorn server on loopback, raw
sockets); every id addressable over HTTP; every error in the one JSON shape; NaN refused; one
admin-key rule for `serve` and `mcp`; a tenant's writes never take the search threads."""
from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import socket
import threading
import time
from urllib.parse import quote

import pytest

pytest.importorskip("fastapi", reason="the server extra: pip install -e '.[serve]'")
uvicorn = pytest.importorskip("uvicorn", reason="the server extra: pip install -e '.[serve]'")
import httpx  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from etamem import tenancy  # noqa: E402
from etamem.serve.app import create_app  # noqa: E402
from rel_common import fast_memory  # noqa: E402

ADMIN = "hardening-admin-key-0123456789abcdef"
TURN = {"turn_id": "t1", "session_id": "s1", "speaker": "Ana", "text": "I adopted a grey cat named Miso.",
        "timestamp": "2023-05-08T13:56"}


@pytest.fixture
def memory(tmp_path):
    mem = fast_memory(tmp_path / "store")
    mem.add([TURN], space="alice")
    mem.add([TURN], space="bob")
    yield mem
    mem.close()


@pytest.fixture
def keys(memory):
    return {name: tenancy.create_key(memory.store, [name])[0] for name in ("alice", "bob")}


@contextlib.contextmanager
def live_server(app, **settings):
    """The app on a real uvicorn server (the settings `etamem serve` uses) in a thread; yields its port."""
    from etamem.serve.guard import server_config

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(server_config(app, host="127.0.0.1", port=port, log_config=None, **settings))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started and time.monotonic() < deadline and thread.is_alive():
        time.sleep(0.02)
    assert server.started, "the server did not start"
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(20)


def connect(port: int, head: str, body: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(head.encode("latin-1") + body)
    return sock


def request_head(path: str, length: int, key: str | None = None, method: str = "POST") -> str:
    auth = f"Authorization: Bearer {key}\r\n" if key else ""
    return (f"{method} {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n{auth}"
            f"Content-Length: {length}\r\n\r\n")


def read_reply(sock: socket.socket, timeout: float) -> tuple[int | None, dict, bytes, bool]:
    """(status, headers, body, closed) of what the server sends within `timeout` s: status None
    when no response came; `closed` when the server closed the connection."""
    sock.settimeout(0.2)
    data, closed, deadline = b"", False, time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            chunk = sock.recv(65536)
        except socket.timeout:
            head, sep, body = data.partition(b"\r\n\r\n")
            lengths = [int(v) for k, _, v in (line.partition(b":") for line in head.split(b"\r\n"))
                       if k.strip().lower() == b"content-length"]
            if sep and lengths and len(body) >= lengths[0] and data and closed:
                break
            continue
        except ConnectionResetError:
            closed = True
            break
        if not chunk:
            closed = True
            break
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    if not head:
        return None, {}, b"", closed
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return int(lines[0].split()[1]), headers, body, closed


def error_of(body: bytes) -> dict:
    err = json.loads(body)["error"]
    assert set(err) == {"code", "message", "field"} and err["message"], err
    return err


# --- A: no unauthenticated resource use, bounded buffering, deadlines ------------------------------
def test_a_wrong_or_missing_key_gets_401_before_the_body_is_sent(memory):
    """8 MB announced, not one body byte sent: the answer comes at once, and the connection closes."""
    app = create_app(memory, admin_key=ADMIN, warm=False, close_on_shutdown=False, body_timeout_s=10)
    with live_server(app) as port:
        for key in (None, "etm_nothere_secret", "not-a-key"):
            t0 = time.monotonic()
            sock = connect(port, request_head("/v1/spaces/alice/turns", 8 << 20, key))
            status, headers, body, closed = read_reply(sock, 5)
            sock.close()
            assert status == 401 and error_of(body)["code"] == "unauthorized", (key, status, body)
            assert headers.get("www-authenticate") == "Bearer" and closed
            assert time.monotonic() - t0 < 4  # not the body deadline (10 s): the body was never awaited


def test_buffered_bodies_are_bounded_and_slow_bodies_time_out(memory, keys):
    """Room for two 100 KB bodies: two stalled ones hold it, a third waits 0.5 s then gets 503 with
    Retry-After; the stalled ones get 408 at their deadline and are closed; then room again."""
    app = create_app(memory, admin_key=ADMIN, warm=False, close_on_shutdown=False, max_request_bytes=100_000,
                     buffered_bytes=200_000, buffer_wait_s=0.5, body_timeout_s=2.0)
    with live_server(app) as port:
        path = "/v1/spaces/alice/turns"
        stalled = [connect(port, request_head(path, 100_000, keys["alice"]), b'{"turns": [') for _ in range(2)]
        time.sleep(0.3)
        t0 = time.monotonic()
        third = connect(port, request_head(path, 100_000, keys["alice"]))
        status, headers, body, closed = read_reply(third, 1.5)
        assert status == 503 and headers.get("retry-after") == "1" and error_of(body)["code"] == "busy", body
        assert closed and 0.4 < time.monotonic() - t0 < 1.5
        for sock in stalled:
            status, _, body, closed = read_reply(sock, 3)
            assert status == 408 and error_of(body)["code"] == "timeout" and closed, (status, body)
            sock.close()
        third.close()
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:  # the budget is free again
            r = http.post("/v1/spaces/alice/search", json={"query": "cat"},
                          headers={"Authorization": f"Bearer {keys['alice']}"})
            assert r.status_code == 200 and r.json()["hits"], r.text


def test_a_trickled_body_or_head_is_cut_off(memory, keys):
    """One byte every 0.2 s keeps the connection busy, not alive: 408 at the body deadline; a head
    that never ends is dropped at the head deadline."""
    app = create_app(memory, admin_key=ADMIN, warm=False, close_on_shutdown=False, body_timeout_s=1.5)
    with live_server(app, head_timeout_s=1.0) as port:
        t0 = time.monotonic()
        sock = connect(port, request_head("/v1/spaces/alice/search", 1000, keys["alice"]))
        status = None
        for _ in range(20):
            try:
                sock.sendall(b" ")
            except OSError:
                break
            status, _, body, closed = read_reply(sock, 0.2)
            if status is not None:
                break
        assert status == 408 and error_of(body)["code"] == "timeout", status
        assert time.monotonic() - t0 < 3.5
        sock.close()
        t0 = time.monotonic()
        sock = connect(port, "POST /v1/spaces/alice/search HTTP/1.1\r\nHost: test\r\n")
        status, _, _, closed = read_reply(sock, 4)
        assert closed and status is None and time.monotonic() - t0 < 3.0
        sock.close()


def test_a_client_leaving_mid_body_logs_no_traceback(memory, keys, caplog):
    app = create_app(memory, admin_key=ADMIN, warm=False, close_on_shutdown=False)
    caplog.set_level(logging.INFO)
    with live_server(app) as port:
        for _ in range(3):
            sock = connect(port, request_head("/v1/spaces/alice/turns", 1000, keys["alice"]), b'{"turns": [' + b" " * 400)
            time.sleep(0.1)
            sock.close()
        time.sleep(0.5)
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
            assert http.get("/health").status_code == 200
    problems = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not problems, [r.getMessage() for r in problems]
    assert "Traceback" not in caplog.text


# --- B: every id addressable ----------------------------------------------------------------------
def test_any_turn_and_unit_id_can_be_fetched_and_deleted(memory, keys):
    odd, other = "a/b#c:d?e%f g/../h", "x/y#1"
    h = {"Authorization": f"Bearer {keys['alice']}"}
    with TestClient(create_app(memory, admin_key=ADMIN, warm=False, close_on_shutdown=False)) as client:
        r = client.post("/v1/spaces/alice/turns", headers=h, json={"turns": [
            dict(TURN, turn_id=odd, text="I play the violin."), dict(TURN, turn_id=other, text="I grow tomatoes.")]})
        assert r.status_code == 200, r.text
        units = {u["source_turn_ids"][0]: u["amu_id"] for u in r.json()["units"]}
        assert units[odd].startswith(odd) and units[other].startswith(other)
        r = client.get(f"/v1/spaces/alice/turns/{quote(odd, safe='')}", headers=h)
        assert r.status_code == 200 and r.json()["turn_id"] == odd and "violin" in r.json()["text"], r.text
        for unit in units.values():
            r = client.get(f"/v1/spaces/alice/units/{quote(unit, safe='')}", headers=h)
            assert r.status_code == 200 and r.json()["amu_id"] == unit, r.text
        r = client.delete(f"/v1/spaces/alice/units/{quote(units[other], safe='')}", headers=h)
        assert r.json() == {"deleted": 1}, r.text
        r = client.delete(f"/v1/spaces/alice/turns/{quote(odd, safe='')}", headers=h)
        assert r.status_code == 200 and r.json()["deleted"] == 1, r.text
        r = client.get(f"/v1/spaces/alice/turns/{quote(odd, safe='')}", headers=h)
        assert r.status_code == 404 and error_of(r.content)["code"] == "not_found"
        assert client.get("/v1/spaces/alice/units", headers=h).status_code == 200  # the fixed routes still match
        assert client.get("/v1/spaces/alice/stats", headers=h).status_code == 200
    assert odd not in {t.turn_id for t in memory.turns("alice")}
    assert not any(u.amu_id.startswith(("a/", "x/")) for u in memory.list("alice"))


# --- C: one error shape, strict JSON, one admin-key rule ---------------------------------------------
def test_framework_errors_use_the_error_shape(memory, keys):
    h = {"Authorization": f"Bearer {keys['alice']}"}
    with TestClient(create_app(memory, admin_key=ADMIN, warm=False, close_on_shutdown=False)) as client:
        r = client.get("/v1/nothing/here", headers=h)
        assert r.status_code == 404 and error_of(r.content)["code"] == "not_found", r.text
        r = client.put("/v1/spaces/alice/search", json={"query": "cat"}, headers=h)
        assert r.status_code == 405 and error_of(r.content)["code"] == "method_not_allowed", r.text
        r = client.post("/health")
        assert r.status_code == 405 and error_of(r.content)
        r = client.post("/v1/spaces/alice/search", content=b'{"query": ', headers={**h, "content-type": "application/json"})
        assert r.status_code == 422 and "not valid JSON" in error_of(r.content)["message"], r.text


def test_nan_and_infinity_are_refused(memory, keys):
    h = {"Authorization": f"Bearer {keys['alice']}", "content-type": "application/json"}
    with TestClient(create_app(memory, admin_key=ADMIN, warm=False, close_on_shutdown=False)) as client:
        for raw in ('{"turns": [{"speaker": "Ana", "text": "hi", "turn_id": "n1", "extra": {"a": NaN}}]}',
                    '{"turns": [{"speaker": "Ana", "text": "hi", "turn_id": "n2", "extra": {"a": -Infinity}}]}'):
            r = client.post("/v1/spaces/alice/turns", content=raw.encode(), headers=h)
            assert r.status_code == 422 and "not JSON" in error_of(r.content)["message"], r.text
        r = client.post("/v1/spaces/alice/search", content=b'{"query": "cat", "top_k": Infinity}', headers=h)
        assert r.status_code == 422, r.text
        ok = client.post("/v1/spaces/alice/turns", headers=h, content=json.dumps(
            {"turns": [{"speaker": "Ana", "text": "NaN and Infinity are words here", "turn_id": "n3"}]}).encode())
        assert ok.status_code == 200, ok.text
    assert [t.turn_id for t in memory.turns("alice")] == ["t1", "n3"]


def test_one_admin_key_rule_for_every_server(memory, monkeypatch, tmp_path):
    from etamem.serve import mcp_server

    with pytest.raises(ValueError, match="24"):
        create_app(memory, admin_key="ab")
    pytest.importorskip("mcp", reason="the MCP extra: pip install -e '.[mcp]'")
    with pytest.raises(ValueError, match="24"):
        mcp_server.build_server(memory, admin_key="ab")
    monkeypatch.setenv("ETAMEM_ADMIN_KEY", "ab")
    monkeypatch.delenv("ETAMEM_API_KEY", raising=False)
    with pytest.raises(ValueError, match="ETAMEM_ADMIN_KEY: at least 24"):
        mcp_server.run(str(tmp_path / "other"), transport="stdio")
    assert not (tmp_path / "other").exists()  # refused before any store was opened


# --- D: one tenant's writes never take the search threads --------------------------------------------
def test_writes_to_one_space_queue_outside_the_search_threads(memory, keys):
    """Six adds to alice's space held inside the engine: bob's searches are still answered at once
    (two worker threads: the adds would otherwise hold both), and every add then completes."""
    release, inside = threading.Event(), threading.Semaphore(0)
    add = memory.add

    def held_add(*args, **kwargs):
        inside.release()
        release.wait(30)
        return add(*args, **kwargs)

    memory.add = held_add
    app = create_app(memory, admin_key=ADMIN, warm=False, close_on_shutdown=False, workers=2)
    with live_server(app) as port, concurrent.futures.ThreadPoolExecutor(8) as pool:
        url = f"http://127.0.0.1:{port}"

        def post(key, path, body, timeout=60):
            return httpx.post(url + path, json=body, headers={"Authorization": f"Bearer {key}"}, timeout=timeout)

        adds = [pool.submit(post, keys["alice"], "/v1/spaces/alice/turns",
                            {"turns": [dict(TURN, turn_id=f"w{i}", text=f"Fact number {i} about tea.")]})
                for i in range(6)]
        assert inside.acquire(timeout=10)  # one add is inside the engine
        time.sleep(0.5)  # the others have arrived
        try:
            for _ in range(3):
                r = post(keys["bob"], "/v1/spaces/bob/search", {"query": "grey cat"}, timeout=5)
                assert r.status_code == 200 and r.json()["hits"]
        finally:
            release.set()
        assert [f.result().status_code for f in adds] == [200] * 6
    assert len(memory.turns("alice")) == 7
