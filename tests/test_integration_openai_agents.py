"""The OpenAI Agents SDK adapter (issue 35): `EtamemSession` and `etamem_instructions`, against the
real SDK (the `openai-agents` extra).

The Session protocol cases run against the SDK's own `SQLiteSession` and ours and must give the
same answers; the items with user / assistant text also become turns whose units are found (and
leave with `pop_item` / `clear_session`). A real `Runner.run` of an `Agent` on a local fake model
(the SDK's `Model` / `ModelProvider`, tracing off) with `session=EtamemSession`: the second run's
input holds the first run's items (function call and output included) and its instructions a
fact from memory. The docs page's example runs as written, on the same fake model."""
from __future__ import annotations

import asyncio
import importlib
import json
import re
import sys
from pathlib import Path

import pytest

pytest.importorskip("agents", reason='the OpenAI Agents SDK: pip install -e ".[openai-agents]"')

from agents import (  # noqa: E402
    Agent,
    Model,
    ModelProvider,
    ModelResponse,
    MultiProvider,
    RunConfig,
    Runner,
    SQLiteSession,
    Usage,
    function_tool,
    set_tracing_disabled,
)
from agents.memory import Session, SessionSettings  # noqa: E402
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText  # noqa: E402

from conftest import HashingEncoder  # noqa: E402
from etamem import AsyncMemory, Config, Memory  # noqa: E402
from etamem.integrations.openai_agents import EtamemSession, etamem_instructions  # noqa: E402
from etamem.models.affect import VaderAffectTagger  # noqa: E402
from etamem.models.encoders import CachedEncoder  # noqa: E402

PAGE = Path(__file__).resolve().parents[1] / "docs" / "integrations" / "openai-agents.md"

USER = {"role": "user", "content": "I moved to Lisbon last month and I love the tiles."}
ASSISTANT = {"id": "msg_1", "type": "message", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "Lisbon is a beautiful city to live in.",
                          "annotations": [], "logprobs": []}]}
CALL = {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\": \"Lisbon\"}",
        "id": "fc_1", "status": "completed"}
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "sunny, 24 C"}
REASONING = {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "weather first"}]}
SYSTEM = {"role": "system", "content": "Be brief."}
LATER = {"role": "user", "content": [{"type": "input_text", "text": "My sister Ines plays the cello."}]}
ITEMS = [USER, REASONING, CALL, OUTPUT, ASSISTANT, SYSTEM, LATER]


@pytest.fixture(autouse=True)
def _no_tracing():
    set_tracing_disabled(True)
    yield


def fast_memory(encoder, path=None) -> Memory:
    enc = CachedEncoder(encoder)
    mem = Memory(path, Config(), text_encoder=enc, affect_tagger=VaderAffectTagger(enc))
    if path is not None:
        enc.persist = mem.store
    return mem


def fast_async(path=None, **kw) -> AsyncMemory:
    """`AsyncMemory(path)` with the hashing encoder (it opens, and closes, its Memory)."""
    enc = CachedEncoder(HashingEncoder())
    return AsyncMemory(path, text_encoder=enc, affect_tagger=VaderAffectTagger(enc), **kw)


# --- the Session protocol, against the SDK's SQLiteSession -------------------------------------
async def protocol_cases(make) -> list:
    """Everything the protocol's methods answer over one history; `make(session_id, settings)`."""
    a, b = make("chat-a", None), make("chat-b", None)
    out = [await a.get_items(), await a.pop_item()]  # empty
    await a.add_items([])
    await a.add_items(ITEMS[:5])
    await b.add_items([LATER])
    await a.add_items(ITEMS[5:])
    out += [await a.get_items()]
    out += [await a.get_items(limit=n) for n in (1, 3, 7, 50, 0, -1)]
    out += [await b.get_items()]  # sessions do not see each other
    out += [await a.pop_item(), await a.pop_item(), await a.get_items()]
    await a.add_items([LATER])
    out += [await a.get_items(limit=2)]
    limited = make("chat-a", SessionSettings(limit=2))  # the same session through a default limit
    out += [await limited.get_items(), await limited.get_items(limit=4)]
    await a.clear_session()
    out += [await a.get_items(), await a.pop_item(), await b.get_items()]
    await a.add_items([USER])
    out += [await a.get_items()]
    while (item := await a.pop_item()) is not None:
        out.append(item)
    out += [await a.get_items()]
    return out


