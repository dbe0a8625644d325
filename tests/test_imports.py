"""kvproof's modules import one another without a cycle, function-level imports included.

A cycle dodged with an import inside a function still ties the two modules together: each needs
the other loaded to work, and which one a reader may change first is no longer clear. grimp
sees every import statement in a module (top-level, in a function, under TYPE_CHECKING), so the
graph here is the one the code states; an import by importlib (an adapter of the engine
registry) is not an edge.
"""

from __future__ import annotations

from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent


def cycles(imports: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan's algorithm), each sorted;
    a module that imports itself counts too."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in sorted(imports.get(module, ())):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == module:
                    break
            if len(group) > 1 or module in imports.get(module, ()):
                found.append(sorted(group))

    for module in sorted(imports):
        if module not in index:
            visit(module)
    return found


def test_cycles_finds_a_two_module_cycle_and_a_self_import() -> None:
    assert cycles({"a": {"b"}, "b": {"a", "c"}, "c": set()}) == [["a", "b"]]
    assert cycles({"a": {"a"}}) == [["a"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_kvproof_has_no_import_cycle(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT))  # kvproof/<folder> are links to the top-level folders
    graph = grimp.build_graph("kvproof", cache_dir=None)
    imports = {module: graph.find_modules_directly_imported_by(module) for module in graph.modules}
    assert "kvproof.engines.vllm.planner" in imports  # grimp followed the links into the folders
    found = cycles(imports)
    edges = [f"{a} -> {b}" for group in found for a in group for b in sorted(imports[a]) if b in group]
    assert not found, f"import cycles among {found}: {edges}"
