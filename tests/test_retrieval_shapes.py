"""Retrieval for data of other shapes than LoCoMo (docs/benchmarks.md, 'Beyond LoCoMo'): exact
candidates beside the beams, the turn context as a mean, units of long turns scored as their
turn, BM25 as a share of its ceiling; each against a brute-force formula."""
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from etamem import Memory
from etamem.config import Config
from etamem.models.affect import VaderAffectTagger
from etamem.models.encoders import CachedEncoder
from etamem.records import Turn
from etamem.retrieval import LexicalIndex, SpaceIndex, TurnIndex
from etamem.retrieval.lexical import K1, share_of_ceiling
from etamem.retrieval.options import SearchOptions
from etamem.retrieval.space_search import turn_context
from helpers import unit
from test_retrieval import build_views

T0 = datetime(2024, 5, 1, 18, tzinfo=timezone.utc)


def test_exact_candidates_match_brute_force_and_skip_removed_units():
    views, amus, tv, av = build_views(n=150, seed=7)
    index = SpaceIndex(views, amus, tv, av)
    gone = [a.amu_id for a in amus[::7]]
    index.remove_amus(gone)
    q = unit(np.random.default_rng(1).standard_normal(16))
    got = index.exact_candidates(q, 12)
    live = [a for a in amus if a.amu_id not in set(gone)]
    cos = {a.amu_id: float(tv[int(a.amu_id[1:])] @ q) for a in live}
    want = sorted(cos, key=lambda a: (-cos[a], a))[:12]
    assert [s.key for s in got] == want
    np.testing.assert_allclose([s.score for s in got], [cos[a] for a in want], atol=1e-5)
    assert len(index.exact_candidates(q, 10_000)) == len(live) and index.exact_candidates(q, 0) == []


def test_flat_candidates_bring_back_what_a_narrow_beam_pruned():
    views, amus, tv, av = build_views(n=200, seed=5)
    index = SpaceIndex(views, amus, tv, av)
    rng = np.random.default_rng(11)
    missed = 0
    for _ in range(40):
        q = unit(rng.standard_normal(16))
        best = index.exact_candidates(q, 1)[0].key  # the unit nearest the query
        narrow = index.search("x", q, q, 5, SearchOptions(beam=1, beta=0.0, views=("event",)))
        if best in [r[0] for r in narrow.ranked]:
            continue
        missed += 1
        rescued = index.search("x", q, q, 5, SearchOptions(beam=1, beta=0.0, views=("event",), flat=5))
        ranked = {r[0]: r[2] for r in rescued.ranked}
        assert best in ranked and "flat" in ranked[best]
    assert missed  # the beam of width 1 did prune some nearest units (else the test shows nothing)


def make_turns(texts: list[tuple[str, str]]) -> list[Turn]:
    """(session, text) pairs as turns of speaker "u", one minute apart."""
    return [Turn(turn_id=f"t{i}", session_id=s, speaker="u", text=t, timestamp=T0 + timedelta(minutes=i))
            for i, (s, t) in enumerate(texts)]


