"""The table of data sources: spec name (and aliases) -> loader + info, filled by :func:`register_dataset`.

A source module defines one loader ``(argument, split, cache folder, download) -> LoadResult`` and decorates
it with ``@register_dataset(name, info=...)``; importing :mod:`robustbench_wave.data` imports every source
module, so :func:`load_split`, :func:`dataset_info` and :func:`list_datasets` see it at once. A source with
``argument="PATH"`` takes specs of the form ``name:PATH`` (e.g. ``imagefolder:PATH``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from robustbench_wave.core.naming import did_you_mean
from robustbench_wave.data.base import SPLITS, DatasetInfo, LabelledImages, LoadResult, Split, to_float
from robustbench_wave.data.download import data_dir

logger = logging.getLogger(__name__)

#: ``(argument, split, cache folder, download allowed) -> (images, labels, info)``.
Loader = Callable[[str, Split, Path, bool], LoadResult]
#: ``(argument, cache folder) -> info`` without loading pixels where possible.
InfoGetter = Callable[[str, Path], DatasetInfo]


@dataclass(frozen=True)
class DatasetSource:
    """One registered data source."""

    name: str
    load: Loader
    info: InfoGetter
    aliases: tuple[str, ...] = ()
    argument: str | None = None  # e.g. "PATH": specs are "name:PATH"
    description: str = ""
    image_note: str = ""  # how the served images differ from the source's, e.g. padding

    @property
    def usage(self) -> str:
        """How the spec is written on the command line."""
        return f"{self.name}:{self.argument}" if self.argument else self.name


#: The data set a command trains or attacks when none is named (train, attack, gallery, ``benchmark()``).
DEFAULT_DATASET = "fashion-mnist"

_SOURCES: dict[str, DatasetSource] = {}
_ALIASES: dict[str, str] = {}


def _key(text: str) -> str:
    return text.strip().lower().replace("_", "-")


def register_dataset(
    name: str,
    *,
    info: DatasetInfo | InfoGetter,
    aliases: tuple[str, ...] = (),
    argument: str | None = None,
    description: str = "",
    image_note: str = "",
) -> Callable[[Loader], Loader]:
    """Decorator: register ``loader`` under ``name`` (and ``aliases``); ``info`` is fixed or computed."""

    def wrap(loader: Loader) -> Loader:
        keys = [_key(k) for k in (name, *aliases)]
        taken = [k for k in keys if k in _ALIASES]
        if taken:
            raise ValueError(f"data set name(s) {taken} are already registered; choose another name")
        getter = info if callable(info) else (lambda _arg, _cache, fixed=info: fixed)
        _SOURCES[name] = DatasetSource(
            name, loader, getter, tuple(aliases), argument, description, image_note
        )
        _ALIASES.update(dict.fromkeys(keys, name))
        return loader

    return wrap


def list_datasets() -> list[str]:
    """Every registered spec as written on the command line, in registration order."""
    return [source.usage for source in _SOURCES.values()]


def describe_images(info: DatasetInfo) -> str:
    """The one statement of the images a data set serves, for errors and docs: "fashion-mnist serves
    1x32x32 images (its 28x28 images zero-padded ...)"."""
    source = _SOURCES.get(_ALIASES.get(_key(info.name.partition(":")[0]), ""))
    note = f" ({source.image_note})" if source is not None and source.image_note else ""
    return f"{info.name} serves {info.in_chans}x{info.img_size}x{info.img_size} images{note}"


def describe_datasets() -> str:
    """One line for ``--help``: every spec, with the description of those that take an argument."""
    parts = [
        f"{s.usage} ({s.description})" if s.argument and s.description else s.usage for s in _SOURCES.values()
    ]
    return " | ".join(parts)


def resolve(spec: str) -> tuple[DatasetSource, str]:
    """The source of a spec and its argument (``""`` for sources without one)."""
    text = str(spec).strip()
    for source in _SOURCES.values():
        prefix = f"{source.name}:"
        if source.argument and text.lower().startswith(prefix):
            arg = text[len(prefix) :]
            if not arg:
                raise ValueError(
                    f"{source.name} spec needs a {source.argument.lower()}: "
                    f"{source.usage} ({source.description})"
                )
            return source, arg
    name = _ALIASES.get(_key(text))
    if name is None or _SOURCES[name].argument:
        hints = "".join(
            f" ({s.usage} is {s.description})" for s in _SOURCES.values() if s.argument and s.description
        )
        raise ValueError(
            f"unknown data set spec {spec!r}{did_you_mean(text, list_datasets())} "
            f"(valid specs: {', '.join(list_datasets())}{hints})"
        )
    return _SOURCES[name], ""


def load_split(
    spec: str, split: Split, *, root: str | os.PathLike | None = None, download: bool = True
) -> LoadResult:
    """Load one split as ``(images uint8 (N, C, H, W), labels int64 (N,), info)``.

    ``root`` overrides the cache directory (see :func:`~robustbench_wave.data.download.data_dir`);
    ``download=False`` never uses the network.
    """
    if split not in SPLITS:
        raise ValueError(
            f"split must be 'train' or 'test', got {split!r} (use train_val_split for validation)"
        )
    source, arg = resolve(spec)
    start = time.perf_counter()
    images, labels, info = source.load(arg, split, data_dir(root), download)
    logger.info(
        "loaded %s/%s: %d images %s in %.1f s",
        info.slug,
        split,
        len(labels),
        tuple(images.shape[1:]),
        time.perf_counter() - start,
    )
    return images, labels, info


def load_test_images(spec: str, n_examples: int) -> LabelledImages:
    """The first ``n_examples`` test images as floats in [0, 1], their labels and the data set's info (every
    test image, with a warning, when the split is smaller)."""
    images, labels, info = load_split(spec, "test")
    n = min(n_examples, len(labels))
    if n < n_examples:
        logger.warning("the test split has only %d images; attacking all of them", n)
    return LabelledImages(to_float(images[:n]), labels[:n], info)


def dataset_info(spec: str, *, root: str | os.PathLike | None = None) -> DatasetInfo:
    """The DatasetInfo that :func:`load_split` would return, without loading any pixels where possible.

    Fixed constants for fashion-mnist and cifar10 (no files needed); imagefolder reads its cached
    statistics (computing them on first use).  Useful to rebuild a model for a checkpoint.
    """
    source, arg = resolve(spec)
    return source.info(arg, data_dir(root))
