"""`etamem bench updates [FILE] --filler PATH` (issue 32): the shipped scenarios, the memories
built from them with a tiny generated filler, LongMemEval-format knowledge-update questions, the
update metrics, and a run end to end with the hashing encoder."""
import argparse
import json
import re
from collections import Counter
from datetime import datetime, timedelta

import pytest

from conftest import HashingEncoder
from etamem.bench import BenchOptions, run
from etamem.bench.data import load
from etamem.bench.items import BenchQuestion
from etamem.bench.updates import (
    DEFAULT_GAP_DAYS,
    GROUP_SIZE,
    load_updates,
    read_scenarios,
    shipped_scenarios,
    update_metrics,
)
from etamem.cli.bench import add_arguments, options_from_args
from etamem.models.affect import VaderAffectTagger
from etamem.models.encoders import CachedEncoder

CHATS = [
    [("user", "How do I reverse a list in Python?"), ("assistant", "Use reversed() or slicing with [::-1]."),
     ("user", "And sort it descending?"), ("assistant", "sorted(xs, reverse=True).")],
    [("user", "What is the capital of Australia?"), ("assistant", "Canberra is the capital of Australia.")],
]
CUES = re.compile(r"\b(now|moved|relocated|switched|stopped|no longer|anymore|new|pushed|changed|quit|instead|"
                  r"after|again|transferred|rescheduled|raised|grew|promoted|got|finally|up to|sold)\b", re.I)


def write_filler(path, chats=CHATS):
    path.mkdir(parents=True, exist_ok=True)
    (path / "filtered_inter_turns.json").write_text(json.dumps(
        [{"conversation_id": f"c{i}", "conversation": [{"role": r, "content": t} for r, t in c]}
         for i, c in enumerate(chats)]))
    return path


def test_shipped_scenarios():
    scenarios = read_scenarios(shipped_scenarios())
    assert len(scenarios) >= 48
    assert len({s.id for s in scenarios}) == len(scenarios)
    kinds = Counter(s.kind for s in scenarios)
    assert len(kinds) >= 8 and min(kinds.values()) >= 5
    for s in scenarios:
        assert all(getattr(s, f).strip() for f in ("id", "kind", "old", "new", "now", "past"))
        assert s.id.startswith(f"{s.kind}-") and s.old != s.new and s.gap_days >= 1
    # exactly a third kept apart, spread over the kinds (a third of each)
    test = [s for s in scenarios if s.split == "test"]
    assert 3 * len(test) == len(scenarios)
    for kind, n in kinds.items():
        assert 3 * sum(s.kind == kind for s in test) == n
    # some changes said without any change word, some now-questions without a cue word
    assert sum(not CUES.search(s.new) for s in scenarios) >= 5
    assert sum(not re.search(r"\b(now|currently|still|these days)\b", s.now, re.I) for s in scenarios) >= 10