def test_turn_context_counts_a_missing_neighbour_as_the_turn_itself():
    turns = make_turns([("a", "alone"), ("b", "first"), ("b", "middle"), ("b", "last")])
    vecs = unit(np.random.default_rng(2).standard_normal((4, 8))).astype(np.float32)
    index = TurnIndex(8, turns, vecs)
    q = unit(np.random.default_rng(3).standard_normal(8)).astype(np.float32)
    cos = vecs @ q
    ids = ["t0", "t1", "t2", "t3"]
    summed, _ = index.context(ids, q, np.zeros(0, np.int64), prev=0.4, after=0.2, lexical_prev=0.4)
    imputed, _ = index.context(ids, q, np.zeros(0, np.int64), prev=0.4, after=0.2, lexical_prev=0.4, impute=True)
    np.testing.assert_allclose(summed, [cos[0], cos[1] + 0.2 * cos[2], cos[2] + 0.4 * cos[1] + 0.2 * cos[3],
                                        cos[3] + 0.4 * cos[2]], atol=1e-6)
    np.testing.assert_allclose(imputed, [1.6 * cos[0], 1.4 * cos[1] + 0.2 * cos[2],
                                         cos[2] + 0.4 * cos[1] + 0.2 * cos[3], 1.2 * cos[3] + 0.4 * cos[2]],
                               atol=1e-6)
    index = TurnIndex(8, make_turns([("a", "alone words"), ("b", "first words"), ("b", "middle"), ("b", "last words")]),
                      vecs)
    qi = index.query_ids("words alone")
    _, own = index.context(ids, q, qi, prev=0.4, after=0.2, lexical_prev=0.0)  # each turn's own BM25
    _, imputed = index.context(ids, q, qi, prev=0.4, after=0.2, lexical_prev=0.4, impute=True)
    assert own[0] > 0 and own[1] > 0 and own[2] == 0
    np.testing.assert_allclose(imputed, [1.4 * own[0], 1.4 * own[1], own[2] + 0.4 * own[1], own[3] + 0.4 * own[2]],
                               rtol=1e-5)


def memory(path, enc, **cfg) -> Memory:
    enc = CachedEncoder(enc)
    return Memory(path, Config(**cfg), text_encoder=enc, affect_tagger=VaderAffectTagger(enc))


def test_units_of_long_turns_take_their_share_from_the_turn(tmp_path, hashing_encoder):
    long_reply = " ".join(f"Sentence {i} is about gardens and tomatoes and basil." for i in range(12))
    mem = memory(tmp_path / "m", hashing_encoder, long_turn_words=20, context_share=0.5)
    mem.add([{"turn_id": "t0", "session_id": "s", "speaker": "user", "text": "I grow tomatoes on my balcony.",
              "timestamp": T0.isoformat()},
             {"turn_id": "t1", "session_id": "s", "speaker": "assistant", "text": long_reply,
              "timestamp": (T0 + timedelta(minutes=1)).isoformat()}])
    live = mem.live_space("default")
    words = {"t0": 6, "t1": len(long_reply.split())}
    ctx = turn_context(live.index, live.turns, "tomatoes", mem.encode_query("tomatoes"), mem.config)
    ids = [a for a in live.index.ids if a is not None]
    shares = ctx.shares(ids, 0.5)
    want = [1 - 0.5 * min(1.0, 20 / words[live.index.amu_of[a].source_turn_ids[0]]) for a in ids]
    np.testing.assert_allclose(shares, want, atol=1e-6)
    assert {round(float(s), 3) for s in shares} == {0.5, round(1 - 0.5 * 20 / words["t1"], 3)}
    off = turn_context(live.index, live.turns, "tomatoes", mem.encode_query("tomatoes"),
                       mem.config.replace(long_turn_words=0))
    assert getattr(off, "shares", None) is None
    mem.close()


def test_bm25_ceiling_is_an_average_document_holding_the_query_once():
    docs = ["red apple pie", "green apple tart", "blue berry jam", "red berry tart"]  # all 3 tokens long
    lex = LexicalIndex(docs, stemmer="none")
    q = lex.query_ids("red apple")
    n = 4
    idf = lambda df: np.log1p((n - df + 0.5) / (df + 0.5))  # noqa: E731 - Lucene idf
    assert lex.ceiling(q) == pytest.approx((idf(2) + idf(2)) / (1 + K1))
    # every document has the average length: "red apple pie" holds both words once -> the ceiling
    raw = lex.scores_all(q)
    assert raw[0] == pytest.approx(lex.ceiling(q), rel=1e-5)
    share = share_of_ceiling(raw, lex.ceiling(q))
    np.testing.assert_allclose(share, [1.0, 0.5, 0.0, 0.5], atol=1e-5)
    assert lex.ceiling(lex.query_ids("zebra")) == 0.0
    assert share_of_ceiling(np.array([0.3, 0.0]), 0.0).tolist() == [0.0, 0.0]


