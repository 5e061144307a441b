"""ETAMem as a LangGraph store: `EtamemStore(BaseStore)` (`pip install -e ".[langgraph]"`).

    from etamem.integrations.langgraph import EtamemStore
    store = EtamemStore("stores/agent")            # or EtamemStore(memory), EtamemStore() in memory
    store.put(("users", "ana"), "pet", {"text": "Ana adopted a grey cat named Miso."})
    store.search(("users",), query="What pet does Ana have?", limit=3)

Namespaces and spaces: a namespace (a tuple of labels) is the ETAMem space named by its labels
percent-encoded (UTF-8; every character but ASCII letters, digits and `-_~!$&'()*+,;=:@` is
encoded, `%` included) and joined by `.` (LangGraph labels never hold one), so ("users",
"zoë") is the space `users.zo%C3%AB` and back (`space_of` / `namespace_of`). A namespace whose
space name would exceed 128 characters, or a label that is not valid Unicode, is refused
(InvalidNamespaceError).

Items: the value (any JSON object) with its key and times is kept, per (namespace, key), as an
item of kind "langgraph" of its space in the memory's own store (`SqlStore.put_item`, table
`space_items`: one row per get / put / delete, one indexed read per listing). Items go with their
space when it is deleted, and with their turn when that turn is deleted or rewritten through
`Memory.delete` (their value holds its text). A value with text becomes a turn of its space (speaker
`speaker`, the key in the turn's `extra` as `langgraph_key`), extracted into units that
`search(query=...)` finds with ETAMem retrieval. The text is: the fields the put's `index`
names (LangGraph field paths: `"memory"`, `"a.b"`, `"tags[*]"`, `"$"` the whole value; their
texts joined by newlines), else the store's `fields`, else `value["text"]`, else
`value["content"]` (strings), else every string of the whole value (as LangGraph indexes the
whole value by default: `{"data": ...}`, `{"memory": ...}`, nested ones). `index=False`, or a value without such text, is stored and
returned but not searched. A put on a key that has text is `Memory.update` (the old version
kept as history and superseded); `delete` removes the value and every version's turn and
units as `Memory.delete` does. `ttl` other than None is refused (TTLNotSupportedError).

Batches follow LangGraph's `InMemoryStore`: reads (get, search, list) see the store as it was
before the batch, puts to one (namespace, key) keep the last, and run after the reads.
Searches without a query list items in order (namespaces by their first item, then items by
insertion; an overwrite keeps its place), with `filter` (equality on value fields, nested
objects, `$eq $ne $gt $gte $lt $lte`), `offset` and `limit`. With a query, each space under
the prefix is searched, items ranked by their best unit's score across spaces (`score`), then
the matching items that are not searchable (score None).
"""
from __future__ import annotations

import asyncio
import json
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping
from urllib.parse import quote, unquote

from etamem.install_hints import install_hint

try:
    from langgraph.store.base import (
        BaseStore,
        GetOp,
        InvalidNamespaceError,
        Item,
        ListNamespacesOp,
        PutOp,
        SearchItem,
        SearchOp,
        get_text_at_path,
        tokenize_path,
        validate_op_namespace,
    )
except ImportError as exc:  # pragma: no cover - exercised with the package hidden
    raise ImportError(f'etamem.integrations.langgraph needs LangGraph: {install_hint("langgraph")}') from exc

from etamem.facts.revisions import versions
from etamem.ingest.inputs import validate_space
from etamem.records import UnknownIdError, UnknownSpaceError
from etamem.store.schema import StoredItem

__all__ = ["EtamemStore", "TTLNotSupportedError", "namespace_of", "space_of"]

KEY_EXTRA = "langgraph_key"  # turn extra: the item's key
SAFE = "-_~!$&'()*+,;=:@"  # kept as they are in a label (with ASCII letters and digits)
MAX_QUERY_UNITS = 2000  # the most units one space's retrieval asks for while filling a page
KIND = "langgraph"  # the store's item kind of this adapter



