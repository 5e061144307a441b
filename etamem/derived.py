"""Derived files of a store (DESIGN §11): a live space's search indexes saved beside the
database so that opening a large store neither re-encodes nor re-indexes.

    <store>/derived/<hash of space>/g<generation>/{meta.json, index/, turns/}

They are caches of what the database says: each directory carries the space's store
generation (`Store.generation`) it was written at, is written under a temporary name and
renamed into place (a crash leaves no half-written generation), and is used only when its
generation equals the store's. Anything stale, missing or unreadable is ignored and rebuilt
from the stored vectors, so a store never fails to open because of them.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

FORMAT = 3  # 2: AMU times and time-word flags saved with the index; 3: BM25 saved with its stemmer
DIRNAME = "derived"


def space_dir(root: str | os.PathLike, space: str) -> Path:
    """Where a space's derived files live (the space name hashed: any name is a safe path)."""
    return Path(root) / DIRNAME / hashlib.blake2b(space.encode("utf-8"), digest_size=10).hexdigest()


def save(root, space: str, generation: int, index, turns) -> Path:
    """Write `index` (a `SpaceIndex`) and `turns` (a `TurnIndex`) for `generation` atomically;
    older generations of the space are removed. Returns the directory."""
    base = space_dir(root, space)
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=base))
    final = base / f"g{generation}"
    try:
        index.save(tmp / "index")
        turns.save(tmp / "turns")
        (tmp / "meta.json").write_text(json.dumps({"format": FORMAT, "space": space, "generation": generation}))
        if final.exists():
            shutil.rmtree(final)
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for old in base.iterdir():
        if old != final:
            shutil.rmtree(old, ignore_errors=True)
    return final


def find(root, space: str, generation: int) -> Path | None:
    """The directory saved for exactly this generation of the space, or None."""
    d = space_dir(root, space) / f"g{generation}"
    try:
        meta = json.loads((d / "meta.json").read_text())
    except (OSError, ValueError):
        return None
    if meta.get("format") != FORMAT or meta.get("space") != space or meta.get("generation") != generation:
        return None
    return d


def drop(root, space: str) -> None:
    """Remove every derived file of the space (e.g. when the space is deleted)."""
    shutil.rmtree(space_dir(root, space), ignore_errors=True)