def test_protocol_answers_as_sqlite_session(minilm, tmp_path):
    async def main():
        expected = await protocol_cases(
            lambda sid, settings: SQLiteSession(sid, tmp_path / "sdk.sqlite", session_settings=settings))
        async with AsyncMemory(fast_memory(minilm, tmp_path / "store")) as amem:
            ours = await protocol_cases(
                lambda sid, settings: EtamemSession(sid, amem, space="ana", session_settings=settings))
            turns = await amem.turns("ana")
            amem.memory.close()
        return expected, ours, turns

    expected, ours, turns = asyncio.run(main())
    assert json.dumps(ours) == json.dumps(expected)  # the same items, key order included
    assert expected[2] == ITEMS and expected[-1] == []
    # what is left after the clear and the pops: only chat-b's message, as a turn of its session
    assert [(t.session_id, t.speaker, t.text) for t in turns] == [("chat-b", "user", "My sister Ines plays the cello.")]


def test_text_items_become_turns_and_units(minilm, tmp_path):
    """User and assistant text is searchable; function calls, reasoning and system items are kept
    only as items; popping an item removes its turn and units, clearing removes all of them."""
    async def main():
        async with AsyncMemory(fast_memory(minilm, tmp_path / "store")) as amem:
            session = EtamemSession("chat-1", amem, space="ana")
            assert isinstance(session, Session)  # the SDK's runtime-checkable protocol
            await session.add_items(ITEMS)
            turns = await amem.turns("ana")
            assert [(t.session_id, t.speaker, t.text) for t in turns] == [
                ("chat-1", "user", USER["content"]), ("chat-1", "assistant", ASSISTANT["content"][0]["text"]),
                ("chat-1", "user", LATER["content"][0]["text"])]
            hits = await amem.search("What instrument does the sister play?", space="ana", top_k=3)
            assert "cello" in hits[0].amu.text
            assert await session.pop_item() == LATER
            assert [t.text for t in await amem.turns("ana")] == [t.text for t in turns[:2]]
            assert not [u for u in await amem.list("ana") if "cello" in u.text]
            hits = await amem.search("Where did the user move?", space="ana", top_k=3)
            assert "Lisbon" in hits[0].amu.text
            await session.clear_session()
            assert "ana" not in await amem.spaces()  # its last turn went: no turn, no unit is left
            assert await session.get_items() == []
            amem.memory.close()

    asyncio.run(main())


def test_items_persist_in_the_store(tmp_path):
    async def main():
        session = EtamemSession("chat-1", tmp_path / "store", space="ana")  # a path: opened and closed by it
        await session.add_items(ITEMS)
        await session.close()
        again = EtamemSession("chat-1", fast_memory(HashingEncoder(), tmp_path / "store"), space="ana")
        items = await again.get_items()
        await again.close()
        again.memory.memory.close()
        return items

    assert asyncio.run(main()) == ITEMS


def test_an_item_goes_with_its_turn_deleted_through_memory(tmp_path):
    """The item holds the turn's text: `Memory.delete(turn_id=...)` forgets it too; other items stay."""
    async def main():
        async with AsyncMemory(fast_memory(HashingEncoder(), tmp_path / "store")) as amem:
            session = EtamemSession("chat-1", amem, space="ana")
            await session.add_items(ITEMS)
            [first] = [t for t in await amem.turns("ana") if t.text == USER["content"]]
            await amem.delete("ana", turn_id=first.turn_id)
            items = await session.get_items()
            amem.memory.close()
            return items

    assert asyncio.run(main()) == [i for i in ITEMS if i != USER]


