"""The ``slow`` marker stays true: every test of a module that starts processes is marked slow, so
``make test-fast`` (``pytest -m "not slow"``) starts none.

Read from the source (AST), as tests/test_architecture.py reads the package: a module starts processes when
it refers to ``subprocess``, ``multiprocessing`` or ``torch.multiprocessing`` (``mp.spawn``), a process pool,
``pty``, ``torch.distributed.run`` or one of ``os.system`` / ``os.popen`` / ``os.fork`` / ``os.exec*`` /
``os.spawn*`` / ``os.posix_spawn*`` -- torchrun is always one of these -- or uses a function, class or module
of the ``tests`` package that does (``tests.support.bad_inputs.run_subprocess``; a constant from the same
module does not count). A module whose only slow tests start processes keeps them there, so that its
in-process tests stay in the fast run (e.g. test_sharding.py beside test_sharding_torchrun.py).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterator

import pytest

from tests.support import REPO

TESTS = REPO / "tests"
#: Modules (and their members) whose use starts a process.
PROCESS_APIS = (
    "subprocess",
    "multiprocessing",
    "torch.multiprocessing",
    "concurrent.futures.ProcessPoolExecutor",
    "pty",
    "torch.distributed.run",
)
OS_STARTS = re.compile(r"(system|popen|fork|forkpty|posix_spawnp?|spawn[lv]p?e?|exec[lv]p?e?)")

Loader = Callable[[str], "str | None"]


def _from_disk(module: str) -> str | None:
    """The source of a module of this repository by its dotted name (None outside ``tests``)."""
    if not module.startswith("tests."):
        return None
    path = REPO.joinpath(*module.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate.read_text(encoding="utf-8")
    return None


def _is_process_api(target: str) -> bool:
    if any(target == api or target.startswith(api + ".") for api in PROCESS_APIS):
        return True
    return target.startswith("os.") and OS_STARTS.fullmatch(target[3:]) is not None


class ProcessFinder:
    """Which modules, and which of their functions and classes, start processes (memoised, cycle-safe)."""

    def __init__(self, load: Loader = _from_disk) -> None:
        self.load = load
        self.trees: dict[str, ast.Module | None] = {}
        self.aliases: dict[str, dict[str, str]] = {}
        self.seen: dict[tuple[str, str | None], bool] = {}

    def tree(self, module: str) -> ast.Module | None:
        if module not in self.trees:
            source = self.load(module)
            self.trees[module] = ast.parse(source) if source is not None else None
        return self.trees[module]

    def starts_processes(self, module: str, name: str | None = None) -> bool:
        """Whether ``module`` (or its top-level function or class ``name``) starts processes."""
        key = (module, name)
        if key not in self.seen:
            self.seen[key] = False  # a cycle adds nothing
            self.seen[key] = self._scan(module, name)
        return self.seen[key]

    def _scan(self, module: str, name: str | None) -> bool:
        tree = self.tree(module)
        if tree is None:
            return False
        if module not in self.aliases:
            self.aliases[module] = _aliases(tree)
        aliases = self.aliases[module]
        if name is None:
            node: ast.AST = tree
        else:
            defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name]
            if not defs:
                return False  # a constant or a re-exported name: no code of its own
            node = defs[0]
        return any(self._starts(target) for target in _targets(node, aliases))

    def _starts(self, target: str) -> bool:
        if _is_process_api(target):
            return True
        if not target.startswith("tests."):
            return False
        if self.tree(target) is not None:  # a whole module of the tests package
            return self.starts_processes(target)
        module, _, name = target.rpartition(".")
        return self.starts_processes(module, name)


def _imports(node: ast.Import | ast.ImportFrom) -> list[tuple[str, str]]:
    """(local name, full dotted name) of each name an import binds (``import a.b`` binds ``a``)."""
    if isinstance(node, ast.Import):
        return [
            (a.asname or a.name.split(".")[0], a.name if a.asname else a.name.split(".")[0])
            for a in node.names
        ]
    if node.module is None or node.level:
        return []  # relative imports: none in the tests
    return [(a.asname or a.name, f"{node.module}.{a.name}") for a in node.names]


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> the dotted name it was imported as, for every import of the module (any depth)."""
    imports = (n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)))
    return dict(pair for node in imports for pair in _imports(node))


