"""The two storage backends side by side (DESIGN §11, §14): every test runs on SQLite (a store
directory) and on PostgreSQL with pgvector (a fresh database on the session's server, see
tests/pg_server.py; skipped, saying why, only when no PostgreSQL can be had).

- add / search / delete through `Memory`, idempotent add, delete forgets (no row keeps the
  text), model identity recorded in `meta` and a mismatch refused;
- `nearest_units` over a table dominated by other spaces returns exactly min(k, n) rows, the
  brute-force ids (PostgreSQL's HNSW: recall >= 0.9, and the index's filtered iterative scan
  alone gives the rows);
- API keys; a write transaction is all or nothing; a snapshot does not see later commits;
- two `Memory` objects on one store follow each other's writes on their next call, and two
  writer processes (plus two readers) on one space lose and double nothing (the per-space
  writer lock: a file lock, or a PostgreSQL advisory lock).
"""
import re
import sys
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from conftest import HashingEncoder
from etamem import Memory
from etamem.models.affect import VaderAffectTagger
from etamem.models.encoders import CachedEncoder
from etamem.records import AMU
from etamem.store.sql import FORMAT_VERSION, SPACE_TABLES
from etamem.store.sqlite import open_store, top_cosine
from helpers import FACTS
from reliability.rel_common import processes_run

T0 = datetime(2023, 5, 8, 13, 0, tzinfo=timezone.utc)


def turns(facts=FACTS, prefix="s", per_session=3):
    return [{"turn_id": f"{prefix}{i // per_session}:{i % per_session}", "session_id": f"{prefix}{i // per_session}",
             "speaker": ("Ana", "Ben")[i % 2], "text": text, "timestamp": (T0 + timedelta(hours=i)).isoformat()}
            for i, text in enumerate(facts)]


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request):
    return request.param


@pytest.fixture
def target(backend, tmp_path, request):
    """What `Memory(...)` is given: a store directory, or the URL of an empty database."""
    return str(tmp_path / "store") if backend == "sqlite" else request.getfixturevalue("pg_url")


def memory(target, dim: int = 64) -> Memory:
    enc = CachedEncoder(HashingEncoder(dim))
    mem = Memory(target, text_encoder=enc, affect_tagger=VaderAffectTagger(enc))
    enc.persist = mem.store  # vectors cached in the store (the vector_cache table), as by default
    return mem


def store_of(target):
    return open_store(target)[0]


def texts(hits) -> list[str]:
    return [h.amu.text for h in hits]


def found(mem, query: str, space: str) -> list[str]:
    """The texts of the best 3 hits (with a handful of units, rank 1 depends on routing)."""
    return texts(mem.search(query, space=space, top_k=3))


def rows_holding(store, needle: str) -> dict[str, int]:
    """Per table, how many rows hold `needle` in a text value."""
    out = {}
    for table in (*SPACE_TABLES, "vector_cache", "meta"):
        n = sum(any(isinstance(v, str) and needle in v for v in row) for row in store._query(f"SELECT * FROM {table}"))
        if n:
            out[table] = n
    return out


def test_add_search_delete_round_trip(target):
    mem = memory(target)
    units = mem.add(turns(), space="ana")
    assert len(units) == len(FACTS)
    assert FACTS[0] in found(mem, "grey cat named Miso", "ana")
    reopened = memory(target)  # a second opening reads the same store (SQLite: files; PostgreSQL: rows only)
    assert FACTS[0] in found(reopened, "grey cat named Miso", "ana")
    assert reopened.stats("ana")["amus"] == len(FACTS)
    reopened.close()
    cat = next(u for u in units if "Miso" in u.text)
    assert mem.delete("ana", cat.amu_id) == 1
    assert not any("Miso" in t for t in texts(mem.search("grey cat named Miso", space="ana", top_k=10)))
    assert FACTS[1] in found(mem, "violin orchestra", "ana")
    mem.close()
    again = memory(target)
    assert sorted(a.text for a in again.list("ana")) == sorted(FACTS[1:])
    assert not any("Miso" in t for t in texts(again.search("grey cat named Miso", space="ana", top_k=10)))
    again.close()


