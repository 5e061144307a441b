"""Everyday use of the CLI and the API on the bundled demo conversation (no ../shared needed):
ingest -> search -> ask -> inspect end to end, errors that name the file, line and field without a
traceback, Ctrl-C that says how to resume, config values feeding the CLI defaults, the affect
fallback warned once per store, and batches of similar length in the text encoder."""
from __future__ import annotations

import json
import logging
from importlib import resources

import numpy as np
import pytest

from etamem import Config, Memory, UnknownIdError
from etamem.cli import main

DEMO = json.loads(resources.files("etamem.data").joinpath("demo_conversation.json").read_text(encoding="utf-8"))
QUESTION = "What is the name of Maya's cat?"


def _jsonl(path, turns, space="demo"):
    path.write_text("".join(json.dumps({**t, "space": space}) + "\n" for t in turns))
    return path


@pytest.fixture(scope="module")
def demo_store(tmp_path_factory):
    """A store holding the demo conversation, ingested by `etamem ingest` from a JSONL file."""
    tmp = tmp_path_factory.mktemp("demo")
    path, store = _jsonl(tmp / "demo.jsonl", DEMO["turns"]), tmp / "store"
    assert main(["-q", "ingest", str(path), "--format", "jsonl", "--store", str(store), "--no-progress"]) == 0
    return store


@pytest.fixture(autouse=True)
def _no_llm(monkeypatch):
    monkeypatch.delenv("ETAMEM_LLM_MODEL", raising=False)


