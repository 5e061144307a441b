"""MCP server (PyPI `mcp`, imported lazily: `pip install -e ".[mcp]"`): the memory as tools for
agent frameworks — `add_memory`, `search_memory`, `get_context`, `delete_memory`, `answer` — over
stdio or streamable HTTP (`etamem mcp STORE [--transport http --port N]`).

Tenancy as in the HTTP API (`etamem.tenancy`): over HTTP each request's `Authorization: Bearer`
key decides the spaces; over stdio the process's key (`ETAMEM_API_KEY`, checked again on every
call, so a revoked key stops working). Every engine call runs inside the key's scope in a worker
thread. A bad argument, a refused space or a full disk is a tool error with the message, not a
crash. A key's reads are bounded as in `etamem serve` (`etamem.serve.fairness`, its defaults: 2 in
flight, search work 1,000,000); beyond, after a wait of 1 s, a tool error starting "busy:".
"""
# no `from __future__ import annotations`: the mcp package reads the tools' annotations at run time
import functools
import logging
import os
from typing import Union

from etamem import tenancy
from etamem.install_hints import install_hint
from etamem.records import UnknownIdError
from etamem.serve.app import (
    MessageItem,
    SearchFilters,
    TurnItem,
    hit_json,
    one_question,
    run_scoped,
    unit_json,
    version_json,
)
from etamem.serve.fairness import ReadBounds, ReadRefused, search_work
from etamem.store.disk_full import DISK_FULL, is_disk_full

log = logging.getLogger(__name__)

API_KEY_ENV = "ETAMEM_API_KEY"


def plain(filters: SearchFilters | None) -> dict | None:
    """A tool's filters as the engine takes them (a dict of the fields given), or None."""
    return None if filters is None else filters.model_dump(exclude_unset=True)


def _mcp():
    try:
        from mcp.server.mcpserver import Context, MCPServer
        from mcp.server.mcpserver.exceptions import ToolError
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(f"the MCP server needs the mcp package: {install_hint('mcp')}") from exc
    return Context, MCPServer, ToolError


