"""``report reaudit`` on a randomised model re-classifies its saved points by the run's K-draw rule on the
run's own common random numbers, so to the recorded class exactly; a run made before its predictions shared
their draws is re-classified by a new vote, every break confirmed up to the vote flips near a tie."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from robustbench_wave.attacks import parse_suite
from robustbench_wave.evaluation import EvalSettings, evaluate
from robustbench_wave.evaluation.adversarial import AdversarialSet
from robustbench_wave.evaluation.eot import EotPlan, EotSettings
from robustbench_wave.evaluation.reaudit import problems, reaudit_model
from tests.support.attack_models import labelled, patch_model, toy_data
from tests.support.noisy_models import GaussianInput

N = 32
SUITE = {
    "eps": {"default": {"Linf": [0.1, 0.2]}},
    "attack": [
        {"name": "clean", "family": "clean"},
        {"name": "pgd", "family": "pgd", "threat": "Linf", "steps": 4, "rel_step_size": 0.25, "restarts": 1},
    ],
}


@pytest.fixture(scope="module")
def run() -> tuple:
    model = GaussianInput(patch_model(), 0.05).eval()
    x = toy_data(N, seed=5)
    y = labelled(patch_model(), x)
    settings = EvalSettings(eot=EotSettings("auto", draws=9))
    result = evaluate(model, x, y, parse_suite(SUITE), settings, progress=False, save_adversarial=True)
    eot = EotPlan.from_meta(result.meta["models"]["model"]["eot"])
    return model, x, y, result.records, result.adversarial["model"], eot


def test_a_randomised_models_saved_points_are_re_classified_to_their_recorded_class(run) -> None:
    model, x, y, records, kept, eot = run
    assert eot.votes and eot.common_draws and len(kept) > 0
    table = reaudit_model(model, x, y, range(N), kept, records, eot=eot)
    assert problems(table, {"model": eot}) == [], table
    assert int(table["n_checked"].sum()) == len(kept)
    assert int(table["n_pred_mismatches"].sum()) == 0 and int(table["n_vote_flips"].sum()) == 0
    other_seed = reaudit_model(model, x, y, range(N), kept, records, eot=eot, seed=1)
    assert int(other_seed["n_pred_mismatches"].sum()) > 0  # other draws: not the run's classification


def _clean_points(kept: AdversarialSet, x: torch.Tensor) -> AdversarialSet:
    """Every saved point replaced by its clean image, which the run's vote classified right."""
    clean = AdversarialSet(kept.model)
    for key in kept.keys():  # noqa: SIM118  (AdversarialSet.keys, not a dict)
        g = kept.group(key)
        for i, src in zip(g.example_id.tolist(), g.source, strict=True):
            clean.add(
                key,
                torch.tensor([i]),
                x[i : i + 1],
                src,
                {"backend": "builtin", "family": "pgd", "kind": "white-box"},
            )
    return clean


def test_a_saved_point_that_no_longer_breaks_is_a_mismatch(run) -> None:
    model, x, y, records, kept, eot = run
    table = reaudit_model(model, x, y, range(N), _clean_points(kept, x), records, eot=eot)
    assert int(table["n_pred_mismatches"].sum()) == len(kept)
    assert any("pred mismatches" in p for p in problems(table, {"model": eot}))


def test_a_run_before_common_draws_is_confirmed_by_a_new_vote_up_to_flips_near_a_tie(run) -> None:
    model, x, y, records, kept, eot = run
    legacy = dataclasses.replace(eot, common_draws=False)
    table = reaudit_model(model, x, y, range(N), kept, records, eot=legacy)
    assert problems(table, {"model": legacy}) == [], table
    flipped = reaudit_model(model, x, y, range(N), _clean_points(kept, x), records, eot=legacy)
    assert int(flipped["n_vote_flips"].sum()) == len(kept)
    assert int(flipped["n_pred_mismatches"].sum()) == 0  # a new vote is compared right / wrong, not by class
    assert any("new K-draw vote" in p for p in problems(flipped, {"model": legacy}))
    one_draw = dataclasses.replace(legacy, draws=1)
    table = reaudit_model(model, x, y, range(N), kept, records, eot=one_draw)
    assert int(table["n_vote_flips"].sum()) == 0  # not a vote: compared class by class instead
