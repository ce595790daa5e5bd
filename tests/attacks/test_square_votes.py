"""Square on a randomised model, scored by the K-draw vote (the entry's ``vote_draws``, set by the 'rand'
protocol): its search on batched draws, a break it reports a break of the records' vote.

Oracles: a planted model near a tie (``tests/support/vote_models.py``) whose single draw errs often but whose
K-draw vote is known at the worst point of the L∞ ball (every pixel moved by -eps lowers its mean margin most);
the records' own K-draw vote (:func:`~robustbench_wave.evaluation.execute.predict_common`); torchattacks'
own Square loop, run with the same scoring, against the L∞ runner; and the forwards a model is called for,
counted, against the one forward per point and query of scoring every query on the records' draws.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from robustbench_wave.attacks import AttackRequest, GradSafe, RunContext, get_runner, parse_suite, seeded
from robustbench_wave.attacks.draws import common_draw_logits, vote, vote_margin
from robustbench_wave.attacks.square import (
    Scorer,
    SquareSettings,
    VoteQueries,
    square_linf,
    vote_margin_and_loss,
    vote_square,
)
from robustbench_wave.evaluation import EvalSettings, evaluate
from robustbench_wave.evaluation.eot import DEFAULT_DRAWS, EotSettings, decide
from robustbench_wave.evaluation.execute import predict_common
from tests.support.vote_models import CLASSES, NoisyMargin, near_tie_data

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


def test_square_linf_under_votes_returns_torchattacks_loop_points() -> None:
    """Under votes the L∞ runner queries every point standing, as torchattacks' loop does (a batched answer
    depends on its batch, so no stored one stands in): the same queries under the same seed, the same points,
    bit for bit."""
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
    assert count.skipped == 0


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


def test_the_rand_protocol_gives_square_the_records_vote_and_its_breaks_count() -> None:
    """Through evaluate() on a randomised model: under EOT auto Square's entry gets vote_draws = K (meta.json
    says so) and the records lose more points than under --eot off, whose single-draw queries stopped on
    breaks the records' vote reversed."""
    x, y, _ = _data()
    sq = {"name": "sq", "family": "square", "threat": "Linf", "n_queries": 100}
    suite = parse_suite(
        {"eps": {"default": {"Linf": [EPS]}}, "attack": [{"name": "clean", "family": "clean"}, sq]}
    )
    out = {}
    for mode in ("auto", "off"):
        settings = EvalSettings(grad_modes=("exact",), eot=EotSettings(mode, K))
        result = evaluate(NoisyMargin(), x, y, suite, settings, progress=False)
        rows = result.records[result.records["attack"] == "sq"]
        out[mode] = (
            result.meta["attacks"]["sq"]["params"]["vote_draws"],
            int((~rows["correct"].astype(bool)).sum()),
        )
    assert out["auto"][0] == K and out["off"][0] == 1
    assert out["auto"][1] > out["off"][1]


def _square_entry(**extra: object) -> dict[str, object]:
    return {"name": "sq", "family": "square", "threat": "Linf"} | extra


@pytest.mark.parametrize(
    ("entry", "draws", "skipped"),
    [
        (_square_entry(), K, False),
        (_square_entry(vote_draws=K + 10), K + 10, False),  # the suite's larger K stands
        (_square_entry(backend="art"), K, True),  # ART cannot vote: skipped, never swapped for another
    ],
)
def test_eot_plan_apply_gives_square_the_plans_draws_on_a_randomised_model(
    entry: dict[str, object], draws: int, skipped: bool
) -> None:
    x, y, _ = _data()
    suite = parse_suite({"eps": {"default": {"Linf": [EPS]}}, "attack": [entry]})
    plan = decide(NoisyMargin(), x, y, EotSettings("auto", K), SEED, CPU)
    applied, plan = plan.apply(suite)
    square = applied.attacks[-1]
    assert plan.votes and square.params["vote_draws"] == draws and square.backend == entry.get("backend")
    assert ("sq" in plan.skipped) == skipped
    if skipped:
        assert "vote_draws" in plan.skipped["sq"] and "backend = 'torchattacks'" in plan.skipped["sq"]


