"""Affect that counts in ranking: the merge's scoring modes (`Config.merge_scoring`,
etamem/retrieval/merge.py) against brute-force references, and their effect in `SpaceIndex`."""
from __future__ import annotations

import statistics
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from etamem.config import Config
from etamem.records import AMU
from etamem.retrieval import Scored, SpaceIndex
from etamem.retrieval.merge import calibrate, calibrated_views, check_scoring, fuse_views, hand_out, view_dense
from etamem.retrieval.options import SearchOptions
from etamem.views import SpaceViews
from helpers import unit

D = 16
BETA = 0.2


# --- pure functions against loops -------------------------------------------------------------
def ref_calibrate(sims, text, member):
    """mu_t + sd_t * (s - mu_v) / sd_v over the members, one unit at a time (population sd)."""
    idx = [i for i, m in enumerate(member) if m]
    s, t = [float(sims[i]) for i in idx], [float(text[i]) for i in idx]
    mu_v, sd_v, mu_t, sd_t = statistics.fmean(s), statistics.pstdev(s), statistics.fmean(t), statistics.pstdev(t)
    out = [float("nan")] * len(sims)
    for i in idx:
        out[i] = mu_t + sd_t * (float(sims[i]) - mu_v) / sd_v if sd_v > 1e-12 else mu_t
    return out


def ref_fuse(scores, members, tiebreak, k):
    fused = [0.0] * len(tiebreak)
    for s, m in zip(scores, members):
        ranked = sorted((i for i in range(len(tiebreak)) if m[i]), key=lambda i: (-s[i], tiebreak[i]))
        for r, i in enumerate(ranked, start=1):
            fused[i] += 1.0 / (k + r)
    return fused


@pytest.mark.parametrize("seed", range(5))
def test_calibrate_and_dense_match_loops(seed):
    rng = np.random.default_rng(seed)
    n, v = 40, 3
    sims, text = rng.uniform(-1, 1, (v, n)), rng.uniform(-1, 1, n)
    members = rng.random((v, n)) < 0.5
    cal = calibrated_views(sims, text, members)
    for j in range(v):
        np.testing.assert_allclose(cal[j], ref_calibrate(sims[j], text, members[j]), rtol=0, atol=1e-12)
        got = cal[j][members[j]]  # over its members the view now has text cosine's mean and spread
        assert got.mean() == pytest.approx(text[members[j]].mean()) and got.std() == pytest.approx(text[members[j]].std())
    dense = view_dense(cal, text)
    for i in range(n):
        found = [cal[j, i] for j in range(v) if members[j, i]]
        assert dense[i] == (max(found) if found else text[i])


def test_calibrate_is_identity_for_text_keyed_views_and_handles_flat_views():
    text = np.array([0.3, 0.9, -0.1, 0.5], np.float32)
    member = np.array([True, True, False, True])
    out = calibrate(text, text, member)
    assert np.array_equal(out[member], text[member].astype(np.float64)) and np.isnan(out[2])
    flat = calibrate(np.full(4, 0.7), text, member)  # a view whose similarities do not vary: the text mean
    assert np.allclose(flat[member], text[member].mean())
    assert np.isnan(calibrate(text, text, np.zeros(4, bool))).all()
    with pytest.raises(ValueError, match="three"):
        calibrate(text, text[:3], member)


@pytest.mark.parametrize("seed", range(5))
def test_fuse_views_and_hand_out_match_loops(seed):
    rng = np.random.default_rng(seed)
    n, v = 30, 3
    scores = rng.integers(0, 6, (v, n)).astype(float)  # many ties: the tiebreak decides them
    members = rng.random((v, n)) < 0.6
    tiebreak = rng.permutation(n)
    fused = fuse_views(scores, members, tiebreak, 10)
    np.testing.assert_allclose(fused, ref_fuse(scores, members, tiebreak, 10), rtol=0, atol=1e-15)
    base = rng.uniform(0, 1, n)
    order, out = hand_out(fused, base, tiebreak)
    assert order.tolist() == sorted(range(n), key=lambda i: (-fused[i], tiebreak[i]))
    assert out[order].tolist() == sorted(base.tolist(), reverse=True)  # sorted in fused order, same scale


