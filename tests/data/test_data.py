"""Data loading against independent oracles: hand-written idx bytes, PIL-written images, torch statistics."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import struct
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from robustbench_wave import data
from robustbench_wave.core.runfolder import check_safe_name
from robustbench_wave.data import ChecksumError, DataError, DatasetInfo, cifar10, fashion_mnist
from robustbench_wave.data import sources as registry
from tests.support import REPO, datasets

FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")
CIFAR10_JPEG_ZIP = REPO.parent / "shared" / "data" / "cifar10-jpeg.zip"


# --------------------------------------------------------------------------------------------------- helpers
def idx_bytes(arr: np.ndarray) -> bytes:
    """The idx format written by hand: two zero bytes, dtype code, ndim, big-endian dims, data."""
    code = {np.dtype(np.uint8): 0x08, np.dtype(">i4"): 0x0C}[arr.dtype]
    return bytes([0, 0, code, arr.ndim]) + struct.pack(f">{arr.ndim}I", *arr.shape) + arr.tobytes()


def md5(b: bytes) -> str:
    return hashlib.md5(b).hexdigest()


def sha256(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def torch_stats(images: torch.Tensor) -> tuple[list[float], list[float]]:
    """Per-channel mean and population std from exact integer sums (chunked: no 500 MB float copy)."""
    total = torch.zeros(images.shape[1], dtype=torch.int64)
    squares = torch.zeros_like(total)
    for chunk in images.split(5000):
        x = chunk.to(torch.int64)
        total += x.sum(dim=(0, 2, 3))
        squares += (x * x).sum(dim=(0, 2, 3))
    n = images.numel() // images.shape[1]
    mean = total.double() / (n * 255.0)
    var = squares.double() / (n * 255.0**2) - mean * mean
    return mean.tolist(), var.sqrt().tolist()


@pytest.fixture
def fake_fashion(tmp_path, monkeypatch):
    """Tiny Fashion-MNIST look-alike: canonical-style gz files on a file:// mirror, checksums patched in."""
    rng = np.random.default_rng(0)
    arrays = {
        ("train", "images"): rng.integers(0, 256, (20, 28, 28), dtype=np.uint8),
        ("train", "labels"): (np.arange(20) % 10).astype(np.uint8),
        ("test", "images"): rng.integers(0, 256, (10, 28, 28), dtype=np.uint8),
        ("test", "labels"): (np.arange(10) % 10).astype(np.uint8),
    }
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    files = {}
    for key, arr in arrays.items():
        name = fashion_mnist.FILES[key].filename
        payload = idx_bytes(arr)
        gz = gzip.compress(payload)
        (mirror / name).write_bytes(gz)
        files[key] = fashion_mnist.IdxFile(name, md5(gz), sha256(payload))
    monkeypatch.setattr(fashion_mnist, "FILES", files)
    monkeypatch.setattr(fashion_mnist, "SYSTEM_DIRS", ())
    monkeypatch.setattr(fashion_mnist, "MIRRORS", (mirror.as_uri() + "/",))
    return arrays, mirror, tmp_path / "cache"


def write_png_tree(
    root: Path, layout: dict[str, dict[str, int]], *, mode: str = "RGB", size: int = 8
) -> dict:
    """Write random PNGs as root/<split>/<class>/<i>.png; return {(split, class, i): pixel array}."""
    rng = np.random.default_rng(1)
    pixels = {}
    for split, classes in layout.items():
        for cls, n in classes.items():
            (root / split / cls).mkdir(parents=True, exist_ok=True)
            for i in range(n):
                shape = (size, size, 3) if mode == "RGB" else (size, size)
                arr = rng.integers(0, 256, shape, dtype=np.uint8)
                Image.fromarray(arr, mode=mode).save(root / split / cls / f"{i:03d}.png")
                pixels[(split, cls, i)] = arr
    return pixels


def as_chw(arr: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1).copy())


