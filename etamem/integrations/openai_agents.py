"""The OpenAI Agents SDK: `EtamemSession` (the SDK's `Session` protocol) and `etamem_instructions`.

    from agents import Agent, Runner
    from etamem import AsyncMemory
    from etamem.integrations.openai_agents import EtamemSession, etamem_instructions

    memory = AsyncMemory("store_dir")
    agent = Agent(name="Assistant", instructions=etamem_instructions(memory, "ana", "Be brief."))
    result = await Runner.run(agent, "Where do I live?", session=EtamemSession("chat-1", memory, space="ana"))

What is stored where: the session's items, exactly as the SDK gave them (messages, function
calls and their outputs, reasoning items, in order), are items of kind "openai_agents" of the
space in the store (`SqlStore.put_item`, table `space_items`: one row per item, keyed by the
session and a random id, in insertion order), each beside the id of the turn made from it, if
any; an item goes with its space, and with its turn when that is deleted through `Memory.delete`. Items with a user or assistant role and some text also become
ETAMem turns of that space (role -> speaker, the session id as the turn's session), so their
units are searchable like any other memory. `pop_item` removes the last item and its turn with
the turn's units (`Memory.delete(turn_id=...)`), `clear_session` every item and turn of the session.
A session's writes are serialised in this process; two processes may append to one session at
once (each item is its own row).

Needs the SDK: `pip install -e ".[openai-agents]"`.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import uuid
from typing import Any, Mapping

from etamem.install_hints import install_hint

try:
    from agents.memory.session_settings import SessionSettings, resolve_session_limit
except ImportError as exc:  # pragma: no cover - exercised in a process without the SDK
    raise ImportError('etamem.integrations.openai_agents needs the OpenAI Agents SDK: '
                      + install_hint("openai-agents")) from exc

from etamem import tenancy
from etamem.async_memory import AsyncMemory
from etamem.ingest.inputs import validate_space
from etamem.ingest.messages import message_text
from etamem.integrations.recall import answering_context
from etamem.memory import Memory
from etamem.records import UnknownIdError
from etamem.store.schema import StoredItem

log = logging.getLogger(__name__)

KIND = "openai_agents"  # the store's item kind of this adapter
SPEAKER_ROLES = ("user", "assistant")  # items with these roles and some text become turns
_LOCKS: dict[tuple[int, str, str], threading.Lock] = {}
_LOCKS_GUARD = threading.Lock()


def _session_lock(memory: Memory, space: str, session_id: str) -> threading.Lock:
    """One lock per (store, space, session) in this process, shared by the sessions that name it."""
    with _LOCKS_GUARD:
        return _LOCKS.setdefault((id(memory.store), space, session_id), threading.Lock())


def item_text(item: Mapping[str, Any]) -> tuple[str, str] | None:
    """(speaker, text) of an item that is a user or assistant message with some text.

    Args:
        item: A Responses input item (a dict).

    Returns:
        (role, text), or None for other items (other roles, function calls, no text).
    """
    role = item.get("role")
    if role not in SPEAKER_ROLES or item.get("type", "message") != "message":
        return None
    text = message_text(item.get("content"), "item.content")
    return (role, text) if text.strip() else None


class EtamemSession:
    """The SDK's `Session` protocol on an ETAMem store (see the module docstring).

    Args:
        session_id: The conversation: the SDK's session id, and the session id of the turns made
            from its items.
        memory: An `AsyncMemory` (shared by sessions: one thread pool; stays open), a `Memory`
            (wrapped in a pool of this session's; the Memory stays its owner's), or a store path
            (opened here and closed by `close`; None: in memory).
        space: The ETAMem space the turns go to (default None: the session id); give a user's space
            to share one memory across that user's conversations.
        session_settings: The SDK's `SessionSettings`, whose `limit` is `get_items`' default
            (keyword only; default None: `SessionSettings()`).

    Raises:
        ValueError: An empty `session_id` or a bad space name.
    """

    def __init__(self, session_id: str, memory: AsyncMemory | Memory | str | os.PathLike | None,
                 space: str | None = None, *, session_settings: SessionSettings | None = None):
        if not isinstance(session_id, str) or not session_id.strip():
            raise ValueError(f"session_id: expected a non-empty string, got {session_id!r}")
        self.session_id = session_id
        self.space = validate_space(session_id if space is None else space)
        self.session_settings = session_settings if session_settings is not None else SessionSettings()
        if isinstance(memory, AsyncMemory):
            self.memory, self._owns = memory, False
        elif isinstance(memory, Memory):
            self.memory, self._owns = AsyncMemory(memory), True  # our pool; aclose leaves the Memory open
        else:
            self.memory, self._owns = AsyncMemory(memory), True
        self._prefix = f"{len(session_id)}:{session_id}:"  # item keys: prefix + a random id

    # --- the session's items in the store ------------------------------------------------
    def _records(self) -> list[StoredItem]:
        return self.memory.memory.store.items(KIND, [self.space], prefix=self._prefix)

    def _locked(self):
        tenancy.check(self.space)  # a store call: checked here as Memory checks its own
        return _session_lock(self.memory.memory, self.space, self.session_id)

    # --- the Session protocol ---------------------------------------------------------
    async def get_items(self, limit: int | None = None) -> list[dict]:
        """The session's items in the order added, as added.

        Args:
            limit: The latest `limit` items (default None: `session_settings.limit`, and all when
                that is unset; 0: none, as the SDK's SQLiteSession).

        Returns:
            The items (dicts).
        """
        n = resolve_session_limit(limit, self.session_settings)

        def read() -> list[dict]:
            with self._locked():
                items = [json.loads(r.value) for r in self._records()]
            if n is None or n < 0:
                return items
            return items[-n:] if n > 0 else []

        return await self.memory.call(read)

    async def add_items(self, items: list[dict]) -> None:
        """Append items; those with user or assistant text also become turns of the space.

        Their units are made and indexed (`Memory.add`).

        Args:
            items: JSON-serialisable dicts, as the SDK passes them (Responses input items).

        Raises:
            ValueError: An item that is not a dict, or a bad turn (as `Memory.add`).
        """
        if not items:
            return
        records, turns = [], []
        for i, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise ValueError(f"items[{i}]: expected a dict (a Responses input item), got {type(item).__name__}")
            said = item_text(item)
            turn_id = None if said is None else f"oa-{uuid.uuid4().hex}"
            records.append((json.dumps(item), turn_id or ""))
            if said is not None:
                turns.append({"turn_id": turn_id, "session_id": self.session_id, "speaker": said[0], "text": said[1]})

        def write() -> None:
            with self._locked():
                if turns:
                    self.memory.memory.add(turns, space=self.space)
                for value, turn_id in records:
                    self.memory.memory.store.put_item(self.space, KIND, self._prefix + uuid.uuid4().hex, value, turn_id)

        await self.memory.call(write)

    async def pop_item(self) -> dict | None:
        """Remove and return the latest item, with its turn and the turn's units.

        Returns:
            The item, or None when the session is empty.
        """
        def pop() -> dict | None:
            with self._locked():
                records = self._records()
                if not records:
                    return None
                last = records[-1]
                if last.turn_id:
                    self._forget_turn(last.turn_id)  # its item goes with it
                self.memory.memory.store.delete_item(self.space, KIND, last.key)
                return json.loads(last.value)

        return await self.memory.call(pop)

    async def clear_session(self) -> None:
        """Remove every item of the session, with their turns and units."""
        def clear() -> None:
            with self._locked():
                for r in reversed(self._records()):
                    if r.turn_id:
                        self._forget_turn(r.turn_id)
                    self.memory.memory.store.delete_item(self.space, KIND, r.key)

        await self.memory.call(clear)

    def _forget_turn(self, turn_id: str) -> None:
        try:
            self.memory.memory.delete(turn_id=turn_id, space=self.space)
        except UnknownIdError:  # already deleted (e.g. by `Memory.delete`)
            log.debug("session %s: turn %s was already gone", self.session_id, turn_id)

    async def close(self) -> None:
        """Close the pool (and the store) this session opened; a shared `AsyncMemory` stays open."""
        if self._owns:
            await self.memory.aclose()


def latest_user_text(items: list[Any]) -> str | None:
    """The text of the latest user message among Responses input items.

    Args:
        items: Responses input items.

    Returns:
        Its text, or None if there is none.
    """
    for item in reversed(items or []):
        if isinstance(item, Mapping):
            said = item_text(item)
            if said is not None and said[0] == "user":
                return said[1]
    return None


def etamem_instructions(memory: AsyncMemory | Memory, space: str, base_instructions: str = "", *,
                        top_k: int | None = None):
    """`Agent(instructions=...)` that adds the memory of `space` to `base_instructions`.

    At each turn it asks `Memory.context` of `space` for the run's latest user message (in
    `memory`'s pool), without that message itself (the Runner stores it before the model call:
    `etamem.integrations.recall.answering_context`). With no user message in the turn's input:
    `base_instructions` alone.

    Args:
        memory: An `AsyncMemory`, or a `Memory` (given a pool of its own).
        space: The ETAMem space to recall from.
        base_instructions: The agent's own instructions, put first (default "").
        top_k: Memories per turn (keyword only; default None: `Config.context_top_k`).

    Returns:
        (Callable): An async function `(run_context, agent) -> str` for `Agent(instructions=...)`.

    Raises:
        ValueError: A bad space name.
    """
    amem = memory if isinstance(memory, AsyncMemory) else AsyncMemory(memory)
    space = validate_space(space)

    async def instructions(run_context, agent) -> str:
        query = latest_user_text(getattr(run_context, "turn_input", None) or [])
        if query is None:
            return base_instructions
        context = (await amem.call(answering_context, amem.memory, query, space, top_k)).text
        return f"{base_instructions}\n\n{context}".strip() + "\n" if base_instructions else context

    return instructions
