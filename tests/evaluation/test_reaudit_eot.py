"""``report --reaudit`` on a randomised model re-classifies its saved points by the run's K-draw rule: every
break confirmed by a new vote, up to the vote flips near a tie; one-draw re-classification is not the rule."""

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


def test_a_randomised_models_saved_points_are_confirmed_by_a_new_k_draw_vote(run) -> None:
    model, x, y, records, kept, eot = run
    assert eot.votes and len(kept) > 0
    table = reaudit_model(model, x, y, range(N), kept, records, eot=eot)
    assert problems(table) == [], table
    assert int(table["n_checked"].sum()) == len(kept)
    assert int(table["n_pred_mismatches"].sum()) == 0


def test_a_saved_point_that_no_longer_breaks_under_the_vote_is_a_problem(run) -> None:
    """Planted: every saved point replaced by its clean image, which the vote classifies right."""
    model, x, y, records, kept, eot = run
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
    table = reaudit_model(model, x, y, range(N), clean, records, eot=eot)
    assert int(table["n_vote_flips"].sum()) == len(kept)
    assert any("new K-draw vote" in p for p in problems(table))
    one_draw = reaudit_model(model, x, y, range(N), kept, records, eot=dataclasses.replace(eot, draws=1))
    assert int(one_draw["n_vote_flips"].sum()) == 0  # not the run's rule: compared class by class instead
