"""Live memory (DESIGN §11): writes update every index in place and the result equals a
from-scratch rebuild of the same store; per-space reader/writer locking (concurrent adds and
searches in one space; a search finishing while an add waits on a slow LLM server)."""
import json
import re
import threading
import time
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from etamem import Config, Memory
from etamem.models.affect import VaderAffectTagger
from etamem.models.encoders import CachedEncoder
from etamem.retrieval import SpaceIndex
from etamem.retrieval.options import SearchOptions

WORDS = ("cat dog garden hiking guitar painting nurse job Lyon Paris boat sailing concert museum recipe cake "
         "running marathon book novel school teacher camping lake mountain bike train trip sister brother "
         "birthday party coffee tea market bakery piano violin photo beach sunset storm rain winter summer "
         "love hate wonderful awful happy sad proud worried excited").split()
NAMES = ("Ana", "Ben")
T0 = datetime(2023, 1, 2, 9, tzinfo=timezone.utc)


def sentence(rng) -> str:
    return " ".join(rng.choice(WORDS, int(rng.integers(4, 9)))).capitalize() + "."


def session(rng, s: int, n_turns: int, prefix: str = "") -> list[dict]:
    start = T0 + timedelta(days=2 * s, hours=int(rng.integers(0, 8)))
    return [{"session_id": f"{prefix}s{s}", "speaker": NAMES[i % 2], "turn_id": f"{prefix}s{s}:{i}",
             "text": " ".join(sentence(rng) for _ in range(int(rng.integers(1, 3)))),
             "timestamp": (start + timedelta(minutes=i)).isoformat()} for i in range(n_turns)]


def memory(path, enc, **cfg) -> Memory:
    enc = CachedEncoder(enc)
    return Memory(path, Config(**cfg), text_encoder=enc, affect_tagger=VaderAffectTagger(enc))


def hits(mem, space, queries, **kw):
    out = []
    for q in queries:
        res = mem.retrieve(q, space=space, top_k=20, **kw)
        out.append([(h.amu.amu_id, h.views, h.source_turn_ids, round(h.score, 6)) for h in res.hits])
    return out


def test_incremental_indexes_equal_a_rebuild_of_the_same_store(hashing_encoder, tmp_path):
    """A few thousand AMUs with adds (sessions and single turns) and deletes interleaved: every
    result list of the live memory equals that of a memory opened afresh on the same store,
    whose indexes are built from scratch from the stored vectors."""
    rng = np.random.default_rng(0)
    mem = memory(tmp_path / "s", hashing_encoder)
    for s in range(60):
        mem.add(session(rng, s, 25), space="u")
        mem.add(session(rng, 1000 + s, 1), space="u")  # a one-turn session: an agent's single add
        ids = [a.amu_id for a in mem.list("u")]
        for i in rng.choice(len(ids), 6, replace=False):
            mem.delete("u", ids[int(i)])
    live = mem.live_space("u")
    assert len(mem.list("u")) > 1500 and live.index.amu_lex.n > len(mem.list("u"))  # tombstones in use
    queries = [" ".join(rng.choice(WORDS, 3)) for _ in range(30)] + ["What did Ana say about the cat in May?"]
    for kw in ({}, {"fallback": False}, {"views": ("time",), "fallback": False}):
        got = hits(mem, "u", queries, **kw)
        fresh = memory(tmp_path / "s", hashing_encoder)
        assert fresh.live_space("u") is not live
        assert got == hits(fresh, "u", queries, **kw)
        fresh.close()
    # and a SpaceIndex built in this process from the live views equals the live one
    rebuilt = SpaceIndex(live.views, live.index.amus, live.index.text_vecs[[live.index.row_of[a.amu_id] for a in
                                                                            live.index.amus]],
                         live.index.affect_vecs[[live.index.row_of[a.amu_id] for a in live.index.amus]])
    q = hashing_encoder.encode(["cat garden"])[0]
    qa = mem.affect_tagger.tag(["cat garden"]).embeddings[0]
    a = live.index.search("cat garden", q, qa, 20, SearchOptions(beam=10, beta=0.1)).ranked
    b = rebuilt.search("cat garden", q, qa, 20, SearchOptions(beam=10, beta=0.1)).ranked
    assert [(k, v) for k, _, v in a] == [(k, v) for k, _, v in b]
    np.testing.assert_allclose([s for _, s, _ in a], [s for _, s, _ in b], rtol=0, atol=1e-6)
    # the dialogue maps kept in step by every write (source turn -> units, speakers, question flags)
    assert {t: sorted(u) for t, u in live.index.units_of_turn.items()} == \
        {t: sorted(u) for t, u in rebuilt.units_of_turn.items()}
    assert live.index.speakers == rebuilt.speakers
    assert [bool(live.index.rows["question"][live.index.row_of[a.amu_id]]) for a in live.index.amus] == \
        [bool(rebuilt.rows["question"][rebuilt.row_of[a.amu_id]]) for a in live.index.amus]
    mem.close()


