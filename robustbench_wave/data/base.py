"""What every data source returns and shares: :class:`DatasetInfo`, the errors, and pixel helpers.

A split is ``uint8`` pixels (N, C, H, W) in [0, 255] plus ``int64`` labels, so a whole split fits in memory
cheaply; models take ``to_float(x)`` in [0, 1] and normalise inside (the RobustBench convention), so attack
budgets are always in pixel units. The per-channel mean/std of the training split travel in
:class:`DatasetInfo` for that normalisation; :func:`channel_stats` computes them exactly.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any, Literal

import numpy as np
import torch

Split = Literal["train", "test"]
SPLITS: tuple[Split, ...] = ("train", "test")


class DataError(ValueError):
    """A data set is missing, corrupt or malformed; the message says what to do about it."""


class ChecksumError(DataError):
    """A file's checksum differs from the canonical one."""


@dataclass(frozen=True)
class DatasetInfo:
    """What a model needs to know about its data: shape, classes and normalisation constants."""

    name: str  # canonical spec: load_split(info.name, ...) loads the same data again
    slug: str  # short filesystem-safe id for result directories and tables
    num_classes: int
    in_chans: int
    img_size: int
    mean: tuple[float, ...]  # per channel, in [0, 1] pixel units, from the training split
    std: tuple[float, ...]
    class_names: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> DatasetInfo:
        """Inverse of :meth:`to_dict` (JSON turns tuples into lists)."""
        return cls(
            name=str(d["name"]),
            slug=str(d["slug"]),
            num_classes=int(d["num_classes"]),
            in_chans=int(d["in_chans"]),
            img_size=int(d["img_size"]),
            mean=tuple(float(v) for v in d["mean"]),
            std=tuple(float(v) for v in d["std"]),
            class_names=tuple(str(c) for c in d["class_names"]),
        )


#: What a loader returns: images uint8 (N, C, H, W), labels int64 (N,), and the data set's info.
LoadResult = tuple[torch.Tensor, torch.Tensor, DatasetInfo]


@dataclass(frozen=True, eq=False)
class LabelledImages:
    """Float images in [0, 1] (N, C, H, W), their int64 labels and their data set's info: what an attack run
    evaluates, passed by name so no caller reads ``data[2]`` for the info."""

    images: torch.Tensor
    labels: torch.Tensor
    info: DatasetInfo

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def image_shape(self) -> tuple[int, ...]:
        """(C, H, W) of one image."""
        return tuple(self.images.shape[1:])

    def subset(self, positions: torch.Tensor) -> LabelledImages:
        """The images and labels at ``positions`` (a shard's slice), of the same data set."""
        return LabelledImages(self.images[positions], self.labels[positions], self.info)


def to_float(images: torch.Tensor) -> torch.Tensor:
    """uint8 pixels -> float32 in [0, 1], the input range every model and attack works in."""
    if images.dtype != torch.uint8:
        raise ValueError(f"to_float expects uint8 images (as returned by load_split), got {images.dtype}")
    return images.to(torch.float32).div_(255.0)


def channel_stats(images: torch.Tensor | np.ndarray) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Exact per-channel mean and (population) std in [0, 1] units of uint8 images (N, C, H, W).

    Uses a 256-bin histogram per channel, so it is exact and needs no float copy of the data.
    """
    arr = images.numpy() if isinstance(images, torch.Tensor) else np.asarray(images)
    if arr.dtype != np.uint8 or arr.ndim != 4:
        raise ValueError(f"channel_stats expects uint8 (N, C, H, W), got {arr.dtype} {arr.shape}")
    counts = np.stack([np.bincount(arr[:, c].reshape(-1), minlength=256) for c in range(arr.shape[1])])
    return stats_from_counts(counts)


def stats_from_counts(counts: np.ndarray) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Mean and population std per channel from per-channel histograms of pixel values (C, 256)."""
    values = np.arange(256, dtype=np.float64) / 255.0
    means, stds = [], []
    for row in counts.astype(np.float64):
        total = row.sum()
        mean = float((row * values).sum() / total)
        means.append(mean)
        stds.append(math.sqrt(float((row * (values - mean) ** 2).sum() / total)))
    return tuple(means), tuple(stds)


def as_tensors(images: np.ndarray, labels: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Own, writable, contiguous torch copies (np.frombuffer views are read-only)."""
    img = np.ascontiguousarray(images, dtype=np.uint8)
    lab = np.ascontiguousarray(labels, dtype=np.int64)
    if not img.flags.writeable:
        img = img.copy()
    if not lab.flags.writeable:
        lab = lab.copy()
    return torch.from_numpy(img), torch.from_numpy(lab)


def slugify(text: str) -> str:
    """A lower-case, filesystem-safe id for result folders."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "data"
