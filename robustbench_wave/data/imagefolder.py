"""A class-per-folder image tree (``train/<class>/*``, ``test/<class>/*`` or ``val/``) as a data set.

The tree may be a directory or a .zip archive (a single wrapper folder is skipped). Images are decoded once
with Pillow and cached as safetensors in the cache folder; the channel format and the normalisation
statistics come from a fixed sample of at most 10,000 training images and are cached as JSON, so every
split gets the same :class:`DatasetInfo`. A changed file changes the cache key.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from robustbench_wave.core.io import atomic_write, atomic_write_json
from robustbench_wave.data.base import (
    DataError,
    DatasetInfo,
    LoadResult,
    Split,
    as_tensors,
    slugify,
    stats_from_counts,
)
from robustbench_wave.data.sources import register_dataset

logger = logging.getLogger(__name__)

NAME = "imagefolder"
DESCRIPTION = "a class-per-folder directory or .zip with train/ and test/ subfolders"
SPLIT_FOLDERS = ("train", "test", "val")


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
        if tops & set(SPLIT_FOLDERS) or len(tops) != 1 or any("/" not in r for r in rest):
            break
        prefix += tops.pop() + "/"
    return prefix


def _split_files(tree: _Tree) -> dict[str, list[tuple[str, str]]]:
    """split folder -> sorted [(class name, member name)]."""
    out: dict[str, list[tuple[str, str]]] = {}
    for name in tree.names:
        parts = name[len(tree.prefix) :].split("/")
        if len(parts) >= 3 and parts[0] in SPLIT_FOLDERS:
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
    mean, std = stats_from_counts(counts[:in_chans])
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
        raise DataError(f"imagefolder path {path} does not exist (spec {NAME}:{arg})")
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
    slug = f"{NAME}-" + slugify(path.stem if tree.is_zip else path.name)
    cache_sub = cache / NAME / f"{slug}-{tree.fingerprint()[:16]}"

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
        name=f"{NAME}:{path}",
        slug=slug,
        num_classes=len(class_names),
        in_chans=int(stats["in_chans"]),
        img_size=int(stats["img_size"]),
        mean=tuple(float(v) for v in stats["mean"]),
        std=tuple(float(v) for v in stats["std"]),
        class_names=class_names,
    )
    return _Layout(info, {s: by_split[f] for s, f in folders.items()}, cache_sub)


def imagefolder_info(arg: str, cache: Path) -> DatasetInfo:
    """The DatasetInfo of a tree from its cached statistics (computed on first use)."""
    with _open_tree(arg) as tree:
        return _imagefolder_layout(tree, cache).info


_IMAGEFOLDER_ORDER_SEED = 20240528


def imagefolder_order(n: int) -> np.ndarray:
    """The fixed permutation ``load_split`` applies to an imagefolder split of ``n`` files (sorted order)."""
    return np.random.default_rng(_IMAGEFOLDER_ORDER_SEED).permutation(n)


@register_dataset(NAME, info=imagefolder_info, argument="PATH", description=DESCRIPTION)
def load_imagefolder(arg: str, split: Split, cache: Path, allow_download: bool) -> LoadResult:
    """One split of a local tree, decoded once and cached; rows in a fixed class-mixing order."""
    del allow_download  # local data only
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
    return (*as_tensors(images[order], labels[order]), info)


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