def test_a_write_updates_the_indexes_in_place(hashing_encoder):
    rng = np.random.default_rng(1)
    mem = memory(None, hashing_encoder)
    for s in range(20):
        mem.add(session(rng, s, 20), space="u")
    live = mem.live_space("u")
    index, turns = live.index, live.turns
    slots = {v: nt.lex.n for v, nt in index.node_texts.items()}
    n_nodes = sum(len(nt.slot) for nt in index.node_texts.values())
    amus_before, turns_before = index.amu_lex.n, len(turns)
    new = mem.add({"session_id": "s19", "speaker": "Ana", "text": "My sister baked a wonderful cake.",
                   "timestamp": (T0 + timedelta(days=38, hours=9)).isoformat()}, space="u")
    assert mem.live_space("u").index is index and mem.live_space("u").turns is turns  # nothing rebuilt
    assert index.amu_lex.n == amus_before + len(new) and len(turns) == turns_before + 1
    # only the nodes on the new unit's paths got new BM25 slots, not every node of the space
    grown = sum(nt.lex.n - slots[v] for v, nt in index.node_texts.items())
    assert n_nodes > 100 and 0 < grown <= 3 * 8
    assert new[0].amu_id in {h.amu.amu_id for h in mem.search("sister baked cake", space="u", top_k=5)}


def test_search_reads_and_never_processes_pending_turns(hashing_encoder):
    class Failing:
        def __init__(self):
            self.fail = True

        def extract(self, turn, context):
            if self.fail:
                raise RuntimeError("model down")
            return [turn.text]

    extractor = Failing()
    enc = CachedEncoder(hashing_encoder)
    mem = Memory(None, text_encoder=enc, affect_tagger=VaderAffectTagger(enc), extractor=extractor)
    with pytest.raises(RuntimeError):
        mem.add({"session_id": "s", "speaker": "Ana", "text": "I bought a red bike.", "timestamp": "2023-05-01"},
                space="u")
    res = mem.retrieve("red bike", space="u")
    assert res.pending_turns == 1 and res.hits == []
    assert mem.retrieve("red bike", space="u").pending_turns == 1  # still pending: search did not process it
    extractor.fail = False
    assert [a.text for a in mem.flush("u")] == ["I bought a red bike."]
    res = mem.retrieve("red bike", space="u")
    assert res.pending_turns == 0 and res.hits[0].amu.text == "I bought a red bike."
    # a read writes nothing: no generation step, no query vector in the store's cache
    generation = mem.store.generation("u")
    cached = mem.store._query("SELECT COUNT(*) FROM vector_cache")[0][0]
    mem.search("a question never asked before", space="u")
    assert mem.store.generation("u") == generation
    assert mem.store._query("SELECT COUNT(*) FROM vector_cache")[0][0] == cached


