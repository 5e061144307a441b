"""Packaging contract, dataset readers and the CLI."""
import json
import sys
from pathlib import Path

import pytest

from etamem.ingest.datasets import read_jsonl, read_locomo, read_longmemeval

REPO = Path(__file__).resolve().parents[1]


def test_import_is_light_and_kernels_are_a_subpackage(tmp_path):
    """Run outside the checkout so only the installed package is visible."""
    import subprocess

    code = (
        "import importlib.util, json, sys, etamem, etamem.kernels\n"
        "spec = importlib.util.find_spec('kernels')\n"
        "heavy = sorted(m for m in ('torch', 'transformers', 'faiss', 'openai', 'bm25s') if m in sys.modules)\n"
        "print(json.dumps({'kernels': etamem.kernels.__name__, 'top': spec and spec.origin, 'heavy': heavy}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path)
    info = json.loads(out.stdout)
    assert info["kernels"] == "etamem.kernels" and info["heavy"] == []
    # etamem installs no top-level `kernels`; a third-party one may exist, ours must not be it
    assert info["top"] is None or str(REPO / "kernels") not in info["top"]


def test_the_checkout_does_not_shadow_the_pypi_kernels_package():
    """Run from the checkout (the current directory first on sys.path, as `python -c` and the tests
    do): a `kernels` found there would hide the PyPI `kernels` that `transformers` imports."""
    import subprocess

    code = "import importlib.util; spec = importlib.util.find_spec('kernels'); print(spec and spec.origin)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    origin = out.stdout.strip()
    assert origin == "None" or not origin.startswith(str(REPO) + "/kernels"), origin


def test_prompts_installed_as_package_data():
    from etamem.models.prompt_files import list_prompts

    assert {"extract_locomo", "extract_longmemeval", "answer_locomo", "answer_longmemeval"} <= set(list_prompts())


def test_read_locomo(locomo_dev):
    convs = list(read_locomo(locomo_dev))
    assert [c.space for c in convs] == ["conv-26", "conv-30", "conv-41", "conv-42", "conv-43", "conv-44"]
    raw = json.loads(locomo_dev.read_text())
    c = raw[0]["conversation"]
    sessions = [k for k, v in c.items() if k.startswith("session_") and isinstance(v, list)]
    assert len(convs[0].turns) == sum(len(c[k]) for k in sessions)
    assert len({t["session_id"] for t in convs[0].turns}) == len(sessions) == 19
    first = convs[0].turns[0]
    assert first["turn_id"] == "D1:1" and first["timestamp"] == "1:56 pm on 8 May, 2023"
    assert any(t["extra"].get("blip_caption") for t in convs[0].turns)
    assert len(convs[0].questions) == len(raw[0]["qa"])


def _longmemeval_fixture(path):
    data = [{
        "question_id": "q1", "question_type": "single-session-user", "question": "What car do I drive?",
        "answer": "a red Volvo", "question_date": "2023/06/01 (Thu) 10:00",
        "haystack_session_ids": ["s_a", "s_b"], "haystack_dates": ["2023/05/20 (Sat) 02:21", "2023/05/22 (Mon) 09:00"],
        "haystack_sessions": [
            [{"role": "user", "content": "I drive a red Volvo.", "has_answer": True},
             {"role": "assistant", "content": "Nice car!"}],
            [{"role": "user", "content": "Recommend a book."}, {"role": "assistant", "content": "Try Dune."}]],
        "answer_session_ids": ["s_a"]}]
    path.write_text(json.dumps(data))
    return path


def test_read_longmemeval(tmp_path):
    conv = next(read_longmemeval(_longmemeval_fixture(tmp_path / "lme.json")))
    assert conv.space == "q1" and conv.question_date == "2023/06/01 (Thu) 10:00"
    assert [t["turn_id"] for t in conv.turns] == ["s_a_1", "s_a_2", "s_b_1", "s_b_2"]
    assert conv.turns[0]["extra"] == {"has_answer": True} and conv.turns[1]["speaker"] == "assistant"
    assert "haystack_sessions" not in conv.questions[0]


def test_read_jsonl(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"space": "a", "session_id": "1", "speaker": "X", "text": "hi there friend", "timestamp": "2023-01-01"}\n\n'
                 '{"session_id": "1", "speaker": "Y", "text": "hello", "timestamp": "2023-01-01"}\n')
    convs = list(read_jsonl(p))
    assert [(c.space, len(c.turns)) for c in convs] == [("a", 1), ("default", 1)]
    p.write_text("{not json}\n")
    with pytest.raises(ValueError, match=r"t.jsonl:1"):
        list(read_jsonl(p))


def test_cli_demo_runs_offline(capsys, monkeypatch):
    from etamem.cli import main

    monkeypatch.delenv("ETAMEM_LLM_MODEL", raising=False)
    assert main(["-q", "demo", "--top-k", "5"]) == 0
    out = capsys.readouterr().out
    assert "Event tree" in out and "Affect tree" in out and "Time forest" in out and "tau_new" in out
    assert out.count("Q: ") == 5 and "no LLM is configured" in out
    assert "Pixel" in out  # the cat's name is found among the evidence


