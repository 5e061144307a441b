"""`etamem bench locomo FILE --roles`: speakers as user / assistant with their first names
replaced in turns, captions and questions, on small LoCoMo-shaped fixtures; the runner keeps a
named and a roles run apart (settings check, separate stores)."""
import json
import re

import pytest

from conftest import HashingEncoder
from etamem.bench import BenchOptions, run
from etamem.bench.data import load_locomo
from etamem.bench.roles import load_locomo_roles, replace_names
from etamem.models.affect import VaderAffectTagger

LABELS = {"Caroline": "the user", "Melanie": "the assistant"}


@pytest.mark.parametrize("text, expected", [
    ("I saw Caroline's new painting.", "I saw the user's new painting."),
    ("I saw Caroline’s new painting.", "I saw the user’s new painting."),  # typographic apostrophe
    ("Caroline went hiking.", "The user went hiking."),
    ("Caroline's dog barked.", "The user's dog barked."),
    ("Nice! Caroline said so. Really? Melanie agreed.", "Nice! The user said so. Really? The assistant agreed."),
    ('She said: "Caroline, come here."', 'She said: "the user, come here."'),
    ('Wow. "Caroline, come here."', 'Wow. "The user, come here."'),
    ("first line\nCaroline on the next", "first line\nThe user on the next"),
    ("Melanie and Caroline met Melanie's kids.", "The assistant and the user met the assistant's kids."),
    ("Carolines and MelanieX and caroline stay", "Carolines and MelanieX and caroline stay"),  # whole words, case as spelled
    ("Hey Mel! Caro is here.", "Hey Mel! Caro is here."),  # nicknames left
    ("", ""),
])
def test_replace_names_on_tricky_strings(text, expected):
    assert replace_names(text, LABELS) == expected


def test_a_name_inside_another_word_is_untouched_and_the_possessive_typo_follows():
    labels = {"Tim": "the user", "John": "the assistant"}
    assert replace_names("Time with Tim and Timmy at Tim's, sometimes", labels) == \
        "Time with the user and Timmy at the user's, sometimes"
    assert replace_names("What is Tims's job and Johnson's?", labels) == "What is the user's job and Johnson's?"


@pytest.mark.parametrize("question, expected", [
    ("What did Caroline paint?", "What did the user paint?"),
    ("When did Melanie and Caroline go camping?", "When did the assistant and the user go camping?"),
    ("Caroline's favourite book?", "The user's favourite book?"),
    ("Would Melanie enjoy Caroline's party?", "Would the assistant enjoy the user's party?"),
])
def test_questions(question, expected):
    assert replace_names(question, LABELS) == expected


def _sample(sample_id, a, b, *, texts, questions):
    """A LoCoMo record (same layout as locomo10.json): two sessions, speakers alternating from `a`."""
    conv = {"speaker_a": a, "speaker_b": b}
    n = 0
    for s, (date, session) in enumerate(texts, 1):
        conv[f"session_{s}_date_time"] = date
        conv[f"session_{s}"] = []
        for i, text in enumerate(session, 1):
            turn = {"speaker": (a, b)[n % 2], "dia_id": f"D{s}:{i}", "text": text}
            if isinstance(text, tuple):  # (text, caption): a shared photo
                turn.update(text=text[0], blip_caption=text[1], img_url=["http://x/y.jpg"], query="photo")
            conv[f"session_{s}"].append(turn)
            n += 1
    return {"sample_id": sample_id, "conversation": conv, "qa": questions, "event_summary": {},
            "observation": {}, "session_summary": {}}


def write_fixture(path):
    data = [
        _sample("conv-a", "Caroline", "Melanie", texts=[
            ("1:56 pm on 8 May, 2023", ["Hey Mel! Caroline's painting class was great.",
                                        "Caroline, that is lovely. Melanie is proud of you.",
                                        ("Look at this photo from the lake.", "a photo of Caroline by a lake")]),
            ("10:00 am on 20 May, 2023", ["Melanie, I adopted a puppy.", "Wow, Caroline! Caro the dog owner.",
                                          "Melanie's kids will love him."]),
        ], questions=[
            {"question": "What did Caroline paint?", "answer": "Caroline's sunset", "evidence": ["D1:1"], "category": 4},
            {"question": "When did Melanie and Caroline talk about a puppy?", "answer": "20 May 2023",
             "evidence": ["D2:1", "D2:2"], "category": 2},
            {"question": "What did Melanie adopt?", "adversarial_answer": "a puppy", "evidence": ["D2:1"],
             "category": 5},
        ]),
        _sample("conv-b", "Tim", "John", texts=[
            ("9:00 am on 1 June, 2023", ["John, it is time to play.", "Tim's team won! Good times, Tim."]),
        ], questions=[{"question": "Whose team won, Tim's or John's?", "answer": "Tim's", "evidence": ["D1:2"],
                       "category": 1}]),
    ]
    path.write_text(json.dumps(data))
    return data


def _has_name(text, names):
    return bool(re.search(rf"\b({'|'.join(names)})\b", text))


