"""The strength benchmark's independent attack (benchmarks/bench_strength.py) against closed-form answers: on a
linear model it breaks every point whose breaking budget is well inside the ball and none beyond it, at L∞ and
at L2; its budget check refuses a planted point just outside; its table says when the suite misses breaks."""

from __future__ import annotations

import pytest
import torch

from benchmarks.bench_strength import (
    Comparison,
    StrongSettings,
    in_budget,
    margin_loss,
    project,
    strong_robust,
    table_text,
)
from tests.support.linear_oracle import CLEAR, breaking_budget, oracle


@pytest.mark.parametrize(("threat", "grid"), [("Linf", (0.02, 0.04)), ("L2", (0.12, 0.25))])
def test_the_strong_attack_breaks_what_the_closed_form_says_and_nothing_more(
    threat: str, grid: tuple
) -> None:
    model, x, y, w = oracle(n=40)
    budget = breaking_budget(w, x, y, threat)
    flags = strong_robust(model, x, y, threat, grid, StrongSettings(steps=30, starts=1))
    assert list(flags) == sorted(grid)
    for eps, robust in flags.items():
        assert robust[budget > eps * 1.0001].all()  # no point broken beyond its budget (sound)
        assert not robust[budget < CLEAR * eps].any()  # every point well inside it broken (it works)
        assert 0 < int(robust.sum()) < len(x)  # the planted grid leaves both kinds
    assert not (flags[grid[1]] & ~flags[grid[0]]).any()  # broken at the smaller budget: broken at the larger


@pytest.mark.parametrize("threat", ["Linf", "L2"])
def test_projection_lands_in_the_budget_and_the_check_refuses_a_point_just_outside(threat: str) -> None:
    g = torch.Generator().manual_seed(1)
    x = 0.3 + 0.4 * torch.rand(6, 1, 4, 4, generator=g)  # the box never binds within eps = 0.1
    far = x + torch.randn(x.shape, generator=g)
    eps = 0.1
    inside = project(x, far, eps, threat)
    assert in_budget(x, inside, eps, threat).all()
    assert not in_budget(x, x + (inside - x) * 1.01, eps, threat).any()  # 1% further out
    assert not in_budget(x, x + 2.0, eps, threat).any()  # outside [0, 1]


def test_margin_loss_is_the_largest_other_logit_minus_the_true_one() -> None:
    logits = torch.tensor([[3.0, 1.0, 2.0], [0.0, 5.0, -1.0]])
    assert margin_loss(logits, torch.tensor([0, 2])).tolist() == [-1.0, 6.0]


def _row(model: str, suite: int, strong: int) -> Comparison:
    return Comparison(model, "L2", 1.0, 100, 90, suite, strong, max(suite - strong, 0), 0, 1.0, 2.0)


def test_the_table_names_the_largest_gap_and_whether_the_goal_holds() -> None:
    close = table_text([_row("cnn", 34, 33), _row("patch", 10, 10)], ["header"])
    assert "at every budget: yes (largest gap +1.0 points: cnn L2 1)" in close
    far = table_text([_row("cnn", 38, 33), _row("patch", 10, 10)], ["header"])
    assert "at every budget: no (largest gap +5.0 points: cnn L2 1)" in far
