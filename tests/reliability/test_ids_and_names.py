"""Ids and names that mean one thing (the third red-team round: N2, N5 and its notes): `.` and `..` are never
turn ids, unit ids or space names (a URL client removes them as dot segments, so `DELETE
.../turns/..` would reach the whole space); no redirect from `/x/` to `/x`; the whole-space DELETE
needs `?confirm=<space>`; space names NFKC-normalised, control, format and bidi characters
refused, a name an earlier version stored reachable by its exact spelling (never widening a key);
two Authorization headers refused; a guessable admin key refused at start; `HEAD /health`.
A real uvicorn server on loopback with httpx and raw sockets, as a client sends them."""
from __future__ import annotations

import socket
from urllib.parse import quote

import pytest

pytest.importorskip("fastapi", reason="the server extra: pip install -e '.[serve]'")
import httpx  # noqa: E402

from etamem import tenancy  # noqa: E402
from etamem.ingest import inputs  # noqa: E402
from etamem.serve.app import create_app  # noqa: E402
from rel_common import fast_memory  # noqa: E402
from test_server_hardening import ADMIN, TURN, error_of, live_server  # noqa: E402

DOTS = (".", "..")
# spellings that must not be a space of their own: each is refused (ValueError) or is `ana`
LOOK_ALIKES = {"ａｎａ": "ana", "ana\u200b": None, "\u202eana": None, "an\u2066a\u2069": None, "ana\u2028": None,
               "an\u00ada": None, "\ufeffana": None, "a\u0085na": None, "\u2025": None, "\u2024": None,
               "ana\uff0fx": None}


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


def exchange(sock: socket.socket, head: str) -> tuple[int, dict, bytes]:
    """Send one request head (no body) on `sock` and read one whole response, leaving the
    connection open: (status, headers, body)."""
    sock.sendall(head.encode("latin-1"))
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the connection: {data!r}"
        data += chunk
    raw_head, _, body = data.partition(b"\r\n\r\n")
    lines = raw_head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers.get("content-length", 0)):
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection mid-body"
        body += chunk
    return int(lines[0].split()[1]), headers, body


# --- N2: '.' and '..' ---------------------------------------------------------------------------
@pytest.mark.parametrize("dot", DOTS)
def test_dot_ids_and_names_are_refused_in_the_python_api(memory, dot):
    with pytest.raises(ValueError, match=r"turns\[0\]\.turn_id: .* is not an id"):
        memory.add([dict(TURN, turn_id=dot)], space="alice")
    with pytest.raises(ValueError, match=r"turns\[0\]\.turn_id: .* is not an id"):
        memory.add([{"role": "user", "content": "Hi there.", "id": dot}], space="alice")
    with pytest.raises(ValueError, match="are not space names"):
        memory.add([TURN], space=dot)
    with pytest.raises(ValueError, match="are not space names"):
        tenancy.create_key(memory.store, [dot])
    for call in (lambda: memory.delete(turn_id=dot, space="alice"), lambda: memory.delete(dot, "alice"),
                 lambda: memory.get(dot, "alice"), lambda: memory.history(dot, "alice"),
                 lambda: memory.update(dot, "New text.", "alice")):
        with pytest.raises(ValueError, match="is not an id"):
            call()
    assert [t.turn_id for t in memory.turns("alice")] == ["t1"] and memory.spaces() == ["alice", "bob"]


