"""`etamem export --format chat`, `etamem import` and `etamem delete` (etamem/cli/data.py): a space
moves between stores as chat JSONL with its ids, speakers, sessions, times and extras (metadata
included); delete forgets a turn, a unit or (confirmed) a whole space."""
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "reliability"))
from etamem.cli.commands import main  # noqa: E402
from rel_common import demo_turns, fast_memory  # noqa: E402


@pytest.fixture(autouse=True)
def _fast(monkeypatch):
    """Every command opens its store as `fast_memory` (hashing encoder, no model load)."""
    fast = lambda args, path, preset=None: fast_memory(path)  # noqa: E731
    monkeypatch.setattr("etamem.cli.commands._memory", fast)
    monkeypatch.setattr("etamem.cli.data.open_memory", fast)


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "store"
    turns = demo_turns()[:10]
    turns[0] = {**turns[0], "extra": {"metadata": {"channel": "web", "mood": 3}, "name": "Maya"}}
    with fast_memory(path) as mem:
        mem.add(turns, space="demo")
        mem.add([{"turn_id": "x1", "session_id": "z", "speaker": "user", "text": "I am vegan since May.",
                  "timestamp": "2024-05-02T09:00:00+02:00"}], space="other")
    return path


def turns_of(path, space):
    with fast_memory(path) as mem:
        return [(t.turn_id, t.session_id, t.speaker, t.text, t.timestamp, t.extra) for t in mem.turns(space)]


def test_export_import_round_trip_keeps_every_turn(store, tmp_path):
    out = tmp_path / "chat.jsonl"
    assert main(["-q", "export", str(store), "--format", "chat", "--out", str(out)]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert {m["space"] for m in lines} == {"demo", "other"} and len(lines) == 11
    assert lines[0]["extra"]["metadata"] == {"channel": "web", "mood": 3}
    copy = tmp_path / "copy"
    assert main(["-q", "import", str(out), "--store", str(copy), "--no-progress"]) == 0
    for space in ("demo", "other"):
        assert turns_of(copy, space) == turns_of(store, space)
    again = tmp_path / "again.jsonl"
    assert main(["-q", "export", str(copy), "--format", "chat", "--out", str(again)]) == 0
    assert again.read_text() == out.read_text()
    with fast_memory(copy) as mem:  # imported turns are extracted into units and found
        assert any("vegan" in h.amu.text for h in mem.search("what does the user eat?", space="other", top_k=3))


def test_import_into_one_space_and_export_one_space(store, tmp_path, capsys):
    assert main(["-q", "export", str(store), "--format", "chat", "--space", "other"]) == 0
    printed = capsys.readouterr().out
    assert [json.loads(line)["id"] for line in printed.splitlines()] == ["x1"]
    out = tmp_path / "one.jsonl"
    out.write_text(printed)
    copy = tmp_path / "copy"
    assert main(["-q", "import", str(out), "--store", str(copy), "--space", "ana", "--no-progress"]) == 0
    with fast_memory(copy) as mem:
        assert mem.spaces() == ["ana"] and [t.turn_id for t in mem.turns("ana")] == ["x1"]
    assert main(["-q", "export", str(store), "--format", "chat", "--space", "nope"]) == 2


def test_delete_a_turn_a_unit_and_a_space(store, capsys):
    with fast_memory(store) as mem:
        turn = mem.turns("demo")[1]
        unit = next(a for a in mem.list("demo") if turn.turn_id not in a.source_turn_ids)
        n_units = len(mem.list("demo"))
    assert main(["-q", "delete", str(store), "--space", "demo", "--turn", turn.turn_id]) == 0
    assert main(["-q", "delete", str(store), "--space", "demo", "--unit", unit.amu_id]) == 0
    assert "deleted unit" in capsys.readouterr().out
    with fast_memory(store) as mem:
        assert turn.turn_id not in [t.turn_id for t in mem.turns("demo")]
        assert unit.amu_id not in [a.amu_id for a in mem.list("demo")] and len(mem.list("demo")) < n_units
    assert main(["-q", "delete", str(store), "--space", "demo", "--turn", "nope"]) == 2
    assert main(["-q", "delete", str(store), "--space", "demo", "--turn", "a", "--unit", "b"]) == 2
    assert main(["-q", "delete", str(store), "--space", "demo"]) == 2  # a whole space: --yes off a terminal
    assert main(["-q", "delete", str(store), "--space", "demo", "--yes"]) == 0
    with fast_memory(store) as mem:
        assert mem.spaces() == ["other"]
