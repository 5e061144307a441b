"""README's agent loop with chat messages, run verbatim (the block after
`<!-- chat-loop-example -->`) in a fresh directory: 20 steps of context + add (40 messages), each
with its latency printed, and the final context recalls what the user said about food."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_chat_loop_runs_as_written(tmp_path):
    block = re.search(r"<!-- chat-loop-example -->\n```python\n(.*?)```", README.read_text(), re.S).group(1)
    env = {k: v for k, v in os.environ.items() if k not in ("ETAMEM_LLM_MODEL", "OPENAI_BASE_URL")}
    env["HF_HUB_OFFLINE"] = "1"
    out = subprocess.run([sys.executable, "-c", block], capture_output=True, text=True, timeout=600, env=env,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    steps = re.findall(r"^step +(\d+): context +[\d.]+ ms, add +[\d.]+ ms$", out.stdout, re.M)
    assert [int(s) for s in steps] == list(range(1, 21)), out.stdout
    memory = out.stdout.split("step 20:", 1)[1]
    assert "vegan" in memory.lower() and "[" in memory, memory  # the user's diet, dated
    assert (tmp_path / "stores" / "dana" / "memory.sqlite").is_file()
