"""The builtin FAB-T (``attacks/fab_builtin.py``), FAB written from the paper, checked against oracles.

* A linear classifier whose distance to each target's boundary is known in closed form
  (``tests/support/linear_oracle.py``; the box [0, 1] never binds there): FAB's projection is exact, so the
  attack breaks exactly the points whose distance is within eps and returns points of about that distance;
  with the box binding, exactly the points the closed-form L∞ worst case inside the box breaks.
* Its box-constrained projection against a linear program (L∞, scipy's ``linprog``) and an exhaustive
  active-set search (L2) on small random cases, the box binding or not, the hyperplane reachable or not.
* The zoo's wavelet ViT: its robust sets against torchattacks' FAB-T (a port of the authors' code).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from robustbench_wave.attacks import (
    GradSafe,
    RunContext,
    attack_mode,
    fab,
    family_spec,
    get_runner,
    load_suite,
    parse_suite,
)
from robustbench_wave.attacks.fab_builtin import FabTSettings, fab_t, project_onto_boundary
from robustbench_wave.evaluation import EvalSettings, evaluate
from tests.support.attack_models import labelled, linear_model, optimal_linf_margin, toy_data
from tests.support.linear_oracle import DUAL, breaking_budget, oracle

MARGIN = 0.02  # FAB converges to about 0.5% above the boundary in 100 steps (eta = 1.05)


def _target_distances(w: torch.Tensor, x: torch.Tensor, y: torch.Tensor, threat: str) -> torch.Tensor:
    """(n, classes): the distance from each point to its boundary with each class (inf for its own)."""
    z = x.flatten(1) @ w.T
    out = torch.full((len(x), w.shape[0]), float("inf"))
    for j in range(w.shape[0]):
        dist = (z.gather(1, y[:, None]).squeeze(1) - z[:, j]) / (w[y] - w[j]).norm(p=DUAL[threat], dim=1)
        out[:, j] = torch.where(y == j, out[:, j], dist)
    return out


@pytest.mark.parametrize(("threat", "eps"), [("Linf", 0.03), ("L2", 0.2)])
def test_breaks_exactly_the_points_within_eps_of_a_linear_boundary(threat: str, eps: float) -> None:
    model, x, y, w = oracle(n=60)
    need = breaking_budget(w, x, y, threat)
    assert (need < eps).sum() >= 10 and (need > eps).sum() >= 10  # points on both sides
    with attack_mode(model):
        adv = fab_t(GradSafe(model), x, y, 2, FabTSettings(threat, eps))
        broken = model(adv).argmax(1) != y
    size = (adv - x).flatten(1).norm(p=float("inf") if threat == "Linf" else 2, dim=1)
    clear = need < (1 - MARGIN) * eps
    assert broken[clear].all() and not broken[need > eps].any()
    # the point returned is about as far as the boundary of the first target (clean-logit order) within eps
    dist = _target_distances(w, x, y, threat)
    order = (x.flatten(1) @ w.T).argsort(1, descending=True)[:, 1:]
    reach = dist.gather(1, order)
    first = reach.masked_fill(reach > eps, float("inf"))[
        torch.arange(len(x)), (reach <= eps).float().argmax(1)
    ]
    unambiguous = clear & ~((reach > (1 - MARGIN) * eps) & (reach <= eps)).any(1)
    assert unambiguous.sum() >= 10
    assert (size[broken] >= need[broken] * (1 - 1e-4)).all()
    assert (size[unambiguous] <= first[unambiguous] * (1 + MARGIN)).all()
    assert (size[~broken] == 0).all()


@pytest.mark.parametrize("eps", [0.1, 0.2])
def test_breaks_what_the_closed_form_linf_worst_case_breaks_with_the_box_binding(eps: float) -> None:
    """Points anywhere in [0, 1] (many pixels near a bound) and budgets where the box binds: a point must fall
    when the optimal L∞ perturbation inside the box at (1 - MARGIN) eps breaks it, and stand when the one at eps
    does not (``optimal_linf_margin``, the closed form)."""
    g = torch.Generator().manual_seed(1)
    w = torch.randn(3, 64, generator=g) / 2
    x = torch.rand(80, 1, 8, 8, generator=g)
    model = linear_model(w)
    y = labelled(model, x)
    bias = torch.zeros(3)
    must_fall = optimal_linf_margin(w, bias, x, y, (1 - MARGIN) * eps)[0] < 0
    must_stand = optimal_linf_margin(w, bias, x, y, eps)[0] > 0
    assert must_fall.sum() >= 20
    adv = fab_t(model, x, y, 2, FabTSettings("Linf", eps))
    with torch.no_grad():
        broken = model(adv).argmax(1) != y
    assert broken[must_fall].all() and not broken[must_stand].any()
    assert ((adv - x).abs().flatten(1).amax(1) <= eps).all() and ((adv >= 0) & (adv <= 1)).all()


def _linf_by_lp(x: np.ndarray, w: np.ndarray, c: float) -> float | None:
    """min t s.t. |z - x| <= t, <w, z> = c, 0 <= z <= 1 (None: infeasible)."""
    from scipy.optimize import linprog

    d = len(x)
    eye = np.eye(d)
    a_ub = np.block([[eye, -np.ones((d, 1))], [-eye, -np.ones((d, 1))]])
    res = linprog(
        np.r_[np.zeros(d), 1.0],
        A_ub=a_ub,
        b_ub=np.r_[x, -x],
        A_eq=np.r_[w, 0.0][None],
        b_eq=[c],
        bounds=[(0, 1)] * d + [(0, None)],
        method="highs",
    )
    return float(res.fun) if res.status == 0 else None


def _l2_by_active_sets(x: np.ndarray, w: np.ndarray, c: float) -> float | None:
    """Every assignment of the coordinates to lower bound, upper bound or free; the free ones solved in
    closed form; the nearest feasible point's distance (None: infeasible)."""
    best = None
    for assign in itertools.product((0.0, 1.0, None), repeat=len(x)):
        free = np.array([a is None for a in assign])
        z = np.array([0.0 if a is None else a for a in assign])
        rest = c - w[~free] @ z[~free]
        if free.any():
            wf = w[free]
            if wf @ wf == 0:
                continue
            z[free] = x[free] + (rest - wf @ x[free]) / (wf @ wf) * wf
            if (z[free] < -1e-12).any() or (z[free] > 1 + 1e-12).any():
                continue
        elif abs(rest) > 1e-9:
            continue
        dist = float(np.linalg.norm(z - x))
        best = dist if best is None else min(best, dist)
    return best


