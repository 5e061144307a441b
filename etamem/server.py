"""HTTP API over one `Memory` (FastAPI; `etamem serve`, imported lazily: `pip install 'etamem[serve]'`).

Every memory route needs an API key (`Authorization: Bearer etm_...` or `X-API-Key`), loopback
included; `/health` does not. A route runs its engine call in a worker thread inside
`tenancy.scope(<the key's spaces>)`, so the engine itself refuses another space (403), whatever
the route checks. Errors are JSON: `{"error": {"code", "message", "field"}}` with the field named
where the engine or the request schema names one. Request bodies over `max_request_bytes` get 413.
The models are loaded at startup, before uvicorn accepts connections. A write is answered only
once committed; on SIGTERM uvicorn stops accepting connections and waits for the requests in
flight, then the store is closed (derived files written).
"""
from __future__ import annotations

import json
import logging
import re
import time
from typing import Annotated, Any, Callable, Union

from pydantic import BaseModel, ConfigDict, Field, PlainValidator

from . import tenancy
from .metrics import Metrics, span
from .types import AMU, Hit, Turn, UnknownIdError, UnknownSpaceError

log = logging.getLogger(__name__)
_FIELD = re.compile(r"^([A-Za-z_][\w\[\]\.]*)(?=[: ])")


def _fastapi():
    try:
        import fastapi
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError("the HTTP server needs FastAPI and uvicorn: pip install 'etamem[serve]'") from exc
    return fastapi


def unit_json(a: AMU) -> dict[str, Any]:
    return {"amu_id": a.amu_id, "text": a.text, "speaker": a.speaker, "timestamp": a.timestamp.isoformat(),
            "session_id": a.session_id, "source_turn_ids": list(a.source_turn_ids), "polarity": a.polarity,
            "polarity_scores": list(a.polarity_scores), "status": a.status, "space": a.space}


def turn_json(t: Turn) -> dict[str, Any]:
    return {"turn_id": t.turn_id, "session_id": t.session_id, "speaker": t.speaker,
            "timestamp": t.timestamp.isoformat(), "text": t.text}


def hit_json(h: Hit) -> dict[str, Any]:
    return {"unit": unit_json(h.amu), "score": h.score, "views": list(h.views),
            "source_turn_ids": list(h.source_turn_ids), "source_turns": [turn_json(t) for t in h.source_turns]}


# --- the two shapes of an item to add -----------------------------------------------------------
# They describe the items for the OpenAPI spec and the MCP tool schema; the engine (`Memory.add`,
# `etamem.inputs` / `etamem.messages`) does the real checking and names the field (`turns[0].timestamp`).
class TurnItem(BaseModel):
    """A dialogue turn in the engine's own shape."""

    model_config = ConfigDict(extra="forbid", title="Turn")
    speaker: str = Field(description="who spoke")
    text: str = Field(description="what was said")
    session_id: str | None = Field(None, description="default: the space's open session (a new one after "
                                                      "Config.session_gap_minutes of silence)")
    timestamp: str | None = Field(None, description="ISO 8601, LoCoMo or LongMemEval form; default: the time "
                                                    "of the call (UTC)")
    turn_id: str | None = Field(None, description="give one to make retries safe (idempotent by id)")
    extra: dict[str, Any] | None = Field(None, description="any JSON object kept with the turn")


class ContentPart(BaseModel):
    """One part of a message's content: text parts are stored, others (images, audio) skipped."""

    model_config = ConfigDict(extra="allow", title="ContentPart")
    type: str = Field("text", description='"text", "input_text" or "output_text" for text')
    text: str | None = None


class MessageItem(BaseModel):
    """An OpenAI-style chat message. OpenAI fields without text (tool_calls, refusal, ...) are
    accepted and dropped; other unknown fields are refused."""

    model_config = ConfigDict(extra="allow", title="Message")
    role: str = Field(description="user, assistant, tool, ... (the speaker); system and developer "
                                  "messages are skipped unless Config.keep_system_messages")
    content: str | list[ContentPart | str] | None = Field(
        description="text, or a list of parts whose text parts are joined; no text: the message is skipped")
    name: str | None = Field(None, description="the speaker's name, if any")
    id: str | None = Field(None, description="the turn id: give one to make retries safe")
    timestamp: str | int | float | None = Field(None, description="ISO 8601 or epoch seconds; default: the "
                                                                  "time of the call (UTC)")
    created_at: str | int | float | None = Field(None, description="instead of timestamp")
    session_id: str | None = Field(None, description="default: the space's open session")
    tool_call_id: str | None = Field(None, description="kept in the turn's extra")
    extra: dict[str, Any] | None = Field(None, description="any JSON object kept with the turn")


