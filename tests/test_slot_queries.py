"""Issue 49, item 3: a fact said in passing ("still unpacking boxes since the move to Porto") is
found for the direct question ("Where do I live?"): first-person attribute questions are searched
with the words such facts are said with (`etamem.retrieval.slot_queries`); other questions as asked."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

from etamem import Config, Memory
from etamem.models.affect import VaderAffectTagger
from etamem.models.encoders import CachedEncoder
from etamem.retrieval.slot_queries import expand_query, slot_of

CHAT = ["I love live music, especially jazz in small bars.", "Where do people usually go for brunch around here?",
        "The livestream of the concert was great last night.", "Can you explain how compound interest works?",
        "I think the new season of that show is better than the last one.", "What do you think about electric cars?",
        "My favourite live album is by Nirvana.", "How long should I boil an egg for?",
        "The lecture about deep-sea creatures was fascinating.", "I watched a documentary about volcanoes.",
        "Ugh, still unpacking boxes since the move to Porto last month.",
        "Do people really live longer in the mountains?"]


def test_which_questions_are_widened():
    assert slot_of("Where do I live?") == "residence" and slot_of("Who is my employer?") == "job"
    assert "move" in expand_query("Where do I live?")
    for asked in ("Where does Caroline live?", "Can you recommend a good school for my son?", "What time is it?"):
        assert expand_query(asked) == asked


def _found(minilm, slot_queries: bool) -> int | None:
    enc = CachedEncoder(minilm)
    mem = Memory(None, Config(slot_queries=slot_queries), text_encoder=enc, affect_tagger=VaderAffectTagger(enc))
    t0 = datetime(2024, 3, 1, 9, tzinfo=timezone.utc)
    mem.add([{"role": "user", "content": text, "timestamp": (t0 + timedelta(minutes=i)).isoformat()}
             for i, text in enumerate(CHAT)], space="ana")
    turns = []
    for h in mem.search("Where do I live?", space="ana", top_k=10):
        turns += [t.text for t in h.source_turns if t.text not in turns]
    mem.close()
    return next((i for i, text in enumerate(turns, 1) if "Porto" in text), None)


def test_a_move_said_in_passing_is_found_for_where_do_i_live(minilm):
    rank = _found(minilm, True)
    assert rank is not None and rank <= 3, rank