# ------------------------------------------------------------------------------------------------ idx format
def test_parse_idx_hand_written():
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    raw = b"\x00\x00\x08\x03" + b"\x00\x00\x00\x02\x00\x00\x00\x03\x00\x00\x00\x04" + bytes(range(24))
    out = data.parse_idx(raw)
    assert out.dtype == np.uint8 and out.shape == (2, 3, 4)
    np.testing.assert_array_equal(out, images)
    ints = data.parse_idx(b"\x00\x00\x0c\x01\x00\x00\x00\x02" + b"\x00\x00\x01\x00" + b"\xff\xff\xff\xff")
    assert ints.tolist() == [256, -1]


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (b"\x01\x00\x08\x01\x00\x00\x00\x01\x07", "magic"),  # first byte not zero
        (b"\x00\x00\x07\x01\x00\x00\x00\x01\x07", "magic"),  # unknown dtype code
        (b"\x00\x00\x08\x02\x00\x00", "header truncated"),
        (b"\x00\x00\x08\x01\x00\x00\x00\x05\x01\x02", "truncated or corrupt"),  # 5 announced, 2 present
        (b"", "magic"),
    ],
)
def test_parse_idx_rejects_corrupt_data(raw, needle):
    with pytest.raises(DataError, match=needle) as err:
        data.parse_idx(raw, source="fake.idx")
    assert "fake.idx" in str(err.value)


def test_read_idx_gz_checksum_and_corruption(tmp_path):
    payload = idx_bytes(np.arange(10, dtype=np.uint8))
    good = tmp_path / "labels.gz"
    good.write_bytes(gzip.compress(payload))
    np.testing.assert_array_equal(data.read_idx(good, sha256=sha256(payload)), np.arange(10))
    # re-compressing (as Debian does) changes the gz bytes but not the payload checksum
    good.write_bytes(gzip.compress(payload, compresslevel=1, mtime=12345))
    np.testing.assert_array_equal(data.read_idx(good, sha256=sha256(payload)), np.arange(10))
    wrong = "0" * 64
    with pytest.raises(ChecksumError) as err:
        data.read_idx(good, sha256=wrong)
    assert str(good) in str(err.value) and wrong in str(err.value)
    broken = tmp_path / "broken.gz"
    broken.write_bytes(gzip.compress(payload)[:-12])
    with pytest.raises(DataError, match=r"broken\.gz"):
        data.read_idx(broken)


# --------------------------------------------------------------------------------------------- Fashion-MNIST
def test_fashion_mnist_download_verify_and_pad(fake_fashion):
    arrays, _, cache = fake_fashion
    images, labels, info = data.load_split("fashion-mnist", "train", root=cache)
    assert (cache / "fashion-mnist" / "train-images-idx3-ubyte.gz").is_file()
    assert images.dtype == torch.uint8 and images.shape == (20, 1, 32, 32)
    assert labels.dtype == torch.int64 and labels.tolist() == arrays[("train", "labels")].tolist()
    np.testing.assert_array_equal(images[:, 0, 2:30, 2:30].numpy(), arrays[("train", "images")])
    border = torch.ones(32, 32, dtype=torch.bool)
    border[2:30, 2:30] = False
    assert images[:, 0, border].eq(0).all()
    assert info.slug == "fashion-mnist" and info.in_chans == 1 and info.img_size == 32
    assert data.dataset_info("fashion-mnist") == info
    # second call reads the cached files, with downloads disabled
    again, _, _ = data.load_split("fashion-mnist", "train", root=cache, download=False)
    assert torch.equal(again, images)


def test_fashion_mnist_corrupt_download_is_deleted(fake_fashion):
    _, mirror, cache = fake_fashion
    name = "t10k-images-idx3-ubyte.gz"
    (mirror / name).write_bytes(gzip.compress(idx_bytes(np.zeros((10, 28, 28), np.uint8))))
    with pytest.raises(ChecksumError, match="md5") as err:
        data.load_split("fashion-mnist", "test", root=cache)
    assert fashion_mnist.FILES[("test", "images")].gz_md5 in str(err.value)
    assert not (cache / "fashion-mnist" / name).exists()
    assert not [p.name for p in (cache / "fashion-mnist").iterdir() if p.name.startswith(f".{name}")]


def test_fashion_mnist_payload_mismatch_after_download_is_deleted(fake_fashion, monkeypatch):
    _, _, cache = fake_fashion
    key = ("test", "labels")
    spec = fashion_mnist.FILES[key]
    patched = dict(fashion_mnist.FILES)
    patched[key] = fashion_mnist.IdxFile(spec.filename, spec.gz_md5, "f" * 64)  # gz fine, payload "wrong"
    monkeypatch.setattr(fashion_mnist, "FILES", patched)
    with pytest.raises(ChecksumError, match="f" * 64):
        data.load_split("fashion-mnist", "test", root=cache)
    assert not (cache / "fashion-mnist" / spec.filename).exists()


