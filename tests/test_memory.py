"""Memory API end to end on the real MiniLM encoder and the VADER tagger."""
import threading

import pytest

from etamem import AMU, Config, Hit, Memory, Turn
from etamem.extraction.extractors import RuleExtractor
from etamem.models.affect import VaderAffectTagger

CONV = [
    {"turn_id": "a1", "session_id": "s1", "speaker": "Ana", "text": "I adopted a grey cat named Miso last week.",
     "timestamp": "1:56 pm on 8 May, 2023"},
    {"turn_id": "a2", "session_id": "s1", "speaker": "Ben", "text": "I started a new job as a nurse in Lyon.",
     "timestamp": "1:56 pm on 8 May, 2023"},
    {"turn_id": "a3", "session_id": "s2", "speaker": "Ana", "text": "My sister is visiting from Toronto in June.",
     "timestamp": "2023/05/20 (Sat) 02:21"},
    {"turn_id": "a4", "session_id": "s2", "speaker": "Ben", "text": "I am terrified of the exam next month, it is awful.",
     "timestamp": "2023-05-20T02:30:00"},
]


def make_memory(minilm, path=None, **cfg):
    return Memory(path, Config.from_dict(cfg), text_encoder=_cached(minilm),
                  affect_tagger=VaderAffectTagger(minilm))


def _cached(enc):
    from etamem.models.encoders import CachedEncoder

    return CachedEncoder(enc)


def test_add_search_and_views(minilm):
    mem = make_memory(minilm)
    amus = mem.add(CONV, space="u1")
    assert all(isinstance(a, AMU) for a in amus) and len(amus) >= 4
    assert {a.source_turn_ids[0] for a in amus} == {"a1", "a2", "a3", "a4"}
    texts = " ".join(a.text for a in amus)
    assert "Ana adopted a grey cat" in texts and " I " not in f" {texts} "
    hits = mem.search("Which pet does Ana have?", space="u1", top_k=3)
    assert isinstance(hits[0], Hit) and hits[0].source_turn_ids == ("a1",)
    assert "time" in hits[0].views and set(hits[0].views) <= {"event", "affect", "time"}
    assert hits[0].score >= hits[-1].score
    exam = [a for a in amus if "exam" in a.text][0]
    assert exam.polarity == "negative" and abs(sum(exam.polarity_scores) - 1) < 1e-5


def test_reopen_gives_same_contents_and_results(minilm, tmp_path):
    with make_memory(minilm, tmp_path / "store") as mem:
        mem.add(CONV, space="u1")
        before_list = mem.list("u1")
        before = [(h.amu.amu_id, round(h.score, 6)) for h in mem.search("job in Lyon", space="u1")]
        before_turns = mem.turns("u1")
    inner = minilm
    with make_memory(inner, tmp_path / "store") as mem2:
        assert mem2.list("u1") == before_list
        assert mem2.turns("u1") == before_turns
        after = [(h.amu.amu_id, round(h.score, 6)) for h in mem2.search("job in Lyon", space="u1")]
        assert after == before
        # unit and raw-turn vectors came from the store (turn vectors are encoded once, at
        # add): only the query reached the model
        assert mem2.text_encoder.encoded_texts == 1


@pytest.mark.parametrize("field, value, match", [
    ("text", "   ", r"turns\[1\]\.text"),
    ("speaker", None, r"turns\[1\]\.speaker: missing"),
    ("timestamp", "sometime in spring", r"turns\[1\]\.timestamp"),
    ("session_id", "", r"turns\[1\]\.session_id"),
])
def test_bad_input_stores_nothing(minilm, field, value, match):
    mem = make_memory(minilm)
    mem.add(CONV[:1], space="u1")
    bad = dict(CONV[2])
    bad[field] = value
    with pytest.raises(ValueError, match=match):
        mem.add([CONV[1], bad, CONV[3]], space="u1")
    assert [t.turn_id for t in mem.turns("u1")] == ["a1"]
    assert {a.source_turn_ids for a in mem.list("u1")} == {("a1",)}
    with pytest.raises(ValueError, match="space"):
        mem.add(CONV, space="")
    assert mem.add(CONV[:1], space="u1") == mem.list("u1")  # the same turn again: a no-op (idempotent)
    with pytest.raises(ValueError, match=r"turns\[0\]\.turn_id: 'a1' is already stored .* other content"):
        mem.add([{**CONV[0], "text": "Another text."}], space="u1")  # same id, other content
    with pytest.raises(ValueError, match="unknown field"):
        mem.add([{**CONV[1], "mood": "x"}], space="u1")


