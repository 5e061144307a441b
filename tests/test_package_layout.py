"""The package's folders show its parts: `etamem/` must not regrow flat, and the arrows between
the parts run one way (tests/import_cycles.py reads the imports with `ast`; nothing is imported).

- at most a few modules at the top of `etamem/` (the facade, the engine, the config and the
  pieces every part shares), each named in TOP_MODULES; every other module sits in the subpackage
  of its part (TOP_PACKAGES);
- no arrow from the core up into a face (`cli`, `serve`, `inspection`, `bench`, `integrations`);
- no arrow from ETAMem's modules into FTA-Mem's (`etamem/fta/`), but for `etamem.method`, which
  names the methods `Config.method` may choose.
"""
from pathlib import Path

import pytest

from import_cycles import edges, modules

ROOT = Path(__file__).resolve().parent.parent
TOP_MODULES = {
    "__init__", "__main__", "memory", "async_memory", "engine", "config", "presets", "method", "records",
    "filters", "tenancy", "writing", "construction", "forget", "context", "answering", "threads", "output",
    "install_hints",  # the install command an ImportError names (every part raises them)
    "offline_answer",  # answering's other half: the answer without an LLM
    "arg_order",  # the facade's reading of the old delete / update argument order
}
TOP_PACKAGES = {
    "cli", "serve", "inspection", "bench", "integrations",  # faces
    "store", "live", "models", "extraction", "facts", "ingest", "views", "retrieval", "kernels", "fta", "data",
}
FACES = ("cli", "serve", "inspection", "bench", "integrations", "__main__")
METHOD_REGISTRY = {"etamem.method"}  # knows both methods by name


def top_level(folder: Path) -> tuple[set[str], set[str]]:
    """(module names, package names) directly under `folder`."""
    mods = {p.stem for p in folder.glob("*.py")}
    pkgs = {p.name for p in folder.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    return mods, pkgs


def part(module: str) -> str:
    """The part of `etamem.a.b`: `a` (a top-level module or subpackage)."""
    return module.split(".")[1] if "." in module else ""


def wrong_arrows(graph: dict[str, set[str]]) -> list[str]:
    out = []
    for a, targets in sorted(graph.items()):
        for b in sorted(targets):
            if part(a) not in FACES and part(b) in FACES:
                out.append(f"core -> face: {a} -> {b}")
            if part(a) not in FACES + ("fta",) and part(b) == "fta" and a not in METHOD_REGISTRY:
                out.append(f"ETAMem -> FTA-Mem: {a} -> {b}")
    return out


def test_the_top_of_the_package_holds_only_the_listed_modules_and_parts():
    mods, pkgs = top_level(ROOT / "etamem")
    assert mods == TOP_MODULES, "a module at the top of etamem/: put it in the subpackage of its part"
    assert pkgs == TOP_PACKAGES
    assert len(TOP_MODULES) <= 22


def test_the_guard_sees_a_module_added_at_the_top(tmp_path):
    (tmp_path / "newthing.py").write_text("")
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "__init__.py").write_text("")
    assert top_level(tmp_path) == ({"newthing"}, {"store"})


@pytest.mark.parametrize("deferred", [False, True])
def test_no_arrow_runs_from_the_core_into_a_face_or_from_etamem_into_fta(deferred):
    assert wrong_arrows(edges(modules(), deferred=deferred)) == []


METHOD_MODULES = ("etamem.retrieval.views_method", "etamem.fta.")


@pytest.mark.parametrize("deferred", [False, True])
def test_the_facade_and_the_engine_import_neither_method(deferred):
    """`Memory` and `Engine` reach a method only through `etamem.method` (the protocol)."""
    graph = edges(modules(), deferred=deferred)
    assert [(a, b) for a in ("etamem.memory", "etamem.engine") for b in sorted(graph.get(a, ()))
            if b.startswith(METHOD_MODULES)] == []


def test_the_arrow_check_sees_a_wrong_arrow():
    graph = {"etamem.memory": {"etamem.cli.commands"}, "etamem.engine": {"etamem.fta.builder"},
             "etamem.method": {"etamem.fta.fta_method"}, "etamem.cli.commands": {"etamem.memory", "etamem.fta.links"},
             "etamem.fta.links": {"etamem.facts.supersession"}}
    assert wrong_arrows(graph) == ["ETAMem -> FTA-Mem: etamem.engine -> etamem.fta.builder",
                                   "core -> face: etamem.memory -> etamem.cli.commands"]


def test_setup_installs_every_subpackage():
    setup = (ROOT / "setup.py").read_text(encoding="utf-8")
    assert 'find_packages(include=["etamem", "etamem.*"])' in setup
