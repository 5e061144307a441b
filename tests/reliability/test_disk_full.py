"""A full disk said plainly (the third red-team round: N4), with SQLite's own SQLITE_FULL: every connection the
store opens gets `PRAGMA max_page_count` a few pages above its size, so a large write fails
inside SQLite exactly as on a full disk ("database or disk is full", and SQLite rolls the
transaction back itself). The Python API raises that error (not `cannot rollback`), the CLI says
it in one line with status 2, the server answers 507, logs one line and keeps the connection;
what was stored before stays, nothing of the failed write does."""
from __future__ import annotations

import json
import logging
import socket
import sqlite3

import pytest

from etamem.store.sqlite import STORE_FILE
from rel_common import fast_memory

TURN = {"turn_id": "t1", "session_id": "s1", "speaker": "Ana", "text": "I adopted a grey cat named Miso.",
        "timestamp": "2023-05-08T13:56"}


def big_turns(n: int = 60, prefix: str = "b") -> list[dict]:
    """About 300 KB of turns: far more than a few free pages hold."""
    return [{"turn_id": f"{prefix}{i}", "session_id": "s2", "speaker": "Ana", "timestamp": f"2023-05-09T10:{i:02d}",
             "text": f"Entry {i}: " + " ".join(f"word{i}x{j} about gardens and tea" for j in range(160))}
            for i in range(n)]


@pytest.fixture
def full_at(monkeypatch):
    """`limit(root, extra)`: every SQLite connection opened from now on to a store under `root`
    may grow its database by `extra` pages at most."""
    real = sqlite3.connect

    def limit(root, extra: int = 4) -> None:
        def connect(database, *args, **kwargs):
            conn = real(database, *args, **kwargs)
            if str(database).startswith(str(root)) and str(database).endswith(STORE_FILE):
                pages = conn.execute("PRAGMA page_count").fetchone()[0]
                conn.execute(f"PRAGMA max_page_count = {pages + extra}")
            return conn
        monkeypatch.setattr(sqlite3, "connect", connect)

    return limit


def test_the_python_api_raises_the_full_disk_not_a_rollback_error(tmp_path, full_at):
    root = tmp_path / "s"
    fast_memory(root).add([TURN], space="u")
    full_at(root, extra=40)  # 160 KB: room for a small write, not for the 300 KB one
    mem = fast_memory(root)
    with pytest.raises(sqlite3.OperationalError, match="database or disk is full"):
        mem.add(big_turns(), space="u")
    assert [t.turn_id for t in mem.turns("u")] == ["t1"]  # all or nothing
    assert mem.search("grey cat", space="u", top_k=3)  # still serving
    mem.add([dict(TURN, turn_id="t2", text="Miso likes tuna.")], space="u")  # a small write still fits
    assert [t.turn_id for t in mem.turns("u")] == ["t1", "t2"]
    mem.close()


def test_the_cli_says_disk_full_in_one_line_with_status_2(tmp_path, full_at, capsys):
    from etamem.cli import main

    root, path = tmp_path / "s", tmp_path / "t.jsonl"
    path.write_text(json.dumps(dict(TURN, space="u")) + "\n")
    assert main(["ingest", str(path), "--store", str(root), "--format", "jsonl", "--no-progress"]) == 0
    capsys.readouterr()
    path.write_text("\n".join(json.dumps(dict(t, space="u")) for t in big_turns()) + "\n")
    full_at(root)
    rc = main(["ingest", str(path), "--store", str(root), "--format", "jsonl", "--no-progress"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and "Traceback" not in err and "rollback" not in err, (rc, err)
    assert len(lines) == 1 and lines[0].startswith("etamem: error: database or disk is full: "), lines
    assert [t.turn_id for t in fast_memory(root).turns("u")] == ["t1"]


def _exchange(sock: socket.socket, request: bytes) -> tuple[int, dict, bytes]:
    sock.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the server closed the connection: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers.get("content-length", 0)):
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection mid-body"
        body += chunk
    return int(lines[0].split()[1]), headers, body


def test_the_server_answers_507_logs_one_line_and_keeps_the_connection(tmp_path, full_at, caplog):
    pytest.importorskip("fastapi", reason="the server extra: pip install -e '.[serve]'")
    from etamem import tenancy
    from etamem.serve.app import create_app
    from test_server_hardening import ADMIN, live_server

    root = tmp_path / "s"
    seed = fast_memory(root)
    seed.add([TURN], space="u")
    key = tenancy.create_key(seed.store, ["u"])[0]
    seed.close()
    full_at(root)
    mem = fast_memory(root)
    app = create_app(mem, admin_key=ADMIN, warm=False, close_on_shutdown=False)
    caplog.set_level(logging.INFO)
    body = json.dumps({"turns": big_turns()}).encode()
    with live_server(app) as port, socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        head = (f"POST /v1/spaces/u/turns HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {key}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n").encode()
        status, headers, reply = _exchange(sock, head + body)
        assert status == 507 and headers.get("connection") != "close", (status, headers, reply)
        error = json.loads(reply)["error"]
        assert error["code"] == "storage_full" and error["message"].startswith("database or disk is full"), error
        status, _, reply = _exchange(sock, (f"GET /v1/spaces/u/turns/t1 HTTP/1.1\r\nHost: t\r\n"
                                            f"Authorization: Bearer {key}\r\n\r\n").encode())  # same connection
        assert status == 200 and json.loads(reply)["turn_id"] == "t1", reply
    problems = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(problems) == 1 and "database or disk is full" in problems[0].getMessage(), \
        [r.getMessage() for r in problems]
    assert not problems[0].exc_info and "Traceback" not in caplog.text
    assert [t.turn_id for t in mem.turns("u")] == ["t1"]
    mem.close()
