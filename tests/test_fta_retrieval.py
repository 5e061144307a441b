"""FTA-Mem retrieval: query features, the cue score, ranking, neighbours, lifecycle order and
chronology (etamem/fta/retrieval.py)."""
from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from etamem.fta.retrieval import (
    QueryFeatures,
    Scored,
    affect_component,
    chronological,
    content_type_component,
    cue_components,
    cue_score,
    expand_neighbours,
    lifecycle_order,
    participants_component,
    query_features,
    query_names,
    question_form,
    rank,
    time_component,
)
from etamem.fta.rules import CONTENT_TYPES
from etamem.fta.units import AffectAnchor, EvidenceSpan, FactAnchor, FTAUnit, TimeAnchor
from etamem.retrieval.temporal import parse_time_window

T0 = datetime(2023, 5, 8, 18, 0, tzinfo=timezone.utc)  # a Monday; "last week" = 1-7 May 2023
DAY = timedelta(days=1)
KNOWN = ("Caroline", "Melanie", "Carol")


def unit(text="Caroline went to the support group.", *, ctype="event", participants=("Caroline",),
         speaker="Caroline", said=T0, event=None, orientation="past", label="neutral", emotions=(),
         intention="", status="final", uid="u1", session="s1", turns=("s1:0",)) -> FTAUnit:
    start, end = event if event is not None else (None, None)
    scores = {"negative": (0.8, 0.2, 0.0), "neutral": (0.0, 1.0, 0.0), "positive": (0.0, 0.2, 0.8)}[label]
    return FTAUnit(
        fact=FactAnchor(text, ctype, tuple(participants), text),
        time=TimeAnchor(said, orientation, start, end, "last week" if event else ""),
        affect=AffectAnchor(label, scores, abs(scores[2] - scores[0]), tuple(emotions), intention),
        evidence=(EvidenceSpan(session, tuple(turns), said, said),), speaker=speaker, status=status, unit_id=uid)


def day(d: int) -> tuple[datetime, datetime]:
    start = datetime(2023, 5, d, tzinfo=timezone.utc)
    return start, start + DAY


# --- query features --------------------------------------------------------------------------
def test_query_features_read_window_names_form_and_keep_the_given_polarity():
    f = query_features("When did Caroline go to the support group last week?", T0, KNOWN)
    assert f.window is not None and f.window.kind == "relative"
    assert (f.window.start, f.window.end) == (datetime(2023, 5, 1, tzinfo=timezone.utc), day(8)[0])
    assert f.names == ("Caroline",) and f.question_type == "when" and f.polarity is None
    f = query_features("How did melanie feel about Caroline's painting?", T0, KNOWN, polarity="positive")
    assert f.names == ("Melanie", "Caroline") and f.question_type == "feel" and f.polarity == "positive"
    assert f.window is None
    assert query_names("Did Carolina call Carol-Ann?", KNOWN) == ()  # whole words only
    assert query_names("Ask CAROL.", KNOWN) == ("Carol",)
    assert question_form("Why did Melanie start running?") == "why"
    assert question_form("What made Caroline change careers?") == "why"
    assert question_form("What is Melanie planning for the summer?") == "plan"
    assert question_form("What is Melanie's favourite book?") == "preference"
    assert question_form("What did they talk about?") is None
    with pytest.raises(ValueError, match="polarity"):
        query_features("x", T0, KNOWN, polarity="happy")


# --- cue components --------------------------------------------------------------------------
def test_time_cue_is_one_inside_the_window_and_decays_with_days_outside():
    window = parse_time_window("last week", T0)  # [1 May, 8 May): 7 days, half-life 7 days
    assert time_component(window, unit(event=day(3))) == 1.0
    assert time_component(window, unit(said=datetime(2023, 5, 4, 9, tzinfo=timezone.utc))) == 1.0  # no event
    # an event window overlapping the query window counts as inside
    assert time_component(window, unit(event=(day(7)[0], day(12)[0]))) == 1.0
    # event on 10 May (middle: 10 May 12:00) is 2.5 days after the window
    assert time_component(window, unit(event=day(10))) == pytest.approx(0.5 ** (2.5 / 7))
    near = time_component(window, unit(said=day(9)[0]))
    far = time_component(window, unit(said=day(29)[0]))
    assert 1.0 > near > far > 0.0
    # the event time wins over the dialogue time
    assert time_component(window, unit(said=day(29)[0], event=day(2))) == 1.0
    # a one-day window forgives less: the half-life is one day (7 May 12:00 is 1.5 days after 5 May)
    assert time_component(parse_time_window("on 5 May 2023", T0), unit(event=day(7))) == pytest.approx(0.5 ** 1.5)
    # no window, or an order word that locates nothing: not applicable
    assert time_component(None, unit()) is None
    assert time_component(parse_time_window("the latest trip", T0), unit()) is None


