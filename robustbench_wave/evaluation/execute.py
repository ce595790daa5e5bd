"""Running one attack at one budget on a set of points: batching, seeding and clean predictions.

The one caller of the registered runners: each batch or id block becomes one
:class:`~robustbench_wave.attacks.AttackRequest` (``AttackEntry.request``). Results must not depend on
``batch_size``: runners that seed each example themselves (``per_example_rng``) get plain batches; library
attacks, which draw from the global RNG, run on fixed blocks of example ids (the suite's ``rng_block``), each
under its own seed (:func:`derive_seed`). Predictions are always recomputed here from the returned points,
never taken from the attack; a randomised model's over K draws (:data:`DRAW_RULE`, :class:`Predictor`) on
common random numbers: draw k of example i is seeded by (seed, i, k) only
(:func:`~robustbench_wave.attacks.draws.common_draw_logits`), so a point no attack moved keeps its clean vote
and the records do not depend on ``batch_size``. A randomised model draws from the global RNG whatever the
runner, so for it every runner runs on the id blocks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from robustbench_wave.attacks import AttackEntry, RunContext, RunnerSpec, derive_seed, seeded
from robustbench_wave.attacks.draws import (  # noqa: F401  (DRAW_RULE: re-exported)
    DRAW_RULE,
    common_draw_logits,
    draw_logits,
    vote,
)

Progress = Callable[[int, int], None]  # (group index, number of groups)


# no_grad, not inference_mode (same kernels and values): a defence that takes gradient steps in its forward
# (purification, TV denoising) turns grad back on inside, which inference mode would not let it do
@torch.no_grad()
def predict(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    batch_size: int,
    device: torch.device,
    draws: int = 1,
    rows: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(predicted class, cross-entropy) per point, on CPU; over ``draws`` forwards by :func:`vote` if > 1,
    ``rows`` (draws x points) per forward (:func:`~robustbench_wave.attacks.draws.draw_logits`; 0: one draw each)."""
    preds, losses = [], []
    for i in range(0, len(x), batch_size):
        xb = x[i : i + batch_size].to(device)
        yb = y[i : i + batch_size].to(device)
        if draws > 1:
            pred, loss = vote(draw_logits(model, xb, draws, rows), yb)
        else:
            logits = model(xb).float()
            pred, loss = logits.argmax(1), nn.functional.cross_entropy(logits, yb, reduction="none")
        preds.append(pred.cpu())
        losses.append(loss.cpu())
    if not preds:
        return torch.zeros(0, dtype=torch.long), torch.zeros(0)
    return torch.cat(preds), torch.cat(losses)


@torch.no_grad()  # not inference_mode: see predict
def predict_common(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    ids: torch.Tensor,
    seed: int,
    batch_size: int,
    device: torch.device,
    draws: int = 1,
    rows: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(class, cross-entropy) per point, on CPU, by :func:`vote` over ``draws`` draws on common random numbers
    (:func:`~robustbench_wave.attacks.draws.common_draw_logits`): each point's answer depends on its input,
    its id and ``seed`` only, never on the other points or ``batch_size`` (which only bounds the logits kept)."""
    preds, losses = [torch.zeros(0, dtype=torch.long)], [torch.zeros(0)]
    for i in range(0, len(x), batch_size):
        logits = common_draw_logits(
            model, x[i : i + batch_size], ids[i : i + batch_size], seed, draws, rows, device
        )
        pred, loss = vote(logits, y[i : i + batch_size].to(device))
        preds.append(pred.cpu())
        losses.append(loss.cpu())
    return torch.cat(preds), torch.cat(losses)


@dataclass(frozen=True)
class Predictor:
    """How an evaluation predicts: batch size, device, and for a randomised model K draws under a seed.

    With ``seed`` None the model is called as it is (a deterministic model draws nothing). With ``common``
    (a randomised model) every prediction is :func:`predict_common`'s: draw k of example i seeded by
    (seed, i, k) only, so the clean vote, every attack's output and a re-audit share their draws, and a point
    an attack left unchanged keeps its clean vote. Otherwise (``--eot on`` for a deterministic model) the
    draws come from ``derive_seed(seed, "predict", *stream)``. Each seeding reaches torch's, NumPy's and
    Python's global RNGs (:func:`~robustbench_wave.attacks.seeding.seeded`); all are restored afterwards.
    """

    batch_size: int
    device: torch.device
    draws: int = 1
    seed: int | None = None
    rows: int = 0  # rows (draws x points) per forward of K draws (attacks.draws); 0 = one draw per forward
    common: bool = False  # a randomised model: common random numbers per example (needs the ids)

    def __call__(
        self,
        model: nn.Module,
        x: torch.Tensor,
        y: torch.Tensor,
        *stream: object,
        ids: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.seed is None:
            return predict(model, x, y, self.batch_size, self.device, self.draws, self.rows)
        if self.common:
            if ids is None:
                raise ValueError("a randomised model's predictions draw per example: pass the example ids")
            return predict_common(
                model, x, y, ids, self.seed, self.batch_size, self.device, self.draws, self.rows
            )
        with seeded(derive_seed(self.seed, "predict", *stream), self.device):
            return predict(model, x, y, self.batch_size, self.device, self.draws, self.rows)


def attack_groups(
    spec: RunnerSpec | None, ids: torch.Tensor, batch_size: int, rng_block: int
) -> list[tuple[torch.Tensor, int | None]]:
    """Index groups to attack together: batches for per-example-seeded runners, id blocks for the others
    and for every runner when ``spec`` is None (a randomised model: its draws come from the global RNG)."""
    if spec is not None and spec.per_example_rng:
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
    by_block: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Run one attack at one eps on the given points; returns (x_adv on CPU, correct_last or None).
    ``by_block``: every runner on seeding blocks of ids (a randomised model, whose draws come from the global
    RNG), so its points do not depend on ``batch_size``."""
    if len(x) == 0 or eps == 0:  # nothing to attack / nothing an attack may change
        return x.clone(), None
    out = torch.empty_like(x)
    last: torch.Tensor | None = None
    groups = attack_groups(None if by_block else spec, ids, batch_size, rng_block)
    for i, (pos, block) in enumerate(groups):
        if progress is not None:
            progress(i, len(groups))
        block_seed = derive_seed(ctx.seed, entry.name, repr(eps), "block", block) % (1 << 31)
        with seeded(block_seed, device):
            request = entry.request(
                model, x[pos].to(device), y[pos].to(device), ids[pos], eps, ctx, block_seed
            )
            res = spec.fn(request)
        out[pos] = res.x_adv.detach().to(out.device, out.dtype)
        if res.correct_last is not None:
            if last is None:
                last = torch.ones(len(x), dtype=torch.bool)
            last[pos] = res.correct_last.cpu()
    return out, last