def test_memories_from_a_tiny_filler(tmp_path):
    filler = write_filler(tmp_path / "prefeval")
    convs = load("updates", None, filler=str(filler))
    scenarios = {s.id: s for s in read_scenarios(shipped_scenarios()) if s.split == "dev"}
    assert [c.space for c in convs] == [f"updates-dev-{i}" for i in range(1, len(convs) + 1)]
    assert sorted(q.qid for c in convs for q in c.questions) == sorted(
        f"upd-{i}:{side}" for i in scenarios for side in ("now", "past"))
    for conv in convs:
        ids = {q.qid.split(":")[0][4:] for q in conv.questions}
        assert len(ids) <= GROUP_SIZE and len({scenarios[i].kind for i in ids}) == len(ids)  # distinct kinds
        by_id = {t["turn_id"]: t for t in conv.turns}
        assert len(by_id) == len(conv.turns)
        stamps = [datetime.fromisoformat(t["timestamp"]) for t in conv.turns]
        assert stamps == sorted(stamps)
        # both chats, whole, each its own session on a day without a fact session
        for n, chat in enumerate(CHATS, 1):
            turns = [t for t in conv.turns if t["session_id"] == f"chat-{n}"]
            assert [(t["turn_id"], t["speaker"], t["text"]) for t in turns] == [
                (f"chat-{n}:{k}", r, x) for k, (r, x) in enumerate(chat, 1)]
        chat_days = {t["timestamp"][:10] for t in conv.turns if t["session_id"].startswith("chat-")}
        fact_days = {t["timestamp"][:10] for t in conv.turns if t["session_id"].startswith("upd-")}
        assert len(chat_days) == len(CHATS) and not chat_days & fact_days
        assert len(conv.turns) == sum(map(len, CHATS)) + 4 * len(ids)
        for i in ids:
            s = scenarios[i]
            old, new = by_id[f"upd-{i}:old"], by_id[f"upd-{i}:new"]
            assert (old["speaker"], old["text"], old["session_id"]) == ("user", s.old, f"upd-{i}-old")
            assert (new["speaker"], new["text"], new["session_id"]) == ("user", s.new, f"upd-{i}-new")
            assert by_id[f"upd-{i}:old-reply"]["speaker"] == "assistant"
            gap = datetime.fromisoformat(new["timestamp"]).date() - datetime.fromisoformat(old["timestamp"]).date()
            assert gap == timedelta(days=s.gap_days)
        for q in conv.questions:
            i, side = q.qid[4:].split(":")
            s = scenarios[i]
            assert datetime.fromisoformat(q.now).date() == stamps[-1].date() + timedelta(days=1)
            assert q.category == f"{side}:{s.kind}"
            if side == "now":
                assert (q.question, q.gold_turns, q.stale_turns) == (s.now, [f"upd-{i}:new"], [f"upd-{i}:old"])
            else:
                assert (q.question, q.gold_turns, q.stale_turns) == (s.past, [f"upd-{i}:old"], [f"upd-{i}:new"])
    assert any(s.gap_days != DEFAULT_GAP_DAYS for s in scenarios.values())
    # seeded: the same memories again; the file itself as --filler; other splits
    again = load_updates(None, str(filler / "filtered_inter_turns.json"))
    assert [c.turns for c in again] == [c.turns for c in convs]
    test = load_updates(None, str(filler), "test")
    assert {q.qid for c in test for q in c.questions}.isdisjoint({q.qid for c in convs for q in c.questions})
    assert sum(len(c.questions) for c in load_updates(None, str(filler), "all")) == 2 * len(
        read_scenarios(shipped_scenarios()))


def test_bad_filler_and_scenarios_are_refused(tmp_path):
    with pytest.raises(ValueError, match="--filler PATH is required"):
        load("updates", None)
    with pytest.raises(ValueError, match="does not exist"):
        load("updates", None, filler=str(tmp_path / "nowhere"))
    bad = write_filler(tmp_path / "bad", chats=[[("system", "be nice")]])
    with pytest.raises(ValueError, match="filtered_inter_turns.json: chat 0"):
        load("updates", None, filler=str(bad))
    filler = str(write_filler(tmp_path / "ok"))
    with pytest.raises(ValueError, match="--split"):
        load("updates", None, filler=filler, split="train")
    rec = {"id": "x-1", "kind": "x", "split": "dev", "old": "a", "new": "b", "now": "c?", "past": "d?"}
    for doc, msg in (([{k: v for k, v in rec.items() if k != "past"}], "missing field 'past'"),
                     ([{**rec, "split": "val"}], "split: expected dev or test"),
                     ([{**rec, "gap_days": 0}], "gap_days"), ([rec, rec], "repeated: x-1"), ([], "non-empty")):
        path = tmp_path / "s.json"
        path.write_text(json.dumps({"scenarios": doc}))
        with pytest.raises(ValueError, match=msg):
            load("updates", str(path), filler=filler)
    with pytest.raises(ValueError, match="apply to updates only"):
        load("prefeval", str(tmp_path), filler=filler)


def lme_question(qid, qtype, sessions, answer_ids, question="Where does the user live now?"):
    """A LongMemEval-format question; sessions: (id, date, [(role, text, has_answer)])."""
    return {"question_id": qid, "question_type": qtype, "question": question, "answer": "Austin",
            "question_date": "2023/06/01 (Thu) 10:00",
            "haystack_session_ids": [s for s, _, _ in sessions], "haystack_dates": [d for _, d, _ in sessions],
            "haystack_sessions": [[{"role": r, "content": t, **({"has_answer": True} if h else {})}
                                   for r, t, h in turns] for _, _, turns in sessions],
            "answer_session_ids": answer_ids}


