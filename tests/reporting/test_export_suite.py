"""``report export`` calls a number ``autoattack_acc`` only when AutoAttack's suite ran at full strength (issue 30):
a smoke or trimmed suite's worst case is ``worst_case_acc``, named with its suite; and the budget it exports
off RobustBench's data sets is the suite's declared reference, not the grid's middle."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from robustbench_wave.attacks import load_suite
from robustbench_wave.data import dataset_info
from robustbench_wave.evaluation.records import RecordBlock, build_records
from robustbench_wave.reporting.export import model_info
from robustbench_wave.reporting.runs import RunFolder

N = 4
GRID = (2 / 255, 4 / 255, 8 / 255)
#: AutoAttack's members (family, kind); example 0 is broken by APGD at every budget, the others hold.
MEMBERS = (("apgd", "white-box"), ("apgd-t", "white-box"), ("fab-t", "white-box"), ("square", "black-box"))


def _block(attack: str, family: str, kind: str, threat: str, eps: float, broken: bool) -> pd.DataFrame:
    ids = np.arange(N)
    labels = np.zeros(N, dtype=np.int64)
    pred = np.where((ids == 0) & broken, 1, 0)
    block = RecordBlock("m", "synthetic", "exact", attack, family, kind, threat, eps, "torchattacks")
    return build_records(block, ids, labels, np.ones(N, bool), pred, norm=np.zeros(N), loss=np.zeros(N))


def _run(suite: dict, dataset: str = "cifar10", reference: dict | None = None) -> RunFolder:
    frames = [_block("clean", "clean", "clean", "none", 0.0, False)]
    frames += [_block(f, f, k, "Linf", e, f == "apgd") for f, k in MEMBERS for e in GRID]
    info = dataset_info(dataset).to_dict()
    meta = {
        "dataset": {"name": dataset, "info": info} | ({"reference": reference} if reference else {}),
        "data_sha256": "x",
        "suite": suite,
        "models": {"m": {"param_sha256": "p"}},
    }
    return RunFolder(Path("run"), pd.concat(frames, ignore_index=True), meta)


def test_only_the_full_autoattack_suite_gives_autoattack_acc() -> None:
    full = model_info([_run(load_suite("autoattack").to_dict())], "m", "Linf")
    assert full["autoattack_acc"] == "75.00" and full["robustbench_wave"]["autoattack_complete"] is True
    assert full["eps"] == "8/255" and full["robustbench_wave"]["suite"] == "autoattack"
    trimmed = load_suite("autoattack").select(["apgd_ce_linf", "apgd_t_linf", "fab_t_linf", "square_linf"])
    for suite in (load_suite("smoke").to_dict(), trimmed.to_dict()):  # a smoke suite, a member left out
        info = model_info([_run(suite)], "m", "Linf")
        assert "autoattack_acc" not in info and info["worst_case_acc"] == "75.00"
        assert info["robustbench_wave"]["autoattack_complete"] is False
        assert f"suite {suite['name']}, not AutoAttack at full strength" in info["footnote"]


def test_the_export_budget_off_robustbench_is_the_suites_reference() -> None:
    suite = load_suite("autoattack").to_dict()
    middle = model_info([_run(suite, "synthetic")], "m", "Linf")
    assert middle["robustbench_wave"]["eps"] == 4 / 255  # no reference in meta.json: the grid's middle
    declared = model_info([_run(suite, "synthetic", {"Linf": 8 / 255})], "m", "Linf")
    assert (
        declared["robustbench_wave"]["eps"] == 8 / 255
        and "the suite's reference budget" in declared["footnote"]
    )
