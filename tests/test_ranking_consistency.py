"""Retrieval that users can rely on: `search(top_k=k)` is the first k of `search(top_k=K)`,
and the turn-context scoring (`TurnIndex.context`, `beam.contextual`) equals brute force."""
import json
from datetime import datetime, timedelta, timezone
from importlib import resources
from itertools import groupby

import numpy as np
import pytest

from etamem import Memory
from etamem.config import Config
from etamem.ingest.datasets import read_locomo
from etamem.records import Turn
from etamem.retrieval.beam import contextual, hybrid
from etamem.retrieval.fallback import TurnIndex, turn_text
from etamem.retrieval.lexical import minmax


def _ids(hits):
    return [(h.amu.amu_id, h.source_turn_ids) for h in hits]


def _assert_prefixes(mem, space, questions, K=12):
    for q, now in questions:
        full = _ids(mem.search(q, space, top_k=K, now=now))
        assert len(full) == K
        for k in range(1, K):
            assert _ids(mem.search(q, space, top_k=k, now=now)) == full[:k], (q, k)


def test_search_top_k_is_a_prefix_on_the_demo(minilm, tmp_path):
    doc = json.loads(resources.files("etamem.data").joinpath("demo_conversation.json").read_text(encoding="utf-8"))
    with Memory(tmp_path / "s", Config(), text_encoder=minilm) as mem:
        for _, session in groupby(doc["turns"], key=lambda t: t["session_id"]):
            mem.add(list(session), space=doc["space"])
        _assert_prefixes(mem, doc["space"], [(q["question"], q["now"]) for q in doc["questions"]])


def test_search_top_k_is_a_prefix_on_a_locomo_conversation(minilm, tmp_path, locomo_dev):
    conv = next(iter(read_locomo(locomo_dev)))
    sessions = {t["session_id"] for t in conv.turns}
    first = sorted(sessions, key=lambda s: int(s.rsplit("_", 1)[-1]) if s.rsplit("_", 1)[-1].isdigit() else 0)[:4]
    turns = [t for t in conv.turns if t["session_id"] in first]
    with Memory(tmp_path / "s", Config(), text_encoder=minilm) as mem:
        for _, session in groupby(turns, key=lambda t: t["session_id"]):
            mem.add(list(session), space=conv.space)
        qs = [(q["question"], turns[-1]["timestamp"]) for q in conv.questions[:6]]
        _assert_prefixes(mem, conv.space, qs)


@pytest.mark.parametrize("fusion", ["score", "rrf"])
def test_prefix_holds_when_the_fallback_fires(minilm, tmp_path, fusion):
    """The fallback decides and fuses on the whole routed list, before the cut."""
    doc = json.loads(resources.files("etamem.data").joinpath("demo_conversation.json").read_text(encoding="utf-8"))
    cfg = Config(fallback_threshold=2.0, fallback_fusion=fusion)  # always fuse
    with Memory(tmp_path / "s", cfg, text_encoder=minilm) as mem:
        mem.add(doc["turns"], space=doc["space"])
        res = mem.retrieve(doc["questions"][0]["question"], doc["space"], top_k=12)
        assert res.fallback_used
        _assert_prefixes(mem, doc["space"], [(q["question"], q["now"]) for q in doc["questions"][:2]])


def _turns():
    t0 = datetime(2024, 3, 1, 10, tzinfo=timezone.utc)
    texts = ["I adopted a cat last week.", "What is her name?", "Her name is Pixel.", "Cute!",
             "We went hiking on Sunday.", "Where did you go?", "Up the ridge trail near the lake."]
    out = []
    for i, text in enumerate(texts):
        session = "s1" if i < 4 else "s2"
        out.append(Turn(turn_id=f"t{i}", space="x", session_id=session, speaker="Ana" if i % 2 == 0 else "Ben",
                        text=text, timestamp=t0 + timedelta(minutes=i)))
    return out


