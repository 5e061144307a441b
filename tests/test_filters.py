"""Metadata on turns and filters inside retrieval (`etamem.filters`), checked against brute force:
for many random filters, `top_k` matching hits come back whenever that many units match, and no
hit from outside the filter."""
from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

import pytest

from conftest import HashingEncoder
from etamem import Config, Filters, Memory
from etamem.models.affect import VaderAffectTagger

SPEAKERS = ["Ana", "Ben", "Caro", "Dev"]
TOPICS = ["cat", "dog", "garden", "piano", "tennis", "Lisbon", "pasta", "novel", "bicycle", "guitar",
          "museum", "coffee", "marathon", "camera", "violin", "beach"]
VERBS = ["loves", "bought", "talked about", "visited", "painted", "lost", "found", "practised with"]
CHANNELS = ["email", "chat", "call"]
START = datetime(2023, 1, 2, 9, 0, tzinfo=timezone.utc)


def space_turns(n: int = 300, seed: int = 7) -> list[dict]:
    """`n` one-sentence turns in 12 sessions over 6 months, four speakers, metadata on most."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        session = i * 12 // n
        when = START + timedelta(days=15 * session, minutes=3 * i)
        turn = {"turn_id": f"t{i}", "session_id": f"s{session}", "speaker": SPEAKERS[rng.randrange(4)],
                "text": f"My friend {rng.choice(VERBS)} the {rng.choice(TOPICS)} and the {rng.choice(TOPICS)} "
                        f"near the {rng.choice(TOPICS)}.", "timestamp": when.isoformat()}
        if rng.random() < 0.85:
            turn["metadata"] = {"channel": rng.choice(CHANNELS), "priority": rng.randrange(1, 4),
                                "flag": rng.random() < 0.3}
            if rng.random() < 0.2:
                turn["metadata"]["tag"] = None
        out.append(turn)
    return out


def fast_memory(**cfg) -> Memory:
    enc = HashingEncoder()
    return Memory(None, Config.from_dict(cfg), text_encoder=enc, affect_tagger=VaderAffectTagger(enc))


# --- brute force: which units a filter lets through, written apart from etamem.filters ----------
def brute_matching(mem: Memory, space: str, f: dict) -> set[str]:
    turns = {t.turn_id: t for t in mem.turns(space)}
    out = set()
    for u in mem.list(space):
        meta = {}
        for tid in u.source_turn_ids:
            meta.update(turns[tid].extra.get("metadata", {}))
        if not brute_ok(f, u.speaker, u.session_id, u.timestamp, meta):
            continue
        out.add(u.amu_id)
    return out


def brute_ok(f: dict, speaker, session, when, meta) -> bool:
    names = f.get("speaker")
    if names is not None and speaker.lower() not in {n.lower() for n in ([names] if isinstance(names, str)
                                                                          else names)}:
        return False
    sessions = f.get("session_id")
    if sessions is not None and session not in ([sessions] if isinstance(sessions, str) else sessions):
        return False
    if f.get("since") is not None and when < datetime.fromisoformat(f["since"]):
        return False
    if f.get("until") is not None and when >= datetime.fromisoformat(f["until"]):
        return False
    for k, v in (f.get("metadata") or {}).items():
        if k not in meta or meta[k] != v or isinstance(meta[k], bool) != isinstance(v, bool):
            return False
    return True


def random_filter(rng: random.Random) -> dict:
    f: dict = {}
    while not f:
        if rng.random() < 0.4:
            f["speaker"] = rng.choice(SPEAKERS) if rng.random() < 0.5 else rng.sample(SPEAKERS, 2)
            if rng.random() < 0.3:  # names match whatever their case
                f["speaker"] = f["speaker"].upper() if isinstance(f["speaker"], str) else f["speaker"]
        if rng.random() < 0.4:
            f["session_id"] = f"s{rng.randrange(12)}" if rng.random() < 0.5 else [f"s{i}" for i in
                                                                                 rng.sample(range(12), 3)]
        if rng.random() < 0.4:
            a, b = sorted(rng.sample(range(190), 2))
            f["since"] = (START + timedelta(days=a)).isoformat()
            if rng.random() < 0.7:
                f["until"] = (START + timedelta(days=b + 1)).isoformat()
        if rng.random() < 0.5:
            f["metadata"] = rng.choice([{"channel": rng.choice(CHANNELS)}, {"priority": rng.randrange(1, 4)},
                                        {"flag": True}, {"channel": "call", "flag": False}, {"tag": None},
                                        {"priority": 1, "channel": "chat"}])
    return f


@pytest.fixture(scope="module", params=[{}, {"flat_candidates": 0}], ids=["default", "views-only"])
def seeded(request):
    """A Memory (default config, or with no flat candidates: the views' beams alone) holding a
    space of 300 turns."""
    mem = fast_memory(**request.param)
    mem.add(space_turns(), space="s")
    yield mem
    mem.close()


def test_filters_return_top_k_matching_hits_against_brute_force(seeded):
    """For 40 random filters and top_k from 1 to 100: exactly min(top_k, matching units) hits (the
    fallback off: units only), every one matching; with the fallback on, every hit (raw turns
    too) matches and there are at least as many."""
    rng = random.Random(11)
    sizes = []
    for i in range(40):
        f = random_filter(rng)
        k = rng.choice([1, 5, 20, 60, 100])
        query = f"{rng.choice(TOPICS)} {rng.choice(VERBS)} {rng.choice(TOPICS)}"
        matching = brute_matching(seeded, "s", f)
        sizes.append(len(matching))
        hits = seeded.retrieve(query, "s", top_k=k, filters=f, fallback=False).hits
        assert len(hits) == min(k, len(matching)), (f, k, len(matching))
        assert {h.amu.amu_id for h in hits} <= matching, f
        with_raw = seeded.retrieve(query, "s", top_k=k, filters=f).hits
        assert len(with_raw) >= min(k, len(matching))
        turns = {t.turn_id: t for t in seeded.turns("s")}
        for h in with_raw:
            if h.views == ("raw",):
                t = turns[h.source_turn_ids[0]]
                assert brute_ok(f, t.speaker, t.session_id, t.timestamp, t.extra.get("metadata", {})), (f, h)
            else:
                assert h.amu.amu_id in matching, (f, h.amu)
    assert min(sizes) < 20 < max(sizes)  # the filters cut both below and above top_k


def test_filters_cover_the_whole_range_of_top_k(seeded):
    """A filter letting through many units: top_k beyond the views' budget still fills up."""
    f = {"metadata": {"channel": "email"}}
    matching = brute_matching(seeded, "s", f)
    assert len(matching) > 80
    hits = seeded.search("the cat and the dog", "s", top_k=len(matching) + 5, filters=f)
    assert {h.amu.amu_id for h in hits if h.views != ("raw",)} == matching


def test_a_smaller_top_k_is_a_prefix_under_a_filter(seeded):
    rng = random.Random(3)
    for _ in range(10):
        f = random_filter(rng)
        query = f"{rng.choice(TOPICS)} {rng.choice(TOPICS)}"
        big = seeded.search(query, "s", top_k=40, filters=f)
        for k in (1, 7, 25):
            assert [h.amu.amu_id for h in seeded.search(query, "s", top_k=k, filters=f)] == \
                [h.amu.amu_id for h in big[:k]], (f, k)


def test_empty_filter_is_no_filter(seeded):
    plain = seeded.retrieve("piano near the beach", "s", top_k=15)
    for empty in (None, {}, Filters(), {"metadata": {}}, Filters(metadata={})):
        got = seeded.retrieve("piano near the beach", "s", top_k=15, filters=empty)
        assert [(h.amu.amu_id, h.score, h.views) for h in got.hits] == \
            [(h.amu.amu_id, h.score, h.views) for h in plain.hits]


def test_filters_dataclass_equals_dict_form(seeded):
    f = {"role": ["ana", "Ben"], "since": "2023-02-01T00:00:00+00:00", "metadata": {"priority": 2}}
    typed = Filters(speaker=["ana", "Ben"], since=datetime(2023, 2, 1, tzinfo=timezone.utc),
                    metadata={"priority": 2})
    a = seeded.search("garden tennis", "s", top_k=10, filters=f)
    b = seeded.search("garden tennis", "s", top_k=10, filters=typed)
    assert [h.amu.amu_id for h in a] == [h.amu.amu_id for h in b] and a


def test_filter_matching_nothing_gives_nothing(seeded):
    assert seeded.search("cat", "s", filters={"session_id": "no-such-session"}) == []
    assert seeded.search("cat", "s", filters={"metadata": {"channel": "fax"}}) == []


@pytest.mark.parametrize("bad, field", [
    ({"speakr": "Ana"}, "filters: unknown field"),
    ({"speaker": 3}, "filters.speaker"),
    ({"speaker": []}, "filters.speaker"),
    ({"speaker": "Ana", "role": "user"}, "filters.role"),
    ({"session_id": [""]}, "filters.session_id"),
    ({"since": "not a date"}, "filters.since"),
    ({"until": "2023-01-01", "since": "2023-02-01"}, "filters.until"),
    ({"metadata": {"a": [1]}}, "filters.metadata.a"),
    ({"metadata": "email"}, "filters.metadata"),
    ({"metadata": {"x": float("nan")}}, "filters.metadata.x"),
    ("speaker=Ana", "filters: expected a Filters or a dict"),
])
def test_bad_filters_name_the_field(seeded, bad, field):
    with pytest.raises(ValueError) as err:
        seeded.search("cat", "s", filters=bad)
    assert field in str(err.value)


def test_filters_reach_context_and_answer(seeded):
    f = {"speaker": "Caro", "metadata": {"channel": "call"}}
    matching = brute_matching(seeded, "s", f)
    packet = seeded.context_packet("the novel", "s", top_k=5, filters=f)
    assert packet.hits and all(h.amu.amu_id in matching or h.views == ("raw",) for h in packet.hits)
    assert "Caro" in seeded.context("the novel", "s", top_k=5, filters=f)
    ans = seeded.answer("What about the novel?", "s", filters=f)
    assert ans.hits and all(h.speaker == "Caro" for hit in ans.hits for h in hit.source_turns)


def test_current_version_is_brought_in_only_when_it_matches():
    """`current_first` puts the newer version of a fact in front of the older one; under a filter
    the newer one is brought in only if it matches (else the older stays, its link not followed)."""
    mem = fast_memory()
    mem.add([{"turn_id": "a", "session_id": "s1", "speaker": "Ana", "text": "I live in Chicago.",
              "timestamp": "2023-01-01T10:00", "metadata": {"src": "old"}},
             {"turn_id": "b", "session_id": "s2", "speaker": "Ana",
              "text": "I moved to Milwaukee last month, I live in Milwaukee now.",
              "timestamp": "2023-05-01T10:00", "metadata": {"src": "new"}}], space="x")
    assert [(link.source, link.target) for link in mem.links("x")] == [("b#0", "a#0")]
    assert mem.search("Where does Ana live?", "x", top_k=1)[0].source_turn_ids == ("b",)  # brought in
    hits = mem.search("Where does Ana live?", "x", top_k=1, filters={"metadata": {"src": "old"}})
    assert [h.source_turn_ids for h in hits] == [("a",)] and hits[0].metadata == {"src": "old"}


# --- metadata in and out ---------------------------------------------------------------------
def test_metadata_is_stored_in_extra_and_carried_to_hits(tmp_path):
    enc = HashingEncoder()
    with Memory(tmp_path / "m", text_encoder=enc, affect_tagger=VaderAffectTagger(enc)) as mem:
        mem.add([{"role": "user", "content": "I adopted a grey cat named Miso.", "id": "m1",
                  "session_id": "a", "metadata": {"channel": "email", "n": 2}},
                 {"speaker": "Ana", "text": "My sister plays the violin.", "turn_id": "m2", "session_id": "a",
                  "extra": {"photo": "x.jpg"}, "metadata": {"channel": "chat", "urgent": True}}], space="p")
    with Memory(tmp_path / "m", text_encoder=enc, affect_tagger=VaderAffectTagger(enc)) as mem:
        t1, t2 = mem.turns("p")
        assert t1.extra == {"metadata": {"channel": "email", "n": 2}} and t1.metadata == {"channel": "email", "n": 2}
        assert t2.extra == {"photo": "x.jpg", "metadata": {"channel": "chat", "urgent": True}}
        hits = mem.search("cat Miso", "p", filters={"metadata": {"channel": "email"}})
        assert hits and all(h.metadata == {"channel": "email", "n": 2} for h in hits)
        assert mem.search("violin", "p", filters={"metadata": {"urgent": 1}}) == []  # a bool is not a number
        assert all(h.metadata["urgent"] is True for h in mem.search("violin", "p", filters={"metadata": {
            "urgent": True}}))
        # the same turn again (a retry) is no change; other metadata is other content
        mem.add([{"speaker": "Ana", "text": "My sister plays the violin.", "turn_id": "m2", "session_id": "a",
                  "timestamp": t2.timestamp, "extra": {"photo": "x.jpg"},
                  "metadata": {"channel": "chat", "urgent": True}}], space="p")
        with pytest.raises(ValueError, match="other content"):
            mem.add([{"speaker": "Ana", "text": "My sister plays the violin.", "turn_id": "m2", "session_id": "a",
                      "timestamp": t2.timestamp, "extra": {"photo": "x.jpg"}, "metadata": {"channel": "sms"}}],
                    space="p")


def test_metadata_through_the_ingest_reader(tmp_path):
    """`etamem ingest --format chat` / `--format jsonl` lines carry metadata as `Memory.add` does;
    a bad value is named by file and line (as `cmd_ingest` checks them)."""
    import json

    from etamem.ingest.datasets import read_conversations

    good = tmp_path / "chat.jsonl"
    good.write_text("\n".join(json.dumps(m) for m in [
        {"role": "user", "content": "I adopted a cat.", "id": "c1", "space": "u", "metadata": {"app": "web"}},
        {"role": "assistant", "content": "A cat, lovely.", "id": "c2", "space": "u"}]) + "\n")
    mem = fast_memory()
    for conv in read_conversations(good, "chat"):
        mem.check(conv.turns, space=conv.space, labels=conv.labels)
        mem.add(conv.turns, space=conv.space)
    assert [t.metadata for t in mem.turns("u")] == [{"app": "web"}, {}]
    assert [h.metadata for h in mem.search("cat", "u", filters={"metadata": {"app": "web"}})][0] == {"app": "web"}
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"speaker": "Ana", "text": "hi", "metadata": {"tags": ["a"]}}) + "\n")
    conv = next(read_conversations(bad, "jsonl"))
    with pytest.raises(ValueError, match=r"bad.jsonl:1: turn.metadata.tags"):
        mem.check(conv.turns, space=conv.space, labels=conv.labels)


