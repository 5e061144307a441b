"""What keeps one HTTP client from stalling or exhausting a server (`etamem serve`, `etamem mcp`).

- `Gate` (ASGI middleware): the API key is checked from the headers before any body byte is
  read (401 otherwise; 400 when Authorization or X-API-Key comes twice), bodies over the limit
  get 413 by Content-Length or while counted, buffered bodies share a byte budget (503 with
  Retry-After when it stays full), a body that does not arrive within `body_timeout_s` gets 408,
  and a client that leaves mid-body ends its request quietly (no traceback). Refusals sent with
  an unread body close the connection.
- `GuardedH11Protocol`: uvicorn's h11 protocol with a deadline for a request's head (a client
  that opens a connection and trickles or stops its headers is dropped).
- `server_config` / `run_server`: the uvicorn settings every server here uses (these timeouts,
  h11's head size limit, keep-alive, a short GIL switch interval so that a request thread gets
  the interpreter back quickly while another runs long CPU work).
- `checked_admin_key`: the one rule for an admin key, whatever the server (length, no whitespace,
  no repeated pattern, an entropy estimate).
"""
from __future__ import annotations

import contextvars
import json
import logging
import math
import os
import sys
from collections import Counter
from typing import Awaitable, Callable

log = logging.getLogger(__name__)

MIN_ADMIN_KEY_CHARS = 24
MIN_ADMIN_KEY_BITS = 48  # `key_bits`: 24 random digits never fell below 51 in 100,000 draws
SWITCH_INTERVAL_S = 0.001
# the caller the gate authenticated, for the request it is serving (None: not checked there)
CALLER: contextvars.ContextVar[object | None] = contextvars.ContextVar("etamem_caller", default=None)
ADMIN_KEY_ENV = "ETAMEM_ADMIN_KEY"


def admin_key_from_env() -> str | None:
    """The admin key from ETAMEM_ADMIN_KEY (None when unset), held to the one rule of every
    server here (`checked_admin_key`: at least 24 characters, not guessable)."""
    return checked_admin_key(os.environ.get(ADMIN_KEY_ENV), ADMIN_KEY_ENV)


def checked_admin_key(key: str | None, source: str = "ETAMEM_ADMIN_KEY") -> str | None:
    """`key` (None or empty: no admin key) if it can stand for every space: at least 24
    characters, no whitespace or control character, not one shorter string repeated, and at
    least `MIN_ADMIN_KEY_BITS` bits by `key_bits`; else ValueError saying which rule failed."""
    if not key:
        return None
    how = "e.g. python -c 'import secrets; print(secrets.token_urlsafe(32))'"
    if len(key) < MIN_ADMIN_KEY_CHARS:
        raise ValueError(f"{source}: at least {MIN_ADMIN_KEY_CHARS} characters ({how})")
    if any(ch.isspace() or not ch.isprintable() for ch in key):
        raise ValueError(f"{source}: holds whitespace or a control character; an admin key is one random token ({how})")
    if key in (key + key)[1:-1]:  # a shorter string repeated: 'ab' * 12, 'password1234' * 2
        raise ValueError(f"{source}: one shorter string repeated; an admin key must be random ({how})")
    bits = key_bits(key)
    if bits < MIN_ADMIN_KEY_BITS:
        raise ValueError(f"{source}: too guessable (about {bits:.0f} bits judged from its characters, at least "
                         f"{MIN_ADMIN_KEY_BITS} wanted); an admin key must be random ({how})")
    return key


def key_bits(key: str) -> float:
    """A rough entropy estimate: the key's length times the Shannon entropy of its character
    frequencies (24 x 'a': 0; a random 24-digit number: 51 or more; `secrets.token_urlsafe(32)`:
    about 200)."""
    counts, n = Counter(key), len(key)
    return -n * sum(c / n * math.log2(c / n) for c in counts.values())


def error_json(code: str, message: str, field: str | None = None) -> bytes:
    return json.dumps({"error": {"code": code, "message": message, "field": field}}).encode()


