"""Where the LLM supersession classifier fails on an update set: for each scenario of the test
split, was the old statement offered to the LLM beside the new one, and did the LLM say it was
replaced? Reads the LLM response cache of an `etamem bench updates ... --set supersession=llm`
run (OUT/llm_cache.sqlite). Statements are matched by their words of four letters or more (the
extractor rewrites "I" as "the user"), so the counts are approximate.

    python -m benchmarks.supersession_offered etamem/data/updates_holdout3.json OUT/llm_cache.sqlite
"""
from __future__ import annotations

import json
import re
import sqlite3
import sys

from etamem.facts.supersession import parse_reply

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


if __name__ == "__main__":
    print(json.dumps(offered(sys.argv[1], sys.argv[2])))