def test_fashion_mnist_local_mismatch_names_file(fake_fashion):
    _, _, cache = fake_fashion
    local = cache / "fashion-mnist"
    local.mkdir(parents=True)
    name = "t10k-images-idx3-ubyte.gz"  # a valid idx file, but not the expected content
    (local / name).write_bytes(gzip.compress(idx_bytes(np.zeros((10, 28, 28), np.uint8))))
    with pytest.raises(ChecksumError) as err:
        data.load_split("fashion-mnist", "test", root=cache, download=False)
    msg = str(err.value)
    assert name in msg and fashion_mnist.FILES[("test", "images")].sha256 in msg


def test_fashion_mnist_missing_says_how_to_get_it(fake_fashion):
    _, _, cache = fake_fashion
    with pytest.raises(DataError) as err:
        data.load_split("fashion-mnist", "train", root=cache, download=False)
    msg = str(err.value)
    assert "apt-get install dataset-fashion-mnist" in msg and "RBW_DATA_DIR" in msg and "download" in msg


def test_the_tests_take_the_stand_in_exactly_when_fashion_mnist_is_missing(fake_fashion, monkeypatch):
    """tests/support/datasets.py: Fashion-MNIST counts as installed once its four files are in the data folder,
    and deciding downloads nothing; the stand-in has its classes, channels and size."""
    _, _, cache = fake_fashion
    monkeypatch.setenv(data.DATA_DIR_ENV, str(cache))
    assert not datasets.fashion_mnist_installed()
    assert not cache.exists()  # not downloaded to find out
    for split in ("train", "test"):
        data.load_split("fashion-mnist", split)  # the download into the data folder
    assert datasets.fashion_mnist_installed()
    real, stand_in = data.dataset_info("fashion-mnist"), data.dataset_info(datasets.GRAY_STAND_IN)
    assert (stand_in.num_classes, stand_in.in_chans, stand_in.img_size) == (10, 1, 32)
    assert (real.num_classes, real.in_chans, real.img_size) == (10, 1, 32)


@pytest.mark.skipif(
    not all((FASHION_DIR / f.filename).is_file() for f in fashion_mnist.FILES.values()),
    reason="Debian package dataset-fashion-mnist not installed",
)
def test_fashion_mnist_real(tmp_path):
    train_x, train_y, info = data.load_split("fashion-mnist", "train", root=tmp_path, download=False)
    test_x, test_y, test_info = data.load_split("fashion-mnist", "test", root=tmp_path, download=False)
    assert info == test_info and info.num_classes == 10 and len(info.class_names) == 10
    assert train_x.shape == (60000, 1, 32, 32) and test_x.shape == (10000, 1, 32, 32)
    assert train_x.dtype == torch.uint8 and train_y.dtype == torch.int64
    assert train_y.bincount().tolist() == [6000] * 10 and test_y.bincount().tolist() == [1000] * 10
    for x in (train_x, test_x):
        assert x[..., :2, :].eq(0).all() and x[..., 30:, :].eq(0).all()
        assert x[..., :2].eq(0).all() and x[..., 30:].eq(0).all()
    # oracle: the documented fixed layout (16-byte header, then 28x28 row-major images)
    raw = gzip.decompress((FASHION_DIR / "t10k-images-idx3-ubyte.gz").read_bytes())
    expected = np.frombuffer(raw, np.uint8, offset=16).reshape(10000, 28, 28)
    np.testing.assert_array_equal(test_x[:, 0, 2:30, 2:30].numpy(), expected)
    mean, std = torch_stats(train_x)
    assert info.mean == pytest.approx(mean, abs=1e-9) and info.std == pytest.approx(std, abs=1e-9)
    assert not list(tmp_path.glob("fashion-mnist"))  # system files used, nothing copied


