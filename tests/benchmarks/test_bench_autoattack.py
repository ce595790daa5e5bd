"""The autoattack benchmark's pieces (no timings asserted): its suite, its robust-set arithmetic, and that ART's
AutoAttack loop and the harness's suite, as the benchmark runs them, are sound on a model with a known answer."""

from __future__ import annotations

import argparse

import pytest
import torch

from benchmarks import bench_autoattack
from benchmarks.bench_autoattack import (
    PassCounter,
    art_autoattack,
    harness_autoattack,
    set_difference,
    threat_suite,
    variant_functions,
)
from tests.support.linear_oracle import CLEAR, breaking_budget, oracle


def test_threat_suite_keeps_one_threats_members_at_one_budget() -> None:
    suite = threat_suite("L2", 1.0, quick=True)
    assert [a.family for a in suite.attacks] == ["clean", "apgd", "apgd-t", "fab-t", "square", "pgd"]
    assert {a.threat for a in suite.attacks[1:]} == {"L2"}
    assert suite.resolved_eps("fashion-mnist") == {"L2": [1.0]}
    assert {a.params["steps"] for a in suite.attacks[1:] if "steps" in a.params} == {10}
    assert threat_suite("Linf", 0.1, quick=False).attacks[1].params["steps"] == 100


def test_set_difference_counts_each_side() -> None:
    a = torch.tensor([True, False, False, True])  # robust under variant a
    b = torch.tensor([True, True, False, False])  # robust under variant b
    assert set_difference(a, b) == "breaks 1 it leaves, leaves 1 it breaks"
    assert set_difference(a, a) == "breaks 0 it leaves, leaves 0 it breaks"


@pytest.mark.slow
@pytest.mark.parametrize(("threat", "eps"), [("Linf", 0.03), ("L2", 0.2)])
def test_both_sides_of_the_benchmark_agree_with_the_closed_form(threat: str, eps: float) -> None:
    model, x, y, w = oracle(n=24)
    budget = breaking_budget(w, x, y, threat)
    art = art_autoattack(model, x, y, eps, threat, quick=True)
    ours = harness_autoattack(model, x, y, threat_suite(threat, eps, quick=True), "custom", "all")
    for robust in (art, ours):
        assert robust[budget > eps * 1.0001].all()  # nothing beyond the budget is broken
        assert not robust[budget < CLEAR * eps].any()  # everything well inside it is


def test_pass_counter_counts_calls_rows_and_grad_passes_then_resets() -> None:
    model = torch.nn.Linear(3, 2)
    counter = PassCounter(model)
    with torch.no_grad():
        model(torch.zeros(5, 3))
    model(torch.zeros(2, 3)).sum().backward()
    assert counter.take() == "passes: 2 forward (7 rows), 1 with grad (2 rows)"
    assert counter.take() == "passes: 0 forward (0 rows), 0 with grad (0 rows)"
    counter.handle.remove()
    model(torch.zeros(1, 3))
    assert counter.take() == "passes: 0 forward (0 rows), 0 with grad (0 rows)"


def test_variant_flag_selects_and_refuses_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_autoattack, "reference_package", lambda: None)
    model, x, y, _ = oracle(n=4)
    args = argparse.Namespace(dataset="custom", quick=True, variant=["harness"])
    assert list(variant_functions(model, x, y, "Linf", 0.03, args, {})) == ["harness"]
    args.variant = ["harness", "reference"]
    with pytest.raises(SystemExit, match=r"reference.*authors' package"):
        variant_functions(model, x, y, "Linf", 0.03, args, {})