def test_locomo_fixture_loaded_with_roles(tmp_path):
    write_fixture(tmp_path / "locomo.json")
    named = {c.space: c for c in load_locomo(str(tmp_path / "locomo.json"))}
    roles = {c.space: c for c in load_locomo_roles(str(tmp_path / "locomo.json"))}
    assert list(roles) == ["conv-a", "conv-b"]
    for space, names in (("conv-a", ["Caroline", "Melanie"]), ("conv-b", ["Tim", "John"])):
        conv, before = roles[space], named[space]
        assert [t["speaker"] for t in conv.turns] == [("user", "assistant")[i % 2] for i in range(len(conv.turns))]
        texts = [t["text"] for t in conv.turns] + [t["extra"].get("blip_caption", "") for t in conv.turns]
        texts += [q.question for q in conv.questions]
        assert not any(_has_name(t, names) for t in texts)
        # ids, times, gold evidence and answers unchanged; the named load is not modified
        assert [(t["turn_id"], t["timestamp"]) for t in conv.turns] == [(t["turn_id"], t["timestamp"]) for t in before.turns]
        assert [(q.qid, q.gold_turns, q.answer, q.category) for q in conv.questions] == \
            [(q.qid, q.gold_turns, q.answer, q.category) for q in before.questions]
        assert {t["speaker"] for t in before.turns} == set(names)
    a = roles["conv-a"]
    assert a.turns[0]["text"] == "Hey Mel! The user's painting class was great."  # nickname left
    assert a.turns[2]["extra"]["blip_caption"] == "a photo of the user by a lake"
    assert a.turns[4]["text"] == "Wow, the user! Caro the dog owner."
    assert [q.question for q in a.questions] == ["What did the user paint?",
                                                 "When did the assistant and the user talk about a puppy?"]
    assert a.questions[0].answer == "Caroline's sunset"
    assert roles["conv-b"].turns[0]["text"] == "The assistant, it is time to play."
    assert roles["conv-b"].questions[0].question == "Whose team won, the user's or the assistant's?"


def test_a_turn_by_a_third_speaker_is_refused(tmp_path):
    data = write_fixture(tmp_path / "locomo.json")
    data[1]["conversation"]["session_1"][0]["speaker"] = "Jane"
    (tmp_path / "locomo.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="conv-b: turn D1:1 is by 'Jane'"):
        load_locomo_roles(str(tmp_path / "locomo.json"))


@pytest.fixture
def fast_models():
    enc = HashingEncoder()
    return {"text_encoder": enc, "affect_tagger": VaderAffectTagger(enc)}


def _store_speakers(stores, construction="turn"):
    import sqlite3

    with sqlite3.connect(stores / construction / "memory.sqlite") as db:
        return {row[0] for row in db.execute("SELECT DISTINCT speaker FROM turns")}


def test_named_and_roles_runs_into_one_out_are_kept_apart(tmp_path, fast_models, monkeypatch):
    monkeypatch.delenv("ETAMEM_LLM_MODEL", raising=False)
    write_fixture(tmp_path / "locomo.json")
    out, stores = tmp_path / "out", tmp_path / "stores"
    opts = BenchOptions("locomo", str(tmp_path / "locomo.json"), out=str(out), systems=["bm25-turns", "no-amus"],
                        no_llm=True, plots=False, stores=str(stores))
    named = run(opts, **fast_models)
    assert named["settings"]["roles"] is False and _store_speakers(stores) == {"Caroline", "Melanie", "Tim", "John"}
    opts.roles = True
    with pytest.raises(ValueError, match=r"other settings \(roles differ\)"):
        run(opts, **fast_models)
    opts.fresh = True
    summary = run(opts, **fast_models)
    assert summary["settings"]["roles"] is True and any("Speakers as roles" in n for n in summary["notes"])
    # the shared --stores keeps the named stores; the roles run built its own beside them
    assert _store_speakers(stores) == {"Caroline", "Melanie", "Tim", "John"}
    assert _store_speakers(stores / "roles") == {"user", "assistant"}
    records = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert {r["type"] for r in records} == {"build", "retrieval"}
    assert len([r for r in records if r["type"] == "retrieval"]) == 2 * 3  # 3 scored questions, 2 systems
    assert json.loads((out / "settings.json").read_text())["roles"] is True


def test_settings_written_before_roles_existed_match_a_named_run(tmp_path, fast_models, monkeypatch):
    monkeypatch.delenv("ETAMEM_LLM_MODEL", raising=False)
    write_fixture(tmp_path / "locomo.json")
    opts = BenchOptions("locomo", str(tmp_path / "locomo.json"), out=str(tmp_path / "out"), systems=["bm25-turns"],
                        no_llm=True, plots=False)
    run(opts, **fast_models)
    path = tmp_path / "out" / "settings.json"
    old = json.loads(path.read_text())
    del old["roles"]
    path.write_text(json.dumps(old))
    assert run(opts, **fast_models)["settings"]["roles"] is False  # no "other settings" error
    opts.roles = True
    with pytest.raises(ValueError, match="roles differ"):
        run(opts, **fast_models)


def test_cli_roles_flag(tmp_path, monkeypatch, capsys):
    from etamem.cli import main

    monkeypatch.delenv("ETAMEM_LLM_MODEL", raising=False)
    write_fixture(tmp_path / "locomo.json")
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    assert "nicknames" in capsys.readouterr().out
    assert main(["bench", "longmemeval", str(tmp_path / "locomo.json"), "--roles"]) == 2
    assert "--roles applies to locomo only" in capsys.readouterr().err
