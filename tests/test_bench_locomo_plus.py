"""`etamem bench locomo-plus FILE --locomo FILE` on a tiny generated LoCoMo + LoCoMo-Plus
fixture: the stitching (times, speakers, ids, the "several months" quirk, bad items), and a run
end to end with the hashing encoder: the cue is ranked for its trigger only and the stores hold
the plain conversations again afterwards."""
import argparse
import dataclasses
import json

import pytest

from conftest import HashingEncoder
from etamem.bench import BenchOptions, run
from etamem.bench.data import load
from etamem.bench.locomo_plus import gap_days
from etamem.bench.run_stores import Workbench
from etamem.bench.systems import BY_KEY
from etamem.cli.bench import add_arguments, options_from_args
from etamem.config import Config
from etamem.models.affect import VaderAffectTagger
from etamem.models.encoders import CachedEncoder

SESSIONS = {
    "conv-a": ("Ann", "Bob", [
        ("1:00 pm on 3 May, 2023", ["I started a pottery class downtown.", "That sounds relaxing, enjoy the clay."]),
        ("2:30 pm on 20 May, 2023", ["My sister visited from Lisbon last week.", "Did you show her the river?"]),
    ]),
    "conv-b": ("Cleo", "Dan", [
        ("9:15 am on 1 June, 2023", ["We adopted a puppy named Rex.", "Rex must keep you busy at night."]),
    ]),
}
ITEMS = [  # (relation, cue, trigger, gap, conversation)
    ("causal", "A: After the flood ruined our basement, we moved every box upstairs.\nB: Smart, water is brutal.",
     "A: The basement still smells damp whenever it rains.", "two months later", 0),
    ("state", "A: I have been sleeping badly since the night shifts began.\nB: Night shifts wreck sleep.",
     "A: Coffee barely helps me anymore.", "several months later", 0),
    ("goal", "A: I want to run a marathon before I turn forty.\nB: Then start with short runs.",
     "A: Signed up for the spring race today!", "about 6 weeks later", 1),
]


def write_fixture(root, items=ITEMS):
    root.mkdir(parents=True, exist_ok=True)
    samples = []
    for sid, (a, b, sessions) in SESSIONS.items():
        conv = {"speaker_a": a, "speaker_b": b}
        for n, (date, texts) in enumerate(sessions, 1):
            conv[f"session_{n}_date_time"] = date
            conv[f"session_{n}"] = [{"speaker": (a, b)[k % 2], "dia_id": f"D{n}:{k + 1}", "text": t}
                                    for k, t in enumerate(texts)]
        samples.append({"sample_id": sid, "conversation": conv, "qa": [], "event_summary": {}, "observation": {},
                        "session_summary": {}})
    (root / "locomo.json").write_text(json.dumps(samples))
    (root / "plus.json").write_text(json.dumps(
        [{"relation_type": r, "cue_dialogue": c, "trigger_query": t, "time_gap": g, "model_name": "m",
          "locomo_conversation": n} for r, c, t, g, n in items]))
    return root / "plus.json", root / "locomo.json"


def test_gap_days_as_the_benchmark_reads_them():
    assert gap_days("two months later") == 60 and gap_days("about six weeks later") == 42
    assert gap_days("one year later") == 365 and gap_days("around four months later") == 120
    assert gap_days("a year after") == 365 and gap_days("3 weeks later") == 21
    assert gap_days("two months after the challenge ended") == 60
    assert gap_days("several months later") == 0 and gap_days("a few weeks later") == 0  # the quirk, kept


