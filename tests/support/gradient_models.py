"""Planted models for what the automatic-BPDA scan must see beyond single ops (:mod:`robustbench_wave.models.
autobpda`, :mod:`robustbench_wave.models.gradcheck`): a defence that acts on dark images only, purifiers whose
values leave the gradient in a region with no rule (a median filter under ``no_grad``, a JPEG through
torchvision's integer codec), purifiers that optimise inside their forward, and models whose gradient is
wrong in ways no op shows (a hook, a shattered gradient, a forward that depends on the grad mode). Each
defence sits in front of ``Flatten, Linear(784, 10)`` on 28x28 images, with images whose properties are
known (:func:`probe_images`)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

SIDE = 28
DARK = 0.25  # a row darker than this on average is quantised by DarkRowQuantise


def probe_images(n: int = 8, dark: tuple[int, ...] = (), seed: int = 0) -> torch.Tensor:
    """``n`` smooth 1x28x28 images strictly inside (0, 1): a random low-frequency pattern each (sums of a few
    cosines), mean about 0.5 -- except the rows in ``dark``, scaled to a mean of about 0.12."""
    g = torch.Generator().manual_seed(seed)
    grid = torch.linspace(0, 1, SIDE)
    yy, xx = torch.meshgrid(grid, grid, indexing="ij")
    images = []
    for i in range(n):
        field = torch.zeros(SIDE, SIDE)
        for _ in range(4):
            fy, fx = torch.randint(1, 4, (2,), generator=g).tolist()
            phase = float(torch.rand(1, generator=g)) * 2 * math.pi
            field += torch.cos(2 * math.pi * (fy * yy + fx * xx) + phase)
        image = 0.5 + 0.1 * field  # within (0.1, 0.9)
        images.append(0.25 * image if i in dark else image)
    return torch.stack(images)[:, None]


def defended(front: nn.Module, seed: int = 0, features: int = SIDE * SIDE, hidden: int = 0) -> nn.Module:
    """``nn.Sequential(front, Flatten, Linear(features, 10))`` (784 features for 28x28 images), in eval mode;
    with ``hidden`` units, ``Linear(features, hidden), Tanh, Linear(hidden, 10)`` instead (a head whose
    gradient depends on the point, so that "the gradient at the purified image" means something)."""
    torch.manual_seed(seed)
    head = (
        [nn.Linear(features, hidden), nn.Tanh(), nn.Linear(hidden, 10)]
        if hidden
        else [nn.Linear(features, 10)]
    )
    return nn.Sequential(front, nn.Flatten(), *head).eval()


class Front(nn.Module):
    """A parameter-free front-end given as a function."""

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


# ------------------------------------------------------------------------------------ beyond two rows


def dark_row_quantise(x: torch.Tensor) -> torch.Tensor:
    """``round(4 x) / 4`` on the images darker than :data:`DARK` on average, a Python-level branch per row."""
    rows = []
    for row in x:
        if row.mean() < DARK:
            row = torch.round(4 * row) / 4
        rows.append(row)
    return torch.stack(rows)


def dark_row_twin(x: torch.Tensor) -> torch.Tensor:
    """What bpda back-propagates ``dark_row_quantise`` as: the identity."""
    return x


# ---------------------------------------------------------------------------------------- regions


def median3x3(x: torch.Tensor) -> torch.Tensor:
    """3x3 median filter under ``torch.no_grad()`` (reflect padding): (N, 1, H, W) -> (N, 1, H, W)."""
    n, c, h, w = x.shape
    with torch.no_grad():
        padded = F.pad(x, (1, 1, 1, 1), mode="reflect")
        patches = padded.unfold(2, 3, 1).unfold(3, 3, 1)  # (N, C, H, W, 3, 3)
        return patches.reshape(n, c, h, w, 9).median(dim=-1).values


def median3x3_per_image(x: torch.Tensor) -> torch.Tensor:
    """The same median filter, one image at a time, stacked inside the no-grad region."""
    with torch.no_grad():
        return torch.stack([median3x3(image[None])[0] for image in x])


def torchvision_jpeg(x: torch.Tensor, quality: int = 50) -> torch.Tensor:
    """JPEG through torchvision.io's integer codec, image by image (8-bit levels, encode, decode, /255)."""
    from torchvision.io import decode_jpeg, encode_jpeg

    out = []
    for image in x:
        levels = (image * 255).round().to(torch.uint8)
        out.append(decode_jpeg(encode_jpeg(levels, quality=quality)).float() / 255)
    return torch.stack(out)


