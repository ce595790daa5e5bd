"""Planted defences that draw their randomness outside torch, and one that optimises inside its forward.

:class:`HostNearTie` is a point near a tie between two classes whose noise comes from NumPy's legacy global
RNG, Python's ``random`` or a private unseeded ``np.random.default_rng()``: one draw answers wrong with
probability Phi(-m) (m in pixel 1), so even a 21-draw vote goes both ways unless its draws are common random
numbers. No input gradient reaches x, so FGSM returns x itself (an attack that moves nothing).

:class:`TVDenoised` is a purification defence: a few gradient steps on a total-variation energy inside its
forward (``torch.enable_grad`` + ``torch.autograd.grad``), then a linear classifier.
"""

from __future__ import annotations

import random

import numpy as np
import torch
from torch import nn

CLASSES = 4
SOURCES = ("numpy", "random", "private")


class NearTie(nn.Module):
    """The label written in pixel 0 against the next class, by a margin m (pixel 1) plus N(0, 1) noise drawn
    per row and forward from torch's generator: one draw answers wrong with probability Phi(-m). No input
    gradient reaches x, so FGSM's step is sign(0) = 0 and its output is x itself: an attack that moves
    nothing."""

    def noise(self, n: int) -> torch.Tensor:
        return torch.randn(n)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = x.detach()
        rows = torch.arange(len(x))
        label = (v[:, 0, 0, 0] * (CLASSES - 1)).round().long()
        z = torch.full((len(x), CLASSES), -10.0)
        z[rows, label] = v[:, 0, 0, 1] + self.noise(len(x))
        z[rows, (label + 1) % CLASSES] = 0.0
        return z + 0.0 * x.flatten(1)[:, :1]


class HostNearTie(NearTie):
    """The label written in pixel 0 against the next class, by a margin m (pixel 1) plus N(0, 1) noise per row
    and forward, drawn from ``source``: ``numpy`` (``np.random.randn``), ``random`` (``random.gauss``) or
    ``private`` (an unseeded ``np.random.default_rng()`` of its own, which no seeding reaches)."""

    def __init__(self, source: str) -> None:
        super().__init__()
        if source not in SOURCES:
            raise ValueError(f"unknown noise source {source!r}; choose one of {list(SOURCES)}")
        self.source = source
        self.rng = np.random.default_rng()  # unseeded on purpose: the source nobody can seed

    def noise(self, n: int) -> torch.Tensor:
        if self.source == "numpy":
            return torch.from_numpy(np.random.randn(n)).float()  # noqa: NPY002
        if self.source == "random":
            return torch.tensor([random.gauss(0.0, 1.0) for _ in range(n)])
        return torch.from_numpy(self.rng.standard_normal(n)).float()


def near_tie_data(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` 1x8x8 points whose single draw errs with probability 0.50 .. 0.38 (margins 0 .. 0.3)."""
    y = torch.arange(n) % CLASSES
    x = torch.full((n, 1, 8, 8), 0.5)
    x[:, 0, 0, 0] = y.float() / (CLASSES - 1)
    x[:, 0, 0, 1] = torch.linspace(0.0, 0.3, n)
    return x, y


def total_variation(z: torch.Tensor) -> torch.Tensor:
    """Anisotropic total variation of a batch of images (summed)."""
    return (z[..., 1:, :] - z[..., :-1, :]).abs().sum() + (z[..., :, 1:] - z[..., :, :-1]).abs().sum()


class TVDenoised(nn.Module):
    """``classifier(denoise(x))``: ``steps`` gradient steps on ``|z - x|^2 / 2 + weight * TV(z)`` from z = x.

    Each step differentiates the energy at a detached copy of z (so it needs grad on, even when the caller
    runs it under ``no_grad``) and subtracts the step from z: the output keeps x's identity gradient."""

    def __init__(self, classifier: nn.Module, steps: int = 3, lr: float = 0.2, weight: float = 0.05) -> None:
        super().__init__()
        self.classifier, self.steps, self.lr, self.weight = classifier, steps, lr, weight

    def denoise(self, x: torch.Tensor) -> torch.Tensor:
        z = x
        for _ in range(self.steps):
            with torch.enable_grad():
                v = z.detach().clone().requires_grad_(True)
                energy = 0.5 * ((v - x.detach()) ** 2).sum() + self.weight * total_variation(v)
                (g,) = torch.autograd.grad(energy, v)
            z = z - self.lr * g
        return z

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.denoise(x))
