"""Install lines true on any machine (issue 49, item 7): no hint names the PyPI package `etamem`
(it is not published; anyone could register the name), every extra that runs a memory brings FAISS,
the CPU-only torch route is documented beside the local wheel, and an add that finds FAISS missing
stores nothing."""
import re
import runpy
import sys
from pathlib import Path

import pytest

from etamem import Memory
from etamem.install_hints import install_hint

ROOT = Path(__file__).resolve().parents[1]
# `pip install [flags] etamem` or `pip install [flags] "etamem[extra]"`, not the git form
# (`"etamem[extra] @ git+<repository URL>"`) nor another name (`etamem-x`, `etamem.git`)
PYPI_HINT = re.compile(r"pip3?\s+install\s+(?:-[-\w]+\s+)*['\"]?etamem(?:\[[^\]\s]*\])?+(?!\s*@|[\w/-]|\.\w)")
SCANNED = ["etamem/**/*.py", "benchmarks/**/*.py", "tests/**/*.py", "docs/**/*.md", "README.md", "CONTRIBUTING.md",
           "CHANGELOG.md", "setup.py", "pyproject.toml", ".ci/run", "prompts/*.txt"]
NO_FAISS_NEEDED = {"docs"}  # a documentation build runs no memory
FAISS = {"cpu": "faiss-cpu", "gpu": "faiss-gpu"}


@pytest.mark.parametrize("text,flagged", [
    ("pip install 'etamem[serve]'", True), ('pip install "etamem[openai-agents]"', True),
    ("pip install etamem", True), ("pip install -U etamem[cpu]", True), ("try: pip install etamem.", True),
    ('pip install "etamem[cpu] @ git+<repository URL>"', False), ('pip install -e ".[serve]"', False),
    ("pip install etamem-tools", False), ("pip install -e .", False),
])
def test_the_scan_tells_a_pypi_hint_from_the_checkout_and_git_forms(text, flagged):
    assert bool(PYPI_HINT.search(text)) is flagged


def test_no_code_or_doc_names_etamem_from_pypi():
    me = Path(__file__).resolve()
    found = []
    for pattern in SCANNED:
        for path in sorted(ROOT.glob(pattern)):
            if path.resolve() == me or not path.is_file():
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if PYPI_HINT.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not found, "install hints naming etamem from PyPI (use install_hint / the checkout form):\n" + \
        "\n".join(found)


def test_the_install_hint_is_the_checkout_and_git_forms():
    assert install_hint("serve") == ('pip install -e ".[serve]" in the etamem checkout '
                                     '(or pip install "etamem[serve] @ git+<repository URL>")')
    assert not PYPI_HINT.search(install_hint()) and not PYPI_HINT.search(install_hint("serve"))


def _extras() -> dict[str, list[str]]:
    """setup.py's extras_require, read by running it with `setup` replaced."""
    import setuptools

    seen = {}
    real = setuptools.setup
    setuptools.setup = lambda **kw: seen.update(kw)
    try:
        runpy.run_path(str(ROOT / "setup.py"), run_name="not_main")
    finally:
        setuptools.setup = real
    return seen["extras_require"]


def test_every_extra_that_runs_a_memory_brings_faiss():
    extras = _extras()
    lacking = [name for name, reqs in extras.items() if name not in NO_FAISS_NEEDED
               and not any(re.match(r"faiss-(cpu|gpu)\b", r) for r in reqs)]
    assert not lacking, f"extras without FAISS (their first add fails): {lacking}"
    assert all(any(r.startswith(FAISS[k]) for r in extras[k]) for k in FAISS)
    assert not any(r.startswith("faiss-gpu") for k, reqs in extras.items() if k != "gpu" for r in reqs)


def test_the_cpu_only_torch_route_is_documented_beside_the_local_wheel():
    for page in ("README.md", "docs/getting-started.md"):
        text = (ROOT / page).read_text(encoding="utf-8")
        assert "pip install torch --index-url https://download.pytorch.org/whl/cpu" in text, page
        assert "local wheel" in text and "torch-2.13.0+cpu" in text, page
        assert "keeps pip from pulling" not in text, page  # the old claim, true only here
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "pip install -q torch==2.13.0" in ci  # CI runs here: the local CPU wheel


def test_an_add_that_finds_faiss_missing_stores_nothing(tmp_path, monkeypatch, hashing_encoder):
    monkeypatch.setitem(sys.modules, "faiss", None)  # `import faiss` raises ImportError, as when not installed
    with Memory(tmp_path / "s", text_encoder=hashing_encoder) as mem:
        with pytest.raises(ImportError, match=re.escape('pip install -e ".[cpu]"')):
            mem.add([{"role": "user", "content": "I'm vegan."}], space="u")
        assert not mem.store.has_space("u") and mem.spaces() == []
    monkeypatch.delitem(sys.modules, "faiss")  # installed now: the same add stores the turn once
    with Memory(tmp_path / "s", text_encoder=hashing_encoder) as mem:
        assert mem.spaces() == []
        mem.add([{"role": "user", "content": "I'm vegan."}], space="u")
        assert [t.text for t in mem.turns("u")] == ["I'm vegan."]
