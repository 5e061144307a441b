"""A deleted unit leaves every node summary and representative list that quotes or names it,
wherever it sits now: tree maintenance moves units between nodes and a summary is refreshed only
every `summary_delta` changes below its node, so nodes that are no longer above a unit may still
quote it. Every sentence carries its own canary token (see `rel_summaries`), looked for after
each delete in the views and the saved node rows, and at the end in the export, the subtree
inspection and every byte of every file of the store.
"""
import json
import sqlite3

import numpy as np
import pytest

from etamem.inspection.reports import export_store, subtree
from etamem.views import VIEWS, tree_maintenance
from rel_common import files_containing
from rel_summaries import (
    SPACE,
    TOKEN_RE,
    add_session,
    below,
    delete_random,
    ingest_with_deletes,
    node_texts,
    open_space,
    stale_quotes,
    stale_summary_run,
    turns_with_canaries,
)


def echo_summariser(child_texts: list[str], rep_texts: list[str]) -> str:
    """An LLM summariser that quotes everything it is given."""
    return "Summary: " + " ".join(child_texts + rep_texts)


def leftovers(mem, root, deleted: dict[str, set[str]]) -> dict[str, list[str]]:
    """Canary tokens of deleted units still found in the export, the subtree inspection of each
    view, and the store's files (after a checkpoint)."""
    mem.checkpoint()
    tokens = {t for toks in deleted.values() for t in toks}
    export = json.dumps(export_store(mem).to_dict(), ensure_ascii=False)
    trees = json.dumps([subtree(mem, SPACE, v).to_dict() for v in VIEWS], ensure_ascii=False)
    blobs = [p.read_bytes() for p in root.rglob("*") if p.is_file()]
    found = {"export": sorted(t for t in tokens if t in export), "subtree": sorted(t for t in tokens if t in trees),
             "files": [f"{t}: {files_containing(root, t.encode())}" for t in sorted(tokens)
                       if any(t.encode() in b for b in blobs)]}
    return {k: v for k, v in found.items() if v}


def assert_canaries_unique(mem) -> None:
    seen = [t for a in mem.list(SPACE) for t in TOKEN_RE.findall(a.text)]
    assert seen and len(seen) == len(set(seen))


@pytest.mark.parametrize("seed", [0, 3])
def test_random_deletes_during_ingest_leave_no_quote_of_a_deleted_unit(tmp_path, seed):
    """48 sessions with 2 random unit deletes after each (96 of 384 units): after every delete no
    summary or representative list, loaded or saved, quotes or names a deleted unit; at the end
    neither the export, the subtree inspection nor any file of the store holds its text."""
    root = tmp_path / "store"
    mem = open_space(root)
    stale, deleted = ingest_with_deletes(mem, seed)
    assert len(deleted) == 96
    assert_canaries_unique(mem)
    views = mem.views(SPACE)
    assert views.event.stats["regroups"] and views.affect.stats["regroups"]  # units did move
    assert sorted(stale) == []
    assert leftovers(mem, root, deleted) == {}
    mem.close()
    again = open_space(root)  # reopened from the files
    assert stale_quotes(again, deleted) == set()
    again.close()


def test_random_deletes_after_ingest_leave_no_copy_anywhere(tmp_path):
    """48 sessions ingested, then 24 random unit deletes: no quote of a deleted unit after any of
    them, nor in the export, the subtree inspection or the store's files at the end."""
    root = tmp_path / "store"
    mem = open_space(root)
    ingest_with_deletes(mem, deletes_per_session=0, check=False)
    stale: set = set()
    deleted = delete_random(mem, 24, np.random.default_rng(103), lambda d: stale.update(stale_quotes(mem, d)))
    assert sorted(stale) == []
    assert leftovers(mem, root, deleted) == {}
    mem.close()


@pytest.mark.parametrize("cap", [None, 8], ids=["recorded", "capped"])
def test_llm_summaries_quoting_a_deleted_unit_do_not_survive(tmp_path, monkeypatch, cap):
    """Summaries from an LLM that quotes every child text it is given (the whole subtree): a
    node whose summary quotes a deleted unit gets an extractive one, wherever the unit sits now;
    with a small cap the records say "anything" and those summaries are recomputed at each delete."""
    if cap is not None:
        monkeypatch.setattr(tree_maintenance, "QUOTES_CAP", cap)
    root = tmp_path / "store"
    mem = open_space(root)
    mem.summariser = lambda: echo_summariser
    stale, deleted = ingest_with_deletes(mem, 1, n_sessions=32, deletes_per_session=2)
    assert any(s.startswith("Summary: ") for _, _, s, _ in node_texts(mem.views(SPACE)))  # LLM summaries kept
    assert sorted(stale) == []
    assert leftovers(mem, root, deleted) == {}
    mem.close()


def test_a_unit_moved_away_from_a_summary_that_quotes_it(tmp_path):
    """The finding itself: a summary quoting a unit that maintenance has moved out from under
    its node; deleting that unit takes it out of the summary."""
    mem = open_space(tmp_path / "store")
    turns = turns_with_canaries(48, 8)
    moved = []
    for s in range(48):
        add_session(mem, turns, s)
        views = mem.views(SPACE)
        unit_of = {t: a.amu_id for a in mem.list(SPACE) for t in TOKEN_RE.findall(a.text)}
        moved = [(view, node, unit_of[t]) for view, node, summary, _ in node_texts(views)
                 for t in TOKEN_RE.findall(summary) if t in unit_of and unit_of[t] not in below(views, view, node)]
        if moved:
            break
    assert moved, "maintenance should have moved a quoted unit away"
    view, node, unit = moved[0]
    tokens = {unit: set(TOKEN_RE.findall(mem.get(unit, SPACE).text))}
    mem.delete(SPACE, unit)
    assert stale_quotes(mem, tokens) == set()
    assert leftovers(mem, tmp_path / "store", tokens) == {}
    mem.close()


def test_a_store_without_quote_records_is_handled_conservatively(tmp_path):
    """Node rows saved without the record of what their summary quotes (an older store), with
    LLM summaries among them: after reopening, deletes leave no quote of a deleted unit."""
    root = tmp_path / "store"
    mem = open_space(root)
    mem.summariser = lambda: echo_summariser
    ingest_with_deletes(mem, n_sessions=32, deletes_per_session=0, check=False)
    mem.close()
    with sqlite3.connect(root / "memory.sqlite") as db:
        n = db.execute("UPDATE nodes SET info = json_remove(info, '$.quotes') WHERE info LIKE '%quotes%'").rowcount
    db.close()
    assert n > 0
    mem = open_space(root)
    stale: set = set()
    deleted = delete_random(mem, 40, np.random.default_rng(1), lambda d: stale.update(stale_quotes(mem, d)))
    assert sorted(stale) == []
    assert leftovers(mem, root, deleted) == {}
    mem.close()


def test_stale_summary_run_figures(tmp_path):
    run = stale_summary_run(tmp_path, seed=0, n_sessions=24, deletes_per_session=2)
    assert run["deletes"] == 48 and run["deleted_units"] == 48 and run["units"] == 192
    assert run["stale_quotes"] == 0 and run["nodes"] > 0
