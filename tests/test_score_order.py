"""`Hit.score` follows the ranking (issue 49, item 4; docs/concepts.md, 'Scores'): over many random
searches of spaces whose facts change, no hit scores more than a hit ranked above it, the method's own
score stays in `Hit.similarity`, and a `score > x` filter keeps the current fact whenever it keeps the
stale one. Real MiniLM, real store, both methods."""
import random
from datetime import datetime, timedelta, timezone

import pytest

from etamem import Config, Memory
from etamem.facts.current_first import linked_order, recency_order
from etamem.fta.search import place_neighbours
from etamem.models.affect import VaderAffectTagger
from etamem.models.encoders import CachedEncoder
from etamem.records import AMU, Hit
from etamem.retrieval.rank_scores import in_rank_order, rank_scores, with_similarity

T0 = datetime(2024, 3, 1, 9, tzinfo=timezone.utc)
CHANGES = [  # (old, new): the new statement replaces the old one
    ("I work at Acme as an engineer.", "I just started at Globex, new job!"),
    ("I live in Chicago, in a small apartment near the lake.", "I moved to Milwaukee last month."),
    ("I'm pescatarian, I eat fish but no meat.", "I'm vegan now, no more fish."),
    ("I work night shifts at the hospital.", "I switched to day shifts, no more nights."),
    ("My manager is Laura, she is very strict.", "We have a new manager, Tom."),
    ("My budget for the trip is $2000.", "My budget is now $3500."),
    ("I drive a Prius.", "I drive a Tesla now."),
    ("My rent is $1,800.", "My rent is $2,100."),
]
FILLER = ["My sister Ana loves hiking in the Alps.", "We watched a documentary about octopuses yesterday.",
          "I felt really anxious before the exam.", "The new bakery downtown makes great croissants.",
          "My cat Pixel knocked a glass off the table.", "I'm reading a novel about a lighthouse keeper.",
          "Our team won the office quiz on Friday.", "I can't stand loud restaurants."]
WORDS = sorted({w.strip(".,!$'").lower() for t in [*FILLER, *(s for p in CHANGES for s in p)] for w in t.split()}
               - {"", "i", "i'm", "a", "the", "at", "in", "is", "my", "no", "we", "to"})
FRAMES = ["Where {}?", "What about {} now?", "What did I say about {} before?", "Tell me about {} and {}",
          "{} {} {}", "Do I still {}?", "What is my {} these days?", "How was {} in 2023?"]


def _memory(minilm, **cfg) -> Memory:
    return Memory(None, Config.from_dict(cfg), text_encoder=CachedEncoder(minilm),
                  affect_tagger=VaderAffectTagger(minilm))


def _said(texts, day: int, first: int) -> list[dict]:
    return [{"role": "user", "content": t, "id": f"m{first + i}",
             "timestamp": (T0 + timedelta(days=day, minutes=i)).isoformat()} for i, t in enumerate(texts)]


def _queries(seed: int, n: int) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        frame = rng.choice(FRAMES)
        out.append((frame.format(*rng.sample(WORDS, frame.count("{}"))), rng.randint(1, 12)))
    return out


@pytest.fixture(scope="module")
def changed(minilm):
    """Facts said, then changed 30 days later, among filler (the default method)."""
    mem = _memory(minilm)
    mem.add(_said([o for o, _ in CHANGES] + FILLER[:4], 0, 0), space="u")
    mem.add(_said([n for _, n in CHANGES] + FILLER[4:], 30, 100), space="u")
    yield mem
    mem.close()


def test_the_issue_case_the_current_job_scores_at_least_as_the_superseded_one(changed):
    hits = changed.search("Where does the user work?", "u", top_k=5)
    texts = [h.amu.text for h in hits]
    globex, acme = (next(h for h in hits if word in h.amu.text) for word in ("Globex", "Acme"))
    assert texts.index(globex.amu.text) < texts.index(acme.amu.text) and acme.superseded_by
    assert in_rank_order(hits), [(h.score, h.amu.text) for h in hits]
    assert globex.score >= acme.score  # a `score > x` filter that keeps Acme keeps Globex
    assert acme.similarity == acme.score  # nothing moved it: its score is its match
    assert globex.similarity is not None and globex.similarity < globex.score  # moved up: its own match kept


