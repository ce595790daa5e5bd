"""Running one attack at one budget on a set of points: batching, seeding and clean predictions.

The one caller of the registered runners: each batch or id block becomes one
:class:`~robustbench_wave.attacks.AttackRequest` (``AttackEntry.request``). Results must not depend on
``batch_size``: runners that seed each example themselves (``per_example_rng``) get plain batches; library
attacks, which draw from the global RNG, run on fixed blocks of example ids (the suite's ``rng_block``), each
under its own seed (:func:`derive_seed`). Predictions are always recomputed here from the returned points,
never taken from the attack; a randomised model's over K draws (:data:`DRAW_RULE`, :class:`Predictor`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from robustbench_wave.attacks import AttackEntry, RunContext, RunnerSpec, derive_seed, seeded

Progress = Callable[[int, int], None]  # (group index, number of groups)

#: How a randomised model's prediction is decided over K draws (recorded in meta.json and the report).
DRAW_RULE = (
    "plurality vote of K draws (the class predicted most often; a tie goes to the higher mean softmax); "
    "loss = mean cross-entropy over the draws"
)


def vote(logits: Sequence[torch.Tensor], y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(class, loss) per point from K draws' logits (:data:`DRAW_RULE`).

    The majority vote is how the field turns a randomised classifier into one answer per input (Cohen et al.
    2019's randomized smoothing predicts the most frequent class of its noise draws): a point counts as
    correct only when the model answers it right more often than any wrong way, so one lucky draw neither
    saves nor breaks it. The mean cross-entropy is the loss EOT attacks maximise.
    """
    draws = torch.stack([z.float() for z in logits])  # (K, B, C)
    counts = nn.functional.one_hot(draws.argmax(2), draws.shape[2]).sum(0).float()
    score = 2 * counts + draws.softmax(2).mean(0)  # a one-vote lead outweighs any mean-softmax difference
    loss = torch.stack([nn.functional.cross_entropy(z, y, reduction="none") for z in draws]).mean(0)
    return score.argmax(1), loss


@torch.inference_mode()  # no autograd bookkeeping at all: same kernels and values as no_grad, less overhead
def predict(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int, device: torch.device, draws: int = 1
) -> tuple[torch.Tensor, torch.Tensor]:
    """(predicted class, cross-entropy) per point, on CPU; over ``draws`` forwards by :func:`vote` if > 1."""
    preds, losses = [], []
    for i in range(0, len(x), batch_size):
        xb = x[i : i + batch_size].to(device)
        yb = y[i : i + batch_size].to(device)
        if draws > 1:
            pred, loss = vote([model(xb) for _ in range(draws)], yb)
        else:
            logits = model(xb).float()
            pred, loss = logits.argmax(1), nn.functional.cross_entropy(logits, yb, reduction="none")
        preds.append(pred.cpu())
        losses.append(loss.cpu())
    if not preds:
        return torch.zeros(0, dtype=torch.long), torch.zeros(0)
    return torch.cat(preds), torch.cat(losses)


@dataclass(frozen=True)
class Predictor:
    """How an evaluation predicts: batch size, device, and for a randomised model K draws under a seed.

    With ``seed`` None the model is called as it is (a deterministic model draws nothing); otherwise each
    call's draws come from ``derive_seed(seed, "predict", *stream)`` and torch's RNG is restored afterwards,
    so a randomised model's records repeat. (Its noise is drawn per batch, so they depend on the batch size.)
    """

    batch_size: int
    device: torch.device
    draws: int = 1
    seed: int | None = None

    def __call__(
        self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, *stream: object
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.seed is None:
            return predict(model, x, y, self.batch_size, self.device, self.draws)
        with seeded(derive_seed(self.seed, "predict", *stream), self.device):
            return predict(model, x, y, self.batch_size, self.device, self.draws)


def attack_groups(
    spec: RunnerSpec, ids: torch.Tensor, batch_size: int, rng_block: int
) -> list[tuple[torch.Tensor, int | None]]:
    """Index groups to attack together: batches for per-example-seeded runners, id blocks for the others."""
    if spec.per_example_rng:
        pos = torch.arange(len(ids))
        return [(pos[i : i + batch_size], None) for i in range(0, len(ids), batch_size)]
    blocks = torch.div(ids, rng_block, rounding_mode="floor")
    return [((blocks == b).nonzero().flatten(), int(b)) for b in torch.unique(blocks).tolist()]


def run_attack(
    spec: RunnerSpec,
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    ids: torch.Tensor,
    eps: float,
    entry: AttackEntry,
    ctx: RunContext,
    *,
    batch_size: int,
    rng_block: int,
    device: torch.device,
    progress: Progress | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run one attack at one eps on the given points; returns (x_adv on CPU, correct_last or None)."""
    if len(x) == 0 or eps == 0:  # nothing to attack / nothing an attack may change
        return x.clone(), None
    out = torch.empty_like(x)
    last: torch.Tensor | None = None
    groups = attack_groups(spec, ids, batch_size, rng_block)
    for i, (pos, block) in enumerate(groups):
        if progress is not None:
            progress(i, len(groups))
        ctx.block_seed = derive_seed(ctx.seed, entry.name, repr(eps), "block", block) % (1 << 31)
        with seeded(ctx.block_seed, device):
            res = spec.fn(entry.request(model, x[pos].to(device), y[pos].to(device), ids[pos], eps, ctx))
        out[pos] = res.x_adv.detach().to(out.device, out.dtype)
        if res.correct_last is not None:
            if last is None:
                last = torch.ones(len(x), dtype=torch.bool)
            last[pos] = res.correct_last.cpu()
    return out, last
