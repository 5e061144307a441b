"""One tenant's reads cannot take the others' read threads (`etamem serve`, a real uvicorn server on
loopback, `etamem.serve.fairness`): a key at its bound of reads in flight, or of search work (query
characters x top_k), waits a moment for one of its reads to end, then gets 429 with Retry-After,
while another key's searches are answered."""
from __future__ import annotations

import concurrent.futures
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
pytest.importorskip("fastapi", reason="the server extra: pip install -e '.[serve]'")
pytest.importorskip("uvicorn", reason="the server extra: pip install -e '.[serve]'")
import httpx  # noqa: E402

from etamem import tenancy  # noqa: E402
from etamem.serve.app import create_app  # noqa: E402
from etamem.serve.fairness import ReadBounds, ReadRefused  # noqa: E402
from rel_common import fast_memory  # noqa: E402
from test_server_hardening import ADMIN, TURN, live_server  # noqa: E402


@pytest.fixture
def memory(tmp_path):
    mem = fast_memory(tmp_path / "store")
    mem.add([TURN], space="alice")
    mem.add([TURN], space="bob")
    yield mem
    mem.close()


@pytest.fixture
def keys(memory):
    return {name: tenancy.create_key(memory.store, [name])[0] for name in ("alice", "bob")}


def held_searches(memory):
    """Make `memory.retrieve` wait inside the engine until the returned event is set; also returns
    a semaphore released once per search that got in."""
    release, inside = threading.Event(), threading.Semaphore(0)
    retrieve = memory.retrieve

    def held(*args, **kwargs):
        inside.release()
        release.wait(30)
        return retrieve(*args, **kwargs)

    memory.retrieve = held
    return release, inside


def post(url, key, path, body, timeout=60):
    return httpx.post(url + path, json=body, headers={"Authorization": f"Bearer {key}"}, timeout=timeout)


def test_a_key_over_its_concurrent_reads_gets_429_and_others_are_served(memory, keys):
    """Alice holds her two reads (the bound) inside the engine; her third search waits
    `read_wait_s`, then gets 429 with Retry-After; bob's search is answered meanwhile (four read threads), and alice's held
    searches then complete."""
    release, inside = held_searches(memory)
    app = create_app(memory, admin_key=ADMIN, warm=False, close_on_shutdown=False, workers=4, max_reads_per_key=2,
                     read_wait_s=0.3)
    with live_server(app) as port, concurrent.futures.ThreadPoolExecutor(4) as pool:
        url = f"http://127.0.0.1:{port}"
        held = [pool.submit(post, url, keys["alice"], "/v1/spaces/alice/search", {"query": "grey cat"})
                for _ in range(2)]
        assert inside.acquire(timeout=10) and inside.acquire(timeout=10)  # both inside the engine
        try:
            r = post(url, keys["alice"], "/v1/spaces/alice/search", {"query": "grey cat"}, timeout=5)
            assert r.status_code == 429, r.text
            assert r.headers["retry-after"] == "1" and r.json()["error"]["code"] == "busy"
            assert "reads in flight" in r.json()["error"]["message"]
            r = post(url, keys["alice"], "/v1/spaces/alice/context", {"query": "grey cat"}, timeout=5)
            assert r.status_code == 429
            bob_thread = pool.submit(post, url, keys["bob"], "/v1/spaces/bob/search", {"query": "grey cat"})
            assert inside.acquire(timeout=10)  # bob's search got a thread
        finally:
            release.set()
        assert bob_thread.result().status_code == 200 and bob_thread.result().json()["hits"]
        assert [f.result().status_code for f in held] == [200, 200]
        # answered: the key's reads are free again
        assert post(url, keys["alice"], "/v1/spaces/alice/search", {"query": "grey cat"}).status_code == 200
        metrics = httpx.get(url + "/metrics", headers={"Authorization": f"Bearer {ADMIN}"}).text
        assert 'etamem_refused_total{status="429"} 2' in metrics


