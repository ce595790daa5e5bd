"""Defences written as plain torch code, as a user brings them (no ``FixedFrontEnd``): the operations that
:mod:`robustbench_wave.models.autobpda` must find, each in front of a small linear classifier, and two
factories for the attack command (``--model tests.support.autobpda_models:NAME``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from robustbench_wave.models import autobpda as ab
from tests.support.external_models import pooled_linear

LEVELS = 8  # round(8x)/8: the bit-depth reduction of the issue


def quantize(x: torch.Tensor) -> torch.Tensor:
    return torch.round(x * LEVELS) / LEVELS


class Transform(nn.Module):
    """A parameter-free input transform given as a function."""

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


class Quantize(nn.Module):
    """Bit-depth reduction, ``round(8x)/8``: zero gradient almost everywhere."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return quantize(x)


class NumpyQuantize(nn.Module):
    """The same quantiser through NumPy: the graph is cut; the bpda mode links the round trip (identity)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = np.round(x.detach().cpu().numpy() * LEVELS) / LEVELS
        return torch.from_numpy(out).to(x)


class NumpyHalve(nn.Module):
    """2x2 mean pooling in NumPy, brought back to full size in torch: the values come back in another shape,
    so no round trip can be linked and no gradient reaches the input in any mode."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = x.detach().cpu().numpy()
        n, c, h, w = a.shape
        pooled = a.reshape(n, c, h // 2, 2, w // 2, 2).mean(axis=(3, 5))
        return F.interpolate(torch.from_numpy(pooled).to(x), scale_factor=2, mode="nearest")


class Thermometer(nn.Module):
    """Hard thermometer encoding (Buckman et al. 2018), summed back to one channel, bringing its own smooth
    approximation (``clip(l x - k + 1, 0, 1)``, Athalye et al.'s choice) through the ``bpda_approximation``
    protocol."""

    def __init__(self, levels: int = 4) -> None:
        super().__init__()
        self.levels = levels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return sum((x >= k / self.levels).float() for k in range(1, self.levels + 1)) / self.levels

    def bpda_approximation(self, x: torch.Tensor) -> torch.Tensor:
        steps = [(self.levels * x - k + 1).clamp(0, 1) for k in range(1, self.levels + 1)]
        return sum(steps) / self.levels


def _topk_mask(x: torch.Tensor) -> torch.Tensor:
    flat = x.flatten(1)
    mask = torch.zeros_like(flat).scatter(1, flat.topk(16, dim=1).indices, 1.0)
    return (flat * mask).view_as(x)


def _argmax_one_hot(x: torch.Tensor) -> torch.Tensor:
    flat = x.flatten(1)
    return F.one_hot(flat.argmax(1), flat.shape[1]).float().view_as(x)


@dataclass(frozen=True)
class OpCase:
    """One hand-made transform and what the scan must report for it."""

    fn: Callable[[torch.Tensor], torch.Tensor]
    kind: str
    rule: str
    bpda: bool = True  # a bpda mode is offered (False: torch's own gradient is already the rule's)


#: Each kind of operation the scan looks for, in front of a linear model (rules: :mod:`.autobpda`).
OP_CASES = {
    "round": OpCase(quantize, ab.ZERO_GRADIENT, ab.STRAIGHT_THROUGH),
    "floor": OpCase(lambda x: (x * LEVELS).floor() / LEVELS, ab.ZERO_GRADIENT, ab.STRAIGHT_THROUGH),
    "ceil": OpCase(lambda x: torch.ceil(x * LEVELS) / LEVELS, ab.ZERO_GRADIENT, ab.STRAIGHT_THROUGH),
    "trunc": OpCase(lambda x: torch.trunc(x * LEVELS) / LEVELS, ab.ZERO_GRADIENT, ab.STRAIGHT_THROUGH),
    "sign": OpCase(lambda x: torch.sign(x - 0.5), ab.ZERO_GRADIENT, ab.STRAIGHT_THROUGH),
    "round_in_place": OpCase(lambda x: (x * LEVELS).round_() / LEVELS, ab.ZERO_GRADIENT, ab.STRAIGHT_THROUGH),
    "fake_quantize": OpCase(
        lambda x: torch.fake_quantize_per_tensor_affine(x, 1 / LEVELS, 0, 0, LEVELS),
        ab.QUANTISATION,
        ab.STRAIGHT_THROUGH,
        bpda=False,  # torch's fake_quantize already back-propagates as the identity inside its range
    ),
    "floor_division": OpCase(
        lambda x: torch.div(x * LEVELS, 1, rounding_mode="floor") / LEVELS,
        ab.QUANTISATION,
        ab.STRAIGHT_THROUGH,
    ),
    "threshold": OpCase(lambda x: (x > 0.5).float(), ab.THRESHOLD, ab.STRAIGHT_THROUGH),
    "where": OpCase(lambda x: torch.where(x > 0.5, 1.0, 0.0), ab.THRESHOLD, ab.STRAIGHT_THROUGH),
    "thermometer": OpCase(Thermometer().forward, ab.THRESHOLD, ab.STRAIGHT_THROUGH),
    "long_cast": OpCase(lambda x: (x * LEVELS).long().float() / LEVELS, ab.INTEGER_CAST, ab.STRAIGHT_THROUGH),
    "uint8_cast": OpCase(
        lambda x: (x * 255).to(torch.uint8).float() / 255, ab.INTEGER_CAST, ab.STRAIGHT_THROUGH
    ),
    "argmax_one_hot": OpCase(_argmax_one_hot, ab.INDEX, ab.STRAIGHT_THROUGH),
    "no_grad_round": OpCase(lambda x: _no_grad(quantize, x), ab.NO_GRAD, ab.STRAIGHT_THROUGH),
    "topk_mask": OpCase(_topk_mask, ab.INDEX, ab.GATE),  # the kept values carry the gradient: left alone
    "threshold_gate": OpCase(lambda x: x * (x > 0.5), ab.THRESHOLD, ab.GATE),
    "numpy": OpCase(NumpyQuantize().forward, ab.LEAVES_TORCH, ab.ROUND_TRIP),
    "tolist": OpCase(lambda x: torch.tensor(quantize(x).tolist()), ab.LEAVES_TORCH, ab.ROUND_TRIP),
    "numpy_halved": OpCase(NumpyHalve().forward, ab.LEAVES_TORCH, ab.LOST),
}


def _no_grad(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return fn(x)


def linear_head(n_classes: int = 3, dim: int = 64, seed: int = 1) -> nn.Module:
    """A fixed random linear classifier on flattened 1x8x8 images."""
    g = torch.Generator().manual_seed(seed)
    lin = nn.Linear(dim, n_classes)
    with torch.no_grad():
        lin.weight.copy_(4 * torch.randn(n_classes, dim, generator=g) / dim**0.5)
        lin.bias.zero_()
    return nn.Sequential(nn.Flatten(), lin).eval()


def defended(front: nn.Module, head: nn.Module | None = None) -> nn.Module:
    return nn.Sequential(front, head if head is not None else linear_head()).eval()


def plain_cnn(seed: int = 0) -> nn.Module:
    """An ordinary CNN (conv, batch norm, ReLU, max pooling, dropout, GELU, linear): nothing to find."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Dropout(0.1),
        nn.Conv2d(4, 4, 3, padding=1),
        nn.GELU(),
        nn.AdaptiveAvgPool2d(2),
        nn.Flatten(),
        nn.Linear(16, 3),
    ).eval()


# ------------------------------------------------------------------------- factories for the attack CLI


def quantized_pooled_linear(num_classes: int = 10) -> nn.Module:
    """``round(8x)/8`` in front of :func:`tests.support.external_models.pooled_linear` (its weights as
    ``1.<key>``)."""
    return nn.Sequential(Quantize(), pooled_linear(num_classes))


def numpy_pooled_linear(num_classes: int = 10) -> nn.Module:
    """The same through a NumPy round trip, which the bpda mode links."""
    return nn.Sequential(NumpyQuantize(), pooled_linear(num_classes))


def numpy_halved_pooled_linear(num_classes: int = 10) -> nn.Module:
    """2x2 pooling in NumPy (another shape back): no gradient path."""
    return nn.Sequential(NumpyHalve(), pooled_linear(num_classes))
