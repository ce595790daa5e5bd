"""Randomised models as a user brings them (``--model tests.support.noisy_models:FACTORY``): a classifier
behind Gaussian input noise at inference, and its deterministic twin (same weights, no noise).

:class:`GaussianInput` is the defence of the issue that asked for automatic EOT (a CNN with sigma = 0.05 noise
on its input): nothing in it subclasses anything of this project, so the evaluation has to find out itself
that two forwards differ.
"""

from __future__ import annotations

import torch
from torch import nn

from tests.support import external_models as ext


class GaussianInput(nn.Module):
    """``net(x + sigma * N(0, I))`` with fresh noise every forward, from torch's global RNG."""

    def __init__(self, net: nn.Module, sigma: float) -> None:
        super().__init__()
        self.net, self.sigma = net, sigma

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x + self.sigma * torch.randn_like(x))


def noisy_pooled_linear(num_classes: int = 10, img_size: int = 32, in_chans: int = 1) -> nn.Module:
    """:func:`external_models.pooled_linear` behind sigma = 0.05 input noise (its weights' keys gain ``net.``)."""
    return GaussianInput(ext.pooled_linear(num_classes, img_size, in_chans), 0.05)