def test_cli_end_to_end_on_the_demo(demo_store, capsys):
    """ingest (the fixture) -> search -> ask -> inspect (trees, then one unit's paths)."""
    capsys.readouterr()
    assert main(["-q", "stats", str(demo_store)]) == 0
    assert f"demo: turns {len(DEMO['turns'])}" in capsys.readouterr().out
    assert logging.getLogger("etamem").level == logging.ERROR  # -q: errors only
    assert main(["-q", "search", str(demo_store), QUESTION, "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert len(hits) == Config().top_k  # the config's top_k is the default
    assert "s1:5" in {t for h in hits[:3] for t in h["source_turn_ids"]}  # "... Her name is Pixel."
    assert main(["-q", "ask", str(demo_store), QUESTION]) == 0
    assert "evidence:" in capsys.readouterr().out
    assert main(["-q", "inspect", str(demo_store), "--json"]) == 0
    trees = json.loads(capsys.readouterr().out)
    assert len(trees) == 3
    assert main(["-q", "inspect", str(demo_store), "--amu", hits[0]["amu_id"], "--json"]) == 0
    assert hits[0]["amu_id"] in capsys.readouterr().out


@pytest.mark.parametrize("argv,message", [
    (["inspect", "{store}", "--amu", "nope"], "no AMU 'nope' in space 'demo'"),
    (["search", "{store}", "cat", "--space", "nope"], "space: unknown space 'nope'"),
    (["search", "{store}", "cat", "--set", "top_k=two"], "--set: config top_k='two': expected an integer"),
    (["search", "{store}", "cat", "--config", "{tmp}/missing.json"], "missing.json: No such file or directory"),
    (["search", "{store}", "cat", "--config", "{tmp}/bad.json"], "config file {tmp}/bad.json: config top_k='two'"),
    (["search", "{store}", "cat", "--now", "someday"], "now: cannot parse 'someday'"),
    (["search", "{store}", "cat", "--top-k", "0"], "top_k: expected 1..10000"),
    (["inspect", "{store}", "--node", "99999", "--view", "event"], "node: no live node 99999"),
])
def test_cli_user_mistakes_are_one_line_with_rc_2(demo_store, tmp_path, capsys, argv, message):
    (tmp_path / "bad.json").write_text('{"top_k": "two"}')
    fill = {"store": str(demo_store), "tmp": str(tmp_path)}
    capsys.readouterr()
    assert main(["-q", *[a.format(**fill) for a in argv]]) == 2
    err = capsys.readouterr().err
    assert err.startswith("etamem: error: ") and message.format(**fill) in err and err.count("\n") == 1, err


def test_cli_config_and_set_feed_the_defaults_a_flag_wins(demo_store, tmp_path, capsys):
    (tmp_path / "c.json").write_text('{"top_k": 3}')
    search = ["-q", "search", str(demo_store), QUESTION, "--json"]
    for extra, n in ((["--set", "top_k=2"], 2), (["--config", str(tmp_path / "c.json")], 3),
                     (["--config", str(tmp_path / "c.json"), "--set", "top_k=4"], 4),
                     (["--set", "top_k=2", "--top-k", "1"], 1)):
        capsys.readouterr()
        assert main([*search, *extra]) == 0
        assert len(json.loads(capsys.readouterr().out)) == n, extra


def test_cli_ingest_ctrl_c_says_how_many_turns_are_stored_and_how_to_resume(tmp_path, capsys, monkeypatch):
    path, store = _jsonl(tmp_path / "demo.jsonl", DEMO["turns"]), tmp_path / "store"
    real_add, calls = Memory.add, []

    def add(self, turns, space="default"):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_add(self, turns, space)

    monkeypatch.setattr(Memory, "add", add)
    run = ["-q", "ingest", str(path), "--format", "jsonl", "--store", str(store), "--no-progress"]
    assert main(run) == 130
    first = sum(1 for t in DEMO["turns"] if t["session_id"] == DEMO["turns"][0]["session_id"])
    err = capsys.readouterr().err
    assert (f"interrupted: demo has {first} of its {len(DEMO['turns'])} turns stored; run the same command again"
            in err), err
    monkeypatch.setattr(Memory, "add", real_add)
    assert main(run) == 0
    assert f"(added {len(DEMO['turns']) - first}, already present {first})" in capsys.readouterr().out


def test_cli_interrupt_anywhere_is_one_line_rc_130(demo_store, capsys, monkeypatch):
    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr("etamem.cli.commands.cmd_search", interrupted)
    assert main(["-q", "search", str(demo_store), "cat"]) == 130
    assert capsys.readouterr().err == "etamem: interrupted\n"


def test_cli_ingest_checks_every_conversation_before_storing(tmp_path, capsys):
    """A bad turn in the second conversation of a LoCoMo-shaped file: nothing stored, and the
    error names the file, the sample, the turn and the field."""
    def sample(sid, date):
        turns = [{"speaker": "A", "dia_id": f"D1:{i}", "text": f"Hello number {i}, how are you?"} for i in (1, 2)]
        return {"sample_id": sid, "conversation": {"speaker_a": "A", "speaker_b": "B", "session_1": turns,
                                                   "session_1_date_time": date}, "qa": []}

    path = tmp_path / "two.json"
    path.write_text(json.dumps([sample("c1", "1:56 pm on 8 May, 2023"), sample("c2", "not a date")]))
    store = tmp_path / "store"
    assert main(["-q", "ingest", str(path), "--format", "locomo", "--store", str(store), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"{path}: sample 'c2', turn 'D1:1'.timestamp: cannot parse 'not a date'" in err, err
    assert not (store / "memory.sqlite").exists() or Memory(store).spaces() == []


def test_check_names_labels_and_conflicts_without_storing(tmp_path):
    from conftest import HashingEncoder
    from etamem.models.affect import VaderAffectTagger

    enc = HashingEncoder()
    mem = Memory(tmp_path / "m", text_encoder=enc, affect_tagger=VaderAffectTagger(enc))
    turn = {"turn_id": "a", "session_id": "s1", "speaker": "Ana", "text": "I adopted a cat named Miso.",
            "timestamp": "2023-05-08T13:56"}
    assert [t.turn_id for t in mem.check([turn], space="x")] == ["a"]
    assert mem.spaces() == []
    with pytest.raises(ValueError, match=r"^f\.jsonl:7: turn\.timestamp: cannot parse 'soon'"):
        mem.check([{**turn, "timestamp": "soon"}], space="x", labels=["f.jsonl:7: turn"])
    mem.add([turn], space="x")
    assert mem.check([turn], space="x") == []  # already stored: nothing to add
    with pytest.raises(ValueError, match=r"^f\.jsonl:2: turn\.turn_id: 'a' is already stored .* other content"):
        mem.check([{**turn, "text": "I adopted a dog."}], space="x", labels=["f.jsonl:2: turn"])
    assert [t.text for t in mem.check([{**turn, "text": "I adopted a dog."}], space="x", new_space=True)] == [
        "I adopted a dog."]
    for bare in (b"tea", 5, None):
        with pytest.raises(ValueError, match=r"^turns: expected a string \(one user message\), a dict with speaker"):
            mem.add(bare, space="x")
    with pytest.raises(UnknownIdError, match="no AMU 'nope'") as info:
        mem.get("nope", space="x")
    assert str(info.value) == "no AMU 'nope' in space 'x'" and isinstance(info.value, KeyError)
    mem.close()


def test_affect_fallback_logged_at_info_and_a_vader_store_never_tries_roberta(tmp_path, monkeypatch, caplog):
    """'auto' without RoBERTa weights: VADER with an INFO line (not a WARNING); a store
    that recorded VADER opens with VADER directly (no RoBERTa load, an INFO line)."""
    from conftest import HashingEncoder
    from etamem.models import affect

    monkeypatch.setattr(affect, "_FALLBACK_WARNED", set())
    cfg = Config(affect_backend="auto", affect_model=str(tmp_path / "no-weights-here"))
    enc = HashingEncoder()
    with caplog.at_level(logging.INFO, logger="etamem.models.affect"):
        for _ in range(2):
            assert isinstance(affect.make_affect_tagger(cfg, enc), affect.VaderAffectTagger)
    levels = [r.levelname for r in caplog.records if "VADER fallback" in r.message]
    assert levels == ["INFO", "INFO"]  # the documented default without weights: no WARNING on every start

    def no_roberta(*a, **k):
        raise AssertionError("RoBERTa must not be tried for a store built with VADER")

    monkeypatch.setattr(affect, "RobertaAffectTagger", no_roberta)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="etamem.models.affect"):
        tagger = affect.make_affect_tagger(cfg, enc, recorded="vader+hashing-test-encoder")
    assert isinstance(tagger, affect.VaderAffectTagger)
    assert [r.levelname for r in caplog.records] == ["INFO"] and "recorded tagger" in caplog.records[0].message


def test_length_batches_keep_long_texts_apart_and_cover_every_text():
    from etamem.models.encoders import CHARS_PER_BATCH_ROW, MODEL_MAX_CHARS, length_batches

    rng = np.random.default_rng(0)
    texts = ["x" * int(n) for n in rng.integers(1, 300, 500)] + ["y" * 10_000] * 3
    batches = length_batches(texts, 64)
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(texts)))
    for b in batches:
        longest = min(max(len(texts[i]) for i in b), MODEL_MAX_CHARS)
        assert len(b) <= 64 and (len(b) == 1 or len(b) * longest <= 64 * CHARS_PER_BATCH_ROW)
    assert length_batches([], 64) == []


def test_encoder_batches_by_length_give_the_same_vectors(minilm):
    """Brute-force reference: each text encoded alone."""
    texts = ["I adopted a grey cat.", "Her name is Pixel. " * 200, "ok", "The defense will be in April, said Dr. Okafor."]
    together = minilm.encode(texts)
    alone = np.vstack([minilm.encode([t]) for t in texts])
    assert together.shape == (4, minilm.dim) and together.dtype == np.float32
    np.testing.assert_allclose(together, alone, atol=1e-5)


def test_default_encoder_without_sentence_transformers_gives_the_same_vectors(minilm):
    """The default text encoder runs the bundled MiniLM with plain torch (etamem.models.bert_encoder);
    brute-force reference: sentence-transformers on the same model, same texts."""
    from etamem.models.encoders import default_minilm

    enc = default_minilm(device="cpu")
    texts = ["I adopted a grey cat.", "Her name is Pixel. " * 200, "ok", "", "Émile a mangé des crêpes à Zürich!",
             "The defense will be in April, said Dr. Okafor.", "x" * 5000]
    got, ref = enc.encode(texts), minilm.encode(texts)
    assert enc.name == minilm.name and enc.dim == minilm.dim and got.dtype == np.float32
    np.testing.assert_allclose(got, ref, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-5)


def test_a_cli_search_does_not_import_sentence_transformers(demo_store):
    import subprocess
    import sys

    code = ("import sys; from etamem.cli import main; rc = main(['-q', 'search', sys.argv[1], 'cat', '--json']); "
            "assert rc == 0; print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('sentence_transformers', 'transformers')))")
    out = subprocess.run([sys.executable, "-c", code, str(demo_store)], capture_output=True, text=True, timeout=300,
                         cwd=demo_store.parent, env={**__import__("os").environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout[-500:]


def test_add_takes_a_plain_string_as_one_user_message(tmp_path):
    """`add("I'm vegan.")` stores one user turn with default session, time and id (also in a list)."""
    from conftest import HashingEncoder
    from etamem.models.affect import VaderAffectTagger

    enc = HashingEncoder()
    mem = Memory(tmp_path / "m", text_encoder=enc, affect_tagger=VaderAffectTagger(enc))
    mem.add("I'm vegan.", space="x")
    mem.add(["I live in Porto.", {"speaker": "assistant", "text": "Noted."}], space="x")
    turns = mem.turns("x")
    assert [(t.speaker, t.text) for t in turns] == [("user", "I'm vegan."), ("user", "I live in Porto."),
                                                   ("assistant", "Noted.")]
    assert all(t.session_id and t.timestamp and t.turn_id for t in turns)
    assert mem.check("I eat fish.", space="x")[0].speaker == "user"
    mem.close()
