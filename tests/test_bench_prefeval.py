"""`etamem bench prefeval DIR` on a tiny synthetic fixture in PrefEval's layout (the loader:
shapes, evidence ids, seeded placement; a run end to end with the hashing encoder) and the
bootstrap interval beside every recall figure."""
import argparse
import json
from datetime import datetime

import numpy as np
import pytest

from conftest import HashingEncoder
from etamem.bench import BenchOptions, run
from etamem.bench.data import load
from etamem.bench.metrics import bootstrap_interval
from etamem.bench.prefeval import load_prefeval
from etamem.cli.bench import add_arguments, options_from_args
from etamem.models.affect import VaderAffectTagger
from etamem.models.encoders import CachedEncoder

TOPICS = {
    "lifestyle_dietary": [("I follow a strict vegan diet and never eat any meat or dairy.",
                           "Which vegan restaurants would you suggest for a vegan dinner tonight?"),
                          ("I am allergic to peanuts and avoid anything with peanuts.",
                           "Can you suggest a snack without peanuts for my allergic kid?"),
                          ("I only drink decaf coffee in the evening.", "What decaf coffee drinks are good?")],
    "pet_ownership": [("I have two cats and I am allergic to dog hair.", "Which cats breeds suit allergic owners?"),
                      ("My parrot talks all day and loves seeds.", "What seeds should my parrot eat?")],
    "travel_hotel": [("I always book hotels with a swimming pool and a gym.",
                      "Recommend hotels in Lisbon with a swimming pool and a gym?"),
                     ("I prefer quiet boutique hotels far from nightlife.", "Any quiet boutique hotels in Rome?"),
                     ("I never stay in hostels.", "Where should I stay in Paris, not a hostel?")],
}
CHATS = [
    [("user", "How do I reverse a list in Python?"), ("assistant", "Use reversed() or slicing with [::-1].")],
    [("user", "Write a short poem about autumn leaves."), ("assistant", "Golden leaves drift down the lane."),
     ("user", "Make it rhyme better."), ("assistant", "Golden leaves fall, autumn's gentle call.")],
    [("user", "What is the capital of Australia?"), ("assistant", "Canberra is the capital of Australia.")],
]


def write_fixture(root, topics=TOPICS, chats=CHATS):
    (root / "explicit_preference").mkdir(parents=True)
    for topic, items in topics.items():
        (root / "explicit_preference" / f"{topic}.json").write_text(json.dumps(
            [{"preference": p, "question": q, "explanation": "scripted"} for p, q in items]))
    (root / "filtered_inter_turns.json").write_text(json.dumps(
        [{"conversation_id": f"c{i}", "model": "m", "turn": len(c) // 2, "language": "English", "redacted": False,
          "conversation": [{"role": r, "content": t} for r, t in c]} for i, c in enumerate(chats)]))
    return root


def test_loader_shapes_evidence_and_seeded_placement(tmp_path):
    root = write_fixture(tmp_path / "prefeval")
    convs = load("prefeval", str(root))
    assert [c.space for c in convs] == ["prefeval-0", "prefeval-1"]  # the smallest topic has 2 items
    chat_turns = sum(len(c) for c in CHATS)
    for i, conv in enumerate(convs):
        assert len(conv.turns) == chat_turns + len(TOPICS)
        assert {t["speaker"] for t in conv.turns} == {"user", "assistant"}
        assert len({t["turn_id"] for t in conv.turns}) == len(conv.turns)
        by_id = {t["turn_id"]: t for t in conv.turns}
        assert [q.category for q in conv.questions] == sorted(TOPICS)
        for q in conv.questions:
            assert q.qid == f"{conv.space}:{q.category}" and q.question == TOPICS[q.category][i][1]
            assert q.gold_turns == [f"pref-{q.category}:1"]
            pref = by_id[q.gold_turns[0]]
            assert (pref["speaker"], pref["text"], pref["session_id"]) == ("user", TOPICS[q.category][i][0],
                                                                             f"pref-{q.category}")
        # sessions in time order, each contiguous; preference days among the chats; `now` after all
        stamps = [datetime.fromisoformat(t["timestamp"]) for t in conv.turns]
        assert stamps == sorted(stamps)
        order = [t["session_id"] for t in conv.turns]
        sessions = list(dict.fromkeys(order))
        assert len(sessions) == len(CHATS) + len(TOPICS)
        for s in sessions:  # each session's turns contiguous
            at = [j for j, x in enumerate(order) if x == s]
            assert at == list(range(at[0], at[0] + len(at)))
        chat_days = [datetime.fromisoformat(by_id[f"chat-{n}:1"]["timestamp"]).date() for n in (1, len(CHATS))]
        for topic in TOPICS:
            day = datetime.fromisoformat(by_id[f"pref-{topic}:1"]["timestamp"]).date()
            assert chat_days[0] <= day <= chat_days[1]
        assert all(datetime.fromisoformat(q.now) > stamps[-1] for q in conv.questions)
    # deterministic for a seed, different across trials and seeds
    again = load_prefeval(root)
    assert [c.turns for c in again] == [c.turns for c in convs]
    placements = {s: [[t["session_id"] for t in c.turns] for c in load_prefeval(root, seed=s)] for s in range(6)}
    assert len({json.dumps(p) for p in placements.values()}) > 1
    assert any(p[0] != p[1] for p in placements.values())


