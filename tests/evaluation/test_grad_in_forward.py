"""A defence that optimises at test time (purification: gradient steps on a total-variation energy inside its
forward) is evaluated end to end: no model forward of the evaluation runs under ``torch.inference_mode``,
which the model's own ``torch.enable_grad()`` cannot undo (its inner ``autograd.grad`` would fail with
"element 0 of tensors does not require grad").

Oracles: the denoiser's clean predictions computed here, outside the harness, under ``torch.no_grad``; the
record count of a suite of every family (each example has a row per attack, budget and mode).
"""

from __future__ import annotations

import pytest
import torch

from robustbench_wave.evaluation import EvalSettings, evaluate
from robustbench_wave.evaluation.eot import EotSettings
from tests.support.attack_models import teacher, tiny_suite, toy_data
from tests.support.host_rng_models import TVDenoised

N = 8


def _model() -> TVDenoised:
    return TVDenoised(teacher(n_classes=3, dim=64, seed=1)).eval()


def test_the_planted_denoiser_needs_grad_inside_its_forward() -> None:
    """The fixture is what the test assumes: it runs under no_grad, fails under inference_mode, and its output
    keeps x's gradient (so gradient attacks have one to follow)."""
    x = toy_data(N, seed=4)
    model = _model()
    with torch.no_grad():
        z = model(x)
    assert z.shape == (N, 3)
    with pytest.raises(RuntimeError), torch.inference_mode():
        model(x)
    xr = x.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(model(xr).sum(), xr)
    assert float(g.abs().sum()) > 0


@pytest.mark.parametrize("eot", [EotSettings(), EotSettings("on", 3)], ids=["auto", "eot-on"])
def test_a_purification_defence_is_evaluated_end_to_end(eot: EotSettings) -> None:
    x = toy_data(N, seed=4)
    model = _model()
    with torch.no_grad():
        expected = model(x).argmax(1)
    y = torch.arange(N) % 3  # some right, some wrong
    suite = tiny_suite()
    result = evaluate(
        model, x, y, suite, EvalSettings(backend="builtin", eot=eot), progress=False, batch_size=5
    )
    records = result.records
    clean = records[records["attack"] == "clean"].set_index("example_id").sort_index()
    assert clean["correct"].astype(bool).tolist() == (expected == y).tolist()
    ran = set(records["attack"])
    assert {"clean", "noise_u", "fgsm", "pgd_linf", "apgd_t"} <= ran  # (FAB-T: skipped under --eot on)
    assert not result.meta["models"]["model"]["eot"]["stochastic"]
