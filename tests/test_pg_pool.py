"""The PostgreSQL store's connection pool and reconnect (etamem.store.pg_pool), on the session's
PostgreSQL (tests/pg_server.py; skipped, saying why, only when none can be had):

- `pool_size` from the keyword or the URL's query (removed before connecting), checked;
- the store's backends killed from another connection (`pg_terminate_backend`): a search and
  reads through `Memory` still work (reconnected, a warning logged), and so does a write
  (a fresh transaction); a write transaction or snapshot whose connection dies inside is not
  retried: `ConnectionLost`, and nothing of the write committed; an add cut in each of its
  write transactions in turn, then run again by the caller, equals one add;
- two threads hold a snapshot at the same time (the old single connection behind a lock made
  the second wait for the first), and reads from several threads give the serial results.
"""
import logging
import threading
import time

import numpy as np
import pytest

from conftest import HashingEncoder
from etamem import Memory
from etamem.models.affect import VaderAffectTagger
from etamem.models.encoders import CachedEncoder
from etamem.store.pg_pool import DEFAULT_POOL_SIZE, ConnectionLost, split_pool_size
from helpers import FACTS

QUERIES = ["a cat", "violin music", "hiking", "bread", "a nurse", "tomatoes"]
KILL = ("SELECT count(pg_terminate_backend(pid, 10000)) FROM pg_stat_activity "  # waits until they are gone
        "WHERE datname = current_database() AND pid <> pg_backend_pid()")


def turns(facts=FACTS, prefix="s"):
    return [{"turn_id": f"{prefix}0:{i}", "session_id": f"{prefix}0", "speaker": ("Ana", "Ben")[i % 2], "text": text,
             "timestamp": f"2023-05-08T{10 + i:02d}:00:00+00:00"} for i, text in enumerate(facts)]


def memory(url: str) -> Memory:
    enc = CachedEncoder(HashingEncoder(64))
    mem = Memory(url, text_encoder=enc, affect_tagger=VaderAffectTagger(enc))
    enc.persist = mem.store
    return mem


def kill_backends(url: str) -> int:
    """Terminate every other connection to the database of `url`; how many."""
    import psycopg

    with psycopg.connect(split_pool_size(url)[0], autocommit=True) as admin:
        return admin.execute(KILL).fetchone()[0]


def settled(store) -> None:
    """Wait until the store's pool opens no connection in the background (its first fill, and the
    growth a waiting request starts), so that `kill_backends` reaches every connection it will use;
    a connection opened after the kill would make the next BEGIN succeed where a test expects it to
    meet a dropped one (seen under a loaded 2-core CI run)."""
    pool = store.pool._pool  # psycopg_pool's: these tests check how the pool meets dropped connections
    pool.wait(timeout=10)
    deadline = time.monotonic() + 10
    while getattr(pool, "_growing", False) and time.monotonic() < deadline:
        time.sleep(0.01)


def texts(hits) -> list[str]:
    return [h.amu.text for h in hits]


def test_pool_size_from_the_keyword_or_the_url():
    assert split_pool_size("postgresql://u@h/db") == ("postgresql://u@h/db", DEFAULT_POOL_SIZE)
    assert split_pool_size("postgresql://u@h/db?pool_size=3&sslmode=require") == \
        ("postgresql://u@h/db?sslmode=require", 3)
    assert split_pool_size("postgresql:///db?host=%2Ftmp%2Fs&pool_size=2")[1] == 2
    assert split_pool_size("postgresql://u@h/db?pool_size=3", pool_size=5)[1] == 5  # the keyword wins
    for bad in ("postgresql://u@h/db?pool_size=0", "postgresql://u@h/db?pool_size=many"):
        with pytest.raises(ValueError, match="pool_size"):
            split_pool_size(bad)
    with pytest.raises(ValueError, match="pool_size"):
        split_pool_size("postgresql://u@h/db", pool_size=0)


def test_the_url_pool_size_is_used_and_not_passed_to_postgresql(pg_url):
    mem = memory(pg_url + ("&" if "?" in pg_url else "?") + "pool_size=3")
    mem.add(turns(), space="ana")  # the space lock's connections take the URL too
    assert mem.store.pool.size == 3 and "pool_size" not in mem.store.url
    assert texts(mem.search(FACTS[0], space="ana"))[0] == FACTS[0]
    mem.close()


def test_search_read_and_write_after_the_backends_are_killed(pg_url, caplog):
    mem = memory(pg_url)
    mem.add(turns(), space="ana")
    before = [texts(mem.search(q, space="ana")) for q in QUERIES]
    store = mem.store
    assert kill_backends(pg_url) >= 1  # the pool's idle connection (and the space lock's)
    with caplog.at_level(logging.WARNING, logger="etamem.store.pg_pool"):
        assert store.count_turns("ana") == len(FACTS)  # a read: retried on a fresh connection
    assert store.pool.reconnects == 1 and "reconnecting" in caplog.text
    kill_backends(pg_url)
    assert [texts(mem.search(q, space="ana")) for q in QUERIES] == before
    assert store.pool.reconnects == 2  # the search read the store (the space's generation)
    kill_backends(pg_url)
    other = memory(pg_url)  # opens the space from the store: snapshot reads
    assert [texts(other.search(q, space="ana")) for q in QUERIES] == before
    kill_backends(pg_url)
    mem.add(turns(["Ana bought a red bicycle for the summer."], prefix="t"), space="ana")  # a fresh transaction
    assert store.count_turns("ana") == len(FACTS) + 1
    assert texts(mem.search("a red bicycle", space="ana"))[0].startswith("Ana bought a red bicycle")
    assert store.pool.reconnects >= 2
    other.close()
    mem.close()


