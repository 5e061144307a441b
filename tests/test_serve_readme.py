"""The serving examples, run verbatim with bash (the block after `<!-- serve-example -->`) against
a fresh store directory: the full one of docs/serving-and-security.md (add, search, a chat message,
context, another space refused) and README's short one (add, search)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the server extra: pip install -e '.[serve]'")
pytest.importorskip("uvicorn", reason="the server extra: pip install -e '.[serve]'")
ROOT = Path(__file__).resolve().parents[1]
SERVING = ROOT / "docs" / "serving-and-security.md"
README = ROOT / "README.md"


def _run_block(page: Path, tmp_path) -> tuple[list[dict], str]:
    """Run the page's serve example with a fresh store; its JSON replies and its stdout."""
    block = re.search(r"<!-- serve-example -->\n```bash\n(.*?)```", page.read_text(), re.S).group(1)
    store = tmp_path / "served"
    script = block.replace("/tmp/etamem-served", str(store))  # a fresh store for the test; nothing else changes
    env = {k: v for k, v in os.environ.items() if k not in ("ETAMEM_LLM_MODEL", "ETAMEM_ADMIN_KEY")}
    port = re.search(r"--port (\d+)", block).group(1)
    out = subprocess.run(["bash", "-euo", "pipefail", "-c", script + "\nwait\n"], capture_output=True, text=True,
                         timeout=300, env=env, cwd=tmp_path)
    assert out.returncode == 0, (port, out.stdout[-2000:], out.stderr[-2000:])
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")], out.stdout


@pytest.mark.skipif(shutil.which("curl") is None, reason="the example uses curl")
def test_docs_serve_example_runs_as_written(tmp_path):
    replies, stdout = _run_block(SERVING, tmp_path)
    added, found, refused = replies[-3:] if len(replies) >= 3 else (None, None, None)
    assert added and added["units"] and "Miso" in added["units"][0]["text"], stdout
    assert "Miso" in found["hits"][0]["unit"]["text"], stdout
    assert refused["error"]["code"] == "forbidden", stdout


@pytest.mark.skipif(shutil.which("curl") is None, reason="the example uses curl")
def test_readme_serve_example_runs_as_written(tmp_path):
    replies, stdout = _run_block(README, tmp_path)
    assert len(replies) == 2, stdout
    added, found = replies
    assert added["units"] and "Miso" in added["units"][0]["text"], stdout
    assert "Miso" in found["hits"][0]["unit"]["text"], stdout
