"""Automatic EOT (evaluation.eot): a randomised model is found before the attacks, its predictions (clean
included) are the plurality vote of K draws, its gradient attacks average 20 draws or are skipped with a
reason, and a deterministic model's evaluation is the plain one.

Oracles: a hand-made model whose answer flips to a wrong class with a known probability per example (the
vote's answer is the label exactly where that probability is below 1/2), hand-made logits for the vote's
tie rule, and the same evaluation with EOT off for a deterministic model.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from robustbench_wave.analysis.checks import CheckInputs, get_check
from robustbench_wave.attacks import parse_suite
from robustbench_wave.evaluation import EvalSettings, evaluate
from robustbench_wave.evaluation.eot import EOT_ITER, EotPlan, EotSettings, decide
from robustbench_wave.evaluation.execute import DRAW_RULE, vote
from robustbench_wave.reporting.markdown import randomness_text
from tests.support.attack_models import labelled, patch_model, toy_data
from tests.support.noisy_models import GaussianInput

CLASSES = 4
FLIP = torch.tensor([0.1, 0.25, 0.75, 0.9])  # probability of a wrong answer, cycled over the examples
N = 80


class Flipper(nn.Module):
    """Answers the label written in pixel 0 with probability 1 - p, else the next class; p is pixel 1.

    Under a vote of K draws the answer is the label exactly where p < 1/2 (for p = 0.25 and K = 61 the vote
    goes wrong with probability below 1e-4, for p = 0.1 far below); one draw is wrong with probability p.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        label = (x[:, 0, 0, 0] * (CLASSES - 1)).round().long()
        wrong = torch.rand(len(x), device=x.device) < x[:, 0, 0, 1]
        answer = torch.where(wrong, (label + 1) % CLASSES, label)
        return 8.0 * nn.functional.one_hot(answer, CLASSES).float() + 0.0 * x.flatten(1)[:, :1]


