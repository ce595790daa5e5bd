"""Models whose outputs are not logits of the data set's classes, as a user might hand them over: refused
at load by every door (``models.intake.check_outputs``), before any attack. Factories for the attack
command (``--model tests.support.output_models:NAME``); none has parameters, so none needs ``--weights``."""

from __future__ import annotations

import torch
from torch import nn

POOL = 4


class _Pooled(nn.Module):
    """A fixed pooled-pixel score per class (no parameters): logits a user would return."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        self.num_classes = num_classes

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        pooled = nn.functional.adaptive_avg_pool2d(x.mean(1, keepdim=True), (1, self.num_classes))
        return 10 * pooled.flatten(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.logits(x)


class Probabilities(_Pooled):
    """The logits through a final softmax: rows in [0, 1] summing to 1."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.logits(x), dim=1)


class NanLogits(_Pooled):
    """Logits with a NaN in the first row (e.g. a division by a zero norm)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.logits(x).clone()
        out[0, 0] = float("nan")
        return out


def probabilities(num_classes: int = 10) -> nn.Module:
    return Probabilities(num_classes)


def nan_logits(num_classes: int = 10) -> nn.Module:
    return NanLogits(num_classes)


def five_classes() -> nn.Module:
    return _Pooled(5)


def logits(num_classes: int = 10) -> nn.Module:
    """The control: the same scores as logits, accepted."""
    return _Pooled(num_classes)
