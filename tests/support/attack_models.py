"""Tiny models and data shared by the attack tests (plus checks that the fixtures are what the tests assume).

Everything is 1x8x8 so the whole attack test set stays fast on a busy 2-core CPU.
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from robustbench_wave.attacks import Suite, family_spec, list_families, parse_suite
from robustbench_wave.models.frontend import FixedFrontEnd


def toy_data(n: int = 48, seed: int = 0, shape: tuple[int, ...] = (1, 8, 8)) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand((n, *shape), generator=g)


def linear_model(weight: torch.Tensor, bias: torch.Tensor | None = None) -> nn.Module:
    """A linear classifier on flattened images: its optimal L∞ attack is known in closed form."""
    lin = nn.Linear(weight.shape[1], weight.shape[0])
    with torch.no_grad():
        lin.weight.copy_(weight)
        lin.bias.copy_(torch.zeros(weight.shape[0]) if bias is None else bias)
    return nn.Sequential(nn.Flatten(), lin).eval()


def teacher(n_classes: int = 3, dim: int = 64, seed: int = 1, scale: float = 4.0) -> nn.Module:
    g = torch.Generator().manual_seed(seed)
    return linear_model(scale * torch.randn(n_classes, dim, generator=g) / dim**0.5)


def small_cnn(seed: int = 0, n_classes: int = 3) -> nn.Module:
    torch.manual_seed(seed)
    net = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1),
        nn.ReLU(),
        nn.AvgPool2d(2),
        nn.Flatten(),
        nn.Linear(4 * 4 * 4, n_classes),
    )
    return net.eval()


class TinyPatchEmbed(nn.Module):
    """Non-overlapping patch tokens exposing ``patch_size`` as timm's ``PatchEmbed`` does."""

    def __init__(self, patch: int = 2, dim: int = 4) -> None:
        super().__init__()
        self.patch_size = (patch, patch)
        self.proj = nn.Conv2d(1, dim, patch, stride=patch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x - 0.5)  # centred, so uniform toy data does not fall into one class


def patch_model(seed: int = 0, n_classes: int = 3) -> nn.Module:
    """A miniature patch-tokenizer classifier: every attack (incl. ``level = "auto"``) runs on it."""
    torch.manual_seed(seed)
    return nn.Sequential(TinyPatchEmbed(), nn.Tanh(), nn.Flatten(), nn.Linear(4 * 4 * 4, n_classes)).eval()