# -------------------------------------------------------------------------------------------------- CIFAR-10
def test_cifar10_binary_archive_layout(tmp_path, monkeypatch):
    rng = np.random.default_rng(2)
    records = {}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name in [*cifar10.MEMBERS["train"], *cifar10.MEMBERS["test"], "batches.meta.txt"]:
            rec = rng.integers(0, 256, (3, 1 + 3072), dtype=np.uint8)
            rec[:, 0] = rng.integers(0, 10, 3)
            records[name] = rec
            blob = rec.tobytes()
            member = tarfile.TarInfo(f"cifar-10-batches-bin/{name}")
            member.size = len(blob)
            tar.addfile(member, io.BytesIO(blob))
    archive = buf.getvalue()
    mirror = tmp_path / "mirror" / cifar10.ARCHIVE
    mirror.parent.mkdir()
    mirror.write_bytes(archive)
    monkeypatch.setattr(cifar10, "MD5", md5(archive))
    monkeypatch.setattr(cifar10, "URLS", (mirror.as_uri(),))
    cache = tmp_path / "cache"

    images, labels, info = data.load_split("cifar10", "test", root=cache)
    assert (cache / "cifar10" / cifar10.ARCHIVE).is_file()
    rec = records["test_batch.bin"]
    assert images.shape == (3, 3, 32, 32) and labels.tolist() == rec[:, 0].tolist()
    # oracle: byte 1 + c*1024 + y*32 + x of a record is pixel (c, y, x)
    for i in range(3):
        for c, y, x in [(0, 0, 0), (1, 5, 7), (2, 31, 31), (0, 31, 0)]:
            assert images[i, c, y, x].item() == rec[i, 1 + c * 1024 + y * 32 + x]
    train_x, train_y, _ = data.load_split("cifar10", "train", root=cache, download=False)
    assert train_x.shape == (15, 3, 32, 32)
    expected = np.concatenate([records[n][:, 0] for n in cifar10.MEMBERS["train"]])
    assert train_y.tolist() == expected.tolist()
    assert info.in_chans == 3 and info.class_names[0] == "airplane" and info.slug == "cifar10"

    monkeypatch.setattr(cifar10, "MD5", "0" * 32)
    with pytest.raises(ChecksumError, match="0" * 32):
        data.load_split("cifar10", "test", root=cache)


def test_cifar10_corrupt_download_deleted_and_missing_message(tmp_path, monkeypatch):
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(b"not an archive")
    monkeypatch.setattr(cifar10, "URLS", (bad.as_uri(),))
    cache = tmp_path / "cache"
    with pytest.raises(ChecksumError, match=cifar10.MD5):
        data.load_split("cifar10", "train", root=cache)
    assert not any((cache / "cifar10").iterdir())
    with pytest.raises(DataError, match="download=False"):
        data.load_split("cifar10", "train", root=cache, download=False)


# ----------------------------------------------------------------------------------------------- ImageFolder
def file_order(images: torch.Tensor, labels: torch.Tensor | None = None):
    """Undo load_split's fixed imagefolder shuffle: rows back in sorted file order."""
    inverse = torch.from_numpy(np.argsort(data.imagefolder_order(len(images))))
    return images[inverse] if labels is None else (images[inverse], labels[inverse])


def test_imagefolder_order_mixes_classes(tmp_path):
    tree = tmp_path / "sorted"
    write_png_tree(tree, {"train": {"a": 1}, "test": {"a": 20, "b": 20}})
    _, labels, _ = data.load_split(f"imagefolder:{tree}", "test", root=tmp_path / "cache")
    assert sorted(labels.tolist()) == [0] * 20 + [1] * 20
    assert 0 < labels[:10].sum() < 10  # the first images are not all from the first class folder