def test_bad_scoring_and_shapes_are_value_errors():
    with pytest.raises(ValueError, match="merge_scoring"):
        check_scoring("affect")
    with pytest.raises(ValueError, match="merge_scoring"):
        Config(merge_scoring="bogus").validate()
    assert Config().merge_scoring == "text"
    with pytest.raises(ValueError, match="differ"):
        fuse_views(np.zeros((2, 3)), np.ones((2, 4), bool), np.arange(3), 10)
    with pytest.raises(ValueError, match="differ"):
        hand_out(np.zeros(3), np.zeros(4), np.arange(3))


# --- the merge of a SpaceIndex -------------------------------------------------------------------
def space(n=30, seed=0):
    """An index over n units whose text and affective vectors are unrelated, plus two planted
    units: `txt-best` (text cosine ~0.65 to the query, affect opposed to the query's) and
    `aff-best` (affective vector = the query's, text nearly orthogonal to the query's)."""
    rng = np.random.default_rng(seed)
    q_text, q_aff = unit(rng.standard_normal(D)), unit(rng.standard_normal(D))
    tv, av = list(unit(rng.standard_normal((n, D)))), list(unit(rng.standard_normal((n, D))))
    ids = [f"u{i:02d}" for i in range(n)]
    tv.append(unit(q_text + 1.2 * unit(rng.standard_normal(D)))), av.append(unit(rng.standard_normal(D) - 3 * q_aff))
    tv.append(unit(0.2 * q_text + rng.standard_normal(D))), av.append(q_aff)
    ids += ["txt-best", "aff-best"]
    t0 = datetime(2023, 3, 1, 10, tzinfo=timezone.utc)
    amus = [AMU(amu_id=a, text=f"note {i} about walks" + (" yesterday" if i % 4 == 0 else ""), speaker="S",
                timestamp=t0 + timedelta(days=i), session_id=f"s{i // 8}", source_turn_ids=(f"t{i}",),
                polarity=("positive", "negative")[i % 2]) for i, a in enumerate(ids)]  # all in the Affect view
    views = SpaceViews(Config(b_max=3, m_max_init=6, m_max_bounds=(4, 8)), D, D)
    tv, av = np.stack(tv), np.stack(av)
    views.add(amus, tv, av)
    views.maintain()
    return SpaceIndex(views, amus, tv, av), q_text, q_aff


def found_lists(index, q_text, q_aff):
    """Event: the 15 best units by text cosine (txt-best among them); Affect: the 15 best by
    affective cosine (aff-best first); flat: the 5 best by text cosine."""
    keys = list(index.row_of)
    rows = np.array([index.row_of[a] for a in keys])
    by = {"event": index.text_vecs[rows] @ q_text, "affect": index.affect_vecs[rows] @ q_aff}
    out = {v: [Scored(keys[i], float(s[i]), float(s[i]), 0.0) for i in np.argsort(-s)[:15]] for v, s in by.items()}
    out["flat"] = out["event"][:5]
    return out


def ref_merge(index, found, q_text, q_aff, scoring, beta=BETA, k=10):
    """The merge by loops: BM25 min-max over the union, each unit's dense term by `scoring`."""
    keys = list(dict.fromkeys(s.key for v in ("event", "affect", "flat") for s in found.get(v, ())))
    q_ids = index.amu_lex.query_ids("walks yesterday")
    bm = [float(x) for x in index.amu_lex.scores_for(np.array([index.row_of[a] for a in keys]), q_ids)]
    lo, hi = min(bm), max(bm)
    bmn = [(b - lo) / (hi - lo) if hi > lo else 0.0 for b in bm]
    text = [float(index.text_vecs[index.row_of[a]] @ q_text) for a in keys]
    members, cal = [], []
    for v, hits in found.items():
        m = [a in {s.key for s in hits} for a in keys]
        sims = [float(index.affect_vecs[index.row_of[a]] @ q_aff) for a in keys] if v == "affect" else text
        members.append(m)
        cal.append(text if v != "affect" else ref_calibrate(sims, text, m))
    def total(dense):
        return [(1 - beta) * d + beta * b for d, b in zip(dense, bmn)]
    if scoring == "text":
        score = total(text)
    else:
        dense = [max(cal[j][i] for j in range(len(cal)) if members[j][i]) for i in range(len(keys))]
        score = total(dense)
    order = sorted(range(len(keys)), key=lambda i: (-score[i], keys[i]))
    if scoring == "rrf":
        per_view = [total([c if c == c else 0.0 for c in cal[j]]) for j in range(len(cal))]
        rank_key = {a: r for r, a in enumerate(sorted(keys))}
        fused = ref_fuse(per_view, members, [rank_key[a] for a in keys], k)
        order, handed = sorted(range(len(keys)), key=lambda i: (-fused[i], keys[i])), sorted(score, reverse=True)
        return [(keys[i], handed[r]) for r, i in enumerate(order)]
    return [(keys[i], score[i]) for i in order]