@pytest.mark.parametrize(("mode", "randomised"), [("auto", False), ("on", False), ("off", True)])
def test_eot_plan_apply_leaves_square_single_draw_without_the_rand_protocol(
    mode: str, randomised: bool
) -> None:
    """A deterministic model (no votes, EOT or not) and --eot off keep single-draw queries."""
    x, y, _ = _data()
    model = NoisyMargin() if randomised else nn.Sequential(nn.Flatten(), nn.Linear(64, CLASSES))
    suite = parse_suite({"eps": {"default": {"Linf": [EPS]}}, "attack": [_square_entry()]})
    applied, _ = decide(model, x, y, EotSettings(mode, K), SEED, CPU).apply(suite)
    assert applied.attacks[-1].params["vote_draws"] == 1


def test_a_break_of_the_batched_search_counts_only_where_the_records_vote_confirms_it() -> None:
    """Points at the tie: the batched draws call some broken that the records' draws do not; the scorer's
    margin is <= 0 exactly where the records' vote is wrong among those, and the batched value elsewhere."""
    x, y = near_tie_data(N, 0.0, 0.15)
    ids = torch.arange(N) + 100
    votes = VoteQueries(ids, SEED, K, ROWS)
    model = GradSafe(NoisyMargin())
    scorer = Scorer(model, y, "margin", votes)
    margin, _ = scorer.margin_and_loss(x, torch.arange(N))
    batched, _ = vote_margin_and_loss(scorer._search_draws(x, votes), y, "margin")
    records, _ = vote_margin_and_loss(common_draw_logits(model, x, ids, SEED, K, ROWS, CPU), y, "margin")
    assert ((batched <= 0) & (records > 0)).any()  # the case the confirmation exists for
    assert torch.equal(margin <= 0, (batched <= 0) & (records <= 0))
    assert torch.equal(margin[batched > 0], batched[batched > 0])


class Counted(nn.Module):
    """The model, counting the forwards it is called for."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model, self.calls = model, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.model(x)


class SureNoisy(nn.Module):
    """Right on every point of :func:`near_tie_data` by 10 logits, plus N(0, 0.1) noise per row and forward:
    no query in a small ball breaks it, so every query is one search query and nothing more."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        label = (x[:, 0, 0, 0] * (CLASSES - 1)).round().long()
        z = torch.zeros(len(x), CLASSES)
        z[torch.arange(len(x)), label] = 10.0
        return z + 0.1 * torch.randn_like(z)


@pytest.mark.parametrize("rows", [ROWS, 0])
def test_the_batched_search_makes_a_few_forwards_per_query(rows: int) -> None:
    """N points, Q queries, K draws: the success tests take one forward per point (rows >= K; K when the
    model draws once per forward, rows <= 0), each of the Q + 1 queries ceil(K / (rows // N)) forwards (K when
    rows <= 0). Scoring every query on the records' draws takes N (N K) forwards per query instead."""
    x, y = near_tie_data(N, 0.5, 0.5)
    model = Counted(SureNoisy())
    queries = 20
    wrapped = GradSafe(model)
    with torch.no_grad():  # GradSafe's one probe of one-row batches (it draws: they stay padded), done here
        wrapped.rows_for(x[:1])
    model.calls = 0
    with seeded(3):
        adv, count = square_linf(
            wrapped,
            x,
            y,
            SquareSettings(EPS, queries, seed=1),
            VoteQueries(torch.arange(N), SEED, K, rows),
        )
    per_point, per_query = (1, 3) if rows else (K, K)  # 256 // 32 = 8 draws per forward: 8 + 8 + 5
    assert model.calls == 2 * N * per_point + (queries + 1) * per_query
    assert (
        count.made == 2 * N + (queries + 1) * N
    )  # what the records' draws would cost per_point forwards each
    assert model.calls * 5 < count.made * per_point
    assert torch.equal(adv, x)  # nothing broken: no query went to the records' draws


def test_near_the_tie_confirming_breaks_leaves_the_search_far_cheaper() -> None:
    """The planted model near a tie, where the batched search keeps calling points broken and the records'
    draws are asked: still far fewer forwards than one per point and query (each a forward of K rows)."""
    x, y, ids = _data()
    model = Counted(NoisyMargin())
    with seeded(3):
        _, count = square_linf(
            GradSafe(model), x, y, SquareSettings(EPS, 100, seed=1), VoteQueries(ids, SEED, K, ROWS)
        )
    assert model.calls * 3 < count.made