def test_imagefolder_directory_pixels_labels_stats_and_cache(tmp_path):
    tree = tmp_path / "My Set"
    pixels = write_png_tree(tree, {"train": {"cat": 3, "dog": 2}, "test": {"cat": 1, "dog": 2, "eel": 1}})
    cache = tmp_path / "cache"
    images, labels, info = data.load_split(f"imagefolder:{tree}", "test", root=cache)
    images, labels = file_order(images, labels)
    # classes are the union over splits, sorted, so train and test agree on indices
    assert info.class_names == ("cat", "dog", "eel") and info.num_classes == 3
    assert info.slug == "imagefolder-my-set" and info.in_chans == 3 and info.img_size == 8
    order = [("cat", 0), ("dog", 0), ("dog", 1), ("eel", 0)]
    assert labels.tolist() == [0, 1, 1, 2]
    for k, (cls, i) in enumerate(order):
        assert torch.equal(images[k], as_chw(pixels[("test", cls, i)]))
    train_x, train_y, train_info = data.load_split(info.name, "train", root=cache)
    assert train_info == info and file_order(train_x, train_y)[1].tolist() == [0, 0, 0, 1, 1]
    assert data.dataset_info(f"imagefolder:{tree}", root=cache) == info
    mean, std = torch_stats(train_x)
    assert info.mean == pytest.approx(mean, abs=1e-9) and info.std == pytest.approx(std, abs=1e-9)
    cached = list(cache.glob("imagefolder/*/*.safetensors"))
    assert sorted(p.name for p in cached) == ["test.safetensors", "train.safetensors"]
    # cached read gives the same; a changed file invalidates the cache
    again, _, _ = data.load_split(f"imagefolder:{tree}", "test", root=cache)
    assert torch.equal(file_order(again), images)
    new = np.full((8, 8, 3), 7, np.uint8)
    Image.fromarray(new).save(tree / "test" / "cat" / "000.png")
    os.utime(tree / "test" / "cat" / "000.png", ns=(1, 1))
    changed = file_order(data.load_split(f"imagefolder:{tree}", "test", root=cache)[0])
    assert torch.equal(changed[0], as_chw(new)) and torch.equal(changed[1:], images[1:])


def test_imagefolder_zip_grayscale_wrapper_and_val(tmp_path):
    src = tmp_path / "src"
    pixels = write_png_tree(src / "wrapped", {"train": {"a": 2, "b": 2}, "val": {"a": 1, "b": 1}}, mode="L")
    archive = tmp_path / "gray_set.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted(src.rglob("*.png")):
            zf.write(path, path.relative_to(src).as_posix())
    images, labels, info = data.load_split(f"imagefolder:{archive}", "test", root=tmp_path / "cache")
    images, labels = file_order(images, labels)
    assert info.in_chans == 1 and images.shape == (2, 1, 8, 8) and labels.tolist() == [0, 1]
    assert info.slug == "imagefolder-gray-set"
    assert torch.equal(images[1], as_chw(pixels[("val", "b", 0)]))


def test_imagefolder_errors(tmp_path):
    mixed = tmp_path / "mixed"
    write_png_tree(mixed, {"train": {"a": 2}})
    Image.fromarray(np.zeros((10, 12, 3), np.uint8)).save(mixed / "train" / "a" / "odd.png")
    with pytest.raises(DataError, match="12x10"):
        data.load_split(f"imagefolder:{mixed}", "train", root=tmp_path / "cache")
    flat = tmp_path / "flat"
    write_png_tree(flat, {"a": {"x": 1}})
    with pytest.raises(DataError, match="train/<class>"):
        data.load_split(f"imagefolder:{flat}", "train", root=tmp_path / "cache")
    with pytest.raises(DataError, match="does not exist"):
        data.load_split(f"imagefolder:{tmp_path / 'nope'}", "train", root=tmp_path / "cache")
    only_train = tmp_path / "only_train"
    write_png_tree(only_train, {"train": {"a": 1}})
    with pytest.raises(DataError, match="test/"):
        data.load_split(f"imagefolder:{only_train}", "test", root=tmp_path / "cache")


@pytest.mark.slow
@pytest.mark.skipif(not CIFAR10_JPEG_ZIP.is_file(), reason="shared/data/cifar10-jpeg.zip not present")
def test_imagefolder_cifar10_jpeg_zip_test_split(tmp_path):
    images, labels, info = data.load_split(f"imagefolder:{CIFAR10_JPEG_ZIP}", "test", root=tmp_path)
    assert labels[:1000].bincount().min() > 50  # "the first N" is a class-mixed sample
    images, labels = file_order(images, labels)
    assert images.shape == (10000, 3, 32, 32) and images.dtype == torch.uint8
    assert labels.bincount().tolist() == [1000] * 10
    assert info.slug == "imagefolder-cifar10-jpeg" and info.class_names == cifar10.CLASSES
    # oracle: direct PIL decode of members (sorted order: class folder, then file name)
    with zipfile.ZipFile(CIFAR10_JPEG_ZIP) as zf:
        names = sorted(n for n in zf.namelist() if n.startswith("test/") and n.endswith(".jpg"))
        for k in (0, 4321, 9999):
            with Image.open(io.BytesIO(zf.read(names[k]))) as im:
                assert torch.equal(images[k], as_chw(np.asarray(im.convert("RGB"))))
            assert labels[k].item() == cifar10.CLASSES.index(names[k].split("/")[1])
    # statistics from the training images are close to canonical CIFAR-10's (JPEG shifts them slightly)
    assert info.mean == pytest.approx(cifar10.MEAN, abs=5e-3)
    assert info.std == pytest.approx(cifar10.STD, abs=5e-3)