def test_spaces_are_isolated_and_delete_is_scoped(minilm):
    mem = make_memory(minilm)
    mem.add(CONV[:2], space="alice")
    mem.add([{**CONV[0], "text": "I adopted a grey cat named Miso last week."}], space="bob")
    assert set(mem.spaces()) == {"alice", "bob"}
    for hit in mem.search("grey cat named Miso", space="alice", top_k=50):
        assert hit.amu.space == "alice"
    assert all(h.amu.space == "bob" for h in mem.search("nurse job", space="bob", top_k=50))
    n_bob = len(mem.list("bob"))
    removed = mem.delete(space="alice")
    assert removed > 0 and mem.spaces() == ["bob"] and len(mem.list("bob")) == n_bob
    assert mem.search("cat", space="alice") == []  # a space with nothing stored finds nothing
    with pytest.raises(ValueError, match="unknown space"):
        mem.list("alice")


def test_delete_one_amu(minilm):
    mem = make_memory(minilm)
    amus = mem.add(CONV, space="u1")
    target = next(a for a in amus if "cat" in a.text)
    assert mem.delete(space="u1", amu_id=target.amu_id) == 1
    with pytest.raises(KeyError):  # forgotten, not kept with a status
        mem.get(target.amu_id, space="u1")
    hits = mem.search("grey cat Miso", space="u1", top_k=50)
    assert target.amu_id not in {h.amu.amu_id for h in hits}
    assert not any(target.text in h.amu.text for h in hits)  # raw-turn hits included
    assert not any(target.text in t.text for t in mem.turns("u1"))
    assert target.amu_id not in {a.amu_id for a in mem.list("u1")}
    with pytest.raises(KeyError):
        mem.delete(space="u1", amu_id="nope")


def test_raw_turns_survive_extraction_failure(minilm):
    class Flaky(RuleExtractor):
        fail = True

        def extract(self, turn, context=()):
            if self.fail:
                raise RuntimeError("model down")
            return super().extract(turn, context)

    flaky = Flaky()
    mem = Memory(None, text_encoder=_cached(minilm), affect_tagger=VaderAffectTagger(minilm), extractor=flaky)
    with pytest.raises(RuntimeError):
        mem.add(CONV, space="u1")
    assert len(mem.turns("u1")) == 4 and mem.list("u1") == []
    flaky.fail = False
    assert len(mem.flush("u1")) >= 4
    assert {a.source_turn_ids[0] for a in mem.list("u1")} == {"a1", "a2", "a3", "a4"}


def test_sessions_end_when_a_new_one_arrives(minilm):
    mem = make_memory(minilm)
    mem.add(CONV[:2], space="u1")
    assert mem.store.open_sessions("u1") == ["s1"]
    mem.add(CONV[2:], space="u1")
    assert mem.store.open_sessions("u1") == ["s2"]
    assert mem.end_session("u1") == ["s2"] and mem.store.open_sessions("u1") == []


def test_turn_objects_and_generated_ids(minilm):
    from etamem.ingest.timeparse import parse_timestamp

    mem = make_memory(minilm)
    t = Turn(turn_id="x1", session_id="s", speaker="Ana", text="I love climbing in the Alps.",
             timestamp=parse_timestamp("2023-01-02"))
    mem.add(t, space="u")
    mem.add([{"session_id": "s", "speaker": "Ana", "text": "My brother lives in Oslo.", "timestamp": "2023-01-02"}],
            space="u")
    assert [x.turn_id for x in mem.turns("u")] == ["x1", "t1"]
    with pytest.raises(ValueError, match="space"):
        mem.add(Turn(**{**t.__dict__, "turn_id": "x2", "space": "other"}), space="u")


def test_answer_without_llm_returns_evidence(minilm):
    mem = make_memory(minilm)
    mem.add(CONV, space="u1")
    ans = mem.answer("Where does Ben work as a nurse?", space="u1", now="2023-06-01")
    assert not ans.llm_used and "no LLM is configured" in ans.note
    assert ans.text.startswith(ans.hits[0].amu.text.rstrip("."))
    assert "Lyon" in ans.text


def test_answer_with_llm_via_local_server(minilm, chat_server, tmp_path):
    from etamem.models.llm import LLMClient

    seen = []

    def responder(body):
        prompt = body["messages"][-1]["content"]
        if "Question:" not in prompt:  # session-end node summaries also go through the LLM
            return "summary"
        seen.append(prompt)
        return "Lyon"

    chat_server.responder = responder
    llm = LLMClient("test-model", base_url=chat_server.base_url, api_key="k", cache_path=str(tmp_path / "c.sqlite"))
    mem = Memory(None, text_encoder=_cached(minilm), affect_tagger=VaderAffectTagger(minilm), llm=llm,
                 extractor=RuleExtractor())
    mem.add(CONV, space="u1")
    ans = mem.answer("Where does Ben work?", space="u1", now="2023-06-01")
    assert ans.llm_used and ans.text == "Lyon"
    assert "Question date: 1 June 2023" in seen[0]
    assert "(turn) Ben: I started a new job as a nurse in Lyon." in seen[0]  # the evidence's source turn
    assert "Ben started a new job as a nurse in Lyon" not in seen[0]  # no unit lines (answer_context "turns")
    assert ans.cost["answer"].calls == 1 and ans.cost["answer"].prompt_tokens > 0
    again = mem.answer("Where does Ben work?", space="u1", now="2023-06-01")
    assert again.text == "Lyon" and again.cost["answer"].cached_calls == 1 and len(seen) == 1


