"""`etamem.AsyncMemory` (issue 35): `Memory`'s methods as coroutines on a bounded thread pool.

50 coroutines over 10 spaces under `asyncio.gather` (adds and searches, the real MiniLM encoder):
no error, every hit from its own space, and the event loop never stalls long (a probe coroutine
that sleeps 5 ms in a loop records how late it wakes; asserted loosely, < 250 ms, to stay
deterministic on a loaded 2-core machine: `benchmarks/async_load.py` reports the real numbers).
Also: the caller's tenancy scope reaches the engine, the pool bounds the concurrent calls, the
methods and signatures match `Memory`'s, and the life cycle (`async with`, `aclose`)."""
from __future__ import annotations

import asyncio
import inspect
import json
import threading
import time

import pytest

from conftest import HashingEncoder
from etamem import AsyncMemory, Config, Memory, UnknownIdError, tenancy
from etamem.engine import ENGINE_INTERFACE
from etamem.models.affect import VaderAffectTagger
from etamem.models.encoders import CachedEncoder

SPACES = [f"tenant{i}" for i in range(10)]
WORKERS = 50
PETS = ["cat", "dog", "parrot", "rabbit", "turtle"]
PLACES = ["Lisbon", "Oslo", "Kyoto", "Lima", "Cairo"]
STALL_LIMIT_S = 0.25


def fast_memory(encoder, path=None, **cfg) -> Memory:
    enc = CachedEncoder(encoder)
    mem = Memory(path, Config.from_dict(cfg), text_encoder=enc, affect_tagger=VaderAffectTagger(enc))
    if path is not None:
        enc.persist = mem.store
    return mem


def worker_turns(space: str, w: int) -> list[dict]:
    """Two turns of worker `w` in `space`; the same texts in every space (only the ids differ), so
    a hit from another space would match the query just as well."""
    pet, place = PETS[w // len(SPACES) % len(PETS)], PLACES[w // len(SPACES) % len(PLACES)]
    return [{"turn_id": f"{space}:w{w}:0", "session_id": f"s{w}", "speaker": "Ana",
             "text": f"I adopted a {pet} last spring and named it Pixel.", "timestamp": "2023-05-08T13:56"},
            {"turn_id": f"{space}:w{w}:1", "session_id": f"s{w}", "speaker": "Ana",
             "text": f"Next month I am travelling to {place} with my sister.", "timestamp": "2023-05-08T14:00"}]


async def stall_probe(stop: asyncio.Event, period: float = 0.005) -> list[float]:
    """How late (s) each `sleep(period)` woke, until `stop` is set."""
    late = []
    while not stop.is_set():
        t0 = time.perf_counter()
        await asyncio.sleep(period)
        late.append(time.perf_counter() - t0 - period)
    return late


async def load(amem: AsyncMemory) -> tuple[dict[int, list], list[float]]:
    """WORKERS coroutines, worker w on SPACES[w % 10]: add two turns, then two searches; the
    hits per worker and the probe's lateness."""
    stop = asyncio.Event()
    probe = asyncio.create_task(stall_probe(stop))
    await asyncio.sleep(0.02)

    async def worker(w: int) -> list:
        space = SPACES[w % len(SPACES)]
        await amem.add(worker_turns(space, w), space=space)
        hits = await amem.search("Which pet did Ana adopt?", space=space, top_k=5)
        return hits + await amem.search("Where is Ana travelling?", space=space, top_k=5)

    try:
        results = await asyncio.gather(*(worker(w) for w in range(WORKERS)))
    finally:
        stop.set()
    return dict(enumerate(results)), await probe


def test_fifty_coroutines_over_ten_spaces(minilm, tmp_path):
    async def main():
        async with AsyncMemory(fast_memory(minilm, tmp_path / "store")) as amem:
            await amem.warm()
            hits, late = await load(amem)
            turns = {s: await amem.turns(s) for s in SPACES}
            amem.memory.close()  # given to AsyncMemory: its owner closes it
        return hits, late, turns

    hits, late, turns = asyncio.run(main())
    assert len(late) > 20 and max(late) < STALL_LIMIT_S, f"event loop stalled {max(late) * 1e3:.0f} ms"
    for space in SPACES:  # 5 workers x 2 turns each, all stored in their own space
        assert sorted(t.turn_id for t in turns[space]) == sorted(
            f"{space}:w{w}:{i}" for w in range(WORKERS) if SPACES[w % len(SPACES)] == space for i in (0, 1))
    for w, found in hits.items():
        space = SPACES[w % len(SPACES)]
        assert found, f"worker {w} found nothing"
        for h in found:
            assert h.amu.space == space, (w, h.amu)
            assert h.source_turns and all(t.space == space and t.turn_id.startswith(f"{space}:")
                                          for t in h.source_turns), (w, h.source_turns)
        # its own turns were stored before its searches: the pet and the place come back
        texts = " ".join(t.text for h in found for t in h.source_turns)
        assert "adopted" in texts and "travelling" in texts, (w, texts)


def test_caller_tenancy_scope_reaches_the_engine():
    """A `tenancy.scope` around an `await` applies inside the pool's thread (the context is copied)."""
    async def main():
        async with AsyncMemory(text_encoder=HashingEncoder()) as amem:
            await amem.add(worker_turns("tenant0", 0), space="tenant0")
            await amem.add(worker_turns("tenant1", 1), space="tenant1")
            with tenancy.scope(["tenant0"]):
                assert await amem.search("pet", space="tenant0")
                assert await amem.spaces() == ["tenant0"]
                with pytest.raises(tenancy.SpaceForbidden):
                    await amem.search("pet", space="tenant1")
            assert await amem.spaces() == ["tenant0", "tenant1"]

    asyncio.run(main())


def test_pool_bounds_concurrent_engine_calls():
    """`max_workers` engine calls at most run at once, however many coroutines await."""
    mem = fast_memory(HashingEncoder())
    mem.add(worker_turns("tenant0", 0), space="tenant0")
    running, most, lock = [0], [0], threading.Lock()
    real = mem.turns

    def slow_turns(*args, **kwargs):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.03)
        with lock:
            running[0] -= 1
        return real(*args, **kwargs)

    mem.turns = slow_turns

    async def main():
        amem = AsyncMemory(mem, max_workers=2)
        out = await asyncio.gather(*(amem.turns("tenant0") for _ in range(8)))
        await amem.aclose()
        return out

    out = asyncio.run(main())
    assert most[0] == 2 and all(len(t) == 2 for t in out)


