"""The gallery's "broken" is the verdict's category: a defence whose adaptive numbers are upper bounds (every
gradient mode failed a check, lost its gradient at the scan, or was never judged) never reads "not broken",
and the checks columns list every mode's failed checks. Runs of 200 hand-made images, so the paired rule
decides (the hand counts: tests/defenses/test_gallery_table.py)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from robustbench_wave.analysis.verdict import NO_ADVANTAGE
from robustbench_wave.defenses import build_table, write_table
from robustbench_wave.defenses.protocols import ADAPTIVE, NAIVE
from robustbench_wave.defenses.table import formatted, title
from robustbench_wave.models.autobpda import LOST
from robustbench_wave.reporting.runs import RunFolder

N = 200
EPS = 0.03
PASS = {"gradient_health": True, "attack_convergence": True}


def _rows(model: str, mode: str, attack: str, kind: str, robust: int) -> list[dict]:
    """``model``'s rows of one attack on N images, the first ``robust`` of them left standing."""
    threat, eps = ("none", 0.0) if kind == "clean" else ("Linf", EPS)
    return [
        {"model": model, "grad_mode": mode, "attack": attack, "kind": kind, "threat": threat, "eps": eps,
         "example_id": i, "correct": kind == "clean" or i < robust, "attacked": True}
        for i in range(N)
    ]  # fmt: skip


def _run(
    models: dict[str, int],
    modes: tuple[str, ...] = ("bpda", "exact"),
    checks: dict[str, dict[str, dict[str, bool]]] | None = None,
    lost: frozenset[str] = frozenset(),
) -> RunFolder:
    """One run: per model, how many images PGD leaves standing in every mode; ``checks``: per model, per mode
    (None: mode-free) the checklist's results (None: no checklist ran); ``lost``: models whose scan found
    the gradient lost at an operation."""
    rows = []
    for model, robust in models.items():
        for mode in modes:
            rows += _rows(model, mode, "clean", "clean", N) + _rows(model, mode, "pgd", "white-box", robust)
    meta = {"models": {m: {"grad_modes": list(modes)} for m in models}}
    for model in lost:
        finding = {"op": "round", "kind": "rounding", "rule": LOST}
        meta["models"][model]["gradient_path"] = {"exact_gradient": True, "findings": [finding]}
    diagnostics = [
        {"model": model, "checks": [
            {"name": name, "grad_mode": mode, "passed": passed}
            for mode, results in by_mode.items() for name, passed in results.items()
        ]}
        for model, by_mode in (checks or {}).items()
    ]  # fmt: skip
    return RunFolder(Path(f"/runs/{'-'.join(models)}"), pd.DataFrame(rows), meta, diagnostics)


def _passed(*models: str, modes: tuple[str, ...] = ("bpda", "exact")) -> dict:
    return {m: {mode: PASS for mode in modes} for m in models}


def _table(defence: RunFolder, cnn: RunFolder | None = None) -> pd.DataFrame:
    """cnn (200 images, 100 standing, every check passed unless given) and thermometer."""
    cnn = cnn or _run({"cnn": 100}, ("exact",), _passed("cnn", modes=("exact",)))
    runs = {"cnn": {NAIVE: cnn, ADAPTIVE: cnn}, "thermometer": {NAIVE: defence, ADAPTIVE: defence}}
    return build_table(runs).set_index("defence")


#: Every adaptive mode of the defence failed a gradient-masking check.
FAILED_EVERY_MODE = {
    "thermo": {
        "bpda": {"gradient_health": False, "attack_convergence": True},
        "exact": {"gradient_health": False},
    }
}


def test_a_defence_whose_every_mode_failed_a_check_reads_unverified_not_not_broken() -> None:
    """+30 points over the CNN, the interval clears the minimum effect: it read "no" (not broken) beside
    its flagged checks; its number is an upper bound, so the table withholds it as the verdict does."""
    row = _table(_run({"thermo": 160}, checks=FAILED_EVERY_MODE)).loc["thermometer"]
    assert row["broken"] == "unverified"
    assert row["paired_diff"] == pytest.approx(0.30) and row["paired_low"] > 0.10
    assert row["standing"] == "unverified"
    assert "bpda: failed gradient checks: gradient_health" in row["untrusted_modes"]


def test_a_defence_with_every_check_passing_reads_as_before() -> None:
    table = _table(_run({"thermo": 160}, checks=_passed("thermo")))
    assert table.loc["thermometer", "broken"] == "no"  # more robust by the minimum effect: not broken
    assert table.loc["thermometer", "standing"] == "verified"
    assert table.loc["cnn", "broken"] == "reference"
    equivalent = _table(_run({"thermo": 100}, checks=_passed("thermo"))).loc["thermometer"]
    assert equivalent["broken"] == "yes"
    assert equivalent["checks_adaptive"] == "" and equivalent["untrusted_modes"] == ""


