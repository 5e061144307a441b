"""The LlamaIndex memory block (issue 35): `EtamemMemoryBlock`, against the real
`llama_index.core.memory.Memory` (the `llamaindex` extra).

LlamaIndex's `Memory.from_defaults` with token limits small enough to flush: the flushed
messages reach ETAMem as turns (speakers, texts, session; system and tool messages left out),
a later `memory.get()` holds a fact from a flushed message (system or user insertion), a fresh
LlamaIndex Memory with another session id over the same ETAMem store recalls it, the engine work
runs in the AsyncMemory pool, errors are clear, and the docs page's example runs as written."""
from __future__ import annotations

import asyncio
import importlib
import re
import sys
import threading
from pathlib import Path

import pytest

pytest.importorskip("llama_index.core", reason='LlamaIndex: pip install -e ".[llamaindex]"')

from llama_index.core.llms import ChatMessage  # noqa: E402
from llama_index.core.memory import InsertMethod, StaticMemoryBlock  # noqa: E402
from llama_index.core.memory import Memory as ChatMemory  # noqa: E402
from llama_index.core.storage.chat_store.sql import MessageStatus  # noqa: E402

from etamem import AsyncMemory, Config, Memory  # noqa: E402
from etamem.integrations.llamaindex import EtamemMemoryBlock  # noqa: E402
from etamem.models.affect import VaderAffectTagger  # noqa: E402
from etamem.models.encoders import CachedEncoder  # noqa: E402

PAGE = Path(__file__).resolve().parents[1] / "docs" / "integrations" / "llamaindex.md"

MONDAY = [("system", "You are a kind assistant."),
          ("user", "I adopted a grey cat named Miso last spring."), ("assistant", "Congratulations on Miso!"),
          ("user", "I work night shifts as a nurse at the hospital."), ("assistant", "That must be tiring."),
          ("user", "What is the weather in Lyon?"), ("tool", "sunny, 24 C"), ("assistant", "It is sunny in Lyon."),
          ("user", "My sister Priya visits next weekend."), ("assistant", "Have a lovely time together."),
          ("user", "Any tips for sleeping during the day?"), ("assistant", "Blackout curtains help.")]
SMALL = {"token_limit": 50, "chat_history_token_ratio": 0.5, "token_flush_size": 20}  # flushes every few messages


def engine(encoder, path=None) -> AsyncMemory:
    enc = CachedEncoder(encoder)
    return AsyncMemory(path, text_encoder=enc, affect_tagger=VaderAffectTagger(enc))


def chat(block: EtamemMemoryBlock, session_id: str, **kw) -> ChatMemory:
    return ChatMemory.from_defaults(session_id=session_id, memory_blocks=[block], **kw)


def converse(memory: ChatMemory, said=MONDAY) -> None:
    for role, text in said:
        memory.put(ChatMessage(role=role, content=text))


def texts(messages) -> list[str]:
    return [m.content for m in messages]


# --- what LlamaIndex flushes becomes ETAMem turns ----------------------------------------------
def test_flushed_messages_become_turns_with_their_speakers(hashing_encoder):
    amem = engine(hashing_encoder)
    memory = chat(EtamemMemoryBlock(amem, space="ana"), "chat-1", **SMALL)
    converse(memory)
    flushed = memory.get_all(status=MessageStatus.ARCHIVED)
    active = memory.get_all(status=MessageStatus.ACTIVE)
    assert len(flushed) >= 6 and active, (texts(flushed), texts(active))  # the limits did flush
    turns = asyncio.run(amem.turns("ana"))
    expected = [(m.role.value, m.content) for m in flushed if m.role.value in ("user", "assistant")]
    assert [(t.speaker, t.text) for t in turns] == expected
    assert {t.session_id for t in turns} == {"chat-1"}  # the LlamaIndex session is the turns' session
    stored = {t.text for t in turns}
    assert "You are a kind assistant." not in stored and "sunny, 24 C" not in stored  # system, tool: left out
    assert any(m.role.value == "tool" for m in flushed)  # (the tool message was flushed, and skipped)
    assert not stored & set(texts(active))  # what is still short-term history is not stored yet
    asyncio.run(amem.aclose())


def test_names_replace_the_roles_in_the_units(hashing_encoder):
    amem = engine(hashing_encoder)
    memory = chat(EtamemMemoryBlock(amem, space="ana", user_name="Ana", assistant_name="Sol"), "c", **SMALL)
    converse(memory)
    units = [u.text for u in asyncio.run(amem.list("ana"))]
    assert any(u.startswith("Ana adopted a grey cat") for u in units), units
    turns = asyncio.run(amem.turns("ana"))
    assert {t.extra.get("name") for t in turns} == {"Ana", "Sol"}
    asyncio.run(amem.aclose())