def test_bad_input():
    mem = fast_memory(HashingEncoder())
    with pytest.raises(ValueError, match="session_id"):
        EtamemSession("", mem)
    with pytest.raises(ValueError, match="space"):
        EtamemSession("chat-1", mem, space="a/b")
    session = EtamemSession("chat/1", mem, space="ana")
    with pytest.raises(ValueError, match=r"items\[1\]"):
        asyncio.run(session.add_items([USER, "hello"]))
    assert asyncio.run(session.get_items()) == []  # nothing of a refused call is stored


def test_caller_scope_is_checked():
    """The session's own store calls (its item list) obey the caller's tenancy scope, as Memory's do."""
    from etamem import tenancy

    async def main():
        async with fast_async() as amem:
            session = EtamemSession("chat-1", amem, space="ana")
            await session.add_items([USER, CALL])
            with tenancy.scope(["ben"]):
                for call in (session.get_items(), session.add_items([CALL]), session.pop_item(),
                             session.clear_session()):
                    with pytest.raises(tenancy.SpaceForbidden):
                        await call
            with tenancy.scope(["ana"]):
                assert await session.get_items() == [USER, CALL]

    asyncio.run(main())


def test_missing_sdk_names_the_extra(monkeypatch):
    for name in [m for m in sys.modules if m == "agents" or m.startswith("agents.")]:
        monkeypatch.setitem(sys.modules, name, None)  # as if the SDK were not installed
    monkeypatch.delitem(sys.modules, "etamem.integrations.openai_agents")
    with pytest.raises(ImportError, match=re.escape('pip install -e ".[openai-agents]"')):
        importlib.import_module("etamem.integrations.openai_agents")


# --- a real Runner on a local fake model ------------------------------------------------------
class FakeModel(Model):
    """Asks for the weather tool when the latest user message asks for the weather, then answers
    with the tool's output; otherwise acknowledges. Records what it was given."""

    def __init__(self):
        self.calls: list[tuple[str | None, list]] = []

    async def get_response(self, system_instructions, input, model_settings, tools, output_schema, handoffs,  # noqa: A002 - the SDK passes it by this name
                           tracing, *, previous_response_id=None, conversation_id=None, prompt=None, **kwargs):
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        self.calls.append((system_instructions, items))
        n = len(self.calls)
        last = items[-1]
        if last.get("type") == "function_call_output":
            return self._say(f"The weather: {last['output']}.", n)
        if "weather" in str(last.get("content", "")):
            call = ResponseFunctionToolCall(type="function_call", call_id=f"call_{n}", name="get_weather",
                                            arguments=json.dumps({"city": "Lisbon"}), id=f"fc_{n}", status="completed")
            return ModelResponse(output=[call], usage=Usage(), response_id=None)
        return self._say("Noted.", n)

    @staticmethod
    def _say(text: str, n: int) -> ModelResponse:
        msg = ResponseOutputMessage(id=f"msg_{n}", type="message", role="assistant", status="completed",
                                    content=[ResponseOutputText(type="output_text", text=text, annotations=[])])
        return ModelResponse(output=[msg], usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError("not streamed in these tests")


class FakeProvider(ModelProvider):
    def __init__(self, model: FakeModel):
        self.model = model

    def get_model(self, model_name):
        return self.model


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}, 24 C"