def _an_object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError("expected a turn or a chat message (a JSON object)")
    return value


# An item as the HTTP route takes it: any JSON object, checked by the engine; documented as either shape.
AddItem = Annotated[dict[str, Any], PlainValidator(_an_object, json_schema_input_type=Union[MessageItem, TurnItem])]


def error_body(code: str, message: str, field: str | None = None) -> dict:
    return {"error": {"code": code, "message": message, "field": field}}


def field_of(message: str) -> str | None:
    """The field an engine ValueError names first (`turns[0].timestamp: ...` -> `turns[0].timestamp`)."""
    m = _FIELD.match(message)
    return m.group(1) if m else None


def field_from_loc(loc) -> str | None:
    """A request-schema error's location as the engine names fields: `("body", "turns", 0)` -> `turns[0]`."""
    field = ""
    for part in loc:
        if part in ("body", "query", "path", "header"):
            continue
        field += f"[{part}]" if isinstance(part, int) else f".{part}" if field else str(part)
    return field or None


class BodyLimit:
    """ASGI middleware: 413 for request bodies over `limit` bytes, by Content-Length or, without
    one, counted while reading; the body (at most `limit` bytes) is read before the app runs and
    handed to it as one message."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def _reject(self, send) -> None:
        body = json.dumps(error_body("too_large", f"request body over {self.limit} bytes")).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope.get("headers") or []).get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.limit):
            return await self._reject(send)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.limit:
                return await self._reject(send)
            if not message.get("more_body", False):
                break
        body, sent = b"".join(chunks), False

        async def replay():
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # after the body: wait for a disconnect, as the server would

        await self.app(scope, replay, send)


async def run_scoped(who: tenancy.Caller, operation: str, limiter, fn: Callable, *args, **kwargs):
    """`fn(*args, **kwargs)` in a worker thread (at most `limiter`'s many at once) inside the
    caller's scope (`tenancy.scope`) and an OpenTelemetry span named after `operation`."""
    import anyio

    def run():
        with tenancy.scope(who.spaces), span(operation):
            return fn(*args, **kwargs)

    return await anyio.to_thread.run_sync(run, limiter=limiter)


def create_app(memory, *, admin_key: str | None = None, max_request_bytes: int = 8 << 20, workers: int = 4,
               metrics: Metrics | None = None, close_on_shutdown: bool = True, warm: bool = True):
    """The FastAPI app serving `memory` (an `etamem.Memory`); keys live in its store. With `warm`,
    its startup loads the models (`Memory.warm`)."""
    fastapi = _fastapi()
    import anyio
    from fastapi import Body, Depends, Header, Path, Query, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, PlainTextResponse
    from contextlib import asynccontextmanager

    metrics = metrics or Metrics()
    limiter = anyio.CapacityLimiter(workers)

    @asynccontextmanager
    async def lifespan(app):
        if warm:  # the models load before uvicorn accepts connections, not in the first request
            await anyio.to_thread.run_sync(memory.warm)
        yield
        if close_on_shutdown:
            await anyio.to_thread.run_sync(memory.close)

    app = fastapi.FastAPI(title="ETAMem", version=_version(), lifespan=lifespan,
                          description="Long-term memory for LLM agents: add turns, search, answer, delete. "
                                      "Every route but /health needs an API key (Bearer).")
    app.add_middleware(BodyLimit, limit=max_request_bytes)

    def caller(authorization: str | None = Header(None), x_api_key: str | None = Header(None)) -> tenancy.Caller:
        who = tenancy.authenticate(tenancy.presented_key(authorization, x_api_key), memory.store, admin_key)
        if who is None:
            raise _Unauthorized()
        return who

    def admin(who: tenancy.Caller = Depends(caller)) -> tenancy.Caller:
        if not who.admin:
            raise tenancy.SpaceForbidden("this route needs the admin key")
        return who

    async def engine(route: str, who: tenancy.Caller, fn: Callable, *args, **kwargs):
        """`fn(*args, **kwargs)` run by `run_scoped`; timed."""
        t0 = time.perf_counter()
        try:
            return await run_scoped(who, route, limiter, fn, *args, **kwargs)
        finally:
            metrics.observe(route, time.perf_counter() - t0)

    # --- errors -------------------------------------------------------------------------------
    def reply(status: int, code: str, message: str, field: str | None = None, headers=None):
        return JSONResponse(error_body(code, message, field), status_code=status, headers=headers)

    @app.exception_handler(_Unauthorized)
    async def _401(request: Request, exc):
        metrics.count_refusal(401)
        return reply(401, "unauthorized", "a valid API key is required (Authorization: Bearer etm_...)",
                     headers={"WWW-Authenticate": "Bearer"})

    @app.exception_handler(tenancy.SpaceForbidden)
    async def _403(request: Request, exc):
        metrics.count_refusal(403)
        return reply(403, "forbidden", str(exc), "space")

    @app.exception_handler(UnknownIdError)
    async def _404_id(request: Request, exc):
        return reply(404, "not_found", str(exc))

    @app.exception_handler(UnknownSpaceError)
    async def _404_space(request: Request, exc):
        return reply(404, "not_found", str(exc), "space")

    @app.exception_handler(ValueError)
    async def _422(request: Request, exc):
        return reply(422, "invalid_request", str(exc), field_of(str(exc)))

    @app.exception_handler(RequestValidationError)
    async def _422_schema(request: Request, exc):
        first = exc.errors()[0] if exc.errors() else {}
        field = field_from_loc(first.get("loc", ()))
        return reply(422, "invalid_request", f"{field or 'request'}: {first.get('msg', 'invalid')}", field)

    @app.exception_handler(Exception)
    async def _500(request: Request, exc):
        log.exception("unhandled error on %s", request.url.path)
        return reply(500, "internal", f"{type(exc).__name__}: the server could not complete the request")

    # --- routes -------------------------------------------------------------------------------
    SpaceName = Path(..., min_length=1, max_length=128, description="memory space (one user or agent)")

    @app.get("/health")
    async def health():
        return {"status": "ok", "version": _version()}

    @app.get("/v1/spaces")
    async def spaces(who: tenancy.Caller = Depends(caller)):
        return {"spaces": await engine("spaces", who, memory.spaces)}

    @app.post("/v1/spaces/{space}/turns")
    async def add(space: str = SpaceName,
                  turns: list[AddItem] = Body(..., embed=True, max_length=10_000, description=(
                      "turns or chat messages (either shape per item, in order); errors name "
                      "the item as turns[i]")),
                  who: tenancy.Caller = Depends(caller)):
        units = await engine("add", who, memory.add, turns, space=space)
        return {"units": [unit_json(a) for a in units]}

    @app.post("/v1/spaces/{space}/search")
    async def search(space: str = SpaceName, query: str = Body(..., embed=True), top_k: int | None = Body(None),
                     now: str | None = Body(None), who: tenancy.Caller = Depends(caller)):
        result = await engine("search", who, memory.retrieve, query, space, top_k=top_k, now=now)
        return {"hits": [hit_json(h) for h in result.hits], "pending_turns": result.pending_turns,
                "weights": result.weights}

    @app.post("/v1/spaces/{space}/answer")
    async def answer(space: str = SpaceName, question: str = Body(..., embed=True), top_k: int | None = Body(None),
                     now: str | None = Body(None), who: tenancy.Caller = Depends(caller)):
        ans = await engine("answer", who, memory.answer, question, space=space, now=now, top_k=top_k)
        return {"text": ans.text, "llm_used": ans.llm_used, "note": ans.note,
                "hits": [hit_json(h) for h in ans.hits]}

    @app.post("/v1/spaces/{space}/context")
    async def context(space: str = SpaceName, query: str = Body(..., embed=True), top_k: int | None = Body(None),
                      now: str | None = Body(None), who: tenancy.Caller = Depends(caller)):
        packet = await engine("context", who, memory.context_packet, query, space, top_k=top_k, now=now)
        return {"context": packet.text, "hits": [hit_json(h) for h in packet.hits]}

    @app.get("/v1/spaces/{space}/units")
    async def list_units(space: str = SpaceName, status: str = Query("active", pattern="^(active|superseded|all)$"),
                         who: tenancy.Caller = Depends(caller)):
        units = await engine("list", who, memory.list, space, status=None if status == "all" else status)
        return {"units": [unit_json(a) for a in units]}

    @app.get("/v1/spaces/{space}/units/{amu_id}")
    async def get(space: str = SpaceName, amu_id: str = Path(..., max_length=200),
                  who: tenancy.Caller = Depends(caller)):
        return unit_json(await engine("get", who, memory.get, amu_id, space))

    @app.delete("/v1/spaces/{space}/units/{amu_id}")
    async def delete_unit(space: str = SpaceName, amu_id: str = Path(..., max_length=200),
                          who: tenancy.Caller = Depends(caller)):
        return {"deleted": await engine("delete", who, memory.delete, space, amu_id)}

    @app.delete("/v1/spaces/{space}/turns/{turn_id}")
    async def delete_turn(space: str = SpaceName, turn_id: str = Path(..., max_length=200),
                          who: tenancy.Caller = Depends(caller)):
        return {"deleted": await engine("delete", who, memory.delete, space, turn_id=turn_id)}

    @app.delete("/v1/spaces/{space}")
    async def delete_space(space: str = SpaceName, who: tenancy.Caller = Depends(caller)):
        return {"deleted": await engine("delete", who, memory.delete, space)}

    @app.get("/v1/spaces/{space}/stats")
    async def stats(space: str = SpaceName, who: tenancy.Caller = Depends(caller)):
        return await engine("stats", who, memory.stats, space)

    @app.get("/metrics", response_class=PlainTextResponse)
    async def prometheus(who: tenancy.Caller = Depends(admin)):
        return metrics.prometheus()

    @app.post("/v1/keys")
    async def create_key(spaces: list[str] = Body(..., embed=True, min_length=1, max_length=1000),
                         note: str = Body("", max_length=200), who: tenancy.Caller = Depends(admin)):
        key, record = await engine("keys", who, tenancy.create_key, memory.store, spaces, note)
        return {"key": key, "key_id": record.key_id, "spaces": list(record.spaces)}

    @app.get("/v1/keys")
    async def list_keys(who: tenancy.Caller = Depends(admin)):
        keys = await engine("keys", who, memory.store.api_keys)
        return {"keys": [{"key_id": k.key_id, "spaces": list(k.spaces), "created": k.created,
                          "revoked": k.revoked, "note": k.note} for k in keys]}

    @app.delete("/v1/keys/{key_id}")
    async def revoke_key(key_id: str = Path(..., max_length=64), who: tenancy.Caller = Depends(admin)):
        if not await engine("keys", who, memory.store.revoke_api_key, key_id):
            raise UnknownIdError(f"no key {key_id!r}")
        return {"revoked": key_id}

    @app.middleware("http")
    async def count(request: Request, call_next):
        response = await call_next(request)
        metrics.count(request.scope.get("route").path if request.scope.get("route") else "unmatched",
                      request.method, response.status_code)
        return response

    return app


class _Unauthorized(Exception):
    pass


def _version() -> str:
    from . import __version__

    return __version__


def serve(target: str, *, host: str = "127.0.0.1", port: int = 8420, config=None, admin_key: str | None = None,
          workers: int = 4, max_request_bytes: int = 8 << 20, graceful_s: float = 30.0) -> None:
    """Run the HTTP API on `target` (a store directory) until SIGINT/SIGTERM."""
    try:
        import uvicorn
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError("the HTTP server needs FastAPI and uvicorn: pip install 'etamem[serve]'") from exc
    from .memory import Memory

    memory = Memory(target, config)
    app = create_app(memory, admin_key=admin_key, max_request_bytes=max_request_bytes, workers=workers)
    uvicorn.run(app, host=host, port=port, timeout_graceful_shutdown=graceful_s, log_level="warning")
