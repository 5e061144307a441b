"""ETAMem as a LlamaIndex memory block: `EtamemMemoryBlock` (`pip install -e ".[llamaindex]"`).

    from llama_index.core.memory import Memory
    from etamem.integrations.llamaindex import EtamemMemoryBlock

    block = EtamemMemoryBlock("stores/agent", space="ana")   # or an AsyncMemory / Memory
    memory = Memory.from_defaults(session_id="chat-1", memory_blocks=[block], token_limit=4000)

LlamaIndex's `Memory` keeps the latest messages as short-term history; when they pass
`token_limit * chat_history_token_ratio` it flushes the oldest to its memory blocks (`aput`).
This block adds the flushed messages to an ETAMem space as turns: user messages as speaker
`user`, assistant ones (`assistant`, and `chatbot` / `model` of other providers) as `assistant`,
the text of their text blocks joined by newlines, the LlamaIndex session id as the turns'
session, `additional_kwargs["timestamp"]` (ISO 8601, epoch seconds or a datetime) as their time
when given (else the time of the flush); system, developer and tool messages and messages
without text are left out. The
units extracted from them are then found like any other memory of the space. On `memory.get()`
(or `aget`) the block returns `Memory.context` of the space for the latest user message
(`top_k` memories with their dates and source messages), which LlamaIndex puts into the system
message or the latest user message (its `insert_method`); with no user message, or nothing
stored yet, it returns "" and LlamaIndex leaves the block out.

The space is shared by every LlamaIndex session that names it: a new `Memory` with another
session id, over the same ETAMem store, recalls what earlier sessions flushed. The engine work
runs in an `AsyncMemory` thread pool, so the event loop never waits for it. Messages are kept
verbatim by LlamaIndex's own chat store; ETAMem keeps the turns made from them.
"""
from __future__ import annotations

import asyncio
import os
from typing import Any, List, Optional

from etamem.install_hints import install_hint

try:
    from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock
    from llama_index.core.bridge.pydantic import Field, PrivateAttr, field_validator
    from llama_index.core.memory.memory import BaseMemoryBlock
except ImportError as exc:  # pragma: no cover - exercised in a process without LlamaIndex
    raise ImportError(f'etamem.integrations.llamaindex needs LlamaIndex: {install_hint("llamaindex")}') from exc

from etamem.async_memory import AsyncMemory
from etamem.ingest.inputs import validate_space
from etamem.integrations.recall import answering_context
from etamem.memory import Memory

USER_ROLES = (MessageRole.USER,)
ASSISTANT_ROLES = (MessageRole.ASSISTANT, MessageRole.CHATBOT, MessageRole.MODEL)


def message_text(message: ChatMessage) -> str:
    """The text of a LlamaIndex message: its text blocks joined by newlines.

    Images, audio, tool calls and thinking are left out.

    Args:
        message: A LlamaIndex `ChatMessage`.

    Returns:
        The text ("" for none).
    """
    return "\n".join(b.text for b in message.blocks if isinstance(b, TextBlock) and b.text.strip())


def speaker_of(message: ChatMessage) -> str | None:
    """The speaker a message's role is kept as.

    Args:
        message: A LlamaIndex `ChatMessage`.

    Returns:
        "user" (user), "assistant" (assistant, chatbot, model), or None for the roles left out
            (system, developer, tool, ...).
    """
    if message.role in USER_ROLES:
        return "user"
    if message.role in ASSISTANT_ROLES:
        return "assistant"
    return None


