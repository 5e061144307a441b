"""The real server process (`etamem serve`, uvicorn, the default offline models) on loopback:
the README's key and request examples, and a graceful shutdown that finishes an accepted write
(answered 200, then found in the store) before the process exits."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest

pytest.importorskip("fastapi", reason="the server extra: pip install -e '.[serve]'")
pytest.importorskip("uvicorn", reason="the server extra: pip install -e '.[serve]'")

ADMIN = "process-test-admin-key-0123456789abcdef"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(method: str, url: str, key: str | None = None, body=None, timeout: float = 120):
    """(status, JSON body) of one HTTP request."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def etamem(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "etamem", *args], capture_output=True, text=True, timeout=120, **kw)


def start(store, port, env):
    # cwd outside the checkout, so that PYTHONPATH decides which etamem runs (mutation runs)
    proc = subprocess.Popen([sys.executable, "-m", "etamem", "-q", "serve", str(store), "--port", str(port)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=store.parent)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if request("GET", f"http://127.0.0.1:{port}/health", timeout=2)[0] == 200:
                return proc
        except OSError:
            time.sleep(0.2)
        if proc.poll() is not None:
            raise AssertionError(proc.stderr.read())
    proc.kill()
    raise AssertionError("the server did not answer /health within 120 s")


def turns(prefix: str, n: int, session: str = "s1") -> list[dict]:
    return [{"turn_id": f"{prefix}{i}", "session_id": session, "speaker": "Ana",
             "text": f"On day {i} I walked my grey cat Miso along the river and we met a heron number {i}.",
             "timestamp": f"2023-05-08T{10 + i // 60:02d}:{i % 60:02d}"} for i in range(n)]


def test_serve_keys_requests_and_graceful_shutdown(tmp_path):
    store = tmp_path / "store"
    env = {k: v for k, v in os.environ.items() if k != "ETAMEM_LLM_MODEL"}
    env.update(ETAMEM_ADMIN_KEY=ADMIN, HF_HUB_OFFLINE="1")
    made = etamem("keys", "create", str(store), "--spaces", "alice", "--note", "alice's agent", env=env, cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    alice = made.stdout.strip()
    assert alice.startswith("etm_") and alice not in (store / "memory.sqlite").read_bytes().decode("latin-1")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = start(store, port, env)
    try:
        assert request("POST", f"{url}/v1/spaces/alice/turns", body={"turns": turns("a", 2)})[0] == 401
        status, body = request("POST", f"{url}/v1/spaces/alice/turns", alice, {"turns": turns("a", 2)})
        assert status == 200 and body["units"], body
        status, body = request("POST", f"{url}/v1/spaces/alice/search", alice, {"query": "What is the cat called?"})
        assert status == 200 and "Miso" in body["hits"][0]["unit"]["text"], body
        assert request("POST", f"{url}/v1/spaces/bob/search", alice, {"query": "cat"})[0] == 403
        assert request("GET", f"{url}/v1/spaces", ADMIN)[1] == {"spaces": ["alice"]}

        # a big write in flight when SIGTERM arrives: answered 200 and stored
        outcome = {}

        def big_write():
            outcome["reply"] = request("POST", f"{url}/v1/spaces/alice/turns", alice,
                                       {"turns": turns("b", 150, session="s2")})

        writer = threading.Thread(target=big_write)
        writer.start()
        time.sleep(1.0)  # accepted and running (150 turns take several seconds to encode)
        proc.send_signal(signal.SIGTERM)
        writer.join(120)
        assert outcome["reply"][0] == 200, outcome
        # uvicorn re-raises SIGTERM after its graceful shutdown, so the status is -15 (or 0)
        assert proc.wait(60) in (0, -signal.SIGTERM)
        assert "Traceback" not in proc.stderr.read()
        assert list((store / "derived").glob("*/g*")), "the shutdown closed the store (derived files written)"
    finally:
        if proc.poll() is None:
            proc.kill()
    listed = etamem("-q", "stats", str(store), "--json", env=env, cwd=tmp_path)
    assert json.loads(listed.stdout)[0]["turns"] == 152, listed.stderr
    revoke = etamem("keys", "revoke", str(store), alice.split("_")[1], env=env, cwd=tmp_path)
    assert revoke.returncode == 0, revoke.stderr
    assert "revoked" in etamem("keys", "list", str(store), env=env, cwd=tmp_path).stdout
