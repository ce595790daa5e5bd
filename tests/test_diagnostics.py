"""Each diagnostic fires on a model built to trigger it and stays quiet on an honest one.

Models and data: tests/test_diagnostics_models.py (4-class quadrant images, 1x8x8).  Settings are tiny
(few steps, few examples) because several developers share two CPU cores.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from robustbench_wave.analysis.diagnostics import (
    attack_status,
    check_best_vs_last_iterate,
    check_determinism,
    check_eps_monotone,
    check_gradient_health,
    check_gradient_mode_gap,
    check_iterative_beats_single_step,
    check_whitebox_beats_blackbox,
    loss_convergence,
    robust_accuracy,
    run_diagnostics,
)
from tests.support.masking_models import (
    Info,
    NoisyQuadrant,
    QuadrantLinear,
    QuantizedQuadrant,
    masked_front_end_model,
    quadrant_data,
)

FAST = {"n": 16, "eps": 0.15, "steps": 4, "more": 2, "large_eps_steps": 5, "square_queries": 60}


def _by_name(report, mode: str | None = "exact"):
    return {c.name: c for c in report.checks if c.grad_mode in (mode, None)}


@pytest.fixture(scope="module")
def data():
    return quadrant_data(16)


@pytest.fixture(scope="module")
def honest_report(data):
    x, y = data
    return run_diagnostics(QuadrantLinear().eval(), x, y, None, info=Info(), model_name="honest", **FAST)


@pytest.fixture(scope="module")
def quantized_report(data):
    x, y = data
    return run_diagnostics(
        QuantizedQuadrant().eval(), x, y, None, info=Info(), model_name="quantized", **FAST
    )


@pytest.fixture(scope="module")
def front_end_report(data):
    x, y = data
    return run_diagnostics(masked_front_end_model(), x, y, None, info=Info(), model_name="fe", **FAST)


# -------------------------------------------------------------------------------------- honest vs masked
def test_honest_model_is_reliable(honest_report):
    checks = _by_name(honest_report)
    assert honest_report.status == "reliable", honest_report.table().to_string()
    for name in (
        "deterministic",
        "iterative_beats_single_step",
        "large_eps_to_chance",
        "attack_convergence",
        "whitebox_beats_blackbox",
        "whitebox_beats_noise",
        "gradient_health",
        "gradient_mode_gap",
        "best_vs_last_iterate",
    ):
        assert checks[name].passed is True, (name, checks[name])
    assert checks["gradient_health"].numbers["zero_grad_share"] == 0.0
    assert checks["large_eps_to_chance"].numbers["accuracy"] <= 0.25
    assert honest_report.trusted_modes == ["exact"]


def test_input_quantizer_is_flagged(quantized_report):
    checks = _by_name(quantized_report)
    assert quantized_report.status.startswith("suspicious")
    health = checks["gradient_health"]
    assert health.passed is False and health.numbers["zero_grad_share"] == 1.0
    assert checks["whitebox_beats_blackbox"].passed is False  # Square breaks what PGD cannot
    assert checks["gradient_mode_gap"].passed is False  # robust only to gradient attacks
    assert checks["large_eps_to_chance"].passed is False  # even Linf 0.5 leaves it above chance
    conv = checks["attack_convergence"]
    assert conv.passed is False and "never rose" in conv.meaning
    assert checks["deterministic"].passed is True  # masking, not randomness
    for name in ("gradient_health", "whitebox_beats_blackbox", "gradient_mode_gap"):
        assert name in quantized_report.status


def test_gradient_modes_separate_masked_from_bpda(front_end_report):
    """A quantizer as a FixedFrontEnd: exact and blocked gradients are zero, BPDA's straight-through is not."""
    rep = front_end_report
    assert rep.modes == ["blocked", "bpda", "exact"]
    for mode in ("exact", "blocked"):
        checks = _by_name(rep, mode)
        assert checks["gradient_health"].passed is False
        assert checks["gradient_mode_gap"].passed is False
    bpda = _by_name(rep, "bpda")
    assert bpda["gradient_health"].passed is True
    assert bpda["gradient_mode_gap"].passed is True
    assert bpda["large_eps_to_chance"].passed is True
    assert rep.trusted_modes == ["bpda"]
    assert "gradient_health[exact, blocked]" in rep.status
    assert set(rep.histories) >= {"exact:base", "bpda:more_steps"}


