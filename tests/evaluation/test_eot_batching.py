"""A randomised model's evaluation: its EOT draws batched (attacks.draws), its records independent of the
batch size (every runner seeded per block of example ids, every K-draw prediction per example and draw), and
a model that draws once per forward kept on one draw per forward (batching would give every copy the same
draw)."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from torch import nn

from robustbench_wave.attacks import parse_suite
from robustbench_wave.evaluation import EvalSettings, evaluate
from robustbench_wave.evaluation.eot import EotSettings, decide
from tests.support.attack_models import labelled, patch_model, toy_data
from tests.support.noisy_models import GaussianInput

N = 24
SUITE = {
    "settings": {"rng_block": 16},
    "eps": {"default": {"Linf": [0.1]}},
    "attack": [
        {"name": "clean", "family": "clean"},
        {"name": "fgsm", "family": "fgsm", "threat": "Linf", "backend": "builtin"},
        {"name": "pgd", "family": "pgd", "threat": "Linf", "steps": 3, "rel_step_size": 0.25, "restarts": 1},
        {"name": "apgd", "family": "apgd", "threat": "Linf", "steps": 3, "restarts": 1, "loss": "ce"},
    ],
}


class OneDrawPerForward(nn.Module):
    """Noise drawn once per forward and shared by every row of the batch."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x + 0.05 * torch.randn((1, *x.shape[1:]), device=x.device))


def _evaluate(model: nn.Module, batch_size: int) -> tuple[pd.DataFrame, dict]:
    x = toy_data(N, seed=3)
    y = labelled(patch_model(), x)
    settings = EvalSettings(eot=EotSettings("auto", draws=5))
    result = evaluate(model, x, y, parse_suite(SUITE), settings, progress=False, batch_size=batch_size)
    return result.records, result.meta["models"]["model"]["eot"]


@pytest.mark.slow  # four evaluations with 20 EOT draws per gradient: about 1 s here, more on a busy core
def test_a_randomised_models_records_do_not_depend_on_the_batch_size() -> None:
    model = GaussianInput(patch_model(), 0.05).eval()
    small, eot = _evaluate(model, batch_size=5)
    large, _ = _evaluate(model, batch_size=64)
    assert eot["stochastic"] and eot["draw_rows"] > 0 and eot["eot_iter"] == 20
    pd.testing.assert_frame_equal(small, large)


def test_a_model_drawing_once_per_forward_gets_one_draw_per_forward() -> None:
    x = toy_data(N, seed=3)
    y = labelled(patch_model(), x)
    per_row = decide(GaussianInput(patch_model(), 0.05), x, y, EotSettings(), 0, torch.device("cpu"))
    per_forward = decide(OneDrawPerForward(patch_model()), x, y, EotSettings(), 0, torch.device("cpu"))
    assert per_row.stochastic and per_row.draw_rows > 0
    assert per_forward.stochastic and per_forward.active and per_forward.draw_rows == 0
    assert "draw_rows" not in decide(patch_model(), x, y, EotSettings(), 0, torch.device("cpu")).to_meta()
