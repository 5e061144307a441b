"""Pieces shared by the command lines (`etamem.cli.commands`, `etamem.cli.serve`, `etamem.cli.bench`):
logging, the Config of `--config` / `--set`, opening a store. It imports none of
them, so the three modules do not import each other through it."""
from __future__ import annotations

import logging
import os
import shutil
import sys
import warnings
from pathlib import Path

from etamem.config import Config, parse_overrides


def setup_logging(verbosity: int) -> None:
    """Log to stderr: etamem at ERROR (-q) / INFO (default) / DEBUG (-vv), other libraries at WARNING
    unless -vv (bm25s sets its own logger to DEBUG when imported, so its records are filtered
    at the handler). With -q (verbosity < 0) the handlers pass errors only, whoever logs, and
    Python warnings are not shown."""
    level = {-1: logging.ERROR, 0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)
    others = logging.ERROR if verbosity < 0 else logging.WARNING if verbosity < 2 else logging.DEBUG
    logging.basicConfig(level=others, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger("etamem").setLevel(level)
    if verbosity < 0:
        warnings.simplefilter("ignore")
    if verbosity < 2:
        for handler in logging.getLogger().handlers:
            handler.addFilter(lambda r: r.levelno >= others or (verbosity >= 0 and r.name.split(".")[0] == "etamem"))
    # model loaders print progress bars of their own; keep the terminal readable
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def note(args, message: str) -> None:
    """A line for the user on stderr, unless `-q` (errors only)."""
    if not getattr(args, "quiet", False):
        print(message, file=sys.stderr, flush=True)


def config_from_args(args, preset: dict | None = None) -> Config:
    """The Config of `--preset NAME` (etamem/presets.py; with `method` from --config / --set), a
    command's `preset` values, then `--config FILE`, then `--set key=value` (later wins); a bad
    file, key or value raises ValueError naming it, which `main` reports as `etamem: error: ...`
    with exit status 2."""
    config_file = getattr(args, "config", None)
    from_file = parse_overrides(None, config_file)
    from_set = parse_overrides(getattr(args, "set", None))
    named = getattr(args, "preset", None)
    base: dict = {}
    if named:
        from etamem.presets import preset_values

        base = preset_values(named, method=str(from_set.get("method", from_file.get("method", "etamem"))))
    try:
        Config.from_dict({**base, **(preset or {}), **from_file})
    except ValueError as exc:
        raise ValueError(f"config file {config_file}: {exc}") from None
    try:
        return Config.from_dict({**base, **(preset or {}), **from_file, **from_set})
    except ValueError as exc:
        raise ValueError(f"--set: {exc}") from None


def open_memory(args, path, preset: dict | None = None):
    """`Memory(path, config_from_args(args, preset))`."""
    from etamem.memory import Memory

    return Memory(path, config_from_args(args, preset))


def store_exists(path) -> bool:
    """Whether `path` holds an ETAMem store (a PostgreSQL URL counts: the database is checked on open)."""
    from etamem.store.sqlite import is_database_url

    return is_database_url(str(path)) or (Path(path) / "memory.sqlite").is_file()


def existing_store(path: str) -> str:
    """`path` when it holds a store, else a ValueError (`main`: one line, exit status 2)."""
    if not store_exists(path):
        raise ValueError(f"no ETAMem store at {path} (expected {Path(path) / 'memory.sqlite'})")
    return path


class NewStoreUndo:
    """Takes back what opening a store at `path` created, for a command that is refused before
    it stores anything: the folders that did not exist (the topmost one, with what is below), or
    the entries added to an existing folder that held no store. Nothing for an existing store."""

    def __init__(self, path):
        self.top: Path | None = None
        self.before: set[str] | None = None
        if store_exists(path):
            return
        path = Path(path).absolute()
        if path.is_dir():
            self.before = set(os.listdir(path))
            self.path = path
            return
        while not path.parent.exists() and path.parent != path:
            path = path.parent
        self.top = None if path.exists() else path

    def undo(self) -> None:
        if self.top is not None:
            shutil.rmtree(self.top, ignore_errors=True)
        elif self.before is not None:
            for name in set(os.listdir(self.path)) - self.before:
                entry = self.path / name
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
