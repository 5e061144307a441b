"""FTA-Mem searches the open session (issue 29): turns that no unit cites yet are ranked with the
units as provisional hits, and give way to the units once the session ends."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from etamem import Memory
from etamem.fta.search import PROVISIONAL_PREFIX, packet_for, prepare_provisional, search_fta
from etamem.models.affect import VaderAffectTagger
from etamem.models.encoders import CachedEncoder
from etamem.records import Hit, UnknownIdError
from etamem.retrieval.lexical import LexicalIndex

T0 = datetime(2024, 3, 4, 9, 0, tzinfo=timezone.utc)
SESSION = "chat-1"
CHAT = [
    ("user", "Hi! I'm allergic to peanuts, so please keep every recipe you suggest completely peanut free."),
    ("assistant", "Noted, no peanuts in anything. How many people are you cooking for?"),
    ("user", "Just me and my sister Clara, she is staying with me until the end of April."),
    ("assistant", "Great, meals for two then. Any cuisines you particularly enjoy?"),
    ("user", "We both love Thai curries and Mexican food, but Clara hates coriander."),
    ("assistant", "I will leave coriander out of the Thai and Mexican dishes."),
    ("user", "My budget is about eighty dollars for the whole week of groceries."),
    ("assistant", "Eighty dollars for two is workable if we reuse ingredients across meals."),
    ("user", "I only have a small oven and two electric burners in my apartment kitchen."),
    ("assistant", "Then one-pot dishes and sheet-pan dinners will suit your small kitchen well."),
    ("user", "On Wednesday I have a late shift at the hospital, so dinner must be ready in ten minutes."),
    ("assistant", "For Wednesday I suggest a quick bean quesadilla that takes ten minutes."),
    ("user", "I also want to eat more fish, my doctor said my iron is low."),
    ("assistant", "Salmon and sardines are good choices, and lentils help with iron too."),
    ("user", "Could you write the shopping list grouped by supermarket aisle?"),
    ("assistant", "Sure, I will group produce, fish counter, pantry and dairy separately."),
    ("user", "I'm going to buy a new blender next week for my morning smoothies."),
    ("assistant", "A blender is handy, spinach and banana smoothies are also rich in iron."),
    ("user", "Thanks, I usually shop at the farmers market on Saturday mornings."),
    ("assistant", "Then buy the fresh vegetables and fish at the farmers market on Saturday."),
]
# (checkpoint: turns added, question, the turn that says it)
QUESTIONS = [
    (2, "What is the user allergic to?", "c0"),
    (10, "What kind of kitchen does the user have?", "c8"),
    (20, "Where does the user shop for groceries?", "c18"),
]


def chat_turn(i: int) -> dict:
    speaker, text = CHAT[i]
    return {"turn_id": f"c{i}", "session_id": SESSION, "speaker": speaker, "text": text,
            "timestamp": (T0 + timedelta(minutes=i)).isoformat()}


def first_turns(hits, n: int = 5) -> list[str]:
    """The first `n` distinct source turns of `hits`, in hit order."""
    return list(dict.fromkeys(t for h in hits for t in h.source_turn_ids))[:n]


def assert_no_repeated_turn(hits) -> None:
    seen = [t for h in hits for t in h.source_turn_ids]
    assert len(seen) == len(set(seen)), [(h.amu.amu_id, h.views, h.source_turn_ids) for h in hits]


@pytest.fixture
def fta_memory(minilm):
    """An in-memory FTA-Mem `Memory`, offline (no LLM), with the shared MiniLM (cached, as
    `Memory` wraps its own) and VADER."""
    encoder = CachedEncoder(minilm)
    return Memory(config={"method": "fta"}, text_encoder=encoder, affect_tagger=VaderAffectTagger(encoder))


def test_the_open_session_is_searchable_and_gives_way_to_the_units_when_it_ends(fta_memory):
    mem = fta_memory
    asked = []
    for i in range(len(CHAT)):
        mem.add(chat_turn(i))
        asked += [q for q in QUESTIONS if q[0] == i + 1]
        if not asked or asked[-1][0] != i + 1:
            continue
        for _, question, turn_id in asked:  # each fact said so far, the newest one included
            result = mem.retrieve(question, top_k=5)
            assert turn_id in first_turns(result.hits), (i + 1, question, [h.source_turn_ids for h in result.hits])
            assert_no_repeated_turn(result.hits)
            for h in result.hits:
                if h.views == ("provisional",):
                    assert h.amu.amu_id == PROVISIONAL_PREFIX + h.source_turn_ids[0]
                    assert h.amu.status == "provisional" and len(h.source_turn_ids) == 1
                    assert h.score >= mem.config.fta_tau
                    if "source_turns" in Hit.__dataclass_fields__:  # filled by Memory.retrieve
                        assert [t.turn_id for t in h.source_turns] == list(h.source_turn_ids)
        if i + 1 == 2:  # nothing is finalised yet: the allergy is found as the turn itself
            hit = next(h for h in mem.search("What is the user allergic to?", top_k=5) if "c0" in h.source_turn_ids)
            assert hit.views == ("provisional",) and "peanuts" in hit.amu.text
            with pytest.raises(UnknownIdError):
                mem.get(hit.amu.amu_id)  # not a stored unit
    assert mem.stats()["extraction"]["pending_turns"] > 0  # the last segment is still open
    long = mem.search("Where does the user shop for groceries?", top_k=10)
    assert any(h.views == ("provisional",) for h in long)
    assert mem.search("Where does the user shop for groceries?", top_k=3) == long[:3]  # top_k=k: a prefix
    assert mem.answer("What is the user allergic to?").text  # an offline answer over provisional hits

    mem.end_session()
    assert mem.stats()["extraction"]["pending_turns"] == 0
    for _, question, turn_id in QUESTIONS:
        hits = mem.search(question, top_k=5)
        assert turn_id in first_turns(hits), (question, [h.source_turn_ids for h in hits])
        assert all(h.views in (("fta",), ("fta-link",)) for h in hits)  # the units replaced the turns
        assert_no_repeated_turn(hits)
        unit = next(h for h in hits if turn_id in h.source_turn_ids)
        assert mem.get(unit.amu.amu_id).amu_id == unit.amu.amu_id
    mem.close()


def test_provisional_turns_a_unit_cites_by_search_time_are_dropped_and_answers_take_them(fta_memory):
    mem = fta_memory
    for i in range(6):
        mem.add(chat_turn(i))
    live = mem.live_space("default")
    stale = prepare_provisional(mem.store, "default", mem.affect_tagger, mem.encode_queries)
    assert stale.units and len(stale.vecs) == len(stale.units)
    question = "What is the user allergic to?"
    hits = mem.search(question, top_k=5)
    assert any(h.views == ("provisional",) for h in hits)
    packet = packet_for(mem.store, "default", hits, mem.config)  # the LLM answer's context
    assert "peanut" in packet and "Source dialogue spans" in packet

    mem.end_session()  # every turn now in a unit: the provisional units read before are left out
    q_vec = mem.encode_query(question)
    with live.rw.read():
        result = search_fta(live, mem.store, question, q_vec, 5, mem.config, provisional=stale)
    assert result.hits and all(h.views != ("provisional",) for h in result.hits)
    assert_no_repeated_turn(result.hits)
    mem.close()


def test_etamem_method_is_unchanged_its_units_are_made_at_add_time(minilm):
    mem = Memory(text_encoder=minilm, affect_tagger=VaderAffectTagger(minilm))
    for i in range(2):
        mem.add(chat_turn(i))
    assert mem.stats()["extraction"]["pending_turns"] == 0
    hits = mem.search("What is the user allergic to?", top_k=5)
    assert "c0" in first_turns(hits)
    assert all("provisional" not in h.views for h in hits)
    mem.close()


def test_provisional_bm25_equals_the_index_with_the_turns_added():
    units = ["Caroline moved to Boston in March", "Melanie plays the saxophone", "Pixel is a grey cat"]
    turns = ["I am allergic to peanuts and peanut butter", "Boston is cold in March"]
    query = "peanut allergy Boston"
    got = LexicalIndex(units).scores_beside(query, turns)
    want = LexicalIndex(units + turns).scores_all(query)[len(units):]
    assert got == pytest.approx(want, rel=1e-5) and got[0] > 0 and got[1] > 0
    assert LexicalIndex([]).scores_beside(query, turns) == pytest.approx(LexicalIndex(turns).scores_all(query), rel=1e-5)
