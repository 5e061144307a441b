"""Module-level import cycles among the `etamem` modules, found with `ast` (nothing is imported).

An edge a -> b is a top-level `import b` / `from b import x` in module a (also inside a top-level
`if`/`try`, not inside an `if TYPE_CHECKING:` block); with `deferred`, imports inside functions
count too (two modules that import each other, one of them lazily, still depend on each other).
`from pkg import name` counts as an edge to `pkg.name` when that is a module, else to `pkg`. A
package's `__init__` is the module named by the package. Run `python tests/import_cycles.py
[--deferred]` to list the cycles.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIRS = {"etamem": "etamem"}  # as setup.py's package_dir (prompts/ holds no modules)


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the installed packages."""
    out = {}
    for package, folder in PACKAGE_DIRS.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = package.split(".") + list(path.relative_to(root / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _imports(body: list[ast.stmt], deferred: bool) -> list[ast.Import | ast.ImportFrom]:
    out: list[ast.Import | ast.ImportFrom] = []
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(node)
        elif isinstance(node, ast.If):
            if "TYPE_CHECKING" not in ast.unparse(node.test):
                out += _imports(node.body, deferred)
            out += _imports(node.orelse, deferred)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                out += _imports(block, deferred)
        elif deferred:  # function and class bodies, `with` and loop blocks
            out += _imports([c for c in ast.iter_child_nodes(node) if isinstance(c, ast.stmt)], deferred)
    return out


def edges(mods: dict[str, Path], deferred: bool = False) -> dict[str, set[str]]:
    """Module -> the package's modules it imports at module level (`deferred`: anywhere)."""
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        is_pkg = path.name == "__init__.py"
        for node in _imports(ast.parse(path.read_text(encoding="utf-8")).body, deferred):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                if node.level:
                    base = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    base = base[:len(base) - (node.level - 1)]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in mods else source for a in node.names]
            for target in targets:
                while target and target not in mods:  # `import etamem.x.y` names etamem.x.y, else a parent
                    target = target.rpartition(".")[0]
                if target and target != mod:
                    graph[mod].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (each sorted), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:  # Tarjan; the graph is small, recursion is fine
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def main(argv: list[str]) -> int:
    found = cycles(edges(modules(), deferred="--deferred" in argv))
    for comp in found:
        print(" <-> ".join(comp))
    print(f"{len(found)} import cycle(s)")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
