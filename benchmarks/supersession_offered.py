"""Where the LLM supersession classifier fails on an update set: for each scenario of the test
split, was the old statement offered to the LLM beside the new one, and did the LLM say it was
replaced? Reads the LLM response cache of an `etamem bench updates ... --set supersession=llm`
run (OUT/llm_cache.sqlite). Statements are matched by their words of four letters or more (the
extractor rewrites "I" as "the user"), so the counts are approximate.

    python -m benchmarks.supersession_offered etamem/data/updates_holdout3.json OUT/llm_cache.sqlite

The reach of a candidate gate (`Config.supersession_llm_gate`) without a model: the same run with
supersession=llm against a local endpoint that replaces nothing (no model, a second a set), then
the counts of its calls and of the scenarios whose old statement was offered:

    python -m benchmarks.supersession_offered --reach slots etamem/data/updates_holdout3.json
"""
from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from etamem.facts.llm_supersession import parse_reply

_PROMPT = re.compile(r"New statement:\n(.*?)\n\nOlder statements:\n(.*?)\n\nAnswer", re.S)


def _words(t: str) -> set[str]:
    return set(re.findall(r"[a-z]{4,}", t.lower()))


def offered(data: str, cache: str) -> dict:
    """{"scenarios", "offered", "replaced", "calls"} for the test split of `data`."""
    scenarios = [s for s in json.load(open(data))["scenarios"] if s["split"] == "test"]
    calls = []
    for request, response in sqlite3.connect(cache).execute("select request, response from responses"):
        m = _PROMPT.search(request)
        if m:
            calls.append((m.group(1), m.group(2), response))
    n_offered = n_replaced = 0
    for s in scenarios:
        new_words, old_words = _words(s["new"]), _words(s["old"])
        hit = None
        for new, candidates, response in calls:
            if len(_words(new) & new_words) >= max(2, 0.5 * len(_words(new))):
                for line in candidates.splitlines():
                    if len(_words(line) & old_words) >= max(2, 0.5 * len(old_words)):
                        hit = (line.split(" ")[1], [c.split(" ")[1] for c in candidates.splitlines()], response)
        if hit:
            n_offered += 1
            try:  # read as the engine reads it; an unusable reply falls back to the rules there
                n_replaced += hit[0] in {uid for uid, _ in parse_reply(hit[2], hit[1])}
            except ValueError:
                pass
    return {"scenarios": len(scenarios), "offered": n_offered, "replaced": n_replaced, "calls": len(calls)}


class _NothingReplaced(BaseHTTPRequestHandler):
    """An OpenAI-compatible chat endpoint whose every reply is `{"replaced": []}`."""

    def do_POST(self):  # noqa: N802 (the http.server name)
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = json.dumps({"id": "r", "object": "chat.completion", "model": "none", "choices": [
            {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": '{"replaced": []}'}}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def reach(gate: str, data: str, filler: str = "../shared/data/prefeval") -> dict:
    """`offered` of a `supersession=llm` run with `gate` (test split, filler cut to one chat of two
    messages as in docs/benchmarks.md) against an endpoint that replaces nothing."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NothingReplaced)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with tempfile.TemporaryDirectory() as out:
            env = dict(os.environ, OPENAI_BASE_URL=f"http://127.0.0.1:{server.server_port}/v1",
                       OPENAI_API_KEY="not-needed", ETAMEM_LLM_MODEL="nothing-replaced")
            subprocess.run([sys.executable, "-m", "etamem", "-q", "bench", "updates", data, "--split", "test",
                            "--filler", filler, "--filler-chats", "1", "--filler-turns", "2", "--systems", "etamem",
                            "--set", "extractor=rule", "--set", "llm_summaries=false", "--set", "supersession=llm",
                            "--set", "restatements=rules", "--set", f'supersession_llm_gate="{gate}"',
                            "--out", out, "--no-plots"], env=env, check=True, stdout=subprocess.DEVNULL)
            return {"gate": gate, **offered(data, os.path.join(out, "llm_cache.sqlite"))}
    finally:
        server.shutdown()


if __name__ == "__main__":
    if sys.argv[1] == "--reach":
        print(json.dumps(reach(sys.argv[2], sys.argv[3], *sys.argv[4:5])))
    else:
        print(json.dumps(offered(sys.argv[1], sys.argv[2])))
