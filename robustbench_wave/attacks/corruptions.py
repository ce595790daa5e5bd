"""Common corruptions (Hendrycks & Dietterich 2019, ICLR: CIFAR-10-C / ImageNet-C) as the ``corruption`` family.

The average-case robustness axis RobustBench reports next to L∞/L2: twelve of the fifteen benchmark
corruptions (noise: Gaussian, shot, impulse; blur: defocus, motion, zoom; weather: fog, brightness;
digital: contrast, elastic, pixelate, JPEG) at severities 1-5, generated on the fly from the attack seed (no
download). Each operator follows Hendrycks' CIFAR-10-C generator,
github.com/hendrycks/robustness/blob/master/ImageNet-C/create_c/make_cifar_c.py, with its severity parameters
(cited per operator), on (B, C, H, W) tensors in [0, 1], gray or colour. Glass blur (a sequential pixel
shuffle), snow and frost (ImageMagick motion blur, photographs of frost) are not implemented.

Library operators where one fits: PIL's JPEG codec and BOX resampling (as Hendrycks), torchvision's Gaussian
blur (the anti-aliasing of the defocus disk), torch's bilinear resampling (zoom: scipy's ``zoom(order=1)``
grid; elastic: ``grid_sample``). Written here: the noise draws, the disk and motion kernels (ImageMagick's ``MotionBlurImage`` kernel and offsets, as
re-implemented by the ``imagecorruptions`` package), the plasma fractal of fog, the HSV brightness shift (in
closed form: with hue and saturation fixed, RGB scales with V) and the per-channel contrast.

Differences from the published data sets, on purpose: randomness comes from the harness's one seeding rule
(:func:`corruption_generators`: a CPU generator per (seed, corruption, example id, severity)), so the
corrupted images do not depend on the batch or shard; results are not rounded to uint8 (except JPEG, which
codes uint8 images); sizes scale with the image (pixelate, elastic, fog). Fashion-MNIST enters as the
data module gives it, zero-padded to 32x32.
"""

from __future__ import annotations

import functools
import io
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from robustbench_wave.attacks.registry import (
    CORRUPTION_SEVERITIES,
    AttackKind,
    AttackRequest,
    Param,
    RunOutput,
    Threat,
    register_attack,
    register_family,
)
from robustbench_wave.attacks.seeding import example_generators, per_example

CORRUPTION_FAMILY = "corruption"
#: Hendrycks & Dietterich's four categories, in their order.
GROUPS = ("noise", "blur", "weather", "digital")

Operator = Callable[[torch.Tensor, int, list[torch.Generator]], torch.Tensor]


@dataclass(frozen=True)
class Corruption:
    """One corruption: its category and operator ``(x, severity, generators) -> x'`` (clipped by :func:`corrupt`)."""

    name: str
    group: str
    fn: Operator


_CORRUPTIONS: dict[str, Corruption] = {}


def _corruption(name: str, group: str) -> Callable[[Operator], Operator]:
    if group not in GROUPS:
        raise ValueError(f"corruption {name!r}: category {group!r} is not one of {GROUPS}")

    def wrap(fn: Operator) -> Operator:
        _CORRUPTIONS[name] = Corruption(name, group, fn)
        return fn

    return wrap


def list_corruptions() -> list[str]:
    """Every corruption, in Hendrycks' order (noise, blur, weather, digital)."""
    return list(_CORRUPTIONS)


def corruption_group(name: str) -> str:
    return corruption_spec(name).group


def corruption_spec(name: str) -> Corruption:
    try:
        return _CORRUPTIONS[name]
    except KeyError:
        raise ValueError(f"unknown corruption {name!r}; choose one of {list_corruptions()}") from None


def check_severity(value: float) -> int:
    """A severity as an int; a ValueError unless it is one of 1-5."""
    if value not in CORRUPTION_SEVERITIES:
        raise ValueError(f"corruption severity {value!r} must be one of {list(CORRUPTION_SEVERITIES)}")
    return int(value)


def corruption_generators(seed: int, name: str, ids: torch.Tensor, severity: int) -> list[torch.Generator]:
    """One CPU generator per example, seeded by (seed, corruption, example id, severity) only."""
    return example_generators(seed, f"corruption/{name}", ids, severity)


