"""No import circles among etamem's modules (tests/import_cycles.py finds them with `ast`)."""
from import_cycles import cycles, edges, modules


def test_no_module_level_import_cycle():
    assert cycles(edges(modules())) == []


def test_no_import_cycle_even_through_lazy_imports():
    """Two modules that import each other stay one piece even when one side imports lazily."""
    assert cycles(edges(modules(), deferred=True)) == []


def test_the_finder_sees_a_lazy_cycle(tmp_path):
    pkg = tmp_path / "etamem"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import f\n")
    (pkg / "b.py").write_text("def f():\n    from .a import g\n")
    mods = {m: p for m, p in modules(tmp_path).items() if m.startswith("etamem")}
    assert cycles(edges(mods)) == []
    assert cycles(edges(mods, deferred=True)) == [["etamem.a", "etamem.b"]]
