"""README's three framework blocks (LangGraph store, OpenAI Agents SDK session, LlamaIndex memory
block) run as written, with the default models, each in a fresh directory, and print what they
promise."""
import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def _block(marker: str) -> str:
    found = re.search(rf"<!-- {marker} -->\n```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert found, f"README: no python block after <!-- {marker} -->"
    return found.group(1)


@pytest.mark.parametrize("marker,package,expect", [
    ("langgraph-example", "langgraph", "Miso"),
    ("openai-agents-example", "agents", "cello"),
    ("llamaindex-example", "llama_index.core", "Miso"),
])
def test_readme_framework_block_runs(marker, package, expect, tmp_path, monkeypatch, capsys):
    pytest.importorskip(package, reason=f"the {marker.split('-example')[0]} extra is not installed")
    monkeypatch.chdir(tmp_path)
    exec(compile(_block(marker), f"README {marker}", "exec"), {"__name__": "readme_framework"})
    out = capsys.readouterr().out
    assert expect in out, out
    assert (tmp_path / "stores").is_dir()  # the memory went to a store on disk