def test_a_timestamp_in_additional_kwargs_dates_the_turn(hashing_encoder):
    amem = engine(hashing_encoder)
    block = EtamemMemoryBlock(amem, space="ana")

    async def main():
        await block.aput([ChatMessage(role="user", content="I adopted a grey cat named Miso.",
                                      additional_kwargs={"timestamp": "2023-05-08T13:56"}),
                          ChatMessage(role="assistant", content="Lovely!", additional_kwargs={"timestamp": 1683554220})],
                         session_id="s1")
        turns = await amem.turns("ana")
        assert [t.timestamp.strftime("%Y-%m-%d %H:%M") for t in turns] == ["2023-05-08 13:56", "2023-05-08 13:57"]
        assert "8 May 2023" in await block.aget([ChatMessage(role="user", content="Which cat?")])
        with pytest.raises(ValueError, match="timestamp"):
            await block.aput([ChatMessage(role="user", content="Hi.", additional_kwargs={"timestamp": "someday"})])
        await amem.aclose()

    asyncio.run(main())


# --- what was flushed comes back in memory.get() -----------------------------------------------
def test_a_later_get_holds_a_fact_from_a_flushed_message(minilm):
    amem = engine(minilm)
    memory = chat(EtamemMemoryBlock(amem, space="ana", top_k=3), "chat-1", **SMALL)
    converse(memory)
    memory.put(ChatMessage(role="user", content="What is the name of my cat?"))
    assert not any("Miso" in m.content for m in memory.get_all(status=MessageStatus.ACTIVE))  # flushed
    got = memory.get()
    assert got[0].role.value == "system" and "<etamem>" in got[0].content
    recalled = got[0].content.split("<etamem>", 1)[1]
    assert "grey cat named Miso" in recalled.split("\n2. ", 1)[0], recalled  # the best memory
    assert texts(got[1:]) == texts(memory.get_all(status=MessageStatus.ACTIVE))  # the history after it

    user_side = chat(EtamemMemoryBlock(amem, space="ana", top_k=3), "chat-1", insert_method=InsertMethod.USER,
                     chat_store=memory.sql_store, **SMALL)  # the same conversation, memory in the user message
    got = user_side.get()
    assert got[-1].role.value == "user" and "Miso" in got[-1].content
    assert got[-1].content.rstrip().endswith("What is the name of my cat?")  # memory first, then the question
    assert not any(m.role.value == "system" for m in got)
    asyncio.run(amem.aclose())


def test_a_fresh_memory_on_the_same_store_recalls_it(minilm, tmp_path):
    store = tmp_path / "store"
    first = engine(minilm, store)
    converse(chat(EtamemMemoryBlock(first, space="ana"), "monday", **SMALL))
    asyncio.run(first.aclose())

    again = engine(minilm, store)  # another process would open the store the same way
    friday = chat(EtamemMemoryBlock(again, space="ana", top_k=2), "friday")
    assert friday.get_all() == []  # nothing of Monday in LlamaIndex's own history
    got = friday.get("What is my cat called?")
    assert len(got) == 1 and got[0].role.value == "system" and "Miso" in got[0].content, texts(got)
    assert {t.session_id for t in asyncio.run(again.turns("ana"))} == {"monday"}
    other_user = chat(EtamemMemoryBlock(again, space="bo"), "friday")
    assert other_user.get("What is my cat called?") == []  # another space: nothing stored, block left out
    asyncio.run(again.aclose())


def test_block_text_is_empty_without_a_user_message_or_memories(hashing_encoder):
    amem = engine(hashing_encoder)
    block = EtamemMemoryBlock(amem, space="ana")

    async def main():
        assert await block.aget([ChatMessage(role="user", content="Anything about cats?")]) == ""  # nothing stored
        await block.aput([ChatMessage(role="user", content="I adopted a grey cat named Miso.")], session_id="s")
        assert await block.aget([]) == "" and await block.aget(None) == ""
        assert await block.aget([ChatMessage(role="assistant", content="Hello.")]) == ""
        text = await block.aget([ChatMessage(role="user", content="Anything about cats?"),
                                 ChatMessage(role="assistant", content="Let me think.")])
        assert "Miso" in text  # the latest *user* message is the query
        await amem.aclose()

    asyncio.run(main())


