"""The stores' directory of a benchmark run: `--work DIR` or a new temporary one, cleaned up
afterwards unless `--keep` (used by `latency.py` and `ingest.py`)."""
from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator


@contextmanager
def work_dir(work: str | None, keep: bool, prefix: str, stores: Iterable[str]) -> Iterator[Path]:
    """`work` resolved (created if needed), else a new temporary directory named `prefix...`;
    afterwards, unless `keep`, the temporary directory, or in `work` each of the `stores`
    subdirectories, is removed."""
    own = work is None
    path = Path(tempfile.mkdtemp(prefix=prefix)) if own else Path(work).resolve()
    path.mkdir(parents=True, exist_ok=True)
    try:
        yield path
    finally:
        if not keep:
            if own:
                shutil.rmtree(path, ignore_errors=True)
            else:
                for name in stores:
                    shutil.rmtree(path / name, ignore_errors=True)