def test_turn_context_equals_brute_force(hashing_encoder):
    turns = _turns()
    vecs = hashing_encoder.encode([turn_text(t) for t in turns])
    index = TurnIndex(vecs.shape[1], turns, vecs)
    index.remove(["t5"])  # a deleted turn is nobody's neighbour
    live = [t for t in turns if t.turn_id != "t5"]
    query = "what is the cat's name"
    q = hashing_encoder.encode([query])[0]
    prev, after, lex_prev = 0.4, 0.2, 0.3
    dense, lexical = index.context([t.turn_id for t in turns], q, index.query_ids(query), prev=prev, after=after,
                                   lexical_prev=lex_prev)
    bm_all = index.index.bm25_scores(query)
    cos = {t.turn_id: float(v @ q) for t, v in zip(turns, vecs) if t.turn_id != "t5"}
    bm = {t.turn_id: float(bm_all[index.slot_of[t.turn_id]]) for t in live}
    for i, t in enumerate(turns):
        if t.turn_id == "t5":
            assert dense[i] == 0 and lexical[i] == 0
            continue
        same = [u for u in live if u.session_id == t.session_id]
        j = same.index(t)
        before = same[j - 1].turn_id if j > 0 else None
        later = same[j + 1].turn_id if j + 1 < len(same) else None
        want_d = cos[t.turn_id] + prev * cos.get(before, 0.0) + after * cos.get(later, 0.0)
        want_l = bm[t.turn_id] + lex_prev * bm.get(before, 0.0)
        assert dense[i] == pytest.approx(want_d, abs=1e-5), t.turn_id
        assert lexical[i] == pytest.approx(want_l, abs=1e-5), t.turn_id
    assert index.neighbour("t4", -1) is None and index.neighbour("t3", 1) is None  # sessions do not mix
    assert index.neighbour("t4", 1) == "t6"  # t5 was removed


def test_turn_order_survives_save_and_load(hashing_encoder, tmp_path):
    turns = _turns()
    vecs = hashing_encoder.encode([turn_text(t) for t in turns])
    index = TurnIndex(vecs.shape[1], turns[::-1], vecs[::-1])  # arrival order reversed, times decide
    assert index.neighbour("t1", -1) == "t0" and index.neighbour("t1", 1) == "t2"
    index.save(tmp_path)
    loaded = TurnIndex.load(tmp_path, turns[::-1])
    assert all(loaded.neighbour(t.turn_id, s) == index.neighbour(t.turn_id, s) for t in turns for s in (-1, 1))


def test_contextual_score_formula():
    rng = np.random.default_rng(0)
    cos, bm = rng.random(9).astype(np.float32), rng.random(9).astype(np.float32) * 5
    ctx_cos, ctx_bm = rng.random(9).astype(np.float32), rng.random(9).astype(np.float32) * 7
    ids = [f"a{i}" for i in range(9)]
    score, own = contextual(cos, bm, ids, lambda got: (ctx_cos, ctx_bm) if got == ids else None, 0.3, 0.2)
    want = 0.8 * (0.7 * cos + 0.3 * ctx_cos) + 0.2 * (0.7 * minmax(bm) + 0.3 * minmax(ctx_bm))
    np.testing.assert_allclose(score, want, rtol=1e-6)
    np.testing.assert_allclose(own, minmax(bm))
    for share, ctx in ((0.0, lambda got: (ctx_cos, ctx_bm)), (0.3, None)):
        plain = contextual(cos, bm, ids, ctx, share, 0.2)[0]
        np.testing.assert_allclose(plain, hybrid(cos, bm, 0.2)[0])



def test_demo_questions_find_their_evidence_first(minilm, tmp_path):
    """What a new user sees first: every demo question's first hit comes from a turn that holds
    its answer (the JSON names those turns), and the cat's name is in the first hit's turn."""
    doc = json.loads(resources.files("etamem.data").joinpath("demo_conversation.json").read_text(encoding="utf-8"))
    with Memory(tmp_path / "s", Config(top_k=10), text_encoder=minilm) as mem:
        for _, session in groupby(doc["turns"], key=lambda t: t["session_id"]):
            mem.add(list(session), space=doc["space"])
        text = {t["turn_id"]: t["text"] for t in doc["turns"]}
        for q in doc["questions"]:
            first = mem.answer(q["question"], space=doc["space"], now=q["now"]).hits[0]
            assert first.source_turn_ids[0] in q["evidence"], (q["question"], first.source_turn_ids)
        cat = mem.search(doc["questions"][0]["question"], doc["space"], now=doc["questions"][0]["now"])[0]
        assert "Pixel" in text[cat.source_turn_ids[0]] and "Pixel" in cat.amu.text


