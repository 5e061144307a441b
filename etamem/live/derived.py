"""Derived files of a store: a live space's search indexes saved beside the database so that opening a large store neither re-encodes nor re-indexes.

    <store>/derived/<salted hash of space>/g<generation>-<epoch>/{meta.json, index/, turns/, snapshot/}

They are caches of what the database says. Each directory carries the space's stamp (epoch,
generation: `SqlStore.stamp`) it was written at and a checksum of every file in it; the store
keeps the same stamp and checksum (space meta `derived`), written after the files. A directory
is used only when its stamp is the store's and its files still hash to the recorded checksum,
so truncated, zeroed, rewritten or swapped files, and files of another generation or of an
earlier life of the space, are never loaded: they are ignored and rebuilt from the stored
vectors, and a store never fails to open because of them. `snapshot/` (`etamem.live.snapshot`)
holds the space's units, their vectors and its turns, so that a current directory opens the space
without reading those rows from the store. Directories are written under a
temporary name and renamed into place (a crash leaves no half-written generation), readable by
the owner only.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile
import threading
from pathlib import Path

from etamem.live import snapshot as space_snapshot
from etamem.store.private_files import private_dir

log = logging.getLogger(__name__)

FORMAT = 4  # 2: AMU times and time-word flags saved with the index; 3: BM25 saved with its stemmer;
# 4: stamped with the space's epoch, checksummed, recorded in the store
DIRNAME = "derived"
RECORD_KEY = "derived"  # space meta: {"stamp": [epoch, generation], "digest": checksum}


def space_dir(root: str | os.PathLike, space: str, salt: str = "") -> Path:
    """Where a space's derived files live: the space name hashed with the store's salt
    (`SqlStore.name_salt`), so any name is a safe path and the path does not reveal it."""
    key = hashlib.blake2b(space.encode("utf-8"), digest_size=10, key=salt.encode("ascii")[:64]).hexdigest()
    return Path(root) / DIRNAME / key


def digest(directory: Path) -> str:
    """A checksum (BLAKE2b) of every file under `directory` but meta.json: relative names,
    sizes and bytes."""
    h = hashlib.blake2b(digest_size=20)
    files = sorted(p for p in directory.rglob("*") if p.is_file() and p.name != "meta.json")
    for path in files:
        h.update(f"{path.relative_to(directory).as_posix()}\0{path.stat().st_size}\0".encode())
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def _name(stamp: tuple[str, int]) -> str:
    epoch, generation = stamp
    return f"g{generation}-{epoch or 'none'}"


def save(root, space: str, stamp: tuple[str, int], index, turns, salt: str = "", snapshot: bool = False
         ) -> tuple[Path, str]:
    """Write `index` (a `SpaceIndex`) and `turns` (a `TurnIndex`) for `stamp` (epoch,
    generation) atomically, with the snapshot of their units and turns to open from
    (`etamem.live.snapshot`) when `snapshot`; older directories of the space are removed.
    Returns the directory and its checksum, which the caller records in the store (`record`)."""
    base = private_dir(space_dir(root, space, salt))
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=base))  # 0700
    final = base / _name(stamp)
    try:
        index.save(tmp / "index")
        turns.save(tmp / "turns")
        if snapshot:
            space_snapshot.write(tmp / space_snapshot.DIRNAME, index, turns)
        for path in tmp.rglob("*"):  # the owner's only, like the store (`etamem.store.private_files`)
            os.chmod(path, 0o700 if path.is_dir() else 0o600)
        check = digest(tmp)
        (tmp / "meta.json").write_text(json.dumps({"format": FORMAT, "space": space, "stamp": list(stamp),
                                                   "digest": check}))
        os.chmod(tmp / "meta.json", 0o600)
        if final.exists():
            shutil.rmtree(final)
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    for old in base.iterdir():
        if old != final:
            shutil.rmtree(old, ignore_errors=True)
    return final, check


def record(stamp: tuple[str, int], check: str) -> str:
    """The store's record of a saved directory (space meta `RECORD_KEY`)."""
    return json.dumps({"format": FORMAT, "stamp": list(stamp), "digest": check})


def find(root, space: str, stamp: tuple[str, int], recorded: str | None, salt: str = "", *,
         verify: bool = True) -> Path | None:
    """The directory saved for exactly this stamp of the space whose files still hash to the
    checksum the store recorded (`recorded`: the space meta `RECORD_KEY`), or None. `verify`
    False: the checksum is left to the caller (`Verifier`)."""
    if not recorded:
        return None
    d = space_dir(root, space, salt) / _name(stamp)
    try:
        meta = json.loads((d / "meta.json").read_text())
        kept = json.loads(recorded)
        if (meta.get("format") != FORMAT or meta.get("space") != space or meta.get("stamp") != list(stamp)
                or kept.get("format") != FORMAT or kept.get("stamp") != list(stamp)
                or meta.get("digest") != kept.get("digest")):
            return None
        if verify and digest(d) != kept["digest"]:
            log.warning("space %s: derived files in %s do not match their checksum; rebuilding", space, d)
            return None
    except (OSError, ValueError, TypeError, AttributeError):
        return None
    return d


class Verifier:
    """The checksum of a directory `find` returned unverified, computed in a background thread
    (hashing and reading release the GIL) while the caller parses its plain files; `ok()` waits
    for it. Nothing whose damaged bytes could crash the process (FAISS, BM25 indexes) may be
    loaded before `ok()` is True, and nothing parsed meanwhile kept when it is False."""

    def __init__(self, directory: Path, space: str, recorded: str):
        self.directory, self.space = directory, space
        self._want = json.loads(recorded)["digest"]
        self._got: str | None = None
        self._verdict: bool | None = None
        self._thread = threading.Thread(target=self._run, name="etamem-derived-digest", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._got = digest(self.directory)
        except Exception:  # noqa: BLE001 - unreadable: not the recorded files
            self._got = ""

    def ok(self) -> bool:
        """The files hash to the recorded checksum (a warning, once, when they do not)."""
        if self._verdict is None:
            self._thread.join()
            self._verdict = self._got == self._want
            if not self._verdict:
                log.warning("space %s: derived files in %s do not match their checksum; rebuilding", self.space,
                            self.directory)
        return self._verdict


def drop(root, space: str, salt: str = "") -> None:
    """Remove every derived file of the space (e.g. when the space is deleted)."""
    shutil.rmtree(space_dir(root, space, salt), ignore_errors=True)
