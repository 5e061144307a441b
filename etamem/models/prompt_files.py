"""Load and render the prompt templates kept as text files in `prompts/` (see docs/design.md, 'Answering and the LLM').

Installed, the templates are package data of `etamem.prompts`. In a dev checkout (a
`prompts/` directory next to the imported `etamem/` package) that directory comes first, so
a checkout reads its own templates even when another checkout is the one installed in
editable mode (which maps `etamem.prompts` to that checkout's `prompts/`). Placeholders are
`{name}`; a literal brace is written `{{` / `}}`.
"""
from __future__ import annotations

import functools
import importlib.resources
import logging
import re
import string
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

_NAME_RE = re.compile(r"^[A-Za-z0-9_\-]+$")
_REPO_PROMPTS = Path(__file__).resolve().parents[2] / "prompts"


def _prompt_dirs() -> list[Any]:
    """Candidate template directories: the checkout's `prompts/` next to the imported package
    when there is one, then the installed package data."""
    dirs: list[Any] = [_REPO_PROMPTS] if _REPO_PROMPTS.is_dir() else []
    try:
        dirs.append(importlib.resources.files("etamem.prompts"))
    except (ModuleNotFoundError, TypeError):
        pass  # dev checkout: `prompts/` is not mapped to `etamem.prompts`
    return dirs


def _check_name(name: str) -> str:
    name = name[:-4] if name.endswith(".txt") else name
    if not _NAME_RE.match(name):
        raise ValueError(f"prompt name {name!r}: expected letters, digits, '_' or '-'")
    return name


@functools.lru_cache(maxsize=64)
def load_prompt(name: str) -> str:
    """The raw text of template `name` (with or without `.txt`); ValueError if absent."""
    name = _check_name(name)
    for directory in _prompt_dirs():
        candidate = directory / f"{name}.txt"
        if candidate.is_file():
            return candidate.read_text(encoding="utf-8")
    raise ValueError(f"prompt {name!r} not found (available: {', '.join(list_prompts()) or 'none'})")


def list_prompts() -> list[str]:
    """Sorted names (without `.txt`) of all available templates."""
    names: set[str] = set()
    for directory in _prompt_dirs():
        for entry in directory.iterdir():
            if entry.name.endswith(".txt") and entry.is_file():
                names.add(entry.name[:-4])
    return sorted(names)


def placeholders(template: str) -> set[str]:
    """Top-level placeholder names used in `template` (`{a.b}` counts as `a`)."""
    names = set()
    for _, field, _, _ in string.Formatter().parse(template):
        if field is None:
            continue
        base = re.split(r"[.\[]", field, maxsplit=1)[0]
        if not base or base.isdigit():
            raise ValueError(f"prompt placeholders must be named, got {{{field}}}")
        names.add(base)
    return names


def render_template(template: str, **values: Any) -> str:
    """Fill `{name}` placeholders; ValueError naming any placeholder without a value."""
    missing = sorted(placeholders(template) - set(values))
    if missing:
        raise ValueError(f"prompt placeholder(s) without a value: {', '.join(missing)}")
    return template.format_map(values)


def render_prompt(name: str, **values: Any) -> str:
    """Load template `name` and render it with `values` (extra values are ignored)."""
    template = load_prompt(name)
    try:
        return render_template(template, **values)
    except ValueError as exc:
        raise ValueError(f"prompt {name!r}: {exc}") from None