def test_unit_metadata_merges_its_source_turns():
    from etamem.filters import unit_metadata
    from etamem.records import Turn

    turns = {t.turn_id: t for t in [
        Turn("a", "s", "Ana", "x", START, extra={"metadata": {"k": 1, "c": "email"}}),
        Turn("b", "s", "Ana", "y", START, extra={"metadata": {"k": 2}}),
        Turn("c", "s", "Ana", "z", START)]}
    assert unit_metadata(["a", "b", "c", "gone"], turns.get) == {"k": 2, "c": "email"}
    assert unit_metadata(["b", "a"], turns.get) == {"k": 1, "c": "email"}


@pytest.mark.parametrize("meta, field", [
    ({"a": {"b": 1}}, "turns[0].metadata.a"),
    ({"a": [1, 2]}, "turns[0].metadata.a"),
    ("email", "turns[0].metadata"),
    ({"": 1}, "turns[0].metadata: keys"),
    ({f"k{i}": i for i in range(65)}, "turns[0].metadata: 65 keys"),
    ({"k": "x" * 20_000}, "turns[0].metadata: 20009 characters as JSON, more than 16384"),
    ({"k": float("inf")}, "turns[0].metadata.k"),
])
def test_bad_metadata_names_the_field(meta, field):
    mem = fast_memory()
    with pytest.raises(ValueError) as err:
        mem.add([{"speaker": "Ana", "text": "hello there", "metadata": meta}], space="x")
    assert field in str(err.value)
    assert mem.spaces() == []  # nothing stored


