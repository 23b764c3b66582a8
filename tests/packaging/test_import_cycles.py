"""No two modules of the shipped package import each other, directly or round a longer loop (issue 39).

Every import counts: at the top, inside a function (a "lazy" import that hides a cycle from the reader) and
under ``TYPE_CHECKING``. A cycle means neither module can be read, tested or moved without the other; the
fix is a third module both import, or a Protocol naming what one reads of the other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import paralleljob

ROOT = Path(paralleljob.__file__).parent

# Known cycles, each with the reason it is still here. Remove an entry when its cycle goes. (The last, the
# simulator's engine and its handler modules, went with its public surface, sim/run/surface.py.)
KNOWN: set[frozenset[str]] = set()


def module_name(path: Path) -> str:
    parts = ("paralleljob", *path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in ROOT.rglob("*.py")}

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets |= {known(a.name) for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets |= {known(f"{base}.{a.name}") or known(base) for a in node.names}
        graph[name] = {t for t in targets if t is not None and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
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
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def test_the_cycle_finder_finds_a_loop_and_nothing_else() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [frozenset({"a", "b", "c"})]


def test_no_new_import_cycles() -> None:
    found = set(cycles(import_graph()))
    new = sorted(sorted(c) for c in found - KNOWN)
    assert not new, f"modules that import each other: {new}"
    gone = sorted(sorted(c) for c in KNOWN - found)
    assert not gone, f"these cycles are gone: take them out of KNOWN: {gone}"
