"""`etamem delete`, `etamem import` and the chat form of `etamem export`: moving a space's memory
between stores (and from other tools) as chat JSONL, and forgetting from the command line.

The chat JSONL is what `etamem ingest --format chat` reads (`etamem.ingest.datasets.read_chat`): one
message per line, in the space's turn order, `{"role", "content", "id", "session_id",
"timestamp", "space", "extra"}` — the turn's speaker as its role (a name for named speakers, as
`Memory.add` takes it back), its text, id, session, ISO time, and its `extra` (a message's `name`,
metadata and whatever else the turn carried). Importing the file into an empty store gives the
same turns (ids, speakers, texts, sessions, times, extras); the units are made again by the
importing store's extractor.
"""
from __future__ import annotations

import json
import sys
from typing import Iterator

from etamem.cli.common import existing_store, note, open_memory
from etamem.records import UnknownSpaceError


def _space(mem, space: str) -> str:
    """`space` if the store holds it, else UnknownSpaceError naming the known ones."""
    known = mem.spaces()
    if space not in known:
        raise UnknownSpaceError(f"space: unknown space {space!r} (known: {known[:10]})")
    return space


def chat_messages(mem, spaces: list[str]) -> Iterator[dict]:
    """The chat messages of `spaces`' turns, space by space, each in the space's turn order."""
    for space in spaces:
        for t in mem.turns(space):
            yield {"role": t.speaker, "content": t.text, "id": t.turn_id, "session_id": t.session_id,
                   "timestamp": t.timestamp.isoformat(), "space": space, **({"extra": t.extra} if t.extra else {})}


def export_chat(args) -> int:
    """`etamem export STORE --format chat [--space S] [--out FILE]`."""
    with open_memory(args, existing_store(args.store)) as mem:
        spaces = [_space(mem, args.space)] if args.space else mem.spaces()
        lines = [json.dumps(m, ensure_ascii=False) for m in chat_messages(mem, spaces)]
    text = "".join(line + "\n" for line in lines)
    if args.out:
        from etamem.output import atomic_write

        atomic_write(args.out, text)
        note(args, f"wrote {args.out}: {len(lines)} messages of {len(spaces)} space(s)")
    else:
        sys.stdout.write(text)
    return 0


def cmd_delete(args) -> int:
    """`etamem delete STORE --space S [--turn ID | --unit ID] [--yes]`: forget a unit, a turn with
    its units, or the whole space (asked first, or --yes), as `Memory.delete` does."""
    if args.turn and args.unit:
        raise ValueError("delete: give --turn or --unit, not both")
    with open_memory(args, existing_store(args.store)) as mem:
        space = _space(mem, args.space)
        if not args.turn and not args.unit:
            what = f"{space}: delete the whole space ({len(mem.turns(space))} turns, {len(mem.list(space))} units)"
            if not args.yes:
                if not sys.stdin.isatty():
                    raise ValueError(f"{what}? add --yes to confirm (not asked: no terminal)")
                if input(f"{what}? [y/N] ").strip().lower() not in ("y", "yes"):
                    raise ValueError(f"{space}: not deleted (answered no)")
        gone = mem.delete(args.unit, space, turn_id=args.turn)
    target = f"turn {args.turn}" if args.turn else f"unit {args.unit}" if args.unit else "the space"
    print(f"{space}: deleted {target} ({gone} unit{'s' * (gone != 1)}); its text is gone from every copy")
    return 0


def register(sub, common, ingest) -> None:
    """Add `delete` and `import` to the `etamem` parser (`export --format chat` is in its parser);
    `ingest`: the `etamem ingest` command, which `import` runs with the chat format."""
    d = sub.add_parser("delete", help="forget a unit, a turn with its units, or a whole space")
    d.add_argument("store")
    d.add_argument("--space", required=True)
    d.add_argument("--turn", default=None, help="a turn id: the turn and every unit drawn from it")
    d.add_argument("--unit", default=None, help="a unit id")
    d.add_argument("--yes", action="store_true", help="delete a whole space without asking")
    common(d)
    d.set_defaults(func=cmd_delete)

    i = sub.add_parser("import", help="add a chat JSONL file (as `export --format chat` writes it) to a store")
    i.add_argument("file")
    i.add_argument("--store", required=True, help="store directory (created if missing)")
    i.add_argument("--space", default=None, help="put every message in this space (default: each line's space)")
    i.add_argument("--replace", action="store_true",
                   help="delete spaces already in the store and import them again (asks; --yes off a terminal)")
    i.add_argument("--yes", action="store_true", help="confirm --replace without asking")
    i.add_argument("--no-progress", action="store_true")
    common(i)
    i.set_defaults(func=ingest, format="chat", limit=0)


__all__ = ["chat_messages", "cmd_delete", "export_chat", "register"]