class ByteBudget:
    """Bytes of request bodies buffered at once: `acquire(n)` waits (at most `timeout`) until
    `n` more fit; one body larger than the whole budget is let in alone."""

    def __init__(self, limit: int):
        self.limit, self.used = limit, 0
        self._cond = None

    async def acquire(self, n: int, timeout: float) -> bool:
        import anyio

        if n <= 0:
            return True
        if self._cond is None:
            self._cond = anyio.Condition()
        async with self._cond:
            with anyio.move_on_after(timeout):
                while self.used and self.used + n > self.limit:
                    await self._cond.wait()
                self.used += n
                return True
        return False

    async def release(self, n: int) -> None:
        if n <= 0:
            return
        async with self._cond:
            self.used -= n
            self._cond.notify_all()


class _BodyTimeout(Exception):
    pass


CREDENTIAL_HEADERS = (b"authorization", b"x-api-key")


def repeated_credentials(headers) -> str | None:
    """The name of a credential header (`CREDENTIAL_HEADERS`) that `headers` (ASGI pairs) hold
    more than once, else None."""
    names = [name.lower() for name, _ in headers]
    return next((h.decode() for h in CREDENTIAL_HEADERS if names.count(h) > 1), None)


class Gate:
    """ASGI middleware in front of an app: key check before the body (when `authenticate` is
    given; `public` paths need none), body limit, byte budget, body read deadline; `observe`
    is told (scope, status) of every response (the route is in `scope` once routed)."""

    def __init__(self, app, *, limit: int, budget: ByteBudget, body_timeout_s: float = 30.0,
                 queue_timeout_s: float = 5.0,
                 authenticate: Callable[[dict], Awaitable[object | None]] | None = None,
                 public: frozenset[str] = frozenset(), unauthorized_headers: list | None = None,
                 observe: Callable[[dict, int], None] | None = None):
        self.app, self.limit, self.budget = app, limit, budget
        self.body_timeout_s, self.queue_timeout_s = body_timeout_s, queue_timeout_s
        self.authenticate, self.public, self.observe = authenticate, public, observe
        self.unauthorized_headers = unauthorized_headers or []

    async def _refuse(self, scope, send, status: int, code: str, message: str, *, close: bool, headers=()) -> None:
        scope["etamem.refused"] = status
        body = error_json(code, message)
        head = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]
        if close:  # the body was not read: the connection cannot carry another request
            head.append((b"connection", b"close"))
        await send({"type": "http.response.start", "status": status, "headers": head})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if self.observe is not None:
            send = self._observed(scope, send)
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        chunked = b"transfer-encoding" in headers
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            return await self._refuse(scope, send, 413, "too_large", f"request body over {self.limit} bytes",
                                      close=True)
        expected = int(length) if length is not None else (self.limit if chunked else 0)
        unread = chunked or expected > 0
        twice = repeated_credentials(scope.get("headers") or [])
        if twice:  # which one would count is the client's guess: refuse rather than pick
            return await self._refuse(scope, send, 400, "invalid_request",
                                      f"{twice}: header given more than once; send one", close=unread)
        if self.authenticate is not None and scope["path"] not in self.public:
            who = await self.authenticate(headers)
            if who is None:
                return await self._refuse(scope, send, 401, "unauthorized",
                                          "a valid API key is required (Authorization: Bearer etm_...)",
                                          close=unread, headers=self.unauthorized_headers)
        else:
            who = None
        token = CALLER.set(who)
        try:
            await self._serve(scope, receive, send, expected, unread)
        finally:
            CALLER.reset(token)

    async def _serve(self, scope, receive, send, expected: int, unread: bool) -> None:
        if not await self.budget.acquire(expected, self.queue_timeout_s):
            return await self._refuse(scope, send, 503, "busy", "too many request bodies in flight; retry",
                                      close=unread, headers=[(b"retry-after", b"1")])
        try:
            try:
                body = await self._read(receive)
            except _BodyTimeout:
                return await self._refuse(scope, send, 408, "timeout",
                                          f"request body not received within {self.body_timeout_s:g} s", close=True)
            if body is None:  # the client went away mid-body: nothing to answer, nothing to log
                return
            if len(body) > self.limit:
                return await self._refuse(scope, send, 413, "too_large", f"request body over {self.limit} bytes",
                                          close=True)
            sent = False

            async def replay():
                nonlocal sent
                if not sent:
                    sent = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()  # after the body: wait for a disconnect, as the server would

            await self.app(scope, replay, send)
        finally:
            await self.budget.release(expected)

    async def _read(self, receive) -> bytes | None:
        """The whole body (None if the client left); stops counting past the limit; _BodyTimeout
        past the deadline."""
        import anyio

        chunks, size = [], 0
        with anyio.move_on_after(self.body_timeout_s) as deadline:
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    return None
                chunks.append(message.get("body", b""))
                size += len(chunks[-1])
                if size > self.limit or not message.get("more_body", False):
                    return b"".join(chunks)
        if deadline.cancelled_caught:
            raise _BodyTimeout()
        return b"".join(chunks)  # pragma: no cover - the loop returns

    def _observed(self, scope, send):
        async def observed(message):
            if message["type"] == "http.response.start":
                try:
                    self.observe(scope, message["status"])
                except Exception:  # metrics never break a response
                    log.exception("counting a response failed")
            await send(message)
        return observed


