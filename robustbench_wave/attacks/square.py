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
pads 1-3 row batches). Each call checks it on its own block before skipping anything
(:func:`answers_repeat`), and skips only in batches of :data:`MIN_SKIP_ROWS` rows or more, where CPU kernels
no longer change with the row count; a randomised model (the 'rand' protocol still runs Square on it) or one
whose rows depend on the batch is queried on every point, exactly as torchattacks does.
``tests/attacks/test_square_runner.py`` checks the returned points against ``torchattacks.Square`` itself.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

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
    model: nn.Module, x_new: torch.Tensor, y: torch.Tensor, best: _Best | None, loss: str, count: QueryCount
) -> tuple[torch.Tensor, torch.Tensor]:
    """(margin, loss) of every proposal. With ``best`` (the model's answers repeat) and at least
    :data:`MIN_SKIP_ROWS` points changed, only those are queried and an unchanged point gets its stored values;
    otherwise every point is queried in one batch, as torchattacks does. (The stored values then come from
    batches of at least that many rows too: the number of points still standing never grows.)"""
    rows = None if best is None else (x_new != best.x).flatten(1).any(1).nonzero().flatten()
    if rows is None or len(rows) == len(y) or len(rows) < MIN_SKIP_ROWS:
        count.made += len(y)
        return margin_and_loss(model, x_new, y, loss)
    margin, loss_out = best.margin.clone(), best.loss.clone()
    count.made += len(rows)
    count.skipped += len(y) - len(rows)
    margin[rows], loss_out[rows] = margin_and_loss(model, x_new[rows], y[rows], loss)
    return margin, loss_out


def _single_run(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    settings: SquareSettings,
    count: QueryCount,
    skip: bool,
) -> torch.Tensor:
    """One restart of the random search on ``x`` (torchattacks' ``attack_single_run``, L∞); the best points."""
    eps, device = settings.eps, x.device
    c, h, w = x.shape[1:]
    n_features = c * h * w
    x_best = torch.clamp(x + eps * random_choice([x.shape[0], c, 1, w], device), 0.0, 1.0)
    margin_min, loss_min = margin_and_loss(model, x_best, y, settings.loss)
    count.made += len(y)
    for i_iter in range(settings.n_queries):
        idx = (margin_min > 0.0).nonzero().flatten()
        if len(idx) == 0:
            break
        x_curr, x_best_curr, y_curr = x[idx], x_best[idx], y[idx]
        margin_min_curr, loss_min_curr = margin_min[idx], loss_min[idx]
        p = p_selection(settings.p_init, i_iter, settings.n_queries)
        s = max(round(math.sqrt(p * n_features / c)), 1)
        x_new = _proposal(x_curr, x_best_curr, eps, s, device)
        best = _Best(x_best_curr, margin_min_curr, loss_min_curr) if skip else None
        margin, loss = _query(model, x_new, y_curr, best, settings.loss, count)
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
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, settings: SquareSettings
) -> tuple[torch.Tensor, QueryCount]:
    """Untargeted L∞ Square on (x, y): the points torchattacks' ``Square(norm='Linf')`` returns, and the
    forwards made and skipped. Seeds torch's global RNG with ``settings.seed``, as torchattacks does."""
    if x.dim() != 4:
        raise ValueError(f"Square expects images (N, C, H, W), got shape {tuple(x.shape)}")
    count = QueryCount()
    x, y = x.clone().detach(), y.clone().detach().long()
    adv = x.clone()
    rng = _rng_state(x.device)
    logits = model(x)
    skip = answers_repeat(model, x, logits, rng)
    acc = logits.max(1)[1] == y
    count.made += len(y)
    torch.random.manual_seed(settings.seed)
    torch.cuda.random.manual_seed(settings.seed)
    for _ in range(settings.n_restarts):
        ind_to_fool = acc.nonzero().flatten()
        if ind_to_fool.numel() == 0:
            continue
        adv_curr = _single_run(model, x[ind_to_fool].clone(), y[ind_to_fool].clone(), settings, count, skip)
        fooled = (model(adv_curr).max(1)[1] != y[ind_to_fool]).nonzero().flatten()
        count.made += len(ind_to_fool)
        acc[ind_to_fool[fooled]] = False
        adv[ind_to_fool[fooled]] = adv_curr[fooled].clone()
    log.debug("square: %d single-point forwards, %d skipped (unchanged points)", count.made, count.skipped)
    return adv, count
