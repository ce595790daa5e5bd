"""A randomised model's EOT draws in a few large forwards instead of many small ones, and the K-draw vote.

EOT (Athalye et al. 2018; AutoAttack's 'rand' version) calls a randomised model ``eot_iter`` times per attack
step and averages the loss gradients; a K-draw prediction calls it K times. On small batches most of that
time is per-call overhead, so here the draws of one step go through the model together: the batch repeated
``n`` times along dim 0, ``n`` as large as :func:`rows_budget` allows (the memory budget, in rows = draws x
points; on a CPU far smaller, for its caches), each such chunk forwarded (and, for gradients, differentiated)
once. This needs a model whose rows draw independently (input noise, per-image resizing, per-activation
pruning): a model that draws once per forward would give every copy the same draw. :func:`rows_independent` tells them apart, and ``rows <= 0``
keeps one draw per forward (the loop every EOT library runs).

Three forms, one per kind of caller:

* :func:`eot_loss_grad` / :func:`draw_logits` -- the builtin PGD engine (and checks' own votes);
* :func:`common_draw_logits` -- the K draws of a randomised model's predictions (and of Square's queries
  under the 'rand' protocol, scored by :func:`vote_margin`), on common random numbers:
  each example forwarded alone (its K draws together when its rows draw independently), torch's, NumPy's
  and Python's global RNGs seeded by (seed, example id, draw) only, so a point classified twice -- clean
  and after an attack that left it unchanged, in any batch -- gets the same draws and the same vote;
* :func:`with_batched_draws` -- torchattacks' own EOT loop (APGD, APGD-T, EOTPGD: ``eot_iter`` calls of
  ``get_logits`` at one point, each followed by its own backward, the gradients summed), served from batched
  forwards: each call returns its own draw's logits, and the whole step's gradient comes back with the last
  call's backward (earlier calls get zero), so the library's sum is the sum over draws;
* :class:`MeanOverDraws` -- foolbox's ``ExpectationOverTransformationWrapper`` (the mean of the draws'
  logits), batched.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from robustbench_wave.attacks.seeding import draw_seed, seeded

#: Largest number of rows (draws x points) one batched forward takes on an accelerator: the memory budget of
#: a draw batch (the gallery's small CNN keeps about 60 kB of activations per 32x32 row for its backward).
MAX_ROWS = 4096
#: The same on a CPU, where a chunk's activations should stay in the caches: on the gallery's CNNs (one core,
#: 20 draws) chunks of 128-512 rows took 0.44-0.87 of one draw per forward's time for 4 points and 0.72-1.02
#: for 27 (``benchmarks/bench_eot.py``); 4096-row chunks were slower than no batching for 32 points. At 512
#: rows a 32x32 CNN's first activation (16 channels) is 32 MB, past glibc's largest mmap threshold, so every
#: forward page-faults it in again (0.15 s of system time per 20-draw gradient of 27 points); 256 rows do not.
CPU_ROWS = 256


def rows_budget(device: torch.device) -> int:
    """Rows per batched forward of draws on ``device`` (:data:`CPU_ROWS` or :data:`MAX_ROWS`)."""
    return CPU_ROWS if device.type == "cpu" else MAX_ROWS


#: How a randomised model's prediction is decided over K draws (recorded in meta.json and the report).
DRAW_RULE = (
    "plurality vote of K draws (the class predicted most often; a tie goes to the higher mean softmax); "
    "loss = mean cross-entropy over the draws"
)

Forward = Callable[[torch.Tensor], torch.Tensor]
LossFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (logits, labels) -> per-row loss


def vote(logits: torch.Tensor | Sequence[torch.Tensor], y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(class, loss) per point from K draws' logits, ``(K, B, C)`` or a sequence of ``(B, C)`` (:data:`DRAW_RULE`).

    The majority vote is how the field turns a randomised classifier into one answer per input (Cohen et al.
    2019's randomized smoothing predicts the most frequent class of its noise draws): a point counts as
    correct only when the model answers it right more often than any wrong way, so one lucky draw neither
    saves nor breaks it. The mean cross-entropy is the loss EOT attacks maximise.
    """
    draws = _stacked(logits)
    loss = torch.stack([nn.functional.cross_entropy(z, y, reduction="none") for z in draws]).mean(0)
    return _vote_score(draws).argmax(1), loss


def _stacked(logits: torch.Tensor | Sequence[torch.Tensor]) -> torch.Tensor:
    """``(K, B, C)`` float logits from a tensor or a sequence of ``(B, C)`` draws."""
    return logits.float() if isinstance(logits, torch.Tensor) else torch.stack([z.float() for z in logits])


def _vote_score(draws: torch.Tensor) -> torch.Tensor:
    """``(B, C)``: twice each class's votes plus its mean softmax, so a one-vote lead outweighs any
    mean-softmax difference and the highest score is :func:`vote`'s class."""
    counts = nn.functional.one_hot(draws.argmax(2), draws.shape[2]).sum(0).float()
    return 2 * counts + draws.softmax(2).mean(0)