def test_a_key_over_its_read_work_gets_429(memory, keys):
    """One heavy search (query characters x top_k over the bound) runs alone: with another of the
    key's reads in flight it gets 429; a light search of the same key beside a light one is let in."""
    release, inside = held_searches(memory)
    app = create_app(memory, admin_key=ADMIN, warm=False, close_on_shutdown=False, workers=4,
                     max_reads_per_key=4, max_read_work=10_000, read_wait_s=0.3)
    heavy = {"query": "grey cat " * 100, "top_k": 100}  # 900 characters x 100
    with live_server(app) as port, concurrent.futures.ThreadPoolExecutor(4) as pool:
        url = f"http://127.0.0.1:{port}"
        first = pool.submit(post, url, keys["alice"], "/v1/spaces/alice/search", {"query": "grey cat"})
        assert inside.acquire(timeout=10)
        try:
            r = post(url, keys["alice"], "/v1/spaces/alice/search", heavy, timeout=5)
            assert r.status_code == 429 and r.headers["retry-after"] == "1"
            assert "work" in r.json()["error"]["message"]
            light = pool.submit(post, url, keys["alice"], "/v1/spaces/alice/search", {"query": "tea", "top_k": 5})
            assert inside.acquire(timeout=10)
        finally:
            release.set()
        assert first.result().status_code == 200 and light.result().status_code == 200
        assert post(url, keys["alice"], "/v1/spaces/alice/search", heavy).status_code == 200  # alone: let in


def test_read_bounds_wait_then_refuse_and_hold_no_entry_for_an_idle_key():
    """A read beyond the bound waits for one of its key's reads to end (then runs) or is refused
    after `wait_s`; a search over the work bound waits for the key's running write too; a key with
    nothing in flight leaves no entry (no growth with the keys seen)."""
    import anyio

    bounds = ReadBounds(max_reads=1, max_work=100, wait_s=0.001)
    order = []

    async def main():
        for i in range(300):
            async with bounds.read(f"k{i}", 10):
                assert bounds.in_flight(f"k{i}") == (1, 10)
                with pytest.raises(ReadRefused):
                    async with bounds.read(f"k{i}", 1):
                        pass
        assert len(bounds) == 0

        bounds.wait_s = 5.0

        async def second():
            async with bounds.read("k", 1):
                order.append("second")

        async with anyio.create_task_group() as tg:
            async with bounds.read("k", 1):
                tg.start_soon(second)
                await anyio.sleep(0.05)
                order.append("first")
        assert order == ["first", "second"] and len(bounds) == 0

        bounds.wait_s = 0.01
        with bounds.write("w"):  # a search over the work bound waits for the key's running write
            with pytest.raises(ReadRefused, match="work"):
                async with bounds.read("w", 1000):
                    pass
            async with bounds.read("w", 10):  # a light one does not
                pass
        async with bounds.read("w", 1000):  # alone: let in
            await anyio.sleep(0.2)
        with pytest.raises(ReadRefused, match="half the time"):  # the next one rests as long as it ran
            async with bounds.read("w", 1000):
                pass
        await anyio.sleep(0.25)
        async with bounds.read("w", 1000):
            pass
        assert len(bounds) == 0

    anyio.run(main)
    with pytest.raises(ValueError):
        ReadBounds(max_reads=-1)


def test_mcp_tools_share_the_same_read_bounds(memory, keys):
    """The MCP server's search tool: a key holding its two reads gets a "busy:" tool error for a
    third (after the 1 s wait), and the held ones then complete."""
    import asyncio
    import json

    pytest.importorskip("mcp", reason="the MCP extra: pip install -e '.[mcp]'")
    from mcp import Client

    from etamem.serve.mcp_server import build_server

    release, inside = held_searches(memory)

    async def session():
        async with Client(build_server(memory, stdio_key=keys["alice"])) as c:
            args = {"space": "alice", "query": "grey cat"}
            held = [asyncio.create_task(c.call_tool("search_memory", args)) for _ in range(2)]
            for _ in range(2):
                assert await asyncio.to_thread(inside.acquire, True, 10)
            third = await c.call_tool("search_memory", args)
            release.set()
            done = await asyncio.gather(*held)
            return third, done

    third, done = asyncio.run(session())
    assert third.is_error and "busy: this key already has 2 reads in flight" in third.content[0].text
    assert all(not r.is_error and json.loads(r.content[0].text)["hits"] for r in done)
