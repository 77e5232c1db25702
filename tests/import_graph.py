"""The import graph of the monorepo's packages and apps, read from the source with `ast` (nothing is imported).

A node is a module (`vla_envs.vector`; a package is its `__init__`). An edge `a -> b` says that module `a`
imports module `b`. Counted: every `import x` / `from x import y` / relative `from .x import y` at module level,
and with `lazy=True` (the default) also those inside functions and methods (a lazy import is still a
dependency: it runs whenever that code runs; `lazy=False` gives the graph of what runs at import time). Imports
under `if TYPE_CHECKING:` (they never run: annotations only) are counted with `annotations=True`: a cycle of
annotations is still two modules that each need the other to be read.

`from pkg import name` points at the module `pkg.name` when that is a module of the tree, else at `pkg`.
Importing `a.b.c` also runs `a/__init__` and `a/b/__init__`, but those edges are not added: a package's
`__init__` re-exporting its submodules would otherwise make every submodule import a cycle with its parent.

    python tests/import_graph.py   # prints each package's edge count and every cycle
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def source_roots(root: Path = ROOT) -> dict[str, Path]:
    """{top-level import name: its folder} of every package (`packages/*/src/*`) and app (`apps/*/src/*`)."""
    out: dict[str, Path] = {}
    for group in ("packages", "apps"):
        for src in sorted((root / group).glob("*/src")):
            for pkg in sorted(src.iterdir()):
                if (pkg / "__init__.py").exists():
                    out[pkg.name] = pkg
    return out


def module_files(top: str, folder: Path) -> dict[str, Path]:
    """{dotted module name: file} of every module under `folder` (import name `top`)."""
    out: dict[str, Path] = {}
    for path in sorted(folder.rglob("*.py")):
        parts = list(path.relative_to(folder).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join([top, *parts])] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(
    tree: ast.AST, *, lazy: bool, annotations: bool = False
) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, skipping the bodies of `if TYPE_CHECKING:` unless `annotations` (and of functions
    unless `lazy`)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test) and not annotations:
            stack.extend(node.orelse)
            continue
        if not lazy and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def imported_names(
    module: str, path: Path, *, lazy: bool = True, annotations: bool = False
) -> list[tuple[str, str | None]]:
    """`(module, name)` of every import of `module` (at `path`), relative imports resolved: `import x` gives
    `("x", None)`, `from x import y` gives `("x", "y")`."""
    is_package = path.name == "__init__.py"
    out: list[tuple[str, str | None]] = []
    for node in _imports(ast.parse(path.read_text(), filename=str(path)), lazy=lazy, annotations=annotations):
        if isinstance(node, ast.Import):
            out += [(alias.name, None) for alias in node.names]
            continue
        if node.level:
            base = module.split(".")
            if not is_package:
                base = base[:-1]
            base = base[: len(base) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        out += [(target, alias.name) for alias in node.names]
    return out


def imported_modules(
    module: str, path: Path, known: set[str], *, lazy: bool = True, annotations: bool = False
) -> set[str]:
    """Dotted names of what `module` (at `path`) imports; for `from x import y` the module `x.y` when `known`
    has it, else `x`."""
    out: set[str] = set()
    for target, name in imported_names(module, path, lazy=lazy, annotations=annotations):
        sub = f"{target}.{name}"
        out.add(sub if name is not None and sub in known else target)
    return out


def all_module_files(root: Path = ROOT) -> dict[str, Path]:
    """{dotted module name: file} over every package and app."""
    files: dict[str, Path] = {}
    for top, folder in source_roots(root).items():
        files.update(module_files(top, folder))
    return files


def build_graph(root: Path = ROOT, *, lazy: bool = True, annotations: bool = False) -> dict[str, set[str]]:
    """{module: modules of the tree it imports} over every package and app (imports of third-party or
    standard-library modules are dropped; imports of another package or app are kept); with `annotations` also
    the imports under `if TYPE_CHECKING:`."""
    files = all_module_files(root)
    known = set(files)
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        targets = set()
        for name in imported_modules(module, path, known, lazy=lazy, annotations=annotations):
            # `import a.b.c` where only `a.b` is a module of the tree (c is an attribute): use the longest known
            parts = name.split(".")
            while parts and ".".join(parts) not in known:
                parts.pop()
            if parts and ".".join(parts) != module:
                targets.add(".".join(parts))
        graph[module] = targets
    return graph


def top_of(module: str) -> str:
    return module.split(".")[0]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component with more than one module (or a module importing itself), each as
    a sorted list (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in graph:
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph[node]:
                    out.append(sorted(component))
    return sorted(out)


def cross_imports(graph: dict[str, set[str]], apps: set[str]) -> list[tuple[str, str]]:
    """(module, imported module) pairs where a package imports another package or an app (apps may import
    packages; nothing imports an app from outside it)."""
    bad = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            src, dst = top_of(module), top_of(target)
            if src == dst:
                continue
            if src in apps and dst not in apps:
                continue
            bad.append((module, target))
    return bad


def app_names(root: Path = ROOT) -> set[str]:
    """Import names of the apps (`apps/<app>/src/<name>`)."""
    return {top for top, folder in source_roots(root).items() if folder.parts[-4] == "apps"}


def private_imports(root: Path = ROOT) -> list[tuple[str, str]]:
    """(app module, what it imports) where an app imports a package's submodule or a private name (a name
    starting with `_`): the app uses the names each package's top level exports, nothing deeper."""
    apps = app_names(root)
    bad = []
    for module, path in sorted(all_module_files(root).items()):
        if top_of(module) not in apps:
            continue
        for target, name in imported_names(module, path, annotations=True):
            if top_of(target) in apps or top_of(target) not in source_roots(root):
                continue
            parts = target.split(".") + ([name] if name else [])
            if "." in target or any(p.startswith("_") for p in parts):
                bad.append((module, ".".join(parts)))
    return bad


def main() -> int:
    graph = build_graph()
    found = cycles(build_graph(annotations=True))
    crossing = cross_imports(build_graph(annotations=True), app_names()) + private_imports()
    for top in sorted({top_of(m) for m in graph}):
        edges = sum(len(t) for m, t in graph.items() if top_of(m) == top)
        print(f"{top}: {sum(top_of(m) == top for m in graph)} modules, {edges} imports")
    for component in found:
        print("cycle (imports of any kind, annotation-only ones included):", " <-> ".join(component))
    for component in cycles(build_graph(lazy=False)):
        print("import-time cycle:", " <-> ".join(component))
    for module, target in crossing:
        print("cross-package import:", module, "->", target)
    return 1 if found or crossing else 0


if __name__ == "__main__":
    sys.exit(main())
