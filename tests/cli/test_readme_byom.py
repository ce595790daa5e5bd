"""The README's bring-your-own-model commands run as written (issue 21): each command of the section's code
block, read from README.md, through ``attack.main`` in a folder holding the files it names (the weights, the
``mypkg`` package, ``path/to/nets.py``), with a handful of images. Only what a test cannot have is replaced:
CIFAR-10 (a download) by ``synthetic-rgb`` (also 10 classes of 3x32x32 images), Fashion-MNIST (the default
data set) by ``synthetic`` where it is not installed (:mod:`tests.support.datasets`), and the trained zoo
``patch`` by a stand-in; the default suite and the default ``--surrogate`` stay."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from robustbench_wave import attack
from robustbench_wave.data import dataset_info
from robustbench_wave.evaluation.records import read_run
from tests.support import byom_models as byom
from tests.support.datasets import FASHION_MNIST, GRAY

README = Path(__file__).resolve().parents[2] / "README.md"
SECTION = "### Bring your own model"
MODULE = "python -m robustbench_wave.attack"
DATASETS = {"cifar10": "synthetic-rgb", FASHION_MNIST: GRAY}  # data a test cannot download -> same shape
N = 8
SMALL = [
    "--n-examples", str(N), "--no-progress", "--device", "cpu", "--n-diagnostics", "4", "--diagnostics-steps", "2",
]  # fmt: skip


def readme_commands() -> list[list[str]]:
    """The attack commands of the section's first bash block, as argument lists (comments dropped)."""
    text = README.read_text(encoding="utf-8")
    block = re.search(r"```bash\n(.*?)```", text[text.index(SECTION) :], re.DOTALL)
    assert block is not None, f"no bash block after {SECTION!r} in {README}"
    joined = block.group(1).replace("\\\n", " ")
    commands = [shlex.split(line, comments=True) for line in joined.splitlines()]
    prefix = MODULE.split()
    return [c[len(prefix) :] for c in commands if c[: len(prefix)] == prefix]


def _flag(argv: list[str], flag: str, default: str) -> str:
    return argv[argv.index(flag) + 1] if flag in argv else default


def _files(folder: Path, argv: list[str], dataset: str) -> None:
    """The files a command names, made in ``folder``: each --weights file for the --model before it, a
    ``MODULE:FACTORY`` module or ``FILE.py:FACTORY`` file returning :func:`byom.small_cnn`."""
    info = dataset_info(dataset)
    data = byom.fit_data(dataset, N)
    factory = "small_cnn" if info.in_chans == 1 else "small_cnn_rgb"
    source = f"from tests.support.byom_models import {factory}\n\n\ndef {{name}}(**kwargs):\n    return {factory}(**kwargs)\n"
    for i, arg in enumerate(argv[:-1]):
        if arg not in ("--model", "--surrogate") or ":" not in argv[i + 1]:
            continue
        reference = argv[i + 1]
        kind, name = reference.rsplit(":", 1)
        if kind == "timm":
            weights = byom.timm_weights(folder / "timm.safetensors", name, info, data)
        else:
            path = folder / kind if kind.endswith(".py") else folder / (kind.replace(".", "/") + ".py")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(source.format(name=name))
            if not kind.endswith(".py"):
                (path.parent / "__init__.py").touch()
            weights = byom.cnn_weights(folder / "cnn.safetensors", data, info.in_chans)
        if i + 2 < len(argv) and argv[i + 2] == "--weights":
            (folder / argv[i + 3]).write_bytes(weights.read_bytes())


@pytest.mark.slow
@pytest.mark.parametrize("index", range(3))
def test_the_readme_bring_your_own_model_commands_run_as_written(
    index: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commands = readme_commands()
    assert len(commands) == 3, commands  # one test per command: update range() when the README changes
    argv = [DATASETS.get(a, a) for a in commands[index]]
    if "--dataset" not in argv and GRAY != FASHION_MNIST:  # the default data set is not here: its stand-in
        argv += ["--dataset", GRAY]
    dataset = _flag(argv, "--dataset", FASHION_MNIST)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    byom.serve_zoo(monkeypatch, dataset, N)
    _files(tmp_path, argv, dataset)
    assert attack.main([*argv, *SMALL, "--out", "out", "--results-dir", "results"]) == 0
    (run,) = (tmp_path / "out" / "attack").glob("*/*")
    records, meta = read_run(run)
    assert (run / "report.md").is_file() and len(records)
    models = meta["models"]
    assert len(models) == argv.count("--model")
    lowfreq = [m.get("plan", {}).get("resolved", {}).get("lowfreq_pgd_linf") for m in models.values()]
    external = [name for name in models if name.startswith(("ext-", "timm-"))]
    assert external and all(lowfreq[list(models).index(name)] for name in external)  # level from the image
