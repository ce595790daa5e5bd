"""The checks that know EOT handled randomness: ``deterministic`` and ``best_vs_last_iterate`` judge the
K-draw decisions a run with the 'rand' protocol used, and still fire on single draws (EOT off)."""

from __future__ import annotations

import dataclasses

import pandas as pd
import torch
from torch import nn

from robustbench_wave.analysis.checks import get_check
from robustbench_wave.analysis.checks.check import CheckInputs
from robustbench_wave.evaluation.eot import EotPlan, Randomness, vote_tolerance
from tests.support.masking_models import NUM_CLASSES, NoisyQuadrant, attack_rows, clean_rows, quadrant_data

RANDOM = Randomness(max_rel_logit_diff=0.1, max_rel_grad_diff=0.5, pred_agreement=0.9)
#: The 'rand' protocol as a run records it (K = 21 votes, 20 EOT draws per gradient), and EOT off.
RAND = EotPlan("auto", RANDOM, draws=21, eot_iter=20, draw_rows=4096)
OFF = EotPlan("off", RANDOM)
#: EOT off in the attacks, predictions still K-draw votes on common draws (the gallery's naive protocol).
OFF_VOTES = EotPlan("off", RANDOM, draws=21, draw_rows=4096, common_draws=True)


class CoinFlip(nn.Module):
    """Logits that are pure noise: every draw's class is random, so no K-draw vote is settled."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return 5.0 * torch.randn(len(x), NUM_CLASSES, device=x.device) + 0.0 * x.flatten(1)[:, :1]


def _model_inputs(model: nn.Module, eot: EotPlan | None) -> CheckInputs:
    x, y = quadrant_data(32)
    return CheckInputs(model=model.eval(), x=x, y=y, num_classes=NUM_CLASSES, eot=eot)


def test_deterministic_passes_a_randomised_model_whose_k_draw_votes_are_settled() -> None:
    result = get_check("deterministic")().run(_model_inputs(NoisyQuadrant(), RAND), None)
    assert result.passed is True, result.meaning
    assert "handled" in result.meaning and result.numbers["vote_agreement"] >= 0.95
    assert result.numbers["eot_draws"] == 21


def test_deterministic_still_fails_a_randomised_model_attacked_with_single_draws() -> None:
    for eot in (OFF, OFF_VOTES, None):
        result = get_check("deterministic")().run(_model_inputs(NoisyQuadrant(), eot), None)
        assert result.passed is False and "randomized" in result.meaning
        assert "vote_agreement" not in result.numbers


def test_deterministic_fails_under_eot_when_the_votes_themselves_are_unsettled() -> None:
    result = get_check("deterministic")().run(_model_inputs(CoinFlip(), RAND), None)
    assert result.passed is False and "unsettled" in result.meaning
    assert result.numbers["vote_agreement"] < 0.95


def _iterate_records(n: int, lost: int, eot: EotPlan | None) -> CheckInputs:
    """``n`` PGD rows: the first half broken (last iterate too), the rest held, of which ``lost`` had a last
    iterate voted wrong."""
    broken = n // 2
    correct = [False] * broken + [True] * (n - broken)
    last = [False] * broken + [False] * lost + [True] * (n - broken - lost)
    rows = attack_rows("pgd", "pgd", "white-box", 0.1, correct, last=last)
    return CheckInputs(records=pd.concat([clean_rows(n), rows], ignore_index=True), eot=eot)


def test_best_vs_last_iterate_tolerates_vote_noise_only_under_eot() -> None:
    check = get_check("best_vs_last_iterate")()
    noisy = _iterate_records(60, lost=4, eot=RAND)  # 4 of 60 = 6.7 %: votes near a tie
    result = check.run(noisy, "exact")
    assert result.passed is True and "K = 21" in result.meaning, result.meaning
    assert result.numbers["uncounted_last_iterate_successes"] == 4
    strict = check.run(dataclasses.replace(noisy, eot=OFF), "exact")  # single draws: the same rows fail
    assert strict.passed is False


def test_best_vs_last_iterate_fires_under_eot_when_successes_are_lost_beyond_vote_noise() -> None:
    result = get_check("best_vs_last_iterate")().run(_iterate_records(60, lost=12, eot=RAND), "exact")
    assert result.passed is False and "more than the 12.1%" in result.meaning, result.meaning
    assert result.numbers["vote_tol"] == vote_tolerance(21, 20)


def test_an_eot_plan_reads_back_from_its_meta_entry() -> None:
    assert EotPlan.from_meta(RAND.to_meta()) == RAND
    assert EotPlan.from_meta(OFF.to_meta()) == OFF
    assert EotPlan.from_meta(OFF_VOTES.to_meta()) == OFF_VOTES


def test_the_model_checks_own_pgd_uses_the_runs_eot_on_a_randomised_model(monkeypatch) -> None:
    """large_eps_to_chance and attack_convergence attack with the run's EOT draws and judge by its K-draw
    vote under EOT, with single draws otherwise."""
    from robustbench_wave.analysis.checks import model_checks

    seen: list[dict] = []
    real = model_checks.pgd_with_history

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append({k: kwargs.get(k, 1) for k in ("eot_iter",)})
        return real(*args, **kwargs)

    monkeypatch.setattr(model_checks, "pgd_with_history", spy)
    for eot, expected in ((RAND, 20), (OFF, 1)):
        seen.clear()
        inputs = dataclasses.replace(_model_inputs(NoisyQuadrant(), eot), eps=0.15, steps=2)
        result = get_check("large_eps_to_chance")(steps=3).run(inputs, "exact")
        assert result.passed is True and seen == [{"eot_iter": expected}]
        get_check("attack_convergence")(more=2).run(inputs, "exact")
        assert [s["eot_iter"] for s in seen[1:]] == [expected] * 3
