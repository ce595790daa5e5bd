"""Automatic BPDA end to end through ``evaluate``: ``round(8x)/8`` written as plain torch code in front of a
linear model masks under exact gradients (robust accuracy far above its unquantised twin's) and under the
automatic ``bpda`` mode falls within the Wilson interval of the twin's at the reference budget; 2x2 pooling
through NumPy (the values come back in another shape, so no round trip is linked) is recorded as having no
gradient path and still gets its gradient-free rows."""

from __future__ import annotations

import pandas as pd
import pytest

from robustbench_wave.attacks import Suite, parse_suite
from robustbench_wave.evaluation import EvalSettings, evaluate, metrics
from robustbench_wave.models.autobpda import auto_bpda
from tests.support.attack_models import labelled, teacher, toy_data
from tests.support.autobpda_models import NumpyHalve, Quantize, defended

N = 200
GRID = [0.03, 0.06, 0.1]  # reference budget (lower middle): 0.06, where the twin keeps ~78%


def _suite(*extra: dict) -> Suite:
    pgd = {"name": "pgd", "family": "pgd", "threat": "Linf", "steps": 20, "rel_step_size": 0.125}
    attacks = [{"name": "clean", "family": "clean"}, pgd, *extra]
    return parse_suite({"eps": {"default": {"Linf": GRID}}, "attack": attacks})


def _robust(records: pd.DataFrame, mode: str) -> tuple[float, int]:
    rows = records[records["grad_mode"] == mode]
    return metrics.robust_accuracy(rows, "Linf", metrics.reference_eps(rows, "Linf"))


@pytest.mark.slow
def test_a_quantised_model_masks_exact_gradients_and_falls_to_its_twin_under_automatic_bpda() -> None:
    twin, x = teacher(), toy_data(N, seed=4)
    y = labelled(twin, x)
    quantised = auto_bpda(defended(Quantize(), twin), x)
    suite = _suite()
    twin_records = evaluate(twin, x, y, suite, EvalSettings(model_name="twin"), progress=False).records
    result = evaluate(quantised, x, y, suite, EvalSettings(model_name="quantised"), progress=False)
    assert result.meta["models"]["quantised"]["grad_modes"] == ["exact", "bpda"]
    assert result.meta["models"]["quantised"]["gradient_path"]["findings"][0]["op"] == "round"
    acc, n = _robust(twin_records, "exact")
    low, high = metrics.wilson_interval(acc * n, n)
    exact, _ = _robust(result.records, "exact")
    bpda, _ = _robust(result.records, "bpda")
    assert exact > high + 0.1  # masked: the exact-gradient attack sees round's zero gradient
    assert low <= bpda <= high, (bpda, (low, high))


def test_a_numpy_step_that_changes_the_shape_has_no_gradient_path_and_keeps_its_gradient_free_rows() -> None:
    twin, x = teacher(), toy_data(32, seed=5)
    y = labelled(twin, x)
    model = auto_bpda(defended(NumpyHalve(), twin), x)
    square = {"name": "square", "family": "square", "threat": "Linf", "n_queries": 50}
    result = evaluate(
        model, x, y, _suite(square), EvalSettings(model_name="np"), progress=False, batch_size=32
    )
    meta = result.meta["models"]["np"]
    assert meta["grad_modes"] == ["exact"] and not meta["gradient_path"]["exact_gradient"]
    assert meta["gradient_path"]["summary"].startswith("no gradient reaches the input")
    rows = result.records[result.records["attack"] == "square"]
    assert rows["attacked"].sum() > 0 and (~rows["correct"] & rows["attacked"]).sum() > 0
    notes = {t.get("note") for t in meta["timing"] if t["attack"] == "pgd"}
    assert any("structurally zero" in str(note) for note in notes)  # 1 step: its gradient is zero everywhere
