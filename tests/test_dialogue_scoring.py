"""Dialogue-aware retrieval (etamem/retrieval/dialogue.py): the query vector without the
speakers' names mixed in, the question penalty, replies joining the candidates and the speaker
boost, each against a brute-force formula; and the AMU rows growing after a reload."""
import re
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from etamem import Memory
from etamem.config import Config
from etamem.models.affect import VaderAffectTagger
from etamem.models.encoders import CachedEncoder
from etamem.retrieval import DialogueScoring, named_speakers, query_vector
from etamem.retrieval.dialogue import is_question, query_texts, without_names
from etamem.retrieval.options import SearchOptions
from etamem.retrieval.space_search import dialogue_scoring, turn_context

T0 = datetime(2024, 5, 1, 18, tzinfo=timezone.utc)


def memory(path, enc, **cfg) -> Memory:
    enc = CachedEncoder(enc)
    return Memory(path, Config(**cfg), text_encoder=enc, affect_tagger=VaderAffectTagger(enc))


def turn(i, speaker, text, session="s1"):
    return {"turn_id": f"t{i}", "session_id": session, "speaker": speaker, "text": text,
            "timestamp": (T0 + timedelta(minutes=i)).isoformat()}


# The reply (t1) shares no word with the query; the question before it (t0) does.
DIALOGUE = [
    turn(0, "Mel", "Any fun plans for the summer holidays, Caro?"),
    turn(1, "Caro", "Researching adoption agencies has been my dream for years."),
    turn(2, "Mel", "Our summer camping trip with the kids was lovely and sunny."),
    turn(3, "Caro", "Summer evenings at the beach with friends are the best."),
    turn(4, "Mel", "I painted a summer sunset over the lake for my plans board."),
    turn(5, "Caro", "My plans for the summer garden include tomatoes and basil."),
]


def test_named_speakers_and_without_names():
    speakers = ["Ann", "Ann Lee", "Bob", ""]
    assert named_speakers("What did Ann's dog eat?", speakers) == ("Ann",)
    assert named_speakers("Did Ann Lee meet Bob?", speakers) == ("Ann Lee", "Bob")  # the longest name
    assert named_speakers("Ann met Ann Lee.", speakers) == ("Ann", "Ann Lee")
    # role labels are not names, but "the <role>" addresses that speaker and the first person
    # addresses the user (the question is theirs); the words stay in the query's text vector
    roles = ["user", "assistant", "User"]
    assert named_speakers("What did the user say to the assistant?", roles) == ("User", "assistant", "user")
    assert named_speakers("Can you recommend a cafe for me?", ["user", "assistant"]) == ("user",)
    assert named_speakers("I'm hungry, what should I eat?", ["user", "assistant"]) == ("user",)
    assert named_speakers("What did Ann paint?", ["user", "assistant"]) == ()
    assert named_speakers("What would I like?", ["Ann", "Bob"]) == ()  # no role speakers: nobody
    assert named_speakers("What did the userbase say?", ["user"]) == ()
    assert query_texts("What did the user say?", ("user",), 0.5) == ["What did the user say?", "What did say?"]
    assert without_names("Did the user's sister meet the assistant?", ["user"]) == "Did sister meet the assistant?"
    assert query_texts("What should I eat?", ("user",), 0.5) == ["What should I eat?"]  # first person stays
    assert named_speakers("Annie and bob went out", speakers) == ()  # whole words, case as stored
    assert without_names("Did Ann Lee meet Bob's sister?", ["Ann", "Ann Lee", "Bob"]) == "Did meet sister?"
    assert is_question("Any fun plans?") and is_question('She asked "why?"') and not is_question("Fine. Why not")


def test_query_vector_mixes_the_query_without_names(hashing_encoder):
    enc = hashing_encoder.encode
    q = "What did Ann's sister paint last summer?"
    got = query_vector(enc, q, ("Ann",), 0.5)
    want = 0.5 * enc([q])[0] + 0.5 * enc(["What did sister paint last summer?"])[0]
    np.testing.assert_allclose(got, want / np.linalg.norm(want), rtol=1e-6)
    assert got.dtype == np.float32 and abs(float(np.linalg.norm(got)) - 1) < 1e-5
    plain = enc([q])[0]
    np.testing.assert_allclose(query_vector(enc, q, ("Ann",), 0.0), plain)  # mix 0: as asked
    np.testing.assert_allclose(query_vector(enc, q, (), 0.5), plain)  # no name named
    np.testing.assert_allclose(query_vector(enc, "Ann?", ("Ann",), 0.5), enc(["Ann?"])[0])  # only the name


def _merged(mem, query, dialogue, k=2):
    """The whole merged candidate list of the space's index for `query` (nothing cut)."""
    live = mem.live_space("default")
    cfg = mem.config
    q = mem.encode_query(query)
    ctx = turn_context(live.index, live.turns, query, q, cfg)
    opts = SearchOptions(beam=cfg.beam_width, beta=cfg.bm25_weight, context_share=cfg.context_share)
    res = live.index.search(query, q, mem.affect_tagger.tag([query]).embeddings[0], k, opts, context=ctx,
                            dialogue=dialogue)
    return {a: s for a, s, _ in res.ranked}, live


