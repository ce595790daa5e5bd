"""One training recipe for every zoo model (DeiT's ``engine.py`` split): an epoch, an evaluation, a schedule.

The recipe is deliberately a single frozen dataclass: patch, wavelet and Token-Pooling ViTs get the same
optimizer, schedule, augmentation, epochs and seed, so accuracy and throughput differences come from the
tokenizer alone. The loop runs on one process or, given a :class:`~robustbench_wave.core.distributed.DistContext`
of several ranks and a DDP-wrapped model, on this rank's slice of every global batch (:mod:`.parallel`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from robustbench_wave.core.distributed import DistContext
from robustbench_wave.data import iterate_batches
from robustbench_wave.training.parallel import (
    SINGLE,
    all_reduce_sums,
    autocast,
    eval_shard,
    gather_batch_sums,
    shard_batches,
)


@dataclass(frozen=True)
class Recipe:
    """Optimizer, schedule and augmentation shared by all models (AdamW + warm-up + cosine, DeiT style)."""

    epochs: int = 4
    batch_size: int = 128
    lr: float = 2e-3
    weight_decay: float = 0.05
    warmup_epochs: float = 0.5
    min_lr_ratio: float = 0.02
    label_smoothing: float = 0.1
    grad_clip: float = 1.0
    augmentation: bool = False  # random crop (+ flip for colour): slows the short CPU schedules, see README
    val_fraction: float = 0.1

    def to_dict(self) -> dict:
        return asdict(self)


def build_optimizer(model: nn.Module, recipe: Recipe) -> torch.optim.Optimizer:
    """AdamW without weight decay on biases, norms, CLS and position embeddings (timm's convention)."""
    decay, no_decay = [], []
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        if param.ndim <= 1 or name.endswith(("cls_token", "pos_embed", "reg_token")):
            no_decay.append(param)
        else:
            decay.append(param)
    groups = [
        {"params": decay, "weight_decay": recipe.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=recipe.lr)


def build_scheduler(
    optimizer: torch.optim.Optimizer, recipe: Recipe, steps_per_epoch: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """Per-step linear warm-up then cosine decay to ``min_lr_ratio · lr``."""
    total = max(1, recipe.epochs * steps_per_epoch)
    warmup = min(total - 1, int(recipe.warmup_epochs * steps_per_epoch))

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / (warmup + 1)
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return recipe.min_lr_ratio + (1 - recipe.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def _epoch_batches(
    images: torch.Tensor,
    labels: torch.Tensor,
    recipe: Recipe,
    generator: torch.Generator,
    device: torch.device,
    ctx: DistContext,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The epoch's seeded global batches; with several ranks, this rank's fixed slice of each."""
    batches = iterate_batches(
        images,
        labels,
        recipe.batch_size,
        generator=generator,
        augmentation=recipe.augmentation,
        device=None if ctx.distributed else device,
        drop_last=True,
    )
    return shard_batches(batches, ctx) if ctx.distributed else batches


def _train_step(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    recipe: Recipe,
    device: torch.device,
    bf16: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One optimisation step of the recipe; returns the logits and the loss of the batch."""
    with autocast(device, bf16):
        logits = model(x)
        loss = F.cross_entropy(logits, y, label_smoothing=recipe.label_smoothing)
    if not torch.isfinite(loss):
        raise FloatingPointError(f"training loss became {loss.item()}; lower --lr or check the data")
    optimizer.zero_grad(set_to_none=True)
    loss.backward()  # DDP: the gradient is averaged over the ranks here, before clipping
    if recipe.grad_clip:
        nn.utils.clip_grad_norm_(model.parameters(), recipe.grad_clip)
    optimizer.step()
    scheduler.step()
    return logits, loss


def train_one_epoch(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    recipe: Recipe,
    generator: torch.Generator,
    *,
    device: torch.device,
    desc: str = "train",
    progress: bool = True,
    ctx: DistContext = SINGLE,
    bf16: bool = False,
) -> dict[str, float]:
    """One pass over the training split; returns loss, accuracy and training throughput (images/s).

    With several ranks, ``model`` is DDP-wrapped, ``recipe.batch_size`` is the global batch and this rank
    trains on its slice of each; the returned numbers are summed over all ranks.
    """
    model.train()
    total_loss = correct = seen = 0.0
    batches = _epoch_batches(images, labels, recipe, generator, device, ctx)
    n_batches = len(labels) // recipe.batch_size
    start = time.perf_counter()
    show = progress and ctx.is_main
    with tqdm(batches, total=n_batches, desc=desc, leave=False, disable=not show, unit="batch") as bar:
        for x, y in bar:
            logits, loss = _train_step(model, x, y, optimizer, scheduler, recipe, device, bf16)
            total_loss += loss.item() * len(y)
            correct += (logits.argmax(1) == y).sum().item()
            seen += len(y)
            bar.set_postfix(loss=f"{total_loss / seen:.3f}", acc=f"{correct / seen:.3f}")
    total_loss, correct, seen = all_reduce_sums(ctx, [total_loss, correct, seen])
    elapsed = time.perf_counter() - start
    if not seen:
        raise ValueError(
            f"the training split has fewer images ({len(labels)}) than one batch ({recipe.batch_size})"
        )
    return {
        "train_loss": total_loss / seen,
        "train_accuracy": correct / seen,
        "train_images_per_s": seen / elapsed,
    }


@torch.no_grad()
def clean_metrics(
    model: nn.Module,
    images: torch.Tensor,
    labels: torch.Tensor,
    *,
    batch_size: int = 512,
    device: torch.device | str = "cpu",
    ctx: DistContext = SINGLE,
) -> dict[str, float]:
    """Clean loss and accuracy in eval mode, with inference throughput (images/s).

    ``model`` is the plain module (never the DDP wrapper: ranks evaluate different numbers of batches).
    Several ranks split the evaluation batches and sum them in batch order, so the result is the
    single-process result for the same weights.
    """
    model.eval()
    start = time.perf_counter()
    first, stop = eval_shard(-(-len(labels) // batch_size), ctx)
    part = slice(first * batch_size, stop * batch_size)
    sums = []
    for x, y in iterate_batches(images[part], labels[part], batch_size, device=device):
        logits = model(x)
        sums.append(
            (F.cross_entropy(logits, y, reduction="sum").item(), (logits.argmax(1) == y).sum().item())
        )
    total_loss = correct = 0.0
    for batch_loss, batch_correct in gather_batch_sums(ctx, sums):
        total_loss += batch_loss
        correct += batch_correct
    elapsed = time.perf_counter() - start
    n = max(1, len(labels))
    return {"loss": total_loss / n, "accuracy": correct / n, "images_per_s": len(labels) / max(elapsed, 1e-9)}