def torchvision_jpeg_batch(x: torch.Tensor, quality: int = 50) -> torch.Tensor:
    """The same codec on the whole batch at once (lists in and out), the cast without ``round``."""
    from torchvision.io import decode_jpeg, encode_jpeg

    levels = [image for image in (x * 255).to(torch.uint8)]
    return torch.stack([d.to(torch.float32) for d in decode_jpeg(encode_jpeg(levels, quality=quality))]) / 255


def median3x3_valid(x: torch.Tensor) -> torch.Tensor:
    """The median filter without padding under ``no_grad``: (N, 1, H, W) -> (N, 1, H - 2, W - 2). The values
    leave the region in another shape than they entered it, so nothing links them (stays unhandled)."""
    n, c, h, w = x.shape
    with torch.no_grad():
        patches = x.unfold(2, 3, 1).unfold(3, 3, 1)
        return patches.reshape(n, c, h - 2, w - 2, 9).median(dim=-1).values


# --------------------------------------------------------------------------- optimising in the forward


def tv(z: torch.Tensor) -> torch.Tensor:
    """Anisotropic total variation (smooth: squared differences)."""
    return ((z[..., 1:, :] - z[..., :-1, :]) ** 2).sum() + ((z[..., :, 1:] - z[..., :, :-1]) ** 2).sum()


STEPS, RATE = 3, 0.1


def tv_purify(x: torch.Tensor) -> torch.Tensor:
    """A few gradient steps on ``tv(z) + |z - x|^2`` from ``z = x`` (``torch.autograd.grad`` in the forward)."""
    x0 = x.detach()
    with torch.enable_grad():
        z = x.detach().clone().requires_grad_(True)
        for _ in range(STEPS):
            (g,) = torch.autograd.grad(tv(z) + ((z - x0) ** 2).sum(), z)
            z = (z - RATE * g).detach().requires_grad_(True)
    return z.detach()


def tv_purify_no_grad(x: torch.Tensor) -> torch.Tensor:
    """The same inside a ``no_grad`` forward (the author hides the gradient), the leaf made with the
    ``requires_grad`` setter, the loss against the input itself."""
    with torch.no_grad():
        z = x.clone()
        for _ in range(STEPS):
            with torch.enable_grad():
                z.requires_grad = True
                (g,) = torch.autograd.grad(tv(z) + ((z - x) ** 2).sum(), z)
            z = z.detach() - RATE * g
    return z


def tv_purify_optimiser(x: torch.Tensor) -> torch.Tensor:
    """The same with ``torch.optim.SGD`` and ``loss.backward()`` in the forward."""
    target = x.detach()
    z = target.clone().requires_grad_(True)
    optimiser = torch.optim.SGD([z], lr=RATE)
    with torch.enable_grad():
        for _ in range(STEPS):
            optimiser.zero_grad()
            (tv(z) + ((z - target) ** 2).sum()).backward()
            optimiser.step()
    return z.detach()


def tv_purify_kept_leaf(x: torch.Tensor) -> torch.Tensor:
    """The same steps, but the optimised leaf itself goes on to the classifier (never detached): its values
    still require grad, of the forward's own leaf, so no identity can stand for them (stays unhandled)."""
    x0 = x.detach()
    with torch.enable_grad():
        z = x0.clone().requires_grad_(True)
        for _ in range(STEPS):
            (g,) = torch.autograd.grad(tv(z) + ((z - x0) ** 2).sum(), z)
            z = (z - RATE * g).detach().requires_grad_(True)
    return z


def tv_purify_reference(x: torch.Tensor) -> torch.Tensor:
    """The oracle: the same steps written out by hand (the gradient of tv and of the fit computed in closed
    form), no autograd involved."""
    z = x.clone()
    for _ in range(STEPS):
        g = 2 * (z - x)
        dy = z[..., 1:, :] - z[..., :-1, :]
        dx = z[..., :, 1:] - z[..., :, :-1]
        g = g.clone()
        g[..., 1:, :] += 2 * dy
        g[..., :-1, :] -= 2 * dy
        g[..., :, 1:] += 2 * dx
        g[..., :, :-1] -= 2 * dx
        z = z - RATE * g
    return z


# ------------------------------------------------------------------------- gradients that are wrong


def _random_hook(x: torch.Tensor) -> torch.Tensor:
    y = x * 1.0
    if y.requires_grad:
        y.register_hook(lambda g: torch.randn_like(g))
    return y


def _shattered(x: torch.Tensor) -> torch.Tensor:
    return x + 0.05 * torch.sin(2000 * x)


def _grad_mode_switch(x: torch.Tensor) -> torch.Tensor:
    return x if torch.is_grad_enabled() else torch.round(4 * x) / 4


#: Gradients wrong in ways no op shows: the gradient probe must catch each.
WRONG_GRADIENTS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "random_hook": _random_hook,
    "shattered": _shattered,
    "grad_mode_switch": _grad_mode_switch,
}