def test_randomized_model_triggers_determinism(data):
    x, y = data
    noisy = check_determinism(NoisyQuadrant().eval(), x, y)
    assert noisy.passed is False and "EOT" in noisy.meaning
    assert check_determinism(QuadrantLinear().eval(), x, y).passed is True


def test_train_mode_dropout_is_evaluated_in_eval_mode(data):
    """Dropout is not randomness at test time: the check evaluates in eval mode and says it had to switch."""
    x, y = data
    model = nn.Sequential(nn.Dropout(0.5), QuadrantLinear()).train()
    result = check_determinism(model, x, y)
    assert result.passed is True
    assert result.numbers["handed_over_in_train_mode"] is True
    assert model.training  # restored


class _Probabilities(QuadrantLinear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x).softmax(1)


class _NaNGradient(QuadrantLinear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + torch.sqrt((x - x.detach()).abs().sum())  # value 0, gradient NaN


def test_gradient_health_flags_probabilities_and_nan(data):
    x, y = data
    probs = check_gradient_health(_Probabilities().eval(), x, y)
    assert probs.passed is False and probs.numbers["outputs_are_probabilities"] is True
    nan = check_gradient_health(_NaNGradient().eval(), x, y)
    assert nan.passed is False and nan.numbers["nan_grad_share"] == 1.0
    assert check_gradient_health(QuadrantLinear().eval(), x, y).passed is True


# ---------------------------------------------------------------------------------- record-based checks
def _rows(attack: str, family: str, kind: str, eps: float, correct, attacked=None, mode="exact", last=None):
    n = len(correct)
    return pd.DataFrame(
        {
            "model": "m",
            "dataset": "d",
            "grad_mode": mode,
            "attack": attack,
            "family": family,
            "kind": kind,
            "threat": "none" if family == "clean" else "Linf",
            "eps": eps,
            "backend": "builtin",
            "example_id": np.arange(n),
            "label": 0,
            "pred": 0,
            "correct": np.asarray(correct, dtype=bool),
            "norm": eps,
            "attacked": np.ones(n, bool) if attacked is None else np.asarray(attacked, dtype=bool),
            "correct_last": pd.array([None] * n if last is None else list(last), dtype="boolean"),
            "loss_final": np.nan,
        }
    )


def _clean(n: int = 10) -> pd.DataFrame:
    return _rows("clean", "clean", "clean", 0.0, [True] * n)


def test_eps_monotonicity_fires_on_rising_accuracy():
    rising = pd.concat(
        [
            _clean(),
            _rows("pgd", "pgd", "white-box", 0.1, [True] * 3 + [False] * 7),
            _rows("pgd", "pgd", "white-box", 0.2, [True] * 6 + [False] * 4),
        ]
    )
    result = check_eps_monotone(rising, "exact")
    assert result.passed is False
    assert result.numbers["max_rise"] == pytest.approx(0.3)
    falling = pd.concat(
        [
            _clean(),
            _rows("pgd", "pgd", "white-box", 0.1, [True] * 6 + [False] * 4),
            _rows("pgd", "pgd", "white-box", 0.2, [True] * 3 + [False] * 7),
        ]
    )
    assert check_eps_monotone(falling, "exact").passed is True


def test_iterative_beats_single_step_per_example():
    # FGSM breaks examples 0-1; PGD breaks 2-5 but misses 0-1: a per-example violation (2 of 10)
    fgsm = _rows("fgsm", "fgsm", "white-box", 0.1, [False, False] + [True] * 8)
    pgd = _rows("pgd", "pgd", "white-box", 0.1, [True, True] + [False] * 4 + [True] * 4)
    result = check_iterative_beats_single_step(pd.concat([_clean(), fgsm, pgd]), "exact", tol=0.02)
    assert result.passed is False and result.numbers["Linf@0.1"] == "2/10"
    pgd_ok = _rows("pgd", "pgd", "white-box", 0.1, [False] * 6 + [True] * 4)
    assert check_iterative_beats_single_step(pd.concat([_clean(), fgsm, pgd_ok]), "exact").passed is True


def test_skip_broken_records_are_not_misread():
    """With skip_broken and FGSM first, PGD never saw FGSM's successes: the check says 'not measurable'."""
    fgsm = _rows("fgsm", "fgsm", "white-box", 0.1, [False, False] + [True] * 8)
    pgd = _rows(
        "pgd", "pgd", "white-box", 0.1, [False, False] + [True] * 8, attacked=[False, False] + [True] * 8
    )
    records = pd.concat([_clean(), fgsm, pgd])
    assert check_iterative_beats_single_step(records, "exact").passed is None
    status = attack_status(pgd, "Linf", 0.1)
    assert np.isnan(status[0]) and status[2] == 0.0


def test_blackbox_and_mode_gap_from_records():
    """Blocked gradients keep 80%; BPDA and Square break most of it: both record checks fire for 'blocked'."""
    n = 10
    clean = pd.concat([_clean(n).assign(grad_mode=m) for m in ("blocked", "bpda")])
    blocked = _rows("pgd", "pgd", "white-box", 0.1, [True] * 8 + [False] * 2, mode="blocked")
    bpda = _rows("pgd", "pgd", "white-box", 0.1, [True] * 1 + [False] * 9, mode="bpda")
    square = pd.concat(
        [
            _rows("square", "square", "black-box", 0.1, [True] * 4 + [False] * 6, mode=m)
            for m in ("blocked", "bpda")
        ]
    )
    records = pd.concat([clean, blocked, bpda, square])
    gap = check_gradient_mode_gap(records, "blocked")
    assert gap.passed is False and gap.numbers["worst_gap_share"] == pytest.approx(0.7)
    assert check_gradient_mode_gap(records, "bpda").passed is True
    assert check_whitebox_beats_blackbox(records, "blocked").passed is False
    assert check_whitebox_beats_blackbox(records, "bpda").passed is True
    assert robust_accuracy(pd.concat([clean[clean.grad_mode == "blocked"], blocked]), "Linf", 0.1)[0] == 0.8


def test_best_vs_last_iterate():
    # examples 0-2 were broken only at an intermediate iterate (silent successes) and are counted
    good = _rows(
        "pgd", "pgd", "white-box", 0.1, [False] * 5 + [True] * 5, last=[True] * 3 + [False] * 2 + [True] * 5
    )
    result = check_best_vs_last_iterate(pd.concat([_clean(), good]), "exact")
    assert result.passed is True and result.numbers["silent_successes"] == 3
    # example 9's last iterate was misclassified, yet the record says robust: a lost success
    bad = _rows("pgd", "pgd", "white-box", 0.1, [False] * 5 + [True] * 5, last=[False] * 9 + [False])
    assert check_best_vs_last_iterate(pd.concat([_clean(), bad]), "exact").passed is False
    unknown = _rows("pgd", "pgd", "white-box", 0.1, [True] * 10)
    assert check_best_vs_last_iterate(pd.concat([_clean(), unknown]), "exact").passed is None


def test_loss_convergence():
    flat_after_rise = [0.1, 0.5, 0.9, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert loss_convergence(flat_after_rise)["converged"] is True
    still_rising = [0.1 * i for i in range(10)]
    assert loss_convergence(still_rising)["converged"] is False
    never_rose = [0.5] * 10
    assert loss_convergence(never_rose)["progressed"] is False
    assert loss_convergence([0.1, float("nan"), 0.3, 0.4])["converged"] is False


def test_run_diagnostics_uses_records_when_they_decide(data, honest_report):
    """Records from the honest model's own subset run are accepted as benchmark records ('source=records')."""
    x, y = data
    records = honest_report.subset_records
    report = run_diagnostics(
        QuadrantLinear().eval(),
        x,
        y,
        records,
        info=Info(),
        model_name="honest",
        **{**FAST, "square_queries": 0},
    )
    checks = _by_name(report)
    assert checks["whitebox_beats_blackbox"].numbers["source"] == "records"
    assert checks["iterative_beats_single_step"].passed is True
    table = report.table()
    assert list(table.columns) == ["model", "check", "grad_mode", "result", "passed", "numbers", "meaning"]
    assert len(table) == len(report.checks) >= 10


def test_run_diagnostics_validates_inputs(data):
    x, y = data
    with pytest.raises(ValueError, match="num_classes"):
        run_diagnostics(QuadrantLinear(), x, y, None, info=object())
    with pytest.raises(ValueError, match="several models"):
        two = pd.concat([_clean(), _clean().assign(model="other")])
        run_diagnostics(QuadrantLinear(), x, y, two, info=Info())
