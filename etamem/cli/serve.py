"""`etamem serve` (the HTTP API), `etamem mcp` (the MCP server) and `etamem keys` (API keys of a store)
on the command line."""
from __future__ import annotations

import json

from etamem.cli.common import config_from_args, existing_store, note
from etamem.serve.guard import ADMIN_KEY_ENV, admin_key_from_env

__all__ = ["ADMIN_KEY_ENV", "admin_key_from_env", "add_serve_commands", "cmd_serve", "cmd_mcp", "cmd_keys"]


def cmd_serve(args) -> int:
    from etamem.serve.app import serve

    admin_key = admin_key_from_env()
    from etamem.store.sqlite import is_database_url

    shown = args.store
    if is_database_url(shown):
        from etamem.store.postgres import redact

        shown = redact(shown)
    note(args, f"etamem serve: {shown} on http://{args.host}:{args.port} (OpenAPI: /docs, /openapi.json); "
               f"admin key {'from ' + ADMIN_KEY_ENV if admin_key else 'not set'}")
    serve(args.store, host=args.host, port=args.port, config=config_from_args(args), admin_key=admin_key,
          workers=args.workers, max_request_bytes=int(args.max_request_mb * (1 << 20)),
          max_reads_per_key=args.max_reads_per_key, max_read_work=args.max_read_work)
    return 0


def cmd_mcp(args) -> int:
    from etamem.serve.mcp_server import run

    run(args.store, transport=args.transport, host=args.host, port=args.port, config=config_from_args(args))
    return 0


def cmd_keys(args) -> int:
    from etamem.store.sqlite import open_store
    from etamem.tenancy import create_key

    store = open_store(args.store)[0]  # a store directory or a PostgreSQL URL
    try:
        if args.action == "create":
            key, record = create_key(store, args.spaces, args.note or "")
            print(key)
            note(args, f"key {record.key_id} for spaces {', '.join(record.spaces)} (shown once; the store keeps a hash)")
        elif args.action == "revoke":
            if not store.revoke_api_key(args.key_id):
                raise ValueError(f"key_id: no key {args.key_id!r} in {args.store}")
            note(args, f"revoked {args.key_id}")
        else:
            keys = store.api_keys()
            if args.json:
                print(json.dumps([{"key_id": k.key_id, "spaces": list(k.spaces), "created": k.created,
                                   "revoked": k.revoked, "note": k.note} for k in keys], indent=1))
            for k in [] if args.json else keys:
                print(f"{k.key_id}  {'revoked' if k.revoked else 'active '}  {k.created}  {','.join(k.spaces)}"
                      + (f"  ({k.note})" if k.note else ""))
    finally:
        store.close()
    return 0


def add_serve_commands(sub, common) -> None:
    s = sub.add_parser("serve", help="HTTP API over a store (FastAPI; pip install -e '.[serve]')")
    s.add_argument("store", help="store directory or PostgreSQL URL (postgresql://...)")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=8420)
    s.add_argument("--workers", type=int, default=4, help="threads running engine calls")
    s.add_argument("--max-request-mb", type=float, default=8.0, help="largest request body accepted")
    s.add_argument("--max-reads-per-key", type=int, default=None,
                   help="reads one API key may have in flight (default: half of --workers, at least 1; 0: no "
                        "bound); beyond: 429 + Retry-After")
    s.add_argument("--max-read-work", type=int, default=1_000_000,
                   help="search work one API key may have in flight, in query characters x top_k (0: no bound; "
                        "one search over it runs alone); beyond: 429 + Retry-After")
    common(s)
    s.set_defaults(func=cmd_serve)

    m = sub.add_parser("mcp", help="MCP server over a store: tools add_memory, search_memory, get_context, "
                                         "delete_memory, answer")
    m.add_argument("store", help="store directory or PostgreSQL URL")
    m.add_argument("--transport", choices=["stdio", "http"], default="stdio",
                   help="stdio (key from ETAMEM_API_KEY) or streamable HTTP at /mcp (key per request)")
    m.add_argument("--host", default="127.0.0.1")
    m.add_argument("--port", type=int, default=8421)
    common(m)
    m.set_defaults(func=cmd_mcp)

    k = sub.add_parser("keys", help="API keys of a store: create (prints the key once), list, revoke")
    k.add_argument("action", choices=["create", "list", "revoke"])
    k.add_argument("store", help="store directory or PostgreSQL URL")
    k.add_argument("key_id", nargs="?", default=None, help="revoke: the key id (etm_<key id>_...)")
    k.add_argument("--spaces", nargs="+", default=None, help="create: the spaces the key may use")
    k.add_argument("--note", default=None, help="create: who or what the key is for")
    k.add_argument("--json", action="store_true", help="list: as JSON")
    k.set_defaults(func=_checked_keys)


def _checked_keys(args) -> int:
    if args.action == "create" and not args.spaces:
        raise ValueError("--spaces: name at least one space the key may use")
    if args.action == "revoke" and not args.key_id:
        raise ValueError("key_id: name the key to revoke")
    if args.action != "create":
        existing_store(args.store)  # a missing store: the one error of every command
    return cmd_keys(args)