@torch.no_grad()
def corrupt(
    x: torch.Tensor, name: str, severity: int, gens: list[torch.Generator] | None = None
) -> torch.Tensor:
    """``x`` (B, C, H, W) in [0, 1] under corruption ``name`` at ``severity``, clipped to [0, 1].

    ``gens`` (one generator per image, :func:`corruption_generators`) feed the random corruptions; the
    deterministic ones (defocus and zoom blur, brightness, contrast, pixelate, JPEG) ignore them.
    """
    spec = corruption_spec(name)
    severity = check_severity(severity)
    if x.dim() != 4:
        raise ValueError(f"corrupt needs images (B, C, H, W), got shape {tuple(x.shape)}")
    gens = gens if gens is not None else []
    if gens and len(gens) != len(x):
        raise ValueError(f"{len(gens)} generators for {len(x)} images: pass one per image")
    out = spec.fn(x.float(), severity, gens)
    return out.clamp(0.0, 1.0).to(x.dtype)


def _need(gens: list[torch.Generator], x: torch.Tensor, name: str) -> None:
    if len(gens) != len(x):
        raise ValueError(f"{name} is random: pass one generator per image (corruption_generators)")


def _draws(
    gens: list[torch.Generator], shape: tuple[int, ...], device: torch.device, dtype=torch.float32
) -> torch.Tensor:
    """U[0, 1) of ``shape`` per image, from its own generator."""
    return per_example(lambda g: torch.rand(shape, generator=g, dtype=dtype), gens, device)


# ----------------------------------------------------------------------------------------------------- noise
@_corruption("gaussian_noise", "noise")
def gaussian_noise(x: torch.Tensor, severity: int, gens: list[torch.Generator]) -> torch.Tensor:
    """x + N(0, c^2) per value; c = [.04, .06, .08, .09, .10] (make_cifar_c.gaussian_noise)."""
    _need(gens, x, "gaussian_noise")
    c = (0.04, 0.06, 0.08, 0.09, 0.10)[severity - 1]
    shape = tuple(x.shape[1:])
    return x + c * per_example(lambda g: torch.randn(shape, generator=g), gens, x.device)


@_corruption("shot_noise", "noise")
def shot_noise(x: torch.Tensor, severity: int, gens: list[torch.Generator]) -> torch.Tensor:
    """Poisson(c x) / c per value; c = [500, 250, 100, 75, 50] photons (make_cifar_c.shot_noise)."""
    _need(gens, x, "shot_noise")
    c = (500, 250, 100, 75, 50)[severity - 1]
    rates = (x.detach().double() * c).cpu()
    counts = torch.stack([torch.poisson(r, generator=g) for r, g in zip(rates, gens)])
    return (counts / c).to(x.device, x.dtype)


@_corruption("impulse_noise", "noise")
def impulse_noise(x: torch.Tensor, severity: int, gens: list[torch.Generator]) -> torch.Tensor:
    """Salt and pepper per value (skimage ``random_noise(mode='s&p')``): a share c of the values set to 0 or 1
    with equal odds; c = [.01, .02, .03, .05, .07] (make_cifar_c.impulse_noise)."""
    _need(gens, x, "impulse_noise")
    c = (0.01, 0.02, 0.03, 0.05, 0.07)[severity - 1]
    u = _draws(gens, (2, *x.shape[1:]), x.device)
    flipped, salt = u[:, 0] < c, (u[:, 1] < 0.5).to(x.dtype)
    return torch.where(flipped, salt, x)