def test_metadata_in_extra_is_checked_and_must_agree():
    mem = fast_memory()
    with pytest.raises(ValueError, match=r"turns\[0\].extra.metadata.a"):
        mem.add([{"speaker": "Ana", "text": "hello", "extra": {"metadata": {"a": [1]}}}], space="x")
    with pytest.raises(ValueError, match=r"turns\[0\].metadata: differs"):
        mem.add([{"speaker": "Ana", "text": "hello", "extra": {"metadata": {"a": 1}}, "metadata": {"a": 2}}],
                space="x")
    mem.add([{"speaker": "Ana", "text": "hello", "turn_id": "h", "metadata": {}}], space="x")
    assert mem.turns("x")[0].extra == {}  # an empty metadata is not stored


# --- FTA-Mem -----------------------------------------------------------------------------------
def test_fta_method_filters_against_brute_force():
    mem = fast_memory(method="fta", fta_tau=-1.0)
    mem.add(space_turns(80, seed=3), space="f")
    mem.end_session("f")
    rng = random.Random(5)
    for _ in range(12):
        f = random_filter(rng)
        k = rng.choice([1, 5, 20])
        matching = brute_matching(mem, "f", f)
        hits = mem.search(f"{rng.choice(TOPICS)} {rng.choice(TOPICS)}", "f", top_k=k, filters=f)
        ranked = [h for h in hits if h.views != ("fta-link",)]
        assert len(ranked) == min(k, len(matching)), (f, k)
        assert {h.amu.amu_id for h in hits} <= matching, f


