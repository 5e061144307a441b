"""A scriptable local OpenAI-compatible chat-completions server for tests.

    with ChatServer() as srv:
        srv.script("first reply", Reply(status=429, retry_after="2"), "third reply")
        client = LLMClient("test-model", base_url=srv.base_url)
        ...
        assert len(srv.requests) == 3

Scripted replies are served first, in order; when the queue is empty the responder
`f(request_json) -> str | Reply` answers (default: "ok"). Token counts are whitespace-separated
words: prompt = all message contents, completion = the reply. A stopped server starts
again on the same port (an endpoint that goes down and comes back).
"""
from __future__ import annotations

import collections
import json
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

PATHS = ("/v1/chat/completions", "/chat/completions")
EMBEDDING_PATHS = ("/v1/embeddings", "/embeddings")
EMBEDDING_DIM = 16


def embed_text(text: str) -> list[float]:
    """Deterministic text-dependent embedding (hashed bag of words, unnormalised)."""
    import hashlib

    vec = [0.0] * EMBEDDING_DIM
    for word in text.lower().split():
        h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=4).digest(), "little")
        vec[h % EMBEDDING_DIM] += 1.0
    vec[-1] += 0.01
    return vec


@dataclass
class Reply:
    """One scripted reply: content (status 200), an HTTP error status, a raw body or a
    dropped connection."""

    content: str | None = None
    status: int = 200
    retry_after: str | None = None  # sent as a Retry-After header when set
    body: Any = None  # error body; default an OpenAI-style {"error": {...}}
    delay_s: float = 0.0  # wait before answering (to provoke client timeouts)
    headers: dict[str, str] = field(default_factory=dict)
    raw: str | None = None  # sent verbatim as the HTTP 200 body (e.g. a cut-off JSON envelope)
    drop: bool = False  # close the connection without answering


def count_words(text: Any) -> int:
    """Deterministic token count: whitespace-separated words."""
    if isinstance(text, list):  # content parts
        return sum(count_words(p.get("text", "")) for p in text if isinstance(p, dict))
    return len(str(text or "").split())


def prompt_tokens(request: dict) -> int:
    return sum(count_words(m.get("content")) for m in request.get("messages", []))


class ChatServer:
    """Background ThreadingHTTPServer on 127.0.0.1 (port chosen by the OS)."""

    def __init__(self, responder: Callable[[dict], str] | None = None) -> None:
        self.responder = responder or (lambda request: "ok")
        self.requests: list[dict] = []
        self._queue: collections.deque[Reply] = collections.deque()
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._port = 0  # 0 until first started; then kept, so a restart reuses the port
        self.tokenizer = False  # True: answer llama-cpp-python's POST /extras/tokenize/count (words)
        self.token_counts: list[int] = []  # the counts it answered

    # --- scripting ----------------------------------------------------------------
    def script(self, *replies: str | int | Reply) -> "ChatServer":
        """Queue replies: a str is content, an int an error status, or a Reply."""
        with self._lock:
            for r in replies:
                if isinstance(r, Reply):
                    self._queue.append(r)
                elif isinstance(r, bool):
                    raise TypeError("script() takes str, int status or Reply")
                elif isinstance(r, int):
                    self._queue.append(Reply(status=r))
                elif isinstance(r, str):
                    self._queue.append(Reply(content=r))
                else:
                    raise TypeError(f"script() takes str, int status or Reply, not {type(r).__name__}")
        return self

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._queue)

    def _next(self, request: dict) -> Reply:
        with self._lock:
            self.requests.append(request)
            if self._queue:
                return self._queue.popleft()
        answer = self.responder(request)
        return answer if isinstance(answer, Reply) else Reply(content=answer)

    # --- lifecycle ----------------------------------------------------------------
    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> "ChatServer":
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server API
                route = self.path.split("?")[0].rstrip("/")
                if route in EMBEDDING_PATHS:
                    request = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                    server.requests.append(request)
                    inputs = request.get("input") or []
                    inputs = [inputs] if isinstance(inputs, str) else inputs
                    self._send(200, {"object": "list", "model": request.get("model", "unknown"),
                                     "data": [{"object": "embedding", "index": i, "embedding": embed_text(t)}
                                              for i, t in reversed(list(enumerate(inputs)))],
                                     "usage": {"prompt_tokens": sum(map(count_words, inputs)),
                                               "total_tokens": sum(map(count_words, inputs))}})
                    return
                if route == "/extras/tokenize/count" and server.tokenizer:
                    request = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                    n = count_words(request.get("input", ""))
                    server.token_counts.append(n)
                    self._send(200, {"count": n})
                    return
                if route not in PATHS:
                    self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                    return
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    request = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    self._send(400, {"error": {"message": "request body is not JSON", "type": "invalid_request_error"}})
                    return
                reply = server._next(request)
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                if reply.drop:
                    self.close_connection = True
                    try:
                        self.connection.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    return
                if reply.raw is not None:
                    self._send(200, reply.raw, reply.headers)
                    return
                if reply.status != 200:
                    headers = dict(reply.headers)
                    if reply.retry_after is not None:
                        headers["Retry-After"] = str(reply.retry_after)
                    body = reply.body if reply.body is not None else {
                        "error": {"message": f"scripted error {reply.status}", "type": "server_error",
                                  "code": reply.status}
                    }
                    self._send(reply.status, body, headers)
                    return
                content = reply.content if reply.content is not None else ""
                p, c = prompt_tokens(request), count_words(content)
                self._send(200, {
                    "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": request.get("model", "unknown"),
                    "choices": [{
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": "stop",
                    }],
                    "usage": {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c},
                }, reply.headers)

            def _send(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
                data = (body if isinstance(body, str) else json.dumps(body)).encode("utf-8")
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in (headers or {}).items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # client gave up (timeout)
                    pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", self._port), Handler)
        self._port = self._httpd.server_address[1]
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="chat-server", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> "ChatServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