def test_the_reply_to_a_found_question_joins_the_candidates(hashing_encoder, tmp_path):
    with memory(tmp_path / "s", hashing_encoder) as mem:
        mem.add(DIALOGUE)
        query = "Any fun summer holidays plans for Caro?"
        plain, live = _merged(mem, query, None)
        asked = live.index.units_of_turn["t0"]
        reply = live.index.units_of_turn["t1"]
        assert set(asked) <= set(plain) and not set(reply) & set(plain)  # the views find the question only
        with_replies, _ = _merged(mem, query, dialogue_scoring(live.index, live.turns, ("Caro",),
                                                               mem.config.replace(question_penalty=0.0,
                                                                                  speaker_boost=0.0)))
        assert set(reply) <= set(with_replies)
        off, _ = _merged(mem, query, DialogueScoring(replies=None))
        assert not set(reply) & set(off)
        # and the search a user makes finds the reply's turn among its hits
        hits = mem.search(query, top_k=len(with_replies))
        assert "t1" in {t for h in hits for t in h.source_turn_ids}


def test_question_penalty_and_speaker_boost_are_exact(hashing_encoder, tmp_path):
    with memory(tmp_path / "s", hashing_encoder) as mem:
        mem.add(DIALOGUE)
        query = "What are Caro's plans for the summer holidays?"
        base, live = _merged(mem, query, DialogueScoring(), k=20)
        scored, _ = _merged(mem, query, DialogueScoring(named=("Caro",), question_penalty=0.2, speaker_boost=0.05,
                                                        self_boost=0.1), k=20)
        assert set(scored) == set(base) and len(base) >= 5
        about = 0
        for a, s in base.items():
            amu = live.index.amu_of[a]
            own = amu.speaker == "Caro" and re.search(r"\bcaro\b", amu.text, re.IGNORECASE) is not None
            about += own
            want = s - 0.2 * is_question(amu.text) + 0.05 * (amu.speaker == "Caro") + 0.1 * own
            assert scored[a] == pytest.approx(want, abs=1e-6), amu.text
        assert about  # a unit of Caro's that names Caro (rewritten from "my plans")
        assert any(is_question(live.index.amu_of[a].text) for a in base)
        # two speakers named: no boost (the question is about both)
        both, _ = _merged(mem, query, DialogueScoring(named=("Caro", "Mel"), speaker_boost=0.05), k=20)
        assert both == pytest.approx(base)


def test_memory_search_uses_the_mixed_query_vector(hashing_encoder, tmp_path):
    """Dense-only scoring (no BM25, no context, no fallback, no boosts): a question naming a
    speaker with mix 1 scores the units as the question without the name does with mix 0."""
    cfg = dict(bm25_weight=0.0, context_share=0.0, question_penalty=0.0, speaker_boost=0.0, self_boost=0.0,
               follow_replies=False,
               time_boost=0.0)
    with memory(tmp_path / "s", hashing_encoder, query_name_mix=1.0, **cfg) as mem:
        mem.add(DIALOGUE)
        named = mem.retrieve("What are Caro's plans for the summer?", top_k=6, fallback=False).hits
    with memory(tmp_path / "s", hashing_encoder, query_name_mix=0.0, **cfg) as mem:
        bare = mem.retrieve("What are plans for the summer?", top_k=6, fallback=False).hits
        asked = mem.retrieve("What are Caro's plans for the summer?", top_k=6, fallback=False).hits
    assert [(h.amu.amu_id, round(h.score, 5)) for h in named] == [(h.amu.amu_id, round(h.score, 5)) for h in bare]
    assert [round(h.score, 5) for h in asked] != [round(h.score, 5) for h in bare]


def test_rows_grow_together_after_a_reload(hashing_encoder, tmp_path):
    """A space opened from its derived files takes many more AMUs (every row column grows to
    the same capacity, whether it can be resized in place or not)."""
    words = ["garden", "violin", "chess", "museum", "marathon", "puppy", "festival", "coffee"]
    with memory(tmp_path / "s", hashing_encoder) as mem:
        mem.add([turn(i, "Ana" if i % 2 else "Ben", f"I love the {words[i % 8]} club number {i} a lot.")
                 for i in range(6)])
    for batch in range(6):
        with memory(tmp_path / "s", hashing_encoder) as mem:
            for i in range(6 + 12 * batch, 18 + 12 * batch):
                mem.add([turn(i, "Ana" if i % 2 else "Ben", f"We played {words[i % 8]} games together {i} times.",
                              session=f"s{batch + 2}")])
            rows = mem.live_space("default").index.rows
            assert len({len(col) for col in rows.cols.values()}) == 1
            assert mem.search("chess games", top_k=3)
    with memory(tmp_path / "s", hashing_encoder) as mem:
        assert len(mem.list()) >= 78


def test_replies_are_the_next_turn_by_another_speaker(hashing_encoder, tmp_path):
    from etamem.retrieval.space_search import reply_finder

    with memory(tmp_path / "s", hashing_encoder) as mem:
        mem.add(DIALOGUE)
        mem.add([turn(10, "Mel", "Did you sleep well last night?", "s9"), turn(11, "Mel", "We barely slept at all because of the loud storm outside.", "s9"),
                 turn(12, "Caro", "I slept like a log after the long hike.", "s9")], space="b")
        live = mem.live_space("default")
        replies = reply_finder(live.index, live.turns)
        assert replies(live.index.units_of_turn["t0"]) == live.index.units_of_turn["t1"]
        assert replies(live.index.units_of_turn["t5"]) == []  # the last turn of its session
        other = mem.live_space("b")
        assert other.index.units_of_turn["t11"]
        assert reply_finder(other.index, other.turns)(other.index.units_of_turn["t10"]) == []  # Mel goes on
