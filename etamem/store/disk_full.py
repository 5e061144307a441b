"""A full disk, told apart from other store failures, so that every interface says it plainly: the
CLI names it in one line (exit status 2), the HTTP server answers 507 and keeps serving.

SQLite reports it as SQLITE_FULL ("database or disk is full"; also when `PRAGMA max_page_count`
is reached), PostgreSQL as SQLSTATE 53100 (`disk_full`), the file system as ENOSPC or EDQUOT
(derived files, the LLM cache).
"""
from __future__ import annotations

import errno
import sqlite3
import sys

DISK_FULL = "database or disk is full"
_SQLITE_FULL = 13  # SQLITE_FULL
_PG_DISK_FULL = "53100"
_ERRNOS = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


def database_errors() -> tuple[type[BaseException], ...]:
    """The database errors of the store backends in use (psycopg's only when it is loaded)."""
    errors: list[type[BaseException]] = [sqlite3.Error]
    if "psycopg" in sys.modules:
        errors.append(sys.modules["psycopg"].Error)
    return tuple(errors)


def is_disk_full(exc: BaseException | None) -> bool:
    """Whether `exc`, or an exception it was raised from or during, says the disk (or the
    database's size limit) is full."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, sqlite3.Error) and (getattr(exc, "sqlite_errorcode", None) == _SQLITE_FULL
                                               or DISK_FULL in str(exc)):
            return True
        if getattr(exc, "sqlstate", None) == _PG_DISK_FULL:
            return True
        if isinstance(exc, OSError) and exc.errno in _ERRNOS:
            return True
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False
