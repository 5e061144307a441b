"""Derived files that are damaged, or well-formed but wrong, are never trusted: every case of
`rel_corruption` (truncated, zeroed, garbage, shortened or lengthened arrays, NaN vectors,
permuted or resized slot maps, out-of-range ids, files of another generation) is rebuilt from
the store or provably harmless; no search crashes, none silently changes. The full suite
(about 320 cases per mode) runs in `benchmarks/reliability.py --parts corruption`; here every
case of a well-formed but wrong file and every fifteenth damaged one."""
import pytest

from rel_corruption import corruption_run


@pytest.mark.parametrize("mode", ["plain", "restamped"])
def test_damaged_derived_files_are_rebuilt_never_used(tmp_path, mode):
    run = corruption_run(tmp_path, mode, every=15)
    assert run["cases"] >= 25
    assert run["crashed"] == 0 and run["changed"] == 0, [b for b in run["bad"] if not b.startswith("harmless")]
    if mode == "plain":  # the checksum recorded in the store catches every damaged file
        assert run["rebuilt"] == run["cases"], run["bad"]


def test_a_search_failing_on_freshly_loaded_files_rebuilds_from_the_store(tmp_path, monkeypatch, caplog):
    """Whatever the checks on load miss: an error while searching indexes just loaded from
    derived files drops them and answers from a rebuild (a warning, never an error); the same
    error on indexes built from the store is raised."""
    from etamem.retrieval.views_method import ViewsMethod
    from rel_common import conversation, fast_memory

    mem = fast_memory(tmp_path / "s")
    mem.add(conversation("u", 2, 4), space="u")
    expected = [h.amu.amu_id for h in mem.search("garden with my sister", space="u")]
    mem.close()
    real, calls = ViewsMethod.search, []

    def flaky(self, engine, *args, **kwargs):
        calls.append(engine.live_space("u").from_files)
        if len(calls) == 1:
            raise IndexError("a slot map that passed the checks")
        return real(self, engine, *args, **kwargs)

    monkeypatch.setattr(ViewsMethod, "search", flaky)
    again = fast_memory(tmp_path / "s")
    assert [h.amu.amu_id for h in again.search("garden with my sister", space="u")] == expected
    assert calls == [True, False] and "rebuilding them from the store" in caplog.text
    calls.clear()
    with pytest.raises(IndexError):  # built from the store: the error is not the files'
        again.search("garden with my sister", space="u")
    again.close()