def test_turn_neighbours_follow_random_adds_removes_and_rewrites(hashing_encoder, tmp_path):
    """The session links the context scoring reads (`TurnIndex.links`, kept up to date by each add
    and remove) equal the neighbours of a brute-force sort of the live turns by (time, arrival),
    after interleaved adds, deletions and rewrites that keep their arrival rank, after save/load
    (from the saved links, and sorted again without them), and after writes that follow a load."""
    rng = np.random.default_rng(7)
    t0 = datetime(2024, 3, 1, 10, tzinfo=timezone.utc)
    index, live, arrival, made = None, {}, {}, 0
    for step in range(40):
        new = []
        for _ in range(int(rng.integers(1, 6))):
            new.append(Turn(turn_id=f"t{made}", space="x", session_id=f"s{int(rng.integers(3))}", speaker="Ana",
                            text=f"turn {made} about {int(rng.integers(50))}",
                            timestamp=t0 + timedelta(minutes=int(rng.integers(20)))))  # ties: arrival decides
            made += 1
        if live and step % 3 == 2:  # a rewrite: removed, then added again with its old arrival rank
            old = live[sorted(live)[int(rng.integers(len(live)))]]
            new.append(Turn(turn_id=old.turn_id, space="x", session_id=old.session_id, speaker="Ana",
                            text=old.text + " (edited)", timestamp=old.timestamp + timedelta(minutes=7)))
            index.remove([old.turn_id], keep_rank=True)
        vecs = hashing_encoder.encode([turn_text(t) for t in new])
        if index is None:
            index = TurnIndex(vecs.shape[1], new, vecs)
        else:
            index.add(new, vecs)
        for t in new:
            live[t.turn_id] = t
            arrival.setdefault(t.turn_id, len(arrival))
        if step % 4 == 3:  # deletions
            gone = [sorted(live)[int(i)] for i in rng.choice(len(live), 2, replace=False)]
            index.remove(gone)
            for t in gone:
                live.pop(t)
                arrival.pop(t)

    def expected():
        out = {}
        for s in {t.session_id for t in live.values()}:
            order = sorted((t for t in live.values() if t.session_id == s),
                           key=lambda t: (t.timestamp, arrival[t.turn_id], t.turn_id))
            for j, t in enumerate(order):
                out[t.turn_id] = (order[j - 1].turn_id if j else None,
                                  order[j + 1].turn_id if j + 1 < len(order) else None)
        return out

    want = expected()
    assert {t: (index.neighbour(t, -1), index.neighbour(t, 1)) for t in live} == want
    assert index.neighbour("no-such-turn", 1) is None
    index.save(tmp_path)
    turns = sorted(live.values(), key=lambda t: arrival[t.turn_id])  # the store gives turns in arrival order
    loaded = TurnIndex.load(tmp_path, turns)  # the saved links: no sort until the first write
    assert {t: (loaded.neighbour(t, -1), loaded.neighbour(t, 1)) for t in live} == want
    good = np.load(tmp_path / "links.npy")
    np.save(tmp_path / "links.npy", good[::-1].copy())  # links that do not answer each other: not used
    assert {t: (n.neighbour(t, -1), n.neighbour(t, 1)) for n in [TurnIndex.load(tmp_path, turns)] for t in live} == want
    (tmp_path / "links.npy").unlink()  # files of the previous version: sorted again on load
    assert {t: (n.neighbour(t, -1), n.neighbour(t, 1)) for n in [TurnIndex.load(tmp_path, turns)] for t in live} == want
    # writes after a load from saved links: the order they need is built then
    extra = Turn(turn_id="late", space="x", session_id="s1", speaker="Ben", text="a late turn",
                 timestamp=t0 + timedelta(minutes=5))
    gone = sorted(live)[0]
    for ix in (index, loaded):
        ix.add([extra], hashing_encoder.encode([turn_text(extra)]))
        ix.remove([gone])
    live["late"] = extra
    arrival["late"] = max(arrival.values()) + 1
    live.pop(gone)
    want = expected()
    assert {t: (loaded.neighbour(t, -1), loaded.neighbour(t, 1)) for t in live} == want
    assert {t: (index.neighbour(t, -1), index.neighbour(t, 1)) for t in live} == want
