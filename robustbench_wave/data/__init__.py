"""Data sets for training and attacking: every split comes back as uint8 pixels plus int64 labels.

Images stay in [0, 255] as ``uint8`` (N, C, H, W) so a whole split fits in memory cheaply; models take
``to_float(x)`` in [0, 1] and normalise inside (RobustBench convention), so attack budgets are always in pixel
units.  Per-channel mean/std of the training split travel in :class:`DatasetInfo` for that normalisation.

Specs accepted by :func:`load_split`:

* ``fashion-mnist`` (default) -- Xiao, Rasul & Vollgraf 2017, read from Debian's ``dataset-fashion-mnist``
  files, a cache directory or a download; 28x28 images are zero-padded to 32x32 so wavelet levels divide
  evenly.  The decompressed payloads are checked against sha256 sums (robust to Debian's re-gzipping).
* ``cifar10`` -- Krizhevsky 2009, the canonical binary archive (``cifar-10-binary.tar.gz``, no pickle).
* ``imagefolder:PATH`` -- a class-per-folder tree (``train/<class>/*``, ``test/<class>/*`` or ``val/``), as a
  directory or a .zip; decoded once with Pillow and cached as safetensors.
* ``synthetic`` / ``synthetic-rgb`` -- small generated, deterministic and learnable gratings for tests.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import http.client
import io
import json
import logging
import math
import os
import re
import struct
import tarfile
import time
import urllib.request
import zipfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from robustbench_wave.io import atomic_write, atomic_write_json

logger = logging.getLogger(__name__)

Split = Literal["train", "test"]
DEFAULT_SPEC = "fashion-mnist"
SPECS = ("fashion-mnist", "cifar10", "imagefolder:PATH", "synthetic", "synthetic-rgb")
DATA_DIR_ENV = "RBW_DATA_DIR"


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


LoadResult = tuple[torch.Tensor, torch.Tensor, DatasetInfo]


# ----------------------------------------------------------------------------------------------- public API
def data_dir(root: str | os.PathLike | None = None) -> Path:
    """Where downloads and decoded caches live: ``root``, else ``$RBW_DATA_DIR``, else the user cache."""
    if root is not None:
        return Path(root).expanduser()
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "robustbench_wave" / "data"


def load_split(
    spec: str, split: Split, *, root: str | os.PathLike | None = None, download: bool = True
) -> LoadResult:
    """Load one split as ``(images uint8 (N, C, H, W), labels int64 (N,), info)``.

    ``root`` overrides the cache directory (see :func:`data_dir`); ``download=False`` never uses the network.
    """
    if split not in ("train", "test"):
        raise ValueError(
            f"split must be 'train' or 'test', got {split!r} (use train_val_split for validation)"
        )
    kind, arg = _parse_spec(spec)
    start = time.perf_counter()
    images, labels, info = _LOADERS[kind](arg, split, data_dir(root), download)
    logger.info(
        "loaded %s/%s: %d images %s in %.1f s",
        info.slug,
        split,
        len(labels),
        tuple(images.shape[1:]),
        time.perf_counter() - start,
    )
    return images, labels, info


def dataset_info(spec: str, *, root: str | os.PathLike | None = None) -> DatasetInfo:
    """The DatasetInfo that :func:`load_split` would return, without loading any pixels where possible.

    Fixed constants for fashion-mnist and cifar10 (no files needed); imagefolder reads its cached
    statistics (computing them on first use).  Useful to rebuild a model for a checkpoint.
    """
    kind, arg = _parse_spec(spec)
    if kind == "imagefolder":
        with _open_tree(arg) as tree:
            return _imagefolder_layout(tree, data_dir(root)).info
    fixed = {"fashion-mnist": FASHION_MNIST_INFO, "cifar10": CIFAR10_INFO}
    if kind in fixed:
        return fixed[kind]
    return _synthetic_info(1 if kind == "synthetic" else 3)


def to_float(images: torch.Tensor) -> torch.Tensor:
    """uint8 pixels -> float32 in [0, 1], the input range every model and attack works in."""
    if images.dtype != torch.uint8:
        raise ValueError(f"to_float expects uint8 images (as returned by load_split), got {images.dtype}")
    return images.to(torch.float32).div_(255.0)


def train_val_split(n: int, val_fraction: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Disjoint sorted index sets covering range(n); the same seed always gives the same split."""
    if n < 1:
        raise ValueError(f"n must be positive, got {n}")
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")
    n_val = round(n * val_fraction)
    if n_val >= n:
        raise ValueError(f"val_fraction={val_fraction} leaves no training example out of {n}")
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return perm[n_val:].sort().values, perm[:n_val].sort().values