# ------------------------------------------------------------------------------------------------- synthetic
@pytest.mark.parametrize(("spec", "chans"), [("synthetic", 1), ("synthetic-rgb", 3)])
def test_synthetic_deterministic_and_learnable(spec, chans):
    x, y, info = data.load_split(spec, "train")
    xt, yt, info_t = data.load_split(spec, "test")
    assert info == info_t and info.in_chans == chans and info.img_size == 32 and info.num_classes == 10
    assert data.dataset_info(spec) == info
    assert x.shape == (5000, chans, 32, 32) and xt.shape == (1000, chans, 32, 32)
    assert y.bincount().tolist() == [500] * 10 and yt.bincount().tolist() == [100] * 10
    x.zero_()  # callers own their copy: the generator's cache must not change
    x2, y2, _ = data.load_split(spec, "train")
    assert x2.float().std() > 10 and torch.equal(y2, y)
    assert torch.equal(x2, data.load_split(spec, "train")[0])
    mean, std = torch_stats(x2)
    assert info.mean == pytest.approx(mean, abs=1e-9) and info.std == pytest.approx(std, abs=1e-9)
    # learnable: a nearest-class-mean classifier fitted on train is nearly perfect on test
    xf, xtf = data.to_float(x2).flatten(1), data.to_float(xt).flatten(1)
    centroids = torch.stack([xf[y2 == k].mean(0) for k in range(10)])
    accuracy = (torch.cdist(xtf, centroids).argmin(1) == yt).float().mean().item()
    assert accuracy > 0.9


# ------------------------------------------------------------------------------------ helpers and validation
def test_train_val_split_properties():
    tr, va = data.train_val_split(103, 0.2, seed=5)
    assert len(va) == 21 and len(tr) == 82
    assert torch.equal(torch.cat([tr, va]).sort().values, torch.arange(103))
    tr2, va2 = data.train_val_split(103, 0.2, seed=5)
    assert torch.equal(tr, tr2) and torch.equal(va, va2)
    assert not torch.equal(va, data.train_val_split(103, 0.2, seed=6)[1])
    assert len(data.train_val_split(10, 0.0, seed=0)[1]) == 0
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match="val_fraction"):
            data.train_val_split(10, bad, seed=0)


def test_unknown_spec_and_split():
    with pytest.raises(ValueError, match="fashion-mnist") as err:
        data.load_split("mnist-ish", "train")
    for spec in data.list_datasets():
        assert spec in str(err.value)
    with pytest.raises(ValueError, match="train"):
        data.load_split("synthetic", "validation")


def test_to_float_and_info_roundtrip():
    x = torch.tensor([[[[0, 128, 255]]]], dtype=torch.uint8)
    f = data.to_float(x)
    assert f.dtype == torch.float32 and f.flatten().tolist() == pytest.approx([0.0, 128 / 255, 1.0])
    with pytest.raises(ValueError, match="uint8"):
        data.to_float(f)
    info = data.load_split("synthetic-rgb", "test")[2]
    assert DatasetInfo.from_dict(json.loads(json.dumps(info.to_dict()))) == info


def test_augment_is_a_seeded_crop_or_flip_of_each_image():
    x = torch.rand(6, 3, 8, 8)
    out = data.augment(x, torch.Generator().manual_seed(0), padding=2)
    assert torch.equal(out, data.augment(x, torch.Generator().manual_seed(0), padding=2))
    padded = torch.nn.functional.pad(x, (2, 2, 2, 2))
    for i in range(6):
        crops = [padded[i, :, r : r + 8, c : c + 8] for r in range(5) for c in range(5)]
        assert any(torch.equal(out[i], v) or torch.equal(out[i], v.flip(-1)) for v in crops)
    assert torch.equal(data.augment(x, torch.Generator(), padding=0, flip=False), x)
    gray = torch.rand(32, 1, 8, 8)
    out = data.augment(gray, torch.Generator().manual_seed(1), padding=0)  # gray: no flip by default
    assert torch.equal(out, gray)
    flipped = data.augment(x, torch.Generator().manual_seed(1), padding=0, flip=True)
    assert all(torch.equal(flipped[i], x[i]) or torch.equal(flipped[i], x[i].flip(-1)) for i in range(6))