def merged(index, found, q_text, q_aff, scoring, query="walks yesterday", **kw):
    q_ids = index.amu_lex.query_ids(query)
    return index.merge_found(found, q_text, q_ids, BETA, None, False, 0.1, q_affect=q_aff, scoring=scoring, **kw)


@pytest.mark.parametrize("scoring", ["text", "view", "rrf"])
@pytest.mark.parametrize("seed", range(3))
def test_merge_matches_loops(scoring, seed):
    index, q_text, q_aff = space(seed=seed)
    found = found_lists(index, q_text, q_aff)
    got = merged(index, found, q_text, q_aff, scoring)
    ref = ref_merge(index, found, q_text, q_aff, scoring)
    assert [a for a, _, _ in got] == [a for a, _ in ref]
    np.testing.assert_allclose([s for _, s, _ in got], [s for _, s in ref], rtol=0, atol=1e-5)


# "can", not "always": the affect find maps to mu_t + sd_t * z over the Affect view's candidates, which
# stays below the text best where text cosine varies little among them (seed 2 of `space`)
@pytest.mark.parametrize("seed", [0, 1, 4])
def test_view_scoring_lets_an_affect_found_unit_outrank_the_text_best(seed):
    index, q_text, q_aff = space(seed=seed)
    found = found_lists(index, q_text, q_aff)
    text = [a for a, _, _ in merged(index, found, q_text, q_aff, "text", query="zebra")]  # no BM25 signal
    view = [a for a, _, _ in merged(index, found, q_text, q_aff, "view", query="zebra")]
    assert text[0] == "txt-best" and text.index("aff-best") > 5  # text cosine: the affect find ranks low
    assert view[0] == "aff-best" and view.index("aff-best") < view.index("txt-best")


def test_view_scoring_without_an_affect_view_is_text_scoring_exactly():
    index, q_text, q_aff = space(seed=1)
    found = found_lists(index, q_text, q_aff)
    del found["affect"]
    assert merged(index, found, q_text, q_aff, "view") == merged(index, found, q_text, q_aff, "text")
    # a view keyed by text vectors is scored by text cosine: keying Affect by text changes nothing
    found = found_lists(index, q_text, q_aff)
    as_text = merged(index, found, q_text, q_aff, "view", keyed_by={"affect": "text"})
    assert as_text == merged(index, found, q_text, q_aff, "text")
    # ... and keying Event by affect scores its finds by affective cosine (the shared-affect system)
    assert merged(index, found, q_text, q_aff, "view", keyed_by={"event": "affect"}) != as_text


def test_additions_apply_alike_in_every_mode():
    index, q_text, q_aff = space(seed=2)
    found = found_lists(index, q_text, q_aff)
    q_ids = index.amu_lex.query_ids("walks yesterday")
    for scoring in ("text", "view"):
        plain = {a: s for a, s, _ in index.merge_found(found, q_text, q_ids, BETA, None, False, 0.1, q_affect=q_aff,
                                                   scoring=scoring)}
        when = {a: s for a, s, _ in index.merge_found(found, q_text, q_ids, BETA, None, True, 0.1, q_affect=q_aff,
                                                  scoring=scoring)}
        for a in plain:  # "when" questions: half the time boost for units with their own time words
            bonus = 0.05 if "yesterday" in index.amu_of[a].text else 0.0
            assert when[a] - plain[a] == pytest.approx(bonus, abs=1e-6)


def test_search_takes_the_mode_and_text_is_the_default():
    index, q_text, q_aff = space(seed=0)
    args = ("zebra", q_text, q_aff, 12)
    opts = SearchOptions(beam=len(index.routing["affect"]), beta=BETA, views=("affect",))
    default = index.search(*args, opts).ranked
    assert default == index.search(*args, opts.replace(merge_scoring="text")).ranked
    view = index.search(*args, opts.replace(merge_scoring="view")).ranked
    assert view != default and view[0][0] == "aff-best"
    rrf = index.search(*args, opts.replace(merge_scoring="rrf")).ranked
    assert [s for _, s, _ in rrf] == sorted((s for _, s, _ in rrf), reverse=True)
    with pytest.raises(ValueError, match="merge_scoring"):
        index.search(*args, opts.replace(merge_scoring="affect"))
