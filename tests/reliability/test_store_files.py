"""Files beside the store say nothing about who is in it: lock files and derived directories
are named by a hash of the space name salted per store, and go with their space."""
import hashlib
import threading
import time

from etamem.store.locks import SpaceFileLock
from rel_common import conversation, fast_memory


def test_lock_and_derived_names_are_salted_and_removed_with_their_space(tmp_path):
    root = tmp_path / "s"
    mem = fast_memory(root)
    mem.add(conversation("u", 1, 3), space="alice@example.com")
    mem.add(conversation("v", 1, 3), space="bob")
    mem.checkpoint()
    unsalted = hashlib.blake2b(b"alice@example.com", digest_size=10).hexdigest()
    names = {p.name for p in root.rglob("*")}
    assert not any(unsalted in n for n in names)
    assert len(list((root / "locks").glob("*.lock"))) == 2 and len(list((root / "derived").iterdir())) == 2
    mem.delete("alice@example.com")
    assert len(list((root / "locks").glob("*.lock"))) == 1 and len(list((root / "derived").iterdir())) == 1
    mem.add(conversation("u", 1, 2), space="alice@example.com")  # the space can be created again
    assert len(list((root / "locks").glob("*.lock"))) == 2
    mem.close()
    other = fast_memory(tmp_path / "t")  # another store, another salt
    other.add(conversation("u", 1, 2), space="alice@example.com")
    assert {p.name for p in (tmp_path / "t" / "locks").iterdir()}.isdisjoint(p.name for p in (root / "locks").iterdir())
    other.close()


def test_a_writer_waiting_on_a_removed_lock_file_still_excludes_the_next_one(tmp_path):
    """The deleter holds the lock and removes the file; a writer that was waiting on the old
    file must lock the new one, so that a third writer waits for it."""
    a, b, c = (SpaceFileLock(tmp_path, "salt") for _ in range(3))
    b_in, b_out, c_in = threading.Event(), threading.Event(), threading.Event()

    def second():
        with b.hold("u"):
            b_in.set()
            b_out.wait(5)

    def third():
        with c.hold("u"):
            c_in.set()

    with a.hold("u"):
        waiter = threading.Thread(target=second)
        waiter.start()
        time.sleep(0.2)  # b waits on the file a holds
        a.remove("u")
    assert b_in.wait(5)
    late = threading.Thread(target=third)
    late.start()
    assert not c_in.wait(0.5), "a third writer got the lock while the second held it"
    b_out.set()
    assert c_in.wait(5)
    waiter.join()
    late.join()
