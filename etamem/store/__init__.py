"""Persistence: one SQL store for SQLite (`sqlite`) and PostgreSQL with pgvector (`postgres`),
its tables (`schema`), rows (`spaces`, `units`), connection pool and locks.

`open_store(target)` picks the backend for `Memory(target)`."""
from etamem.store.sqlite import Store, open_store

__all__ = ["Store", "open_store"]
