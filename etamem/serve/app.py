"""HTTP API over one `Memory` (FastAPI; `etamem serve`, imported lazily: `pip install -e ".[serve]"`).

Every memory route needs an API key (`Authorization: Bearer etm_...` or `X-API-Key`), loopback
included; `/health` and `/ready` do not. A route runs its engine call in a worker thread inside
`tenancy.scope(<the key's spaces>)`, so the engine itself refuses another space (403), whatever
the route checks. Errors, the framework's (unknown route, wrong method, bad JSON) included, are
JSON: `{"error": {"code", "message", "field"}}` with the field named where the engine or the
request schema names one. NaN and Infinity are not JSON: a body holding them gets 422.

One client cannot stall the others (`etamem.serve.guard`): the key is checked from the headers
before the body is read, bodies over `max_request_bytes` get 413, buffered bodies share a byte
budget, slow request heads and bodies time out. Reads (search, answer, list, ...) and writes
(add, delete) run in separate worker-thread pools, and the writes to one space wait in that
space's own queue, outside the pools: a tenant sending large adds back to back holds one write
thread, never a search thread. A key has at most `max_reads_per_key` reads in flight and its
searches at most `max_read_work` of work (query characters x top_k) at once; beyond, a read waits
a moment for its key's reads, then gets 429 with Retry-After (`etamem.serve.fairness`): one
tenant's heavy searches leave the others read threads. Ids are taken whole in the path
(`/units/{amu_id:path}`), so any id, `/`, `#`, `?` or `%` included (URL-encoded), can be fetched
and deleted; `.` and `..` are no ids or space names (clients drop such segments), `/x/` is never
redirected to `/x`, and the whole-space delete needs `?confirm=<space>`. A full disk is 507
(`storage_full`).

The models are loaded at startup, before uvicorn accepts connections; `/ready` answers 200 only
once they are (503 before, and again while shutting down), `/health` whenever the process is up. A write is answered only
once committed; on SIGTERM uvicorn stops accepting connections and waits for the requests in
flight, then the store is closed (derived files written).
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import time
from typing import Annotated, Any, Callable, Union
from urllib.parse import quote

from pydantic import BaseModel, ConfigDict, Field, PlainValidator

from etamem import tenancy
from etamem.ingest.inputs import check_id
from etamem.install_hints import install_hint
from etamem.records import AMU, Hit, Turn, UnknownIdError, UnknownSpaceError
from etamem.serve.fairness import ReadBounds, ReadRefused, search_work
from etamem.serve.metrics import Metrics, span
from etamem.store.disk_full import DISK_FULL, database_errors, is_disk_full
from etamem.store.pg_pool import ConnectionLost

log = logging.getLogger(__name__)
_FIELD = re.compile(r"^([A-Za-z_][\w\[\]\.]*)(?=[: ])")


def _fastapi():
    try:
        import fastapi
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(f"the HTTP server needs FastAPI and uvicorn: {install_hint('serve')}") from exc
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
            "source_turn_ids": list(h.source_turn_ids), "source_turns": [turn_json(t) for t in h.source_turns],
            "supersedes": list(h.supersedes), "superseded_by": list(h.superseded_by), "metadata": dict(h.metadata),
            "similarity": h.similarity}


def version_json(unit: Any) -> dict[str, Any]:
    """One version of `Memory.history`: an AMU, or an FTA unit in the same shape."""
    if isinstance(unit, AMU):
        return unit_json(unit)
    return {"amu_id": unit.unit_id, "text": unit.text, "speaker": unit.speaker,
            "timestamp": unit.dialogue_time.isoformat(), "session_id": unit.session_id,
            "source_turn_ids": list(unit.turn_ids), "status": unit.status, "space": unit.space}


# --- the two shapes of an item to add -----------------------------------------------------------
# They describe the items for the OpenAPI spec and the MCP tool schema; the engine (`Memory.add`,
# `etamem.ingest.inputs` / `etamem.ingest.messages`) does the real checking and names the field (`turns[0].timestamp`).
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
    metadata: dict[str, str | int | float | bool | None] | None = Field(
        None, description="a flat JSON object (str keys; str, number, bool or null values) that search filters "
                          "can match; the turn's units carry it")


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
    metadata: dict[str, str | int | float | bool | None] | None = Field(
        None, description="a flat JSON object (str keys; str, number, bool or null values) that search filters "
                          "can match; the message's units carry it")


class SearchFilters(BaseModel):
    """What a search may return (`etamem.filters.Filters`): every field given must match; none
    given is no filter. Applied inside retrieval: top_k hits come back whenever that many units
    match."""

    model_config = ConfigDict(extra="forbid", title="Filters")
    speaker: str | list[str] | None = Field(None, description="the unit's speaker (a message's role), one or "
                                                              "several; case does not matter")
    role: str | list[str] | None = Field(None, description="the same filter as speaker (give one of them)")
    session_id: str | list[str] | None = Field(None, description="one session id or several")
    since: str | None = Field(None, description="ISO 8601: units said at or after this time")
    until: str | None = Field(None, description="ISO 8601: units said before this time")
    metadata: dict[str, str | int | float | bool | None] | None = Field(
        None, description="every key must be in the unit's metadata (its source turns') with an equal value")


def _an_object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError("expected a turn or a chat message (a JSON object)")
    return value


# An item as the HTTP route takes it: any JSON object, checked by the engine; documented as either shape.
AddItem = Annotated[dict[str, Any], PlainValidator(_an_object, json_schema_input_type=Union[MessageItem, TurnItem])]


def _filters_object(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ValueError("expected an object of filters (speaker, session_id, since, until, metadata)")
    return value


# Search filters as the routes take them: a JSON object checked by the engine (errors name `filters.<field>`).
FiltersBody = Annotated[dict[str, Any], PlainValidator(_filters_object, json_schema_input_type=SearchFilters)]


def error_body(code: str, message: str, field: str | None = None) -> dict:
    return {"error": {"code": code, "message": message, "field": field}}


def one_question(query: str | None, question: str | None) -> str:
    """The question of an answer request: `query` (as /search names it) or `question` (its older
    name); ValueError naming `query` when neither or two different ones are given."""
    if query is None and question is None:
        raise ValueError("query: missing (the question to answer; `question` is accepted too)")
    if query is not None and question is not None and query != question:
        raise ValueError("query: give query or question, not both")
    return query if query is not None else question


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


async def run_scoped(who: tenancy.Caller, operation: str, limiter, fn: Callable, *args, **kwargs):
    """`fn(*args, **kwargs)` in a worker thread (at most `limiter`'s many at once) inside the
    caller's scope (`tenancy.scope`) and an OpenTelemetry span named after `operation`."""
    import anyio

    def run():
        with tenancy.scope(who.spaces), span(operation):
            return fn(*args, **kwargs)

    return await anyio.to_thread.run_sync(run, limiter=limiter)


class _Busy(Exception):
    """A space's write queue is full (503, Retry-After)."""


class WriteQueues:
    """Writes to one space run one at a time, in arrival order; they wait here, in the event
    loop, not in a worker thread (the engine would serialise them anyway, each holding a thread).
    More than `max_waiting` writes waiting for one space: `_Busy`."""

    def __init__(self, max_waiting: int = 32):
        self.max_waiting = max_waiting
        self._queues: dict[str, list] = {}  # space -> [lock, how many hold or wait for it]

    @contextlib.asynccontextmanager
    async def turn(self, space: str):
        import anyio

        entry = self._queues.setdefault(space, [anyio.Lock(), 0])
        if entry[1] > self.max_waiting:
            raise _Busy(f"space {space!r}: {entry[1]} writes already queued; retry")
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if not entry[1]:
                self._queues.pop(space, None)


class _StrictJSONRequest:
    """Mixed into the request class of the routes: JSON bodies parsed without NaN / Infinity
    (a JSONDecodeError, so FastAPI answers 422), large ones in a worker thread so the event loop
    keeps serving other connections meanwhile."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            if len(body) > 64 << 10:
                import anyio

                self._json = await anyio.to_thread.run_sync(strict_json, body)
            else:
                self._json = strict_json(body)
        return self._json


def _not_json(name: str):
    raise json.JSONDecodeError(f"{name} is not JSON (send null or a string)", "", 0)


def strict_json(body: bytes | str) -> Any:
    """`json.loads` refusing NaN, Infinity and -Infinity (JSONDecodeError)."""
    return json.loads(body, parse_constant=_not_json)


def _routes_class():
    from fastapi.routing import APIRoute
    from starlette.requests import Request

    class StrictRequest(_StrictJSONRequest, Request):
        pass

    class StrictJSONRoute(APIRoute):
        def get_route_handler(self):
            handler = super().get_route_handler()

            async def strict(request):
                return await handler(StrictRequest(request.scope, request.receive))
            return strict

    return StrictJSONRoute


PUBLIC_PATHS = frozenset({"/health", "/ready", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"})
_STATUS_CODES = {400: "invalid_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
                 405: "method_not_allowed", 408: "timeout", 413: "too_large", 415: "unsupported_media_type",
                 422: "invalid_request", 429: "busy", 503: "busy", 507: "storage_full"}


def create_app(memory, *, admin_key: str | None = None, max_request_bytes: int = 8 << 20, workers: int = 4,
               metrics: Metrics | None = None, close_on_shutdown: bool = True, warm: bool = True,
               write_workers: int | None = None, body_timeout_s: float = 30.0,
               buffered_bytes: int | None = None, buffer_wait_s: float = 5.0, max_queued_writes: int = 32,
               max_reads_per_key: int | None = None, max_read_work: int = 1_000_000, read_wait_s: float = 1.0):
    """The FastAPI app serving `memory` (an `etamem.Memory`); keys live in its store. With `warm`,
    its startup loads the models (`Memory.warm`) and `/ready` answers 503 until then; without,
    `/ready` answers 200 from the start (the models load on first use). `workers` threads run reads, `write_workers`
    (default half as many, at least 1) writes; request bodies buffered at once are at most
    `buffered_bytes` (default 4 x `max_request_bytes`; a body waits `buffer_wait_s` for room, then
    503); a body must arrive within `body_timeout_s`; more than `max_queued_writes` writes waiting
    for one space: 503. A key may have `max_reads_per_key` reads in flight (default half of `workers`,
    at least 1; 0: no bound) and its searches `max_read_work` of work (query characters x top_k;
    0: no bound); a read beyond waits `read_wait_s` for one of the key's reads to end, then 429 +
    Retry-After."""
    fastapi = _fastapi()
    import anyio
    from fastapi import Body, Depends, Header, Path, Query, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, PlainTextResponse
    from starlette.exceptions import HTTPException as StarletteHTTPException
    from starlette.routing import Match

    from etamem.serve.guard import CALLER, ByteBudget, Gate, checked_admin_key

    admin_key = checked_admin_key(admin_key, "admin_key")
    metrics = metrics or Metrics()
    readers = anyio.CapacityLimiter(workers)
    writers = anyio.CapacityLimiter(write_workers or max(1, workers // 2))
    queues = WriteQueues(max_queued_writes)
    bounds = ReadBounds(max(1, workers // 2) if max_reads_per_key is None else max_reads_per_key, max_read_work,
                        read_wait_s)
    serving = {"ready": not warm}  # /ready: the models are loaded (or left to load on first use)
    key_checks = anyio.CapacityLimiter(max(2, workers))

    @contextlib.asynccontextmanager
    async def lifespan(app):
        if warm:  # the models load before uvicorn accepts connections, not in the first request
            await anyio.to_thread.run_sync(memory.warm)
        serving["ready"] = True
        yield
        serving["ready"] = False  # a load balancer stops sending requests while the memory closes
        if close_on_shutdown:
            await anyio.to_thread.run_sync(memory.close)

    # no redirect from `/x/` to `/x` (a 307 keeps the method: curl sends `DELETE .../turns/..` as
    # `DELETE /v1/spaces/S/`, and a client following it would delete the space): 404 instead
    app = fastapi.FastAPI(title="ETAMem", version=_version(), lifespan=lifespan, redirect_slashes=False,
                          description="Long-term memory for LLM agents: add turns, search, answer, delete. "
                                      "Every route but /health and /ready needs an API key (Bearer).")
    app.router.route_class = _routes_class()

    async def authenticate(headers: dict) -> tenancy.Caller | None:
        key = tenancy.presented_key(_header(headers, b"authorization"), _header(headers, b"x-api-key"))
        if not key:
            return None
        return await anyio.to_thread.run_sync(tenancy.authenticate, key, memory.store, admin_key,
                                              limiter=key_checks)

    def observe(scope, status: int) -> None:
        route = scope.get("route")
        if scope.get("etamem.refused"):  # by the gate, before routing
            route = next((r for r in app.router.routes if r.matches(scope)[0] == Match.FULL), None)
            if status == 401:
                metrics.count_refusal(401)
        metrics.count(route.path if route is not None else "unmatched", scope["method"], status)

    app.add_middleware(Gate, limit=max_request_bytes, budget=ByteBudget(buffered_bytes or 4 * max_request_bytes),
                       body_timeout_s=body_timeout_s, queue_timeout_s=buffer_wait_s, authenticate=authenticate,
                       public=PUBLIC_PATHS, unauthorized_headers=[(b"www-authenticate", b"Bearer")], observe=observe)

    async def caller(authorization: str | None = Header(None), x_api_key: str | None = Header(None)) -> tenancy.Caller:
        who = CALLER.get()  # the gate checked the key before reading the body
        if who is None:
            who = await authenticate({b"authorization": authorization and authorization.encode("latin-1"),
                                      b"x-api-key": x_api_key and x_api_key.encode("latin-1")})
        if who is None:
            raise _Unauthorized()
        return who

    def admin(who: tenancy.Caller = Depends(caller)) -> tenancy.Caller:
        if not who.admin:
            raise tenancy.SpaceForbidden("this route needs the admin key")
        return who

    async def engine(route: str, who: tenancy.Caller, fn: Callable, *args, write: str | None = None,
                     work: int = 0, **kwargs):
        """`fn(*args, **kwargs)` run by `run_scoped`, timed: a read (of `work`, see `ReadBounds`) in
        the read pool within the key's bounds; a write (`write`: the space, or "" for store-wide) in
        the write pool, after the space's queue."""
        t0 = time.perf_counter()
        try:
            if write is None:
                async with bounds.read(who.key_id, work):
                    return await run_scoped(who, route, readers, fn, *args, **kwargs)
            async with queues.turn(write):
                with bounds.write(who.key_id):
                    return await run_scoped(who, route, writers, fn, *args, **kwargs)
        finally:
            metrics.observe(route, time.perf_counter() - t0)

    def rendered(fn: Callable, shape: Callable[[Any], dict]) -> Callable:
        """`fn` returning its result shaped by `shape` as a rendered JSON response, so that a large
        answer (a search of top_k 10,000) is encoded in the worker thread, not in the event loop."""
        def run(*args, **kwargs):
            return JSONResponse(shape(fn(*args, **kwargs)))
        return run

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

    @app.exception_handler(_Busy)
    async def _503(request: Request, exc):
        return reply(503, "busy", str(exc), headers={"Retry-After": "1"})

    @app.exception_handler(ReadRefused)
    async def _429(request: Request, exc):
        metrics.count_refusal(429)
        return reply(429, "busy", str(exc), headers={"Retry-After": "1"})

    @app.exception_handler(ConnectionLost)
    async def _503_store(request: Request, exc):  # PostgreSQL dropped the connection mid-transaction
        return reply(503, "store_unavailable", f"{exc} Retry the request.", headers={"Retry-After": "1"})

    @app.exception_handler(ValueError)
    async def _422(request: Request, exc):
        return reply(422, "invalid_request", str(exc), field_of(str(exc)))

    @app.exception_handler(RequestValidationError)
    async def _422_schema(request: Request, exc):
        first = exc.errors()[0] if exc.errors() else {}
        if first.get("type") == "json_invalid":
            reason = (first.get("ctx") or {}).get("error") or "invalid"
            return reply(422, "invalid_request", f"request body: not valid JSON: {reason}")
        field = field_from_loc(first.get("loc", ()))
        return reply(422, "invalid_request", f"{field or 'request'}: {first.get('msg', 'invalid')}", field)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc):
        """The framework's own answers (unknown route, wrong method, ...) in the same shape."""
        message = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail)
        if exc.status_code == 404 and message == "Not Found":
            message = f"no route {request.method} {request.url.path}"
        elif exc.status_code == 405:
            message = f"method {request.method} not allowed on {request.url.path}"
        return reply(exc.status_code, _STATUS_CODES.get(exc.status_code, "http_error"), message,
                     headers=getattr(exc, "headers", None))

    async def _507(request: Request, exc):
        """A full disk (`etamem.store.disk_full`): 507, one log line, the connection kept; any
        other store or file error goes on to the 500 handler."""
        if not is_disk_full(exc):
            raise exc
        log.error("%s %s: %s (%s: %s); answered 507", request.method, request.url.path, DISK_FULL,
                  type(exc).__name__, exc)
        return reply(507, "storage_full", f"{DISK_FULL}: nothing of this request was stored; retry once the "
                     "server has room", headers={"Retry-After": "60"})

    for error in (OSError, *database_errors()):
        app.add_exception_handler(error, _507)

    @app.exception_handler(Exception)
    async def _500(request: Request, exc):
        log.exception("unhandled error on %s", request.url.path)
        return reply(500, "internal", f"{type(exc).__name__}: the server could not complete the request")

    # --- routes -------------------------------------------------------------------------------
    SpaceName = Path(..., min_length=1, max_length=128, description="memory space (one user or agent)")
    UnitId = Path(..., min_length=1, max_length=400, description="the unit's id, URL-encoded (it may hold / # :)")
    TurnId = Path(..., min_length=1, max_length=200, description="the turn's id, URL-encoded (it may hold /)")

    @app.head("/health", include_in_schema=False)  # load-balancer probes
    @app.get("/health")
    async def health():
        return {"status": "ok", "version": _version()}

    @app.head("/ready", include_in_schema=False)
    @app.get("/ready", responses={503: {"description": "the models are not loaded yet, or the server is stopping"}})
    async def ready():
        """200 once the server can serve without loading models (for load balancers; `/health`:
        the process is up)."""
        if not serving["ready"]:
            return reply(503, "not_ready", "the server is loading its models or shutting down",
                         headers={"Retry-After": "1"})
        return {"status": "ready"}

    @app.get("/v1/spaces")
    async def spaces(who: tenancy.Caller = Depends(caller)):
        return {"spaces": await engine("spaces", who, memory.spaces)}

    @app.post("/v1/spaces/{space}/turns")
    async def add(space: str = SpaceName,
                  turns: list[AddItem] = Body(..., embed=True, max_length=10_000, description=(
                      "turns or chat messages (either shape per item, in order); errors name "
                      "the item as turns[i]")),
                  who: tenancy.Caller = Depends(caller)):
        units = await engine("add", who, memory.add, turns, space=space, write=space)
        return {"units": [unit_json(a) for a in units]}

    @app.post("/v1/spaces/{space}/search")
    async def search(space: str = SpaceName, query: str = Body(..., embed=True), top_k: int | None = Body(None),
                     now: str | None = Body(None), filters: FiltersBody | None = Body(None),
                     who: tenancy.Caller = Depends(caller)):
        def shape(result):
            return {"hits": [hit_json(h) for h in result.hits], "pending_turns": result.pending_turns,
                    "weights": result.weights}
        return await engine("search", who, rendered(memory.retrieve, shape), query, space, top_k=top_k, now=now,
                            filters=filters, work=search_work(query, top_k, memory.config.top_k))

    @app.post("/v1/spaces/{space}/answer")
    async def answer(space: str = SpaceName,
                     query: str | None = Body(None, description="the question (as for /search)"),
                     question: str | None = Body(None, description="the question (the older name of `query`)"),
                     top_k: int | None = Body(None),
                     now: str | None = Body(None), filters: FiltersBody | None = Body(None),
                     who: tenancy.Caller = Depends(caller)):
        question = one_question(query, question)

        def shape(ans):
            return {"text": ans.text, "llm_used": ans.llm_used, "note": ans.note,
                    "hits": [hit_json(h) for h in ans.hits]}
        return await engine("answer", who, rendered(memory.answer, shape), question, space=space, now=now,
                            top_k=top_k, filters=filters, work=search_work(question, top_k, memory.config.top_k))

    @app.post("/v1/spaces/{space}/context")
    async def context(space: str = SpaceName, query: str = Body(..., embed=True), top_k: int | None = Body(None),
                      now: str | None = Body(None), filters: FiltersBody | None = Body(None),
                      who: tenancy.Caller = Depends(caller)):
        def shape(packet):
            return {"context": packet.text, "hits": [hit_json(h) for h in packet.hits]}
        return await engine("context", who, rendered(memory.context_packet, shape), query, space, top_k=top_k,
                            now=now, filters=filters, work=search_work(query, top_k, memory.config.context_top_k))

    @app.get("/v1/spaces/{space}/units")
    async def list_units(space: str = SpaceName, status: str = Query("active", pattern="^(active|superseded|all)$"),
                         who: tenancy.Caller = Depends(caller)):
        return await engine("list", who, rendered(memory.list, lambda units: {"units": [unit_json(a) for a in units]}),
                            space, status=None if status == "all" else status)

    @app.get("/v1/spaces/{space}/stats")
    async def stats(space: str = SpaceName, who: tenancy.Caller = Depends(caller)):
        return await engine("stats", who, memory.stats, space)

    # ids may hold '/': `:path` takes the rest of the path whole (these routes come after the fixed ones)
    @app.get("/v1/spaces/{space}/history/{amu_id:path}")
    async def history(space: str = SpaceName, amu_id: str = UnitId, who: tenancy.Caller = Depends(caller)):
        versions = await engine("get", who, memory.history, amu_id, space)
        return {"versions": [version_json(v) for v in versions]}

    @app.get("/v1/spaces/{space}/units/{amu_id:path}")
    async def get(space: str = SpaceName, amu_id: str = UnitId, who: tenancy.Caller = Depends(caller)):
        return unit_json(await engine("get", who, memory.get, amu_id, space))

    @app.delete("/v1/spaces/{space}/units/{amu_id:path}")
    async def delete_unit(space: str = SpaceName, amu_id: str = UnitId, who: tenancy.Caller = Depends(caller)):
        return {"deleted": await engine("delete", who, memory.delete, amu_id, space, write=space)}

    @app.get("/v1/spaces/{space}/turns/{turn_id:path}")
    async def get_turn(space: str = SpaceName, turn_id: str = TurnId, who: tenancy.Caller = Depends(caller)):
        found = await engine("get", who, memory.turns, space, turn_ids=[check_id(turn_id, "turn_id")])
        if not found:
            raise UnknownIdError(f"no turn {turn_id!r} in space {space!r}")
        return turn_json(found[0])

    @app.delete("/v1/spaces/{space}/turns/{turn_id:path}")
    async def delete_turn(space: str = SpaceName, turn_id: str = TurnId, who: tenancy.Caller = Depends(caller)):
        return {"deleted": await engine("delete", who, memory.delete, space=space, turn_id=turn_id, write=space)}

    @app.delete("/v1/spaces/{space}")
    async def delete_space(space: str = SpaceName, who: tenancy.Caller = Depends(caller),
                           confirm: str | None = Query(None, description="the space's name again: a client that "
                                                       "removes dot segments sends DELETE /v1/spaces/S/turns/.. "
                                                       "here, without it")):
        """Forget the whole space; `?confirm=<space>` is required."""
        if confirm != space:
            raise ValueError(f"confirm: deleting the whole space {space!r} needs ?confirm={quote(space, safe='')} "
                             "(a DELETE of /v1/spaces/S/turns/.. or /units/.. reaches this route once a client "
                             "removes the dot segment)")
        return {"deleted": await engine("delete", who, memory.delete, space=space, write=space)}

    @app.get("/metrics", response_class=PlainTextResponse)
    async def prometheus(who: tenancy.Caller = Depends(admin)):
        def llm_half() -> str:
            queue, llm = memory.llm_queue, memory.llm
            return Metrics.llm_lines(memory.store.count_queued_all(), None if queue is None else queue.stats(),
                                     {} if llm is None else llm.usage())

        return metrics.prometheus() + await asyncio.to_thread(llm_half)

    @app.post("/v1/keys")
    async def create_key(spaces: list[str] = Body(..., embed=True, min_length=1, max_length=1000),
                         note: str = Body("", max_length=200), who: tenancy.Caller = Depends(admin)):
        key, record = await engine("keys", who, tenancy.create_key, memory.store, spaces, note, write="")
        return {"key": key, "key_id": record.key_id, "spaces": list(record.spaces)}

    @app.get("/v1/keys")
    async def list_keys(who: tenancy.Caller = Depends(admin)):
        keys = await engine("keys", who, memory.store.api_keys)
        return {"keys": [{"key_id": k.key_id, "spaces": list(k.spaces), "created": k.created,
                          "revoked": k.revoked, "note": k.note} for k in keys]}

    @app.delete("/v1/keys/{key_id}")
    async def revoke_key(key_id: str = Path(..., max_length=64), who: tenancy.Caller = Depends(admin)):
        if not await engine("keys", who, memory.store.revoke_api_key, key_id, write=""):
            raise UnknownIdError(f"no key {key_id!r}")
        return {"revoked": key_id}

    return app


