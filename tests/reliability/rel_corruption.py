"""Derived files damaged on disk, counted: every case is applied to a copy of a store whose
space was saved, the store is opened again and searched, and the case is counted as

- rebuilt: the damaged files were not used (the indexes came from the store) and the results
  are those of a fresh build;
- crashed: a search raised;
- changed: the results differ from a fresh build's (silently wrong);
- harmless: the files were used and the results are a fresh build's (a change nothing reads).

`mode="plain"` damages files only (a disk, a careless copy); `mode="restamped"` also rewrites
the checksum in meta.json and in the store, as only someone with write access to the database
could: then the checks of shapes, ranges and slot maps, and the rebuild after a failed search,
are what is left.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from etamem.live import derived
from rel_common import conversation, fast_memory

QUERIES = ["hiking with my sister", "wonderful garden", "violin last weekend", "tea and coffee"]
SPACE = "u"


def _results(mem) -> list:
    return [[(h.amu.amu_id, round(h.score, 5)) for h in mem.search(q, space=SPACE, top_k=8)] for q in QUERIES]


def build(work: Path) -> tuple[Path, Path, list]:
    """A store with one saved space and a copy of the derived directory of an earlier write;
    returns (store, earlier derived copy, fresh-build results)."""
    root = work / "base"
    mem = fast_memory(root)
    mem.add(conversation("u", 3, 5), space=SPACE)
    mem.checkpoint()
    earlier = work / "earlier"
    shutil.copytree(_space_dir(root, mem), earlier)
    mem.add(conversation("w", 2, 5, day0=30), space=SPACE)
    mem.delete(SPACE, mem.list(SPACE)[2].amu_id)  # tombstones in the saved slots
    mem.close()
    fresh = fast_memory(root)
    with fresh._lock:
        fresh._no_files.add(SPACE)
    expected = _results(fresh)
    fresh._live.clear()
    fresh.store.close()
    return root, earlier, expected


def _space_dir(root: Path, mem) -> Path:
    (d,) = [p for p in derived.space_dir(root, SPACE, mem.store.name_salt()).iterdir() if p.name.startswith("g")]
    return d


def _npy(path: Path, fn) -> None:
    a = np.load(path)
    np.save(path, fn(a), allow_pickle=False)


def _json(path: Path, fn) -> None:
    path.write_text(json.dumps(fn(json.loads(path.read_text()))))


def _permute(xs: list) -> list:
    return xs[1:] + xs[:1] if len(xs) > 1 else xs


def cases(d: Path, earlier: Path) -> list[tuple[str, callable]]:
    """(name, mutate()) over the files of the saved directory `d`."""
    out = []
    files = sorted(p for p in d.rglob("*") if p.is_file() and p.name != "meta.json")
    for p in files:
        rel = p.relative_to(d).as_posix()
        out.append((f"truncated {rel}", lambda p=p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2])))
        out.append((f"zeroed {rel}", lambda p=p: p.write_bytes(bytes(len(p.read_bytes())))))
        out.append((f"garbage {rel}", lambda p=p: p.write_bytes(np.random.default_rng(len(rel)).bytes(
            max(16, len(p.read_bytes()))))))
        if p.suffix == ".npy":
            out.append((f"shortened {rel}", lambda p=p: _npy(p, lambda a: a[:-1] if len(a) else a)))
            out.append((f"lengthened {rel}", lambda p=p: _npy(p, lambda a: np.concatenate([a, a[-1:]]) if len(a) else a)))
            if p.name == "vectors.npy":
                out.append((f"NaN vectors {rel}", lambda p=p: _npy(p, lambda a: np.full_like(a, np.nan))))
                out.append((f"rows permuted {rel}", lambda p=p: _npy(p, lambda a: a[::-1].copy())))
            if p.name in ("doc_tok.npy", "post_slot.npy"):
                out.append((f"out of range {rel}", lambda p=p: _npy(p, lambda a: a + 10_000)))
        if p.name == "keys.json":
            out.append((f"slots permuted {rel}", lambda p=p: _json(p, lambda m: {**m, "slots": _permute(m["slots"])})))
            out.append((f"slot map resized {rel}", lambda p=p: _json(p, lambda m: {"keys": m["keys"][:-1],
                                                                                    "slots": m["slots"][:-1]})))
        if p.name == "slots.json" and p.parent.name == "index":
            out.append((f"AMU slots permuted {rel}", lambda p=p: _json(p, lambda m: {**m, "ids": _permute(m["ids"])})))
            out.append((f"node slots permuted {rel}", lambda p=p: _json(
                p, lambda m: {**m, "event": [m["event"][0], _permute(m["event"][1])]})))
            out.append((f"AMU slots resized {rel}", lambda p=p: _json(p, lambda m: {**m, "ids": m["ids"] + [None]})))
        if p.name == "slots.json" and p.parent.name == "turns":
            out.append((f"turn slots permuted {rel}", lambda p=p: _json(
                p, lambda m: {**m, "turn_ids": _permute(m["turn_ids"])})))

    def other_generation():
        shutil.rmtree(d)
        shutil.copytree(earlier, d)
        meta = json.loads((d / "meta.json").read_text())  # relabelled as the current generation
        generation = int(d.name[1:].split("-")[0])
        (d / "meta.json").write_text(json.dumps({**meta, "stamp": [meta["stamp"][0], generation]}))
    out.append(("files of another generation", other_generation))
    return out


def corruption_run(work: Path, mode: str = "plain", every: int = 1) -> dict:
    """Apply every case to a copy of the base store (`every` > 1: every case that keeps a file
    well-formed but wrong, and every `every`-th of the damaged ones); counts per outcome."""
    work.mkdir(parents=True, exist_ok=True)
    base, earlier, expected = build(work / "build")
    probe = fast_memory(base)
    d_rel = _space_dir(base, probe).relative_to(base)
    probe._live.clear()
    probe.store.close()
    counts = {"cases": 0, "rebuilt": 0, "crashed": 0, "changed": 0, "harmless": 0}
    bad = []  # every case not rebuilt, "<outcome>: <case>"
    for i, (name, mutate) in enumerate(cases(base / d_rel, earlier)):
        if i % every and name.startswith(("truncated", "zeroed", "garbage", "shortened", "lengthened")):
            continue
        root = work / f"case{i}"
        shutil.copytree(base, root)
        d = root / d_rel
        before = derived.digest(d) + (d / "meta.json").read_text()
        cases(d, earlier)[i][1]()
        if derived.digest(d) + (d / "meta.json").read_text() == before:  # a no-op here (e.g. an empty array)
            shutil.rmtree(root, ignore_errors=True)
            continue
        mem = fast_memory(root)
        if mode == "restamped":
            check = derived.digest(d)
            meta = json.loads((d / "meta.json").read_text())
            (d / "meta.json").write_text(json.dumps({**meta, "digest": check}))
            mem.store.set_space_meta(SPACE, derived.RECORD_KEY, derived.record(mem.store.stamp(SPACE), check))
        try:
            got = _results(mem)
            outcome = ("rebuilt" if mem.index_info(SPACE)["saved"] is None else "harmless") if got == expected \
                else "changed"
        except Exception as exc:  # noqa: BLE001 - counted
            outcome = "crashed"
            name = f"{name}: {type(exc).__name__}: {exc}"
        mem._live.clear()
        mem.store.close()
        shutil.rmtree(root, ignore_errors=True)
        counts["cases"] += 1
        counts[outcome] += 1
        if outcome != "rebuilt":
            bad.append(f"{outcome}: {name}")
    return {**counts, "mode": mode, "bad": bad}
