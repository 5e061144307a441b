"""Stale node summaries after deletes: a space large enough for tree maintenance to split, merge
and regroup nodes (so units move between them), random unit deletes, and a count of the node
summaries and representative lists that still quote or name a deleted unit.

Every sentence of every turn carries its own canary token (`qv` + five consonants) that appears
nowhere else, so a quote of a unit is found by its tokens whatever the rest of its text shares
with other units.
"""
from __future__ import annotations

import json
import re
from datetime import timedelta
from pathlib import Path

import numpy as np

from rel_common import T0, WORDS, fast_memory

SPACE = "u"
TOKEN_RE = re.compile(r"qv[b-z]{5}")
_CONSONANTS = "bcdfghjklmnpqrstvwxz"
PLACES = ("bakery", "library", "station", "market", "museum", "garage", "harbour", "clinic", "school", "office")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")


def token(k: int) -> str:
    """The k-th canary token: `qv` and five consonants (20**5 of them, none inside another)."""
    out = "qv"
    for _ in range(5):
        out += _CONSONANTS[k % 20]
        k //= 20
    return out


def turns_with_canaries(n_sessions: int = 12, per_session: int = 24) -> list[dict]:
    """Turns of `n_sessions` sessions three days apart; even turns are affective (Affect tree),
    odd ones neutral facts (Event tree); each sentence ends with its own canary token."""
    out, k = [], 0
    for s in range(n_sessions):
        start = T0 + timedelta(days=3 * s)
        for i in range(per_session):
            a, b = WORDS[(7 * s + i) % len(WORDS)], WORDS[(3 * s + 5 * i + 1) % len(WORDS)]
            if i % 2 == 0:
                text = (f"I really enjoyed the {a} last weekend with my sister {token(k)}. "
                        f"The {b} was wonderful {token(k + 1)}.")
            else:
                place, day = PLACES[(s + 3 * i) % len(PLACES)], DAYS[(s + i) % len(DAYS)]
                text = f"The {place} near the {a} opens at nine on {day} {token(k)}."
            k += 2
            out.append({"session_id": f"s{s}", "speaker": ("Ana", "Ben")[i % 2], "turn_id": f"s{s}:{i}",
                        "text": text, "timestamp": (start + timedelta(minutes=i)).isoformat()})
    return out


# narrow nodes, so the trees are deep and maintenance regroups (moves units between inner nodes)
# often; summaries refreshed only every 16 changes below a node, so they lag behind the moves
VIEW_CONFIG = {"b_max": 3, "summary_delta": 16}


def open_space(root: Path, **cfg):
    """A fast `Memory` at `root` with `VIEW_CONFIG` (overridden by `cfg`)."""
    return fast_memory(root, **{**VIEW_CONFIG, **cfg})


def add_session(mem, turns: list[dict], s: int) -> None:
    """Add session number `s` of `turns` to `SPACE` and end it (maintenance)."""
    mem.add([t for t in turns if t["session_id"] == f"s{s}"], space=SPACE)
    mem.end_session(SPACE)


def delete_random(mem, n: int, rng: np.random.Generator, after=None) -> dict[str, set[str]]:
    """Delete `n` units of `SPACE` picked by `rng`, one `Memory.delete` each, calling
    `after(deleted so far)` after each; returns deleted unit id -> its canary tokens (a delete
    may take more units than asked: those of a turn that goes with them)."""
    tokens = {a.amu_id: set(TOKEN_RE.findall(a.text)) for a in mem.list(SPACE)}
    deleted: dict[str, set[str]] = {}
    for _ in range(n):
        live = [a.amu_id for a in mem.list(SPACE)]
        if not live:
            break
        mem.delete(SPACE, live[int(rng.integers(len(live)))])
        left = {a.amu_id for a in mem.list(SPACE)}
        deleted.update((a, tokens[a]) for a in tokens if a not in left)
        if after is not None:
            after(deleted)
    return deleted


def node_texts(views) -> list[tuple[str, object, str, list[str]]]:
    """(view, node, summary, representative unit ids) of every live node with a summary or
    representatives."""
    out = []
    for view in ("event", "affect"):
        tree = views.tree(view)
        for n in np.flatnonzero(tree.alive[: tree.n_nodes]).tolist():
            reps = [tree.amu_ids[r] for r in tree.reps[n]]
            if tree.summary[n] or reps:
                out.append((view, n, tree.summary[n] or "", reps))
    for key, node in views.time.nodes.items():
        if node.summary:
            out.append(("time", key, node.summary, []))
    return out


