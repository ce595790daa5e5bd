"""CIFAR-10 (Krizhevsky 2009) from the canonical binary archive ``cifar-10-binary.tar.gz`` (no pickle).

The archive is md5-checked when found in the cache folder or downloaded; each record is a label byte
followed by the R, G and B planes of a 32x32 image. For a local JPEG copy use ``imagefolder:PATH``.
"""

from __future__ import annotations

import tarfile
from pathlib import Path

import numpy as np

from robustbench_wave.data.base import DataError, DatasetInfo, LoadResult, Split, as_tensors
from robustbench_wave.data.download import download, missing_reason, verify_md5_file, where_to_put
from robustbench_wave.data.sources import register_dataset

NAME = "cifar10"
ARCHIVE = "cifar-10-binary.tar.gz"
MD5 = "c32a1d4ab5d03f1284b67883e8d87530"
URLS = ("https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz",)
CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")
MEMBERS = {"train": tuple(f"data_batch_{i}.bin" for i in range(1, 6)), "test": ("test_batch.bin",)}
# Per-channel mean/std of the 50,000 training images (population std over all pixels).
MEAN = (0.49139968, 0.48215841, 0.44653091)
STD = (0.24703223, 0.24348513, 0.26158784)
_RECORD = 1 + 3 * 32 * 32  # label byte + R, G, B planes
INFO = DatasetInfo(
    name=NAME,
    slug=NAME,
    num_classes=10,
    in_chans=3,
    img_size=32,
    mean=MEAN,
    std=STD,
    class_names=CLASSES,
)


def _locate(cache: Path, allow_download: bool) -> Path:
    """The md5-verified archive from the cache folder, else downloaded into it."""
    candidates = [cache / NAME / ARCHIVE, cache / ARCHIVE]
    for path in candidates:
        if path.is_file():
            verify_md5_file(path, MD5, "CIFAR-10 binary version")
            return path
    errors: list[str] = []
    if allow_download:
        got_path, errors = download(URLS, candidates[0], md5=MD5)
        if got_path is not None:
            return got_path
    raise DataError(
        f"CIFAR-10 archive not found (searched {', '.join(map(str, candidates))}) and "
        f"{missing_reason(errors)}. "
        f"{where_to_put(f'{ARCHIVE} (from {URLS[0]})', cache / NAME)}; or use the data set "
        "imagefolder:PATH for a local copy of the images."
    )


def _read_members(archive: Path, wanted: tuple[str, ...]) -> dict[str, bytes]:
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
    return blobs


@register_dataset(NAME, info=INFO, aliases=("cifar-10",))
def load_cifar10(_: str, split: Split, cache: Path, allow_download: bool) -> LoadResult:
    """One split as (N, 3, 32, 32) in the archive's record order."""
    archive = _locate(cache, allow_download)
    wanted = MEMBERS[split]
    blobs = _read_members(archive, wanted)
    images, labels = [], []
    for name in wanted:
        data = blobs[name]
        if len(data) % _RECORD:
            raise DataError(f"{archive}:{name}: {len(data)} bytes is not a whole number of records")
        records = np.frombuffer(data, dtype=np.uint8).reshape(-1, _RECORD)
        labels.append(records[:, 0].astype(np.int64))
        images.append(records[:, 1:].reshape(-1, 3, 32, 32))
    lab = np.concatenate(labels)
    if lab.size and lab.max() >= 10:
        raise DataError(f"{archive}: label {int(lab.max())} out of range 0..9; the archive is corrupt")
    return (*as_tensors(np.concatenate(images), lab), INFO)
