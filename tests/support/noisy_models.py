"""Randomised models as a user brings them (``--model tests.support.noisy_models:FACTORY``): a classifier
behind Gaussian input noise at inference, and its deterministic twin (same weights, no noise).

:class:`GaussianInput` is the defence of the issue that asked for automatic EOT (a CNN with sigma = 0.05 noise
on its input): nothing in it subclasses anything of this project, so the evaluation has to find out itself
that two forwards differ.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from tests.support import external_models as ext
from tests.support.attack_models import template_data


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


@functools.lru_cache(maxsize=2)
def trained_cnn(seed: int = 0, classes: int = 10, steps: int = 150) -> nn.Module:
    """A one-conv-layer ReLU CNN trained (full batch, Adam) on :func:`attack_models.template_data`: the twin.

    Cached per process; callers must not modify it (attacks leave it unchanged: eval mode, frozen parameters).
    """
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 64, classes))
    x, y = template_data(500, seed=100 + seed, classes=classes)
    opt = torch.optim.Adam(net.parameters(), lr=0.01)
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
    return net.eval()