def below(views, view: str, node) -> set[str]:
    """Unit ids below a node now."""
    if view == "time":
        forest = views.time
        return {a for a, s in forest.amu_session.items() if node in forest.path(f"S:{s}")}
    tree = views.tree(view)
    return {a for a, r in tree.row_of.items() if node in tree.path(int(tree.leaf_of[r]))}


def stale_quotes(mem, deleted: dict[str, set[str]], saved: bool = True) -> set[tuple]:
    """(where, view, node, unit id) for every quote of a deleted unit in a node summary and every
    representative list naming one: `where` is "views" (the loaded views) or "store" (the saved
    node rows, summary and `info`; skipped when `saved` is False)."""
    gone = {t: a for a, toks in deleted.items() for t in toks}
    out = set()
    for view, node, summary, reps in node_texts(mem.views(SPACE)):
        out.update(("views", view, str(node), gone[t]) for t in TOKEN_RE.findall(summary) if t in gone)
        out.update(("views", view, str(node), a) for a in reps if a in deleted)
    if saved:
        for view, (_, _, rows, _) in mem.store.load_views(SPACE).items():
            for r in rows:
                text = (r["summary"] or "") + json.dumps(r["info"])
                out.update(("store", view, r["node_id"], gone[t]) for t in TOKEN_RE.findall(text) if t in gone)
                out.update(("store", view, r["node_id"], a) for a in re.findall(r'"([^"]+)"', json.dumps(r["info"]))
                           if a in deleted)
    return out


def moved_quotes(mem) -> int:
    """Quotes of live units no longer below the node that quotes them (for information: a summary
    is refreshed only every `summary_delta` changes below it, so units moved by maintenance stay
    quoted a while)."""
    views = mem.views(SPACE)
    unit_of = {t: a.amu_id for a in mem.list(SPACE) for t in TOKEN_RE.findall(a.text)}
    n = 0
    for view, node, summary, _ in node_texts(views):
        n += len({unit_of[t] for t in TOKEN_RE.findall(summary) if t in unit_of} - below(views, view, node))
    return n


def ingest_with_deletes(mem, seed: int = 0, n_sessions: int = 48, per_session: int = 8,
                        deletes_per_session: int = 2, check: bool = True) -> tuple[set[tuple], dict[str, set[str]]]:
    """Ingest the canary conversation into `SPACE` session by session (maintenance at each
    session end), deleting `deletes_per_session` random units (seeded) after each session.
    Returns (the `stale_quotes` found after any delete when `check`, deleted unit id -> its
    canary tokens)."""
    rng = np.random.default_rng(seed)
    stale: set[tuple] = set()
    deleted: dict[str, set[str]] = {}
    turns = turns_with_canaries(n_sessions, per_session)
    for s in range(n_sessions):
        add_session(mem, turns, s)
        deleted.update(delete_random(mem, deletes_per_session, rng,
                                     (lambda d: stale.update(stale_quotes(mem, {**deleted, **d}))) if check else None))
    return stale, deleted


def stale_summary_run(work: Path, seed: int = 0, **kw) -> dict:
    """`ingest_with_deletes` (48 sessions of 8 turns, 2 random deletes after each) in a new store
    under `work`. Returns {"deletes", "stale_quotes" (distinct node-unit pairs of a deleted unit
    quoted by a summary or named by a representative list, in the loaded views or the saved rows,
    seen after any delete; should be 0), "nodes" (summarised nodes at the end), "units",
    "deleted_units", "moved_quotes" (at the end, for information)}."""
    cfg = {k: kw.pop(k) for k in list(kw) if k not in ("n_sessions", "per_session", "deletes_per_session")}
    mem = open_space(Path(work) / f"summaries{seed}", **cfg)
    try:
        stale, deleted = ingest_with_deletes(mem, seed, **kw)
        return {"deletes": kw.get("n_sessions", 48) * kw.get("deletes_per_session", 2),
                "stale_quotes": len({p[1:] for p in stale}),
                "nodes": sum(bool(x[2]) for x in node_texts(mem.views(SPACE))),
                "units": len(mem.list(SPACE)) + len(deleted), "deleted_units": len(deleted),
                "moved_quotes": moved_quotes(mem)}
    finally:
        mem.close()