def test_dot_segments_over_http_never_delete_a_space(memory, keys):
    """httpx removes the dot segment: `DELETE /v1/spaces/alice/turns/..` goes out as `DELETE
    /v1/spaces/alice`, which without `?confirm=alice` deletes nothing; curl's form (`.../alice/`)
    gets 404, never a redirect; the raw segment reaches the engine and is refused."""
    app = create_app(memory, admin_key=ADMIN, warm=False, close_on_shutdown=False)
    h = {"Authorization": f"Bearer {keys['alice']}"}
    with live_server(app) as port, httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10,
                                                follow_redirects=True) as http:
        for path in ("/v1/spaces/alice/turns/..", "/v1/spaces/alice/units/..", "/v1/spaces/alice/turns/.",
                     "/v1/spaces/alice/", "/v1/spaces/alice/turns/", "/v1/spaces/alice/turns/%2E%2E"):
            r = http.delete(path, headers=h)
            assert r.status_code in (404, 405, 422) and not r.history, (path, r.status_code, r.text)
            assert error_of(r.content)["code"] in ("not_found", "method_not_allowed", "invalid_request")
        r = http.delete("/v1/spaces/alice/turns/..", headers=h)
        assert r.status_code == 422 and error_of(r.content)["field"] == "confirm", r.text
        r = http.post("/v1/spaces/alice/turns", headers=h, json={"turns": [dict(TURN, turn_id="..")]})
        assert r.status_code == 422 and error_of(r.content)["field"] == "turns[0].turn_id", r.text
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:  # curl --path-as-is
            for raw in ("/v1/spaces/alice/turns/..", "/v1/spaces/alice/units/.."):
                status, _, body = exchange(sock, f"DELETE {raw} HTTP/1.1\r\nHost: t\r\nAuthorization: "
                                                 f"Bearer {keys['alice']}\r\n\r\n")
                assert status == 422 and "is not an id" in error_of(body)["message"], (raw, body)
            status, headers, _ = exchange(sock, f"DELETE /v1/spaces/alice/ HTTP/1.1\r\nHost: t\r\nAuthorization: "
                                                f"Bearer {keys['alice']}\r\n\r\n")
            assert status == 404 and "location" not in headers
        assert [t.turn_id for t in memory.turns("alice")] == ["t1"]  # alice's space survived all of it
        r = http.delete("/v1/spaces/alice", params={"confirm": "alice"}, headers=h)  # the real thing still works
        assert r.status_code == 200 and r.json()["deleted"] >= 1, r.text
    assert memory.spaces() == ["bob"]


# --- N5: names that look alike --------------------------------------------------------------------
def test_space_names_are_nfkc_and_refuse_invisible_characters(memory):
    for spelling, same_as in LOOK_ALIKES.items():
        if same_as is None:
            with pytest.raises(ValueError, match=r"space .*(contains|are not space names)"):
                memory.add([TURN], space=spelling)
            with pytest.raises(ValueError):
                tenancy.create_key(memory.store, [spelling])
        else:
            memory.add([dict(TURN, turn_id="t2", text="I also keep bees.")], space=spelling)
            assert memory.spaces() == ["alice", "ana", "bob"]
            assert tenancy.create_key(memory.store, [spelling])[1].spaces == (same_as,)
    memory.add([TURN], space="\u0430na")  # Cyrillic а: another script, another name (documented)
    assert memory.spaces() == ["alice", "ana", "bob", "\u0430na"]
    assert [t.turn_id for t in memory.turns("ana")] == ["t2"]


def test_refused_names_over_http_and_for_keys(memory, keys):
    app = create_app(memory, admin_key=ADMIN, warm=False, close_on_shutdown=False)
    admin = {"Authorization": f"Bearer {ADMIN}"}
    with live_server(app) as port, httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
        for name in ("ana\u200b", "\u202eana", "\u2025"):
            r = http.post(f"/v1/spaces/{quote(name, safe='')}/turns", headers=admin, json={"turns": [TURN]})
            assert r.status_code == 422 and error_of(r.content)["message"].startswith("space "), (name, r.text)
            r = http.post("/v1/keys", headers=admin, json={"spaces": [name]})
            assert r.status_code == 422, r.text
        r = http.post("/v1/keys", headers=admin, json={"spaces": ["ａｎａ"]})
        assert r.status_code == 200 and r.json()["spaces"] == ["ana"], r.text
    assert memory.spaces() == ["alice", "bob"]


