"""The package's layering (docs/architecture.md) holds: imports only go down the pipeline, never up.

A layer may import itself and any lower layer; ``training`` and ``attacks`` share a level and do not import
each other. Above the layers stand the command lines (``train``, ``attack``, ``report``, ``gallery``: argument
parsing and calls into the library, ``attackrun`` owning an attack run) and the Python face (``api``); no
layer imports them, and no command line imports another (nor the repository's ``tools/``, which imports the
package and is not shipped with it). No two modules share a name. A failure names the offending import.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "robustbench_wave"
LAYER = {
    "core": 0,
    "data": 1,
    "models": 2,
    "attacks": 3,
    "training": 3,
    "evaluation": 4,
    "analysis": 5,
    "reporting": 6,
    "attackrun": 7,
    "defenses": 7,
}
#: The command lines (``python -m robustbench_wave.NAME``): nothing imports them, they import no other.
DOORS = {"train", "attack", "report", "gallery"}
#: The Python face: ``robustbench_wave.benchmark`` (``api``) and the package's ``__init__``, above the layers.
FACE = {"api", "__init__"}
#: Imports of a command line that are known and being removed, with why (none stand: ``api.benchmark()`` builds
#: the run description itself since issue 33). An entry that is no longer needed fails, so that it is deleted.
KNOWN: dict[tuple[str, str], str] = {}
#: Module names that two modules may share, and why.
SHARED_NAMES = {
    "__init__.py": "every package",
    "__main__.py": "every runnable package",
    "gallery.py": "python -m robustbench_wave.gallery (the command line) and --model "
    "robustbench_wave.models.gallery:FACTORY (the references users type, hashed into an outside model's "
    "record name) are both public names",
}


def _submodules() -> set[str]:
    return {p.stem for p in PACKAGE.glob("*.py")} | {p.name for p in PACKAGE.iterdir() if p.is_dir()}


def _imports(path: Path) -> list[tuple[int, str]]:
    """The package's modules ``path`` imports; ``from robustbench_wave import attack`` counts as
    ``robustbench_wave.attack`` (a name that is no module, e.g. ``__version__``, as the package)."""
    out, modules = [], _submodules()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module == "robustbench_wave" and node.level == 0:
            out += [(node.lineno, f"robustbench_wave.{a.name}") for a in node.names if a.name in modules]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
    return out


def _package_imports(path: Path) -> list[tuple[int, str]]:
    return [(line, mod) for line, mod in _imports(path) if mod.split(".")[0] == "robustbench_wave"]


def _layer_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


MODULES = sorted(
    p for p in PACKAGE.rglob("*.py") if p.relative_to(PACKAGE).parts[0].removesuffix(".py") in LAYER
)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_only_go_down_the_pipeline(path: Path) -> None:
    own = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
    for line, module in _package_imports(path):
        other = _layer_of(module)
        if other is None or other == own:
            continue
        assert other not in DOORS | FACE, (
            f"{path.name}:{line} imports {module}, which stands above the layers"
        )
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


#: The most lines a command line may have: argument parsing and calls, the work is the library's.
CLI_MAX_LINES = 400


@pytest.mark.parametrize("name", ["attack", "report"])
def test_the_attack_and_report_command_lines_are_thin(name: str) -> None:
    lines = len((PACKAGE / f"{name}.py").read_text(encoding="utf-8").splitlines())
    assert lines < CLI_MAX_LINES, (
        f"robustbench_wave/{name}.py has {lines} lines: move library code into a package below it"
    )


def test_the_report_command_never_imports_the_attack_command() -> None:
    """merge, finalize and re-audit reach the attack run's library (``attackrun``), not another command."""
    tree = ast.parse((PACKAGE / "report.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "robustbench_wave":
            assert "attack" not in {a.name for a in node.names}, f"report.py:{node.lineno} imports attack"
        else:
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            names += [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            assert "robustbench_wave.attack" not in names, f"report.py:{node.lineno} imports the attack CLI"


#: What ``reporting`` never imports, as module prefixes: it renders from a run folder's files (its docstring),
#: so neither torch nor an attack library, nor the attack run, nor a module whose work is attacking or
#: forwarding a model for an attack (the checklist's subset attacks and the energy PGD run in
#: ``attackrun.measure``).
REPORTING_NEVER_IMPORTS = (
    "torch",
    "torchattacks",
    "foolbox",
    "art",
    "robustbench_wave.attackrun",
    "robustbench_wave.evaluation.evaluator",
    "robustbench_wave.evaluation.execute",
    "robustbench_wave.evaluation.escalation",
    "robustbench_wave.evaluation.reaudit",
    "robustbench_wave.analysis.checks.model_checks",
    *(
        f"robustbench_wave.attacks.{m}"
        for m in ("pgd", "builtin", "apgdt", "fab", "fab_builtin", "square", "draws", "model_state")
    ),
    *(f"robustbench_wave.attacks.{m}_backend" for m in ("torchattacks", "foolbox", "art")),
)
#: ... and these names, from whichever module: the entry points that attack or forward a model.
REPORTING_NEVER_NAMES = {
    "run_diagnostics",
    "energy_removed",
    "sparsification_energy",
    "evaluate",
    "escalate",
    "get_runner",
    "PGD",
    "predict",
    "predict_common",
    "run_attack",
    "measure_randomness",
    "decide",
    "measure_run",
}


def _imported(path: Path) -> list[tuple[int, str, str | None]]:
    """(line, module, name) of every absolute import of ``path``; name None for ``import module``."""
    out: list[tuple[int, str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out += [(node.lineno, node.module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name, None) for a in node.names]
    return out


@pytest.mark.parametrize(
    "path", sorted((PACKAGE / "reporting").rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_reporting_renders_from_files_and_never_attacks(path: Path) -> None:
    for line, module, name in _imported(path):
        where = f"{path.relative_to(PACKAGE)}:{line}"
        targets = [module] + ([f"{module}.{name}"] if name else [])  # ``from pkg import submodule`` too
        for target in targets:
            for banned in REPORTING_NEVER_IMPORTS:
                assert not (target == banned or target.startswith(banned + ".")), (
                    f"{where} imports {target}: reporting renders from a run folder's files; attacks and "
                    "forward passes belong in attackrun (attackrun/measure.py)"
                )
        assert name not in REPORTING_NEVER_NAMES, (
            f"{where} imports {name} from {module}: reporting never attacks or forwards a model; run it in "
            "attackrun (attackrun/measure.py) and render its files"
        )


def _module_graph(package: str) -> dict[str, set[str]]:
    """module -> the modules of ``package`` it imports (absolute imports of robustbench_wave.<package>.*)."""
    prefix = f"robustbench_wave.{package}"
    graph = {}
    for path in sorted((PACKAGE / package).glob("*.py")):
        name = f"{prefix}.{path.stem}" if path.stem != "__init__" else prefix
        graph[name] = {m for _, m in _package_imports(path) if m.startswith(prefix + ".") or m == prefix}
    return graph


def test_the_attack_run_package_has_no_import_cycle() -> None:
    graph = _module_graph("attackrun")
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> None:
        assert node not in path, f"import cycle: {' -> '.join([*path[path.index(node) :], node])}"
        if node in done:
            return
        for other in graph.get(node, ()):
            if other != "robustbench_wave.attackrun":  # the package's own re-exports
                visit(other, [*path, node])
        done.add(node)

    for module in graph:
        visit(module, [])


def _command_line_imports() -> dict[tuple[str, str], int]:
    """(importer, command line) -> line, for the command lines, the Python face and tools/'s modules."""
    found = {}
    paths = [PACKAGE / f"{name}.py" for name in sorted(DOORS | FACE)] + sorted((REPO / "tools").glob("*.py"))
    for path in paths:
        importer = path.stem if path.parent == PACKAGE else f"tools.{path.stem}"
        for line, module in _package_imports(path):
            other = _layer_of(module)
            if other in DOORS and other != importer:
                found.setdefault((importer, other), line)
    return found


def test_no_command_line_imports_another_and_the_python_face_none() -> None:
    """A command line parses arguments and calls the library: what two of them share lives below them."""
    found = _command_line_imports()
    unknown = {pair: line for pair, line in found.items() if pair not in KNOWN}
    assert not unknown, "; ".join(
        f"{a}.py:{line} imports the command line {b}" for (a, b), line in unknown.items()
    )
    stale = set(KNOWN) - set(found)
    assert not stale, f"{sorted(stale)} no longer imported: delete them from KNOWN"


def test_the_package_never_imports_the_repositorys_own_tools() -> None:
    """tools/ (the README's published numbers) is not in the wheel: the package must not need it."""
    for path in sorted(PACKAGE.rglob("*.py")):
        for line, module in _imports(path):
            top = module.split(".")[0]
            assert top not in ("tools", "tests", "benchmarks"), (
                f"{path.relative_to(REPO)}:{line} imports {module}, which is not shipped in the package"
            )


def test_no_two_modules_share_a_name() -> None:
    """A name says where a module stands (reporting/claims_page.py, analysis/claim_rules.py), so a reader
    never opens the wrong one of two."""
    where = defaultdict(list)
    for path in PACKAGE.rglob("*.py"):
        where[path.name].append(str(path.relative_to(PACKAGE)))
    twice = {
        name: sorted(paths) for name, paths in where.items() if len(paths) > 1 and name not in SHARED_NAMES
    }
    assert not twice, f"module names used twice (rename one so the name says its layer): {twice}"
