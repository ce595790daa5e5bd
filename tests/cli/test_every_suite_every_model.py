"""Every shipped suite and every kind of model the attack command takes (issue 21, item 1), each through
``attack.main`` end to end on a few images of the synthetic gray data set (Fashion-MNIST's shape: any machine
has it), diagnostics and report.md included: every suite on a zoo model, and the smoke suite on a ``timm:``
architecture and a factory CNN too. Each run exits 0, and every suite entry either has records for the model
or is named in meta.json and report.md with the reason it did not run as written.

Not the full product of suites and kinds (issue 31): the suites differ in their entries' budgets and
parameters, the kinds in how the command loads, wraps and plans a model, and the smoke suite holds every
attack family of every suite (checked below), so each family meets each kind. The zoo model takes every suite
because the suites are written for it (its tokenizer's band for low-frequency PGD, its gradient modes).

The models (:mod:`tests.support.byom_models`) have least-squares heads that classify the attacked images and
break at small budgets, so the suites run as shipped (no ``--attacks`` subset) in a few seconds each; with
``--no-skip-broken`` every entry attacks every clean-correct point, so each runner is called (an entry left
only broken points would not be).

Sizes (CI time): 4 images (3 of them clean-correct on the zoo model): what is checked is that each entry runs
and is recorded, which any clean-correct point shows. The zoo model's three gradient modes (exact, blocked,
bpda) meet every family in the smoke suite, whose entries are every family of every suite (checked below),
and the corruptions' first-mode-only rule in the corruptions suite; how a mode wraps the model and which
families run once per mode, once for all modes, or under the first mode alone is the family's, not the
suite's. So the other suites, the same families with other budgets and parameters, run under exact gradients
alone (``--grad-modes exact``): the autoattack suite's three modes took two thirds of its time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from robustbench_wave import attack
from robustbench_wave.attacks import list_suites, load_suite
from robustbench_wave.data import dataset_info
from robustbench_wave.evaluation.records import read_run
from tests.support import byom_models as byom

DATASET = "synthetic"
N = 4
FAST = [
    "--dataset", DATASET, "--n-examples", str(N), "--no-progress", "--device", "cpu", "--batch-size", "8",
    "--n-diagnostics", "4", "--diagnostics-steps", "2", "--no-skip-broken",
]  # fmt: skip
KINDS = ("zoo", "timm", "factory")
EVERY_FAMILY = "smoke"  # the suite every kind of model takes
CASES = [(suite, "zoo") for suite in list_suites()] + [(EVERY_FAMILY, k) for k in KINDS if k != "zoo"]
#: The suites the zoo model runs under each of its gradient modes (the others: exact alone, module docstring).
EVERY_MODE = (EVERY_FAMILY, "corruptions")


@pytest.fixture(scope="module")
def weights(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The timm and factory models' weights, heads fitted on the attacked images' data set."""
    folder = tmp_path_factory.mktemp("weights")
    data = byom.fit_data(DATASET, N)
    return {
        "timm": byom.timm_weights(folder / "vit.safetensors", byom.TIMM_ARCH, dataset_info(DATASET), data),
        "factory": byom.cnn_weights(folder / "cnn.safetensors", data),
    }


def model_args(kind: str, weights: dict[str, Path]) -> list[str]:
    """``--model`` (and ``--weights``) of one kind of model."""
    if kind == "zoo":
        return ["--model", "wavelet"]
    reference = f"timm:{byom.TIMM_ARCH}" if kind == "timm" else byom.CNN
    return ["--model", reference, "--weights", str(weights[kind])]


def not_run_as_written(meta: dict[str, Any], model: str) -> dict[str, str]:
    """Suite entry -> the reason it has no records for ``model`` (skipped for every model, or on it)."""
    skipped = {name: a["skipped"] for name, a in meta["attacks"].items() if a.get("skipped")}
    return skipped | meta["models"][model].get("plan", {}).get("not_applicable", {})


def test_the_smoke_suite_holds_every_family_of_every_suite() -> None:
    """What lets every kind of model take the smoke suite alone: no suite has a family the smoke suite lacks."""
    families = {e.family for suite in list_suites() for e in load_suite(suite).attacks}
    assert families == {e.family for e in load_suite(EVERY_FAMILY).attacks}


@pytest.mark.slow
@pytest.mark.parametrize(("suite", "kind"), CASES)
def test_every_suite_and_every_kind_of_model_run_end_to_end(
    suite: str, kind: str, weights: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    byom.serve_zoo(monkeypatch, DATASET, N)
    args = [*model_args(kind, weights), "--suite", suite, *FAST]
    if kind == "zoo" and suite not in EVERY_MODE:
        args += ["--grad-modes", "exact"]  # every family under every mode: the smoke suite's zoo case
    assert attack.main([*args, "--out", str(tmp_path), "--results-dir", str(tmp_path / "none-trained")]) == 0
    (run,) = (tmp_path / "attack" / DATASET).iterdir()
    records, meta = read_run(run)
    (model,) = meta["models"]
    if kind == "zoo":  # the modes the coverage above rests on
        every = suite in EVERY_MODE
        assert meta["models"][model]["grad_modes"] == (["exact", "blocked", "bpda"] if every else ["exact"])
    report = (run / "report.md").read_text(encoding="utf-8")
    missing = not_run_as_written(meta, model)
    for entry in load_suite(suite).attacks:
        rows = records[records["attack"] == entry.name]
        assert len(rows) != (entry.name in missing), entry.name  # records, or said why not
        assert entry.name in missing or entry.family == "clean" or rows["attacked"].any(), entry.name
        if entry.name in missing:
            assert f"`{entry.name}`" in report and missing[entry.name] in report
    for name, how in meta["models"][model].get("plan", {}).get("resolved", {}).items():
        assert f"`{name}` on `{model}`: {how}" in report
    if any(e.kind == "transfer" for e in load_suite(suite).attacks):  # no trained zoo patch: auto = none
        assert "--surrogate auto: none" in meta["models"][model]["surrogate_choice"]
        assert meta["run"]["config"]["surrogate"] == "none"
        assert meta["models"][model]["surrogate_choice"] in report
    lowfreq = [e.name for e in load_suite(suite).attacks if e.family == "lowfreq-pgd"]
    resolved = meta["models"][model].get("plan", {}).get("resolved", {})
    for name in lowfreq:  # only the CNN has no band of its own: 32x32 images -> level 2 (4x4 blocks)
        assert (name in resolved) == (kind == "factory")
        if kind == "factory":
            assert resolved[name].startswith("level = 'auto' -> 2 from the image size")