def channel_stats(images: torch.Tensor | np.ndarray) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Exact per-channel mean and (population) std in [0, 1] units of uint8 images (N, C, H, W).

    Uses a 256-bin histogram per channel, so it is exact and needs no float copy of the data.
    """
    arr = images.numpy() if isinstance(images, torch.Tensor) else np.asarray(images)
    if arr.dtype != np.uint8 or arr.ndim != 4:
        raise ValueError(f"channel_stats expects uint8 (N, C, H, W), got {arr.dtype} {arr.shape}")
    counts = np.stack([np.bincount(arr[:, c].reshape(-1), minlength=256) for c in range(arr.shape[1])])
    return _stats_from_counts(counts)


def _stats_from_counts(counts: np.ndarray) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Mean and population std per channel from per-channel histograms of pixel values (C, 256)."""
    values = np.arange(256, dtype=np.float64) / 255.0
    means, stds = [], []
    for row in counts.astype(np.float64):
        total = row.sum()
        mean = float((row * values).sum() / total)
        means.append(mean)
        stds.append(math.sqrt(float((row * (values - mean) ** 2).sum() / total)))
    return tuple(means), tuple(stds)


def augment(
    batch: torch.Tensor, generator: torch.Generator, *, padding: int = 4, flip: bool | None = None
) -> torch.Tensor:
    """Random crop after zero padding plus random horizontal flip, applied per image on a float batch.

    The standard CIFAR recipe, done on tensors so a seeded ``generator`` makes training reproducible.
    ``flip=None`` flips colour images only (C == 3).  The input is not modified.
    """
    if batch.ndim != 4:
        raise ValueError(f"augment expects a batch (B, C, H, W), got shape {tuple(batch.shape)}")
    if padding < 0:
        raise ValueError(f"padding must be >= 0, got {padding}")
    b, c, h, w = batch.shape
    if flip is None:
        flip = c == 3
    gen_device = generator.device
    offsets = torch.randint(0, 2 * padding + 1, (2, b), generator=generator, device=gen_device)
    rows = offsets[0][:, None] + torch.arange(h, device=gen_device)  # (B, H)
    cols = offsets[1][:, None] + torch.arange(w, device=gen_device)  # (B, W)
    if flip:
        flipped = torch.rand(b, generator=generator, device=gen_device) < 0.5
        cols = torch.where(flipped[:, None], cols.flip(1), cols)
    padded = F.pad(batch, (padding, padding, padding, padding))  # zeros
    dev = batch.device
    rows, cols = rows.to(dev), cols.to(dev)
    bi = torch.arange(b, device=dev)[:, None, None, None]
    ci = torch.arange(c, device=dev)[None, :, None, None]
    return padded[bi, ci, rows[:, None, :, None], cols[:, None, None, :]]