def test_search_validates_input(minilm):
    mem = make_memory(minilm)
    mem.add(CONV, space="u1")
    with pytest.raises(ValueError, match="query"):
        mem.search("  ", space="u1")
    with pytest.raises(ValueError, match="top_k"):
        mem.search("cat", space="u1", top_k=0)
    with pytest.raises(ValueError, match="^now: cannot parse"):
        mem.search("cat", space="u1", now="not a date")


def test_concurrent_searches_are_consistent(minilm):
    mem = make_memory(minilm)
    mem.add(CONV, space="u1")
    queries = ["cat", "nurse job", "sister visiting", "exam fear"] * 5
    expected = {q: [h.amu.amu_id for h in mem.search(q, space="u1")] for q in set(queries)}
    results, errors = [], []

    def work(q):
        try:
            results.append((q, [h.amu.amu_id for h in mem.search(q, space="u1")]))
        except Exception as exc:  # pragma: no cover - the assertion below reports it
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(q,)) for q in queries]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert not errors and len(results) == len(queries)
    assert all(ids == expected[q] for q, ids in results)


def test_config_from_dict():
    cfg = Config.from_dict({"top_k": 7, "bm25_weight": 0.2})
    assert cfg.top_k == 7 and cfg.bm25_weight == 0.2 and Config.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError, match="unknown config key"):
        Config.from_dict({"topk": 3})
    with pytest.raises(ValueError, match="routing"):
        Config.from_dict({"routing": "random"})


def test_config_llm_from_environment(monkeypatch):
    monkeypatch.setenv("ETAMEM_LLM_MODEL", "m1")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    cfg = Config()
    assert cfg.resolved_llm_model() == "m1" and cfg.resolved_llm_base_url() == "http://127.0.0.1:9/v1"
    assert Config(llm_model="m2").resolved_llm_model() == "m2"


def test_one_call_with_several_sessions_ends_all_but_the_last(minilm):
    mem = make_memory(minilm)
    mem.add(CONV, space="u1")  # s1 then s2 in one call
    assert mem.store.open_sessions("u1") == ["s2"]
    assert mem.views("u1").event.steps == 1  # s1's end ran one maintenance pass


def test_add_is_idempotent_by_turn_id(hashing_encoder, tmp_path):
    """A retry of the same turns stores nothing new and returns the same units; the same id with
    other content is an error naming both; README's example runs twice."""
    from etamem.models.affect import VaderAffectTagger
    from etamem.models.encoders import CachedEncoder

    enc = CachedEncoder(hashing_encoder)
    mem = Memory(tmp_path / "s", text_encoder=enc, affect_tagger=VaderAffectTagger(enc))
    first = mem.add(CONV, space="u1")
    again = mem.add(CONV, space="u1")
    assert [a.amu_id for a in again] == [a.amu_id for a in first] and len(mem.turns("u1")) == len(CONV)
    some = mem.add(CONV[1:3] + [{**CONV[0], "turn_id": "new:1", "session_id": "s9"}], space="u1")
    # new:1 restates CONV[0]: it joins that unit as a mention (etamem.facts.mentions)
    assert {t for a in some for t in a.source_turn_ids} >= {CONV[1]["turn_id"], "new:1"}
    assert len(mem.turns("u1")) == len(CONV) + 1
    with pytest.raises(ValueError, match=r"turns\[0\]\.turn_id: .* with other content \(text: stored"):
        mem.add([{**CONV[1], "text": "Something else."}], space="u1")
    with pytest.raises(ValueError, match="appears twice in this call"):
        mem.add([CONV[0], CONV[0]], space="u1")
    mem.close()
    for _ in range(2):  # the README example
        with Memory(tmp_path / "alice", text_encoder=enc, affect_tagger=VaderAffectTagger(enc)) as m:
            m.add([{"session_id": "s1", "speaker": "Alice", "text": "I adopted a grey cat named Miso.",
                    "timestamp": "1:56 pm on 8 May, 2023", "turn_id": "s1:1"},
                   {"session_id": "s1", "speaker": "Bob", "text": "I start my new job in Lyon on Monday.",
                    "timestamp": "2023-05-08T13:58", "turn_id": "s1:2"}], space="alice")
            assert len(m.turns("alice")) == 2 and m.search("What pet does Alice have?", space="alice")
