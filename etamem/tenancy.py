"""Tenancy: which spaces a caller may touch, enforced inside the engine, and API keys.

A server (or any host process serving several users) runs each engine call inside
`scope(spaces)`; every `Memory` entry point that names a space checks it against the scope
(`check`), and `Memory.spaces()` lists only the scope's spaces, so a route that forgot its own
check still cannot read or change another space. Outside any scope (a plain library user, the
CLI) everything is allowed.

API keys look like `etm_<key id>_<secret>`; the store keeps the key id, a SHA-256 of the secret
(keys are 256-bit random, so a fast hash is enough; no secret is stored), the spaces the key may
touch and whether it was revoked. An admin key (e.g. from `ETAMEM_ADMIN_KEY`) may touch every
space and manage keys; it is never stored.
"""
from __future__ import annotations

import contextlib
import contextvars
import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Iterable, Iterator

from etamem.ingest.inputs import stored_spelling, validate_space

KEY_PREFIX = "etm_"
_SCOPE: contextvars.ContextVar[frozenset[str] | None] = contextvars.ContextVar("etamem_scope", default=None)


class SpaceForbidden(PermissionError):
    """The caller's scope does not include the space (a PermissionError)."""


@contextlib.contextmanager
def scope(spaces: Iterable[str] | None) -> Iterator[None]:
    """Restrict engine calls made inside the block (in this thread or task) to `spaces`; None
    lifts no restriction of an enclosing scope and adds none. Names are taken as spelled
    (`stored_spelling`, not NFKC): a key an earlier version made for `ａｎａ` reaches that stored
    space, never `ana`; keys made now hold NFKC names (`create_key`)."""
    if spaces is None:
        yield
        return
    allowed = frozenset(stored_spelling(s) for s in spaces)
    outer = _SCOPE.get()
    token = _SCOPE.set(allowed if outer is None else allowed & outer)  # nested scopes only narrow
    try:
        yield
    finally:
        _SCOPE.reset(token)


def current() -> frozenset[str] | None:
    """The spaces the current scope allows, or None when unrestricted."""
    return _SCOPE.get()


def check(space: str) -> str:
    """`space` (already validated) if the current scope allows it; else SpaceForbidden."""
    allowed = _SCOPE.get()
    if allowed is not None and space not in allowed:
        raise SpaceForbidden(f"space {space!r}: not one of the spaces this caller may use")
    return space


def visible(spaces: Iterable[str]) -> list[str]:
    """The names among `spaces` that the current scope allows."""
    allowed = _SCOPE.get()
    return [s for s in spaces if allowed is None or s in allowed]


def require_unrestricted(what: str) -> None:
    """SpaceForbidden when a scope is set (store-wide operations such as reindex)."""
    if _SCOPE.get() is not None:
        raise SpaceForbidden(f"{what}: needs an unrestricted caller (the admin key)")


# --- API keys -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ApiKey:
    """A stored key: its id, the spaces it may touch, creation time (ISO 8601), revoked flag."""
    key_id: str
    spaces: tuple[str, ...]
    created: str
    revoked: bool = False
    note: str = ""


@dataclass(frozen=True)
class Caller:
    """Who a request is: `spaces` None for the admin key (every space)."""
    key_id: str
    spaces: frozenset[str] | None
    admin: bool = False


def new_key() -> tuple[str, str, str]:
    """(full key to hand out once, key id, hash of the secret to store)."""
    key_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    return f"{KEY_PREFIX}{key_id}_{secret}", key_id, secret_hash(secret)


def secret_hash(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def split_key(key: str) -> tuple[str, str] | None:
    """(key id, secret) of a well-formed key, else None."""
    if not isinstance(key, str) or not key.startswith(KEY_PREFIX):
        return None
    key_id, sep, secret = key[len(KEY_PREFIX):].partition("_")
    if not sep or not key_id or not secret or len(key) > 200:
        return None
    return key_id, secret


def presented_key(authorization: str | None, x_api_key: str | None) -> str | None:
    """The key a request presents: `Authorization: Bearer <key>`, else `X-API-Key`."""
    if authorization and authorization.lower().startswith("bearer "):
        return authorization[7:].strip()
    return x_api_key


def authenticate(key: str | None, store, admin_key: str | None = None) -> Caller | None:
    """The Caller a presented key stands for, or None (missing, malformed, unknown or revoked).
    `store` has `api_key(key_id) -> (hash, spaces, revoked) | None`."""
    if not key:
        return None
    if admin_key and hmac.compare_digest(key.encode("utf-8"), admin_key.encode("utf-8")):
        return Caller(key_id="admin", spaces=None, admin=True)
    parts = split_key(key)
    if parts is None:
        return None
    row = store.api_key(parts[0])
    if row is None:
        return None
    stored_hash, spaces, revoked = row
    if revoked or not hmac.compare_digest(stored_hash, secret_hash(parts[1])):
        return None
    return Caller(key_id=parts[0], spaces=frozenset(spaces))


def create_key(store, spaces: Iterable[str], note: str = "") -> tuple[str, ApiKey]:
    """A new key for `spaces` (validated names; a space need not exist yet), stored hashed;
    returns the full key (shown once) and its record."""
    from datetime import datetime, timezone

    names = sorted({validate_space(s) for s in spaces})
    if not names:
        raise ValueError("spaces: a key needs at least one space")
    if not isinstance(note, str) or len(note) > 200:
        raise ValueError("note: expected a string of at most 200 characters")
    key, key_id, digest = new_key()
    created = datetime.now(timezone.utc).isoformat(timespec="seconds")
    store.insert_api_key(key_id, digest, names, created, note)
    return key, ApiKey(key_id, tuple(names), created, False, note)