def iterate_batches(
    images: torch.Tensor,
    labels: torch.Tensor,
    batch_size: int,
    *,
    generator: torch.Generator | None = None,
    augmentation: bool = False,
    device: torch.device | str | None = None,
    drop_last: bool = False,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Yield ``(float images in [0, 1], labels)`` mini-batches from uint8 tensors.

    With a ``generator`` the order is shuffled (and, with ``augmentation``, augmented) reproducibly;
    without one the order is fixed, as evaluation wants.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    if len(images) != len(labels):
        raise ValueError(f"{len(images)} images but {len(labels)} labels")
    if augmentation and generator is None:
        raise ValueError("augmentation needs a torch.Generator so that it is reproducible")
    n = len(labels)
    order = torch.randperm(n, generator=generator) if generator is not None else torch.arange(n)
    for start in range(0, n, batch_size):
        idx = order[start : start + batch_size]
        if drop_last and len(idx) < batch_size:
            break
        x = to_float(images[idx].to(device))
        if augmentation:
            x = augment(x, generator)
        yield x, labels[idx].to(device)


# ---------------------------------------------------------------------------------------------------- specs
_ALIASES = {
    "fashion-mnist": "fashion-mnist",
    "fashionmnist": "fashion-mnist",
    "fmnist": "fashion-mnist",
    "cifar10": "cifar10",
    "cifar-10": "cifar10",
    "synthetic": "synthetic",
    "synthetic-gray": "synthetic",
    "synthetic-rgb": "synthetic-rgb",
}


def _parse_spec(spec: str) -> tuple[str, str]:
    text = str(spec).strip()
    if text.lower().startswith("imagefolder:"):
        path = text[len("imagefolder:") :]
        if not path:
            raise ValueError("imagefolder spec needs a path: imagefolder:PATH (a directory or a .zip)")
        return "imagefolder", path
    key = _ALIASES.get(text.lower().replace("_", "-"))
    if key is None:
        raise ValueError(
            f"unknown data set spec {spec!r}; valid specs: {', '.join(SPECS)} "
            "(imagefolder:PATH is a class-per-folder directory or .zip with train/ and test/ subfolders)"
        )
    return key, ""


def _slugify(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "data"


def _tensors(images: np.ndarray, labels: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Own, writable, contiguous torch copies (np.frombuffer views are read-only)."""
    img = np.ascontiguousarray(images, dtype=np.uint8)
    lab = np.ascontiguousarray(labels, dtype=np.int64)
    if not img.flags.writeable:
        img = img.copy()
    if not lab.flags.writeable:
        lab = lab.copy()
    return torch.from_numpy(img), torch.from_numpy(lab)


# ------------------------------------------------------------------------------------------- checksums, I/O
def _md5_file(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _fetch(url: str, tmp: Path, md5: str | None, verify: Callable[[Path], None] | None) -> None:
    """Stream ``url`` into ``tmp`` and check it; an exception makes atomic_write delete the file."""
    digest = hashlib.md5(usedforsecurity=False)
    with urllib.request.urlopen(url, timeout=60) as resp, open(tmp, "wb") as fh:
        total = int(resp.headers.get("Content-Length") or 0) or None
        with tqdm(total=total, unit="B", unit_scale=True, desc=Path(url).name, disable=None) as bar:
            while chunk := resp.read(1 << 20):
                fh.write(chunk)
                digest.update(chunk)
                bar.update(len(chunk))
    if md5 is not None and digest.hexdigest() != md5:
        raise ChecksumError(
            f"download of {url} is corrupt: md5 {digest.hexdigest()}, expected {md5}; "
            "the partial file was deleted, try again"
        )
    if verify is not None:
        verify(tmp)


def _download(
    urls: Sequence[str], dest: Path, *, md5: str | None, verify: Callable[[Path], None] | None = None
) -> tuple[Path | None, list[str]]:
    """Try each mirror; return (dest, []) on success, (None, errors) otherwise. Bad checksums raise."""
    errors = []
    for url in urls:
        logger.info("downloading %s -> %s", url, dest)
        try:
            atomic_write(dest, lambda tmp, url=url: _fetch(url, tmp, md5, verify))
            return dest, []
        except ChecksumError:
            raise
        except (OSError, http.client.HTTPException, ValueError) as exc:
            errors.append(f"{url}: {exc}")
    return None, errors


# ------------------------------------------------------------------------------------------------ idx format
_IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def parse_idx(data: bytes, *, source: str = "idx data") -> np.ndarray:
    """Parse the idx format of (Fashion-)MNIST: 2 zero bytes, dtype code, ndim, big-endian uint32 dims, data.

    Raises :class:`DataError` naming ``source`` when the header is invalid or the size does not match it.
    """
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] not in _IDX_DTYPES or data[3] == 0:
        raise DataError(f"{source}: not an idx file (bad magic number {data[:4].hex() or 'empty'})")
    ndim = data[3]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DataError(f"{source}: idx header truncated ({len(data)} bytes, {ndim} dims announced)")
    dims = struct.unpack(f">{ndim}I", data[4:header])
    dtype = np.dtype(_IDX_DTYPES[data[2]])
    expected = header + math.prod(dims) * dtype.itemsize
    if len(data) != expected:
        raise DataError(
            f"{source}: idx header announces shape {dims} ({expected} bytes) but the file holds "
            f"{len(data)} bytes; it is truncated or corrupt"
        )
    arr = np.frombuffer(data, dtype=dtype, offset=header).reshape(dims)
    return arr.astype(dtype.newbyteorder("="), copy=False)


def read_idx(path: str | os.PathLike, *, sha256: str | None = None) -> np.ndarray:
    """Read a (possibly gzipped) idx file, checking the sha256 of the decompressed payload when given."""
    path = Path(path)
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise DataError(f"{path}: corrupt gzip file ({exc}); delete it and fetch it again") from None
    if sha256 is not None:
        got = hashlib.sha256(raw).hexdigest()
        if got != sha256:
            raise ChecksumError(
                f"{path}: sha256 of the decompressed content is {got}, expected {sha256}; the file is "
                "corrupt or not the canonical one: delete it (it will be downloaded again) or reinstall "
                "the package"
            )
    return parse_idx(raw, source=str(path))


# --------------------------------------------------------------------------------------------- Fashion-MNIST
@dataclass(frozen=True)
class _IdxFile:
    filename: str  # canonical .gz name
    gz_md5: str  # of the canonical download only (Debian re-gzips, so never checked on local files)
    sha256: str  # of the decompressed payload


_FASHION_FILES = {
    ("train", "images"): _IdxFile(
        "train-images-idx3-ubyte.gz",
        "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
        "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
    ),
    ("train", "labels"): _IdxFile(
        "train-labels-idx1-ubyte.gz",
        "25c81989df183df01b3e8a0aad5dffbe",
        "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
    ),
    ("test", "images"): _IdxFile(
        "t10k-images-idx3-ubyte.gz",
        "bef4ecab320f06d8554ea6380940ec79",
        "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
    ),
    ("test", "labels"): _IdxFile(
        "t10k-labels-idx1-ubyte.gz",
        "bb300cfdad3c16e7a12a480ee83cd310",
        "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
    ),
}
FASHION_MNIST_MIRRORS = ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",)  # as torchvision
SYSTEM_FASHION_MNIST_DIRS = (Path("/usr/share/datasets/fashion-mnist"),)  # Debian: dataset-fashion-mnist
FASHION_MNIST_CLASSES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
FASHION_MNIST_PAD = 2  # 28 -> 32
# Exact channel_stats of the padded 32x32 training split (the data are sha256-verified, so these are fixed).
FASHION_MNIST_MEAN = (0.21899983206954654,)
FASHION_MNIST_STD = (0.331811372999959,)
FASHION_MNIST_INFO = DatasetInfo(
    name="fashion-mnist",
    slug="fashion-mnist",
    num_classes=10,
    in_chans=1,
    img_size=28 + 2 * FASHION_MNIST_PAD,
    mean=FASHION_MNIST_MEAN,
    std=FASHION_MNIST_STD,
    class_names=FASHION_MNIST_CLASSES,
)


def _fashion_dirs(cache: Path) -> list[Path]:
    return [*SYSTEM_FASHION_MNIST_DIRS, cache / "fashion-mnist", cache, cache / "FashionMNIST" / "raw"]


def _locate_fashion_file(spec: _IdxFile, cache: Path, download: bool) -> Path:
    dirs = _fashion_dirs(cache)
    for d in dirs:
        for name in (spec.filename, spec.filename.removesuffix(".gz")):
            if (d / name).is_file():
                return d / name
    errors: list[str] = []
    if download:
        dest = cache / "fashion-mnist" / spec.filename
        got, errors = _download(
            [m + spec.filename for m in FASHION_MNIST_MIRRORS],
            dest,
            md5=spec.gz_md5,
            verify=lambda tmp: read_idx(tmp, sha256=spec.sha256),
        )
        if got is not None:
            return got
    searched = ", ".join(str(d) for d in dirs)
    why = "download failed: " + "; ".join(errors) if errors else "downloading is disabled (download=False)"
    raise DataError(
        f"Fashion-MNIST file {spec.filename} not found (searched {searched}) and {why}. Get the data with "
        f"`sudo apt-get install dataset-fashion-mnist`, or put the four idx .gz files in "
        f"${DATA_DIR_ENV}/fashion-mnist/ (or root=), or allow download=True with network access."
    )


def _load_fashion_mnist(_: str, split: Split, cache: Path, download: bool) -> LoadResult:
    img_spec, lab_spec = _FASHION_FILES[(split, "images")], _FASHION_FILES[(split, "labels")]
    img_path = _locate_fashion_file(img_spec, cache, download)
    images = read_idx(img_path, sha256=img_spec.sha256)
    lab_path = _locate_fashion_file(lab_spec, cache, download)
    labels = read_idx(lab_path, sha256=lab_spec.sha256)
    if images.dtype != np.uint8 or images.ndim != 3 or labels.dtype != np.uint8 or labels.ndim != 1:
        raise DataError(f"{img_path} / {lab_path}: unexpected idx layout {images.shape} / {labels.shape}")
    if len(images) != len(labels):
        raise DataError(f"{img_path} has {len(images)} images but {lab_path} has {len(labels)} labels")
    p = FASHION_MNIST_PAD
    padded = np.pad(images, ((0, 0), (p, p), (p, p)))[:, None]  # (N, 1, 32, 32)
    return (*_tensors(padded, labels), FASHION_MNIST_INFO)


# -------------------------------------------------------------------------------------------------- CIFAR-10
CIFAR10_ARCHIVE = "cifar-10-binary.tar.gz"
CIFAR10_MD5 = "c32a1d4ab5d03f1284b67883e8d87530"
CIFAR10_URLS = ("https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz",)
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
CIFAR10_MEMBERS = {"train": tuple(f"data_batch_{i}.bin" for i in range(1, 6)), "test": ("test_batch.bin",)}
# Per-channel mean/std of the 50,000 training images (population std over all pixels).
CIFAR10_MEAN = (0.49139968, 0.48215841, 0.44653091)
CIFAR10_STD = (0.24703223, 0.24348513, 0.26158784)
_CIFAR10_RECORD = 1 + 3 * 32 * 32  # label byte + R, G, B planes
CIFAR10_INFO = DatasetInfo(
    name="cifar10",
    slug="cifar10",
    num_classes=10,
    in_chans=3,
    img_size=32,
    mean=CIFAR10_MEAN,
    std=CIFAR10_STD,
    class_names=CIFAR10_CLASSES,
)


def _locate_cifar10(cache: Path, download: bool) -> Path:
    candidates = [cache / "cifar10" / CIFAR10_ARCHIVE, cache / CIFAR10_ARCHIVE]
    for path in candidates:
        if path.is_file():
            got = _md5_file(path)
            if got != CIFAR10_MD5:
                raise ChecksumError(
                    f"{path}: md5 is {got}, expected {CIFAR10_MD5}; the archive is corrupt or not the "
                    "canonical CIFAR-10 binary version: delete it (it will be downloaded again)"
                )
            return path
    errors: list[str] = []
    if download:
        got_path, errors = _download(CIFAR10_URLS, candidates[0], md5=CIFAR10_MD5)
        if got_path is not None:
            return got_path
    why = "download failed: " + "; ".join(errors) if errors else "downloading is disabled (download=False)"
    raise DataError(
        f"CIFAR-10 archive not found (searched {', '.join(map(str, candidates))}) and {why}. Put "
        f"{CIFAR10_ARCHIVE} (from {CIFAR10_URLS[0]}) in ${DATA_DIR_ENV}/cifar10/ (or root=), allow "
        "download=True with network access, or use imagefolder:PATH for a local copy."
    )


def _load_cifar10(_: str, split: Split, cache: Path, download: bool) -> LoadResult:
    archive = _locate_cifar10(cache, download)
    wanted = CIFAR10_MEMBERS[split]
    blobs: dict[str, bytes] = {}
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar:
            base = Path(member.name).name
            if member.isfile() and base in wanted:
                fh = tar.extractfile(member)
                if fh is not None:
                    blobs[base] = fh.read()
    missing = [m for m in wanted if m not in blobs]
    if missing:
        raise DataError(f"{archive}: members {missing} missing; delete the archive and download it again")
    images, labels = [], []
    for name in wanted:
        data = blobs[name]
        if len(data) % _CIFAR10_RECORD:
            raise DataError(f"{archive}:{name}: {len(data)} bytes is not a whole number of records")
        records = np.frombuffer(data, dtype=np.uint8).reshape(-1, _CIFAR10_RECORD)
        labels.append(records[:, 0].astype(np.int64))
        images.append(records[:, 1:].reshape(-1, 3, 32, 32))
    lab = np.concatenate(labels)
    if lab.size and lab.max() >= 10:
        raise DataError(f"{archive}: label {int(lab.max())} out of range 0..9; the archive is corrupt")
    return (*_tensors(np.concatenate(images), lab), CIFAR10_INFO)


# ----------------------------------------------------------------------------------------------- ImageFolder
IMAGE_EXTENSIONS = frozenset(
    {".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm"}
)
_GRAY_MODES = frozenset({"1", "L", "LA", "La", "I", "I;16", "I;16B", "I;16L", "I;16N", "F"})
_STATS_MAX_IMAGES = 10_000  # mean/std come from at most this many evenly spaced training images
_CACHE_VERSION = 1


class _Tree:
    """Read-only view of a class-per-folder tree stored as a directory or a zip archive."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.is_zip = path.is_file()
        self._zip: zipfile.ZipFile | None = None
        if self.is_zip:
            try:
                self._zip = zipfile.ZipFile(path)
            except zipfile.BadZipFile as exc:
                raise DataError(f"{path}: not a readable zip archive ({exc})") from None
            names = [n for n in self._zip.namelist() if not n.endswith("/")]
        else:
            names = [p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file()]
        self.names = sorted(n for n in names if _is_image_name(n))
        self.prefix = _common_prefix(self.names)

    def read(self, name: str) -> bytes:
        if self._zip is not None:
            return self._zip.read(name)
        return (self.path / name).read_bytes()

    def fingerprint(self) -> str:
        """Changes whenever the archive or any image file changes (size or mtime), or Pillow changes."""
        import PIL

        digest = hashlib.sha256(f"v{_CACHE_VERSION}|{self.path}|{PIL.__version__}".encode())
        if self.is_zip:
            st = self.path.stat()
            digest.update(f"|{st.st_size}|{st.st_mtime_ns}".encode())
        else:
            for name in self.names:
                st = (self.path / name).stat()
                digest.update(f"|{name}|{st.st_size}|{st.st_mtime_ns}".encode())
        return digest.hexdigest()

    def close(self) -> None:
        if self._zip is not None:
            self._zip.close()


def _is_image_name(name: str) -> bool:
    parts = name.split("/")
    if any(p.startswith(".") or p == "__MACOSX" for p in parts):
        return False
    return Path(name).suffix.lower() in IMAGE_EXTENSIONS


def _common_prefix(names: list[str]) -> str:
    """Skip a single wrapper folder (``cifar10-jpeg/train/...``) when there are no split folders on top."""
    prefix = ""
    for _ in range(2):
        rest = [n[len(prefix) :] for n in names]
        tops = {r.split("/", 1)[0] for r in rest if "/" in r}
        if tops & {"train", "test", "val"} or len(tops) != 1 or any("/" not in r for r in rest):
            break
        prefix += tops.pop() + "/"
    return prefix


def _split_files(tree: _Tree) -> dict[str, list[tuple[str, str]]]:
    """split folder -> sorted [(class name, member name)]."""
    out: dict[str, list[tuple[str, str]]] = {}
    for name in tree.names:
        parts = name[len(tree.prefix) :].split("/")
        if len(parts) >= 3 and parts[0] in ("train", "test", "val"):
            out.setdefault(parts[0], []).append((parts[1], name))
    return out


def _decode_one(data: bytes, name: str, in_chans: int) -> np.ndarray:
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            arr = np.asarray(im.convert("L" if in_chans == 1 else "RGB"))
    except (UnidentifiedImageError, OSError, ValueError) as exc:
        raise DataError(f"{name}: cannot decode image ({exc})") from None
    return arr


def _sample_stats(tree: _Tree, files: Sequence[tuple[str, str]], what: str) -> tuple[int, int, tuple, tuple]:
    """(in_chans, img_size, mean, std) from decoding ``files``, accumulating histograms (no pixel copies).

    Any colour image makes the data set RGB (gray ones are then replicated); all sizes must agree.
    """
    from PIL import Image, UnidentifiedImageError

    counts = np.zeros((3, 256), dtype=np.int64)
    offsets = np.array([0, 256, 512])
    colour = False
    first: tuple[int, int] | None = None
    for _, name in tqdm(files, desc=f"decoding {what}", unit="img", disable=None):
        try:
            with Image.open(io.BytesIO(tree.read(name))) as im:
                size, mode = im.size, im.mode
                rgb = np.asarray(im.convert("RGB"))
        except (UnidentifiedImageError, OSError, ValueError) as exc:
            raise DataError(f"{tree.path}:{name}: cannot decode image ({exc})") from None
        if first is None:
            first = size
        elif size != first:
            raise DataError(
                f"{tree.path}: all images must have the same size, but {name} is {size[0]}x{size[1]} "
                f"while {files[0][1]} is {first[0]}x{first[1]}; resize the data set first"
            )
        colour = colour or mode not in _GRAY_MODES
        counts += np.bincount((rgb.reshape(-1, 3) + offsets).reshape(-1), minlength=768).reshape(3, 256)
    if first is None:
        raise DataError(f"{tree.path}: no images in {what}")
    if first[0] != first[1]:
        raise DataError(f"{tree.path}: images must be square, found {first[0]}x{first[1]}; resize them first")
    in_chans = 3 if colour else 1
    mean, std = _stats_from_counts(counts[:in_chans])
    return in_chans, first[0], mean, std


def _decode_files(
    tree: _Tree, files: Sequence[tuple[str, str]], in_chans: int, img_size: int, what: str
) -> np.ndarray:
    """Decode to uint8 (N, C, H, W) in the data set's channel format (gray replicated / colour to luma)."""
    out = np.empty((len(files), img_size, img_size, in_chans), dtype=np.uint8)
    for i, (_, name) in enumerate(tqdm(files, desc=f"decoding {what}", unit="img", disable=None)):
        arr = _decode_one(tree.read(name), f"{tree.path}:{name}", in_chans)
        if arr.shape[:2] != (img_size, img_size):
            raise DataError(
                f"{tree.path}: all images must have the same size, but {name} is "
                f"{arr.shape[1]}x{arr.shape[0]} while the training images are {img_size}x{img_size}; "
                "resize the data set first"
            )
        out[i] = arr.reshape(img_size, img_size, in_chans)
    return np.ascontiguousarray(out.transpose(0, 3, 1, 2))


def _stats_indices(n: int) -> np.ndarray:
    if n <= _STATS_MAX_IMAGES:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, _STATS_MAX_IMAGES).round().astype(np.int64))


@contextlib.contextmanager
def _open_tree(arg: str) -> Iterator[_Tree]:
    path = Path(arg).expanduser().resolve()
    if not path.exists():
        raise DataError(f"imagefolder path {path} does not exist (spec imagefolder:{arg})")
    if path.is_file() and not zipfile.is_zipfile(path):
        raise DataError(f"imagefolder path {path} is neither a directory nor a .zip archive")
    tree = _Tree(path)
    try:
        yield tree
    finally:
        tree.close()


@dataclass(frozen=True)
class _Layout:
    info: DatasetInfo
    files: dict[str, list[tuple[str, str]]]  # "train"/"test" -> sorted [(class name, member name)]
    cache_sub: Path


def _imagefolder_layout(tree: _Tree, cache: Path) -> _Layout:
    """Classes, split files and DatasetInfo of a tree; statistics are computed once and cached as JSON."""
    path = tree.path
    by_split = _split_files(tree)
    test_folder = "test" if "test" in by_split else "val"
    folders = {s: f for s, f in (("train", "train"), ("test", test_folder)) if f in by_split}
    if not folders:
        raise DataError(
            f"{path}: no train/ or test/ split folders with images; expected "
            f"{path.name}/train/<class>/<image> and {path.name}/test/<class>/<image> "
            "(val/ is accepted for test)"
        )
    class_names = tuple(sorted({c for f in folders.values() for c, _ in by_split[f]}))
    slug = "imagefolder-" + _slugify(path.stem if tree.is_zip else path.name)
    cache_sub = cache / "imagefolder" / f"{slug}-{tree.fingerprint()[:16]}"

    stats_folder = "train" if "train" in folders else test_folder
    if stats_folder != "train":
        logger.warning("%s has no train/ folder: normalisation statistics come from %s/", path, stats_folder)
    stats = _read_stats(cache_sub / "stats.json", stats_folder)
    if stats is None:
        # A fixed, evenly spaced subset of at most 10,000 training images decides the channel format and
        # the mean/std, so every split gets the same DatasetInfo and loading only test/ stays fast.
        stats_files = by_split[stats_folder]
        subset = [stats_files[i] for i in _stats_indices(len(stats_files))]
        in_chans, img_size, mean, std = _sample_stats(tree, subset, f"{stats_folder}/ sample for mean/std")
        stats = {
            "version": _CACHE_VERSION,
            "folder": stats_folder,
            "in_chans": in_chans,
            "img_size": img_size,
            "mean": list(mean),
            "std": list(std),
            "n_images": len(subset),
            "source": str(path),
        }
        atomic_write_json(cache_sub / "stats.json", stats)
    info = DatasetInfo(
        name=f"imagefolder:{path}",
        slug=slug,
        num_classes=len(class_names),
        in_chans=int(stats["in_chans"]),
        img_size=int(stats["img_size"]),
        mean=tuple(float(v) for v in stats["mean"]),
        std=tuple(float(v) for v in stats["std"]),
        class_names=class_names,
    )
    return _Layout(info, {s: by_split[f] for s, f in folders.items()}, cache_sub)


_IMAGEFOLDER_ORDER_SEED = 20240528


def imagefolder_order(n: int) -> np.ndarray:
    """The fixed permutation ``load_split`` applies to an imagefolder split of ``n`` files (sorted order)."""
    return np.random.default_rng(_IMAGEFOLDER_ORDER_SEED).permutation(n)


def _load_imagefolder(arg: str, split: Split, cache: Path, download: bool) -> LoadResult:
    del download  # local data only
    with _open_tree(arg) as tree:
        layout = _imagefolder_layout(tree, cache)
        if split not in layout.files:
            wanted = "train/" if split == "train" else "test/ (or val/)"
            raise DataError(f"{tree.path}: no {wanted} folder with images")
        info, files = layout.info, layout.files[split]
        cache_file = layout.cache_sub / f"{split}.safetensors"
        images = _cached_decode(tree, files, cache_file, info.in_chans, info.img_size, split)
    class_index = {c: i for i, c in enumerate(info.class_names)}
    labels = np.array([class_index[c] for c, _ in files], dtype=np.int64)
    # Files come sorted class by class; a fixed shuffle makes "the first N test images" (subsets, attacks)
    # a class-mixed sample, as in the canonical CIFAR-10 / Fashion-MNIST orders.
    order = imagefolder_order(len(labels))
    return (*_tensors(images[order], labels[order]), info)


def _read_stats(path: Path, folder: str) -> dict | None:
    """The cached stats.json when it is readable and matches this cache version and source folder."""
    if not path.is_file():
        return None
    try:
        stats = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        logger.warning("ignoring unreadable %s (%s)", path, exc)
        return None
    if not isinstance(stats, dict) or stats.get("version") != _CACHE_VERSION or stats.get("folder") != folder:
        return None
    if not {"in_chans", "img_size", "mean", "std"} <= stats.keys():
        return None
    return stats


def _cached_decode(
    tree: _Tree, files: list[tuple[str, str]], cache_file: Path, in_chans: int, img_size: int, split: str
) -> np.ndarray:
    """Decoded pixels of one split, from the safetensors cache when it is valid, else decoded and cached."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file, save_file

    expected = (len(files), in_chans, img_size, img_size)
    if cache_file.is_file():
        try:
            images = load_file(str(cache_file))["images"]
            if images.shape == expected and images.dtype == np.uint8:
                logger.debug("using decoded cache %s", cache_file)
                return images
            logger.warning("ignoring stale decoded cache %s (shape %s)", cache_file, images.shape)
        except (SafetensorError, OSError, KeyError) as exc:
            logger.warning("ignoring unreadable decoded cache %s (%s)", cache_file, exc)
    logger.info(
        "decoding %d %s images from %s (cached afterwards in %s)", len(files), split, tree.path, cache_file
    )
    images = _decode_files(tree, files, in_chans, img_size, split)
    atomic_write(
        cache_file,
        lambda tmp: save_file(
            {"images": images}, str(tmp), metadata={"source": str(tree.path), "split": split}
        ),
    )
    return images


# ------------------------------------------------------------------------------------------------- synthetic
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
    name = "synthetic" if in_chans == 1 else "synthetic-rgb"
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


def _load_synthetic(in_chans: int) -> Callable[[str, Split, Path, bool], LoadResult]:
    def load(_: str, split: Split, cache: Path, download: bool) -> LoadResult:
        return (*_tensors(*_synthetic_arrays(in_chans, split)), _synthetic_info(in_chans))

    return load


_LOADERS: dict[str, Callable[[str, Split, Path, bool], LoadResult]] = {
    "fashion-mnist": _load_fashion_mnist,
    "cifar10": _load_cifar10,
    "imagefolder": _load_imagefolder,
    "synthetic": _load_synthetic(1),
    "synthetic-rgb": _load_synthetic(3),
}
