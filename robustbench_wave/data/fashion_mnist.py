"""Fashion-MNIST (Xiao, Rasul & Vollgraf 2017): the four idx files, located, verified and zero-padded.

The files are read from Debian's ``dataset-fashion-mnist`` package, the cache folder or a download (the
mirror torchvision uses); their decompressed payloads are checked against sha256 sums, which are robust to
Debian's re-gzipping. The 28x28 images are zero-padded to 32x32 so that wavelet levels divide evenly.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from robustbench_wave.data.base import DataError, DatasetInfo, LoadResult, Split, as_tensors
from robustbench_wave.data.download import download, missing_reason, where_to_put
from robustbench_wave.data.idx import read_idx
from robustbench_wave.data.sources import register_dataset

NAME = "fashion-mnist"


@dataclass(frozen=True)
class IdxFile:
    """One canonical file and its checksums."""

    filename: str  # canonical .gz name
    gz_md5: str  # of the canonical download only (Debian re-gzips, so never checked on local files)
    sha256: str  # of the decompressed payload


FILES = {
    ("train", "images"): IdxFile(
        "train-images-idx3-ubyte.gz",
        "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
        "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888",
    ),
    ("train", "labels"): IdxFile(
        "train-labels-idx1-ubyte.gz",
        "25c81989df183df01b3e8a0aad5dffbe",
        "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9",
    ),
    ("test", "images"): IdxFile(
        "t10k-images-idx3-ubyte.gz",
        "bef4ecab320f06d8554ea6380940ec79",
        "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b",
    ),
    ("test", "labels"): IdxFile(
        "t10k-labels-idx1-ubyte.gz",
        "bb300cfdad3c16e7a12a480ee83cd310",
        "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34",
    ),
}
MIRRORS = ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",)  # as torchvision
SYSTEM_DIRS = (Path("/usr/share/datasets/fashion-mnist"),)  # Debian: dataset-fashion-mnist
CLASSES = (
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
PAD = 2  # 28 -> 32
# Exact channel_stats of the padded 32x32 training split (the data are sha256-verified, so these are fixed).
MEAN = (0.21899983206954654,)
STD = (0.331811372999959,)
INFO = DatasetInfo(
    name=NAME,
    slug=NAME,
    num_classes=10,
    in_chans=1,
    img_size=28 + 2 * PAD,
    mean=MEAN,
    std=STD,
    class_names=CLASSES,
)


def _search_dirs(cache: Path) -> list[Path]:
    return [*SYSTEM_DIRS, cache / NAME, cache, cache / "FashionMNIST" / "raw"]


def _locate(spec: IdxFile, cache: Path, allow_download: bool) -> Path:
    """A local copy (gzipped or not) of one file, else a verified download into the cache."""
    dirs = _search_dirs(cache)
    for d in dirs:
        for name in (spec.filename, spec.filename.removesuffix(".gz")):
            if (d / name).is_file():
                return d / name
    errors: list[str] = []
    if allow_download:
        got, errors = download(
            [m + spec.filename for m in MIRRORS],
            cache / NAME / spec.filename,
            md5=spec.gz_md5,
            verify=lambda tmp: read_idx(tmp, sha256=spec.sha256),
        )
        if got is not None:
            return got
    searched = ", ".join(str(d) for d in dirs)
    raise DataError(
        f"Fashion-MNIST file {spec.filename} not found (searched {searched}) and {missing_reason(errors)}. "
        f"{where_to_put('the four idx .gz files', cache / NAME)}; on Debian, "
        "`sudo apt-get install dataset-fashion-mnist` installs them where they are found."
    )


@register_dataset(
    NAME,
    info=INFO,
    aliases=("fashionmnist", "fmnist"),
    image_note="the 28x28 originals zero-padded to 32x32, so that wavelet levels divide evenly",
)
def load_fashion_mnist(_: str, split: Split, cache: Path, allow_download: bool) -> LoadResult:
    """One split, padded to (N, 1, 32, 32)."""
    img_spec, lab_spec = FILES[(split, "images")], FILES[(split, "labels")]
    img_path = _locate(img_spec, cache, allow_download)
    images = read_idx(img_path, sha256=img_spec.sha256)
    lab_path = _locate(lab_spec, cache, allow_download)
    labels = read_idx(lab_path, sha256=lab_spec.sha256)
    if images.dtype != np.uint8 or images.ndim != 3 or labels.dtype != np.uint8 or labels.ndim != 1:
        raise DataError(f"{img_path} / {lab_path}: unexpected idx layout {images.shape} / {labels.shape}")
    if len(images) != len(labels):
        raise DataError(f"{img_path} has {len(images)} images but {lab_path} has {len(labels)} labels")
    padded = np.pad(images, ((0, 0), (PAD, PAD), (PAD, PAD)))[:, None]  # (N, 1, 32, 32)
    return (*as_tensors(padded, labels), INFO)
