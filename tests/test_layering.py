"""The house's import rules (docs/architecture.md, "Layers"): imports only point down, and no
module imports itself back through others (no import circle, deferred imports included)."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("events", "projections", "policies", "tools", "actors", "transports")
MAY_IMPORT: dict[str, frozenset[str]] = {
    "events": frozenset(),
    "projections": frozenset({"events"}),
    "policies": frozenset(),
    "tools": frozenset(),
    "actors": frozenset({"events", "projections", "policies", "tools"}),
    "transports": frozenset({"events", "projections", "policies", "tools", "actors", "proto"}),
}
"""Which of reel's packages each package may import: the arrows of the architecture."""


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


@functools.cache
def parsed(path: Path) -> ast.Module:
    """The module at ``path``, parsed once for both tests (the tree is a few hundred files)."""
    return ast.parse(path.read_text())


def imported(path: Path, known: dict[str, Path]) -> Iterator[str]:
    """Every module name ``path`` imports, anywhere in it (functions and TYPE_CHECKING too):
    ``from package import sub`` is ``package.sub`` when that is a module, else ``package``."""
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                name = f"{node.module}.{alias.name}"
                yield name if name in known else node.module
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)


def test_imports_only_point_down() -> None:
    found = modules()
    wrong = sorted(
        f"{name} imports {target}"
        for name, path in found.items()
        for target in imported(path, found)
        if target.split(".")[0] in (*PACKAGES, "proto")
        and target.split(".")[0] != name.split(".")[0]
        and target.split(".")[0] not in MAY_IMPORT[name.split(".")[0]]
    )
    assert wrong == []


def test_no_import_circle() -> None:
    found = modules()
    graph: dict[str, set[str]] = {}
    for name, path in found.items():
        graph[name] = {t for t in imported(path, found) if t in found and t != name}
    assert circles(graph) == []


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_circle_finder_finds_a_circle() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
