"""docs/integrations/mcp-clients.md (issue 35): the MCP client configurations for Claude Desktop,
Claude Code and Cursor. Every JSON block parses and names an `etamem` server whose command line
`etamem mcp`'s own argument parser accepts (stdio, with the key and HF_HUB_OFFLINE in its
environment) or whose URL is the HTTP server's `/mcp` with a bearer key; the shell commands
(`claude mcp add`, `etamem mcp --transport http`) parse the same way; and the Claude Desktop
snippet, started as written (its store and key swapped for a test store's), completes an MCP
`initialize` and `tools/list` over stdio with the `mcp` client library."""
from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import pytest

from etamem.cli.commands import build_parser
from etamem.cli.serve import cmd_mcp

PAGE = Path(__file__).resolve().parents[1] / "docs" / "integrations" / "mcp-clients.md"
TOOLS = {"add_memory", "search_memory", "get_context", "memory_history", "delete_memory", "answer"}


def blocks(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", PAGE.read_text(encoding="utf-8"), re.S | re.M)


def servers() -> list[dict]:
    """The `etamem` entry of every JSON block (each must parse and hold one)."""
    out = []
    for i, text in enumerate(blocks("json")):
        config = json.loads(text)  # a JSONDecodeError names the block's line and column
        assert set(config) == {"mcpServers"} and set(config["mcpServers"]) == {"etamem"}, (i, config)
        out.append(config["mcpServers"]["etamem"])
    return out


def mcp_args(argv: list[str]):
    """`argv` (after the program) parsed by the CLI's parser: it must be `etamem mcp`."""
    args = build_parser().parse_args(argv)  # SystemExit on anything the CLI would refuse
    assert args.command == "mcp" and args.func is cmd_mcp, argv
    return args


def check_stdio(entry: dict) -> None:
    assert set(entry) <= {"type", "command", "args", "env"} and entry.get("type", "stdio") == "stdio", entry
    assert re.fullmatch(r"(.*/)?etamem", entry["command"]), entry["command"]
    args = mcp_args(entry["args"])
    assert args.transport == "stdio" and args.store.endswith("etamem-store"), entry["args"]
    key = entry["env"]["ETAMEM_API_KEY"]
    assert key == "${ETAMEM_API_KEY}" or key.startswith("etm_"), key
    assert entry["env"]["HF_HUB_OFFLINE"] == "1"


def check_http(entry: dict, ports: set[int]) -> None:
    assert set(entry) <= {"type", "url", "headers"} and entry.get("type", "http") == "http", entry
    url = urlparse(entry["url"])
    assert url.scheme == "http" and url.path == "/mcp" and url.port in ports, (entry["url"], ports)
    assert re.fullmatch(r"Bearer etm_\w+", entry["headers"]["Authorization"]), entry["headers"]


def shell_lines() -> list[list[str]]:
    lines = [line.split("#", 1)[0].strip() for text in blocks("bash") for line in text.splitlines()]
    return [shlex.split(line) for line in lines if line]


def http_ports() -> set[int]:
    """The ports of the page's `etamem mcp ... --transport http` commands."""
    ports = set()
    for words in shell_lines():
        words = [w for w in words if not re.fullmatch(r"[A-Z_]+=\S*", w)]  # VAR=value prefixes
        if words[:2] == ["etamem", "mcp"]:
            args = mcp_args(words[1:])
            if args.transport == "http":
                ports.add(args.port)
    return ports


def test_every_json_block_is_a_valid_etamem_mcp_configuration():
    entries = servers()
    stdio = [e for e in entries if "command" in e]
    http = [e for e in entries if "url" in e]
    assert len(stdio) == 3 and len(http) == 1 and len(entries) == 4  # Desktop, Code, Cursor; Cursor over HTTP
    for entry in stdio:
        check_stdio(entry)
    ports = http_ports()
    assert ports == {8421}
    for entry in http:
        check_http(entry, ports)


def test_the_shell_commands_parse():
    seen = set()
    for words in shell_lines():
        if words[:3] == ["claude", "mcp", "add"]:
            if "--" in words:  # stdio: claude mcp add NAME [--env K=V]... -- COMMAND ARGS...
                options, command = words[3:words.index("--")], words[words.index("--") + 1:]
                env = dict(options[i + 1].split("=", 1) for i, w in enumerate(options) if w in ("--env", "-e"))
                check_stdio({"command": command[0], "args": command[1:], "env": env})
                assert "etamem" in options
                seen.add("claude stdio")
            else:  # streamable HTTP: claude mcp add --transport http NAME URL --header "..."
                i = words.index("--transport")
                assert words[i + 1] == "http" and words[i + 2] == "etamem", words
                header = words[words.index("--header") + 1].split(": ", 1)
                check_http({"url": words[i + 3], "headers": {header[0]: header[1]}}, http_ports())
                seen.add("claude http")
        elif words[:2] == ["etamem", "keys"]:
            args = build_parser().parse_args(words[1:])
            assert args.action == "create" and args.spaces == ["me"]
            seen.add("keys")
    assert seen == {"claude stdio", "claude http", "keys"}


def test_a_bad_snippet_is_caught():
    """The checks refuse what a client would start wrongly (the parser's SystemExit included)."""
    good = servers()[0]
    with pytest.raises(SystemExit):
        check_stdio({**good, "args": ["mcp", "/store", "--transport", "stdin"]})
    with pytest.raises(AssertionError):
        check_stdio({**good, "args": ["serve", "/Users/you/etamem-store"]})
    with pytest.raises(KeyError):
        check_stdio({**good, "env": {"HF_HUB_OFFLINE": "1"}})


def test_the_claude_desktop_snippet_serves_the_tools_over_stdio(tmp_path):
    pytest.importorskip("mcp", reason="the MCP extra: pip install -e '.[mcp]'")
    from mcp import Client, StdioServerParameters

    entry = servers()[0]  # Claude Desktop's
    store = tmp_path / "store"
    key = subprocess.run([sys.executable, "-m", "etamem", "keys", "create", str(store), "--spaces", "me"],
                         capture_output=True, text=True, check=True, cwd=tmp_path).stdout.strip()
    written = mcp_args(entry["args"]).store
    args = [str(store) if a == written else a for a in entry["args"]]  # the snippet's store: ours
    env = {k: v for k, v in os.environ.items() if k not in ("ETAMEM_LLM_MODEL", "ETAMEM_ADMIN_KEY", "ETAMEM_API_KEY")}
    env.update(entry["env"])
    if "ETAMEM_API_KEY" in env:
        env["ETAMEM_API_KEY"] = key  # the snippet's placeholder key: ours
    # the snippet's program is this checkout's `etamem`: the same entry point, run as a module
    params = StdioServerParameters(command=sys.executable, args=["-m", "etamem", *args], env=env, cwd=str(tmp_path))

    async def session():
        async with Client(params, mode="legacy", read_timeout_seconds=180) as client:  # initialize
            assert client.server_info is not None and client.server_info.name == "etamem"
            tools = await client.list_tools()  # tools/list
            assert {t.name for t in tools.tools} == TOOLS
            assert client.instructions and "space" in client.instructions

    asyncio.run(session())
