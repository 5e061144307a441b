"""A space's identity survives its deletion: a process that has a space open never keeps
serving it after another process deleted it, even when the space is recreated and written as
many times as before (the store's generation alone would then match again), and never writes
its stale indexes into derived files. On SQLite and on PostgreSQL."""
import json

from test_store_backends import FACTS, backend, found, memory, target, texts, turns  # noqa: F401 - fixtures below  # noqa: F401 - pytest fixtures


def _same_generation(a, space: str, generation: int, facts) -> None:
    """Recreate `space` through `a` with `facts`, one add per fact, until its generation is
    `generation` again (the trap: a generation counter that restarts after a delete)."""
    i = 0
    while a.store.generation(space) < generation:
        a.add(turns([facts[i % len(facts)]], prefix=f"r{i}-"), space=space)
        i += 1
    assert a.store.generation(space) == generation


def test_a_space_deleted_and_recreated_elsewhere_is_reloaded(target):  # noqa: F811 - the fixture
    a, b = memory(target), memory(target)
    for i, fact in enumerate(FACTS[:4]):
        a.add(turns([fact], prefix=f"s{i}-"), space="u")
    generation = a.store.generation("u")
    assert "Miso" in " ".join(found(b, "grey cat named Miso", "u"))  # b holds the space live
    a.delete("u")  # e.g. `etamem ingest --replace` of an edited file: the cat's turn removed
    assert not texts(b.search("grey cat named Miso", space="u", top_k=10))  # b follows the delete
    _same_generation(a, "u", generation, FACTS[1:4])
    shown = texts(b.search("grey cat named Miso", space="u", top_k=10))
    assert shown and not any("Miso" in t for t in shown)  # b serves the new life of the space
    b.close()  # must not write the old life into derived files
    c = memory(target)
    shown = texts(c.search("grey cat named Miso", space="u", top_k=10))
    assert shown and not any("Miso" in t for t in shown)
    for m in (a, c):
        m.close()


def test_derived_files_of_an_earlier_life_are_never_loaded(tmp_path):
    """Files saved for (epoch 1, generation n) and a recreated space at (epoch 2, generation n)."""
    root = tmp_path / "s"
    a = memory(str(root))
    for i, fact in enumerate(FACTS[:3]):
        a.add(turns([fact], prefix=f"s{i}-"), space="u")
    generation = a.store.generation("u")
    a.checkpoint()
    old_stamp = a.store.stamp("u")
    a.delete("u")
    _same_generation(a, "u", generation, FACTS[3:])
    assert a.store.stamp("u") != old_stamp and a.store.stamp("u")[1] == old_stamp[1]
    a.close()
    b = memory(str(root))
    shown = texts(b.search("grey cat named Miso", space="u", top_k=10))
    assert not any("Miso" in t for t in shown)
    b.close()


def test_ingest_replace_under_a_running_server(tmp_path, monkeypatch, capsys):
    """The operator re-ingests an edited file with `--replace --yes` while a server process
    (here: a second Memory, as `etamem serve` holds one) has the space open."""
    from etamem.cli import main

    store = tmp_path / "store"
    conv = [{"space": "u", "session_id": "s0", "turn_id": f"s0:{i}", "speaker": ("Ana", "Ben")[i % 2],
             "text": fact, "timestamp": f"2023-05-08T13:0{i}:00+00:00"} for i, fact in enumerate(FACTS)]
    path = tmp_path / "turns.jsonl"
    path.write_text("\n".join(json.dumps(t) for t in conv) + "\n")
    assert main(["ingest", str(path), "--store", str(store), "--format", "jsonl", "--no-progress"]) == 0
    from etamem import Memory

    server = Memory(str(store))
    assert any("Miso" in t for t in texts(server.search("grey cat named Miso", space="u", top_k=10)))
    generation = server.store.generation("u")
    edited = [t for t in conv if "Miso" not in t["text"]]  # a sensitive turn removed
    path.write_text("\n".join(json.dumps(t) for t in edited) + "\n")
    assert main(["ingest", str(path), "--store", str(store), "--format", "jsonl", "--no-progress", "--replace", "--yes"]) == 0
    assert server.store.generation("u") == generation  # the trap: one add per ingest
    assert not any("Miso" in t for t in texts(server.search("grey cat named Miso", space="u", top_k=10)))
    server.close()
    again = Memory(str(store))
    assert not any("Miso" in t for t in texts(again.search("grey cat named Miso", space="u", top_k=10)))
    again.close()