def write_lme(path):
    chat = [("user", "Can you recommend a sci-fi novel?", False), ("assistant", "Try Hyperion by Dan Simmons.", False)]
    questions = [
        # the latest answer session is listed first in the haystack: the dates decide
        lme_question("ku1", "knowledge-update", [
            ("s3", "2023/04/02 (Sun) 09:00", [("user", "I moved to Austin last week.", True),
                                             ("assistant", "Congrats on the move!", False)]),
            ("s2", "2023/02/11 (Sat) 12:00", chat),
            ("s1", "2023/01/05 (Thu) 18:30", [("user", "I live in Denver, near the park.", True),
                                             ("assistant", "Nice!", False)])], ["s1", "s3"]),
        lme_question("ku2", "knowledge-update", [
            ("a", "2023/01/01 (Sun) 10:00", [("user", "My rent is $1,500.", True), ("assistant", "Ok.", False)]),
            ("b", "2023/02/01 (Wed) 10:00", [("user", "Rent went up to $1,700.", True), ("assistant", "Ouch.", False)]),
            ("c", "2023/03/01 (Wed) 10:00", [("user", "My landlord raised it again.", True),
                                            ("user", "It's $1,900 a month now.", True), ("assistant", "Sorry!", False)]),
            ("d", "2023/03/05 (Sun) 10:00", chat)], ["a", "b", "c"], question="What is the user's rent?"),
        lme_question("ss1", "single-session-user", [("x", "2023/01/01 (Sun) 10:00", chat)], ["x"]),
    ]
    path.write_text(json.dumps(questions))
    return path


def test_longmemeval_knowledge_updates(tmp_path):
    convs = load("updates", str(write_lme(tmp_path / "lme.json")))
    assert [c.space for c in convs] == ["ku1", "ku2"]  # the other question type left out
    q1, q2 = (c.questions[0] for c in convs)
    assert (q1.gold_turns, q1.stale_turns, q1.gold_sessions) == (["s3_1"], ["s1_1"], ["s3"])
    assert (q2.gold_turns, q2.stale_turns) == (["c_1", "c_2"], ["a_1", "b_1"])
    assert q1.category == q2.category == "now:knowledge-update" and q1.now == "2023/06/01 (Thu) 10:00"
    only_other = tmp_path / "other.json"
    only_other.write_text(json.dumps(json.loads((tmp_path / "lme.json").read_text())[2:]))
    with pytest.raises(ValueError, match="no knowledge-update question"):
        load("updates", str(only_other))


def _q(category, gold, stale):
    return BenchQuestion(qid="q", space="s", question="?", answer="", category=category, now=None,
                         gold_turns=gold, stale_turns=stale)


def test_update_metrics():
    now, past = _q("now:place", ["new"], ["old"]), _q("past:place", ["old"], ["new"])
    ks = (1, 5)
    assert update_metrics(["new", "old", "x"], now, ks) == {
        "recall@1": 1.0, "recall@5": 1.0, "current_first": 1.0, "current_before_old": 1.0}
    assert update_metrics(["old", "new"], now, ks) == {
        "recall@1": 0.0, "recall@5": 1.0, "current_first": 0.0, "current_before_old": 0.0}
    got = update_metrics(["x", "new"], now, ks)  # the old turn absent counts as after
    assert (got["current_first"], got["current_before_old"]) == (0.0, 1.0)
    got = update_metrics(["x", "old"], now, ks)  # the current turn absent: never before
    assert (got["current_first"], got["current_before_old"]) == (0.0, 0.0)
    assert "current_before_old" not in update_metrics(["new"], _q("now:knowledge-update", ["new"], []), ks)
    ranked = ["a", "b", "c", "d", "old", "new"]
    assert update_metrics(ranked, past, ks) == {"recall@1": 0.0, "recall@5": 1.0, "old_first": 0.0, "old_in_5": 1.0}
    got = update_metrics(["a", "b", "c", "d", "e", "old"], past, ks)
    assert (got["old_in_5"], got["old_first"]) == (0.0, 0.0)
    assert update_metrics(["old"], past, ks)["old_first"] == 1.0


