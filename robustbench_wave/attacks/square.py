"""Square Attack, L∞ (Andriushchenko et al. 2020): torchattacks' algorithm and random stream, fewer forwards.

Square's cost is its queries: one forward of every point still standing per iteration, 1,000 iterations at
every budget on the points nothing else broke. Late in the schedule the square shrinks to one or a few
pixels, and a proposal whose window already carries the drawn sign leaves the point exactly where it is
(``x_new == x_best``, bit for bit); torchattacks queries the model on it anyway. :func:`square_linf` is
torchattacks 3.5's ``Square`` (``perturb`` + ``attack_single_run``, L∞) line for line -- the same draws from
torch's global RNG in the same order, the same float expressions -- except that such unchanged points are
not sent to the model: their margin and loss are the ones already stored for that very point, so every
decision and every returned point is the same.

That equality needs a forward whose output row depends only on its input row, repeats exactly and draws
nothing from torch's RNG: true of the zoo models in eval mode (measured: no last-bit difference between a
point alone, in any subset or in the full block; :class:`~robustbench_wave.attacks.model_state.GradSafe`
pads 1-3 row batches as far as their bits need). Each call checks it on its own block before skipping anything
(:func:`answers_repeat`), and skips only in batches of :data:`MIN_SKIP_ROWS` rows or more, where CPU kernels
no longer change with the row count; a model whose rows depend on the batch, or a randomised model scored by
single draws, is queried on every point, exactly as torchattacks does.

A randomised model under the 'rand' protocol (the entry's ``vote_draws`` = K > 1, set by
:meth:`~robustbench_wave.evaluation.eot.EotPlan.apply`; :class:`VoteQueries`) is queried as the records judge
it, at the cost of one batched forward per query. The search scores a query by K draws of every point
standing in forwards of K x (points) rows (the block repeated K times, chunked by the run's rows budget; one
forward per draw of the whole block for a model that draws once per forward): its loss is the mean over the
K draws (of the margin, or of the cross-entropy), its margin the K-draw vote's
(:func:`~robustbench_wave.attacks.draws.vote_margin`). Every query of a block runs under one seed, (the run's
seed, 'square-query', the block's first id): common random numbers across queries, so a proposal is compared
with its incumbent under the same noise. (A fresh seed per query lets one lucky estimate set the incumbent's
loss, and the search stalls behind it: on ``tests/support/vote_models.py``'s planted model, 100 queries, 24
runs, it missed 20 of 96 points the vote loses at the worst point of the ball; one seed per block missed 2,
as many as scoring every query on the records' draws, at a fifth of the forwards.)

Those draws are not the records' draws, so a point may only be declared broken by the records' own vote:
wherever the batched margin says broken, the point's margin and loss are recomputed on the very draws the
records' vote uses (common random numbers per example:
:func:`~robustbench_wave.attacks.draws.common_draw_logits`, seeded by the run's seed, the example's id and
the draw: K rows, one forward per point), and the success test is always that vote. Square then never
stops on a lucky draw that the records' vote reverses: a point it reports broken is broken in the records.
A batched answer depends on its batch (a row's draws follow from the rows before it), so no stored answer
stands in for a new one: every point standing is queried, as torchattacks does. L2 runs torchattacks' own
loop with the same scoring (:func:`vote_square`), which makes the same queries.
``tests/attacks/test_square_runner.py`` checks the returned points against ``torchattacks.Square`` itself,
``tests/attacks/test_square_votes.py`` the K-draw scoring.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from robustbench_wave.attacks.draws import common_draw_logits, draw_logits, vote, vote_margin
from robustbench_wave.attacks.seeding import derive_seed, seeded

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SquareSettings:
    """torchattacks' ``Square`` arguments that the L∞ attack reads (untargeted, rescaled schedule)."""

    eps: float
    n_queries: int = 5000
    n_restarts: int = 1
    p_init: float = 0.8
    loss: str = "margin"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.loss not in ("margin", "ce"):
            raise ValueError(f"Square loss must be 'margin' or 'ce', got {self.loss!r}")
        if self.n_queries < 1 or self.n_restarts < 0:
            raise ValueError("Square needs n_queries >= 1 and n_restarts >= 0")


@dataclass
class QueryCount:
    """Forwards of single points an attack made (``made``) and those it proved unnecessary (``skipped``)."""

    made: int = 0
    skipped: int = 0


def p_selection(p_init: float, it: int, n_queries: int) -> float:
    """The fraction of pixels the square covers at iteration ``it`` (torchattacks' rescaled schedule)."""
    it = int(it / n_queries * 10000)
    for bound, div in ((10, 1), (50, 2), (200, 4), (500, 8), (1000, 16), (2000, 32), (4000, 64), (6000, 128)):
        if it <= bound:
            return p_init / div
    return p_init / (256 if it <= 8000 else 512)


