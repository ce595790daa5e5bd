"""Planted models for the escalation (``docs/escalation.md``), as factories of the external-model contract.

* :func:`flat_pooled_linear`: :func:`~tests.support.external_models.pooled_linear` behind a round trip through
  NumPy that comes back flattened and is reshaped in torch -- the identity, written so that what comes back
  has another shape than what left: no scan links them (the round-trip linking leaves such a return
  unhandled), so no gradient reaches the input in any mode (escalated from the scan, before the checklist).
* :func:`saturated_pooled_linear`: the same linear model with its logits scaled by :data:`SATURATION`: the
  softmax underflows, so every cross-entropy attack sees a zero gradient although nothing on the input path
  stops it (the scan finds nothing; the checklist fails in its only mode: escalated after the checklist).

Both compute the very function of :func:`pooled_linear` with the same weights (the argmax is unchanged by a
positive scale), so the undefended model is their true robustness, the oracle the tests compare with.
"""

from __future__ import annotations

import torch
from torch import nn

from tests.support.external_models import pooled_linear

#: The logit scale of :func:`saturated_pooled_linear`.
SATURATION = 1e4


class FlatRoundTrip(nn.Module):
    """The pixels out to NumPy, back as one row per image, reshaped in torch: the same values, no gradient."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(x.detach().cpu().numpy().reshape(len(x), -1)).to(x.device).view_as(x)


class Scaled(nn.Module):
    """``scale`` x the logits of ``net``."""

    def __init__(self, net: nn.Module, scale: float) -> None:
        super().__init__()
        self.net, self.scale = net, scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * self.net(x)


def flat_pooled_linear(num_classes: int = 10) -> nn.Module:
    """:func:`pooled_linear` behind :class:`FlatRoundTrip` (its weights as ``1.<key>``)."""
    return nn.Sequential(FlatRoundTrip(), pooled_linear(num_classes))


def saturated_pooled_linear(num_classes: int = 10) -> nn.Module:
    """:func:`pooled_linear` with saturated logits (its weights as ``net.<key>``)."""
    return Scaled(pooled_linear(num_classes), SATURATION)
