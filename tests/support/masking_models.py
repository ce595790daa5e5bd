"""Tiny models and data with known behaviour, shared by the diagnostics, adaptive and verdict tests.

Data: 1x8x8 images, 4 classes; class k brightens quadrant k by ``CONTRAST`` over a 0.4 background.
* :class:`QuadrantLinear` -- logits = 10 x quadrant means: honest, differentiable; the optimal Linf attack
  moves the margin by 2 eps, so it is robust below eps = CONTRAST/2 and broken above.
* :class:`QuantizedQuadrant` -- the same after ``round(8 m) / 8`` of the quadrant means: a non-differentiable
  input quantizer with an all-zero input gradient (gradient masking by construction); black-box attacks and
  BPDA still break it at eps = 0.15.
* :class:`NoisyQuadrant` -- Gaussian noise injected in eval mode (a randomized defence: needs EOT).
* :class:`QuantizerFrontEnd` / :func:`masked_front_end_model` -- the quantizer as a FixedFrontEnd whose
  smooth (BPDA) transform is the un-quantized mean, so grad modes exact/blocked are masked and bpda is not.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from robustbench_wave.models.frontend import FixedFrontEnd

CONTRAST = 0.16
NUM_CLASSES = 4


class Info:
    """Stand-in for DatasetInfo (only the fields diagnostics read)."""

    name = "synthetic-quadrants"
    slug = "synthetic-quadrants"
    num_classes = NUM_CLASSES
    in_chans = 1
    img_size = 8


def quadrant_data(n: int = 32, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % NUM_CLASSES
    x = 0.4 + (torch.rand(n, 1, 8, 8, generator=gen) - 0.5) * 0.1
    for i, k in enumerate(y.tolist()):
        r, c = divmod(k, 2)
        x[i, :, 4 * r : 4 * r + 4, 4 * c : 4 * c + 4] += CONTRAST
    return x.clamp(0, 1), y


def quadrant_means(x: torch.Tensor) -> torch.Tensor:
    return F.avg_pool2d(x, 4).flatten(1)  # (B, 4) in class order (row-major quadrants)


class QuadrantLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.tensor(10.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * quadrant_means(x)


def _quantize(m: torch.Tensor) -> torch.Tensor:
    return torch.round(m * 8) / 8


class QuantizedQuadrant(QuadrantLinear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * _quantize(quadrant_means(x))


class NoisyQuadrant(QuadrantLinear):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * quadrant_means(x + 0.05 * torch.randn_like(x))


class QuantizerFrontEnd(FixedFrontEnd):
    def transform(self, x: torch.Tensor) -> torch.Tensor:
        return _quantize(quadrant_means(x))

    def smooth_transform(self, x: torch.Tensor) -> torch.Tensor:
        return quadrant_means(x)


class FrontEndModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.front = QuantizerFrontEnd()
        self.scale = nn.Parameter(torch.tensor(10.0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * self.front(x)


def masked_front_end_model() -> FrontEndModel:
    return FrontEndModel().eval()


class WaveletQuadrant(nn.Module):
    """The lead's WaveletFrontEnd (db1, L=2, half of W zeroed, approximation exempt) + a fixed head.

    On 8x8 images the four tokens are the four quadrants and a token's approximation coefficient is
    4 x the quadrant mean, so with the approximation always kept this model computes exactly
    :class:`QuadrantLinear`'s logits: an honest model behind a real wavelet front-end.
    """

    def __init__(self, zero_fraction: float = 0.5, exempt_approximation: bool = True) -> None:
        super().__init__()
        from robustbench_wave.models.wavelet import WaveletFrontEnd

        self.front = WaveletFrontEnd(8, 1, levels=2, wavelet="db1", zero_fraction=zero_fraction,
                                     exempt_approximation=exempt_approximation)  # fmt: skip
        self.scale = nn.Parameter(torch.tensor(2.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.scale * self.front(x)[:, :, 0]  # (B, T=4): approximation coefficient per token


def synthetic_records(
    model: str, robust: dict[tuple[str, str, str, str], int], *, n: int = 100, eps: float = 0.1
) -> pd.DataFrame:
    """Contract-schema records in which, for each (grad_mode, attack, family, kind), the first ``k`` examples
    stay robust (so the per-example worst case is the minimum).  Clean rows are added for every mode."""
    modes = sorted({m for m, *_ in robust})
    frames = []
    entries = [(m, "clean", "clean", "clean", n) for m in modes] + [(*key, k) for key, k in robust.items()]
    for mode, attack, family, kind, k in entries:
        correct = np.arange(n) < k
        frames.append(
            pd.DataFrame(
                {
                    "model": model,
                    "dataset": "synthetic",
                    "grad_mode": mode,
                    "attack": attack,
                    "family": family,
                    "kind": kind,
                    "threat": "none" if kind == "clean" else "Linf",
                    "eps": 0.0 if kind == "clean" else eps,
                    "backend": "builtin",
                    "example_id": np.arange(n),
                    "label": np.arange(n) % NUM_CLASSES,
                    "pred": np.where(correct, np.arange(n) % NUM_CLASSES, (np.arange(n) + 1) % NUM_CLASSES),
                    "correct": correct,
                    "norm": 0.0 if kind == "clean" else eps,
                    "attacked": True,
                    "correct_last": pd.array([None] * n, dtype="boolean"),
                    "loss_final": np.nan,
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def masking_spec(blocked: int = 90, exact: int = 5, bpda: int = 3, square: int = 40, transfer: int = 20):
    """A candidate whose robustness exists only under blocked gradients (shared attacks replicated per mode)."""
    spec = {
        ("blocked", "pgd_linf", "pgd", "white-box"): blocked,
        ("exact", "pgd_linf", "pgd", "white-box"): exact,
        ("bpda", "pgd_linf", "pgd", "white-box"): bpda,
    }
    for mode in ("exact", "blocked", "bpda"):
        spec[(mode, "square", "square", "black-box")] = square
        spec[(mode, "transfer", "transfer", "transfer")] = transfer
        spec[(mode, "noise_sign", "noise", "noise")] = 95
    return spec


def baseline_spec(pgd: int = 4, square: int = 30):
    return {
        ("exact", "pgd_linf", "pgd", "white-box"): pgd,
        ("exact", "square", "square", "black-box"): square,
        ("exact", "noise_sign", "noise", "noise"): 95,
    }
