"""Chat-shaped input and an agent's loop on `Memory`: OpenAI-style messages without ids or
timestamps, default sessions, safe retries, control characters, empty spaces, hits with their
source turns, `context` and `warm` (real MiniLM encoder, VADER tagger)."""
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from etamem import Config, Memory
from etamem.models.affect import VaderAffectTagger
from etamem.models.encoders import CachedEncoder


def chat_memory(minilm, path=None, **cfg):
    return Memory(path, Config.from_dict(cfg), text_encoder=CachedEncoder(minilm),
                  affect_tagger=VaderAffectTagger(minilm))


def test_messages_without_ids_or_timestamps_round_trip(minilm):
    mem = chat_memory(minilm)
    before = datetime.now(timezone.utc)
    mem.add([{"role": "system", "content": "You are a helpful assistant."},
             {"role": "user", "content": "I'm allergic to peanuts and my sister Priya lives in Lyon."},
             {"role": "assistant", "content": [{"type": "text", "text": "Noted: no peanuts."},
                                               {"type": "image_url", "image_url": {"url": "http://x/y.png"}}]},
             {"role": "user", "name": "Ana", "content": "Where should I eat tonight?"}], space="ana")
    turns = mem.turns("ana")
    assert [t.speaker for t in turns] == ["user", "assistant", "user"]  # the system message is skipped
    assert turns[1].text == "Noted: no peanuts."  # text parts joined, the image left out
    assert turns[2].extra == {"name": "Ana"}
    assert all(before <= t.timestamp <= datetime.now(timezone.utc) for t in turns)  # the time of the call
    assert len({t.session_id for t in turns}) == 1 and len({t.turn_id for t in turns}) == 3
    assert mem.stats("ana")["input"]["messages_skipped"] == 1
    hits = mem.search("What is the user allergic to?", space="ana", top_k=3)
    assert hits[0].source_turns[0].text.startswith("I'm allergic to peanuts")
    assert hits[0].source_turns[0].speaker == "user"


def test_a_message_with_an_id_and_no_timestamp_is_the_same_message_on_retry(minilm):
    mem = chat_memory(minilm)
    msg = {"role": "user", "content": "I moved to Milwaukee last month.", "id": "m1"}
    first = mem.add([msg], space="u")
    again = mem.add([msg], space="u")  # a retry, later: its default time is not part of its identity
    assert [a.amu_id for a in again] == [a.amu_id for a in first]
    assert len(mem.turns("u")) == 1
    with pytest.raises(ValueError, match=r"turns\[0\]\.turn_id: 'm1' is already stored .*\(text: stored"):
        mem.add([{**msg, "content": "I moved to Chicago."}], space="u")
    unnamed = {"role": "user", "content": "I moved to Milwaukee last month."}
    mem.add([unnamed], space="u")
    mem.add([unnamed], space="u")  # without an id, each add is a new message (documented)
    assert len(mem.turns("u")) == 3


def test_sessions_follow_silence_and_explicit_ids(minilm):
    mem = chat_memory(minilm, session_gap_minutes=30)
    t0 = datetime(2024, 4, 10, 9, 0, tzinfo=timezone.utc)
    at = lambda minutes: (t0 + timedelta(minutes=minutes)).isoformat()
    mem.add([{"role": "user", "content": "I started running every morning.", "timestamp": at(0)},
             {"role": "assistant", "content": "Great habit, keep it up.", "timestamp": at(1)}], space="u")
    mem.add([{"role": "user", "content": "I ran five kilometres today.", "created_at": (t0 + timedelta(minutes=20)).timestamp()}],
            space="u")
    mem.add([{"role": "user", "content": "My knee hurts after the run.", "timestamp": at(200)}], space="u")
    mem.add([{"role": "user", "content": "I booked a physiotherapist.", "timestamp": at(205),
              "session_id": "mine"}], space="u")
    sessions = [t.session_id for t in mem.turns("u")]
    assert sessions[0] == sessions[1] == sessions[2] == "chat-2024-04-10T09:00:00Z"  # 20 minutes: the same session
    assert sessions[3] == "chat-2024-04-10T12:20:00Z" and sessions[4] == "mine"  # 3 hours of silence: a new one
    assert mem.turns("u")[2].timestamp == t0 + timedelta(minutes=20)  # epoch seconds read as UTC
    mem.end_session("u")
    mem.add([{"role": "user", "content": "My knee is better now.", "timestamp": at(206)}], space="u")
    assert mem.turns("u")[-1].session_id == "chat-2024-04-10T12:26:00Z"  # the ended session is not reopened