def test_a_space_stored_before_nfkc_is_reached_by_its_exact_name_only(memory, monkeypatch):
    """A store written by an earlier version (NFC only): `ａｎａ` and `ana` are two spaces there,
    and `..` one more. Each stays reachable by its exact spelling; a key made then for `ａｎａ`
    never reaches `ana`, even once `ａｎａ` is deleted."""
    with monkeypatch.context() as old:
        old.setattr(inputs, "validate_space", inputs.stored_spelling)  # the earlier rule
        old.setattr(tenancy, "validate_space", inputs.stored_spelling)
        memory.add([dict(TURN, text="I collect stamps.")], space="ａｎａ")
        memory.add([dict(TURN, text="I race pigeons.")], space="..")
        legacy_key = tenancy.create_key(memory.store, ["ａｎａ"])[1]
    memory.add([dict(TURN, text="I sail boats.")], space="ana")
    assert memory.spaces() == ["..", "alice", "ana", "bob", "ａｎａ"]
    assert legacy_key.spaces == ("ａｎａ",)
    assert [t.text for t in memory.turns("ａｎａ")] == ["I collect stamps."]
    assert [t.text for t in memory.turns("ana")] == ["I sail boats."]
    assert [t.text for t in memory.turns("..")] == ["I race pigeons."]
    with tenancy.scope(legacy_key.spaces):
        assert memory.search("stamps", "ａｎａ", top_k=3)
        with pytest.raises(tenancy.SpaceForbidden):
            memory.turns("ana")
    memory.add([dict(TURN, turn_id="t3", text="I collect coins too.")], space="ａｎａ")  # a write: the same space
    assert len(memory.turns("ａｎａ")) == 2 and len(memory.turns("ana")) == 1
    memory.delete("..")
    memory.delete("ａｎａ")
    with pytest.raises(ValueError, match="are not space names"):
        memory.add([TURN], space="..")
    with tenancy.scope(legacy_key.spaces):  # `ａｎａ` now names `ana`: not the old key's space
        with pytest.raises(tenancy.SpaceForbidden):
            memory.turns("ａｎａ")
    assert [t.text for t in memory.turns("ａｎａ")] == ["I sail boats."]


# --- Info: two Authorization headers, a guessable admin key, HEAD /health ----------------------------
def test_two_authorization_headers_get_400(memory, keys):
    app = create_app(memory, admin_key=ADMIN, warm=False, close_on_shutdown=False)
    with live_server(app) as port, httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
        for name in ("Authorization", "X-API-Key"):
            values = [f"Bearer {keys['alice']}", f"Bearer {keys['bob']}"] if name == "Authorization" else \
                [keys["alice"], keys["bob"]]
            r = http.post("/v1/spaces/bob/search", json={"query": "cat"}, headers=[(name, v) for v in values])
            assert r.status_code == 400 and error_of(r.content)["code"] == "invalid_request", (name, r.text)
            assert name.lower() in error_of(r.content)["message"]
        r = http.post("/v1/spaces/bob/search", json={"query": "cat"},
                      headers={"Authorization": f"Bearer {keys['bob']}"})
        assert r.status_code == 200


@pytest.mark.parametrize("weak", ["a" * 24, " " * 24, "ab" * 12, "password1234" * 2, "aaaaaaaaaaaaaaaaaaaaaaab",
                                  "correct horse battery staple"])
def test_a_guessable_admin_key_is_refused_at_start(memory, monkeypatch, capsys, tmp_path, weak):
    from etamem.cli import main
    from etamem.serve import app as serve_app

    with pytest.raises(ValueError, match="admin_key: .*(repeated|guessable|whitespace)"):
        create_app(memory, admin_key=weak)
    started = []
    monkeypatch.setattr(serve_app, "serve", lambda *a, **k: started.append(a))
    monkeypatch.setenv("ETAMEM_ADMIN_KEY", weak)
    assert main(["serve", str(tmp_path / "s")]) == 2 and not started
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("etamem: error: ETAMEM_ADMIN_KEY: "), err
    assert "secrets.token_urlsafe" in err[0]


def test_head_health_and_ready(memory):
    app = create_app(memory, admin_key=ADMIN, warm=False, close_on_shutdown=False)
    with live_server(app) as port, httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:
        for path in ("/health", "/ready"):
            r = http.head(path)
            assert r.status_code == 200 and r.content == b"", (path, r.status_code)
            assert http.get(path).status_code == 200
