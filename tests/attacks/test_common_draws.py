"""A randomised model's predictions on common random numbers (attacks.draws.common_draw_logits): draw k of
example i is the same random state whatever input is classified and in whatever batch, so a point that no
attack moved keeps its clean vote, the records do not depend on the batch size, the naive and the adaptive
protocols decide by one rule, and the vote tolerance follows from K.

Oracles: a planted model near a tie (each draw flips its answer with probability 0.38-0.50, so even a 21-draw
vote is unsettled on most points) attacked by an attack that provably returns x (FGSM on a model without
input gradient); the binomial integral of :func:`vote_tolerance` against its closed form for one draw and a
Monte Carlo simulation for K draws.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from robustbench_wave import attack
from robustbench_wave.attacks import parse_suite
from robustbench_wave.attacks.draws import common_draw_logits
from robustbench_wave.defenses.protocols import ADAPTIVE, NAIVE, PROTOCOLS
from robustbench_wave.evaluation import EvalSettings, evaluate
from robustbench_wave.evaluation.eot import DEFAULT_DRAWS, EotSettings, vote_tolerance
from tests.support.host_rng_models import CLASSES, NearTie

N = 48
CPU = torch.device("cpu")
SUITE = parse_suite(
    {
        "eps": {"default": {"Linf": [0.1]}},
        "attack": [
            {"name": "clean", "family": "clean"},
            {"name": "fgsm", "family": "fgsm", "threat": "Linf", "backend": "builtin"},
        ],
    }
)


class NearTieOncePerForward(NearTie):
    """The same, with one noise value per forward shared by every row (its draws cannot be batched)."""

    def noise(self, n: int) -> torch.Tensor:
        return torch.randn(1).expand(n)


def _near_tie_data() -> tuple[torch.Tensor, torch.Tensor]:
    y = torch.arange(N) % CLASSES
    x = torch.full((N, 1, 8, 8), 0.5)
    x[:, 0, 0, 0] = y.float() / (CLASSES - 1)
    x[:, 0, 0, 1] = torch.linspace(0.0, 0.3, N)  # single-draw error 0.50 .. 0.38
    return x, y


def _evaluate(
    eot: EotSettings, batch_size: int = N, model: nn.Module | None = None
) -> tuple[pd.DataFrame, dict]:
    x, y = _near_tie_data()
    model = model if model is not None else NearTie()
    settings = EvalSettings(eot=eot, grad_modes=("exact",))  # the exact gradient: zero, so FGSM moves nothing
    result = evaluate(model, x, y, SUITE, settings, progress=False, batch_size=batch_size)
    return result.records, result.meta["models"]["model"]["eot"]


def _correct(records: pd.DataFrame, attack: str) -> pd.Series:
    """``correct`` per example of the rows ``attack`` attacked (all of them for clean)."""
    rows = records[(records["attack"] == attack) & ((attack == "clean") | records["attacked"].astype(bool))]
    rows = rows.set_index("example_id")
    return rows["correct"].astype(bool).sort_index()


@pytest.mark.parametrize("model", [NearTie(), NearTieOncePerForward()], ids=["per-row", "once-per-forward"])
def test_an_attack_that_moves_nothing_loses_no_point_near_a_tie(model: nn.Module) -> None:
    """Every clean-correct point is attacked; FGSM returns it unchanged, so its vote is its clean vote (its K
    draws in one forward, or one forward per draw for a model whose rows share a draw)."""
    records, eot = _evaluate(EotSettings("auto"), model=model)
    assert eot["stochastic"] and eot["draws"] == DEFAULT_DRAWS and eot["common_draws"]
    assert (eot.get("draw_rows", 0) > 0) == (type(model) is NearTie)
    clean = _correct(records, "clean")
    attacked = _correct(records, "fgsm")
    assert 0 < clean.sum() < N  # near a tie: the votes go both ways
    assert attacked.index.tolist() == clean[clean].index.tolist()
    assert attacked.all(), f"{int((~attacked).sum())} points lost to an attack that moved nothing"


def test_the_draws_do_not_depend_on_the_batch_or_the_other_points() -> None:
    x, _ = _near_tie_data()
    ids = torch.arange(100, 100 + N)
    model = NearTie()
    whole = common_draw_logits(model, x, ids, 7, 5, 256, CPU)
    order = torch.randperm(N, generator=torch.Generator().manual_seed(0))
    shuffled = common_draw_logits(model, x[order], ids[order], 7, 5, 256, CPU)
    alone = torch.cat(
        [common_draw_logits(model, x[i : i + 1], ids[i : i + 1], 7, 5, 256, CPU) for i in range(3)], 1
    )
    assert torch.equal(shuffled, whole[:, order])
    assert torch.equal(alone, whole[:, :3])
    one_per_forward = common_draw_logits(model, x, ids, 7, 5, 0, CPU)  # other chunks, other (valid) draws
    assert one_per_forward.shape == whole.shape
    assert not torch.equal(common_draw_logits(model, x, ids, 8, 5, 256, CPU), whole)  # another seed


def test_a_randomised_models_records_do_not_depend_on_the_batch_size() -> None:
    small, _ = _evaluate(EotSettings("auto"), batch_size=5)
    large, _ = _evaluate(EotSettings("auto"), batch_size=N)
    pd.testing.assert_frame_equal(small, large)


def test_the_naive_and_the_adaptive_protocol_decide_by_the_same_vote() -> None:
    """--eot off turns EOT off in the attacks, not the decision: the gallery's naive protocol and its adaptive
    one classify every point by the same K-draw vote on the same draws (the same clean column)."""
    naive, naive_eot = _evaluate(EotSettings("off"))
    adaptive, adaptive_eot = _evaluate(EotSettings("auto"))
    assert naive_eot["eot_iter"] == 1 and adaptive_eot["eot_iter"] > 1
    assert naive_eot["draws"] == adaptive_eot["draws"] == DEFAULT_DRAWS
    assert naive_eot["rule"] == adaptive_eot["rule"]
    pd.testing.assert_series_equal(_correct(naive, "clean"), _correct(adaptive, "clean"))
    for protocol in (NAIVE, ADAPTIVE):
        args = attack.get_args_parser().parse_args(["--model", "patch", *PROTOCOLS[protocol]])
        settings = attack._settings(args).eval_settings("patch", None, ["exact"]).eot
        assert settings.draws == DEFAULT_DRAWS, protocol


def test_single_draw_decisions_remain_on_request() -> None:
    """--eot-draws 1: one draw per prediction, still the same draw for a point whatever the batch."""
    records, eot = _evaluate(EotSettings("off", 1))
    assert eot["draws"] == 1 and eot["rule"] == "one forward per prediction"
    clean = _correct(records, "clean")
    assert _correct(records, "fgsm").all() and 0 < clean.sum() < N
    pd.testing.assert_frame_equal(records, _evaluate(EotSettings("off", 1), batch_size=7)[0])


def test_the_vote_tolerance_is_the_binomial_disagreement_of_evenly_spread_points() -> None:
    assert vote_tolerance(1) == pytest.approx(1 / 3, abs=1e-12)  # 2 p (1 - p) integrated over [0, 1]
    rng = np.random.default_rng(0)
    p = rng.uniform(size=400_000)
    a, b = rng.binomial(21, p), rng.binomial(21, p)
    simulated = float(((a > 10) != (b > 10)).mean())
    assert vote_tolerance(21) == pytest.approx(simulated, abs=0.003)
    assert vote_tolerance(21) == pytest.approx(1 / math.sqrt(math.pi * 21), rel=0.05)  # the asymptote
    assert vote_tolerance(61) < vote_tolerance(21) < vote_tolerance(5)
    assert vote_tolerance(21, 20) == pytest.approx(vote_tolerance(20, 21))
    with pytest.raises(ValueError, match="at least one draw"):
        vote_tolerance(0)