def test_ceiling_norm_in_the_merge_matches_the_formula():
    views, amus, tv, av = build_views(seed=6)
    index = SpaceIndex(views, amus, tv, av)
    q = index.text_vecs[5]
    res = index.search("cat dog", q, index.affect_vecs[5], 20, SearchOptions(beam=10, beta=0.5, lexical="ceiling"))
    q_ids = index.amu_lex.query_ids("cat dog")
    ceiling = index.amu_lex.ceiling(q_ids)
    for key, score, _ in res.ranked:
        row = index.row_of[key]
        bm = float(index.amu_lex.scores_for([row], q_ids)[0])
        assert score == pytest.approx(0.5 * float(index.text_vecs[row] @ q) + 0.5 * min(1.0, bm / ceiling), abs=1e-5)
    with pytest.raises(ValueError, match="lexical"):
        index.search("cat", q, q, 5, SearchOptions(beam=10, beta=0.5, lexical="zscore"))


def test_turn_diverse_puts_repeats_of_a_turn_after_the_first_hits():
    from etamem.records import AMU, Hit
    from etamem.retrieval.space_search import turn_diverse

    def hit(i, turn):
        amu = AMU(amu_id=f"a{i}", text="x", speaker="u", timestamp=T0, session_id="s", source_turn_ids=(turn,))
        return Hit(amu=amu, score=1.0 - i / 10, views=("event",), source_turn_ids=(turn,))

    hits = [hit(0, "t1"), hit(1, "t1"), hit(2, "t2"), hit(3, "t1"), hit(4, "t3"), hit(5, "t2")]
    assert [h.amu.amu_id for h in turn_diverse(hits)] == ["a0", "a2", "a4", "a1", "a3", "a5"]


def test_a_page_of_hits_covers_distinct_turns(tmp_path, hashing_encoder):
    reply = " ".join(f"Tip {i}: water the tomato plants and the basil early." for i in range(15))
    turns = [{"turn_id": "t0", "session_id": "s", "speaker": "user", "text": "How do I keep my tomatoes alive?",
              "timestamp": T0.isoformat()},
             {"turn_id": "t1", "session_id": "s", "speaker": "assistant", "text": reply,
              "timestamp": (T0 + timedelta(minutes=1)).isoformat()},
             {"turn_id": "t2", "session_id": "s2", "speaker": "user", "text": "I grow tomatoes and basil on my balcony.",
              "timestamp": (T0 + timedelta(days=1)).isoformat()}]
    pages = {}
    for diverse in (True, False):
        with memory(tmp_path / f"m{diverse}", hashing_encoder, turn_diverse=diverse) as mem:
            mem.add(turns)
            pages[diverse] = [h.source_turn_ids[0] for h in mem.search("tomato plants basil", top_k=3)]
    assert len(set(pages[True])) == 3 and len(set(pages[False])) < 3


def test_flat_candidates_above_exact_max_come_from_the_best_leaves():
    views, amus, tv, av = build_views(n=200, seed=8)
    index = SpaceIndex(views, amus, tv, av)
    q = unit(np.random.default_rng(5).standard_normal(16))
    assert index.flat_candidates(q, 10, exact_max=10_000) == index.exact_candidates(q, 10)
    got = index.flat_candidates(q, 10, exact_max=0, leaves=3)
    # brute force: the members of the 3 best Event leaves and of the 3 best small sessions, by exact cosine
    tree, forest = views.event, views.time
    leaves = index.routing["event"].search(q, 3)[1]
    sessions = index.routing["time"].search(q, 3)[1]
    pool = {tree.amu_ids[r] for leaf in leaves for r in tree.members[int(leaf)]}
    pool |= {a for key in sessions if len(forest.nodes[key].members) <= 256 for a in forest.nodes[key].members}
    cos = {a: float(index.text_vecs[index.row_of[a]] @ q) for a in pool}
    want = sorted(cos, key=lambda a: (-cos[a], a))[:10]
    assert [s.key for s in got] == want
    assert len(pool) < len(amus)  # fewer units scored than the exact search scores
