"""The documentation stays true: the CLI reference matches the parsers, README's and the docs'
offline examples run, the JSONL format shown is the one the reader takes, and no page points
outside the repository."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import HashingEncoder

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def _block(path: Path, marker: str, lang: str) -> str:
    found = re.search(rf"<!-- {marker} -->\n```{lang}\n(.*?)```", path.read_text(encoding="utf-8"), re.S)
    assert found, f"{path.name}: no ```{lang} block after <!-- {marker} -->"
    return found.group(1)


def _gen_cli():
    spec = importlib.util.spec_from_file_location("gen_cli", DOCS / "gen_cli.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cli_reference_is_current():
    """docs/cli.md is exactly what docs/gen_cli.py writes from today's parsers."""
    committed = (DOCS / "cli.md").read_text(encoding="utf-8")
    assert _gen_cli().render() == committed, "docs/cli.md is out of date: run python docs/gen_cli.py"


def test_cli_reference_lists_every_command():
    page = (DOCS / "cli.md").read_text(encoding="utf-8")
    for command in ("demo", "ingest", "search", "ask", "stats", "reindex", "inspect", "trace", "export", "viz",
                    "serve", "mcp", "keys", "bench"):
        assert f"\n## etamem {command}\n" in page and f"usage: etamem {command}" in page, command


def test_readme_python_example_runs(tmp_path, monkeypatch, capsys):
    """README's Python example, verbatim, on a fast hashing encoder (the real one is tested elsewhere)."""
    import etamem
    from etamem.memory import Memory
    from etamem.models.affect import VaderAffectTagger
    from etamem.models.encoders import CachedEncoder

    def fast(path=None, config=None):
        enc = CachedEncoder(HashingEncoder())
        return Memory(path, config, text_encoder=enc, affect_tagger=VaderAffectTagger(enc))

    monkeypatch.setattr(etamem, "Memory", fast, raising=False)
    monkeypatch.chdir(tmp_path)
    code = _block(README, "python-example", "python")
    for _ in range(2):  # ids make it safe to run again: the second run stores nothing new
        exec(compile(code, "README python-example", "exec"), {"__name__": "readme_example"})
    out = capsys.readouterr().out
    assert "Miso" in out and "('s1:1',)" in out, out
    assert "Lyon" in out, out  # the context for the system prompt
    with Memory(tmp_path / "stores" / "alice", text_encoder=CachedEncoder(HashingEncoder())) as mem:
        assert [t.turn_id for t in mem.turns("alice")] == ["s1:1", "s1:2"]


def test_chat_loop_copies_agree():
    """The agent loop is shown in README (run by test_readme_chat_loop.py) and in Getting started."""
    readme = _block(README, "chat-loop-example", "python")
    assert _block(DOCS / "getting-started.md", "chat-loop-example", "python") == readme


def _json_lines(path: Path) -> list[str]:
    return [m for m in re.findall(r"```json\n(.*?)```", path.read_text(encoding="utf-8"), re.S)]


@pytest.mark.parametrize("page", [README, DOCS / "getting-started.md"], ids=["README", "getting-started"])
def test_jsonl_turn_line_is_read_as_shown(page, tmp_path):
    """The JSONL turn line shown is accepted by `etamem ingest --format jsonl`'s reader; a line
    without `space` goes to the space `default`."""
    from etamem.ingest.datasets import read_jsonl

    shown = _json_lines(page)
    assert len(shown) == 1, shown
    line = shown[0].strip()
    row = json.loads(line)
    other = {k: v for k, v in row.items() if k != "space"} | {"turn_id": "s1:2", "text": "Miso is two."}
    path = tmp_path / "talk.jsonl"
    path.write_text(line + "\n" + json.dumps(other) + "\n", encoding="utf-8")
    convs = {c.space: c.turns for c in read_jsonl(path)}
    assert set(convs) == {row["space"], "default"}
    assert convs[row["space"]][0]["text"] == row["text"] and convs["default"][0]["turn_id"] == "s1:2"


def _pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


@pytest.mark.parametrize("page", _pages(), ids=lambda p: p.name)
def test_no_pointer_outside_the_repository(page):
    text = page.read_text(encoding="utf-8")
    assert "../shared" not in text, f"{page.name} points outside the repository"
    assert not re.search(r"\bissues? #?\d+", text, re.I), f"{page.name} cites an issue number"
    assert "DESIGN §" not in text, f"{page.name} cites a design document outside the repository"


def test_readme_is_a_front_door():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= 250


def test_docs_build_strict(tmp_path):
    """`mkdocs build --strict` (broken links and anchors fail) when the docs extra is installed."""
    pytest.importorskip("mkdocs", reason="the docs extra: pip install -e '.[docs]'")
    pytest.importorskip("mkdocstrings", reason="the docs extra: pip install -e '.[docs]'")
    mkdocs = shutil.which("mkdocs", path=str(Path(sys.executable).parent)) or shutil.which("mkdocs")
    out = subprocess.run([mkdocs, "build", "--strict", "-d", str(tmp_path / "site")], cwd=ROOT,
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