def test_scores_never_increase_down_the_ranking_over_many_random_searches(changed):
    """60 random queries, each searched with top_k 12 and a random smaller k (the query's vector is
    cached: a second search of it costs no encoding): no search out of order, and the shorter one
    scores as the prefix of the longer."""
    broken, searches, unlike = [], 0, []
    for query, k in _queries(49, 60):
        full = changed.search(query, "u", top_k=12)
        short = changed.search(query, "u", top_k=k)
        for hits in (full, short):
            searches += 1
            if not in_rank_order(hits):
                broken.append((query, [(round(h.score, 3), h.amu.text[:30]) for h in hits]))
            assert all(h.similarity is not None or h.views == ("current",) for h in hits)
        if [(h.amu.amu_id, h.score) for h in short] != [(h.amu.amu_id, h.score) for h in full[:k]]:
            unlike.append((query, k))
    assert not broken, f"{len(broken)} of {searches} searches out of order, e.g. {broken[:2]}"
    assert not unlike, f"a shorter search is not the prefix of the longer one: {unlike[:3]}"


def test_fta_scores_never_increase_with_neighbours_and_lifecycle_order(minilm):
    mem = Memory(None, {"method": "fta", "fta_window": 6, "fta_tau": -1.0}, text_encoder=CachedEncoder(minilm),
                 affect_tagger=VaderAffectTagger(minilm))
    mem.add(_said([o for o, _ in CHANGES] + FILLER[:4], 0, 0), space="f")
    mem.end_session("f")
    mem.add(_said([n for _, n in CHANGES] + FILLER[4:], 30, 100), space="f")
    mem.end_session("f")
    broken, searches = 0, _queries(11, 40)
    for query, k in searches:
        broken += not in_rank_order(mem.search(query, "f", top_k=k))
    mem.close()
    assert broken == 0, f"{broken} of {len(searches)} FTA searches out of order"


# --- the rule, on its own ----------------------------------------------------------------------------
def _hit(uid: str, score: float, ts: int = 0, views=("event",)) -> Hit:
    amu = AMU(amu_id=uid, text=f"The user likes {uid}.", speaker="user", timestamp=T0 + timedelta(days=ts),
              session_id="s", source_turn_ids=(uid,))
    return Hit(amu, score, views, amu.source_turn_ids)


def test_rank_scores_caps_each_score_by_the_ones_above_and_keeps_the_similarity():
    hits = with_similarity([_hit("a", 0.9), _hit("b", 0.4), _hit("c", 0.7), _hit("d", 0.3)])
    out = rank_scores(hits)
    assert [h.score for h in out] == [0.9, 0.4, 0.4, 0.3]
    assert [h.similarity for h in out] == [0.9, 0.4, 0.7, 0.3]
    assert rank_scores(out) == out and in_rank_order(out)


def test_a_current_version_moved_up_takes_the_score_of_the_version_it_precedes():
    old, new, other = _hit("old", 0.8), _hit("new", 0.5, ts=30), _hit("other", 0.6)
    units = {h.amu.amu_id: h.amu for h in (old, new, other)}
    out = linked_order(with_similarity([old, other, new]), {"old": ["new"]}, units)
    assert [h.amu.amu_id for h in out] == ["new", "old", "other"]
    assert [(h.score, h.similarity) for h in out] == [(0.8, 0.5), (0.8, 0.8), (0.6, 0.6)]
    brought = linked_order(with_similarity([old, other]), {"old": ["new"]}, units)  # not found: brought in
    assert [(h.amu.amu_id, h.score, h.similarity) for h in brought] == [("new", 0.8, None), ("old", 0.8, 0.8)]


def test_recency_order_keeps_each_slots_score():
    early = AMU(amu_id="e", text="The user lives in Denver.", speaker="user", timestamp=T0, session_id="s",
                source_turn_ids=("e",))
    late = AMU(amu_id="l", text="The user lives in Austin.", speaker="user", timestamp=T0 + timedelta(days=9),
               session_id="s", source_turn_ids=("l",))
    hits = with_similarity([Hit(early, 0.9, ("event",), ("e",)), _hit("x", 0.8), Hit(late, 0.7, ("event",), ("l",))])
    out = recency_order(hits, 10)
    assert [h.amu.amu_id for h in out] == ["l", "x", "e"]
    assert [(h.score, h.similarity) for h in out] == [(0.9, 0.7), (0.8, 0.8), (0.7, 0.9)]


def test_an_fta_neighbour_ranks_and_scores_as_the_hit_it_follows():
    hits = [_hit("a", 0.9, views=("fta",)), _hit("b", 0.8, views=("fta",))]
    amus = {u: _hit(u, 0.0).amu for u in "abx"}
    after = place_neighbours(hits, {"a": "x"}, amus, None)
    assert [(h.amu.amu_id, h.score, h.similarity) for h in after] == [("a", 0.9, None), ("x", 0.9, 0.0),
                                                                      ("b", 0.8, None)]
    appended = place_neighbours(hits, {"a": "x"}, amus, None, "appended")
    assert [h.score for h in appended] == [0.9, 0.8, 0.8]