def _flip_data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    y = torch.arange(N) % CLASSES
    p = FLIP[(torch.arange(N) // CLASSES) % len(FLIP)]
    x = torch.full((N, 1, 8, 8), 0.5)
    x[:, 0, 0, 0] = y.float() / (CLASSES - 1)
    x[:, 0, 0, 1] = p
    return x, y, p


def _clean(records: pd.DataFrame) -> pd.Series:
    return records[records["attack"] == "clean"].set_index("example_id")["correct"].astype(bool)


CLEAN_ONLY = parse_suite(
    {"eps": {"default": {"Linf": [0.1]}}, "attack": [{"name": "clean", "family": "clean"}]}
)


def test_the_clean_decision_is_the_vote_of_k_draws_and_one_draw_is_not() -> None:
    x, y, p = _flip_data()
    auto = evaluate(Flipper(), x, y, CLEAN_ONLY, EvalSettings(eot=EotSettings(draws=61)), progress=False)
    assert _clean(auto.records).tolist() == (p < 0.5).tolist()
    eot = auto.meta["models"]["model"]["eot"]
    assert eot["stochastic"] and eot["draws"] == 61 and eot["rule"] == DRAW_RULE
    assert auto.meta["settings"]["eot"] == "auto" and auto.meta["settings"]["eot_draws"] == 61
    # one draw per point: wrong with probability p, so it disagrees with the rule on ~17.5% of the points
    off = evaluate(Flipper(), x, y, CLEAN_ONLY, EvalSettings(eot=EotSettings("off", 1)), progress=False)
    assert (_clean(off.records) != (p < 0.5)).sum() >= 5
    assert off.meta["models"]["model"]["eot"]["draws"] == 1


def test_a_randomised_models_records_repeat() -> None:
    """Its draws are seeded per prediction, whatever torch's RNG held before."""
    x, y, _ = _flip_data()
    runs = []
    for state in (1, 2):
        torch.manual_seed(state)
        runs.append(
            evaluate(Flipper(), x, y, CLEAN_ONLY, EvalSettings(eot=EotSettings("off", 1)), progress=False)
        )
    pd.testing.assert_frame_equal(runs[0].records, runs[1].records)


def test_vote_plurality_and_its_tie_rule() -> None:
    """Plurality, not majority: 2 of 5 draws for class 0 beat 1 + 1 + 1; a 2-2 tie goes to the higher mean
    softmax; the loss is the mean cross-entropy of the draws."""
    y = torch.tensor([0, 0])
    draws = [
        torch.tensor([[5.0, 0, 0, 0], [3.0, 0, 0, 0]]),
        torch.tensor([[5.0, 0, 0, 0], [3.0, 0, 0, 0]]),
        torch.tensor([[0.0, 5, 0, 0], [0.0, 1, 0, 0]]),
        torch.tensor([[0.0, 0, 5, 0], [0.0, 1, 0, 0]]),
        torch.tensor([[0.0, 0, 0, 5], [0.0, 0, 0, 0]]),  # row 2: a four-way tie, class 0 listed first
    ]
    pred, loss = vote(draws, y)
    assert pred.tolist() == [0, 0]
    expected = torch.stack([nn.functional.cross_entropy(d, y, reduction="none") for d in draws]).mean(0)
    torch.testing.assert_close(loss, expected)
    tie = [
        torch.tensor([[2.0, 0.0]]),
        torch.tensor([[0.0, 1.0]]),
    ]  # one vote each; class 0's softmax is higher
    assert vote(tie, torch.tensor([1]))[0].tolist() == [0]


@pytest.mark.parametrize("stochastic", [False, True])
def test_the_probe_leaves_torchs_rng_as_it_found_it(stochastic: bool) -> None:
    x, y, _ = _flip_data()
    model = Flipper() if stochastic else patch_model(n_classes=CLASSES)
    torch.manual_seed(5)
    before = torch.random.get_rng_state()
    plan = decide(model, x, y, EotSettings(), seed=0, device=torch.device("cpu"))
    assert torch.equal(before, torch.random.get_rng_state())
    assert plan.stochastic is stochastic and plan.active is stochastic


class NumpyRound(nn.Module):
    """A numpy round trip written as a user would: ``.numpy()`` refuses an input that requires grad."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rounded = torch.from_numpy(np.round(x.numpy() * 4) / 4)
        return rounded.flatten(1)[:, :CLASSES] * 8


@pytest.mark.parametrize("noise", [0.0, 0.3])
def test_a_model_without_autograd_is_probed_by_its_logits(noise: float) -> None:
    x, y, _ = _flip_data()
    model = NumpyRound() if noise == 0 else nn.Sequential(GaussianInput(nn.Identity(), noise), NumpyRound())
    plan = decide(model, x, y, EotSettings(), 0, torch.device("cpu"))
    assert plan.stochastic is (noise > 0)
    assert plan.randomness is not None and math.isnan(plan.randomness.max_rel_grad_diff)


def test_the_deterministic_check_and_the_probe_are_one_test() -> None:
    x, y, _ = _flip_data()
    for model, deterministic in ((patch_model(n_classes=CLASSES), True), (Flipper(), False)):
        result = get_check("deterministic")().run(CheckInputs(model=model, x=x, y=y), None)
        assert result.passed is deterministic
        assert decide(model, x, y, EotSettings(), 0, torch.device("cpu")).stochastic is not deterministic


GRADIENT_SUITE = {
    "eps": {"default": {"Linf": [0.05], "L2": [0.5]}},
    "attack": [
        {"name": "clean", "family": "clean"},
        {"name": "fgsm", "family": "fgsm", "threat": "Linf"},
        {"name": "pgd", "family": "pgd", "threat": "Linf", "steps": 2},
        {"name": "pgd_l2_ta", "family": "pgd", "threat": "L2", "steps": 2, "backend": "torchattacks"},
        {"name": "apgd", "family": "apgd", "threat": "Linf", "steps": 2},
        {"name": "mifgsm", "family": "mifgsm", "threat": "Linf", "steps": 2},
        {"name": "noise", "family": "noise", "distribution": "uniform", "threat": "Linf"},
    ],
}


@pytest.mark.slow
def test_gradient_attacks_get_20_eot_iterations_or_are_skipped_with_a_reason() -> None:
    """On a randomised model: fgsm, pgd, apgd run with eot_iter = 20; MI-FGSM (no eot_iter) and a PGD pinned
    to torchattacks under L2 (no EOT there) are skipped, with their reasons in meta.json; noise runs as is."""
    x = toy_data(12, seed=3)
    y = torch.arange(12) % CLASSES
    x[:, 0, 0, 1] = 0.3  # Flipper reads pixels 0 and 1 only
    x[:, 0, 0, 0] = y.float() / (CLASSES - 1)
    result = evaluate(
        Flipper(), x, y, parse_suite(GRADIENT_SUITE), EvalSettings(eot=EotSettings(draws=3)), escalation=False
    )
    attacks, eot = result.meta["attacks"], result.meta["models"]["model"]["eot"]
    assert {a: attacks[a]["params"]["eot_iter"] for a in ("fgsm", "pgd", "apgd")} == dict.fromkeys(
        ("fgsm", "pgd", "apgd"), EOT_ITER
    )
    assert set(eot["skipped"]) == {"mifgsm", "pgd_l2_ta"}
    skipped = result.meta["models"]["model"]["plan"]["not_applicable"]  # this model's, not every model's
    assert "no eot_iter" in skipped["mifgsm"] and "L2" in skipped["pgd_l2_ta"]
    assert attacks["mifgsm"]["skipped"] is None and attacks["pgd_l2_ta"]["skipped"] is None
    assert set(result.records["attack"]) == {"clean", "fgsm", "pgd", "apgd", "noise"}
    text = randomness_text(eot)
    assert "randomised" in text and f"{EOT_ITER} draws per step" in text and "mifgsm, pgd_l2_ta" in text


def test_a_deterministic_model_is_evaluated_as_without_eot() -> None:
    """Same records with EOT auto and off, the suite's own eot_iter in meta, single-draw predictions; 'on'
    forces the protocol on it (and says so)."""
    model = patch_model(n_classes=3)
    x = toy_data(16, seed=2)
    y = labelled(model, x)
    suite = parse_suite({**GRADIENT_SUITE, "attack": GRADIENT_SUITE["attack"][:3]})
    auto, off, on = (
        evaluate(model, x, y, suite, EvalSettings(eot=EotSettings(mode)), progress=False)
        for mode in ("auto", "off", "on")
    )
    pd.testing.assert_frame_equal(auto.records, off.records)
    assert auto.meta["settings"]["fingerprint"] == off.meta["settings"]["fingerprint"]
    assert auto.meta["attacks"]["pgd"]["params"]["eot_iter"] == 1
    assert auto.meta["models"]["model"]["eot"] | {"mode": "off"} == off.meta["models"]["model"]["eot"]
    assert not auto.meta["models"]["model"]["eot"]["stochastic"]
    assert "deterministic" in randomness_text(auto.meta["models"]["model"]["eot"])
    assert on.meta["attacks"]["pgd"]["params"]["eot_iter"] == EOT_ITER
    assert on.meta["models"]["model"]["eot"]["draws"] == EotSettings().draws


def test_bad_settings_say_what_to_do() -> None:
    with pytest.raises(ValueError, match="choose one of"):
        EotSettings("sometimes")
    with pytest.raises(ValueError, match=">= 1"):
        EotSettings(draws=0)
    assert not EotPlan("auto", None).stochastic  # no examples to probe: nothing to decide