def test_runner_uses_the_session_and_the_memory(minilm, tmp_path):
    model = FakeModel()

    async def main():
        async with AsyncMemory(fast_memory(minilm, tmp_path / "store")) as amem:
            # an earlier conversation of the same user, in the same space
            await amem.add([{"role": "user", "content": "My sister Ines plays the cello in Porto."}], space="ana")
            agent = Agent(name="Assistant", instructions=etamem_instructions(amem, "ana", "You are helpful."),
                          tools=[get_weather])
            session = EtamemSession("chat-1", amem, space="ana")
            config = RunConfig(model_provider=FakeProvider(model), tracing_disabled=True)
            first = await Runner.run(agent, "I just moved to Lisbon. What is the weather there?", session=session,
                                     run_config=config)
            after_first = await session.get_items()
            second = await Runner.run(agent, "What does my sister play?", session=session, run_config=config)
            items, turns = await session.get_items(), await amem.turns("ana")
            amem.memory.close()
        return first, after_first, second, items, turns

    first, after_first, second, items, turns = asyncio.run(main())
    assert first.final_output == "The weather: sunny in Lisbon, 24 C." and second.final_output == "Noted."
    # the first run's items, verbatim and in order: the question, the call, its output, the answer
    assert [i.get("type", "message") for i in after_first] == ["message", "function_call", "function_call_output",
                                                              "message"]
    assert after_first[1]["name"] == "get_weather" and after_first[2]["output"] == "sunny in Lisbon, 24 C"
    instructions, given = model.calls[-1]
    assert given[:len(after_first)] == after_first  # the second run's input starts with the first run's items
    assert given[-1] == {"role": "user", "content": "What does my sister play?"}
    assert items[:-1] == after_first + [given[-1]] and items[-1]["content"][0]["text"] == "Noted."
    # the instructions: the base text and the memory of the latest question (from the earlier conversation)
    assert instructions.startswith("You are helpful.") and "cello" in instructions
    assert "cello" not in json.dumps(given)  # not from the session's items: from ETAMem
    assert [(t.session_id, t.speaker) for t in turns][1:] == [("chat-1", "user"), ("chat-1", "assistant"),
                                                              ("chat-1", "user"), ("chat-1", "assistant")]


def test_docs_page_example_runs(tmp_path, monkeypatch, capsys):
    """docs/integrations/openai-agents.md's example, as written, with the SDK's default model
    provider answering from the local fake model and a fast encoder."""
    import etamem

    model = FakeModel()
    monkeypatch.setattr(MultiProvider, "get_model", lambda self, name: model)
    monkeypatch.setattr(etamem, "AsyncMemory", fast_async, raising=False)
    monkeypatch.chdir(tmp_path)
    code = re.search(r"<!-- openai-agents-example -->\n```python\n(.*?)```", PAGE.read_text(encoding="utf-8"),
                     re.S).group(1)
    exec(compile(code, str(PAGE), "exec"), {"__name__": "docs_example"})
    out = capsys.readouterr().out
    assert "The weather: sunny" in out and "Noted." in out, out
    assert any("Lisbon" in (instructions or "") for instructions, _ in model.calls[1:]), model.calls


def test_the_question_being_answered_is_not_its_own_memory(minilm, tmp_path):
    """Issue 49: the Runner stores the user's message before the model call; the memory in the
    instructions for that message never holds the message itself (it came back as memory #1)."""
    model = FakeModel()
    question = "Where do I live now? I just moved, remember?"

    async def main():
        async with AsyncMemory(fast_memory(minilm, tmp_path / "store")) as amem:
            await amem.add([{"role": "user", "content": "I just moved to Lisbon for a new job."}], space="ana")
            agent = Agent(name="Assistant", instructions=etamem_instructions(amem, "ana", "Be brief.", top_k=3))
            session = EtamemSession("chat-2", amem, space="ana")
            config = RunConfig(model_provider=FakeProvider(model), tracing_disabled=True)
            await Runner.run(agent, question, session=session, run_config=config)
            turns = await amem.turns("ana")
            amem.memory.close()
        return turns

    turns = asyncio.run(main())
    assert question in [t.text for t in turns]  # stored before the model was called
    instructions = model.calls[-1][0]
    assert "Lisbon" in instructions
    assert "Where do I live" not in instructions, instructions
