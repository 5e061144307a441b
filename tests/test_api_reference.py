"""The API reference documents every parameter: the public methods of `Memory`, `AsyncMemory` and
the framework adapters list each of their parameters in a Google-style `Args:` section (what
mkdocstrings renders as the "Parameters" table of docs/python-api.md, docs/async.md and
docs/integrations/), and name no parameter they do not have; `Config` and the data types name
every field, and only real ones, under `Attributes:`. Read from the docstrings and compared with
`inspect.signature` / the dataclass fields, without building the site (`test_docs.py` builds it).
"""
from __future__ import annotations

import dataclasses
import importlib
import inspect
import logging
import re
from pathlib import Path

import pytest

from etamem.async_memory import AsyncMemory
from etamem.config import Config
from etamem.engine import ENGINE_INTERFACE, Engine
from etamem.filters import Filters
from etamem.memory import Memory
from etamem.records import AMU, Answer, Hit, SearchResult, Turn

ROOT = Path(__file__).resolve().parents[1]
ITEM = re.compile(r"^    (\*{0,2}\w+)(?: \(.*\))?:(?: |$)")  # "    name (type): text" at the section's level


def documented(obj, section: str = "Args") -> list[str]:
    """The names listed in every `section:` block of the docstring of `obj` (Google style: items
    indented one level under the header, continuation lines deeper; a line at the header's level
    ends the block)."""
    names, inside = [], False
    for line in (inspect.getdoc(obj) or "").splitlines():
        if line.strip() == f"{section}:":
            inside = True
        elif inside and line.strip() and not line.startswith(" "):
            inside = False
        elif inside and (m := ITEM.match(line)):
            names.append(m.group(1).lstrip("*"))
    return names


def parameters(fn) -> list[str]:
    """The parameters of `fn` as a docstring names them (`*args` as `args`), without self / cls."""
    return [p for p in inspect.signature(fn).parameters if p not in ("self", "cls")]


def public_methods(cls, also: tuple[type, ...] = ()) -> list[str]:
    """Public functions (sync or async, static, class) written in `cls` or in the classes `also`
    (e.g. `Memory`'s base `Engine`, whose public methods its page shows); properties and what a
    framework adds to the class (pydantic's `model_post_init`) aside."""
    names = []
    for owner in (cls, *also):
        for name, value in vars(owner).items():
            fn = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
            if not name.startswith("_") and inspect.isfunction(fn) and fn.__module__ == owner.__module__:
                names.append(name)
    return sorted(set(names))


# the engine's interface for the methods and the write path is not the user's API: not on the page
MEMORY_METHODS = [m for m in public_methods(Memory, also=(Engine,)) if m not in ENGINE_INTERFACE]
ASYNC_METHODS = public_methods(AsyncMemory)


def test_the_main_methods_are_checked():
    """The list is read from the classes: the methods the brief names are among them."""
    for name in ("add", "search", "answer", "context", "delete", "update", "history", "links", "stats", "spaces",
                 "flush", "close", "warm", "index_info", "retrieve", "checkpoint"):
        assert name in MEMORY_METHODS, name
    for name in ("add", "search", "answer", "context", "delete", "call", "aclose"):
        assert name in ASYNC_METHODS, name


def check_args(fn, where: str) -> None:
    have, listed = parameters(fn), documented(fn)
    missing = [p for p in have if p not in listed]
    unknown = [p for p in listed if p not in have]
    assert not missing, f"{where}: parameters not under Args: {missing}"
    assert not unknown, f"{where}: Args: names no such parameter: {unknown}"
    assert len(listed) == len(set(listed)), f"{where}: a parameter listed twice: {listed}"


@pytest.mark.parametrize("name", MEMORY_METHODS)
def test_memory_method_documents_its_parameters(name):
    check_args(getattr(Memory, name), f"Memory.{name}")


@pytest.mark.parametrize("name", ASYNC_METHODS)
def test_async_memory_method_documents_its_parameters(name):
    check_args(getattr(AsyncMemory, name), f"AsyncMemory.{name}")


@pytest.mark.parametrize("cls", [Memory, AsyncMemory], ids=lambda c: c.__name__)
def test_constructor_arguments_are_on_the_class(cls):
    """mkdocstrings shows the class docstring's Args: as the constructor's parameters."""
    have, listed = parameters(cls.__init__), documented(cls)
    assert sorted(have) == sorted(listed), (cls.__name__, have, listed)