def _targets(node: ast.AST, aliases: dict[str, str]) -> Iterator[str]:
    """The dotted names ``node`` imports or refers to through imported names (``mp.spawn`` ->
    ``torch.multiprocessing.spawn``)."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute):
            chain, root = [sub.attr], sub.value
            while isinstance(root, ast.Attribute):
                chain.append(root.attr)
                root = root.value
            if isinstance(root, ast.Name) and root.id in aliases:
                yield ".".join([aliases[root.id], *reversed(chain)])
        elif isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load) and sub.id in aliases:
            yield aliases[sub.id]  # a read: a field or variable that happens to be called subprocess is not
        elif isinstance(sub, ast.Import):
            yield from (a.name for a in sub.names)
        elif isinstance(sub, ast.ImportFrom):
            yield from (full for _, full in _imports(sub))


def _is_slow(node: ast.expr) -> bool:
    text = ast.unparse(node)
    return text == "pytest.mark.slow" or text.startswith("pytest.mark.slow(")


def unmarked_tests(tree: ast.Module) -> list[str]:
    """The tests of a module that are not marked slow (none when ``pytestmark`` marks the whole module)."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in node.targets):
            marks = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
            if any(_is_slow(mark) for mark in marks):
                return []
    found = []
    for node in tree.body:
        functions = [node]
        if isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            functions = [n for n in node.body if isinstance(n, ast.FunctionDef)]
            if any(_is_slow(d) for d in node.decorator_list):
                continue
        for fn in functions:
            is_test = isinstance(fn, ast.FunctionDef) and fn.name.startswith("test")
            if is_test and not any(_is_slow(d) for d in fn.decorator_list):
                found.append(fn.name)
    return found


def _test_modules() -> list[str]:
    return sorted(".".join(path.relative_to(REPO).with_suffix("").parts) for path in TESTS.rglob("test_*.py"))


@pytest.fixture(scope="module")
def finder() -> ProcessFinder:
    """One finder for the suite's modules (each file parsed once)."""
    return ProcessFinder()


def test_every_test_of_a_module_that_starts_processes_is_marked_slow(finder: ProcessFinder) -> None:
    unmarked = [
        f"{module}::{name}"
        for module in _test_modules()
        if finder.starts_processes(module)
        for name in unmarked_tests(finder.tree(module))  # type: ignore[arg-type]
    ]
    assert not unmarked, (
        "tests that start processes must be marked slow (pytestmark = pytest.mark.slow in a module of "
        f"their own, see this file's docstring): {unmarked}"
    )


def test_the_suite_has_the_process_modules_this_check_must_find(finder: ProcessFinder) -> None:
    found = {module.rpartition(".")[2] for module in _test_modules() if finder.starts_processes(module)}
    assert {
        "test_distributed_train",
        "test_sharding_torchrun",
        "test_tracking_torchrun",
        "test_bad_inputs_subprocess",
    } <= found, found
    assert not {"test_sharding", "test_tracking", "test_bad_inputs", "test_markers"} & found, found


FAKE = {
    "tests.fake.helpers": (
        "import subprocess\nTIMEOUT = 5\n"
        "def run(argv):\n    return subprocess.run(argv)\n"
        "def parse(text):\n    return text.split()\n"
    ),
    "tests.fake.wrapper": "from tests.fake.helpers import run\ndef twice(argv):\n    run(argv)\n",
}


@pytest.mark.parametrize(
    ("source", "unmarked"),
    [
        ("import subprocess\ndef test_a():\n    subprocess.run(['true'])\ndef test_b():\n    pass\n",
         ["test_a", "test_b"]),
        ("import subprocess\nimport pytest\npytestmark = pytest.mark.slow\ndef test_a():\n    subprocess.run([])\n",
         []),
        ("import pytest\nimport subprocess\n@pytest.mark.slow\ndef test_a():\n    subprocess.run([])\n"
         "def test_b():\n    pass\n", ["test_b"]),
        ("import torch.multiprocessing as mp\ndef test_a():\n    mp.spawn(print, nprocs=2)\n", ["test_a"]),
        ("import os\ndef test_a():\n    os.system('true')\n", ["test_a"]),
        ("from tests.fake.helpers import run\ndef test_a():\n    run(['true'])\n", ["test_a"]),
        ("from tests.fake.wrapper import twice\ndef test_a():\n    twice(['true'])\n", ["test_a"]),
        ("from tests.fake import helpers\ndef test_a():\n    helpers.parse('a b')\n", ["test_a"]),
        ("from tests.fake.helpers import TIMEOUT, parse\ndef test_a():\n    parse('a')\n", None),
        ("import os\ndef test_a():\n    os.getpid()\n", None),
        ("def test_a():\n    assert 'torchrun --nproc_per_node=2' in 'the recorded command'\n", None),
    ],
    ids=["subprocess, unmarked", "pytestmark", "one test marked", "mp.spawn", "os.system",
         "a helper that runs a process", "a helper calling that helper", "a helper module that runs one",
         "a constant and a pure helper", "os without a process", "torchrun only in a string"],
)  # fmt: skip
def test_the_check_finds_process_modules_and_unmarked_tests(source: str, unmarked: list[str] | None) -> None:
    """``unmarked`` None: the module starts no process (so its tests need no mark)."""
    finder = ProcessFinder({**FAKE, "tests.fake.test_x": source}.get)
    if unmarked is None:
        assert not finder.starts_processes("tests.fake.test_x")
    else:
        assert finder.starts_processes("tests.fake.test_x")
        assert unmarked_tests(ast.parse(source)) == unmarked