def _h11_protocol():
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class GuardedH11Protocol(H11Protocol):
        """uvicorn's h11 protocol, dropping a connection whose request head is not complete
        `head_timeout_s` after its first byte (or after the connection opened)."""

        head_timeout_s = 10.0

        def connection_made(self, transport):
            super().connection_made(transport)
            self._head_timer = None
            self._arm_head_timer()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._waiting_for_head():
                self._arm_head_timer()
            else:
                self._disarm_head_timer()

        def connection_lost(self, exc):
            self._disarm_head_timer()
            super().connection_lost(exc)

        def on_response_complete(self) -> None:
            self._disarm_head_timer()  # the keep-alive timeout takes over until the next bytes
            super().on_response_complete()

        def _waiting_for_head(self) -> bool:
            import h11

            return self.conn.their_state is h11.IDLE and self.conn.our_state is h11.IDLE

        def _arm_head_timer(self) -> None:
            if self._head_timer is None:
                self._head_timer = self.loop.call_later(self.head_timeout_s, self._head_timed_out)

        def _disarm_head_timer(self) -> None:
            if getattr(self, "_head_timer", None) is not None:
                self._head_timer.cancel()
                self._head_timer = None

        def _head_timed_out(self) -> None:
            self._head_timer = None
            if self._waiting_for_head() and not self.transport.is_closing():
                log.debug("closing a connection whose request head did not arrive in time")
                self.transport.close()

    return GuardedH11Protocol


def server_config(app, *, host: str = "127.0.0.1", port: int = 8420, graceful_s: float = 30.0,
                  head_timeout_s: float = 10.0, keep_alive_s: int = 5, log_level: str = "warning", **kwargs):
    """uvicorn settings for a server here: the guarded h11 protocol (request head deadline),
    keep-alive timeout, 16 KB request heads at most, graceful shutdown."""
    import uvicorn

    protocol = type("GuardedH11Protocol", (_h11_protocol(),), {"head_timeout_s": head_timeout_s})
    return uvicorn.Config(app, host=host, port=port, http=protocol, timeout_keep_alive=keep_alive_s,
                          h11_max_incomplete_event_size=16 << 10, timeout_graceful_shutdown=graceful_s,
                          log_level=log_level, **kwargs)


def run_server(config) -> None:
    """Serve `config` (from `server_config`) until SIGINT/SIGTERM, with a short GIL switch
    interval: a thread answering a search waits at most ~1 ms for the interpreter while another
    thread runs long CPU work (the default is 5 ms, paid at every GIL hand-over)."""
    import uvicorn

    sys.setswitchinterval(SWITCH_INTERVAL_S)
    uvicorn.Server(config).run()