def test_bad_messages_name_the_field(minilm):
    mem = chat_memory(minilm)
    cases = [({"role": "user", "content": 42}, r"turns\[0\]\.content: expected text or a list"),
             ({"content": "hi there"}, r"turns\[0\]\.role: expected a non-empty string"),
             ({"role": "user", "content": "hi", "colour": "red"}, r"unknown field\(s\) \['colour'\] in a chat message"),
             ({"role": "user", "content": "hi", "speaker": "x"}, r"role and content; a turn has speaker and text"),
             ({"role": "user", "content": "hi", "timestamp": "soon"}, r"turns\[0\]\.timestamp: cannot parse"),
             ({"role": "user", "content": [{"type": "text", "text": 3}]}, r"turns\[0\]\.content\[0\]\.text")]
    for message, error in cases:
        with pytest.raises(ValueError, match=error):
            mem.add([message], space="u")
    assert mem.spaces() == []


def test_a_real_chat_with_a_control_character_is_stored_not_refused(minilm):
    # the shape of the PrefEval chat that the old check refused whole ("control character U+0002
    # at character 71"): a control byte inside pasted text, and a terminal colour code
    text = "Here is the output of my script, can you explain what went wrong here: \x02 \x1b[31mERROR\x1b[0m: x"
    mem = chat_memory(minilm)
    mem.add([{"role": "user", "content": "I'm learning Python for my data job."},
             {"role": "user", "content": text}, {"role": "assistant", "content": "The error means x is unset."}],
            space="u")
    stored = mem.turns("u")[1].text
    assert "\x02" not in stored and "\x1b" not in stored and "\ufffd" in stored and "ERROR: x" in stored
    assert mem.stats("u")["input"]["control_chars_replaced"] == 3
    assert mem.search("What did the script\x00 print?", space="u")  # a query's control characters too


def test_an_agents_first_turn_finds_an_empty_memory(minilm):
    mem = chat_memory(minilm)
    assert mem.search("Is the user vegan?", space="new-user") == []
    result = mem.retrieve("Is the user vegan?", space="new-user")
    assert result.hits == [] and result.pending_turns == 0
    assert "nothing remembered yet" in mem.context("Is the user vegan?", space="new-user")
    assert mem.answer("Is the user vegan?", space="new-user").hits == []
    assert mem.spaces() == []  # reading made no space
    with pytest.raises(ValueError, match="space"):
        mem.search("Is the user vegan?", space="bad/name")  # bad input stays an error


def test_context_renders_dated_memories_with_their_source(minilm):
    mem = chat_memory(minilm)
    mem.add([{"role": "user", "content": "I sold my old Honda and I'm allergic to peanuts.",
              "timestamp": "2024-04-10T09:00:00Z"},
             {"role": "assistant", "content": "Thanks, noted.", "timestamp": "2024-04-10T09:01:00Z"}], space="u")
    text = mem.context("What is the user allergic to?", space="u", top_k=3, now="2024-05-01")
    assert "[10 April 2024]" in text and "asked on 1 May 2024" in text
    assert "peanuts" in text and text.count("\n1. ") == 1
    hits = mem.search("What is the user allergic to?", space="u", top_k=3)
    assert all(h.source_turns and h.source_turns[0].turn_id == h.source_turn_ids[0] for h in hits)


def test_warm_loads_the_models(minilm, tmp_path):
    mem = Memory(tmp_path / "s", text_encoder=CachedEncoder(minilm))
    assert mem.store.models() == {}
    assert mem.warm() is mem
    assert {"text_encoder", "affect_tagger"} <= set(mem.store.models())  # both loaded (identity recorded)
    import gc

    assert gc.get_freeze_count() > 0  # the loaded models are out of the collector's full passes
    mem.close()


PREFEVAL_CHATS = Path(__file__).resolve().parents[2] / "shared" / "data" / "prefeval" / "filtered_inter_turns.json"


@pytest.mark.skipif(not PREFEVAL_CHATS.is_file(), reason=f"PrefEval chats not available at {PREFEVAL_CHATS} "
                                                          "(needs ../shared beside the checkout)")
def test_every_prefeval_chat_is_accepted_whole(hashing_encoder):
    # 24 real user/assistant chats; one holds a U+0002 inside a message, which used to refuse the whole batch
    chats = json.loads(PREFEVAL_CHATS.read_text(encoding="utf-8"))
    mem = Memory(text_encoder=hashing_encoder)
    for chat in chats:
        turns = mem.check(chat["conversation"], space="prefeval")  # the checks `add` makes, nothing stored
        assert len(turns) == len(chat["conversation"])
        assert all("\x02" not in t.text for t in turns)
    held = [t.text for chat in chats if any("\x02" in m["content"] for m in chat["conversation"])
            for t in mem.check(chat["conversation"], space="x")]
    assert len(held) == 32 and sum("full\ufffdtime" in text for text in held) == 1


def test_warm_also_imports_the_bm25_tokeniser():
    import subprocess
    import sys

    code = ("import sys; from etamem import Memory; m = Memory(); assert 'bm25s' not in sys.modules; m.warm(); "
            "print('bm25s' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0 and out.stdout.strip() == "True", out.stderr[-2000:]