# --- one ranking sanity check with the real encoder --------------------------------------------
def test_filtered_ranking_with_minilm(minilm):
    from etamem.models.encoders import CachedEncoder

    enc = CachedEncoder(minilm)
    mem = Memory(None, text_encoder=enc, affect_tagger=VaderAffectTagger(enc))
    mem.add([{"speaker": "Ana", "text": "I adopted a grey cat named Miso.", "session_id": "a",
              "timestamp": "2023-05-08T10:00", "metadata": {"source": "home"}},
             {"speaker": "Ben", "text": "I adopted a brown dog called Rex from the shelter.", "session_id": "b",
              "timestamp": "2023-06-08T10:00", "metadata": {"source": "work"}},
             {"speaker": "Ben", "text": "The quarterly report is due on Friday.", "session_id": "b",
              "timestamp": "2023-06-08T10:05", "metadata": {"source": "work"}},
             {"speaker": "Ana", "text": "We went hiking in the Alps last summer.", "session_id": "a",
              "timestamp": "2023-05-08T10:05", "metadata": {"source": "home"}}], space="m")
    top = mem.search("Which pet was adopted?", "m", top_k=2, filters={"speaker": "Ben"})
    assert "dog" in top[0].amu.text.lower()
    top = mem.search("Which pet was adopted?", "m", top_k=2, filters={"metadata": {"source": "home"}})
    assert "cat" in top[0].amu.text.lower() and all(h.metadata == {"source": "home"} for h in top)
    top = mem.search("Which pet was adopted?", "m", top_k=3, filters={"until": "2023-06-01"})
    assert "cat" in top[0].amu.text.lower() and all(h.amu.timestamp.month == 5 for h in top)
