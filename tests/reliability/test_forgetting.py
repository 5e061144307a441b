"""Delete forgets (DESIGN §11) and spaces never leak into each other.

A canary string is added, made to reach every copy the engine keeps (units, raw turns, node
summaries, the vector cache, derived index files), deleted by each of the three deletes, and
then looked for in search results, the export and every byte of every file of the store.
"""
import json
import re

import pytest

from etamem.inspection.reports import export_store
from etamem.models.cache_scope import key as cache_key
from etamem.retrieval import turn_text
from rel_common import conversation, fast_memory, files_containing, isolation_run, view_problems

CANARY = "canaryzq7x91"
CANARY_TURN = {"session_id": "c", "speaker": "Ana", "turn_id": "c:0", "timestamp": "2023-07-01T10:00:00+00:00",
               "text": f"My gym locker code is {CANARY} and nobody knows it. I like green tea with honey a lot."}
OTHER_TURN = {"session_id": "c", "speaker": "Ben", "turn_id": "c:1", "timestamp": "2023-07-01T10:01:00+00:00",
              "text": "Green tea with honey sounds lovely, I prefer coffee in the morning."}
QUERIES = ["gym locker code", CANARY, "what is Ana's locker code", "green tea honey"]


def seen(mem, space) -> list[str]:
    """Every text a search of the space shows: hits (views and raw turns) and their source turns."""
    out = []
    for q in QUERIES:
        for fallback in (True, False):
            res = mem.retrieve(q, space=space, top_k=50, fallback=fallback)
            for h in res.hits:
                out.append(h.amu.text)
                out += [t.text for t in mem.turns(space, turn_ids=list(h.source_turn_ids))]
    return out


TURN_RE = re.compile(r"Turn to process \([^)]*\):\n(.*?)\n\nRules:", re.S)


def echo_llm(request: dict) -> str:
    """Extraction: the turn's sentences as facts; summaries and answers: the whole prompt back
    (so every reply quotes what it was given)."""
    prompt = request["messages"][-1]["content"]
    m = TURN_RE.search(prompt)
    if m is None:
        return "Summary: " + " ".join(prompt.split()[-120:])
    return json.dumps({"facts": [f"Fact: {t}" for t in m.group(1).split(". ") if t.strip()]})


def canary_memory(path, server=None):
    llm = {} if server is None else {"llm_model": "m", "llm_base_url": server.base_url, "llm_api_key": "k",
                                     "llm_max_retries": 0}
    mem = fast_memory(path, summary_delta=1, **llm)
    mem.add(conversation("u", 3, 6), space="u")
    mem.add([CANARY_TURN, OTHER_TURN], space="u")
    mem.add(conversation("u-later", 2, 4, day0=60), space="u")  # a new session ends the canary's
    mem.add(conversation("v", 3, 6), space="v")
    mem.end_session("u")
    for space in ("u", "v"):  # the LLM units of both spaces written before anything is compared
        mem.flush(space, timeout=60)
    mem.checkpoint()
    return mem


@pytest.mark.parametrize("llm", [False, True], ids=["offline", "llm"])
@pytest.mark.parametrize("how", ["amu", "turn", "space"])
def test_a_deleted_canary_is_found_nowhere(tmp_path, how, llm, chat_server):
    """Offline, and with an LLM (extraction, LLM summaries quoting the canary, an answer): the
    LLM cache holds the canary in requests and replies until the delete."""
    root = tmp_path / "store"
    chat_server.responder = echo_llm
    mem = canary_memory(root, chat_server if llm else None)
    if llm:
        mem.answer("What is Ana's gym locker code?", space="u")
        assert "llm_cache.sqlite" in files_containing(root, CANARY.encode()) or \
            "llm_cache.sqlite-wal" in files_containing(root, CANARY.encode())
    unit = next(a for a in mem.list("u") if CANARY in a.text)
    # before: every copy holds it (else the test could not fail)
    assert any(CANARY in t for t in seen(mem, "u"))
    summaries = [n.summary or "" for n in mem.views("u").time.nodes.values()]
    assert any(CANARY in s for s in summaries), "the canary should be quoted by a Time summary"
    assert {"memory.sqlite", "memory.sqlite-wal"} & set(files_containing(root, CANARY.encode()))
    assert any(f.startswith("derived") for f in files_containing(root, CANARY.encode()))
    v_before = [(h.amu.amu_id, round(h.score, 6)) for h in mem.search("green tea", space="v", top_k=20)]
    n_units = len(mem.list("u"))
    turn = mem.turns("u", turn_ids=["c:0"])[0]
    assert len(mem.store.get_vectors("text", mem.text_encoder.name, [cache_key(unit.text, "u")])) == 1

    if how == "amu":
        assert mem.delete(unit.amu_id, "u") == 1
        kept = mem.turns("u", turn_ids=["c:0"])[0].text  # the rest of the turn stays
        assert CANARY not in kept and "green tea" in kept
        assert len(mem.list("u")) == n_units - 1
    elif how == "turn":
        assert mem.delete(turn_id="c:0", space="u") >= 1
        assert not mem.turns("u", turn_ids=["c:0"]) and mem.turns("u", turn_ids=["c:1"])
    else:
        assert mem.delete(space="u") == n_units
        assert mem.spaces() == ["v"]
    mem.checkpoint()
    enc = mem.text_encoder
    assert mem.store.get_vectors("text", enc.name, [cache_key(unit.text, "u"), cache_key(turn_text(turn), "u")]) == {}

    if how != "space":
        assert not any(CANARY in t for t in seen(mem, "u"))
        assert not any(CANARY in (n.summary or "") for n in mem.views("u").time.nodes.values())
        assert not view_problems(mem.store, "u")
    assert CANARY not in json.dumps(export_store(mem).to_dict(), ensure_ascii=False)
    assert [(h.amu.amu_id, round(h.score, 6)) for h in mem.search("green tea", space="v", top_k=20)] == v_before
    assert files_containing(root, CANARY.encode()) == []  # while open: the WAL was truncated
    mem.close()
    assert files_containing(root, CANARY.encode()) == []
    again = fast_memory(root)  # reopened from the files: still gone
    if how != "space":
        assert not any(CANARY in t for t in seen(again, "u"))
    again.close()


def test_delete_errors_are_clear(tmp_path):
    mem = fast_memory(tmp_path / "s")
    mem.add(conversation("u", 1, 3), space="u")
    with pytest.raises(KeyError, match="no AMU"):
        mem.delete("nope#0", "u")
    with pytest.raises(KeyError, match="no turn"):
        mem.delete(turn_id="nope", space="u")
    with pytest.raises(ValueError, match="not both"):
        mem.delete("us0:0#0", "u", turn_id="us0:0")
    with pytest.raises(ValueError, match="unknown space"):
        mem.delete(space="w")
    mem.close()


def test_fifty_spaces_never_leak(tmp_path):
    """The same texts in 50 spaces under different turn ids: 1,000 searches return only the
    searched space's turns; deleting one space leaves the others' counts and results as they were."""
    run = isolation_run(tmp_path / "s")
    assert run["searches"] == 1000 and run["leaks"] == 0
    assert run["deleted_gone"] and run["spaces_left"] == 49
    assert run["spaces_changed_by_a_delete"] == 0