def test_concurrent_adds_and_searches_in_one_space(hashing_encoder):
    """Two writers and three readers on one space: no exception, no AMU lost or duplicated,
    every search answered from one consistent state (hits distinct, ranked, all known)."""
    rng = np.random.default_rng(2)
    mem = memory(None, hashing_encoder, insert_batch=1)
    for s in range(6):
        mem.add(session(rng, s, 20), space="u")
    writes = {w: [session(np.random.default_rng(10 + w), 100 * (w + 1) + i, 1, prefix=f"w{w}")[0]
                  for i in range(40)] for w in range(2)}
    errors, added, results = [], [], []
    done = threading.Event()

    def writer(w):
        try:
            for turn in writes[w]:
                added.extend(a.amu_id for a in mem.add(turn, space="u"))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def reader(r):
        qs = [" ".join(np.random.default_rng(r).choice(WORDS, 3)) for _ in range(5)]
        try:
            while not done.is_set():
                for q in qs:
                    res = mem.retrieve(q, space="u", top_k=20)
                    results.append([(h.amu.amu_id, h.score) for h in res.hits])
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    writers = [threading.Thread(target=writer, args=(w,)) for w in range(2)]
    readers = [threading.Thread(target=reader, args=(r,)) for r in range(3)]
    for t in writers + readers:
        t.start()
    for t in writers:
        t.join()
    done.set()
    for t in readers:
        t.join()
    assert not errors, errors
    stored = [a.amu_id for a in mem.list("u")]
    assert len(stored) == len(set(stored)) and set(added) <= set(stored)
    assert {t["turn_id"] for w in writes.values() for t in w} <= {t.turn_id for t in mem.turns("u")}
    assert mem.store.count_pending("u") == 0
    live = mem.live_space("u")
    views = live.views
    in_trees = list(views.event.row_of) + list(views.affect.row_of)
    assert sorted(in_trees) == sorted(stored) and sorted(views.time.amu_session) == sorted(stored)
    assert sorted(live.index.amu_of) == sorted(stored) and len(live.turns) == len(mem.turns("u"))
    assert len(results) > 10
    known = set(stored) | {f"turn:{t.turn_id}" for t in mem.turns("u")}
    for res in results:
        ids = [a for a, _ in res]
        assert len(ids) == len(set(ids)) and set(ids) <= known
        assert [s for _, s in res] == sorted((s for _, s in res), reverse=True)


def test_a_search_finishes_while_an_add_waits_on_a_slow_llm(hashing_encoder, chat_server, tmp_path):
    """Extraction calls a local LLM server that answers after 3 s: searches of the same space
    and of another space are answered meanwhile (the LLM call holds no view or store lock)."""
    from etamem.extraction.extractors import LLMExtractor, RuleExtractor
    from etamem.models.llm import LLMClient

    slow = threading.Event()
    asked = threading.Event()
    slow_summaries = threading.Event()

    def responder(body):
        prompt = body["messages"][-1]["content"]
        if "Turn to process" not in prompt:
            if slow_summaries.is_set():  # the first summary call is slow
                slow_summaries.clear()
                asked.set()
                time.sleep(3.0)
            return "A summary."
        text = re.search(r"Turn to process \([^)]*\):\n(.*?)\n\nRules:", prompt, re.S).group(1)
        if slow.is_set():
            asked.set()
            time.sleep(3.0)
        return json.dumps({"facts": [s.strip() for s in re.split(r"(?<=[.!?])\s+", text) if s.strip()]})

    chat_server.responder = responder
    llm = LLMClient("m", base_url=chat_server.base_url, api_key="k", cache_path=str(tmp_path / "cache.sqlite"))
    enc = CachedEncoder(hashing_encoder)
    # extraction inside `add` (with the background queue `add` does not wait for the LLM at all)
    mem = Memory(None, Config(llm_background=False), text_encoder=enc, affect_tagger=VaderAffectTagger(enc), llm=llm,
                 extractor=LLMExtractor(llm, fallback=RuleExtractor()))
    rng = np.random.default_rng(3)
    for space in ("a", "b"):
        mem.add(session(rng, 0, 4), space=space)
    slow.set()
    writer = threading.Thread(target=mem.add, args=({"session_id": "s0", "speaker": "Ana", "turn_id": "slow",
                                                     "text": "I repaired my old bike.",
                                                     "timestamp": "2023-01-02T10:00:00+00:00"},),
                              kwargs={"space": "a"})
    writer.start()
    assert asked.wait(10)
    for space in ("b", "a"):
        t0 = time.perf_counter()
        assert mem.search("guitar concert", space=space)
        assert time.perf_counter() - t0 < 1.5 and writer.is_alive()
    writer.join(10)
    assert not writer.is_alive()
    assert "Ana repaired their old bike." in {a.text for a in mem.list("a")}  # first person as the speaker
    # session-end summaries: the structural pass is committed, the LLM is asked outside the lock
    slow.clear()
    asked.clear()
    slow_summaries.set()
    ender = threading.Thread(target=mem.end_session, args=("a",))
    ender.start()
    assert asked.wait(10)
    t0 = time.perf_counter()
    assert mem.search("old bike", space="a")
    assert time.perf_counter() - t0 < 1.5 and ender.is_alive()
    ender.join(60)
    time_nodes = mem.views("a").time.nodes
    assert any(n.summary == "A summary." for n in time_nodes.values() if n.level != "session")


