"""A randomised defence that draws from NumPy's global RNG or Python's ``random`` is evaluated on common random
numbers like a torch-drawing one; one that draws from a source nobody seeds (a private unseeded
``np.random.default_rng()``) is found by the probe in evaluation.eot.decide and recorded as not common.

Oracles: a planted model near a tie (one draw errs with probability 0.38-0.50, so a K = 21 vote goes both
ways unless its draws are common) attacked by FGSM, which returns x on a model without input gradient: a
clean-correct point can only be lost if its draws changed; the same evaluation repeated under the same seed
after the caller's NumPy/random states changed.
"""

from __future__ import annotations

import logging
import random

import numpy as np
import pandas as pd
import pytest
import torch

from robustbench_wave.attacks import parse_suite
from robustbench_wave.evaluation import EvalSettings, evaluate
from robustbench_wave.evaluation.eot import EotPlan, EotSettings
from tests.support.host_rng_models import HostNearTie, near_tie_data
from tests.support.noisy_models import GaussianInput

N = 40
SUITE = parse_suite(
    {
        "eps": {"default": {"Linf": [0.1]}},
        "attack": [
            {"name": "clean", "family": "clean"},
            {"name": "fgsm", "family": "fgsm", "threat": "Linf", "backend": "builtin"},
        ],
    }
)


def _evaluate(model: torch.nn.Module, host_state: int) -> tuple[pd.DataFrame, dict]:
    """Evaluate under seed 0 after putting NumPy's and Python's global RNGs in ``host_state``."""
    np.random.seed(host_state)  # noqa: NPY002
    random.seed(host_state)
    x, y = near_tie_data(N)
    result = evaluate(model, x, y, SUITE, EvalSettings(eot=EotSettings("off")), progress=False)
    return result.records, result.meta["models"]["model"]["eot"]


def _correct(records: pd.DataFrame, attack: str) -> pd.Series:
    """``correct`` per example of the exact-gradient rows ``attack`` attacked (all of them for clean)."""
    records = records[records["grad_mode"] == "exact"]
    rows = records[(records["attack"] == attack) & ((attack == "clean") | records["attacked"].astype(bool))]
    return rows.set_index("example_id")["correct"].astype(bool).sort_index()


@pytest.mark.parametrize("source", ["numpy", "random"])
def test_a_host_rng_model_gets_common_random_numbers(source: str) -> None:
    """Same seed, other host RNG states: the same records; FGSM (which moves nothing) loses no point."""
    first, eot = _evaluate(HostNearTie(source), host_state=1)
    again, _ = _evaluate(HostNearTie(source), host_state=2)
    pd.testing.assert_frame_equal(first, again)
    assert eot["stochastic"] and eot["common_draws"] is True and "common_draws_reason" not in eot
    clean, attacked = _correct(first, "clean"), _correct(first, "fgsm")
    assert 0 < clean.sum() < N  # near a tie: the votes go both ways
    assert attacked.index.tolist() == clean[clean].index.tolist()
    assert attacked.all(), f"{int((~attacked).sum())} points lost to an attack that moved nothing"


def test_draws_from_a_source_nobody_seeds_are_recorded_as_not_common(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="robustbench_wave.evaluation.eot"):
        _, eot = _evaluate(HostNearTie("private"), host_state=1)
    assert eot["stochastic"] and eot["common_draws"] is False
    assert "cannot seed" in eot["common_draws_reason"]
    assert any("not common random numbers" in r.getMessage() for r in caplog.records)
    plan = EotPlan.from_meta(eot)  # what a re-audit reads: no exact replay of the votes
    assert not plan.common_draws and plan.not_common == eot["common_draws_reason"]
    assert plan.to_meta() == eot


def test_a_torch_drawing_model_keeps_its_common_draws_record() -> None:
    """The probe passes a model whose draws all come from torch: meta.json as before (no reason key)."""
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 4))
    _, eot = _evaluate(GaussianInput(net, 0.5).eval(), host_state=1)
    assert eot["stochastic"] and eot["common_draws"] is True and "common_draws_reason" not in eot