def test_stitching_times_speakers_ids(tmp_path):
    plus, locomo = write_fixture(tmp_path)
    convs = load("locomo-plus", str(plus), locomo=str(locomo))
    assert [(c.space, len(c.turns), len(c.questions)) for c in convs] == [("conv-a", 4, 2), ("conv-b", 2, 1)]
    assert all(not t["session_id"].startswith("plus-") for c in convs for t in c.turns)  # cues apart
    q0, q1 = convs[0].questions
    # last session 20 May 14:30 + 7 days = 27 May; the cue two months (60 days) before
    assert q0.now == "2023-05-27T14:30" and q0.question == "The basement still smells damp whenever it rains."
    assert q0.qid == "conv-a:plus-0" and q0.category == "causal" and q0.gold_turns == ["plus-0:1", "plus-0:2"]
    assert [(t["turn_id"], t["session_id"], t["speaker"], t["timestamp"]) for t in q0.cue_turns] == [
        ("plus-0:1", "plus-0", "Ann", "2023-03-28T14:30"), ("plus-0:2", "plus-0", "Bob", "2023-03-28T14:30")]
    assert q0.cue_turns[1]["text"] == "Smart, water is brutal."
    assert q1.cue_turns[0]["timestamp"] == q1.now == "2023-05-27T14:30"  # "several months": 0 days
    (q2,) = convs[1].questions
    assert q2.qid == "conv-b:plus-2" and [t["speaker"] for t in q2.cue_turns] == ["Cleo", "Dan"]
    assert q2.cue_turns[0]["timestamp"] == "2023-04-27T09:15"  # 8 June - 42 days


@pytest.mark.parametrize("bad, message", [
    ({"locomo_conversation": None}, "item 1 has no 'locomo_conversation'"),
    ({"locomo_conversation": 7}, "item 1: locomo_conversation 7 is not an index"),
    ({"cue_dialogue": 3}, "item 1: not in the expected form"),
])
def test_bad_item_raises_naming_it(tmp_path, bad, message):
    plus, locomo = write_fixture(tmp_path)
    data = json.loads(plus.read_text())
    data[1].update(bad)
    if data[1]["locomo_conversation"] is None:  # the official file's items lack the field
        del data[1]["locomo_conversation"]
    plus.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=message):
        load("locomo-plus", str(plus), locomo=str(locomo))
    with pytest.raises(ValueError, match="--locomo"):
        load("locomo-plus", str(plus))


def _stored(stores, enc, construction="amu"):
    wb = Workbench(Config(), stores, text_encoder=enc, affect_tagger=VaderAffectTagger(enc))
    try:
        mem = wb.memory(construction)
        return {s: [t.turn_id for t in mem.turns(s)] for s in mem.spaces()}
    finally:
        wb.close()


