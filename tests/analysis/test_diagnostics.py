"""Each diagnostic fires on an input built to trigger it and stays quiet on an honest one.

Models, data and the per-check cases: tests/support/masking_models.py (4-class quadrant images, 1x8x8).
Every registered check must have a case there (the parametrised test below), so registering a check is
enough to get it tested. Settings are tiny (few steps, few examples) because the machine is shared.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from robustbench_wave.analysis.checks import (
    CheckInputs,
    CheckResult,
    RecordCheck,
    default_checks,
    get_check,
    list_checks,
    loss_convergence,
    register_check,
)
from robustbench_wave.analysis.checks import check as checks_base
from robustbench_wave.analysis.checks.compare import mode_view
from robustbench_wave.analysis.diagnostics import diagnostics_suite, run_diagnostics
from robustbench_wave.evaluation import EvalSettings, evaluate
from robustbench_wave.evaluation.metrics import example_status
from tests.support.masking_models import (
    CHECK_CASES,
    Info,
    QuadrantLinear,
    QuantizedQuadrant,
    SaturatedQuadrant,
    attack_rows,
    clean_rows,
    masked_front_end_model,
    quadrant_data,
)

FAST_CHECKS = default_checks({"attack_convergence": {"more": 2}, "large_eps_to_chance": {"steps": 5}})
FAST = {"n": 16, "eps": 0.15, "steps": 4, "square_queries": 60, "checks": FAST_CHECKS}


def _by_name(report, mode: str | None = "exact"):
    return {c.name: c for c in report.checks if c.grad_mode in (mode, None)}


@pytest.fixture(scope="module")
def data():
    return quadrant_data(16)


@pytest.fixture(scope="module")
def honest_report(data):
    x, y = data
    return run_diagnostics(QuadrantLinear().eval(), x, y, None, info=Info(), model_name="honest", **FAST)


NO_SQUARE = {**FAST, "square_queries": 0}  # planted masking must be caught without any black-box attack


@pytest.fixture(scope="module")
def quantized_report(data):
    x, y = data
    return run_diagnostics(
        QuantizedQuadrant().eval(), x, y, None, info=Info(), model_name="quantized", **NO_SQUARE
    )


@pytest.fixture(scope="module")
def front_end_report(data):
    x, y = data
    return run_diagnostics(masked_front_end_model(), x, y, None, info=Info(), model_name="fe", **FAST)


# ------------------------------------------------------------------------------------------ the registry
@pytest.mark.parametrize("name", list_checks())
def test_every_registered_check_fires_and_passes(name):
    """Registering a check is not enough: it needs a planted case that fails and an honest one that passes."""
    assert name in CHECK_CASES, f"add a firing and a passing case for {name!r} to masking_models.CHECK_CASES"
    case = CHECK_CASES[name]
    check = get_check(name)(**case.params)
    fired = check.run(case.fire(), case.fire_mode)
    honest = check.run(case.honest(), case.honest_mode)
    assert isinstance(fired, CheckResult) and fired.name == name
    assert fired.passed is False, fired
    assert honest.passed is True, honest
    assert fired.meaning != honest.meaning  # the text says what differs
    assert (fired.grad_mode, honest.grad_mode) == (case.fire_mode, case.honest_mode)
    for planted in case.also_fire:
        assert check.run(planted(), case.fire_mode).passed is False


def test_no_case_without_a_check():
    assert sorted(CHECK_CASES) == sorted(list_checks())


def test_every_check_documents_itself():
    for check in default_checks():
        cls = type(check)
        assert cls.__doc__ and cls.reads.value in ("records", "model"), cls
        assert check.thresholds() == dataclasses.asdict(check)


def test_registering_a_check_is_enough_to_run_it(data, monkeypatch):
    """A new class with @register_check appears in run_diagnostics' report for every gradient mode."""
    monkeypatch.setattr(checks_base, "_REGISTRY", dict(checks_base._REGISTRY))

    @register_check
    @dataclasses.dataclass(frozen=True)
    class CleanRowsExist(RecordCheck):
        """Records must hold clean rows (a toy check for this test)."""

        name: ClassVar[str] = "clean_rows_exist"

        def judge(self, records: pd.DataFrame, mode: str) -> CheckResult:
            n = int((records["kind"] == "clean").sum())
            return CheckResult(self.name, n > 0, {"clean_rows": n}, "clean rows present", mode)

    assert list_checks()[-1] == "clean_rows_exist"
    x, y = data
    report = run_diagnostics(
        QuadrantLinear().eval(),
        x,
        y,
        None,
        info=Info(),
        model_name="toy",
        **{**FAST, "checks": None, "n": 8, "square_queries": 0},
    )
    toy = [c for c in report.checks if c.name == "clean_rows_exist"]
    assert len(toy) == 1 and toy[0].passed is True
    assert toy[0].numbers == {"source": "subset n=8", "clean_rows": 8}  # no benchmark records: subset