def test_participant_cue_is_the_share_of_named_people_in_the_unit():
    both = unit(participants=("Caroline", "Melanie"))
    assert participants_component(("Caroline",), both) == 1.0
    assert participants_component(("Caroline",), unit(participants=("Melanie",), speaker="Melanie")) == 0.0
    assert participants_component(("Caroline", "Melanie"), unit()) == 0.5
    assert participants_component(("caroline",), unit(participants=(), speaker="Caroline")) == 1.0  # the speaker
    assert participants_component((), both) is None


def test_content_type_cue_follows_the_question_form():
    assert content_type_component("when", unit(ctype="event", event=day(3))) == 1.0
    assert content_type_component("when", unit(ctype="event")) == 0.5          # no event time
    assert content_type_component("when", unit(ctype="current_state", event=day(3))) == 0.5
    assert content_type_component("when", unit(ctype="current_state")) == 0.0
    sad = unit(ctype="current_state", label="negative", emotions=("sad",))
    assert content_type_component("feel", sad) == 1.0
    assert content_type_component("feel", unit(ctype="event")) == 0.0
    reason = unit("Melanie runs because it helps her think.", ctype="belief_candidate")
    assert content_type_component("why", reason) == 1.0
    assert content_type_component("plan", unit(ctype="homework_or_plan", orientation="future")) == 1.0
    assert content_type_component("preference", unit("Melanie loves hiking.", ctype="belief_candidate")) == 1.0
    assert content_type_component(None, sad) is None


def test_affect_cue_compares_the_query_polarity_with_the_unit_label():
    assert affect_component("positive", unit(label="positive")) == 1.0
    assert affect_component("positive", unit(label="neutral")) == 0.5
    assert affect_component("positive", unit(label="negative")) == 0.0
    assert affect_component("negative", unit(label="neutral", emotions=("sad",)), "When was Melanie sad?") == 1.0
    assert affect_component("neutral", unit(label="positive")) is None
    assert affect_component(None, unit(label="positive")) is None


def test_cue_score_is_the_mean_of_the_components_that_apply():
    q = "When did Caroline go to the support group last week?"
    f = query_features(q, T0, KNOWN)
    kw = dict(window=f.window, names=f.names, question_type=f.question_type, polarity=f.polarity)
    hit = unit(event=day(3))
    assert cue_components(q, hit, **kw) == {"time": 1.0, "participants": 1.0, "content_type": 1.0}
    assert cue_score(q, hit, **kw) == 1.0
    other = unit("Melanie is tired.", ctype="current_state", participants=("Melanie",), speaker="Melanie",
                 said=day(29)[0], orientation="present")
    parts = cue_components(q, other, **kw)
    assert parts["participants"] == 0.0 and parts["content_type"] == 0.0
    assert cue_score(q, other, **kw) == pytest.approx(parts["time"] / 3)
    assert cue_score("What did they talk about?", hit, window=None, names=(), question_type=None,
                     polarity="neutral") is None


# --- ranking ---------------------------------------------------------------------------------
def brute_rank(q, vecs, units, f: QueryFeatures, lam, tau, k, cue, lexical=None, beta=0.0):
    """Reference: loops, float64 sums, one cue per unit, BM25 divided by its maximum."""
    rows = []
    top = float(max(lexical)) if lexical is not None and beta > 0 else 0.0
    for i, u in enumerate(units):
        cos = math.fsum(float(a) * float(b) for a, b in zip(vecs[i], q))
        c = cue_score(f.text, u, window=f.window, names=f.names, question_type=f.question_type,
                      polarity=f.polarity) if cue else None
        r = cos if c is None else lam * cos + (1 - lam) * c
        if top > 0:
            r = (1 - beta) * r + beta * float(lexical[i]) / top
        if r >= tau:
            rows.append((-r, i, cos, c))
    rows.sort()
    return [(i, -neg, cos, c) for neg, i, cos, c in rows[:k]]


