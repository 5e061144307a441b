"""Edges of the `etamem` command line: a missing store, `-q`, a refused ingest, `--json` output."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "reliability"))
from etamem.cli.commands import main  # noqa: E402
from rel_common import demo_turns, fast_memory  # noqa: E402

TESTS = Path(__file__).resolve().parent


def _fast(monkeypatch):
    """Every command opens its store as `fast_memory` (hashing encoder, no model load)."""
    monkeypatch.setattr("etamem.cli.commands._memory", lambda args, path, preset=None: fast_memory(path))


def _jsonl(path: Path, turns) -> Path:
    path.write_text("".join(json.dumps({**t, "space": "demo"}) + "\n" for t in turns), encoding="utf-8")
    return path


@pytest.fixture
def demo_store(tmp_path):
    store = tmp_path / "store"
    with fast_memory(store) as mem:
        mem.add(demo_turns()[:12], space="demo")
    return store


MISSING_STORE_COMMANDS = [
    ["search", "{store}", "cat"], ["ask", "{store}", "cat?"], ["stats", "{store}"], ["stats", "{store}", "--detail"],
    ["inspect", "{store}"], ["trace", "{store}", "cat"], ["reindex", "{store}"], ["export", "{store}"],
    ["viz", "{store}", "--out", "{tmp}/viz"], ["keys", "list", "{store}"], ["keys", "revoke", "{store}", "abc"],
]


@pytest.mark.parametrize("command", MISSING_STORE_COMMANDS,
                         ids=lambda c: " ".join(a for a in c if "{" not in a)[:16])
def test_a_missing_store_is_one_error_line_with_status_2(command, tmp_path, capsys):
    store = tmp_path / "nowhere"
    argv = [a.format(store=store, tmp=tmp_path) for a in command]
    assert main(["-q", *argv]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [f"etamem: error: no ETAMem store at {store} (expected {store / 'memory.sqlite'})"]
    assert not store.exists()


def test_quiet_ingest_writes_nothing_to_stderr(tmp_path):
    """`-q`: no progress bar, no log line below ERROR (a real process: its own stderr and logging);
    without `-q` the same run shows its bar, so the capture sees what it would show."""
    script = ("import sys; sys.path[:0] = sys.argv[1:3]; import etamem.cli.commands as cli; from rel_common import fast_memory; "
              "cli._memory = lambda args, path, preset=None: fast_memory(path); "
              "import logging; logging.getLogger('some.library').info('info from a library'); "
              "sys.exit(cli.main(sys.argv[3:]))")
    turns = _jsonl(tmp_path / "t.jsonl", demo_turns()[:6])

    def run(*flags, store):
        return subprocess.run([sys.executable, "-c", script, str(TESTS), str(TESTS / "reliability"), *flags,
                               "ingest", str(turns), "--format", "jsonl", "--store", str(tmp_path / store)],
                              capture_output=True, text=True, timeout=120, cwd=tmp_path)

    loud = run(store="a")
    assert loud.returncode == 0, loud.stderr[-2000:]
    assert "turn/s" in loud.stderr or "s/turn" in loud.stderr  # tqdm's bar
    quiet = run("-q", store="b")
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    assert quiet.stderr == ""
    assert "demo: turns 6 (added 6, already present 0)" in quiet.stdout


BAD_TURN = {"space": "demo", "session_id": "s9", "speaker": "Ana", "text": "hello", "timestamp": "not a date"}


@pytest.mark.parametrize("where", ["new", "nested", "empty-dir", "dir-with-a-file"])
def test_a_refused_ingest_leaves_no_store_behind(where, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    _jsonl(bad, demo_turns()[:3])
    with bad.open("a", encoding="utf-8") as f:
        f.write(json.dumps(BAD_TURN) + "\n")
    store = tmp_path / "a" / "b" / "store" if where == "nested" else tmp_path / "store"
    if where in ("empty-dir", "dir-with-a-file"):
        store.mkdir()
    if where == "dir-with-a-file":
        (store / "notes.txt").write_text("mine")
    assert main(["-q", "ingest", str(bad), "--format", "jsonl", "--store", str(store), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"etamem: error: {bad}:4: turn.timestamp: cannot parse 'not a date'")
    if where == "new":
        assert not store.exists()
    elif where == "nested":
        assert not (tmp_path / "a").exists()
    elif where == "empty-dir":
        assert store.is_dir() and list(store.iterdir()) == []
    else:
        assert [p.name for p in store.iterdir()] == ["notes.txt"] and (store / "notes.txt").read_text() == "mine"


def test_a_refused_ingest_into_an_existing_store_keeps_it(demo_store, tmp_path, capsys, monkeypatch):
    _fast(monkeypatch)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(BAD_TURN) + "\n", encoding="utf-8")
    assert main(["-q", "ingest", str(bad), "--format", "jsonl", "--store", str(demo_store)]) == 2
    capsys.readouterr()
    with fast_memory(demo_store) as mem:
        assert len(mem.turns("demo")) == 12


def test_every_json_output_ends_with_one_newline(demo_store, tmp_path, capsys, monkeypatch):
    _fast(monkeypatch)
    with fast_memory(demo_store) as mem:
        amu_id = mem.list("demo")[0].amu_id
    store = str(demo_store)
    for argv in (["search", store, "cat", "--json"], ["stats", store, "--json"], ["stats", store, "--detail", "--json"],
                 ["inspect", store, "--json"], ["inspect", store, "--amu", amu_id, "--json"],
                 ["trace", store, "cat", "--json"], ["keys", "list", store, "--json"], ["export", store]):
        assert main(["-q", *argv]) == 0, argv
        out = capsys.readouterr().out
        assert out.endswith("\n") and not out.endswith("\n\n"), argv
        json.loads(out)
    exported = tmp_path / "export.json"
    assert main(["-q", "export", store, "--out", str(exported)]) == 0
    text = exported.read_text(encoding="utf-8")
    assert text.endswith("}\n") and json.loads(text)["spaces"]
    assert capsys.readouterr() == ("", "")  # -q: no "wrote ..." line either