# ------------------------------------------------------------------------------------------------------ blur
def filter2d(x: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """Correlate every channel with ``kernel`` (odd k x k), mirrored borders (cv2.filter2D's default)."""
    r = kernel.shape[-1] // 2
    weight = kernel.to(x.device, x.dtype).expand(x.shape[1], 1, *kernel.shape[-2:])
    return F.conv2d(F.pad(x, (r, r, r, r), mode="reflect"), weight, groups=x.shape[1])


@functools.lru_cache(maxsize=16)
def disk_kernel(radius: float, alias_blur: float) -> torch.Tensor:
    """Hendrycks' anti-aliased disk (make_cifar_c.disk): the normalised disk x^2 + y^2 <= r^2 on a 17x17 grid
    (radius <= 8), smoothed by a 3x3 Gaussian of sigma ``alias_blur``; cropped to its non-zero support."""
    from torchvision.transforms.v2.functional import gaussian_blur  # here: the import takes seconds

    half = 8 if radius <= 8 else int(radius)
    ksize = 3 if radius <= 8 else 5
    grid = torch.arange(-half, half + 1, dtype=torch.float32)
    disk = ((grid[:, None] ** 2 + grid[None, :] ** 2) <= radius**2).float()
    disk = gaussian_blur((disk / disk.sum())[None, None], [ksize, ksize], [alias_blur, alias_blur])[0, 0]
    support = int(disk.abs().sum(0).nonzero().flatten().max()) - half  # symmetric, so one side suffices
    return disk[half - support : half + support + 1, half - support : half + support + 1].contiguous()


@_corruption("defocus_blur", "blur")
def defocus_blur(x: torch.Tensor, severity: int, gens: list[torch.Generator]) -> torch.Tensor:
    """The anti-aliased disk of (radius, alias_blur) = [(.3, .4), (.4, .5), (.5, .6), (1, .2), (1.5, .1)]
    (make_cifar_c.defocus_blur)."""
    radius, alias = ((0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1.0, 0.2), (1.5, 0.1))[severity - 1]
    return filter2d(x, disk_kernel(radius, alias))


def motion_taps(radius: float, sigma: float, angle_deg: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """ImageMagick's ``MotionBlurImage`` kernel: width 2*ceil(radius)+1 one-sided Gaussian weights
    exp(-i^2 / 2 sigma^2) (normalised) and, per image, integer offsets (dx_i, dy_i) = (ceil(i cos a - 1/2),
    ceil(i sin a - 1/2)). Returns (weights (K,), offsets (B, K, 2) as (dx, dy))."""
    width = int(2 * math.ceil(radius) + 1)
    i = torch.arange(width, dtype=torch.float64)
    weights = torch.exp(-(i**2) / (2 * sigma**2))
    a = torch.deg2rad(angle_deg.double()).view(-1, 1)
    dx = torch.ceil(i * torch.cos(a) - 0.5)
    dy = torch.ceil(i * torch.sin(a) - 0.5)
    return weights / weights.sum(), torch.stack([dx, dy], -1).long()


@_corruption("motion_blur", "blur")
def motion_blur(x: torch.Tensor, severity: int, gens: list[torch.Generator]) -> torch.Tensor:
    """Motion blur along a random angle U(-45, 45) degrees per image with (radius, sigma) = [(6, 1), (6, 1.5),
    (6, 2), (8, 2), (9, 2.5)] (make_cifar_c.motion_blur, through ImageMagick); borders repeat the edge pixel."""
    _need(gens, x, "motion_blur")
    radius, sigma = ((6, 1.0), (6, 1.5), (6, 2.0), (8, 2.0), (9, 2.5))[severity - 1]
    angle = 90.0 * _draws(gens, (), torch.device("cpu"), torch.float64) - 45.0
    weights, offsets = motion_taps(radius, sigma, angle)
    b, _, h, w = x.shape
    rows = (torch.arange(h)[None, None] + offsets[..., 1:2]).clamp(0, h - 1).to(x.device)  # (B, K, H)
    cols = (torch.arange(w)[None, None] + offsets[..., 0:1]).clamp(0, w - 1).to(x.device)  # (B, K, W)
    batch = torch.arange(b, device=x.device)[:, None, None]
    out = torch.zeros_like(x)
    for k, weight in enumerate(weights.tolist()):
        out += weight * x[batch, :, rows[:, k, :, None], cols[:, k, None, :]].permute(0, 3, 1, 2)
    return out


def clipped_zoom(x: torch.Tensor, factor: float) -> torch.Tensor:
    """Hendrycks' ``clipped_zoom``: the central ceil(n / factor) crop, zoomed by ``factor`` with scipy's
    ``zoom(order=1)`` grid (output round(n' * factor), corners aligned), trimmed back to the centre."""
    h, w = x.shape[-2:]
    ch, cw = math.ceil(h / factor), math.ceil(w / factor)
    top, left = (h - ch) // 2, (w - cw) // 2
    crop = x[..., top : top + ch, left : left + cw]
    size = (round(ch * factor), round(cw * factor))
    zoomed = F.interpolate(crop, size=size, mode="bilinear", align_corners=True)
    th, tw = (size[0] - h) // 2, (size[1] - w) // 2
    return zoomed[..., th : th + h, tw : tw + w]


@_corruption("zoom_blur", "blur")
def zoom_blur(x: torch.Tensor, severity: int, gens: list[torch.Generator]) -> torch.Tensor:
    """Mean of the image and its zooms by 1, 1.01, ... up to [1.06, 1.11, 1.16, 1.21, 1.26) (numpy's arange,
    as make_cifar_c.zoom_blur)."""
    stop = (1.06, 1.11, 1.16, 1.21, 1.26)[severity - 1]
    factors = np.arange(1, stop, 0.01)
    out = x.clone()
    for factor in factors.tolist():
        out += clipped_zoom(x, factor)
    return out / (len(factors) + 1)


# --------------------------------------------------------------------------------------------------- weather
def plasma_fractal(mapsize: int, wibbledecay: float, g: torch.Generator) -> torch.Tensor:
    """Hendrycks' diamond-square height map (make_cifar_c.plasma_fractal), float64 in [0, 1], drawn from ``g``."""
    if mapsize & (mapsize - 1):
        raise ValueError(f"plasma_fractal needs a power-of-two map size, got {mapsize}")
    grid = torch.zeros(mapsize, mapsize, dtype=torch.float64)
    step, wibble = mapsize, 100.0

    def wibbled_mean(array: torch.Tensor) -> torch.Tensor:
        noise = torch.rand(array.shape, generator=g, dtype=torch.float64) * 2 * wibble - wibble
        return array / 4 + wibble * noise

    while step >= 2:
        half = step // 2
        corners = grid[0:mapsize:step, 0:mapsize:step]
        square = corners + torch.roll(corners, -1, 0)
        square = square + torch.roll(square, -1, 1)
        grid[half:mapsize:step, half:mapsize:step] = wibbled_mean(square)
        centres = grid[half:mapsize:step, half:mapsize:step]
        corners = grid[0:mapsize:step, 0:mapsize:step]
        left = centres + torch.roll(centres, 1, 0) + corners + torch.roll(corners, -1, 1)
        grid[0:mapsize:step, half:mapsize:step] = wibbled_mean(left)
        top = centres + torch.roll(centres, 1, 1) + corners + torch.roll(corners, -1, 0)
        grid[half:mapsize:step, 0:mapsize:step] = wibbled_mean(top)
        step //= 2
        wibble /= wibbledecay
    grid -= grid.min()
    return grid / grid.max()


@_corruption("fog", "weather")
def fog(x: torch.Tensor, severity: int, gens: list[torch.Generator]) -> torch.Tensor:
    """x + c0 * plasma, rescaled by max / (max + c0); (c0, wibbledecay) = [(.2, 3), (.5, 3), (.75, 2.5), (1, 2),
    (1.5, 1.75)] (make_cifar_c.fog); the map is the next power of two >= the image side, cropped."""
    _need(gens, x, "fog")
    c0, decay = ((0.2, 3.0), (0.5, 3.0), (0.75, 2.5), (1.0, 2.0), (1.5, 1.75))[severity - 1]
    h, w = x.shape[-2:]
    size = 1 << (max(h, w) - 1).bit_length()
    plasma = per_example(lambda g: plasma_fractal(size, decay, g)[:h, :w], gens, x.device)
    peak = x.amax(dim=(1, 2, 3), keepdim=True)
    return (x + c0 * plasma[:, None].to(x.dtype)) * peak / (peak + c0)


@_corruption("brightness", "weather")
def brightness(x: torch.Tensor, severity: int, gens: list[torch.Generator]) -> torch.Tensor:
    """V + c in HSV, clipped, c = [.05, .1, .15, .2, .3] (make_cifar_c.brightness). With hue and saturation
    fixed RGB is proportional to V = max over channels, so x * min(V + c, 1) / V; black becomes gray c (s = 0).
    A gray image is its own V: min(x + c, 1)."""
    c = (0.05, 0.1, 0.15, 0.2, 0.3)[severity - 1]
    v = x.amax(dim=1, keepdim=True)
    v_new = (v + c).clamp(max=1.0)
    return torch.where(v > 0, x * (v_new / v.clamp_min(1e-12)), v_new.expand_as(x))


# --------------------------------------------------------------------------------------------------- digital
@_corruption("contrast", "digital")
def contrast(x: torch.Tensor, severity: int, gens: list[torch.Generator]) -> torch.Tensor:
    """(x - m) * c + m with m the per-channel mean, c = [.75, .5, .4, .3, .15] (make_cifar_c.contrast)."""
    c = (0.75, 0.5, 0.4, 0.3, 0.15)[severity - 1]
    mean = x.mean(dim=(2, 3), keepdim=True)
    return (x - mean) * c + mean


def _fold(index: torch.Tensor, n: int) -> torch.Tensor:
    """scipy's 'reflect' border (d c b a | a b c d | d c b a) as an index into 0..n-1."""
    index = index % (2 * n)
    return torch.where(index >= n, 2 * n - 1 - index, index)


@functools.lru_cache(maxsize=16)
def gaussian_matrix(n: int, sigma: float, truncate: float = 3.0) -> torch.Tensor:
    """scipy's ``gaussian_filter1d(mode='reflect', truncate)`` on length-n signals as an n x n matrix."""
    if sigma <= 0:
        return torch.eye(n, dtype=torch.float64)
    radius = int(truncate * sigma + 0.5)
    taps = torch.arange(-radius, radius + 1, dtype=torch.float64)
    weights = torch.exp(-0.5 * taps**2 / sigma**2)
    weights /= weights.sum()
    out = torch.zeros(n, n, dtype=torch.float64)
    rows = torch.arange(n)[:, None].expand(n, len(taps))
    cols = _fold(torch.arange(n)[:, None] + taps.long()[None], n)
    out.index_put_((rows, cols), weights.expand(n, -1), accumulate=True)
    return out


def _affine_grid(pts_from: torch.Tensor, pts_to: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """Per image, the affine map sending ``pts_to`` to ``pts_from`` (3 points, (B, 3, 2) as x, y) evaluated
    on the pixel grid: for each output pixel, where to read (cv2.warpAffine samples the inverse map)."""
    ones = torch.ones(*pts_to.shape[:2], 1, dtype=torch.float64)
    inverse = torch.linalg.solve(torch.cat([pts_to, ones], -1), pts_from)  # (B, 3, 2)
    yy, xx = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    pixels = torch.stack([xx, yy, torch.ones_like(xx)], -1).double().view(1, h * w, 3)
    return (pixels @ inverse).view(-1, h, w, 2)


def _sample(x: torch.Tensor, xy: torch.Tensor, align_corners: bool) -> torch.Tensor:
    """Bilinear values of ``x`` at pixel coordinates ``xy`` (B, H, W, 2), mirrored borders."""
    h, w = x.shape[-2:]
    size = torch.tensor([w, h], dtype=torch.float64)
    grid = 2 * xy / (size - 1) - 1 if align_corners else (2 * xy + 1) / size - 1
    grid = grid.to(x.device, x.dtype)
    return F.grid_sample(x, grid, mode="bilinear", padding_mode="reflection", align_corners=align_corners)


@_corruption("elastic_transform", "digital")
def elastic_transform(x: torch.Tensor, severity: int, gens: list[torch.Generator]) -> torch.Tensor:
    """A random affine warp (three points moved by U(-c2, c2), cv2.warpAffine, BORDER_REFLECT_101), then an
    elastic displacement: U(-1, 1) fields smoothed by a Gaussian of sigma c1 (truncate 3, mode 'reflect'),
    times c0, sampled bilinearly (scipy map_coordinates(order=1, mode='reflect')); (c0, c1, c2) = size *
    [(0, 0, .08), (.05, .2, .07), (.08, .06, .06), (.1, .04, .05), (.1, .03, .03)] (make_cifar_c.elastic_transform)."""
    _need(gens, x, "elastic_transform")
    b, _, h, w = x.shape
    size = min(h, w)
    rel = ((0, 0, 0.08), (0.05, 0.2, 0.07), (0.08, 0.06, 0.06), (0.1, 0.04, 0.05), (0.1, 0.03, 0.03))
    alpha, sigma, jitter = (size * r for r in rel[severity - 1])
    u = [
        (torch.rand((3, 2), generator=g, dtype=torch.float64), torch.rand((2, h, w), generator=g, dtype=torch.float64))
        for g in gens
    ]  # fmt: skip
    cx, cy, s = w // 2, h // 2, size // 3
    pts = torch.tensor([[cx + s, cy + s], [cx + s, cy - s], [cx - s, cy - s]], dtype=torch.float64)
    moved = pts + torch.stack([2 * jitter * a - jitter for a, _ in u])
    out = _sample(x, _affine_grid(pts.expand(b, 3, 2), moved, h, w), align_corners=True)
    if alpha == 0:
        return out
    fields = 2 * torch.stack([f for _, f in u]) - 1  # (B, 2, H, W): dx, dy
    smooth = gaussian_matrix(h, sigma) @ fields @ gaussian_matrix(w, sigma).T * alpha
    yy, xx = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    xy = torch.stack([xx + smooth[:, 0], yy + smooth[:, 1]], -1)
    return _sample(out, xy, align_corners=False)


@functools.lru_cache(maxsize=64)
def box_resize_matrix(n_in: int, n_out: int) -> torch.Tensor:
    """PIL's BOX resampling from ``n_in`` to ``n_out`` pixels as an (n_out, n_in) matrix (its columns are PIL's
    resize of the unit impulses, in float mode)."""
    eye = np.eye(n_in, dtype=np.float32)
    cols = [
        np.asarray(Image.fromarray(eye[j : j + 1]).resize((n_out, 1), Image.Resampling.BOX))[0]
        for j in range(n_in)
    ]
    return torch.from_numpy(np.stack(cols, 1).astype(np.float64))  # fmt: skip


def pixelate_sizes(h: int, w: int, severity: int) -> tuple[int, int]:
    """The intermediate size (int(h c), int(w c)), c = [.95, .9, .85, .75, .65] (make_cifar_c.pixelate)."""
    c = (0.95, 0.9, 0.85, 0.75, 0.65)[severity - 1]
    return int(h * c), int(w * c)


def box_pixelate(x: torch.Tensor, small: tuple[int, int]) -> torch.Tensor:
    """PIL BOX down to ``small`` (h, w) and back up: one matrix per axis."""
    h, w = x.shape[-2:]
    rows = box_resize_matrix(small[0], h) @ box_resize_matrix(h, small[0])
    cols = box_resize_matrix(small[1], w) @ box_resize_matrix(w, small[1])
    out = rows.to(x.device) @ x.double() @ cols.T.to(x.device)
    return out.to(x.dtype)


@_corruption("pixelate", "digital")
def pixelate(x: torch.Tensor, severity: int, gens: list[torch.Generator]) -> torch.Tensor:
    """PIL BOX resize to c times the size and back (make_cifar_c.pixelate)."""
    return box_pixelate(x, pixelate_sizes(*x.shape[-2:], severity))


JPEG_QUALITY = (80, 65, 58, 50, 40)  # make_cifar_c.jpeg_compression


def jpeg_round_trip(image: np.ndarray, quality: int) -> np.ndarray:
    """A uint8 (H, W) or (H, W, 3) image saved as JPEG by PIL at ``quality`` and read back (Hendrycks' codec)."""
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=quality)
    buffer.seek(0)
    with Image.open(buffer) as decoded:
        return np.asarray(decoded.convert(Image.fromarray(image).mode))


@_corruption("jpeg_compression", "digital")
def jpeg_compression(x: torch.Tensor, severity: int, gens: list[torch.Generator]) -> torch.Tensor:
    """JPEG at quality [80, 65, 58, 50, 40] of the uint8 image, with PIL as make_cifar_c.jpeg_compression."""
    quality = JPEG_QUALITY[severity - 1]
    images = (x.detach() * 255).round().to(torch.uint8).cpu().permute(0, 2, 3, 1).numpy()
    coded = [jpeg_round_trip(img[..., 0] if img.shape[-1] == 1 else img, quality) for img in images]
    out = torch.from_numpy(np.stack(coded)).float() / 255
    return out.view(*images.shape).permute(0, 3, 1, 2).to(x.device, x.dtype)


# ------------------------------------------------------------------------------------------------ the family
register_family(
    CORRUPTION_FAMILY,
    kind=AttackKind.CORRUPTION,
    threats=(Threat.CORRUPTION,),
    grad_dependent=False,
    params={"corruption": Param(str, None, choices=tuple(_CORRUPTIONS))},
)


@register_attack(CORRUPTION_FAMILY, backend="builtin", per_example_rng=True)
def builtin_corruption(request: AttackRequest) -> RunOutput:
    """The entry's corruption at severity ``eps``; the model is not consulted."""
    name, severity = request.params["corruption"], check_severity(request.eps)
    gens = corruption_generators(request.context.seed, name, request.ids, severity)
    return RunOutput(corrupt(request.images, name, severity, gens))
