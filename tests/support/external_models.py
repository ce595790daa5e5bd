"""Factories of models from outside the zoo, as a user writes them (``--model tests.support.external_models:NAME``).

Each returns an ``nn.Module`` that maps images in [0, 1] (N, C, H, W) to logits; their weights come from a
safetensors file the tests write (:func:`fit_pooled_linear`: a least-squares fit, no training loop).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import nn

from robustbench_wave.models.frontend import FixedFrontEnd

POOL = 4


def pooled_linear(num_classes: int = 10, img_size: int = 32, in_chans: int = 1) -> nn.Module:
    """A linear classifier on 4x4-average-pooled pixels: its FGSM point is known in closed form."""
    return nn.Sequential(
        nn.AvgPool2d(POOL), nn.Flatten(), nn.Linear(in_chans * (img_size // POOL) ** 2, num_classes)
    )


class ConstantLogits(nn.Module):
    """Logits that ignore the image (a zero input gradient, still in the graph): no attack can change the
    prediction, so robust accuracy equals clean accuracy at every budget."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.logits = nn.Parameter(torch.zeros(num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.logits.expand(len(x), -1) + 0.0 * x.sum(dim=(1, 2, 3))[:, None]


def constant(num_classes: int = 10) -> nn.Module:
    return ConstantLogits(num_classes)


class Quantize(FixedFrontEnd):
    """A fixed front-end (the opt-in protocol for gradient modes): rounds pixels to 4 levels. Its exact
    gradient is zero almost everywhere; BPDA goes straight through (identity)."""

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        return torch.round(x * 3) / 3

    def smooth_transform(self, x: torch.Tensor) -> torch.Tensor:
        return x


def quantized_linear(num_classes: int = 10) -> nn.Module:
    return nn.Sequential(Quantize(), pooled_linear(num_classes))


def fit_pooled_linear(
    images: torch.Tensor, labels: torch.Tensor, num_classes: int = 10
) -> dict[str, torch.Tensor]:
    """Least-squares weights of :func:`pooled_linear` (``state_dict`` keys) for float images in [0, 1]."""
    feats = F.avg_pool2d(images, POOL).flatten(1)
    feats = torch.cat([feats, torch.ones(len(feats), 1)], dim=1)
    targets = F.one_hot(labels, num_classes).float()
    solution = torch.linalg.lstsq(feats, targets).solution  # (features + 1, classes)
    return {"2.weight": solution[:-1].T.contiguous(), "2.bias": solution[-1].contiguous()}


def fit_timm_head(net: nn.Module, inputs: torch.Tensor, labels: torch.Tensor, num_classes: int = 10) -> None:
    """Least-squares ``head`` of a timm model on its random features of ``inputs`` (already normalised):
    an accurate enough model without a training loop."""
    with torch.no_grad():
        feats = net.forward_head(net.forward_features(inputs), pre_logits=True)
        feats = torch.cat([feats, torch.ones(len(feats), 1)], dim=1)
        solution = torch.linalg.lstsq(feats, F.one_hot(labels, num_classes).float()).solution
        net.head.weight.copy_(solution[:-1].T)
        net.head.bias.copy_(solution[-1])


def save_weights(state: dict[str, torch.Tensor], path: str) -> None:
    save_file({k: v.detach().contiguous() for k, v in state.items()}, path)