def test_a_write_transaction_lost_inside_is_not_retried(pg_url):
    from etamem.store.postgres import PgStore

    store = PgStore(pg_url)
    with pytest.raises(ConnectionLost, match="rolled back.*not retried"):
        with store.transaction() as cur:
            cur.execute("INSERT INTO meta (key, value) VALUES ('lost', 'x')")
            kill_backends(pg_url)  # this transaction's connection, among others
            cur.execute("INSERT INTO meta (key, value) VALUES ('lost2', 'y')")
    assert store.get_meta("lost") is None and store.get_meta("lost2") is None  # nothing committed
    with pytest.raises(ConnectionLost, match="snapshot"):
        with store.snapshot():
            store.get_meta("format_version")
            kill_backends(pg_url)
            store.get_meta("format_version")  # inside the snapshot: its one connection is gone
    store.set_meta("after", "ok")  # the next write takes a fresh connection
    assert store.get_meta("after") == "ok"
    store.close()


def test_a_transaction_or_snapshot_lost_at_begin_is_run_on_a_fresh_connection(pg_url):
    from etamem.store.postgres import PgStore

    store = PgStore(pg_url)
    settled(store)
    kill_backends(pg_url)
    store.set_meta("first", "1")  # its BEGIN met the dropped connection: nothing ran, so run again
    assert store.pool.reconnects == 1
    kill_backends(pg_url)
    with store.snapshot():
        assert store.get_meta("first") == "1"
    assert store.pool.reconnects == 2
    store.close()


def test_two_threads_hold_snapshots_at_once(pg_url):
    mem = memory(pg_url)
    mem.add(turns(), space="ana")
    store, both_inside = mem.store, threading.Barrier(2, timeout=10)
    seen, errors = [], []

    def reader():
        try:
            with store.snapshot():
                seen.append(store.count_turns("ana"))
                both_inside.wait()  # the other thread is inside its snapshot too
                seen.append(store.count_turns("ana"))
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert errors == [] and seen == [len(FACTS)] * 4
    mem.close()


def test_concurrent_reads_equal_serial_reads(pg_url):
    mem = memory(pg_url)
    mem.add(turns(), space="ana")
    store, rng = mem.store, np.random.default_rng(3)
    vectors = rng.normal(size=(8, 64)).astype(np.float32)

    def work(i: int):
        q = vectors[i % len(vectors)]
        with store.snapshot():
            return (texts(mem.search(QUERIES[i % len(QUERIES)], space="ana")), store.nearest_units("ana", "text", q, 4),
                    store.count_turns("ana"))

    serial = [work(i) for i in range(24)]
    results, start = [None] * 24, threading.Barrier(4, timeout=10)

    def run(t: int):
        start.wait()
        for i in range(t, 24, 4):
            results[i] = work(i)

    threads = [threading.Thread(target=run, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == serial
    assert store.pool.reconnects == 0
    mem.close()


def test_an_add_that_lost_its_connection_is_run_again_by_the_caller(pg_url, monkeypatch):
    """The connection dies inside the n-th write transaction of an add (each n in turn):
    `ConnectionLost` reaches the caller, and running the add again gives what one add gives
    (idempotent by turn id): the same turns, and the searches of a memory opened afresh."""
    mem = memory(pg_url)
    mem.add(turns(), space="ana")
    store, hold = mem.store, mem.store.pool.hold
    writes, kill_at = [], [0]

    def hold_then_die(*args, **kwargs):
        cm = hold(*args, **kwargs)
        if not kwargs.get("write", True) or store.pool.current() is not None:
            return cm
        writes.append(1)
        if len(writes) - 1 != kill_at[0]:
            return cm
        conn = cm.__enter__()
        kill_backends(pg_url)  # this transaction's connection too

        class Dying:
            def __enter__(self):
                return conn

            def __exit__(self, *exc):
                return cm.__exit__(*exc)

        return Dying()

    monkeypatch.setattr(store.pool, "hold", hold_then_die)
    added = len(FACTS)
    for n in range(20):
        writes.clear()
        kill_at[0] = n
        more = turns([f"Ana bought a red bicycle number {n}.", f"Ben moved to flat {n} near the river."],
                     prefix=f"t{n}-")
        try:
            mem.add(more, space="ana")
        except ConnectionLost:
            assert store.count_turns("ana") in (added, added + 2)  # the turns' own write is all or nothing
            kill_at[0] = -1
            mem.add(more, space="ana")  # the caller's retry
        else:
            assert len(writes) <= n  # the add had fewer write transactions: each one was cut once
            added += 2
            break
        added += 2
        mem.add(more, space="ana")  # once more: nothing doubled
        assert store.count_turns("ana") == added, n
    assert n >= 1
    fresh = memory(pg_url)
    for q in (*QUERIES, "a red bicycle number 0", "flat 1 near the river"):
        assert texts(mem.search(q, space="ana")) == texts(fresh.search(q, space="ana")), q
    fresh.close()
    mem.close()
