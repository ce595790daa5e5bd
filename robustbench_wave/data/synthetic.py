"""Small generated data sets for tests and smoke runs: ``synthetic`` (gray) and ``synthetic-rgb``.

Oriented sinusoidal gratings, one orientation per class, generated deterministically from a fixed seed
(no files, no network): learnable within one epoch, yet noisy enough that accuracy is not trivial.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import numpy as np

from robustbench_wave.data.base import DatasetInfo, LoadResult, Split, as_tensors, channel_stats
from robustbench_wave.data.sources import InfoGetter, register_dataset

GRAY, RGB = "synthetic", "synthetic-rgb"

SYNTHETIC_SIZES = {"train": 5000, "test": 1000}
SYNTHETIC_CLASSES = 10
# Class colours for synthetic-rgb (each channel's pattern amplitude), distinct per class.
_SYNTHETIC_COLOURS = np.array(
    [
        [1.0, 0.3, 0.3],
        [0.3, 1.0, 0.3],
        [0.3, 0.3, 1.0],
        [1.0, 1.0, 0.3],
        [1.0, 0.3, 1.0],
        [0.3, 1.0, 1.0],
        [1.0, 0.6, 0.2],
        [0.6, 0.2, 1.0],
        [0.2, 1.0, 0.6],
        [0.8, 0.8, 0.8],
    ]
)


@lru_cache(maxsize=4)
def _synthetic_arrays(in_chans: int, split: str) -> tuple[np.ndarray, np.ndarray]:
    """Oriented sinusoidal gratings: class k has orientation k*18 deg and 3 or 5 cycles per image.

    Phase jitter (+-45 deg), random contrast and uniform noise (std 0.08) make it non-trivial, but a class
    template still correlates strongly with its samples, so even a linear model learns it quickly.
    """
    n, size = SYNTHETIC_SIZES[split], 32
    rng = np.random.default_rng([2024, in_chans, 0 if split == "train" else 1])
    labels = rng.permutation(np.arange(n) % SYNTHETIC_CLASSES)
    theta = labels * np.pi / SYNTHETIC_CLASSES
    freq = np.where(labels % 2 == 0, 3.0, 5.0)
    phase = rng.uniform(-np.pi / 4, np.pi / 4, n)
    amp = rng.uniform(0.25, 0.4, n)
    yy, xx = (np.mgrid[0:size, 0:size] / size).astype(np.float32)
    u = (
        np.cos(theta).astype(np.float32)[:, None, None] * xx
        + np.sin(theta).astype(np.float32)[:, None, None] * yy
    )
    arg = (2 * np.pi * freq[:, None, None] * u + phase[:, None, None]).astype(np.float32)
    pattern = amp.astype(np.float32)[:, None, None] * np.sin(arg)  # (N, H, W)
    if in_chans == 1:
        img = 0.5 + pattern[:, None]
    else:
        img = 0.5 + _SYNTHETIC_COLOURS.astype(np.float32)[labels][:, :, None, None] * pattern[:, None]
    noise = rng.random(img.shape, dtype=np.float32)  # uniform: 5x cheaper than Gaussian, same role
    noise -= 0.5
    noise *= 0.28  # std 0.08
    img += noise
    img *= 255.0
    np.rint(img, out=img)
    np.clip(img, 0.0, 255.0, out=img)
    pixels = img.astype(np.uint8)
    pixels.flags.writeable = False  # cached: callers get copies
    labels.flags.writeable = False
    return pixels, labels


@lru_cache(maxsize=2)
def _synthetic_info(in_chans: int) -> DatasetInfo:
    images, _ = _synthetic_arrays(in_chans, "train")
    mean, std = channel_stats(images)
    name = GRAY if in_chans == 1 else RGB
    return DatasetInfo(
        name=name,
        slug=name,
        num_classes=SYNTHETIC_CLASSES,
        in_chans=in_chans,
        img_size=images.shape[-1],
        mean=mean,
        std=std,
        class_names=tuple(f"grating-{k * 180 // SYNTHETIC_CLASSES:03d}deg" for k in range(SYNTHETIC_CLASSES)),
    )


def _info(in_chans: int) -> InfoGetter:
    return lambda _arg, _cache: _synthetic_info(in_chans)


@register_dataset(GRAY, info=_info(1), aliases=("synthetic-gray",))
def load_synthetic(_: str, split: Split, cache: Path, allow_download: bool) -> LoadResult:
    """One split of the gray gratings (a fresh copy: the generated arrays are cached)."""
    return (*as_tensors(*_synthetic_arrays(1, split)), _synthetic_info(1))


@register_dataset(RGB, info=_info(3))
def load_synthetic_rgb(_: str, split: Split, cache: Path, allow_download: bool) -> LoadResult:
    """One split of the colour gratings (class colour times the grating)."""
    return (*as_tensors(*_synthetic_arrays(3, split)), _synthetic_info(3))