def vote_margin(logits: torch.Tensor | Sequence[torch.Tensor], y: torch.Tensor) -> torch.Tensor:
    """Per point, the vote's score of ``y`` less the best other class's: positive exactly where :func:`vote`
    picks ``y`` (an exact tie it breaks towards ``y`` counts as the smallest positive float).

    A score-based attack that stops at a margin <= 0 (Square) then stops exactly where the K-draw vote is
    wrong, not where one lucky draw was."""
    score = _vote_score(_stacked(logits))
    rows = torch.arange(len(score), device=score.device)
    own = score[rows, y]
    others = score.clone()
    others[rows, y] = -float("inf")
    margin = own - others.max(1)[0]
    return torch.where(score.argmax(1) == y, margin.clamp_min(torch.finfo(margin.dtype).tiny), margin)


def draws_per_forward(points: int, draws: int, rows: int) -> int:
    """Draws per forward: as many as ``rows`` holds (at least one, at most ``draws``); one when ``rows <= 0``."""
    if rows <= 0:
        return 1
    return max(1, min(draws, rows // max(points, 1)))


def _chunks(points: int, draws: int, rows: int) -> list[int]:
    """Draws per forward, in order, summing to ``draws``."""
    n = draws_per_forward(points, draws, rows)
    return [min(n, draws - start) for start in range(0, draws, n)]


def _repeat(x: torch.Tensor, n: int) -> torch.Tensor:
    """``n`` copies of the batch along dim 0: rows ``k * B + b`` hold point ``b`` for draw ``k``."""
    return x.repeat(n, *[1] * (x.dim() - 1))


def draw_logits(forward: Forward, x: torch.Tensor, draws: int, rows: int) -> torch.Tensor:
    """``(draws, B, C)``: the logits of ``draws`` forwards of ``x``, several per call when ``rows`` allows.

    Keeps autograd's graph when grad is enabled (every chunk's, until the caller's backward)."""
    out = [forward(_repeat(x, m)).view(m, len(x), -1) for m in _chunks(len(x), draws, rows)]
    return torch.cat(out)


def common_draw_logits(
    forward: Forward,
    x: torch.Tensor,
    ids: torch.Tensor,
    seed: int,
    draws: int,
    rows: int,
    device: torch.device,
) -> torch.Tensor:
    """``(draws, B, C)`` float logits, draw ``k`` of example ``i`` under the same random state whatever the
    input or the batch (common random numbers; :func:`~robustbench_wave.attacks.seeding.draw_seed`).

    Torch's global RNG is one stream per forward, so a row's draw depends on the rows before it; each example
    therefore goes through the model alone: its draws ``k .. k + m - 1`` in one forward of ``m`` copies seeded
    by (seed, id, k), ``m`` = :func:`draws_per_forward` of one point (all K when ``rows`` holds them; one when
    ``rows <= 0``, a model that draws once per forward). NumPy's and Python's global RNGs are seeded with it
    (:func:`~robustbench_wave.attacks.seeding.seeded`), for defences that draw from them; all three are
    restored afterwards."""
    m = draws_per_forward(1, draws, rows)
    out = []
    for xi, i in zip(x, ids.tolist(), strict=True):
        xb = xi[None].to(device)
        chunks = []
        for start in range(0, draws, m):
            with seeded(draw_seed(seed, i, start), device):
                chunks.append(forward(_repeat(xb, min(m, draws - start))).float())
        out.append(torch.cat(chunks))
    if not out:
        return torch.zeros(draws, 0, 0, device=device)
    return torch.stack(out, 1)


def eot_loss_grad(
    forward: Forward, x: torch.Tensor, y: torch.Tensor, draws: int, rows: int, loss_fn: LossFn
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(mean loss per point, mean input gradient, the draws' logits ``(draws, B, C)``) over ``draws`` draws.

    Each chunk is forwarded and differentiated at once, so only one chunk's graph is alive at a time."""
    loss_sum = torch.zeros(len(x), device=x.device)
    grad_sum = torch.zeros_like(x)
    logits = []
    for m in _chunks(len(x), draws, rows):
        xr = _repeat(x.detach(), m).requires_grad_(True)
        with torch.enable_grad():
            z = forward(xr)
            loss = loss_fn(z, y.repeat(m))
            (g,) = torch.autograd.grad(loss.sum(), xr)
        grad_sum += g.view(m, *x.shape).sum(0)
        loss_sum += loss.detach().view(m, len(x)).sum(0).to(loss_sum.dtype)
        logits.append(z.detach().view(m, len(x), -1))
    return loss_sum / draws, grad_sum / draws, torch.cat(logits)


@torch.no_grad()
def rows_independent(forward: Forward, x: torch.Tensor, rtol: float) -> bool:
    """Do two copies of ``x`` in one forward draw differently (so batched draws are independent draws)?"""
    z = forward(_repeat(x, 2)).float()
    a, b = z[: len(x)], z[len(x) :]
    return float((a - b).abs().max()) / float(a.abs().max().clamp_min(1.0)) > rtol


# ---------------------------------------------------------------------------------------- torchattacks


class _Tap(torch.autograd.Function):
    """Draw ``k``'s logits as a function of ``x``; its backward hands the gradient to the :class:`DrawServer`."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, server: DrawServer, k: int) -> torch.Tensor:
        ctx.server, ctx.k = server, k
        return server.logits(k).clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        return ctx.server.backward(ctx.k, grad), None, None


class DrawServer:
    """Serves a library's EOT loop -- ``draws`` calls at one point ``x``, each followed by the backward of a
    loss of that call's logits, the input gradients summed -- from batched forwards.

    Call ``k`` returns draw ``k``'s logits (the chunk holding it is forwarded when its first draw is asked
    for); the gradients that reach the draws of a chunk are sent through that chunk's graph at once when its
    last draw's backward arrives, and the step's total comes back from the last call's backward (earlier
    calls get zero). The library's sum is then the sum over draws, as in its own loop. A loop that stops
    early or changes its point mid-step is refused (it would lose gradients).
    """

    def __init__(self, forward: Forward, draws: int, rows: int) -> None:
        self.forward, self.draws, self.rows = forward, draws, rows
        self._x: torch.Tensor | None = None
        self._next = 0  # the next call's draw index
        self._done = 0  # draws whose backward arrived
        self._start, self._m = 0, 0  # the chunk alive: its first draw and size

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self._x is not x or self._next == self.draws:
            self._begin(x)
        k = self._next
        self._next += 1
        if k in self._chunk_at:
            self._forward_chunk(x, k, self._chunk_at[k])
        return _Tap.apply(x, self, k)

    def _begin(self, x: torch.Tensor) -> None:
        if self._x is not None and self._done < self._next:
            raise RuntimeError(
                "batched EOT draws: the attack asked for a new point before backpropagating every draw of the "
                "last one; run it with one draw per forward (rows = 0)"
            )
        self._x, self._next, self._done = x, 0, 0
        self._grad = torch.zeros_like(x)
        sizes = _chunks(len(x), self.draws, self.rows)
        self._chunk_at = dict(zip(itertools.accumulate([0, *sizes[:-1]]), sizes, strict=True))

    def _forward_chunk(self, x: torch.Tensor, start: int, m: int) -> None:
        """Forward draws ``start .. start + m - 1`` at once, keeping the graph for their backward."""
        self._start, self._m = start, m
        self._xr = _repeat(x.detach(), m).requires_grad_(True)
        with torch.enable_grad():
            self._z = self.forward(self._xr)
        self._chunk_logits = self._z.detach().view(m, len(x), -1)
        self._g: list[torch.Tensor | None] = [None] * m

    def logits(self, k: int) -> torch.Tensor:
        return self._chunk_logits[k - self._start]

    def backward(self, k: int, grad: torch.Tensor) -> torch.Tensor:
        if not self._start <= k < self._start + self._m:
            raise RuntimeError("batched EOT draws: a draw's backward arrived after its chunk was released")
        self._g[k - self._start] = grad
        self._done += 1
        if all(g is not None for g in self._g):
            (gx,) = torch.autograd.grad(self._z, self._xr, torch.cat(self._g))  # type: ignore[arg-type]
            self._grad += gx.view(self._m, *self._grad.shape).sum(0)
            del self._z, self._xr
        if self._done == self.draws:
            return self._grad
        return torch.zeros_like(self._grad)


@functools.cache
def with_batched_draws(cls: type) -> type:
    """A torchattacks attack class whose EOT loop (``eot_iter`` > 1) is served by a :class:`DrawServer`
    of ``draw_rows`` rows per forward (an instance attribute, 0 = the library's own loop)."""

    class BatchedDraws(cls):  # type: ignore[misc, valid-type]
        draw_rows = 0

        def get_logits(self, inputs: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
            eot = getattr(self, "eot_iter", 1)
            if eot <= 1 or self.draw_rows <= 0 or not (torch.is_grad_enabled() and inputs.requires_grad):
                return super().get_logits(inputs, *args, **kwargs)
            server = self.__dict__.get("_draw_server")
            if server is None:
                server = DrawServer(lambda z: super(BatchedDraws, self).get_logits(z), eot, self.draw_rows)
                self.__dict__["_draw_server"] = server
            return server(inputs)

    BatchedDraws.__name__ = f"{cls.__name__}BatchedDraws"
    return BatchedDraws


# ----------------------------------------------------------------------------------------------- foolbox


class MeanOverDraws(nn.Module):
    """The mean logits of ``draws`` forwards (foolbox's ``ExpectationOverTransformationWrapper``), batched.

    The loss is taken of the mean, so every chunk's graph stays alive until the backward."""

    def __init__(self, model: nn.Module, draws: int, rows: int) -> None:
        super().__init__()
        self.model, self.draws, self.rows = model, draws, rows
        self.training = False  # a view for the attack, like GradSafe (no recursion into the model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return draw_logits(self.model, x, self.draws, self.rows).mean(0)