def test_every_public_method_has_returns_or_is_none():
    """A method that returns something says what under Returns: (None-returning ones need not)."""
    for cls, names in ((Memory, MEMORY_METHODS), (AsyncMemory, ASYNC_METHODS)):
        for name in names:
            fn = getattr(cls, name)
            returns = inspect.signature(fn).return_annotation
            if returns in (None, "None"):
                continue
            assert "Returns:" in (inspect.getdoc(fn) or ""), f"{cls.__name__}.{name}: no Returns: section"


ADAPTERS = [
    ("langgraph", "etamem.integrations.langgraph", ["EtamemStore"], ["space_of", "namespace_of"]),
    ("agents", "etamem.integrations.openai_agents", ["EtamemSession"],
     ["etamem_instructions", "latest_user_text", "item_text"]),
    ("llama_index.core", "etamem.integrations.llamaindex", ["EtamemMemoryBlock"], ["message_text", "speaker_of"]),
]


@pytest.mark.parametrize("framework, module, classes, functions", ADAPTERS, ids=[a[1].rsplit(".", 1)[1]
                                                                                  for a in ADAPTERS])
def test_adapter_documents_its_parameters(framework, module, classes, functions):
    pytest.importorskip(framework, reason=f"{module} needs {framework}")
    mod = importlib.import_module(module)
    for cls_name in classes:
        cls = getattr(mod, cls_name)
        init = parameters(cls.__init__)
        listed = documented(cls)
        assert sorted(init) == sorted(listed), (cls_name, init, listed)
        methods = public_methods(cls)
        assert methods, cls_name
        for name in methods:
            check_args(getattr(cls, name), f"{cls_name}.{name}")
    for name in functions:
        check_args(getattr(mod, name), name)


def test_llamaindex_block_fields_are_attributes():
    pytest.importorskip("llama_index.core")
    from etamem.integrations.llamaindex import EtamemMemoryBlock

    own = ["name", "space", "top_k", "user_name", "assistant_name"]
    assert all(f in EtamemMemoryBlock.model_fields for f in own)
    assert documented(EtamemMemoryBlock, "Attributes") == own


@pytest.mark.parametrize("cls", [Config, Turn, AMU, Hit, SearchResult, Answer, Filters], ids=lambda c: c.__name__)
def test_dataclass_fields_are_attributes(cls):
    """Every field under Attributes:, in field order, and no name that is not a field."""
    fields = [f.name for f in dataclasses.fields(cls)]
    assert documented(cls, "Attributes") == fields


def test_parser_sees_a_missing_parameter():
    """The check goes red when a parameter leaves a docstring."""
    def f(query: str, space: str = "default", *, top_k: int | None = None) -> None:
        """Search.

        Args:
            query: The query.
            top_k: How many.
                More text, deeper.

        Returns:
            Nothing.
        """
    assert documented(f) == ["query", "top_k"]
    with pytest.raises(AssertionError, match="space"):
        check_args(f, "f")


def test_griffe_parses_the_sections_without_warnings(caplog):
    """What mkdocstrings sees: griffe's Google parser finds the same parameters and warns about
    nothing (an unknown parameter, a missing type: `mkdocs build --strict` would fail on it)."""
    griffe = pytest.importorskip("griffe", reason="the docs extra: pip install -e '.[docs]'")
    caplog.set_level(logging.WARNING)
    for module, cls, names in (("etamem.memory", Memory, [n for n in MEMORY_METHODS if n in vars(Memory)]),
                               ("etamem.engine", Engine, [n for n in MEMORY_METHODS if n in vars(Engine)]),
                               ("etamem.async_memory", AsyncMemory, ASYNC_METHODS)):
        mod = griffe.load(module, search_paths=[str(ROOT)], docstring_parser="google", allow_inspection=False,
                          resolve_aliases=False)
        for name in names:
            obj = mod[f"{cls.__name__}.{name}"]
            sections = obj.docstring.parse("google") if obj.docstring else []
            found = [p.name.lstrip("*") for s in sections if s.kind.value == "parameters" for p in s.value]
            assert found == documented(getattr(cls, name)), (cls.__name__, name, found)
    warned = [r.getMessage() for r in caplog.records if r.name.startswith("griffe")]
    assert not warned, warned
