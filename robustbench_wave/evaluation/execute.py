"""Running one attack at one budget on a set of points: batching, seeding and clean predictions.

The one caller of the registered runners: each batch or id block becomes one
:class:`~robustbench_wave.attacks.AttackRequest` (``AttackEntry.request``). Results must not depend on
``batch_size``: runners that seed each example themselves (``per_example_rng``) get plain batches; library
attacks, which draw from the global RNG, run on fixed blocks of example ids (the suite's ``rng_block``), each
under its own seed (:func:`derive_seed`). Predictions are always recomputed here from the returned points,
never taken from the attack.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from robustbench_wave.attacks import AttackEntry, RunContext, RunnerSpec, derive_seed, seeded

Progress = Callable[[int, int], None]  # (group index, number of groups)


@torch.inference_mode()  # no autograd bookkeeping at all: same kernels and values as no_grad, less overhead
def predict(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """(predicted class, cross-entropy) per point, on CPU."""
    preds, losses = [], []
    for i in range(0, len(x), batch_size):
        logits = model(x[i : i + batch_size].to(device)).float()
        yb = y[i : i + batch_size].to(device)
        preds.append(logits.argmax(1).cpu())
        losses.append(nn.functional.cross_entropy(logits, yb, reduction="none").cpu())
    if not preds:
        return torch.zeros(0, dtype=torch.long), torch.zeros(0)
    return torch.cat(preds), torch.cat(losses)


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