def test_iterate_batches_covers_each_example_once():
    images = torch.arange(10, dtype=torch.uint8).view(10, 1, 1, 1).expand(10, 1, 2, 2).contiguous()
    labels = torch.arange(10)
    batches = list(data.iterate_batches(images, labels, 4, generator=torch.Generator().manual_seed(3)))
    assert [len(b[1]) for b in batches] == [4, 4, 2]
    seen = torch.cat([b[1] for b in batches])
    assert sorted(seen.tolist()) == list(range(10)) and seen.tolist() != list(range(10))
    for x, y in batches:
        assert torch.allclose(x[:, 0, 0, 0], y.float() / 255)
    fixed = list(data.iterate_batches(images, labels, 4, drop_last=True))
    assert torch.cat([b[1] for b in fixed]).tolist() == list(range(8))
    with pytest.raises(ValueError, match="Generator"):
        next(data.iterate_batches(images, labels, 4, augmentation=True))


def test_imagefolder_one_colour_image_makes_the_set_rgb(tmp_path):
    tree = tmp_path / "mixed_modes"
    pixels = write_png_tree(tree, {"train": {"a": 2}, "test": {"a": 1}}, mode="L")
    Image.fromarray(np.full((8, 8, 3), (10, 20, 30), np.uint8)).save(tree / "train" / "a" / "zz.png")
    images, _, info = data.load_split(f"imagefolder:{tree}", "train", root=tmp_path / "cache")
    images = file_order(images)
    assert info.in_chans == 3 and images.shape == (3, 3, 8, 8)
    gray = torch.from_numpy(pixels[("train", "a", 0)])
    assert all(torch.equal(images[0, c], gray) for c in range(3))  # gray replicated
    assert images[2, :, 0, 0].tolist() == [10, 20, 30]
    test_x, _, _ = data.load_split(f"imagefolder:{tree}", "test", root=tmp_path / "cache")
    assert test_x.shape == (1, 3, 8, 8)