def test_add_is_idempotent(target):
    mem = memory(target)
    first = mem.add(turns(), space="ana")
    store = mem.store
    counts = (store.count_turns("ana"), store.count_amus("ana"), store.generation("ana"))
    assert [a.amu_id for a in mem.add(turns(), space="ana")] == [a.amu_id for a in first]
    assert (store.count_turns("ana"), store.count_amus("ana"), store.generation("ana")) == counts
    changed = turns()
    changed[1]["text"] = "Ben plays the cello now."
    with pytest.raises(ValueError, match=r"turns\[1\]\.turn_id: 's0:1' is already stored"):
        mem.add(changed, space="ana")
    assert store.count_turns("ana") == counts[0]
    mem.close()


def test_delete_forgets_every_row(target):
    mem = memory(target)
    canary = "Zanzibarquux"
    facts = [*FACTS[:3], f"The secret password is {canary} and nobody knows it.", *FACTS[3:]]
    mem.add(turns(facts), space="ana")
    mem.add(turns(FACTS, prefix="b"), space="bob")
    assert rows_holding(mem.store, canary)  # turns, units, nodes (summaries and texts)
    secret = next(t for t in mem.turns("ana") if canary in t.text)
    mem.delete("ana", turn_id=secret.turn_id)
    assert rows_holding(mem.store, canary) == {}
    assert not mem.store.turns("ana", turn_ids=[secret.turn_id])
    assert not mem.store.amus_of_turns("ana", [secret.turn_id])
    assert mem.delete("ana") == len(facts) - 1  # the whole space
    for table in SPACE_TABLES:
        assert mem.store._query(f"SELECT COUNT(*) FROM {table} WHERE space=?", ("ana",))[0][0] == 0, table
    assert mem.spaces() == ["bob"] and len(mem.list("bob")) == len(FACTS)
    assert FACTS[1] in found(mem, "violin orchestra", "bob")
    mem.close()


def test_model_identity_is_recorded_and_a_mismatch_refused(target):
    mem = memory(target, dim=64)
    mem.add(turns(), space="ana")
    assert mem.store.models() == {"text_encoder": "hashing-test-encoder", "text_dim": "64",
                                  "affect_tagger": mem.affect_tagger.name, "affect_dim": str(mem.affect_tagger.dim)}
    assert mem.store.get_meta("format_version") == str(FORMAT_VERSION)
    mem.close()
    other = memory(target, dim=32)
    with pytest.raises(ValueError, match=r"text encoder: .*'hashing-test-encoder' \(dim 64\).*\(dim 32\)"):
        other.add(turns(prefix="x"), space="ana")
    with pytest.raises(ValueError, match=r"\(dim 64\)"):
        other.search("cat", space="ana")
    assert other.store.count_turns("ana") == len(FACTS)  # nothing stored
    other.close()


def test_nearest_units_over_a_table_dominated_by_other_spaces(target, backend):
    store = store_of(target)
    rng = np.random.default_rng(7)
    sizes, stored = {"crowd": 1000, "small": 30, "tiny": 3}, {}
    for space, n in sizes.items():
        units = [AMU(f"{space}-{i}", f"unit {i}", "Ana", T0, "s0", ("s0:0",), space=space) for i in range(n)]
        text_vecs, affect_vecs = rng.normal(size=(n, 32)).astype(np.float32), rng.normal(size=(n, 8)).astype(np.float32)
        store.write_amus(space, units, text_vecs, affect_vecs, [])
        stored[space] = [u.amu_id for u in units], {"text": text_vecs, "affect": affect_vecs}
    if backend == "postgres":  # the planner must take the HNSW index, even for 3 rows: on every connection
        store.close()
        store = store_of(target + ("&" if "?" in target else "?") + "options=-c%20enable_sort%3Doff")
    for space, n in sizes.items():
        ids, vecs = stored[space]
        for kind, dim in (("text", 32), ("affect", 8)):
            for k in (1, 10, 50):
                q = rng.normal(size=dim).astype(np.float32)
                got, exact = store.nearest_units(space, kind, q, k), top_cosine(ids, vecs[kind], q, k)
                assert len(got) == min(k, n), (space, kind, k)
                assert [s for _, s in got] == sorted((s for _, s in got), reverse=True)
                true = dict(top_cosine(ids, vecs[kind], q, n))
                assert all(abs(s - true[i]) < 1e-5 for i, s in got)  # the cosine of that unit
                if backend == "sqlite":
                    assert [i for i, _ in got] == [i for i, _ in exact]
                else:
                    assert len({i for i, _ in got} & {i for i, _ in exact}) >= 0.9 * len(exact), (space, kind, k)
    if backend == "postgres":
        from etamem.store.postgres import PgStore, index_name

        plan = store._query("EXPLAIN " + PgStore.nearest_sql("amu_vectors", "text", 32, 10),
                            (PgStore._vector_params(np.ones(32))[1], "tiny"))
        assert index_name("amu_vectors", "text", 32) in str(plan)
        assert store.exact_fallbacks == 0  # the filtered scan itself found every row of the tiny space
    with pytest.raises(ValueError, match="kind"):
        store.nearest_units("tiny", "colour", np.ones(32), 3)
    store.close()