def test_register_check_rejects_bad_classes(monkeypatch):
    monkeypatch.setattr(checks_base, "_REGISTRY", dict(checks_base._REGISTRY))

    @dataclasses.dataclass(frozen=True)
    class NoDoc(RecordCheck):
        name: ClassVar[str] = "no_doc"

        def judge(self, records, mode):  # pragma: no cover - never run
            raise NotImplementedError

    with pytest.raises(ValueError, match="docstring"):
        register_check(NoDoc)
    taken = type("Taken", (NoDoc,), {"__doc__": "x", "name": "gradient_health"})
    with pytest.raises(ValueError, match="already registered"):
        register_check(taken)
    with pytest.raises(ValueError, match="no checks named"):
        default_checks({"no_such_check": {}})
    with pytest.raises(ValueError, match="has no thresholds"):
        default_checks({"gradient_health": {"no_such_field": 1}})


# -------------------------------------------------------------------------------------- honest vs masked
def test_honest_model_is_reliable(honest_report):
    checks = _by_name(honest_report)
    assert honest_report.status == "reliable", honest_report.table().to_string()
    for name in list_checks():
        assert checks[name].passed is True, (name, checks[name])
    # no benchmark records: the budget sweep (the subset's PGD at 0.5, 1 and 2 x eps) decides
    assert checks["eps_monotone"].numbers["source"].startswith("budget sweep n=16 eps=")
    assert checks["gradient_health"].numbers["zero_grad_share"] == 0.0
    assert checks["large_eps_to_chance"].numbers["accuracy"] <= 0.25
    assert honest_report.trusted_modes == ["exact"]


def test_input_quantizer_is_flagged(quantized_report):
    """Caught by white-box-side checks alone: the diagnostics ran no black-box attack at all, so the verdict
    cannot depend on Square's query budget."""
    checks = _by_name(quantized_report)
    assert "square_linf" not in set(quantized_report.subset_records["attack"])
    assert quantized_report.status.startswith("suspicious")
    health = checks["gradient_health"]
    assert health.passed is False and health.numbers["zero_grad_share"] == 1.0
    assert health.numbers["ce_vanishing_share"] == 0.0  # zero gradients are the other problem
    assert checks["large_eps_to_chance"].passed is False  # even Linf 0.5 leaves it above chance
    conv = checks["attack_convergence"]
    assert conv.passed is False and "never rose" in conv.meaning
    assert checks["deterministic"].passed is True  # masking, not randomness
    for name in ("gradient_health", "large_eps_to_chance", "attack_convergence"):
        assert name in quantized_report.status


def test_saturated_logits_fail_gradient_health(data):
    """Logits x 1e4: the CE gradient underflows on every point, the margin gradient does not. Today's note
    is now a failure whose advice is a margin/DLR loss -- without any black-box attack."""
    x, y = data
    report = run_diagnostics(
        SaturatedQuadrant().eval(), x, y, None, info=Info(), model_name="saturated", **NO_SQUARE
    )
    health = _by_name(report)["gradient_health"]
    assert health.passed is False, health
    assert health.numbers["zero_grad_share"] == 0.0 and health.numbers["ce_vanishing_share"] == 1.0
    assert 'loss = "dlr"' in health.meaning and "APGD-T" in health.meaning
    assert "gradient_health" in report.status
    honest = get_check("gradient_health")().run(CheckInputs(model=QuadrantLinear().eval(), x=x, y=y), "exact")
    assert honest.numbers["ce_vanishing_share"] == 0.0 and "dlr" not in honest.meaning


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


