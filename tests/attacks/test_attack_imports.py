"""No import cycle among the modules of ``robustbench_wave/attacks``: the registry sits below every back-end.

Read from the source (AST), so imports under ``if TYPE_CHECKING:`` and inside functions count too: a cycle
there still ties two modules together, and turns into an import error the day someone needs it at runtime.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support import REPO

ATTACKS = REPO / "robustbench_wave" / "attacks"
PACKAGE = "robustbench_wave.attacks"
INIT = "__init__"


def _targets(node: ast.AST, package: str, modules: set[str]) -> list[str]:
    """The sibling modules (by stem; the package itself is ``__init__``) one import statement names."""
    if isinstance(node, ast.Import):
        names = [(alias.name, None) for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:  # relative: level 1 is this package
            parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            base = f"{parent}.{base}" if base else parent
        names = [(base, alias.name) for alias in node.names]
    else:
        return []
    out = []
    for module, name in names:
        if module == package:
            out.append(name if name in modules else INIT)
        elif module.startswith(package + "."):
            out.append(module[len(package) + 1 :].split(".")[0])
    return out


def import_graph(folder: Path, package: str) -> dict[str, set[str]]:
    """Module stem -> the sibling modules it imports (any import statement anywhere in the file)."""
    files = {p.stem: p for p in sorted(folder.glob("*.py"))}
    graph: dict[str, set[str]] = {}
    for stem, path in files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found = {t for node in ast.walk(tree) for t in _targets(node, package, set(files))}
        graph[stem] = found - {stem}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a path ``[a, b, ..., a]``, or None (depth-first search)."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node], path[len(path) :] = 1, [node]
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node] = 2
        path.pop()
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start)):
            return cycle
    return None


def test_no_import_cycle_inside_attacks() -> None:
    cycle = find_cycle(import_graph(ATTACKS, PACKAGE))
    assert cycle is None, f"import cycle in robustbench_wave/attacks: {' -> '.join(cycle or [])}"


def test_the_registry_imports_no_other_attack_module() -> None:
    """Every back-end, the suite and the evaluation import the registry; it imports none of them."""
    assert import_graph(ATTACKS, PACKAGE)["registry"] == set()


def test_a_cycle_through_a_type_checking_import_is_found(tmp_path: Path) -> None:
    (tmp_path / "__init__.py").write_text("from pkg import a\n")
    (tmp_path / "a.py").write_text("from pkg.b import thing\n")
    (tmp_path / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import other\nthing = 1\n"
    )
    (tmp_path / "c.py").write_text("from pkg import b\n")
    graph = import_graph(tmp_path, "pkg")
    assert graph == {"__init__": {"a"}, "a": {"b"}, "b": {"a"}, "c": {"b"}}
    assert find_cycle(graph) == ["a", "b", "a"]
    (tmp_path / "b.py").write_text("thing = 1\n")
    assert find_cycle(import_graph(tmp_path, "pkg")) is None
