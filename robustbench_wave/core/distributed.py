"""Where a run executes: the device, the torch.distributed process group, and the threads per rank.

Every command line starts with :func:`init_distributed`. Started plainly it is one process (rank 0 of 1);
started by ``torchrun`` (which sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``) it joins
the process group -- ``gloo`` on CPU, ``nccl`` on CUDA -- and each rank takes its local GPU. The same code runs
on one core, on all cores of a machine (ranks x threads chosen so they do not oversubscribe it), on several
GPUs, and over several nodes with torchrun's rendezvous (e.g. under Slurm).
"""

from __future__ import annotations

import logging
import os
import platform
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

log = logging.getLogger(__name__)

DEVICE_CHOICES = "auto | cpu | cuda | cuda:N"


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    """``auto`` picks CUDA when available (the rank's local GPU), else the CPU; CUDA where there is none is an
    error that says what to do."""
    name = name.strip().lower()
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ValueError(
                f"--device {name}: CUDA is not available on this machine; use --device cpu or auto"
            )
        if name == "cuda":
            name = f"cuda:{local_rank % torch.cuda.device_count()}"
        index = int(name.split(":", 1)[1]) if ":" in name else 0
        if index >= torch.cuda.device_count():
            raise ValueError(f"--device {name}: this machine has {torch.cuda.device_count()} CUDA device(s)")
        return torch.device(name)
    if name != "cpu":
        raise ValueError(f"--device {name!r}: choose one of {DEVICE_CHOICES}")
    return torch.device("cpu")


def device_name(device: torch.device) -> str:
    """A human-readable name of the hardware (for provenance)."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine() or "cpu"


@dataclass(frozen=True)
class DistContext:
    """This process's place in the run: its rank among ``world_size`` processes and its device."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    backend: str | None = None  # None: no process group (a single process)

    @property
    def is_main(self) -> bool:
        """Rank 0 writes the shared outputs (merged records, tables, report)."""
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.backend is not None

    def provenance(self) -> dict[str, Any]:
        """What meta.json / config.json record about where the run executed."""
        return {
            "device": str(self.device),
            "device_name": device_name(self.device),
            "world_size": self.world_size,
            "backend": self.backend or "none",
            "threads_per_rank": torch.get_num_threads(),
        }


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not an integer") from None


def local_cores() -> int:
    """The cores this process may run on (its CPU affinity: a container's or ``taskset``'s share), never
    ``OMP_NUM_THREADS`` (a thread count per process, not a core count)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def init_distributed(device: str = "auto", *, timeout_s: int = 1800) -> DistContext:
    """Join torchrun's process group when launched by it (else a single process) and pick the device.

    Also sets torch's threads per rank so that ranks x threads fill the local cores without oversubscribing
    them, unless ``OMP_NUM_THREADS`` says otherwise.
    """
    world = _env_int("WORLD_SIZE", 1)
    rank, local_rank = _env_int("RANK", 0), _env_int("LOCAL_RANK", 0)
    local_world = _env_int("LOCAL_WORLD_SIZE", world)
    dev = resolve_device(device, local_rank)
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(max(1, local_cores() // max(1, local_world)))
    if world <= 1:
        return DistContext(device=dev)
    backend = "nccl" if dev.type == "cuda" else "gloo"
    if not dist.is_initialized():
        if dev.type == "cuda":
            torch.cuda.set_device(dev)
        dist.init_process_group(backend=backend, timeout=timedelta(seconds=timeout_s))
    log.info("rank %d of %d (%s, %s)", rank, world, backend, dev)
    return DistContext(rank, world, local_rank, local_world, dev, backend)


def barrier(ctx: DistContext) -> None:
    """Wait for every rank (no-op in a single process)."""
    if ctx.distributed:
        dist.barrier()


def broadcast_object(ctx: DistContext, obj: Any, src: int = 0) -> Any:
    """Rank ``src``'s ``obj`` on every rank (e.g. a run folder chosen by rank 0)."""
    if not ctx.distributed:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def all_gather_object(ctx: DistContext, obj: Any) -> list[Any]:
    """Every rank's ``obj``, in rank order."""
    if not ctx.distributed:
        return [obj]
    out: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(out, obj)
    return out


def shutdown(ctx: DistContext) -> None:
    """Leave the process group (call once at the end of a command)."""
    if ctx.distributed and dist.is_initialized():
        dist.destroy_process_group()


@contextmanager
def distributed_run(device: str = "auto", *, timeout_s: int = 1800) -> Iterator[DistContext]:
    """``with distributed_run(args.device) as ctx:`` -- joins the group and always leaves it."""
    ctx = init_distributed(device, timeout_s=timeout_s)
    try:
        yield ctx
    finally:
        shutdown(ctx)


def shard_bounds(n: int, world_size: int, rank: int, block: int = 1) -> tuple[int, int]:
    """The half-open range of positions ``[start, stop)`` that ``rank`` of ``world_size`` owns among ``n``.

    Boundaries fall on multiples of ``block`` (the suite's ``rng_block``: library attacks are seeded per block
    of example positions), so a sharded run computes exactly what one process computes; blocks are spread as
    evenly as possible and the last shard takes the remainder.
    """
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"shard {rank}/{world_size}: need 0 <= i < n (write --shard i/n, e.g. 0/2)")
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    blocks = -(-n // block)
    start_block = (blocks * rank) // world_size
    stop_block = (blocks * (rank + 1)) // world_size
    return min(n, start_block * block), min(n, stop_block * block)