def test_nearest_turns(target):
    mem = memory(target)
    mem.add(turns(), space="ana")
    mem.add(turns(FACTS[::-1], prefix="b"), space="bob")
    q = mem.text_encoder.encode(["hiking in the mountains"])[0]
    got = mem.store.nearest_turns("ana", q, 2)
    assert len(got) == 2 and got[0][0] == "s0:2" and got[0][1] > got[1][1]
    assert len(mem.store.nearest_turns("ana", q, 50)) == len(FACTS)
    mem.close()


def test_api_keys_round_trip(target):
    store = store_of(target)
    assert store.api_keys() == [] and store.api_key("k1") is None
    store.insert_api_key("k1", "hash-1", ["bob", "ana"], "2026-01-01T00:00:00+00:00", note="first")
    store.insert_api_key("k2", "hash-2", ["ana"], "2026-01-02T00:00:00+00:00")
    assert store.api_key("k1") == ("hash-1", ["ana", "bob"], False)
    assert store.revoke_api_key("k1") and not store.revoke_api_key("nope")
    assert store.api_key("k1") == ("hash-1", ["ana", "bob"], True)
    keys = store.api_keys()
    assert [(k.key_id, k.spaces, k.revoked, k.note) for k in keys] == [("k1", ("ana", "bob"), True, "first"),
                                                                       ("k2", ("ana",), False, "")]
    with pytest.raises(Exception):
        store.insert_api_key("k2", "hash-x", ["x"], "2026-01-03T00:00:00+00:00")  # ids are unique
    store.close()


def test_a_write_transaction_is_all_or_nothing_and_a_snapshot_stands_still(target):
    store, other = store_of(target), store_of(target)
    with pytest.raises(RuntimeError, match="boom"):
        with store.transaction() as cur:
            store.set_space_meta("ana", "note", "half", cur=cur)
            raise RuntimeError("boom")
    assert store.get_space_meta("ana", "note") is None
    store.save_views("ana", [])  # a write of the space: its generation goes to 1
    with store.snapshot():
        assert store.generation("ana") == 1
        other.save_views("ana", [])  # committed by another connection meanwhile
        with store.snapshot():  # nested: joins the outer one
            assert store.generation("ana") == 1
    assert store.generation("ana") == 2 == other.generation("ana")
    store.close()
    other.close()


def test_two_memories_follow_each_others_writes(target):
    a, b = memory(target), memory(target)
    a.add(turns(FACTS[1:3]), space="ana")
    assert FACTS[1] in found(b, "violin orchestra", "ana")  # b holds the space live now
    a.add(turns(FACTS[:1], prefix="c"), space="ana")
    assert FACTS[0] in found(b, "grey cat named Miso", "ana")  # b follows a's add
    cat = next(u for u in b.list("ana") if "Miso" in u.text)
    b.delete("ana", cat.amu_id)
    assert not any("Miso" in t for t in texts(a.search("grey cat named Miso", space="ana", top_k=10)))  # a follows
    b.add(turns(FACTS[3:4], prefix="d"), space="ana")
    assert FACTS[3] in found(a, "bakery sourdough bread", "ana")
    assert a.index_info("ana")["generation"] == b.index_info("ana")["generation"] == a.store.generation("ana")
    a.close()
    b.close()