@pytest.mark.parametrize("threat", ["Linf", "L2"])
def test_box_constrained_projection_is_the_optimum(threat: str) -> None:
    pytest.importorskip("scipy")
    g = torch.Generator().manual_seed(3)
    solve = _linf_by_lp if threat == "Linf" else _l2_by_active_sets
    unreachable = 0
    for case in range(120):
        x = torch.rand(1, 5, generator=g, dtype=torch.float64)
        w = torch.randn(1, 5, generator=g, dtype=torch.float64)
        if case % 10 == 0:
            w[0, :2] = 0.0  # coordinates that cannot help
        c = (w * torch.rand(1, 5, generator=g, dtype=torch.float64)).sum(1)  # a point of the box is on it
        if case % 3 == 0:  # beyond the largest <w, z> over the box: unreachable
            c = w.clamp_min(0).sum(1) + 0.1
        z = project_onto_boundary(x, w, c, threat)
        assert ((z >= 0) & (z <= 1)).all()
        best = solve(x[0].numpy(), w[0].numpy(), float(c))
        if best is None:  # the hyperplane misses the box: every helping coordinate at its bound
            unreachable += 1
            toward = torch.sign(w * torch.sign(c - (w * x).sum()))
            assert torch.equal(z[toward > 0], torch.ones_like(z[toward > 0]))
            assert torch.equal(z[toward < 0], torch.zeros_like(z[toward < 0]))
            continue
        assert abs(float((w * z).sum() - c)) < 1e-9
        size = float((z - x).abs().max() if threat == "Linf" else (z - x).norm())
        assert size == pytest.approx(best, abs=1e-8)
    assert unreachable == 40


def test_targets_side_by_side_return_the_sequential_points(monkeypatch) -> None:
    """The grouping of targets is scheduling only: one target at a time gives the same points."""
    model, x, y, _ = oracle(n=12)
    s = FabTSettings("L2", 0.2, steps=20)
    with attack_mode(model):
        grouped = fab_t(GradSafe(model), x, y, 2, s)
        monkeypatch.setattr(fab, "ROWS", 1)
        sequential = fab_t(GradSafe(model), x, y, 2, s)
    torch.testing.assert_close(grouped, sequential, rtol=0, atol=1e-6)