# ------------------------------------------------------------------------------------------------- registry
def _tiny_image_folder(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    write_png_tree(tree, {"train": {"a": 3, "b": 2, "c": 2}, "test": {"a": 1, "b": 2, "c": 1}})
    return tree


#: For each registered source that takes an argument (``NAME:ARG``): a function writing an example of that
#: argument under a tmp folder, so the contract below can load it offline.
OFFLINE_ARGUMENTS: dict[str, Callable[[Path], Path]] = {"imagefolder": _tiny_image_folder}


def _offline_spec(usage: str, tmp_path: Path) -> str:
    """A spec of the registered source ``usage`` (as list_datasets writes it) that needs no network."""
    name, _, argument = usage.partition(":")
    if not argument:
        return name
    if name not in OFFLINE_ARGUMENTS:
        pytest.skip(f"{usage}: no offline example of its {argument}; add one to OFFLINE_ARGUMENTS")
    return f"{name}:{OFFLINE_ARGUMENTS[name](tmp_path)}"


def _check_info(info: DatasetInfo) -> None:
    """What every DatasetInfo must say for a model to be built on it and a run folder named after it."""
    assert info.in_chans in (1, 3) and info.img_size > 0 and info.num_classes >= 2
    assert len(info.class_names) == len(set(info.class_names)) == info.num_classes
    assert len(info.mean) == len(info.std) == info.in_chans
    assert all(0.0 <= m <= 1.0 for m in info.mean) and all(s > 0.0 for s in info.std)
    assert check_safe_name(info.slug, "slug") == info.slug


def _check_source(usage: str, tmp_path: Path) -> None:
    """Each split is uint8 (N, C, H, W) pixels with int64 labels in range, and the DatasetInfo it comes with is
    the one dataset_info gives without loading pixels (a source with no files here is skipped, naming why)."""
    spec = _offline_spec(usage, tmp_path)
    cache = tmp_path / "cache" if ":" in usage else None  # else wherever this machine keeps its data sets
    try:
        splits = {
            split: data.load_split(spec, split, root=cache, download=False) for split in ("train", "test")
        }
    except DataError as err:
        if ":" in usage or isinstance(err, ChecksumError):  # an example written here must load
            raise
        pytest.skip(f"{usage} is not on this machine: {err}")
    info = data.dataset_info(spec, root=cache)
    _check_info(info)
    for split, (images, labels, got) in splits.items():
        assert got == info, split
        assert images.dtype == torch.uint8 and labels.dtype == torch.int64, split
        assert images.shape[1:] == (info.in_chans, info.img_size, info.img_size), split
        assert labels.shape == (len(images),) and len(labels) > 0, split
        assert labels.min() >= 0 and labels.max() < info.num_classes, split
    assert data.dataset_info(info.name, root=cache) == info  # the canonical name is the same data set again


@pytest.mark.parametrize("usage", data.list_datasets())
def test_every_registered_source_loads_what_its_info_says(usage: str, tmp_path: Path) -> None:
    _check_source(usage, tmp_path)


@pytest.mark.parametrize(
    ("lie", "images", "labels"),
    [("colour pixels", torch.zeros(3, 3, 4, 4, dtype=torch.uint8), torch.tensor([0, 1, 0])),
     ("float pixels", torch.zeros(3, 1, 4, 4), torch.tensor([0, 1, 0])),
     ("a third class", torch.zeros(3, 1, 4, 4, dtype=torch.uint8), torch.tensor([0, 1, 2]))],
)  # fmt: skip
def test_the_contract_catches_a_source_that_lies(lie, images, labels, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(registry, "_SOURCES", dict(registry._SOURCES))
    monkeypatch.setattr(registry, "_ALIASES", dict(registry._ALIASES))
    info = DatasetInfo("liar", "liar", 2, 1, 4, (0.5,), (0.25,), ("a", "b"))
    data.register_dataset("liar", info=info)(lambda arg, split, cache, download: (images, labels, info))
    with pytest.raises(AssertionError):
        _check_source("liar", tmp_path)


@pytest.mark.parametrize(
    ("alias", "name"),
    [("fmnist", "fashion-mnist"), ("Fashion_MNIST", "fashion-mnist"), ("CIFAR-10", "cifar10"),
     ("synthetic-gray", "synthetic"), (" synthetic-rgb ", "synthetic-rgb")],
)  # fmt: skip
def test_known_aliases_name_their_data_set(alias: str, name: str) -> None:
    assert data.dataset_info(alias).name == name


def test_a_source_with_an_argument_is_written_name_colon_argument() -> None:
    with pytest.raises(ValueError, match="needs a path"):
        data.load_split("imagefolder:", "train")
    with pytest.raises(ValueError, match="unknown data set"):
        data.load_split("imagefolder", "train")  # a source with an argument needs NAME:ARG


def test_a_new_source_is_one_registered_loader(tmp_path, monkeypatch):
    """Registering a loader is all it takes: load_split, dataset_info and the listing find it."""
    monkeypatch.setattr(registry, "_SOURCES", dict(registry._SOURCES))
    monkeypatch.setattr(registry, "_ALIASES", dict(registry._ALIASES))
    info = DatasetInfo("ones", "ones", 2, 1, 4, (1.0,), (0.0,), ("a", "b"))
    seen = []

    @data.register_dataset("ones", info=info, aliases=("all-ones",))
    def load_ones(arg, split, cache, download):
        seen.append((arg, split, cache, download))
        return torch.full((3, 1, 4, 4), 255, dtype=torch.uint8), torch.tensor([0, 1, 0]), info

    images, labels, got = data.load_split("ALL_ONES", "test", root=tmp_path, download=False)
    assert got == info and images.shape == (3, 1, 4, 4) and labels.tolist() == [0, 1, 0]
    assert seen == [("", "test", tmp_path, False)]
    assert data.dataset_info("ones") == info and "ones" in data.list_datasets()
    with pytest.raises(ValueError, match="already registered"):
        data.register_dataset("fmnist", info=info)(load_ones)