def test_bench_end_to_end_cue_in_for_its_trigger_only(tmp_path, monkeypatch):
    for var in ("ETAMEM_LLM_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    plus, locomo = write_fixture(tmp_path / "data")
    out = tmp_path / "out"
    enc = CachedEncoder(HashingEncoder())
    systems = ["bm25-turns", "dense-turns", "flat-amus", "etamem"]
    opts = BenchOptions("locomo-plus", str(plus), out=str(out), systems=systems, plots=False, locomo=str(locomo))
    summary = run(opts, text_encoder=enc, affect_tagger=VaderAffectTagger(enc))
    assert summary["settings"]["ks"] == [5, 10, 20] and summary["settings"]["locomo"] == str(locomo.resolve())
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    retrieval = [r for r in records if r["type"] == "retrieval"]
    assert len(retrieval) == len(systems) * len(ITEMS) and not [r for r in records if r["type"] == "qa"]
    # 6 stored turns at most: every system finds a cue turn among them; the cue has 2 turns
    for r in retrieval:
        assert r["metrics"]["recall_any@5"] == 1.0 and r["metrics"]["recall_first@20"] == 1.0, r
    # the trigger shares "basement" with its cue only: BM25 ranks the cue's first turn first
    basement = next(r for r in retrieval if r["system"] == "bm25-turns" and r["qid"] == "conv-a:plus-0")
    assert basement["metrics"]["recall_first@5"] == 1.0
    # the stores hold the plain conversations again: same turns, no plus-* session, still built
    assert _stored(out / "stores", enc) == {"conv-a": ["D1:1", "D1:2", "D2:1", "D2:2"], "conv-b": ["D1:1", "D1:2"]}
    wb = Workbench(Config(), out / "stores", text_encoder=enc, affect_tagger=VaderAffectTagger(enc))
    try:
        convs = load("locomo-plus", str(plus), locomo=str(locomo))
        assert all(wb.is_built("amu", c) for c in convs)
    finally:
        wb.close()
    s = summary["systems"]["etamem"]["retrieval"]
    assert set(s["metrics"]["recall_any@10"]) == {"causal", "state", "goal", "all"}
    report = (out / "report.md").read_text()
    m, ci = (s[x]["recall_any@5"]["all"] for x in ("metrics", "intervals"))
    assert f"{m:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]" in report and "recall_any@5 of the cue per relation type" in report
    # a rerun skips every finished item and leaves the stores as they were
    again = run(opts, text_encoder=enc, affect_tagger=VaderAffectTagger(enc))
    assert again["systems"]["etamem"]["retrieval"]["metrics"] == s["metrics"]
    assert len((out / "results.jsonl").read_text().splitlines()) == len(records)


def _workbench(root):
    enc = CachedEncoder(HashingEncoder())
    return Workbench(Config(), root, text_encoder=enc, affect_tagger=VaderAffectTagger(enc))


def test_cue_round_trip_leaves_the_store_exactly_as_built(tmp_path):
    """Not only the same turns and units: the same views (nodes, thresholds, maintenance) and
    the same rankings for questions without a cue."""
    plus, locomo = write_fixture(tmp_path / "data")
    conv = load("locomo-plus", str(plus), locomo=str(locomo))[0]
    plain = dataclasses.replace(conv.questions[0], qid="plain", question="Who took a pottery class?", cue_turns=[])
    spec = BY_KEY["etamem"]
    wb = _workbench(tmp_path / "stores")
    try:
        wb.build("amu", conv)

        def state():
            mem = wb.memory("amu")
            return (mem.stats(conv.space)["views"], [a.amu_id for a in mem.list(conv.space)],
                    [(u.sources, u.text) for u in wb.rank(spec, conv, plain).units])
        before = state()
        for q in conv.questions:
            with wb.cue(spec, conv, q):
                assert q.gold_turns[0] in [t for u in wb.rank(spec, conv, q).units for t in u.sources]
                assert wb.memory("amu").store.count_turns(conv.space) == len(conv.turns) + 2
        assert state() == before and wb.is_built("amu", conv)
    finally:
        wb.close()


def test_cue_left_by_a_stopped_run_is_gone_on_open_and_ranking_needs_the_cue(tmp_path):
    plus, locomo = write_fixture(tmp_path / "data")
    conv = load("locomo-plus", str(plus), locomo=str(locomo))[0]
    q, spec = conv.questions[0], BY_KEY["etamem"]
    wb = _workbench(tmp_path / "stores")
    wb.build("amu", conv)
    with pytest.raises(ValueError, match="inside Workbench.cue"):
        wb.rank(spec, conv, q)
    stopped = wb.cue(spec, conv, q)
    stopped.__enter__()  # the process stops inside the block: never left
    assert "plus-0:1" in [t.turn_id for t in wb.memory("amu").turns(conv.space)]
    wb.close()
    wb = _workbench(tmp_path / "stores")
    try:
        assert wb.is_built("amu", conv)
        assert [t.turn_id for t in wb.memory("amu").turns(conv.space)] == [t["turn_id"] for t in conv.turns]
    finally:
        wb.close()
    assert stopped  # held to the end: its clean-up must not run before the reopen


def test_cli_accepts_locomo_plus(tmp_path):
    plus, locomo = write_fixture(tmp_path)
    p = argparse.ArgumentParser()
    add_arguments(p)
    opts = options_from_args(p.parse_args(["locomo-plus", str(plus), "--locomo", str(locomo), "--limit", "1"]))
    assert opts.dataset == "locomo-plus" and opts.locomo == str(locomo) and opts.ks is None
    with pytest.raises(ValueError, match="--locomo"):
        run(BenchOptions("locomo-plus", str(plus), out=str(tmp_path / "o"), systems=["bm25-turns"], plots=False))


def test_one_run_per_stores_directory(tmp_path):
    from etamem.bench.run_stores import Workbench

    first = Workbench(Config(), tmp_path / "stores")
    with pytest.raises(ValueError, match="another benchmark run"):
        Workbench(Config(), tmp_path / "stores")
    first.close()
    Workbench(Config(), tmp_path / "stores").close()  # free again once the first run closed