def random_units(rng, n):
    names = ("Caroline", "Melanie", "Jon")
    out = []
    for i in range(n):
        said = T0 - DAY * int(rng.integers(0, 60))
        event = day(int(rng.integers(1, 20))) if rng.random() < 0.4 else None
        who = tuple(rng.choice(names, size=int(rng.integers(1, 3)), replace=False))
        emotions = ("sad",) if rng.random() < 0.2 else ()
        out.append(unit(f"unit {i}", ctype=str(rng.choice(CONTENT_TYPES)), participants=who, speaker=who[0],
                        said=said, event=event, label=str(rng.choice(["negative", "neutral", "positive"])),
                        emotions=emotions, uid=f"u{i}"))
    return out


def test_rank_matches_the_brute_force_reference_on_random_data():
    rng = np.random.default_rng(7)
    n, d = 240, 24
    vecs = rng.standard_normal((n, d)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    units = random_units(rng, n)
    people = ("Caroline", "Melanie", "Jon")
    queries = [
        query_features("When did Caroline feel sad last week?", T0, people, polarity="negative"),
        query_features("What did Melanie and Jon do on 5 May 2023?", T0, people),
        query_features("What did they talk about?", T0, ("Caroline",)),  # no cue applies: R = cos
    ]
    filtered = full = 0
    lexical = np.where(rng.random(n) < 0.3, rng.gamma(2.0, 3.0, n), 0.0).astype(np.float32)  # sparse BM25
    for qi, f in enumerate(queries):
        q = (vecs[qi * 3] + 0.8 * rng.standard_normal(d)).astype(np.float32)
        q /= np.linalg.norm(q)
        for lam, tau, k, cue, beta in [(0.8, 0.35, 10, True, 0.0), (0.5, 0.1, 25, True, 0.0),
                                       (0.8, 0.0, 300, True, 0.0), (0.8, 0.35, 10, False, 0.0),
                                       (1.0, 0.2, 7, True, 0.0), (0.0, 0.5, 40, True, 0.0),
                                       (0.8, 0.35, 10, True, 0.1), (0.8, 0.2, 30, True, 0.5),
                                       (0.8, 0.3, 20, False, 0.2), (0.5, 0.0, 300, True, 1.0)]:
            got = rank(q, vecs, units, f, lam=lam, tau=tau, k=k, cue=cue, lexical=lexical, beta=beta)
            want = brute_rank(q, vecs, units, f, lam, tau, k, cue, lexical, beta)
            assert [s.index for s in got] == [w[0] for w in want], (qi, lam, tau, k, cue, beta)
            for s, (_, r, cos, c) in zip(got, want):
                assert s.score == pytest.approx(r, abs=1e-9) and s.cos == pytest.approx(cos, abs=1e-9)
                assert (s.cue is None) == (c is None) and (c is None or s.cue == pytest.approx(c))
            filtered += len(want) < min(k, n)
            full += len(want) == k
    assert filtered and full  # the settings exercise both the tau filter and the k cut


def test_tau_filters_on_the_combined_score_and_ties_go_to_the_lower_index():
    f = query_features("When did Caroline go to the support group last week?", T0, KNOWN)
    good = unit(event=day(3))                                                        # cue 1
    bad = unit("Melanie is tired.", ctype="current_state", participants=("Melanie",), speaker="Melanie",
               said=day(29)[0], orientation="present")                               # cue ~0
    assert cue_score(f.text, bad, window=f.window, names=f.names, question_type=f.question_type,
                     polarity=None) < 0.05
    d = 4
    e = np.eye(d, dtype=np.float32)
    q = e[0]

    def row(cos):
        v = cos * e[0] + math.sqrt(1 - cos * cos) * e[1]
        return v.astype(np.float32)

    vecs = np.stack([row(0.3), row(0.4), row(0.9), row(0.3)])
    units = [good, bad, bad, good]
    got = rank(q, vecs, units, f)  # R: 0.44, ~0.32, ~0.72, 0.44
    assert [s.index for s in got] == [2, 0, 3]
    assert got[1].score == pytest.approx(0.8 * 0.3 + 0.2) and got[1].cos == pytest.approx(0.3) and got[1].cue == 1.0
    assert [s.index for s in rank(q, vecs, units, f, k=2)] == [2, 0]
    # cosine only (the ablation): R = cos, no cue; 0.3 < tau
    plain = rank(q, vecs, units, f, cue=False)
    assert plain == [Scored(2, pytest.approx(0.9), pytest.approx(0.9), None),
                     Scored(1, pytest.approx(0.4), pytest.approx(0.4), None)]
    assert rank(q, vecs, units, f, tau=0.95) == [] and rank(q, vecs, units, f, k=0) == []
    # the lexical term: S = 0.9 R + 0.1 BM25 / max; a strong BM25 match lifts row 3 above row 0
    mixed = rank(q, vecs, units, f, lexical=np.array([0.0, 0.0, 1.0, 4.0]), beta=0.1)
    assert [s.index for s in mixed] == [2, 3, 0]
    assert mixed[1].score == pytest.approx(0.9 * 0.44 + 0.1) and mixed[1].lexical == 1.0
    assert mixed[0].score == pytest.approx(0.9 * got[0].score + 0.1 * 0.25)
    assert rank(q, vecs, units, f, lexical=np.zeros(4), beta=0.1)[0].score == pytest.approx(0.9 * got[0].score)


def test_rank_checks_shapes():
    f = QueryFeatures("x")
    vecs = np.eye(3, dtype=np.float32)
    with pytest.raises(ValueError, match="units"):
        rank(vecs[0], vecs, [unit()], f)
    with pytest.raises(ValueError, match="shape"):
        rank(vecs[0][:2], vecs, [unit()] * 3, f)
    with pytest.raises(ValueError, match="lam"):
        rank(vecs[0], vecs, [unit()] * 3, f, lam=1.5)
    with pytest.raises(ValueError, match="beta"):
        rank(vecs[0], vecs, [unit()] * 3, f, beta=-0.1)
    with pytest.raises(ValueError, match="lexical scores"):
        rank(vecs[0], vecs, [unit()] * 3, f, lexical=np.ones(2), beta=0.1)
    assert rank(np.zeros(3, np.float32), np.zeros((0, 3), np.float32), [], f) == []


# --- neighbours, lifecycle, chronology ------------------------------------------------------
def test_expand_neighbours_picks_one_unused_neighbour_per_hit():
    links = {
        "a": [("b", "updates", 1.0),           # b is a hit itself
              ("s", "supports", 0.9), ("y", "updated_by", 0.9)],  # tie: an update beats support
        "b": [("y", "same_episode_as", 0.95),  # y already chosen for a
              ("z", "followup_of", 0.5)],
        "c": [("w", "supports", 0.6), ("v", "supports", 0.6)],  # full tie: the smaller id
        "d": [("q", "updates", 1.0)],           # excluded by the caller
        "e": [("m", "supports", 0.8), ("n", "updates", 0.7)],   # confidence before relation
        "f": [("x1", "contradicted_by", 0.5), ("x2", "followed_up_by", 0.5), ("x3", "mystery", 0.9)],
    }
    got = expand_neighbours(["a", "b", "c", "d", "e", "f", "g"], links, exclude={"q"})
    assert got == {"a": "y", "b": "z", "c": "v", "e": "m", "f": "x3"}
    assert expand_neighbours(["f"], {"f": links["f"][:2]}, exclude=set()) == {"f": "x1"}
    assert expand_neighbours([], links, exclude=set()) == {}


def test_lifecycle_order_puts_replaced_units_right_after_their_replacement():
    status = {"old": "superseded", "gone": "contradicted", "x": "final", "new": "final"}
    newer = {"old": "new", "gone": "absent"}
    assert lifecycle_order(["old", "x", "new", "gone"], status, newer) == ["x", "new", "old", "gone"]
    # chains nest; several older versions keep their rank order
    status = {"a": "superseded", "b": "superseded", "c": "final", "a2": "contradicted"}
    newer = {"a": "b", "b": "c", "a2": "c"}
    assert lifecycle_order(["a", "a2", "c", "b", "z"], status, newer) == ["c", "a2", "b", "a", "z"]
    assert lifecycle_order(["a", "b", "a2", "c"], status, newer) == ["c", "b", "a", "a2"]
    # a cycle of newer links loses nothing
    got = lifecycle_order(["p", "q", "r"], {"p": "superseded", "q": "superseded"}, {"p": "q", "q": "p"})
    assert sorted(got) == ["p", "q", "r"] and len(got) == 3
    # a final unit named in `newer` keeps its rank
    assert lifecycle_order(["k", "l"], {"k": "final"}, {"k": "l"}) == ["k", "l"]


def test_chronological_orders_by_dialogue_time_then_evidence_order():
    t = datetime(2023, 5, 8, tzinfo=timezone.utc)
    u10 = unit("ten", said=t, turns=("D1:10",), uid="u10")
    u9 = unit("nine", said=t, turns=("D1:9",), uid="u9")
    early = unit("early", said=t - DAY, turns=("D0:30",), uid="e")
    assert [u.unit_id for u in chronological([u10, u9, early, u10])] == ["e", "u9", "u10"]