# ------------------------------------------------------------------------------------- checks in detail
def test_train_mode_dropout_is_evaluated_in_eval_mode(data):
    """Dropout is not randomness at test time: the check evaluates in eval mode and says it had to switch."""
    x, y = data
    model = nn.Sequential(nn.Dropout(0.5), QuadrantLinear()).train()
    result = get_check("deterministic")().run(CheckInputs(model=model, x=x, y=y), None)
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
    health = get_check("gradient_health")()
    probs = health.run(CheckInputs(model=_Probabilities().eval(), x=x, y=y), "exact")
    assert probs.passed is False and probs.numbers["outputs_are_probabilities"] is True
    nan = health.run(CheckInputs(model=_NaNGradient().eval(), x=x, y=y), "exact")
    assert nan.passed is False and nan.numbers["nan_grad_share"] == 1.0


def test_record_check_numbers():
    """The numbers behind the planted cases: violations / compared, the rise, the gap share."""
    iterative = get_check("iterative_beats_single_step")()
    fired = iterative.run(CHECK_CASES["iterative_beats_single_step"].fire(), "exact")
    # P(X >= 8 | 20, 0.02): the tolerated rate of 2% against 8 of the 20 points PGD held
    assert fired.numbers["Linf@0.1"] == "8/20 held (reverse 0, p=2.6e-09 vs rate 2%)"
    assert fired.numbers["worst_share"] == pytest.approx(0.4) and fired.numbers["alpha"] == 0.01
    assert fired.numbers["source"] == "records" and fired.numbers["fired_at"] == "Linf@0.1"
    rise = get_check("eps_monotone")().run(CHECK_CASES["eps_monotone"].fire(), "exact")
    assert rise.numbers["max_rise"] == pytest.approx(0.3)
    gap = get_check("gradient_mode_gap")().run(CHECK_CASES["gradient_mode_gap"].fire(), "blocked")
    assert gap.numbers["worst_gap_share"] == pytest.approx(14 / 16)
    # BPDA holds only examples 0-1, blocked PGD holds 0-15: 14 of the 16 points blocked PGD held fall
    assert (
        gap.numbers["Linf@0.1"]
        == "blocked 0.800 vs others 0.100, gap 14/16 held (reverse 0, p=6.7e-17 vs rate 5%)"
    )
    last = get_check("best_vs_last_iterate")().run(CHECK_CASES["best_vs_last_iterate"].honest(), "exact")
    assert last.numbers["silent_successes"] == 3 and last.numbers["uncounted_last_iterate_successes"] == 0


def test_skip_broken_records_are_not_misread():
    """With skip_broken and FGSM first, PGD never saw FGSM's successes: the check says 'not measurable'."""
    fgsm = attack_rows("fgsm", "fgsm", "white-box", 0.1, [False, False] + [True] * 8)
    skipped = [False, False] + [True] * 8
    pgd = attack_rows("pgd", "pgd", "white-box", 0.1, skipped, attacked=skipped)
    inputs = CheckInputs(records=pd.concat([clean_rows(), fgsm, pgd]))
    assert get_check("iterative_beats_single_step")().run(inputs, "exact").passed is None
    status = example_status(pgd, "Linf", 0.1)
    assert np.isnan(status[0]) and status[2] == 0.0


def test_record_check_falls_back_to_the_subset():
    """Undecidable benchmark records give way to the subset records, and the numbers say so."""
    fgsm = attack_rows("fgsm", "fgsm", "white-box", 0.1, [False, False] + [True] * 8)
    skipped = [False, False] + [True] * 8
    pgd = attack_rows("pgd", "pgd", "white-box", 0.1, skipped, attacked=skipped)
    full = attack_rows("pgd", "pgd", "white-box", 0.1, [False] * 6 + [True] * 4)
    inputs = CheckInputs(
        records=pd.concat([clean_rows(), fgsm, pgd]), subset_records=pd.concat([clean_rows(), fgsm, full])
    )
    result = get_check("iterative_beats_single_step")().run(inputs, "exact")
    assert result.passed is True and result.numbers["source"] == "subset n=10"


