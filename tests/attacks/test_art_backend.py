"""The ART back-end (``attacks/art_backend.py``): a second implementation of APGD, APGD-T and Square, checked
against an oracle with a known answer and against torchattacks on the same points.

The oracle is a linear classifier (``tests/support/linear_oracle.py``) whose breaking budget per point is known
in closed form: every sound attack leaves the points whose budget is above eps, and a working one breaks those
well below it.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from robustbench_wave.attacks import (
    GradSafe,
    RunContext,
    attack_mode,
    family_spec,
    get_runner,
    list_attacks,
    load_suite,
    parse_suite,
)
from robustbench_wave.attacks.art_backend import library_rng
from robustbench_wave.evaluation import EvalSettings, evaluate
from tests.support.linear_oracle import CLEAR, breaking_budget, oracle


def _run(family: str, backend: str, threat: str, eps: float, **params: object) -> tuple[torch.Tensor, ...]:
    model, x, y, w = oracle()
    entry = parse_suite(
        {
            "eps": {"default": {threat: [eps]}},
            "attack": [{"name": "a", "family": family, "threat": threat, "backend": backend, **params}],
        }
    ).attacks[1]
    with attack_mode(model):
        out = get_runner(family, backend).fn(
            entry.request(GradSafe(model), x, y, torch.arange(len(x)), eps, RunContext(), 7)
        )
        with torch.no_grad():
            broken = model(out.x_adv).argmax(1) != y
    return broken, breaking_budget(w, x, y, threat), out.x_adv, x


def test_the_oracle_has_points_on_both_sides_of_the_budgets() -> None:
    _, x, y, w = oracle()
    for threat, eps in (("Linf", 0.03), ("L2", 0.2)):
        b = breaking_budget(w, x, y, threat)
        assert (b < CLEAR * eps).sum() >= 5 and (b > eps).sum() >= 5, (threat, b)


@pytest.mark.parametrize(
    ("family", "params"),
    [("apgd", {"loss": "ce"}), ("apgd", {"loss": "dlr"}), ("apgd-t", {"n_target_classes": 2})],
)
@pytest.mark.parametrize(("threat", "eps"), [("Linf", 0.03), ("L2", 0.2)])
@pytest.mark.parametrize("backend", ["art", "torchattacks"])
def test_gradient_members_break_exactly_what_the_closed_form_allows(
    backend: str, threat: str, eps: float, family: str, params: dict
) -> None:
    broken, budget, _, _ = _run(family, backend, threat, eps, steps=30, **params)
    assert not broken[budget > eps * 1.0001].any(), "broke a point the budget cannot reach: unsound"
    missed = (~broken & (budget < CLEAR * eps)).nonzero().flatten().tolist()
    assert not missed, f"{backend} {family} left points well inside the budget: {missed}"


@pytest.mark.parametrize(("threat", "eps"), [("Linf", 0.03), ("L2", 0.2)])
def test_art_square_breaks_the_easy_points_and_stays_in_budget(threat: str, eps: float) -> None:
    broken, budget, adv, x = _run("square", "art", threat, eps, n_queries=300)
    d = (adv - x).flatten(1)
    norm = d.abs().amax(1) if threat == "Linf" else d.norm(dim=1)
    assert (norm <= eps * (1 + 1e-5) + 1e-6).all() and adv.min() >= 0 and adv.max() <= 1
    assert not broken[budget > eps * 1.0001].any()
    easy = budget < 0.5 * eps
    # L∞: the vertex eps * sign(w_j - w_y) is what Square's stripes search; L2's squares on an 8x8 image are
    # coarse (measured at 300 queries: ART 7 and torchattacks 9 of these 10 easy points)
    assert broken[easy].all() if threat == "Linf" else broken[easy].float().mean() >= 0.6


def test_art_back_end_is_registered_for_autoattacks_members_but_fab() -> None:
    have = {f for f, b in list_attacks() if b == "art"}
    assert have == {"apgd", "apgd-t", "square"}  # ART has no FAB
    assert family_spec("apgd").backends == ("torchattacks", "art")
    s = load_suite("autoattack")
    for e in s.attacks[1:]:
        if e.family in ("apgd", "apgd-t", "square"):
            assert e.able_backends() == ["torchattacks", "art"], e.name


def test_art_refuses_what_it_cannot_honour() -> None:
    assert "EOT" in (get_runner("apgd", "art").rejection("Linf", {"eot_iter": 20, "rho": 0.75}) or "")
    assert "rho" in (get_runner("apgd-t", "art").rejection("L2", {"eot_iter": 1, "rho": 0.5}) or "")
    assert "margin" in (get_runner("square", "art").rejection("Linf", {"loss": "ce"}) or "")
    assert get_runner("apgd", "art").rejection("L2", {"eot_iter": 1, "rho": 0.75}) is None


def test_art_runs_are_seeded_by_the_block_and_leave_the_global_rngs_alone() -> None:
    np_before, py_before = np.random.get_state()[1].copy(), random.getstate()  # noqa: NPY002
    a = _run("apgd", "art", "L2", 0.2, steps=5)[2]
    b = _run("apgd", "art", "L2", 0.2, steps=5)[2]
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert (np.random.get_state()[1] == np_before).all() and random.getstate() == py_before  # noqa: NPY002
    with library_rng(1):
        first = np.random.rand()  # noqa: NPY002
    with library_rng(2):
        assert np.random.rand() != first  # noqa: NPY002


def test_cross_check_runs_art_beside_torchattacks_and_its_breaks_count() -> None:
    model, x, y, _ = oracle()
    suite = parse_suite(
        {
            "eps": {"default": {"L2": [0.2]}},
            "attack": [
                {"name": "clean", "family": "clean"},
                {"name": "apgd_ce", "family": "apgd", "threat": "L2", "steps": 10},
            ],
        }
    )
    records = evaluate(model, x, y, suite, EvalSettings(cross_check="all"), progress=False).records
    crossed = records[records["attack"] == "apgd_ce@art"]
    assert len(crossed) > 0 and set(crossed["backend"]) == {"art"}