def string_leaves(value: Any) -> list[str]:
    """The strings of a JSON value, depth first in key order (`{"data": ...}`, `{"memory": ...}`,
    nested objects and lists): what the default index reads of a value without "text" / "content"."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [t for v in value.values() for t in string_leaves(v)]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in string_leaves(v)]
    return []

class TTLNotSupportedError(NotImplementedError, ValueError):
    """A put with a `ttl`: EtamemStore keeps items until they are deleted (a NotImplementedError and a ValueError)."""


def space_of(namespace: tuple[str, ...]) -> str:
    """The ETAMem space of a LangGraph namespace: its labels percent-encoded, joined by '.'.

    Args:
        namespace: A non-empty tuple of string labels, e.g. `("users", "zoë")`.

    Returns:
        The space name, e.g. `users.zo%C3%AB`.

    Raises:
        InvalidNamespaceError: A label that is empty, not a string, holds '.' or is not valid
            Unicode, or a space name over 128 characters.
    """
    if not isinstance(namespace, tuple) or not namespace:
        raise InvalidNamespaceError(f"namespace: expected a non-empty tuple of strings, got {namespace!r}")
    validate_op_namespace(GetOp(namespace, ""))
    try:
        name = ".".join(quote(label, safe=SAFE, errors="strict") for label in namespace)
        return validate_space(name)
    except (UnicodeEncodeError, ValueError) as exc:
        raise InvalidNamespaceError(f"namespace {namespace!r} cannot name an ETAMem space: {exc}") from None


def namespace_of(space: str) -> tuple[str, ...]:
    """The namespace a space name encodes (`space_of` reversed).

    Args:
        space: A space name made by `space_of`.

    Returns:
        The namespace, a tuple of labels.
    """
    return tuple(unquote(label, errors="strict") for label in space.split("."))


def _now() -> str:
    return datetime.now(timezone.utc).isoformat()


class EtamemStore(BaseStore):
    """A LangGraph store over an `etamem.Memory` (see the module's docstring for the mapping).

    Use it as any LangGraph `BaseStore`: `put`, `get`, `delete`, `search`, `list_namespaces` and
    their async forms, all of which go through `batch` / `abatch`. A context manager: leaving
    `with` calls `close`. `ttl` is not supported (`supports_ttl` is False).

    Args:
        memory: A `Memory` (the caller's to close), or a store path / PostgreSQL URL / None (a
            `Memory` made here, None: in memory, closed by `close`).
        fields: Default LangGraph field paths of the text to index (`"memory"`, `"a.b"`,
            `"tags[*]"`, `"$"`); a put's own `index` wins. None (default): the value's "text",
            else its "content", else every string of the value.
        speaker: The speaker of the turns items become (default "user").

    Raises:
        ValueError: A `memory` of another kind, `fields` not a list of non-empty field paths, or
            an empty `speaker`.
    """

    supports_ttl = False

    def __init__(self, memory: Any = None, *, fields: list[str] | None = None, speaker: str = "user"):
        from etamem.memory import Memory

        if isinstance(memory, Memory):
            self.memory, self._owned = memory, False
        elif memory is None or isinstance(memory, (str, Path)):
            self.memory, self._owned = Memory(memory), True
        else:
            raise ValueError(f"memory: expected an etamem.Memory, a store path or None, got {type(memory).__name__}")
        if fields is not None and (not isinstance(fields, list) or not all(isinstance(f, str) and f for f in fields)):
            raise ValueError(f"fields: expected a list of field paths, got {fields!r}")
        if not isinstance(speaker, str) or not speaker.strip():
            raise ValueError(f"speaker: expected a non-empty string, got {speaker!r}")
        self.fields, self.speaker = fields, speaker
        self._write_lock = threading.RLock()  # one put or delete at a time: item row and turns move together

    # --- the interface ---------------------------------------------------------------------
    def batch(self, ops: Iterable[Any]) -> list[Any]:
        """Run LangGraph ops; every op is checked before any runs.

        Reads see the store as it was before the batch; puts to one (namespace, key) keep the last,
        and run after the reads.

        Args:
            ops: `GetOp`, `SearchOp`, `ListNamespacesOp` and `PutOp` (a `PutOp` with value None
                deletes).

        Returns:
            One result per op, in op order: an `Item` or None (get), a list of `SearchItem`s (search),
                a list of namespaces (list), None (put).

        Raises:
            ValueError: An unknown op type, a bad value, `index`, filter, limit or offset.
            InvalidNamespaceError: A namespace that cannot name a space, or a put under the root
                label "langgraph".
            TTLNotSupportedError: A put with a `ttl`.
        """
        ops = list(ops)
        for op in ops:  # every op checked before any runs
            self._check(op)
        results: list[Any] = []
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for op in ops:
            if isinstance(op, GetOp):
                results.append(self._get(op.namespace, op.key))
            elif isinstance(op, SearchOp):
                results.append(self._search(op))
            elif isinstance(op, ListNamespacesOp):
                results.append(self._list_namespaces(op))
            else:
                puts[(op.namespace, op.key)] = op
                results.append(None)
        for op in puts.values():
            self._put(op)
        return results

    async def abatch(self, ops: Iterable[Any]) -> list[Any]:
        """`batch` in a worker thread (the event loop is not blocked).

        Args:
            ops: As `batch`'s.

        Returns:
            As `batch`.

        Raises:
            ValueError: As `batch`.
        """
        return await asyncio.to_thread(self.batch, list(ops))

    def close(self) -> None:
        """Close the Memory this store made (one passed in is the caller's to close)."""
        if self._owned:
            self.memory.close()

    def __enter__(self) -> "EtamemStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- checks ----------------------------------------------------------------------------
    @staticmethod
    def _check(op: Any) -> None:
        if not isinstance(op, (GetOp, SearchOp, ListNamespacesOp, PutOp)):
            raise ValueError(f"unknown operation type: {type(op).__name__}")
        validate_op_namespace(op)
        if isinstance(op, PutOp):
            space_of(op.namespace)
            if op.namespace[0] == "langgraph":
                raise InvalidNamespaceError(f'root label for namespace cannot be "langgraph": {op.namespace}')
            if op.ttl is not None:
                raise TTLNotSupportedError(f"ttl={op.ttl!r}: EtamemStore keeps items until they are deleted; "
                                           "put with ttl=None (or leave it out)")
            if op.value is not None and not isinstance(op.value, Mapping):
                raise ValueError(f"value: expected a mapping or None, got {type(op.value).__name__}")
            if op.index is not None and op.index is not False and not isinstance(op.index, list):
                raise ValueError(f"index: expected False, None or a list of field paths, got {op.index!r}")
        elif isinstance(op, GetOp):
            space_of(op.namespace)

    # --- rows ------------------------------------------------------------------------------
    def _row(self, space: str, key: str) -> StoredItem | None:
        return self.memory.store.get_item(space, KIND, key)

    @staticmethod
    def _item(row: StoredItem, score: float | None = None, searched: bool = False) -> Item:
        fields = dict(namespace=namespace_of(row.space), key=row.key, value=json.loads(row.value),
                     created_at=datetime.fromisoformat(row.created), updated_at=datetime.fromisoformat(row.updated))
        return SearchItem(**fields, score=score) if searched else Item(**fields)

    # --- get / put / delete ----------------------------------------------------------------
    def _get(self, namespace: tuple[str, ...], key: str) -> Item | None:
        row = self._row(space_of(namespace), str(key))
        return None if row is None else self._item(row)

    def _text(self, op: PutOp) -> str:
        """The text of the put's value to index ("" for none), see the module's docstring."""
        if op.index is False:
            return ""
        paths = op.index if op.index is not None else self.fields
        if paths is None:
            for name in ("text", "content"):
                if isinstance(op.value.get(name), str) and op.value[name].strip():
                    return op.value[name]
            return "\n".join(t for t in string_leaves(op.value) if t.strip())  # the whole value, as LangGraph
        texts = [t for p in paths for t in get_text_at_path(op.value, p if p == "$" else tokenize_path(p))]
        return "\n".join(t for t in texts if t.strip())

    def _put(self, op: PutOp) -> None:
        space, key = space_of(op.namespace), str(op.key)
        with self._write_lock:
            if op.value is None:
                return self._delete(space, key)
            value = json.dumps(dict(op.value), allow_nan=False)
            text = self._text(op)
            row = self._row(space, key)
            turn_id = row.turn_id if row else ""
            if text and turn_id:
                try:
                    turn_id = self.memory.update(turn_id, text, space).turn_id
                except (UnknownIdError, UnknownSpaceError):  # its turn was deleted outside the adapter
                    turn_id = self._add_turn(space, key, text)
            elif text:
                turn_id = self._add_turn(space, key, text)
            elif turn_id:  # no text any more: the item leaves the searchable memory
                self._forget_turns(space, turn_id)
                turn_id = ""
            self.memory.store.put_item(space, KIND, key, value, turn_id, _now())

    def _add_turn(self, space: str, key: str, text: str) -> str:
        """A new turn holding `text` (its id drawn from key and text: a retry finds it)."""
        import hashlib

        digest = hashlib.blake2b(f"{key}\n{text}".encode(), digest_size=8).hexdigest()
        turn_id = f"lg-{digest}"
        if not self.memory.store.turns(space, turn_ids=[turn_id]):
            self.memory.add([{"turn_id": turn_id, "speaker": self.speaker, "text": text,
                              "extra": {KEY_EXTRA: key}}], space=space)
        return turn_id

    def _forget_turns(self, space: str, turn_id: str) -> None:
        """Delete the turn and every earlier version of it, with their units."""
        found = self.memory.store.turns(space, turn_ids=[turn_id])
        for tid in (versions(self.memory.store, space, found[0]) if found else []):
            try:
                self.memory.delete(turn_id=tid, space=space)
            except UnknownIdError:  # gone meanwhile
                pass

    def _delete(self, space: str, key: str) -> None:
        row = self._row(space, key)
        if row is None:
            return
        if row.turn_id:
            self._forget_turns(space, row.turn_id)
        self.memory.store.delete_item(space, KIND, key)
        self.memory.store.truncate_wal()  # the value leaves the log files too

    # --- listing and search ----------------------------------------------------------------
    def _spaces(self, prefix: tuple[str, ...]) -> list[str]:
        """Spaces holding items whose namespace starts with `prefix`."""
        spaces = self.memory.store.item_spaces(KIND)
        n = len(prefix)
        return [s for s in spaces if namespace_of(s)[:n] == tuple(prefix)]

    def _listed(self, spaces: list[str]) -> list[StoredItem]:
        """Items of `spaces`: namespaces by their first item, items by insertion."""
        rows = self.memory.store.items(KIND, spaces)
        first: dict[str, int] = {}
        for r in rows:
            first.setdefault(r.space, r.seq)
        return sorted(rows, key=lambda r: (first[r.space], r.seq))

    def _search(self, op: SearchOp) -> list[SearchItem]:
        if op.limit < 0 or op.offset < 0:
            raise ValueError(f"limit and offset must not be negative, got limit={op.limit}, offset={op.offset}")
        if op.filter is not None and not isinstance(op.filter, Mapping):
            raise ValueError(f"filter: expected a mapping, got {type(op.filter).__name__}")
        _check_filter(op.filter or {})
        spaces = self._spaces(op.namespace_prefix)
        rows = [r for r in self._listed(spaces) if _matches(json.loads(r.value), op.filter)]
        if not op.query:
            return [self._item(r, searched=True) for r in rows[op.offset:op.offset + op.limit]]
        want = op.offset + op.limit
        scored: list[tuple[float, StoredItem]] = []
        for space in spaces:
            candidates = {r.turn_id: r for r in rows if r.space == space and r.turn_id}
            if candidates:
                scored += self._ranked(op.query, space, candidates, want)
        scored.sort(key=lambda x: -x[0])  # stable: ties keep the listing order
        ranked = [self._item(r, s, searched=True) for s, r in scored]
        ranked += [self._item(r, searched=True) for r in rows if not r.turn_id]
        return ranked[op.offset:want]

    def _ranked(self, query: str, space: str, candidates: dict[str, StoredItem], want: int
                ) -> list[tuple[float, StoredItem]]:
        """(score, row) of the `candidates` (turn id -> row) that ETAMem retrieval finds for the
        query in `space`: asks for more units until `want` items are found or the space is exhausted."""
        k = max(20, 3 * want)
        while True:
            k = min(k, MAX_QUERY_UNITS)
            hits = self.memory.search(query, space=space, top_k=k)
            best: dict[str, float] = {}
            for hit in hits:
                for tid in hit.source_turn_ids:
                    if tid in candidates and hit.score > best.get(tid, float("-inf")):
                        best[tid] = float(hit.score)
            if len(best) >= min(want, len(candidates)) or len(hits) < k or k >= MAX_QUERY_UNITS:
                return [(s, candidates[t]) for t, s in best.items()]
            k *= 4

    def _list_namespaces(self, op: ListNamespacesOp) -> list[tuple[str, ...]]:
        names = [namespace_of(s) for s in self._spaces(())]
        for cond in op.match_conditions or ():
            if cond.match_type not in ("prefix", "suffix"):
                raise ValueError(f"unsupported match type: {cond.match_type!r}")
            names = [ns for ns in names if _matches_path(ns, tuple(cond.path), cond.match_type == "suffix")]
        names = sorted({ns[:op.max_depth] for ns in names} if op.max_depth is not None else set(names))
        return names[op.offset:op.offset + op.limit]


def _matches_path(namespace: tuple[str, ...], path: tuple[str, ...], suffix: bool) -> bool:
    """`namespace` starts (ends) with `path`, "*" matching any label."""
    if len(namespace) < len(path):
        return False
    pairs = zip(reversed(namespace), reversed(path)) if suffix else zip(namespace, path)
    return all(p == "*" or a == p for a, p in pairs)


_OPERATORS = {"$eq": lambda a, b: a == b, "$ne": lambda a, b: a != b,
              "$gt": lambda a, b: float(a) > float(b), "$gte": lambda a, b: float(a) >= float(b),
              "$lt": lambda a, b: float(a) < float(b), "$lte": lambda a, b: float(a) <= float(b)}


def _matches(value: Any, condition: Mapping[str, Any] | None) -> bool:
    """Whether a value passes a LangGraph filter: equality per field (nested objects field by
    field, lists element by element) or operators `$eq $ne $gt $gte $lt $lte`."""
    if not condition:
        return True
    return all(_compare(value.get(k) if isinstance(value, Mapping) else None, v) for k, v in condition.items())


def _check_filter(condition: Any) -> None:
    """ValueError for an operator other than `_OPERATORS` anywhere in a filter (or one mixed
    with field names)."""
    if isinstance(condition, Mapping):
        if any(isinstance(k, str) and k.startswith("$") for k in condition):
            unknown = [k for k in condition if k not in _OPERATORS]
            if unknown:
                raise ValueError(f"filter: unsupported operator {unknown[0]!r} (use one of {sorted(_OPERATORS)})")
        for v in condition.values():
            _check_filter(v)
    elif isinstance(condition, (list, tuple)):
        for v in condition:
            _check_filter(v)


def _compare(have: Any, want: Any) -> bool:
    if isinstance(want, Mapping):
        if any(isinstance(k, str) and k.startswith("$") for k in want):
            try:
                return all(_OPERATORS[k](have, v) for k, v in want.items())
            except (TypeError, ValueError):  # a value that is no number
                return False
        return isinstance(have, Mapping) and all(_compare(have.get(k), v) for k, v in want.items())
    if isinstance(want, (list, tuple)):
        return (isinstance(have, (list, tuple)) and len(have) == len(want)
                and all(_compare(a, b) for a, b in zip(have, want)))
    return have == want