def test_updates_bench_end_to_end(tmp_path, monkeypatch):
    for var in ("ETAMEM_LLM_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    filler = write_filler(tmp_path / "prefeval")
    enc = CachedEncoder(HashingEncoder())
    systems = ["hybrid-turns", "etamem"]
    out = tmp_path / "out"
    summary = run(BenchOptions("updates", filler=str(filler), out=str(out), systems=systems, limit=1, plots=False),
                  text_encoder=enc, affect_tagger=VaderAffectTagger(enc))
    assert summary["settings"]["ks"] == [1, 5, 10] and summary["settings"]["split"] == "dev"
    assert summary["file"] == str(shipped_scenarios())
    records = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    retrieval = [r for r in records if r["type"] == "retrieval"]
    assert len(retrieval) == len(systems) * 2 * GROUP_SIZE and not [r for r in records if r["type"] == "qa"]
    kinds = {r["category"].split(":")[1] for r in retrieval}
    assert len(kinds) == GROUP_SIZE
    for r in retrieval:
        want = {"current_first", "current_before_old"} if r["category"].startswith("now:") else {"old_first", "old_in_5"}
        assert set(r["metrics"]) == want | {"recall@1", "recall@5", "recall@10"}
        assert all(0.0 <= v <= 1.0 for v in r["metrics"].values())
    for key in systems:
        s = summary["systems"][key]["retrieval"]
        for m in ("current_first", "current_before_old", "old_in_5", "old_first", "recall@5"):
            side = "past" if m.startswith("old") else "now"
            rows = [r["metrics"][m] for r in retrieval if r["system"] == key and m in r["metrics"]]
            assert len(rows) == (2 if m == "recall@5" else 1) * GROUP_SIZE
            assert s["metrics"][m]["all"] == pytest.approx(sum(rows) / len(rows))
            low, high = s["intervals"][m]["all"]
            assert 0.0 <= low <= s["metrics"][m]["all"] <= high <= 1.0
            if m != "recall@5":
                assert {c for c in s["metrics"][m] if c != "all"} == {f"{side}:{k}" for k in kinds}
    report = (out / "report.md").read_text()
    assert "current_first per kind (now-questions)" in report and "old_in_5 per kind (past-questions)" in report
    assert f"{2 * GROUP_SIZE} questions ({GROUP_SIZE} about now, {GROUP_SIZE} about the past) in 1 memories" in report
    # a LongMemEval-format file: the now metrics only
    lme = run(BenchOptions("updates", str(write_lme(tmp_path / "lme.json")), out=str(tmp_path / "lme"),
                           systems=["hybrid-turns"], plots=False), text_encoder=enc, affect_tagger=VaderAffectTagger(enc))
    metrics = lme["systems"]["hybrid-turns"]["retrieval"]["metrics"]
    assert lme["data"]["questions"] == 2 and {"current_first", "current_before_old"} <= set(metrics)
    assert not {"old_first", "old_in_5"} & set(metrics)


def test_cli_updates(tmp_path):
    p = argparse.ArgumentParser()
    add_arguments(p)
    opts = options_from_args(p.parse_args(["updates", "--filler", str(tmp_path), "--split", "test"]))
    assert (opts.dataset, opts.file, opts.filler, opts.split) == ("updates", shipped_scenarios(), str(tmp_path), "test")
    assert options_from_args(p.parse_args(["updates", "x.json"])).file == "x.json"
    with pytest.raises(ValueError, match="file: required for prefeval"):
        options_from_args(p.parse_args(["prefeval"]))
    with pytest.raises(ValueError, match="file: required for locomo"):
        run(BenchOptions("locomo", out=str(tmp_path / "o")))


def test_a_shortened_filler(tmp_path):
    """--filler-chats / --filler-turns: fewer chats, each cut to its first messages, in a space
    of its own (a shared --stores never serves the whole-filler memory for it)."""
    filler = write_filler(tmp_path / "prefeval", CHATS + [[("user", f"Question {i}?"), ("assistant", "Answer.")]
                                                          for i in range(5)])
    whole = load_updates(None, str(filler))
    short = load_updates(None, str(filler), filler_chats=1, filler_turns=1)
    assert [c.space for c in short] == [f"updates-dev-c1t1-{i}" for i in range(1, len(whole) + 1)]
    for w, s in zip(whole, short):
        chats = [t for t in s.turns if t["session_id"].startswith("chat-")]
        assert len(chats) == 1 and chats[0]["turn_id"].endswith(":1")
        facts = lambda c: [(t["turn_id"], t["text"]) for t in c.turns if t["session_id"].startswith("upd-")]  # noqa: E731
        assert facts(s) == facts(w) and [q.qid for q in s.questions] == [q.qid for q in w.questions]
        assert len([t for t in w.turns if t["session_id"].startswith("chat-")]) > 1
    assert [c.space for c in load_updates(None, str(filler), filler_chats=6)] == [c.space for c in whole]  # the default
    with pytest.raises(ValueError, match="filler_turns"):
        load_updates(None, str(filler), filler_turns=-1)
    with pytest.raises(ValueError, match="apply to updates only"):
        load("locomo", "x.json", filler_chats=2)