def test_cli_demo_into_a_store_runs_twice(tmp_path, capsys, monkeypatch):
    """The second run finds the demo's turns stored (same ids, same content): idempotent adds."""
    from etamem.cli import main

    monkeypatch.delenv("ETAMEM_LLM_MODEL", raising=False)
    for _ in range(2):
        assert main(["-q", "demo", "--store", str(tmp_path / "demo"), "--top-k", "3"]) == 0
        assert capsys.readouterr().out.count("Q: ") == 5


def test_cli_ingest_appends_and_resumes_on_shipped_data(tmp_path, capsys, monkeypatch):
    """On the bundled demo conversation (no ../shared needed): an ingest of part of the file, then
    of the whole file, adds only the new turns (what an interrupted ingest needs to finish);
    --replace says what it deletes and wants --yes off a terminal."""
    from importlib import resources

    from etamem.cli import main

    monkeypatch.delenv("ETAMEM_LLM_MODEL", raising=False)
    turns = json.loads(resources.files("etamem.data").joinpath("demo_conversation.json").read_text())["turns"]
    part, whole, store = tmp_path / "part.jsonl", tmp_path / "whole.jsonl", tmp_path / "store"
    part.write_text("".join(json.dumps({**t, "space": "demo"}) + "\n" for t in turns[:12]))
    whole.write_text("".join(json.dumps({**t, "space": "demo"}) + "\n" for t in turns))
    run = ["-q", "ingest", "--format", "jsonl", "--store", str(store), "--no-progress"]
    assert main([*run, str(part)]) == 0
    assert "demo: turns 12 (added 12, already present 0)" in capsys.readouterr().out
    assert main([*run, str(whole)]) == 0
    assert f"demo: turns {len(turns)} (added {len(turns) - 12}, already present 12)" in capsys.readouterr().out
    monkeypatch.setattr("sys.stdin.isatty", lambda: False)
    assert main([*run, str(whole), "--replace"]) == 2
    err = capsys.readouterr().err
    assert f"demo: --replace deletes its {len(turns)} turns" in err and "add --yes to confirm" in err
    assert main([*run, str(whole), "--replace", "--yes"]) == 0
    assert f"(added {len(turns)}, already present 0)" in capsys.readouterr().out
    # the store holds one space: search and ask need no --space
    assert main(["-q", "search", str(store), "What is the name of Maya's cat?", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)
    assert main(["-q", "ask", str(store), "What is the name of Maya's cat?"]) == 0
    assert "evidence:" in capsys.readouterr().out


def test_cli_ingest_search_ask(tmp_path, capsys, locomo_dev):
    from etamem.cli import main

    sample = json.loads(locomo_dev.read_text())[0]
    conv = sample["conversation"]
    keep = {k: v for k, v in conv.items() if not k.startswith("session_") or k.split("_")[1] in ("1", "2")}
    sliced = tmp_path / "slice.json"
    sliced.write_text(json.dumps([{**sample, "conversation": keep}]))
    n_turns = len(conv["session_1"]) + len(conv["session_2"])
    store = tmp_path / "store"
    assert main(["-q", "ingest", str(sliced), "--format", "locomo", "--store", str(store), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert f"conv-26: turns {n_turns} (added {n_turns}, already present 0), AMUs" in out and "polarity neg" in out
    assert "total: 1 conversations" in out
    assert main(["-q", "ingest", str(sliced), "--format", "locomo", "--store", str(store)]) == 0
    assert f"(added 0, already present {n_turns})" in capsys.readouterr().out
    assert main(["-q", "search", str(store), "LGBTQ support group", "--space", "conv-26", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert hits and "D1:3" in {t for h in hits[:3] for t in h["source_turn_ids"]}
    assert main(["-q", "ask", str(store), "When did Caroline go to the support group?", "--space", "conv-26",
                 "--now", "2023-06-01"]) == 0
    assert "no LLM is configured" in capsys.readouterr().out
    assert main(["-q", "search", str(store), "x", "--space", "nope"]) == 2
    assert main(["-q", "search", str(tmp_path / "missing"), "x"]) == 2


@pytest.mark.parametrize("verbosity,shown", [(-1, {"own-e"}), (0, {"warn-w", "own-w", "own-e"}),
                                             (1, {"warn-w", "own-w", "own-i", "own-e"}),
                                             (2, {"dbg-x", "warn-w", "own-w", "own-i", "own-e"})])
def test_cli_logging_keeps_third_party_debug_out(verbosity, shown, tmp_path):
    """bm25s sets its logger to DEBUG on import; the CLI shows other libraries' records only
    from WARNING up unless -vv (-q: errors only), and etamem's by the chosen verbosity."""
    import subprocess

    code = (f"from etamem.cli.commands import _setup_logging; _setup_logging({verbosity}); import bm25s, logging; "
            "b = logging.getLogger('bm25s'); b.debug('dbg-x'); b.warning('warn-w'); "
            "e = logging.getLogger('etamem.t'); e.info('own-i'); e.warning('own-w'); e.error('own-e')")
    # cwd outside the checkout, so that PYTHONPATH decides which etamem runs (mutation runs)
    err = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=tmp_path).stderr
    assert {m for m in ("dbg-x", "warn-w", "own-w", "own-i", "own-e") if m in err} == shown
