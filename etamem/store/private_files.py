"""Files only their owner can read: a store holds people's conversations, so the directories
etamem creates are 0700 and its database files 0600, whatever the umask (files that already
exist keep the mode their owner gave them)."""
from __future__ import annotations

import os
from pathlib import Path

DIR_MODE, FILE_MODE = 0o700, 0o600


def private_dir(path: str | os.PathLike) -> Path:
    """Create `path` and any missing parents as 0700 directories; returns it."""
    path = Path(path)
    missing = []
    p = path
    while not p.exists() and p != p.parent:
        missing.append(p)
        p = p.parent
    for d in reversed(missing):
        try:
            d.mkdir(mode=DIR_MODE)
            os.chmod(d, DIR_MODE)  # mkdir's mode is masked by the umask
        except FileExistsError:  # created meanwhile by another process
            pass
    if not path.is_dir():
        raise NotADirectoryError(f"{path} exists and is not a directory")
    return path


def private_file(path: str | os.PathLike) -> Path:
    """Create `path` empty as a 0600 file if it does not exist (before a database opens it:
    SQLite gives its -wal and -shm files the database file's mode); returns it."""
    path = Path(path)
    private_dir(path.parent)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return path
    os.fchmod(fd, FILE_MODE)
    os.close(fd)
    return path