def test_engine_work_runs_in_the_pool_not_on_the_event_loop(hashing_encoder, monkeypatch):
    """`aput` / `aget` under a running loop: Memory.add and the retrieval run in pool threads."""
    amem = engine(hashing_encoder)
    seen = []
    for name in ("add", "context_packet"):
        real = getattr(amem.memory, name)

        def spy(*a, _real=real, _name=name, **kw):
            seen.append((_name, threading.current_thread().name))
            return _real(*a, **kw)

        monkeypatch.setattr(amem.memory, name, spy)
    memory = chat(EtamemMemoryBlock(amem, space="ana"), "chat-1", **SMALL)

    async def main():
        loop_thread = threading.current_thread().name
        await memory.aput_messages([ChatMessage(role=r, content=t) for r, t in MONDAY])
        await memory.aget()
        assert {n for n, _ in seen} == {"add", "context_packet"}
        assert all(t.startswith("etamem-async") and t != loop_thread for _, t in seen), seen
        await amem.aclose()

    asyncio.run(main())


def test_beside_other_blocks(hashing_encoder):
    amem = engine(hashing_encoder)
    memory = chat(EtamemMemoryBlock(amem, space="ana"), "c", **SMALL)
    memory.memory_blocks.append(StaticMemoryBlock(name="profile", static_content="The user likes short answers."))
    converse(memory)
    content = memory.get("Do I have a cat?")[0].content
    assert "<etamem>" in content and "<profile>" in content and "Miso" in content
    asyncio.run(amem.aclose())


# --- ownership and errors ----------------------------------------------------------------------
def test_who_closes_what(hashing_encoder, tmp_path):
    mem = Memory(None, Config(), text_encoder=CachedEncoder(hashing_encoder),
                 affect_tagger=VaderAffectTagger(CachedEncoder(hashing_encoder)))
    block = EtamemMemoryBlock(mem, space="ana")
    asyncio.run(block.aput([ChatMessage(role="user", content="I adopted a grey cat named Miso.")]))
    block.close()  # its pool only: the Memory is its owner's
    assert [t.text for t in mem.turns("ana")] == ["I adopted a grey cat named Miso."]
    mem.close()

    shared = engine(hashing_encoder)
    EtamemMemoryBlock(shared, space="ana").close()
    assert asyncio.run(shared.spaces()) == []  # still open
    asyncio.run(shared.aclose())

    owned = EtamemMemoryBlock(str(tmp_path / "store"), space="ana")
    assert (tmp_path / "store").is_dir()
    owned.close()
    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(owned.aget([ChatMessage(role="user", content="cat?")]))


@pytest.mark.parametrize("kw, match", [
    ({"space": ""}, "space"),
    ({"space": "a/b"}, "space"),
    ({"top_k": 0}, "top_k"),
    ({"top_k": True}, "top_k"),
    ({"user_name": " "}, "name"),
])
def test_bad_options_are_clear_value_errors(hashing_encoder, kw, match):
    amem = engine(hashing_encoder)
    with pytest.raises(ValueError, match=match):
        EtamemMemoryBlock(amem, **kw)
    asyncio.run(amem.aclose())


def test_two_blocks_of_one_name_are_refused_by_llamaindex(hashing_encoder):
    amem = engine(hashing_encoder)
    with pytest.raises(ValueError, match="unique names"):
        ChatMemory.from_defaults(memory_blocks=[EtamemMemoryBlock(amem, space="a"), EtamemMemoryBlock(amem, space="b")])
    ChatMemory.from_defaults(memory_blocks=[EtamemMemoryBlock(amem, space="a"),
                                            EtamemMemoryBlock(amem, space="b", name="etamem_b")])
    asyncio.run(amem.aclose())


def test_missing_llamaindex_names_the_extra(monkeypatch):
    for name in [m for m in sys.modules if m == "llama_index" or m.startswith("llama_index.")]:
        monkeypatch.setitem(sys.modules, name, None)  # as if LlamaIndex were not installed
    monkeypatch.delitem(sys.modules, "etamem.integrations.llamaindex")
    with pytest.raises(ImportError, match=re.escape('pip install -e ".[llamaindex]"')):
        importlib.import_module("etamem.integrations.llamaindex")


# --- the docs page -----------------------------------------------------------------------------
def test_docs_page_example_runs_as_written(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for var in ("ETAMEM_LLM_MODEL", "OPENAI_BASE_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    code = re.search(r"<!-- llamaindex-example -->\n```python\n(.*?)```", PAGE.read_text(encoding="utf-8"),
                     re.S).group(1)
    exec(compile(code, str(PAGE), "exec"), {"__name__": "docs_example"})
    out = capsys.readouterr().out
    assert out.startswith("system <memory>") and "<etamem>" in out, out
    first = out.split("\n1. ", 1)[1].split("\n2. ", 1)[0]
    assert "Ana adopted a grey cat named Miso." in first, out
    assert (tmp_path / "agent_memory" / "memory.sqlite").is_file()