def test_two_writer_processes_on_one_space(target, tmp_path):
    n = 8
    run = processes_run(tmp_path, n, timeout=300, store=target)
    assert run["writer_rcs"] == [0, 0] and run["reader_rcs"] == [0, 0], run["stderr"]
    assert run["acked_per_writer"] == [n, n]
    assert all(rep["errors"] == [] and all(rep["found"].values()) for rep in run["reports"]), run["reports"]
    assert run["lost"] == 0 and run["doubled"] == 0 and run["views_ok"], run
    assert run["turns"] == 2 * n + 1 and run["pending"] == 0


def test_memory_on_a_postgres_url_keeps_no_files(pg_url, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    mem = memory(pg_url.replace("postgresql://", "postgres://", 1))  # both spellings
    mem.add(turns(), space="ana")
    assert type(mem.store).__name__ == "PgStore" and mem.path is None and mem._llm_cache_path() is None
    assert mem.checkpoint() == []  # no derived files: indexes are rebuilt from the stored vectors
    mem.close()
    assert list(tmp_path.iterdir()) == []
    with_password = store_of(pg_url.replace("postgres:@", "postgres:hunter2@", 1))  # trust auth: ignored
    assert "hunter2" not in with_password.path and "hunter2" not in repr(with_password.path)
    with_password.close()


def test_postgres_without_psycopg_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(ImportError, match=re.escape('pip install -e ".[postgres]"')):
        Memory("postgresql://nobody@localhost/none")


def test_database_urls_and_their_passwords():
    from etamem.store.postgres import redact
    from etamem.store.sqlite import is_database_url

    assert is_database_url("postgresql://u@h/db") and is_database_url("postgres://u@h/db")
    assert not is_database_url("store_dir") and not is_database_url(None)
    from pathlib import Path
    assert not is_database_url(Path("postgresql:/x"))
    assert redact("postgresql://ana:s3cret@db.example/mem?sslmode=require") == \
        "postgresql://ana:***@db.example/mem?sslmode=require"
    assert "s3cret" not in redact("postgresql:///mem?user=ana&password=s3cret")


def test_items_are_kept_by_key_in_order_and_go_with_their_turn_and_space(target):
    mem = memory(target)
    store = mem.store
    mem.add(turns(FACTS[:3]), space="ana")
    store.put_item("ana", "k", "b", '{"v": 1}', "s0:0", "2024-01-01T00:00:00")
    store.put_item("ana", "k", "a", '{"v": 2}', "", "2024-01-01T00:00:01")
    store.put_item("bob", "k", "c", '{"v": 3}', "", "2024-01-01T00:00:02")
    store.put_item("ana", "other", "a", '{"v": 4}')
    store.put_item("ana", "k", "b", '{"v": 5}', "s0:1", "2024-01-02T00:00:00")  # replaced: keeps its place
    got = store.get_item("ana", "k", "b")
    assert (got.value, got.turn_id, got.created, got.updated) == ('{"v": 5}', "s0:1", "2024-01-01T00:00:00",
                                                                  "2024-01-02T00:00:00")
    assert [(i.space, i.key) for i in store.items("k")] == [("ana", "b"), ("ana", "a"), ("bob", "c")]
    assert [i.key for i in store.items("k", ["bob"])] == ["c"] and store.item_spaces("k") == ["ana", "bob"]
    mem.delete("ana", turn_id="s0:1")  # the item's text was in that turn
    assert store.get_item("ana", "k", "b") is None and store.get_item("ana", "k", "a") is not None
    assert store.delete_item("bob", "k", "c") and not store.delete_item("bob", "k", "c")
    mem.delete("ana")
    assert store.items("k") == [] and store.items("other") == []
    mem.close()
