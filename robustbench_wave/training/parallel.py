"""Training on several ranks: data parallelism (one model, DDP) and run parallelism (one run per rank).

``--parallel data`` trains one model at a time with :class:`~torch.nn.parallel.DistributedDataParallel`
and keeps the single-process recipe: every rank draws the *same* seeded sequence of global batches
(the one-process order and augmentation, :func:`robustbench_wave.data.iterate_batches`) and keeps its
fixed slice of each (:func:`shard_batches`), so the averaged gradient is the one-process gradient up to
floating-point reduction order, and the learning-rate schedule, label smoothing and gradient clipping (on
the averaged gradient) are unchanged. Evaluation is sharded on whole evaluation batches and its per-batch
sums are gathered in batch order (:func:`gather_batch_sums`), so accuracies and losses are exactly the
single-process numbers for the same weights. ``--parallel runs`` gives each rank whole (model, seed) runs
(:func:`assign_runs`), each trained as a single process. Kept apart from the loop (:mod:`.engine`) so that
the one-process path stays the plain loop.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext
from typing import TypeVar

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from robustbench_wave.core.distributed import DistContext, all_gather_object, shard_bounds

T = TypeVar("T")

#: The context of a plain single-process run (no process group, CPU until a device is given).
SINGLE = DistContext()


class Parallelism(str, enum.Enum):
    """How ``torchrun`` ranks share the work of one ``python -m robustbench_wave.train`` command."""

    DATA = "data"  # one model at a time, each global batch split over the ranks (DDP)
    RUNS = "runs"  # whole (model, seed) runs spread over the ranks, each trained as one process


def wrap_model(model: nn.Module, ctx: DistContext) -> nn.Module:
    """The module to train: DDP over the process group, or ``model`` itself in a single process."""
    if not ctx.distributed:
        return model
    device_ids = [ctx.device] if ctx.device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids)


def check_global_batch(batch_size: int, ctx: DistContext) -> None:
    """The global batch must split evenly, so that DDP's average of per-rank means is the global mean."""
    if batch_size % ctx.world_size:
        raise ValueError(
            f"--batch-size {batch_size} does not split over {ctx.world_size} ranks; choose a multiple of "
            f"{ctx.world_size} (the batch size is the global batch: each rank takes batch/ranks of it)"
        )


def shard_batches(
    batches: Iterable[tuple[torch.Tensor, torch.Tensor]], ctx: DistContext
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """This rank's fixed slice of every global batch, moved to its device.

    The global batches (order and augmentation) are drawn on every rank from the same generator, so each
    example keeps its one-process augmentation; drawing a whole batch costs a uint8-to-float conversion and
    an index per image, small next to a forward and backward pass.
    """
    for x, y in batches:
        start, stop = shard_bounds(len(y), ctx.world_size, ctx.rank)
        yield x[start:stop].to(ctx.device), y[start:stop].to(ctx.device)


def all_reduce_sums(ctx: DistContext, values: list[float]) -> list[float]:
    """Element-wise sums over the ranks (float64), e.g. an epoch's loss sum, correct count and images seen."""
    if not ctx.distributed:
        return values
    total = torch.tensor(values, dtype=torch.float64, device=ctx.device)
    dist.all_reduce(total)
    return total.tolist()


def eval_shard(n_batches: int, ctx: DistContext) -> tuple[int, int]:
    """The contiguous range of evaluation batches this rank evaluates."""
    return shard_bounds(n_batches, ctx.world_size, ctx.rank)


def gather_batch_sums(ctx: DistContext, sums: list[T]) -> list[T]:
    """Every rank's per-batch sums, concatenated in rank (= batch) order, on every rank."""
    if not ctx.distributed:
        return sums
    return [item for part in all_gather_object(ctx, sums) for item in part]


def autocast(device: torch.device, bf16: bool) -> AbstractContextManager:
    """bf16 autocast on CUDA for the training forward pass; a no-op for float32 training."""
    if not bf16:
        return nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def check_bf16(device: torch.device, bf16: bool) -> None:
    """bf16 training is for GPUs: on a CPU it is refused rather than silently slow or silently ignored."""
    if bf16 and device.type != "cuda":
        raise ValueError(
            f"--bf16 needs a CUDA device (this run uses {device}); drop --bf16 to train in float32"
        )


def assign_runs(jobs: list[T], ctx: DistContext) -> list[T]:
    """This rank's share of the (model, seed) runs: job i goes to rank i mod world size."""
    return jobs[ctx.rank :: ctx.world_size]