def test_a_defence_without_diagnostics_reads_unchecked() -> None:
    table = _table(_run({"thermo": 160}))
    row = table.loc["thermometer"]
    assert row["broken"] == "unchecked" and row["standing"] == "unchecked"
    assert pd.isna(row["checks_adaptive"]) and pd.isna(row["checks_naive"])
    cells = formatted(table.reset_index()).set_index("defence").loc["thermometer"]
    assert cells["flagged adaptive"] == "not run" and cells["broken"] == "unchecked"


def test_a_gradient_the_scan_found_lost_is_an_upper_bound_too() -> None:
    row = _table(_run({"thermo": 160}, checks=_passed("thermo"), lost=frozenset({"thermo"}))).loc[
        "thermometer"
    ]
    assert row["broken"] == "unverified" and row["standing"] == "unverified"
    assert row["checks_adaptive"] == ""  # no check failed: the scan alone marks it


def test_an_unverified_defence_whose_upper_bound_is_equivalent_to_a_verified_baseline_is_broken() -> None:
    """Even the upper bound is within the minimum effect of the CNN's verified number: broken ("no
    advantage"), whatever the checks; against a CNN that is itself an upper bound nothing is shown."""
    row = _table(_run({"thermo": 100}, checks=FAILED_EVERY_MODE)).loc["thermometer"]
    assert row["broken"] == "yes"
    assert row["standing"] == "unverified" and row["outcome"] == NO_ADVANTAGE
    below = _table(_run({"thermo": 40}, checks=FAILED_EVERY_MODE)).loc["thermometer"]
    assert below["broken"] == "yes"  # 30 points below the CNN: an upper bound below it is broken too

    masked_cnn = _run({"cnn": 100}, ("exact",), {"cnn": {"exact": {"gradient_health": False}}})
    unsure = _table(_run({"thermo": 100}, checks=FAILED_EVERY_MODE), masked_cnn)
    assert unsure.loc["cnn", "standing"] == "unverified"
    assert unsure.loc["thermometer", "baseline_standing"] == "unverified"
    assert unsure.loc["thermometer", "broken"] == "unverified"  # no verified baseline: nothing is shown
    verified = _table(_run({"thermo": 100}, checks=_passed("thermo")), masked_cnn).loc["thermometer"]
    assert verified["broken"] == "inconclusive"  # equivalent to an upper bound shows nothing either
    ahead = _table(_run({"thermo": 160}, checks=_passed("thermo")), masked_cnn).loc["thermometer"]
    assert ahead["broken"] == "no"  # an advantage over an upper bound stands


def test_the_checks_columns_list_every_modes_failed_checks() -> None:
    """The adaptive column read the bpda mode's checks alone ("deterministic, gradient_health")."""
    checks = {
        "thermo": {
            None: {"deterministic": False},
            "bpda": {"gradient_health": False, "attack_convergence": False},
            "exact": {"best_vs_last_iterate": False, "gradient_health": True},
        }
    }
    naive = _run({"thermo": 160}, ("exact",), {"thermo": {"exact": {"gradient_health": False}}})
    adaptive = _run({"thermo": 160}, checks=checks)
    cnn = _run({"cnn": 100}, ("exact",), _passed("cnn", modes=("exact",)))
    runs = {"cnn": {NAIVE: cnn, ADAPTIVE: cnn}, "thermometer": {NAIVE: naive, ADAPTIVE: adaptive}}
    table = build_table(runs).set_index("defence")
    row = table.loc["thermometer"]
    assert row["checks_adaptive"] == (
        "all: deterministic; bpda: attack_convergence, gradient_health; exact: best_vs_last_iterate"
    )
    assert row["checks_naive"] == "exact: gradient_health"
    cells = formatted(table.reset_index()).set_index("defence").loc["thermometer"]
    assert cells["flagged adaptive"] == "all 1, bpda 2, exact 1"
    assert cells["flagged naive"] == "exact 1"
    assert row["broken"] == "unverified"  # the mode-free failure fails every mode


def test_every_format_reads_the_same_words(tmp_path: Path) -> None:
    table = _table(_run({"thermo": 160}, checks=FAILED_EVERY_MODE))
    text = write_table(table.reset_index(), tmp_path, title(table.reset_index()))
    csv = pd.read_csv(tmp_path / "gallery.csv").set_index("defence")
    assert csv.loc["thermometer", "broken"] == "unverified" and csv.loc["cnn", "broken"] == "reference"
    assert formatted(table.reset_index())["broken"].tolist() == csv["broken"].tolist()
    assert "unverified" in (tmp_path / "gallery.tex").read_text()
    assert "unverified / unchecked when no gradient mode" in text  # the legend
    assert "thermometer: unverified, an upper bound (bpda: failed gradient checks: gradient_health" in text
