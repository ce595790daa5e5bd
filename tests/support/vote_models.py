"""A randomised model near a tie whose K-draw vote is known in closed form, for score-based attacks.

:class:`NoisyMargin` answers the label written in pixel 0 against the next class by a mean margin that the
image sets linearly, plus N(0, 1) noise drawn per row and forward from torch's global RNG: a single draw errs
with probability Phi(-mean margin), so a point whose mean margin is a little above 0 is right by a K-draw vote
but wrong on many single draws -- the case where a single-draw Square stops on a lucky draw.
"""

from __future__ import annotations

import torch
from torch import nn

CLASSES = 3
GAIN = 4.0  # the mean margin's gain on the mean of the signal pixels (rows 1.., centred at 0.5)


class NoisyMargin(nn.Module):
    """Mean margin = pixel (0, 1) + GAIN * mean(x[1:, :] - 0.5); within an L∞ ball of radius eps around a
    point whose signal pixels are 0.5 its least value is pixel (0, 1) - eps - GAIN * eps (every pixel at -eps)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = x.detach()
        rows = torch.arange(len(x))
        label = (v[:, 0, 0, 0] * (CLASSES - 1)).round().long()
        mean = v[:, 0, 0, 1] + GAIN * (v[:, 0, 1:, :] - 0.5).mean((1, 2))
        z = torch.full((len(x), CLASSES), -10.0)
        z[rows, label] = mean + torch.randn(len(x))
        z[rows, (label + 1) % CLASSES] = 0.0
        return z


def near_tie_data(n: int, low: float, high: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` 1x8x8 points, labels cycling over the classes, clean mean margins evenly from ``low`` to ``high``."""
    y = torch.arange(n) % CLASSES
    x = torch.full((n, 1, 8, 8), 0.5)
    x[:, 0, 0, 0] = y.float() / (CLASSES - 1)
    x[:, 0, 0, 1] = torch.linspace(low, high, n)
    return x, y