def _header(headers: dict, name: bytes) -> str | None:
    value = headers.get(name)
    return value.decode("latin-1") if value is not None else None


class _Unauthorized(Exception):
    pass


def _version() -> str:
    from etamem import __version__

    return __version__


def serve(target: str, *, host: str = "127.0.0.1", port: int = 8420, config=None, admin_key: str | None = None,
          workers: int = 4, max_request_bytes: int = 8 << 20, graceful_s: float = 30.0,
          head_timeout_s: float = 10.0, body_timeout_s: float = 30.0, max_reads_per_key: int | None = None,
          max_read_work: int = 1_000_000) -> None:
    """Run the HTTP API on `target` (a store directory) until SIGINT/SIGTERM (the bounds: `create_app`'s)."""
    try:
        import uvicorn  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(f"the HTTP server needs FastAPI and uvicorn: {install_hint('serve')}") from exc
    from etamem.memory import Memory
    from etamem.serve.guard import checked_admin_key, run_server, server_config

    admin_key = checked_admin_key(admin_key, "admin_key")
    memory = Memory(target, config)
    app = create_app(memory, admin_key=admin_key, max_request_bytes=max_request_bytes, workers=workers,
                     body_timeout_s=body_timeout_s, max_reads_per_key=max_reads_per_key, max_read_work=max_read_work)
    run_server(server_config(app, host=host, port=port, graceful_s=graceful_s, head_timeout_s=head_timeout_s))
