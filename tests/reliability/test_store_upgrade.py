"""A store written by the previous format (4) opens and is upgraded in place: the fixture
`tests/data/store_v4.tar.gz` was written by etamem at format 4 (two spaces through the
hashing test encoder, closed: derived files and lock files included)."""
import stat
import tarfile
from pathlib import Path

from etamem.store.sql import FORMAT_VERSION
from rel_common import conversation, fast_memory

FIXTURE = Path(__file__).resolve().parents[1] / "data" / "store_v4.tar.gz"


def _unpack(tmp_path) -> Path:
    root = tmp_path / "store"
    with tarfile.open(FIXTURE) as tar:
        tar.extractall(root, filter="data")
    return root


def test_a_format_4_store_is_upgraded_in_place(tmp_path):
    root = _unpack(tmp_path)
    old_locks = sorted(p.name for p in (root / "locks").iterdir())
    assert old_locks and (root / "derived").exists()
    mem = fast_memory(root)
    assert mem.store.get_meta("format_version") == str(FORMAT_VERSION)
    assert mem.store.upgraded_from == 4
    # the vector cache was keyed by text alone (readable across spaces): emptied
    assert mem.store._query("SELECT COUNT(*) FROM vector_cache")[0][0] == 0
    # derived files and lock files named by an unsalted hash of the space name: gone
    assert not (root / "derived").exists() and not list((root / "locks").glob("*.lock"))
    assert mem.spaces() == ["u", "v"]
    assert mem.store.stamp("u")[0] == ""  # written before epochs: the next write draws one
    before = [h.amu.amu_id for h in mem.search("garden with my sister", space="u", top_k=5)]
    assert before
    mem.add(conversation("u-new", 1, 2, day0=40), space="u")
    assert mem.store.stamp("u")[0] != ""
    mem.close()
    assert sorted(p.name for p in (root / "locks").iterdir()) != old_locks  # salted names now
    again = fast_memory(root)
    assert again.store.upgraded_from is None and again.index_info("u")["saved"] is not None
    assert [h.amu.amu_id for h in again.search("garden with my sister", space="u", top_k=5)][:1] == before[:1]
    again.close()


def test_new_store_files_are_private(tmp_path):
    """Directories etamem creates are 0700, its database files 0600, whatever the umask."""
    import os

    old = os.umask(0o022)
    try:
        root = tmp_path / "fresh" / "store"
        mem = fast_memory(root)
        mem.add(conversation("u", 1, 3), space="u")
        mem.close()
    finally:
        os.umask(old)
    for path in [root, *root.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & 0o077 == 0, f"{path.relative_to(tmp_path)}: {oct(mode)}"
