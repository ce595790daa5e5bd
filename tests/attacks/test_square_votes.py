"""Square on a randomised model, scored by the K-draw vote (the entry's ``vote_draws``): a break it reports is a
break of the records' vote.

Oracles: a planted model near a tie (``tests/support/vote_models.py``) whose single draw errs often but whose
K-draw vote is known at the worst point of the L∞ ball (every pixel moved by -eps lowers its mean margin most);
the records' own K-draw vote (:func:`~robustbench_wave.evaluation.execute.predict_common`); and torchattacks'
own Square loop, run with the same scoring, against the runner that skips unchanged points.
"""

from __future__ import annotations

import pytest
import torch

from robustbench_wave.attacks import AttackRequest, GradSafe, RunContext, get_runner, parse_suite, seeded
from robustbench_wave.attacks.draws import vote, vote_margin
from robustbench_wave.attacks.square import SquareSettings, VoteQueries, square_linf, vote_square
from robustbench_wave.evaluation import EvalSettings, evaluate
from robustbench_wave.evaluation.eot import DEFAULT_DRAWS
from robustbench_wave.evaluation.execute import predict_common
from tests.support.vote_models import NoisyMargin, near_tie_data

K, SEED, ROWS, EPS, N = DEFAULT_DRAWS, 5, 256, 0.05, 32
CPU = torch.device("cpu")
PARAMS = {"n_queries": 100, "p_init": 0.8, "restarts": 1, "loss": "margin"}
PARAMS |= {"small_eps_below": 0.0, "small_eps_queries": 100}


def _data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x, y = near_tie_data(N, 0.05, 0.9)
    return x, y, torch.arange(N) + 100


def _vote_wrong(x: torch.Tensor, y: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """The records' decision: the K-draw vote on the run's common random numbers, wrong or not."""
    return predict_common(NoisyMargin(), x, y, ids, SEED, N, CPU, K, ROWS)[0] != y


def _square(threat: str, eps: float, draws: int, **params: object) -> tuple[torch.Tensor, torch.Tensor]:
    """(points Square reports broken, whether the records' vote is wrong there) on the clean-correct points."""
    x, y, ids = _data()
    keep = ~_vote_wrong(x, y, ids)
    x, y, ids = x[keep], y[keep], ids[keep]
    ctx = RunContext(seed=SEED, eot_rows=ROWS)
    p = PARAMS | params | {"vote_draws": draws}
    request = AttackRequest(GradSafe(NoisyMargin()), x, y, ids, eps, threat, p, "sq", "square", ctx, 77)
    with seeded(3):
        adv = get_runner("square", "torchattacks").fn(request).x_adv
    return (adv != x).flatten(1).any(1), _vote_wrong(adv, y, ids)


def test_the_planted_case_single_draw_square_stops_on_breaks_the_vote_reverses() -> None:
    """The bug this guards against: one draw's answer per query."""
    moved, wrong = _square("Linf", EPS, 1)
    assert int((moved & ~wrong).sum()) >= 3


@pytest.mark.parametrize(
    ("threat", "eps", "loss"), [("Linf", EPS, "margin"), ("Linf", EPS, "ce"), ("L2", 8 * EPS, "margin")]
)
def test_every_break_square_reports_under_votes_is_a_break_of_the_records_vote(
    threat: str, eps: float, loss: str
) -> None:
    moved, wrong = _square(threat, eps, K, loss=loss)
    assert moved.any()
    assert not (moved & ~wrong).any(), f"{int((moved & ~wrong).sum())} Square breaks reversed by the vote"


def test_square_under_votes_breaks_every_point_the_vote_loses_at_the_worst_point() -> None:
    """L∞: the worst point of the ball is known (every pixel at -eps); Square reaches a vote break wherever it
    exists, and nowhere else."""
    x, y, ids = _data()
    keep = ~_vote_wrong(x, y, ids)
    worst = x[keep] - EPS
    worst[:, 0, 0, 0] = x[keep][:, 0, 0, 0]  # the label pixel does not move the margin
    breakable = _vote_wrong(worst, y[keep], ids[keep])
    moved, _ = _square("Linf", EPS, K)
    assert breakable.any()
    assert torch.equal(moved, breakable)


def test_square_linf_under_votes_returns_torchattacks_loop_points_and_skips_unchanged_points() -> None:
    """The L∞ runner reuses an unchanged point's stored K-draw answer; torchattacks' loop queries every point:
    the same points, bit for bit."""
    x, y, ids = _data()
    model = GradSafe(NoisyMargin())
    votes = VoteQueries(ids, SEED, K, ROWS)
    settings = SquareSettings(eps=0.02, n_queries=60, seed=11)
    with seeded(9):
        ours, count = square_linf(model, x, y, settings, votes)
    lib = {"eps": 0.02, "n_queries": 60, "n_restarts": 1, "p_init": 0.8, "loss": "margin", "seed": 11}
    with seeded(9):
        ref = vote_square(model, x, y, "Linf", lib, votes)
    assert torch.equal(ours, ref)
    assert count.skipped > 0


def test_vote_margin_is_positive_exactly_where_the_vote_picks_the_label() -> None:
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 200, 4, generator=g)
    y = torch.randint(0, 4, (200,), generator=g)
    logits[:, 0] = torch.tensor([1.0, 1.0, 0.0, 0.0])  # an exact tie of classes 0 and 1: the vote picks 0
    y[0] = 0
    assert torch.equal(vote_margin(logits, y) > 0, vote(logits, y)[0] == y)


def test_art_square_refuses_vote_draws_and_a_cross_check_skips_it() -> None:
    suite = {"eps": {"default": {"Linf": [EPS]}}}
    entry = {"name": "sq", "family": "square", "threat": "Linf", "vote_draws": K}
    assert parse_suite(suite | {"attack": [entry]}).attacks[-1].able_backends() == ["torchattacks"]
    with pytest.raises(ValueError, match="K-draw vote"):
        parse_suite(suite | {"attack": [entry | {"backend": "art"}]})


def test_evaluate_records_vote_draws_and_square_breaks_more_points_by_the_vote() -> None:
    """Through evaluate() with the suite's vote_draws = K: the records lose the points Square broke by the vote
    (its single-draw run's breaks were reversed), and meta.json records the choice in the entry's params."""
    x, y, _ = _data()
    out = {}
    for draws in (1, K):
        suite = parse_suite(
            {
                "eps": {"default": {"Linf": [EPS]}},
                "attack": [
                    {"name": "clean", "family": "clean"},
                    {
                        "name": "sq",
                        "family": "square",
                        "threat": "Linf",
                        "n_queries": 100,
                        "vote_draws": draws,
                    },
                ],
            }
        )
        result = evaluate(NoisyMargin(), x, y, suite, EvalSettings(grad_modes=("exact",)), progress=False)
        assert result.meta["attacks"]["sq"]["params"]["vote_draws"] == draws
        rows = result.records[result.records["attack"] == "sq"]
        out[draws] = int((~rows["correct"].astype(bool)).sum())
    assert out[K] > out[1]
