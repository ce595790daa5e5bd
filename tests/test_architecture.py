"""The package's layering (docs/architecture.md) holds: imports only go down the pipeline, never up.

A layer may import itself and any lower layer; ``training`` and ``attacks`` share a level and do not import
each other; only the command lines may import anything. A failure names the offending import.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "robustbench_wave"
LAYER = {
    "io": 0,
    "distributed": 0,
    "runfolder": 0,
    "tracking": 0,
    "data": 1,
    "models": 2,
    "attacks": 3,
    "training": 3,
    "evaluation": 4,
    "analysis": 5,
    "reporting": 6,
}
COMMAND_LINES = {"train", "attack", "report", "cli", "__init__"}


def _imports(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
    return [(line, mod) for line, mod in out if mod.split(".")[0] == "robustbench_wave"]


def _layer_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


MODULES = sorted(
    p for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE).parts[0].removesuffix(".py") in LAYER
)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_only_go_down_the_pipeline(path: Path) -> None:
    own = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
    for line, module in _imports(path):
        other = _layer_of(module)
        if other is None or other == own:
            continue
        assert other not in COMMAND_LINES, f"{path.name}:{line} imports the command line {module}"
        assert LAYER[other] < LAYER[own], (
            f"{path.relative_to(PACKAGE)}:{line} imports {module}: {own} (layer {LAYER[own]}) may only import "
            f"lower layers (see docs/architecture.md)"
        )


def test_every_subpackage_has_a_layer_and_says_what_it_owns() -> None:
    for sub in PACKAGE.iterdir():
        if sub.is_dir() and (sub / "__init__.py").exists():
            assert sub.name in LAYER, f"robustbench_wave/{sub.name} has no layer in docs/architecture.md"
            doc = ast.get_docstring(ast.parse((sub / "__init__.py").read_text(encoding="utf-8")))
            assert doc and len(doc) > 80, f"robustbench_wave/{sub.name}/__init__.py needs a docstring"