def shape(fn) -> list[tuple]:
    """A function's parameters as (name, kind, default)."""
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def test_same_methods_and_signatures_as_memory():
    """Every public `Memory` method has a coroutine twin with the same parameters and defaults
    (`views` hands out live objects: use `AsyncMemory.memory.views`; `close` is `aclose`)."""
    names = {n for n, f in inspect.getmembers(Memory, inspect.isfunction) if not n.startswith("_")}
    names -= {"views", "close"} | ENGINE_INTERFACE  # the engine's calls for the methods and the write path
    for name in sorted(names):
        twin = getattr(AsyncMemory, name, None)
        assert twin is not None and inspect.iscoroutinefunction(twin), name
        assert shape(twin) == shape(getattr(Memory, name)), name
        assert twin.__doc__, name


def test_life_cycle_and_errors(tmp_path):
    async def main():
        with pytest.raises(ValueError, match="max_workers"):
            AsyncMemory(max_workers=0)
        mem = fast_memory(HashingEncoder())
        with pytest.raises(ValueError, match="config and components"):
            AsyncMemory(mem, text_encoder=HashingEncoder())
        async with AsyncMemory(mem) as amem:
            units = await amem.add(worker_turns("tenant0", 0), space="tenant0")
            assert (await amem.get(units[0].amu_id, space="tenant0")).text == units[0].text
            with pytest.raises(UnknownIdError):  # Memory's errors come through as they are
                await amem.get("nope", space="tenant0")
        assert mem.turns("tenant0")  # a Memory given to it stays open
        with pytest.raises(RuntimeError, match="closed"):
            await amem.search("pet", space="tenant0")
        await amem.aclose()  # twice: no-op
        mem.close()
        owned = AsyncMemory(tmp_path / "own", text_encoder=HashingEncoder())
        await owned.add(worker_turns("tenant0", 0), space="tenant0")
        await owned.aclose()  # opened by it: closed by it, and the store is complete
        with Memory(tmp_path / "own", text_encoder=HashingEncoder()) as again:
            assert len(again.turns("tenant0")) == 2

    asyncio.run(main())


def test_benchmark_smoke(tmp_path):
    """`benchmarks/async_load.py --quick`: every mode runs its calls and stores every turn."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from benchmarks.async_load import main

    out = tmp_path / "async_load.json"
    result = main(["--quick", "--out", str(out)])
    assert set(result["modes"]) == {"async", "threads", "blocking"}
    assert [m["calls"] for m in result["modes"].values()] == [60, 60, 60]
    assert all(m["probe_wakeups"] > 0 and m["stall_max_ms"] >= m["stall_p99_ms"] for m in result["modes"].values())
    assert json.loads(out.read_text()) == result


def test_docs_async_example_runs(tmp_path, monkeypatch, capsys):
    """docs/async.md's example as written, on the hashing encoder."""
    import re
    from pathlib import Path

    import etamem

    def fast(path=None, **kw):
        enc = CachedEncoder(HashingEncoder())
        return AsyncMemory(path, text_encoder=enc, affect_tagger=VaderAffectTagger(enc), **kw)

    monkeypatch.setattr(etamem, "AsyncMemory", fast, raising=False)
    monkeypatch.chdir(tmp_path)
    page = Path(__file__).resolve().parents[1] / "docs" / "async.md"
    code = re.search(r"<!-- async-example -->\n```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S).group(1)
    exec(compile(code, str(page), "exec"), {"__name__": "docs_example"})
    out = capsys.readouterr().out
    assert "Miso" in out and "Lyon" in out, out
    with Memory(tmp_path / "stores" / "agents", text_encoder=CachedEncoder(HashingEncoder())) as mem:
        assert mem.spaces() == ["ana", "ben"]