def test_loader_rejects_a_wrong_layout(tmp_path):
    with pytest.raises(ValueError, match="explicit_preference"):
        load("prefeval", str(tmp_path))
    root = write_fixture(tmp_path / "p", chats=[[("system", "be nice")]])
    with pytest.raises(ValueError, match="filtered_inter_turns.json: chat 0"):
        load("prefeval", str(root))


def test_prefeval_bench_end_to_end_with_intervals(tmp_path, monkeypatch):
    for var in ("ETAMEM_LLM_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    root = write_fixture(tmp_path / "prefeval")
    out = tmp_path / "out"
    enc = CachedEncoder(HashingEncoder())
    systems = ["bm25-turns", "dense-turns", "etamem"]
    summary = run(BenchOptions("prefeval", str(root), out=str(out), systems=systems, plots=False),
                  text_encoder=enc, affect_tagger=VaderAffectTagger(enc))
    assert summary["settings"]["ks"] == [1, 5, 10]
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    retrieval = [r for r in records if r["type"] == "retrieval"]
    assert len(retrieval) == len(systems) * 2 * len(TOPICS)
    assert {r["category"] for r in retrieval} == set(TOPICS)
    # the vegan question shares its words with the preference: BM25 ranks it first
    vegan = next(r for r in retrieval if r["system"] == "bm25-turns" and r["qid"] == "prefeval-0:lifestyle_dietary")
    assert vegan["metrics"]["recall@1"] == 1.0
    for key in systems:
        s = summary["systems"][key]["retrieval"]
        rows = [r["metrics"]["recall@5"] for r in retrieval if r["system"] == key]
        assert s["metrics"]["recall@5"]["all"] == pytest.approx(np.mean(rows))
        for k in (1, 5, 10):
            low, high = s["intervals"][f"recall@{k}"]["all"]
            assert low <= s["metrics"][f"recall@{k}"]["all"] <= high
            assert s["intervals"][f"recall@{k}"]["all"] == list(bootstrap_interval(
                [r["metrics"][f"recall@{k}"] for r in retrieval if r["system"] == key]))
            assert set(s["intervals"][f"recall@{k}"]) == set(TOPICS) | {"all"}
    report = (out / "report.md").read_text()
    m, ci = (summary["systems"]["bm25-turns"]["retrieval"][x]["recall@5"]["all"] for x in ("metrics", "intervals"))
    assert "| flat BM25 (turns) | " in report and f"{m:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]" in report
    assert "Recall@5 of the preference turn per topic" in report and "| travel_hotel | " in report
    assert "2 trial(s)" in report


def test_bootstrap_interval_against_brute_force():
    assert bootstrap_interval([]) is None
    assert bootstrap_interval([1.0] * 30) == (1.0, 1.0)
    assert bootstrap_interval([0.0] * 7) == (0.0, 0.0)
    # symmetric data: an interval symmetric about the mean, inside [0, 1], seeded
    x = [0.0, 1.0] * 50
    low, high = bootstrap_interval(x, resamples=4000, seed=3)
    assert low < 0.5 < high and low + high == pytest.approx(1.0, abs=0.02) and 0.35 < low < 0.45
    assert bootstrap_interval(x, resamples=4000, seed=3) == (low, high)
    # the same draws by hand: resample indexes, means, 2.5th / 97.5th percentiles
    values = np.array([0.2, 0.9, 0.4, 1.0, 0.0, 0.6])
    idx = np.random.default_rng(5).integers(0, 6, (300, 6))
    means = sorted(float(values[row].mean()) for row in idx)
    assert bootstrap_interval(values, resamples=300, seed=5) == pytest.approx(
        (float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))))
    # a wider level, a wider interval; nonsense arguments refused
    narrow, wide = (bootstrap_interval(values, level=lv) for lv in (0.5, 0.99))
    assert wide[0] < narrow[0] and narrow[1] < wide[1]
    with pytest.raises(ValueError):
        bootstrap_interval(values, level=1.5)


def test_cli_accepts_prefeval(tmp_path):
    root = write_fixture(tmp_path / "prefeval")
    p = argparse.ArgumentParser()
    add_arguments(p)
    opts = options_from_args(p.parse_args(["prefeval", str(root), "--limit", "1"]))
    assert opts.dataset == "prefeval" and opts.limit == 1 and opts.ks is None
