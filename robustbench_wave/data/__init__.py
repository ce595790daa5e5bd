"""Data sets for training and attacking: every split comes back as uint8 pixels plus int64 labels.

This package owns loading, verifying and batching data. One module per source (:mod:`.fashion_mnist`,
:mod:`.cifar10`, :mod:`.imagefolder`, :mod:`.synthetic`) registers itself in :mod:`.sources`; downloads
and checksums live in :mod:`.download`, the idx format in :mod:`.idx`, the shared types and pixel helpers
in :mod:`.base` (:class:`LabelledImages`: float images with their labels and info, as
:func:`load_test_images` returns them), and the training-time split, batches and augmentation in
:mod:`.batches`. To add a data set, write one module with a loader decorated by :func:`register_dataset`
and import it below.

Specs accepted by :func:`load_split` (see :func:`list_datasets`): ``fashion-mnist`` (default of the CLIs),
``cifar10``, ``imagefolder:PATH`` (a directory or .zip with ``train/`` and ``test/`` class folders),
``synthetic`` and ``synthetic-rgb``.
"""

from robustbench_wave.data import cifar10, fashion_mnist, imagefolder, synthetic  # noqa: F401 - registration
from robustbench_wave.data.base import (
    ChecksumError,
    DataError,
    DatasetInfo,
    LabelledImages,
    LoadResult,
    Split,
    channel_stats,
    to_float,
)
from robustbench_wave.data.batches import augment, iterate_batches, train_val_split
from robustbench_wave.data.download import DATA_DIR_ENV, data_dir
from robustbench_wave.data.idx import parse_idx, read_idx
from robustbench_wave.data.imagefolder import imagefolder_order
from robustbench_wave.data.sources import (
    DEFAULT_DATASET,
    dataset_info,
    describe_datasets,
    describe_images,
    list_datasets,
    load_split,
    load_test_images,
    register_dataset,
)

__all__ = [
    "DATA_DIR_ENV",
    "DEFAULT_DATASET",
    "ChecksumError",
    "DataError",
    "DatasetInfo",
    "LabelledImages",
    "LoadResult",
    "Split",
    "augment",
    "channel_stats",
    "data_dir",
    "dataset_info",
    "describe_datasets",
    "describe_images",
    "imagefolder_order",
    "iterate_batches",
    "list_datasets",
    "load_split",
    "load_test_images",
    "parse_idx",
    "read_idx",
    "register_dataset",
    "to_float",
    "train_val_split",
]