def test_a_model_without_input_gradient_leaves_every_point() -> None:
    class Blocked(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.stack((x.detach().mean((1, 2, 3)), 0.5 - x.detach().mean((1, 2, 3))), 1)

    x = toy_data(6)
    model = Blocked()
    y = labelled(model, x)
    assert torch.equal(fab_t(model, x, y, 1, FabTSettings("Linf", 0.3, steps=3)), x)


def test_registered_as_fab_ts_builtin_second_implementation_and_cross_checked() -> None:
    assert family_spec("fab-t").backends == ("torchattacks", "builtin")
    for e in load_suite("autoattack").attacks[1:]:
        if e.family == "fab-t":
            assert e.able_backends() == ["torchattacks", "builtin"], e.name
    runner = get_runner("fab-t", "builtin")
    assert runner.per_example_rng
    assert "torchattacks" in (runner.rejection("Linf", {"restarts": 2}) or "")
    assert runner.rejection("L2", {"restarts": 1}) is None


def test_cross_check_runs_the_builtin_beside_torchattacks_as_attack_at_builtin() -> None:
    model, x, y, _ = oracle(n=16)
    suite = parse_suite(
        {
            "eps": {"default": {"L2": [0.2]}},
            "attack": [
                {"name": "clean", "family": "clean"},
                {"name": "fab_t", "family": "fab-t", "threat": "L2", "steps": 1, "n_target_classes": 2},
            ],
        }
    )
    records = evaluate(model, x, y, suite, EvalSettings(cross_check="all"), progress=False).records
    crossed = records[records["attack"] == "fab_t@builtin"]
    assert len(crossed) == len(x) and set(crossed["backend"]) == {"builtin"}
    assert crossed["attacked"].sum() > 0  # the points torchattacks' one step left


def test_runner_refuses_random_restarts() -> None:
    model, x, y, _ = oracle(n=4)
    raw = {"name": "t", "family": "fab-t", "threat": "Linf", "restarts": 2, "backend": "torchattacks"}
    entry = parse_suite({"eps": {"default": {"Linf": [0.03]}}, "attack": [raw]}).attacks[1]
    request = entry.request(model, x, y, torch.arange(4), 0.03, RunContext())
    with pytest.raises(ValueError, match="one restart"):
        get_runner("fab-t", "builtin").fn(request)


def _robust(model: torch.nn.Module, adv: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(adv).argmax(1) == y


@pytest.mark.slow
@pytest.mark.parametrize(("threat", "eps", "targets"), [("Linf", 0.1, 9), ("L2", 1.0, 3), ("Linf", 0.01, 3)])
def test_zoo_wavelet_vit_robust_set_as_torchattacks_fab_t(threat: str, eps: float, targets: int) -> None:
    """Untrained zoo wavelet ViT, 32 random images labelled by the model: the two implementations' robust
    sets differ by at most 2 points, and every builtin point is within eps (measured: identical sets at L∞ 0.1
    and L2 1.0, one point apart at L∞ 0.01).

    Sizes (CI time): 32 images, the comparison's statistical power (a few points decide it at L∞ 0.01), are
    kept; 30 steps for both implementations (at AutoAttack's 100 they agreed as closely: the same counts of
    differing points); at L2 1.0 and L∞ 0.01, where points stand through every target, the first 3 targets in
    order (targets 4-9 broke no further point under either implementation: the same robust sets as with 9),
    at L∞ 0.1 all 9 (every point falls to its first target, so the others cost nothing). The target order on
    the linear oracle: test_breaks_exactly_the_points_within_eps_of_a_linear_boundary; targets grouped:
    test_targets_side_by_side_return_the_sequential_points."""
    from robustbench_wave.data import dataset_info
    from robustbench_wave.models.vit import build_model
    from robustbench_wave.models.zoo import load_spec

    torch.manual_seed(0)
    model = build_model(load_spec("wavelet"), dataset_info("fashion-mnist")).eval()
    x = torch.rand(32, 1, 32, 32)
    y = labelled(model, x)
    steps = 30
    with attack_mode(model):
        wrapped = GradSafe(model)
        ours = fab_t(wrapped, x, y, targets, FabTSettings(threat, eps, steps=steps))
        theirs = fab.fab_t(wrapped, x, y, targets, fab.FabSettings(threat, eps, steps, 0.1, 1.05, 0.9))
        mine, other = _robust(wrapped, ours, y), _robust(wrapped, theirs, y)
    assert int((mine != other).sum()) <= 2, (int(mine.sum()), int(other.sum()))
    size = (ours - x).flatten(1).norm(p=float("inf") if threat == "Linf" else 2, dim=1)
    assert (size <= eps * (1 + 1e-6)).all() and ((ours >= 0) & (ours <= 1)).all()