def build_server(memory, *, stdio_key: str | None = None, admin_key: str | None = None):
    """An `MCPServer` whose tools call `memory` (an `etamem.Memory`) for the request's caller."""
    import anyio

    from etamem.serve.guard import checked_admin_key, repeated_credentials

    admin_key = checked_admin_key(admin_key, "admin_key")

    Context, MCPServer, ToolError = _mcp()
    server = MCPServer(name="etamem", instructions=(
        "Long-term memory of conversations. Store chat messages ({role, content}) or dialogue turns "
        "({speaker, text}) with add_memory (give ids: retries are then safe; times default to now); "
        "get a dated memory packet for your system prompt with get_context, find what was said with "
        "search_memory (hits carry their source turns), answer questions from memory with answer, see how a fact changed "
        "with memory_history, and forget with delete_memory. Each tool works in one space (a user or an agent)."))
    limiter = anyio.CapacityLimiter(4)

    def caller_of(ctx) -> tenancy.Caller:
        request = getattr(getattr(ctx, "request_context", None), "request", None)
        if request is not None:  # streamable HTTP: the request's key
            twice = repeated_credentials(request.headers.raw)
            if twice:
                raise PermissionError(f"{twice}: header given more than once; send one")
            key = tenancy.presented_key(request.headers.get("authorization"), request.headers.get("x-api-key"))
        else:  # stdio / in-process: the process's key
            key = stdio_key
        who = tenancy.authenticate(key, memory.store, admin_key)
        if who is None:
            raise PermissionError("a valid API key is required (Authorization: Bearer etm_... over HTTP, "
                                  f"{API_KEY_ENV} over stdio)")
        return who

    bounds = ReadBounds(2, 1_000_000)  # per key, as `etamem serve` with its defaults (etamem.serve.fairness)

    async def engine(operation, ctx, fn, *args, work: int | None = None, **kwargs):
        """`fn` in a worker thread inside the caller's scope, a read (`work` given, see
        `ReadBounds`) within its key's bounds; the caller's mistakes (no key, a space outside it,
        a bad value, an unknown id) and a key over its bounds become tool errors with their message."""
        try:
            who = caller_of(ctx)
            if work is None:
                with bounds.write(who.key_id):
                    return await run_scoped(who, operation, limiter, fn, *args, **kwargs)
            async with bounds.read(who.key_id, work):
                return await run_scoped(who, operation, limiter, fn, *args, **kwargs)
        except ReadRefused as exc:
            raise ToolError(f"busy: {exc}") from None
        except (ValueError, PermissionError, UnknownIdError) as exc:
            raise ToolError(str(exc)) from None
        except Exception as exc:
            if not is_disk_full(exc):
                raise
            log.error("%s: %s (%s); answered as a tool error", operation, DISK_FULL, exc)
            raise ToolError(f"{DISK_FULL}: nothing of this call was stored; retry once the server has room") from None

    @server.tool()
    async def add_memory(space: str, turns: list[Union[MessageItem, TurnItem]], ctx: Context) -> dict:
        """Store chat messages or dialogue turns in a space and extract memory units from them. A
        message: role, content, optional name, id (makes retries safe), timestamp, session_id. A
        turn: speaker, text, optional session_id, timestamp, turn_id (makes retries safe), extra.
        Either may carry metadata (a flat object that search filters match). Timestamps default to
        now, sessions to the space's open one."""
        items = [t.model_dump(exclude_unset=True) for t in turns]  # plain dicts, as the engine takes them
        units = await engine("add", ctx, memory.add, items, space=space)
        return {"units": [unit_json(a) for a in units]}

    @server.tool()
    async def search_memory(space: str, query: str, ctx: Context, top_k: int | None = None,
                            now: str | None = None, filters: SearchFilters | None = None) -> dict:
        """The memory units of a space that best match the query, best first, each with its source
        turns (the messages it was drawn from) and metadata; `now` is the date the question is asked
        (for "last week"); `filters` keeps only units of these speakers / sessions / times / metadata
        (top_k of them whenever that many match)."""
        result = await engine("search", ctx, memory.retrieve, query, space, top_k=top_k, now=now,
                              filters=plain(filters), work=search_work(query, top_k, memory.config.top_k))
        return {"hits": [hit_json(h) for h in result.hits], "pending_turns": result.pending_turns}

    @server.tool()
    async def get_context(space: str, query: str, ctx: Context, top_k: int | None = None,
                          now: str | None = None, filters: SearchFilters | None = None) -> dict:
        """A prompt-ready memory packet (facts with their dates) for the query, to put in a system
        prompt; `now` is the date the question is asked; `filters` as for search_memory."""
        return {"context": await engine("context", ctx, memory.context, query, space, top_k=top_k, now=now,
                                        filters=plain(filters),
                                        work=search_work(query, top_k, memory.config.context_top_k))}

    @server.tool()
    async def delete_memory(space: str, ctx: Context, unit_id: str | None = None, turn_id: str | None = None) -> dict:
        """Forget a memory unit (unit_id), a turn and its units (turn_id), or, with neither, the whole
        space. Returns how many units went."""
        return {"deleted": await engine("delete", ctx, functools.partial(memory.delete, unit_id, space, turn_id=turn_id))}

    @server.tool()
    async def memory_history(space: str, unit_id: str, ctx: Context) -> dict:
        """The versions of a remembered fact, oldest first (e.g. where the user lived before and
        lives now), each with its status: "active" (current) or "superseded"."""
        versions = await engine("get", ctx, memory.history, unit_id, space, work=0)
        return {"versions": [version_json(v) for v in versions]}

    @server.tool()
    async def answer(space: str, ctx: Context, query: str | None = None, question: str | None = None,
                     now: str | None = None, top_k: int | None = None, filters: SearchFilters | None = None) -> dict:
        """Answer a question (`query`, as for search_memory; `question` is its older name) from a
        space's memory, with the evidence used (only units `filters` lets through, as for search_memory)."""
        try:
            question = one_question(query, question)
        except ValueError as exc:  # the caller's mistake: a tool error with its message
            raise ToolError(str(exc)) from None
        ans = await engine("answer", ctx, memory.answer, question, space=space, now=now, top_k=top_k,
                           filters=plain(filters), work=search_work(question, top_k, memory.config.top_k))
        return {"text": ans.text, "llm_used": ans.llm_used, "note": ans.note,
                "evidence": [hit_json(h) for h in ans.hits[:5]]}

    return server


def run(store: str, *, transport: str = "stdio", host: str = "127.0.0.1", port: int = 8421, config=None) -> None:
    """Serve `store` over MCP until stopped (stdio: until the client closes stdin); the models are
    loaded before the first call."""
    from etamem.memory import Memory
    from etamem.serve.guard import admin_key_from_env

    if transport not in ("stdio", "http"):
        raise ValueError(f"transport: expected 'stdio' or 'http', got {transport!r}")
    admin_key = admin_key_from_env()  # the rule of `etamem serve`: at least 24 characters
    key = os.environ.get(API_KEY_ENV) if transport == "stdio" else None
    if transport == "stdio" and not key:
        raise ValueError(f"{API_KEY_ENV}: set the API key this stdio server acts for (etamem keys create)")
    memory = Memory(store, config)
    try:
        memory.warm()
        if transport == "stdio":
            build_server(memory, stdio_key=key, admin_key=admin_key).run("stdio")
        else:
            from etamem.serve.guard import run_server, server_config

            app = build_server(memory, admin_key=admin_key).streamable_http_app(host=host)
            run_server(server_config(app, host=host, port=port, graceful_s=30))
    finally:
        memory.close()
