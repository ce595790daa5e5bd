"""Training-time views of a loaded split: the seeded validation split, mini-batches and augmentation.

Everything here is driven by an explicit ``torch.Generator`` or seed, never the global RNG, so a training
run (and a resumed one) draws the same batches in the same order.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.nn.functional as F

from robustbench_wave.data.base import to_float


def train_val_split(n: int, val_fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Disjoint sorted index sets covering range(n); the same seed always gives the same split."""
    if n < 1:
        raise ValueError(f"n must be positive, got {n}")
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    n_val = round(n * val_fraction)
    if n_val >= n:
        raise ValueError(f"val_fraction={val_fraction} leaves no training example out of {n}")
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return perm[n_val:].sort().values, perm[:n_val].sort().values


def augment(
    batch: torch.Tensor, generator: torch.Generator, *, padding: int = 4, flip: bool | None = None
) -> torch.Tensor:
    """Random crop after zero padding plus random horizontal flip, applied per image on a float batch.

    The standard CIFAR recipe, done on tensors so a seeded ``generator`` makes training reproducible.
    ``flip=None`` flips colour images only (C == 3).  The input is not modified.
    """
    if batch.ndim != 4:
        raise ValueError(f"augment expects a batch (B, C, H, W), got shape {tuple(batch.shape)}")
    if padding < 0:
        raise ValueError(f"padding must be >= 0, got {padding}")
    b, c, h, w = batch.shape
    if flip is None:
        flip = c == 3
    gen_device = generator.device
    offsets = torch.randint(0, 2 * padding + 1, (2, b), generator=generator, device=gen_device)
    rows = offsets[0][:, None] + torch.arange(h, device=gen_device)  # (B, H)
    cols = offsets[1][:, None] + torch.arange(w, device=gen_device)  # (B, W)
    if flip:
        flipped = torch.rand(b, generator=generator, device=gen_device) < 0.5
        cols = torch.where(flipped[:, None], cols.flip(1), cols)
    padded = F.pad(batch, (padding, padding, padding, padding))  # zeros
    dev = batch.device
    rows, cols = rows.to(dev), cols.to(dev)
    bi = torch.arange(b, device=dev)[:, None, None, None]
    ci = torch.arange(c, device=dev)[None, :, None, None]
    return padded[bi, ci, rows[:, None, :, None], cols[:, None, None, :]]


def iterate_batches(
    images: torch.Tensor,
    labels: torch.Tensor,
    batch_size: int,
    *,
    generator: torch.Generator | None = None,
    augmentation: bool = False,
    device: torch.device | str | None = None,
    drop_last: bool = False,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield ``(float images in [0, 1], labels)`` mini-batches from uint8 tensors.

    With a ``generator`` the order is shuffled (and, with ``augmentation``, augmented) reproducibly;
    without one the order is fixed, as evaluation wants.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    if len(images) != len(labels):
        raise ValueError(f"{len(images)} images but {len(labels)} labels")
    if augmentation and generator is None:
        raise ValueError("augmentation needs a torch.Generator so that it is reproducible")
    n = len(labels)
    order = torch.randperm(n, generator=generator) if generator is not None else torch.arange(n)
    for start in range(0, n, batch_size):
        idx = order[start : start + batch_size]
        if drop_last and len(idx) < batch_size:
            break
        x = to_float(images[idx].to(device))
        if augmentation:
            x = augment(x, generator)
        yield x, labels[idx].to(device)