def random_choice(shape: list[int], device: torch.device) -> torch.Tensor:
    """±1 per element from torch's global RNG (torchattacks' ``random_choice``)."""
    return torch.sign(2 * torch.rand(shape).to(device) - 1)


def random_int(low: int, high: int, device: torch.device) -> int:
    """An integer in [low, high) from one global-RNG draw (torchattacks' ``random_int``)."""
    return int((low + (high - low) * torch.rand([1]).to(device)).long())


def margin_and_loss(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, loss: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """(margin z_y - max_{j≠y} z_j, the loss Square minimises) per point, as torchattacks computes them."""
    logits = model(x)
    xent = F.cross_entropy(logits, y, reduction="none")
    u = torch.arange(x.shape[0])
    y_corr = logits[u, y].clone()
    logits[u, y] = -float("inf")
    margin = y_corr - logits.max(dim=-1)[0]
    return margin, (margin if loss == "margin" else -1.0 * xent)


def vote_margin_and_loss(
    logits: torch.Tensor, y: torch.Tensor, loss: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """From K draws' logits ``(K, B, C)``: (the vote's margin, positive exactly where the K-draw vote is ``y``;
    the loss Square minimises: the mean over the draws of torchattacks' margin, or of minus the cross-entropy)."""
    draws = logits.float()
    u = torch.arange(draws.shape[1], device=draws.device)
    y_corr = draws[:, u, y]
    others = draws.clone()
    others[:, u, y] = -float("inf")
    margin = (y_corr - others.max(dim=-1)[0]).mean(0)
    return vote_margin(draws, y), (margin if loss == "margin" else -1.0 * vote(draws, y)[1])


@dataclass(frozen=True)
class VoteQueries:
    """Score Square's queries by K draws: ``draws`` (K) draws per query, batched over the block's points for
    the search and on the records' common random numbers (``seed``, the run's, and each example's id) for
    every break; ``rows`` rows per forward (the run's ``eot_rows``)."""

    ids: torch.Tensor  # (B,) example ids of the block, in its order
    seed: int
    draws: int
    rows: int = 0

    def __post_init__(self) -> None:
        if self.draws < 1:
            raise ValueError(f"Square's K-draw scoring needs draws >= 1, got {self.draws}")


@dataclass(frozen=True)
class Scorer:
    """What Square asks of the model about points of its block, named by their positions ``pos`` in it:
    (margin, loss) and whether the model is still right. Single draws (``votes`` None): one forward,
    torchattacks' expressions; else the K-draw vote of :class:`VoteQueries` (module docstring): the search's
    queries on batched draws, every break and the success test on the records' draws."""

    model: nn.Module
    y: torch.Tensor  # (B,) labels of the block
    loss: str
    votes: VoteQueries | None = None

    def _draws(self, x: torch.Tensor, pos: torch.Tensor, v: VoteQueries) -> torch.Tensor:
        """``(K, B, C)``: the K draws of the points at ``pos``, those the records' vote of their ids uses."""
        ids = v.ids.to("cpu")[pos.to("cpu")]
        return common_draw_logits(self.model, x, ids, v.seed, v.draws, v.rows, x.device)

    def _search_draws(self, x: torch.Tensor, v: VoteQueries) -> torch.Tensor:
        """``(K, B, C)``: K draws of every point of one query in batched forwards, under the block's search
        seed: every query the same, so a proposal and its incumbent meet the same noise (module docstring)."""
        block = int(v.ids[0]) if len(v.ids) else 0
        with seeded(derive_seed(v.seed, "square-query", block), x.device):
            return draw_logits(self.model, x, v.draws, v.rows).float()

    @torch.no_grad()
    def margin_and_loss(self, x: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.votes is None:
            return margin_and_loss(self.model, x, self.y[pos], self.loss)
        y = self.y[pos]
        margin, loss = vote_margin_and_loss(self._search_draws(x, self.votes), y, self.loss)
        broken = (margin <= 0.0).nonzero().flatten()
        if len(broken):  # only the records' own vote may break a point
            confirmed = self._draws(x[broken], pos[broken], self.votes)
            margin[broken], loss[broken] = vote_margin_and_loss(confirmed, y[broken], self.loss)
        return margin, loss

    @torch.no_grad()
    def correct(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        if self.votes is None:
            return self.model(x).max(1)[1] == self.y[pos]
        return vote(self._draws(x, pos, self.votes), self.y[pos])[0] == self.y[pos]


def _rng_state(device: torch.device) -> list[torch.Tensor]:
    """torch's global RNG state: the CPU generator's, and the device's when it is a GPU."""
    states = [torch.get_rng_state()]
    if device.type == "cuda":
        states.append(torch.cuda.get_rng_state(device))
    return states


#: Fewest rows a forward must have for a stored answer to stand in for a new one: batches of very few rows take
#: other CPU kernels (measured: a small CNN's rows change in the last bits up to 4 rows, a 2-layer MLP's up to
#: 10, the zoo ViTs' never), so below this every point is queried, as torchattacks does.
MIN_SKIP_ROWS = 16


def answers_repeat(model: nn.Module, x: torch.Tensor, logits: torch.Tensor, rng: list[torch.Tensor]) -> bool:
    """Whether a stored answer is what a new forward of the same point would give, for batches of
    :data:`MIN_SKIP_ROWS` rows or more: the forward that made ``logits`` drew nothing from torch's RNG
    (``rng``: the state before it), and the first ``MIN_SKIP_ROWS`` points alone get the same bits as in the
    whole batch (deterministic, rows independent of their batch at both sizes; the RNG is forked for it)."""
    if len(x) < MIN_SKIP_ROWS:
        return False  # no forward of this call will be big enough to skip anything
    if not all(torch.equal(a, b) for a, b in zip(rng, _rng_state(x.device), strict=True)):
        return False
    with torch.random.fork_rng(devices=[x.device] if x.device.type == "cuda" else []):
        return torch.equal(model(x[:MIN_SKIP_ROWS]), logits[:MIN_SKIP_ROWS])


@dataclass
class _Best:
    """The running best point of every example and the margin and loss the model gave it."""

    x: torch.Tensor
    margin: torch.Tensor
    loss: torch.Tensor


def _proposal(
    x: torch.Tensor, x_best: torch.Tensor, eps: float, s: int, device: torch.device
) -> torch.Tensor:
    """One square of side ``s`` at a random place with a random sign per channel, added to every point."""
    c, h, w = x.shape[1:]
    vh = random_int(0, h - s, device)
    vw = random_int(0, w - s, device)
    new_deltas = torch.zeros([c, h, w]).to(device)
    new_deltas[:, vh : vh + s, vw : vw + s] = 2.0 * eps * random_choice([c, 1, 1], device)
    x_new = torch.min(torch.max(x_best + new_deltas, x - eps), x + eps)
    return torch.clamp(x_new, 0.0, 1.0)


def _query(
    scorer: Scorer, x_new: torch.Tensor, pos: torch.Tensor, best: _Best | None, count: QueryCount
) -> tuple[torch.Tensor, torch.Tensor]:
    """(margin, loss) of every proposal (``pos``: the points' positions in the block). With ``best`` (the
    model's answers repeat) and at least :data:`MIN_SKIP_ROWS` points changed, only those are queried
    and an unchanged point gets its stored values; otherwise every point is queried in one batch, as
    torchattacks does. (The stored values then come from batches of at least that many rows too: the number
    of points still standing never grows.)"""
    rows = None if best is None else (x_new != best.x).flatten(1).any(1).nonzero().flatten()
    if rows is None or len(rows) == len(pos) or len(rows) < MIN_SKIP_ROWS:
        count.made += len(pos)
        return scorer.margin_and_loss(x_new, pos)
    margin, loss_out = best.margin.clone(), best.loss.clone()
    count.made += len(rows)
    count.skipped += len(pos) - len(rows)
    if len(rows):
        margin[rows], loss_out[rows] = scorer.margin_and_loss(x_new[rows], pos[rows])
    return margin, loss_out


def _single_run(
    scorer: Scorer,
    x: torch.Tensor,
    pos: torch.Tensor,
    settings: SquareSettings,
    count: QueryCount,
    skip: bool,
) -> torch.Tensor:
    """One restart of the random search on ``x`` (the block's points at positions ``pos``; torchattacks'
    ``attack_single_run``, L∞); the best points."""
    eps, device = settings.eps, x.device
    c, h, w = x.shape[1:]
    n_features = c * h * w
    x_best = torch.clamp(x + eps * random_choice([x.shape[0], c, 1, w], device), 0.0, 1.0)
    margin_min, loss_min = scorer.margin_and_loss(x_best, pos)
    count.made += len(pos)
    for i_iter in range(settings.n_queries):
        idx = (margin_min > 0.0).nonzero().flatten()
        if len(idx) == 0:
            break
        x_curr, x_best_curr, pos_curr = x[idx], x_best[idx], pos[idx]
        margin_min_curr, loss_min_curr = margin_min[idx], loss_min[idx]
        p = p_selection(settings.p_init, i_iter, settings.n_queries)
        s = max(round(math.sqrt(p * n_features / c)), 1)
        x_new = _proposal(x_curr, x_best_curr, eps, s, device)
        best = _Best(x_best_curr, margin_min_curr, loss_min_curr) if skip else None
        margin, loss = _query(scorer, x_new, pos_curr, best, count)
        # torchattacks' update, expression for expression (0/1 floats, not torch.where)
        improved = (loss < loss_min_curr).float()
        loss_min[idx] = improved * loss + (1.0 - improved) * loss_min_curr
        improved = torch.max(improved, (margin <= 0.0).float())
        margin_min[idx] = improved * margin + (1.0 - improved) * margin_min_curr
        improved = improved.reshape([-1, *[1] * (x.dim() - 1)])
        x_best[idx] = improved * x_new + (1.0 - improved) * x_best_curr
        if int((margin_min <= 0.0).sum()) == x.shape[0]:
            break
    return x_best


@torch.no_grad()
def square_linf(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    settings: SquareSettings,
    votes: VoteQueries | None = None,
) -> tuple[torch.Tensor, QueryCount]:
    """Untargeted L∞ Square on (x, y): the points torchattacks' ``Square(norm='Linf')`` returns, and the
    forwards made and skipped (queries of single points). Seeds torch's global RNG with ``settings.seed``, as
    torchattacks does. ``votes``: every query scored by the K-draw vote (module docstring)."""
    if x.dim() != 4:
        raise ValueError(f"Square expects images (N, C, H, W), got shape {tuple(x.shape)}")
    count = QueryCount()
    x, y = x.clone().detach(), y.clone().detach().long()
    adv = x.clone()
    scorer = Scorer(model, y, settings.loss, votes)
    if votes is None:
        rng = _rng_state(x.device)
        logits = model(x)
        skip = answers_repeat(model, x, logits, rng)
        acc = logits.max(1)[1] == y
    elif not len(y):
        return adv, count
    else:  # a batched K-draw answer depends on its batch: every point standing is queried
        skip, acc = False, scorer.correct(x, torch.arange(len(y), device=x.device))
    count.made += len(y)
    torch.random.manual_seed(settings.seed)
    torch.cuda.random.manual_seed(settings.seed)
    for _ in range(settings.n_restarts):
        ind_to_fool = acc.nonzero().flatten()
        if ind_to_fool.numel() == 0:
            continue
        adv_curr = _single_run(scorer, x[ind_to_fool].clone(), ind_to_fool, settings, count, skip)
        fooled = (~scorer.correct(adv_curr, ind_to_fool)).nonzero().flatten()
        count.made += len(ind_to_fool)
        acc[ind_to_fool[fooled]] = False
        adv[ind_to_fool[fooled]] = adv_curr[fooled].clone()
    log.debug("square: %d single-point forwards, %d skipped (unchanged points)", count.made, count.skipped)
    return adv, count


@functools.cache
def _voting_square_class() -> type:
    """torchattacks' ``Square`` whose labels are the points' positions in their block, every query and success
    test answered by a :class:`Scorer` (the K-draw vote): the library's own loop, L2 included."""
    import torchattacks

    class VotingSquare(torchattacks.Square):
        scorer: Scorer

        def margin_and_loss(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return self.scorer.margin_and_loss(x, y)

        def perturb(self, x: torch.Tensor, y: torch.Tensor | None = None) -> torch.Tensor:
            """torchattacks' untargeted ``perturb``, with the scorer's success test instead of one forward."""
            self.init_hyperparam(x)
            adv = x.clone()
            acc = self.scorer.correct(x, torch.arange(len(x), device=x.device))
            torch.random.manual_seed(self.seed)
            torch.cuda.random.manual_seed(self.seed)
            for _ in range(self.n_restarts):
                ind_to_fool = acc.nonzero().flatten()
                if ind_to_fool.numel() == 0:
                    continue
                _, adv_curr = self.attack_single_run(x[ind_to_fool].clone(), ind_to_fool)
                fooled = (~self.scorer.correct(adv_curr, ind_to_fool)).nonzero().flatten()
                acc[ind_to_fool[fooled]] = False
                adv[ind_to_fool[fooled]] = adv_curr[fooled].clone()
            return adv

    return VotingSquare


def vote_square(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    norm: str,
    settings: Mapping[str, Any],
    votes: VoteQueries,
) -> torch.Tensor:
    """torchattacks' untargeted ``Square(norm=norm, **settings)`` on (x, y) with every query scored by the
    K-draw vote of ``votes`` (the L2 attack; L∞ has :func:`square_linf`, which makes the same queries)."""
    if not len(x):
        return x.clone()
    atk = _voting_square_class()(model, norm=norm, **settings)
    atk.scorer = Scorer(model, y.clone().detach().long(), str(settings.get("loss", "margin")), votes)
    return atk(x, torch.arange(len(x), device=x.device)).detach()
