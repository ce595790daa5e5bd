"""Requests are honoured or refused before any attack (issue 30): a gradient mode a model does not offer is
an error naming the modes it offers (never the silent fallback to exact), the user's budgets replace the
suite's grid, a suite declares the reference budget its verdict speaks of, and no accuracy is ever answered
for a budget that was not attacked (below the grid that used to be the clean accuracy)."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from robustbench_wave.attacks import load_suite, parse_budgets, parse_suite
from robustbench_wave.evaluation import EvalSettings, evaluate, resolve_grad_modes
from robustbench_wave.evaluation import metrics as mx
from robustbench_wave.evaluation.plan import CrossPlan, Plan
from robustbench_wave.models import autobpda as ab
from robustbench_wave.models.frontend import offered_modes
from tests.support.autobpda_models import Quantize, defended, plain_cnn

X = torch.rand(4, 1, 8, 8, generator=torch.Generator().manual_seed(0))


def _auto_bpda() -> torch.nn.Module:
    """round(8x)/8 in front of a linear head: automatic BPDA offers exact and bpda, never blocked."""
    return ab.auto_bpda(defended(Quantize()), X)


def test_a_mode_the_model_does_not_offer_is_refused_naming_the_offered_ones() -> None:
    model = _auto_bpda()
    assert offered_modes(model) == ["exact", "bpda"]
    for asked in (["blocked"], ["exact", "blocked", "bpda"]):  # alone, and mixed with offered ones
        with pytest.raises(ValueError, match=r"\['blocked'\].*offers \['exact', 'bpda'\]"):
            resolve_grad_modes(model, asked)
    with pytest.raises(ValueError, match="offers \\['exact'\\]"):
        resolve_grad_modes(plain_cnn(), ["exact", "bpda"])
    assert resolve_grad_modes(model, ["bpda", "exact"]) == ["exact", "bpda"]  # honoured, in mode order
    assert resolve_grad_modes(model, None) == ["exact", "bpda"]  # no request: every mode it offers


def test_evaluate_refuses_before_any_attack() -> None:
    suite = parse_suite(
        {
            "eps": {"default": {"Linf": [0.1]}},
            "attack": [{"name": "fgsm", "family": "fgsm", "threat": "Linf"}],
        }
    )
    images, labels = torch.rand(2, 1, 8, 8), torch.zeros(2, dtype=torch.long)
    with pytest.raises(ValueError, match="does not offer gradient mode"):
        evaluate(_auto_bpda(), images, labels, suite, EvalSettings(grad_modes=("blocked",)), progress=False)


def test_user_budgets_replace_the_grid_and_leave_other_threats_out() -> None:
    smoke = load_suite("smoke")
    budgets = parse_budgets(["Linf=8/255", "L2=0.5,0.25", "Linf=2/255"])
    assert budgets == {"Linf": (8 / 255, 2 / 255), "L2": (0.5, 0.25)}
    suite = smoke.with_budgets(budgets)
    for dataset in ("fashion-mnist", "cifar10", None):
        assert suite.resolved_eps(dataset) == {"Linf": [2 / 255, 8 / 255], "L2": [0.25, 0.5]}
    assert {a.threat for a in suite.attacks} == {
        "none",
        "Linf",
        "L2",
    }  # L0 and corruption: not asked, not run
    assert suite.declared_reference("cifar10") == {"Linf": 8 / 255, "L2": 0.5}  # the largest of each threat
    assert suite.with_budgets(budgets, {"Linf": 2 / 255}).reference_eps("Linf") == 2 / 255
    assert suite.to_dict() != smoke.to_dict()  # config.json: another configuration


@pytest.mark.parametrize(
    ("budgets", "reference", "message"),
    [
        ({"Linf": (2.0,)}, None, "must lie in \\[0, 1\\]"),
        ({"Linf": (0.0,)}, None, "must be > 0"),
        ({"L2": (0.0, 0.5)}, None, "must be > 0"),
        ({"L0": (0.1,)}, None, "no attack of threat"),
        ({"Linf": (0.1,)}, {"Linf": 0.2}, "not among the --eps budgets"),
    ],
)
def test_budgets_that_cannot_be_honoured_are_refused(budgets, reference, message) -> None:
    suite = load_suite("smoke").select(["fgsm", "pgd_l2"])  # Linf and L2 only
    with pytest.raises(ValueError, match=message):
        suite.with_budgets(budgets, reference)
    with pytest.raises(ValueError, match="THREAT=BUDGET"):
        parse_budgets(["8/255"])
    with pytest.raises(ValueError, match="unknown threat"):
        parse_budgets(["Linfinity=0.1"])


def test_a_suite_declares_its_reference_budget_on_its_grid() -> None:
    autoattack = load_suite("autoattack")
    assert (
        autoattack.reference_eps("Linf", "cifar10") == 8 / 255
    )  # RobustBench's, not the grid's middle 4/255
    assert autoattack.reference_eps("L2", "cifar10") == 0.5
    assert autoattack.reference_eps("Linf", "synthetic") == 8 / 255  # the colour default
    assert autoattack.reference_eps("Linf", "fashion-mnist") is None  # its own grid: the middle rule
    assert load_suite("smoke").declared_reference("cifar10") == {}
    assert "reference" not in load_suite("default").to_dict()  # undeclared: config and fingerprints unchanged
    raw = {
        "eps": {"default": {"Linf": [0.1, 0.2]}},
        "reference": {"default": {"Linf": 0.15}},
        "attack": [{"name": "fgsm", "family": "fgsm", "threat": "Linf"}],
    }
    with pytest.raises(ValueError, match="not on its grid"):
        parse_suite(raw)
    declared = parse_suite(raw | {"reference": {"default": {"Linf": "1/5"}}})
    assert declared.reference_eps("Linf") == 0.2 and parse_suite(declared.to_dict()) == declared


def _records(grid: list[float]) -> pd.DataFrame:
    """Two examples, clean-correct; example 1 broken at every budget of the grid."""
    rows = [{"kind": "clean", "threat": "none", "eps": 0.0, "example_id": i, "correct": True} for i in (0, 1)]
    rows += [
        {"kind": "white-box", "threat": "Linf", "eps": e, "example_id": i, "correct": i == 0}
        for e in grid
        for i in (0, 1)
    ]
    return pd.DataFrame(rows)


def test_an_accuracy_is_never_answered_for_a_budget_that_was_not_attacked() -> None:
    rows = _records([0.03, 0.1])
    assert mx.robust_accuracy(rows, "Linf", mx.check_on_grid(rows, "Linf", 0.1))[0] == 0.5
    for eps in (0.01, 8 / 255, 0.2):  # below the grid (the clean accuracy, 1.0), between budgets, above
        with pytest.raises(ValueError, match=r"not evaluated.*\[0.03, 0.1\]"):
            mx.check_on_grid(rows, "Linf", eps)


def test_the_reference_is_the_declared_one_the_middle_when_none_is_declared() -> None:
    rows = _records([2 / 255, 4 / 255, 8 / 255])
    assert mx.reference_eps(rows, "Linf") == 4 / 255  # undeclared: today's rule, the middle
    assert mx.reference_eps(rows, "Linf", declared={"Linf": 8 / 255}) == 8 / 255
    with pytest.raises(ValueError, match="was not evaluated"):  # off the grid: refused, never the middle
        mx.reference_eps(rows, "Linf", declared={"Linf": 0.5})
    meta = {"dataset": {"name": "cifar10", "reference": {"Linf": 8 / 255}}}
    assert mx.declared_reference(meta) == {"Linf": 8 / 255} and mx.declared_reference({}) == {}


def test_headline_cross_check_runs_at_the_declared_reference() -> None:
    suite = load_suite("autoattack")
    images = torch.rand(1, 3, 32, 32)
    plan = Plan.make(suite, "cifar10", "auto", False, images, "headline")
    assert plan.declared_reference() == {"Linf": 8 / 255, "L2": 0.5}
    assert plan.cross["apgd_ce_linf"].eps == [8 / 255] and plan.cross["apgd_ce_l2"].eps == [0.5]
    fmnist = Plan.make(suite, "fashion-mnist", "auto", False, torch.rand(1, 1, 28, 28), "headline")
    assert fmnist.declared_reference() == {} and fmnist.cross["apgd_ce_linf"].eps == [0.1]  # the middle rule
    entry = suite.attacks[1]
    assert CrossPlan.make(entry, "torchattacks", [0.1, 0.2], {}, "headline") is None  # no reference: none
    assert math.isclose(plan.threat_eps["Linf"][-1], 8 / 255)


def test_suites_without_a_declared_reference_keep_the_middle_of_the_grid() -> None:
    """The zoo's suites declare none: their headline cross-checks, fingerprints and meta are as before."""
    for name in ("smoke", "headline", "default", "quick-look"):
        suite = load_suite(name)
        assert suite.reference == {} and "reference" not in suite.to_dict()
        for dataset, shape in (("fashion-mnist", (1, 1, 28, 28)), ("cifar10", (1, 3, 32, 32))):
            plan = Plan.make(suite, dataset, "auto", True, torch.rand(shape), "headline")
            assert plan.declared_reference() == {}
            for attack, cross in plan.cross.items():
                threat = next(a.threat for a in suite.attacks if a.name == attack)
                assert cross.eps == [mx.middle_budget(plan.threat_eps[threat])]