def test_mode_view_shares_mode_free_rows():
    """Square stored once under 'exact' is seen by 'bpda' too; bpda's own white-box rows are not in 'exact'."""
    square = attack_rows("square", "square", "black-box", 0.1, [True] * 10)
    bpda = attack_rows("pgd", "pgd", "white-box", 0.1, [True] * 10, mode="bpda")
    view = mode_view(pd.concat([clean_rows(), square, bpda]), "bpda")
    assert set(view["attack"]) == {"clean", "square", "pgd"} and len(view) == 30
    assert set(mode_view(pd.concat([clean_rows(), square, bpda]), "exact")["attack"]) == {"clean", "square"}


def test_loss_convergence():
    flat_after_rise = [0.1, 0.5, 0.9, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert loss_convergence(flat_after_rise)["converged"] is True
    still_rising = [0.1 * i for i in range(10)]
    assert loss_convergence(still_rising)["converged"] is False
    never_rose = [0.5] * 10
    assert loss_convergence(never_rose)["progressed"] is False
    assert loss_convergence([0.1, float("nan"), 0.3, 0.4])["converged"] is False


# ------------------------------------------------------------------------------------- the driver
def test_subset_records_come_from_the_evaluation(honest_report):
    """The subset ran the generated suite through evaluate(): every attack on every clean-correct point."""
    sub = honest_report.subset_records
    assert set(sub["attack"]) == {"clean", "noise_sign", "fgsm_linf", "pgd_linf", "square_linf"}
    attacked = sub[sub["kind"] != "clean"]
    assert set(attacked["eps"]) == {0.15}
    clean_ok = sub[sub["kind"] == "clean"].set_index("example_id")["correct"]
    for _, rows in attacked.groupby("attack"):
        expected = clean_ok.reindex(rows["example_id"]).to_numpy(dtype=bool)
        assert np.array_equal(rows["attacked"].to_numpy(dtype=bool), expected)
    assert (attacked.loc[attacked["attacked"], "norm"] <= 0.15 + 1e-6).all()  # audited budgets
    assert not sub["correct_last"].isna().all()  # the suite's PGD reports the last iterate


def test_diagnostics_suite():
    suite = diagnostics_suite([0.1, 0.2], steps=5, square_queries=0)
    assert [a.family for a in suite.attacks] == ["clean", "noise", "fgsm", "pgd"]
    pgd = suite.attacks[-1]
    assert pgd.params["steps"] == 5 and pgd.params["rel_step_size"] == pytest.approx(0.5)
    assert suite.threat_eps("Linf") == (0.1, 0.2)
    with pytest.raises(ValueError, match="steps"):
        diagnostics_suite(0.1, steps=0)


def test_run_diagnostics_uses_records_when_they_decide(data):
    """Benchmark records at two budgets decide the record checks; the reference eps is on their grid."""
    x, y = data
    model = QuadrantLinear().eval()
    records = evaluate(
        model,
        x,
        y,
        diagnostics_suite([0.1, 0.2], steps=4, square_queries=0),
        EvalSettings(model_name="honest", skip_broken=False),
        progress=False,
    ).records
    report = run_diagnostics(
        model, x, y, records, info=Info(), model_name="honest", **{**FAST, "eps": None, "square_queries": 0}
    )
    assert report.settings["eps"] == 0.1  # lower middle of an even grid, never the off-grid median 0.15
    checks = _by_name(report)
    assert checks["iterative_beats_single_step"].numbers["source"] == "records"
    assert checks["eps_monotone"].passed is True and checks["eps_monotone"].numbers["curves"] == 3
    table = report.table()
    assert list(table.columns) == ["model", "check", "grad_mode", "result", "passed", "numbers", "meaning"]
    assert len(table) == len(report.checks) == len(list_checks())
    assert report.to_dict()["settings"]["thresholds"]["attack_convergence"]["more"] == 2


def test_run_diagnostics_validates_inputs(data):
    x, y = data
    with pytest.raises(ValueError, match="num_classes"):
        run_diagnostics(QuadrantLinear(), x, y, None, info=object())
    with pytest.raises(ValueError, match="several models"):
        two = pd.concat([clean_rows(), clean_rows().assign(model="other")])
        run_diagnostics(QuadrantLinear(), x, y, two, info=Info())