class EtamemMemoryBlock(BaseMemoryBlock[str]):
    """A LlamaIndex memory block backed by an ETAMem space (see the module docstring).

    Give it to `llama_index.core.memory.Memory.from_defaults(memory_blocks=[...])`: flushed
    messages become turns of the space, and `get` returns `Memory.context` for the latest user
    message.

    Args:
        memory: An `AsyncMemory` (shared: one store, one thread pool), a `Memory` (wrapped in a
            pool of this block's; the Memory stays its owner's), or a store path / PostgreSQL URL
            (opened here and closed by `aclose`); None (default) keeps everything in memory.
            Positional only.
        **data: The block's fields below, as keywords (`space="ana"`, `top_k=5`, ...).

    Attributes:
        name: The block's name in LlamaIndex's memory (default "etamem").
        space: The ETAMem space the messages go to and are recalled from (a user's, to share it
            across that user's sessions; default "default").
        top_k: Memories returned per `get` (an integer >= 1; None: `Config.context_top_k`).
        user_name: The name the extractor writes in place of `user` ("Ana adopted a cat" rather
            than "The user adopted a cat"; None: `user`).
        assistant_name: The name written in place of `assistant` (None: `assistant`).

    Raises:
        ValueError: A bad space name, `top_k` or name (pydantic's ValidationError, a ValueError).
    """

    name: str = Field(default="etamem", description="The name of the memory block.")
    space: str = Field(default="default", description="The ETAMem space the messages go to and are recalled from.")
    top_k: Optional[int] = Field(default=None, description="Memories per get (None: Config.context_top_k).")
    user_name: Optional[str] = Field(default=None, description="The user's name, for the extracted facts.")
    assistant_name: Optional[str] = Field(default=None, description="The assistant's name, for the extracted facts.")
    _memory: AsyncMemory = PrivateAttr()
    _owns: bool = PrivateAttr(default=False)

    def __init__(self, memory: AsyncMemory | Memory | str | os.PathLike | None = None, /, **data: Any):
        super().__init__(**data)
        if isinstance(memory, AsyncMemory):
            self._memory, self._owns = memory, False
        else:  # a Memory: our pool, its owner closes it; a path: ours to open and close
            self._memory, self._owns = AsyncMemory(memory), True

    @field_validator("space", mode="before")
    @classmethod
    def _space(cls, value: str) -> str:
        return validate_space(value)

    @field_validator("top_k", mode="before")
    @classmethod
    def _top_k(cls, value: Optional[int]) -> Optional[int]:
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"top_k: expected an integer >= 1 or None, got {value!r}")
        return value

    @field_validator("user_name", "assistant_name", mode="before")
    @classmethod
    def _name(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ValueError(f"expected a non-empty name or None, got {value!r}")
        return value

    @property
    def memory(self) -> AsyncMemory:
        """The `AsyncMemory` this block reads and writes (`.memory` is the engine's `Memory`)."""
        return self._memory

    def chat_messages(self, messages: List[ChatMessage]) -> list[dict]:
        """The ETAMem chat messages made from LlamaIndex messages.

        User and assistant messages with text, with `user_name` / `assistant_name` as their `name`,
        their LlamaIndex session id and, when `additional_kwargs` has one, their timestamp.

        Args:
            messages: LlamaIndex `ChatMessage`s.

        Returns:
            Chat message dicts (`{"role", "content", ...}`) for `Memory.add`.
        """
        out = []
        for message in messages:
            speaker, text = speaker_of(message), message_text(message)
            if speaker is None or not text:
                continue
            said: dict[str, Any] = {"role": speaker, "content": text}
            name = self.user_name if speaker == "user" else self.assistant_name
            if name is not None:
                said["name"] = name
            session_id = message.additional_kwargs.get("session_id")
            if isinstance(session_id, str) and session_id.strip():
                said["session_id"] = session_id
            when = message.additional_kwargs.get("timestamp")
            if when is not None:  # when it was said (ISO 8601, epoch seconds, a datetime); else now
                said["timestamp"] = when
            out.append(said)
        return out

    async def _aput(self, messages: List[ChatMessage]) -> None:
        """Add the messages LlamaIndex flushed from its short-term history as turns of the space."""
        said = self.chat_messages(messages)
        if said:
            await self._memory.add(said, space=self.space)

    async def _aget(self, messages: Optional[List[ChatMessage]] = None, **block_kwargs: Any) -> str:
        """`Memory.context` of the space for the latest user message, without that message itself
        (`etamem.integrations.recall.answering_context`); "" without one, or when nothing is stored."""
        query = next((message_text(m) for m in reversed(messages or []) if m.role in USER_ROLES and message_text(m)),
                     None)
        if query is None:
            return ""
        packet = await self._memory.call(answering_context, self._memory.memory, query, self.space, self.top_k)
        return packet.text if packet.hits else ""

    async def aclose(self) -> None:
        """Close the pool (and the store) this block opened; a shared `AsyncMemory` stays open."""
        if self._owns:
            await self._memory.aclose()

    def close(self) -> None:
        """`aclose` from synchronous code (not inside a running event loop)."""
        asyncio.run(self.aclose())
