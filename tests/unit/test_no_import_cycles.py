"""The package has no import cycle: a module never imports, directly or through others, a module
that imports it back (imports under TYPE_CHECKING and inside functions count too, as grimp sees
them). A cycle found here is named by its members so that it can be untied where it was made."""

from __future__ import annotations

import grimp


def strongly_connected(graph: grimp.ImportGraph) -> list[list[str]]:
    """Tarjan's algorithm, iterative: the groups of two or more modules that reach each other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph.find_modules_directly_imported_by(root)))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.find_modules_directly_imported_by(nxt))))
                elif nxt in on_stack:
                    low[module] = min(low[module], index[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[module])
            if low[module] == index[module]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == module:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
    return groups


def test_tidelog_has_no_import_cycle() -> None:
    assert strongly_connected(grimp.build_graph("tidelog")) == []


def test_a_made_up_cycle_is_found() -> None:
    graph = grimp.ImportGraph()
    for name in ("p", "p.a", "p.b", "p.c", "p.d"):
        graph.add_module(name)
    graph.add_import(importer="p.a", imported="p.b")
    graph.add_import(importer="p.b", imported="p.c")
    graph.add_import(importer="p.c", imported="p.a")
    graph.add_import(importer="p.c", imported="p.d")
    assert strongly_connected(graph) == [["p.a", "p.b", "p.c"]]