def labelled(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Labels = the model's own predictions, so clean accuracy is 100% and attacks decide everything."""
    with torch.no_grad():
        return model(x).argmax(1)


class ToyFrontEnd(FixedFrontEnd):
    """A fixed linear map (2x2 Haar analysis) followed by a hard threshold: a miniature wavelet tokenizer."""

    def __init__(self, threshold: float = 0.15) -> None:
        super().__init__()
        h = (
            torch.tensor(
                [
                    [[1.0, 1.0], [1.0, 1.0]],
                    [[1.0, -1.0], [1.0, -1.0]],
                    [[1.0, 1.0], [-1.0, -1.0]],
                    [[1.0, -1.0], [-1.0, 1.0]],
                ]
            )
            / 2
        )
        self.register_buffer("kernels", h.unsqueeze(1))  # (4, 1, 2, 2)
        self.threshold = threshold

    def smooth_transform(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.conv2d(x, self.kernels, stride=2)  # (B, 4, H/2, W/2)

    def transform(self, x: torch.Tensor) -> torch.Tensor:
        w = self.smooth_transform(x)
        return w * (w.abs() > self.threshold)


def frontend_model(seed: int = 0, n_classes: int = 3) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(ToyFrontEnd(), nn.Flatten(), nn.Linear(4 * 4 * 4, n_classes)).eval()


def tiny_suite() -> Suite:
    """Every registered attack family at least once, one budget per threat, minimal steps/queries.

    The families known here get cheap settings; a family registered later joins with its defaults, so that
    registering an attack is enough to have it run by every test that uses this suite.
    """
    suite = {
        "name": "tiny",
        "settings": {"rng_block": 8},
        "eps": {"default": {"Linf": [0.1], "L2": [1.0], "L0": [0.05], "corruption": [3]}},
        "attack": [
            {"name": "clean", "family": "clean"},
            {"name": "noise_u", "family": "noise", "distribution": "uniform"},
            {"name": "noise_sp", "family": "noise", "distribution": "salt_pepper"},
            {"name": "fgsm", "family": "fgsm", "threat": "Linf"},
            {
                "name": "pgd_linf",
                "family": "pgd",
                "threat": "Linf",
                "steps": 2,
                "rel_step_size": 0.5,
                "restarts": 2,
            },
            {"name": "pgd_l2", "family": "pgd", "threat": "L2", "steps": 2, "rel_step_size": 0.5},
            {"name": "apgd", "family": "apgd", "threat": "Linf", "steps": 2},
            {"name": "square", "family": "square", "threat": "Linf", "n_queries": 10},
            {
                "name": "transfer",
                "family": "transfer",
                "threat": "Linf",
                "steps": 2,
                "rel_step_size": 0.5,
            },
            {"name": "lowfreq", "family": "lowfreq-pgd", "threat": "Linf", "steps": 2, "level": 1},
            {"name": "apgd_t", "family": "apgd-t", "threat": "Linf", "steps": 2, "n_target_classes": 2},
            {"name": "fab_t", "family": "fab-t", "threat": "Linf", "steps": 2, "n_target_classes": 2},
            {"name": "gaussian_noise", "family": "corruption", "corruption": "gaussian_noise"},
        ],
    }
    listed = {a["family"] for a in suite["attack"]}
    for family in list_families():  # a newly registered family is covered with its defaults, untouched here
        if family not in listed:
            threat = family_spec(family).threats[0]
            suite["attack"].append({"name": family, "family": family, "threat": threat})
    return parse_suite(suite)


class NoisyGradientLinear(nn.Module):
    """A randomised defence whose expected model is linear: ``W x + a sin(omega R x + phi)``, phi ~ U(0, 2 pi).

    A fresh phase per example and forward pass (torch's global RNG) moves each logit by at most ``amp``, but
    its input gradient by up to ``amp * omega * |R|``: with the defaults a single pass's gradient sign agrees
    with the linear part's on ~72% of the pixels, the mean of 16 passes' on ~90% (measured on
    :func:`toy_data`), since the mean converges to the linear part's (E sin = 0). So EOT (Athalye et al. 2018)
    is what breaks it, and the expected model's optimal L∞ attack is the linear one's closed form
    (:func:`optimal_linf_margin`).
    """

    def __init__(self, weight: torch.Tensor, amp: float = 0.05, omega: float = 20.0, seed: int = 7) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.lin = linear_model(weight)
        self.register_buffer("proj", torch.randn(weight.shape[0], weight.shape[1], generator=g))
        self.amp, self.omega = amp, omega

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        phase = 2 * torch.pi * torch.rand(x.shape[0], self.proj.shape[0], device=x.device)
        wiggle = torch.sin(self.omega * x.flatten(1) @ self.proj.T + phase)
        return self.lin(x) + self.amp * wiggle


def template_data(n: int = 200, seed: int = 0, classes: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    """1x8x8 images of ``classes`` classes: a fixed random ±1 template per class at contrast 0.06, plus noise (std 0.1)."""
    g = torch.Generator().manual_seed(1234)
    templates = torch.randint(0, 2, (classes, 1, 8, 8), generator=g).float() * 2 - 1
    g = torch.Generator().manual_seed(seed)
    y = torch.arange(n) % classes
    x = 0.5 + 0.06 * templates[y] + 0.1 * torch.randn(n, 1, 8, 8, generator=g)
    return x.clamp(0, 1), y


@functools.lru_cache(maxsize=4)
def trained_patch_model(seed: int = 0, classes: int = 10, steps: int = 150) -> nn.Module:
    """:func:`patch_model` trained (full batch, Adam) on :func:`template_data`: a small model worth attacking.

    Cached per process; callers must not modify it (attacks leave it unchanged: eval mode, frozen parameters).
    """
    model = patch_model(seed=seed, n_classes=classes).train()
    x, y = template_data(400, seed=100 + seed, classes=classes)
    opt = torch.optim.Adam(model.parameters(), lr=0.02)
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return model.eval()


def optimal_linf_margin(
    w: torch.Tensor, b: torch.Tensor, x: torch.Tensor, y: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Closed-form worst case of a linear model in the L∞ ball ∩ [0,1]: per class pair, push every pixel
    against the sign of the weight difference as far as the box allows. Returns (min margin, worst point)."""
    xf = x.flatten(1)
    margins, points = [], []
    for o in range(w.shape[0]):
        d = w[y] - w[o]  # (B, D)
        x_opt = torch.where(d > 0, (xf - eps).clamp(min=0), (xf + eps).clamp(max=1))
        m = (d * x_opt).sum(1) + b[y] - b[o]
        m[y == o] = float("inf")
        margins.append(m)
        points.append(x_opt)
    margins_t = torch.stack(margins, 1)
    worst = margins_t.argmin(1)
    return margins_t.min(1).values, torch.stack(points, 1)[torch.arange(len(x)), worst].view_as(x)


def conv_net(channels: int, seed: int = 0, n_classes: int = 4) -> nn.Module:
    """A small CNN on (channels, 16, 16) images: big enough for Square's squares, fast enough for its loop."""
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(channels, 6, 3, padding=1),
        nn.ReLU(),
        nn.AvgPool2d(4),
        nn.Flatten(),
        nn.Linear(6 * 4 * 4, n_classes),
    ).eval()