def test_derived_files_are_loaded_when_current_and_rebuilt_when_stale_or_damaged(hashing_encoder, tmp_path, caplog):
    """Closing writes the indexes beside the store; the next open loads them (nothing
    re-tokenised) and answers the same; files of an older generation (a process that wrote
    and died before closing) or damaged files are ignored and the indexes rebuilt."""
    from etamem.live import derived

    rng = np.random.default_rng(4)
    queries = [" ".join(rng.choice(WORDS, 3)) for _ in range(10)]
    mem = memory(tmp_path / "s", hashing_encoder)
    for s in range(8):
        mem.add(session(rng, s, 15), space="u")
    mem.delete("u", mem.list("u")[3].amu_id)
    before = hits(mem, "u", queries)
    mem.close()
    reopened = memory(tmp_path / "s", hashing_encoder)
    info = reopened.index_info("u")
    generation = reopened.store.generation("u")
    salt = reopened.store.name_salt()
    assert derived.find(tmp_path / "s", "u", reopened.store.stamp("u"),
                        reopened.store.get_space_meta("u", derived.RECORD_KEY), salt) is not None
    assert info["saved"] == info["generation"] == generation  # loaded, not rebuilt
    assert info["amus"] == len(reopened.list("u")) and info["routing_modes"]["event"] == "exact"
    assert hits(reopened, "u", queries) == before
    reopened.add(session(rng, 8, 3), space="u")  # and it keeps taking writes
    after = hits(reopened, "u", queries)
    # no close: the files on disk are one generation behind the store
    stale = memory(tmp_path / "s", hashing_encoder)
    assert stale.index_info("u")["saved"] is None and hits(stale, "u", queries) == after
    stale.close()
    (target,) = derived.space_dir(tmp_path / "s", "u", salt).glob("g*")  # written by stale.close()
    for f in target.rglob("*.npy"):
        f.write_bytes(b"not an array")
    caplog.clear()
    damaged = memory(tmp_path / "s", hashing_encoder)
    assert damaged.index_info("u")["saved"] is None and "rebuilding" in caplog.text
    assert hits(damaged, "u", queries) == after
    damaged.delete("u")
    assert not derived.space_dir(tmp_path / "s", "u", salt).exists()


def test_derived_files_of_another_bm25_stemmer_are_rebuilt(hashing_encoder, tmp_path):
    """BM25 tokens saved with one stemmer are never read with another: a store reopened with
    another `bm25_stemmer` rebuilds its indexes (and answers as a fresh build would)."""
    rng = np.random.default_rng(6)
    queries = [" ".join(rng.choice(WORDS, 3)) for _ in range(10)]
    mem = memory(tmp_path / "s", hashing_encoder)
    for s in range(3):
        mem.add(session(rng, s, 10), space="u")
    mem.close()
    for stemmer in ("none", "english"):
        reopened = memory(tmp_path / "s", hashing_encoder, bm25_stemmer=stemmer)
        live = reopened.live_space("u")
        info = reopened.index_info("u")
        assert info["saved"] is None and info["bm25_stemmer"] == stemmer  # rebuilt, not loaded
        assert live.turns.index.lexical.stemmer == stemmer
        got = hits(reopened, "u", queries)
        reopened.close()
        again = memory(tmp_path / "s", hashing_encoder, bm25_stemmer=stemmer)  # now saved with this stemmer
        assert again.index_info("u")["saved"] is not None and hits(again, "u", queries) == got
        again.close()


def test_blas_threads_are_bounded_around_the_engine_only():
    from threadpoolctl import threadpool_info

    from etamem.threads import blas_threads

    def blas():
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

    before = blas()
    with blas_threads(1):
        assert all(n == 1 for n in blas())
    assert blas() == before
    with blas_threads(0):
        assert blas() == before
    with pytest.raises(ValueError, match="blas_threads"):
        Config.from_dict({"blas_threads": -1})
