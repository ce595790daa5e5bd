"""The export's standard budgets follow the data set's identity, not the name it was loaded under (issue 22):
CIFAR-10 read from the image-folder zip is CIFAR-10, exported at RobustBench's 8/255."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pandas as pd

from robustbench_wave.data import dataset_info
from robustbench_wave.reporting.export import _dataset, benchmark, export_eps
from robustbench_wave.reporting.runs import RunFolder

GRID = [2 / 255, 4 / 255, 8 / 255]
ZIP = "imagefolder:../shared/data/cifar10-jpeg.zip"


def _zip_info(**changes) -> dict:
    """CIFAR-10 as the image-folder loader describes the zip: its own name, slug and statistics."""
    cifar = dataset_info("cifar10")
    return replace(cifar, name=ZIP, slug="cifar10-jpeg", mean=(0.5, 0.5, 0.5), **changes).to_dict()


def test_cifar10_from_the_image_folder_is_cifar10():
    assert benchmark(ZIP, _zip_info()) == "cifar10"
    assert export_eps(benchmark(ZIP, _zip_info()), "Linf", GRID)[0] == 8 / 255
    assert export_eps(ZIP, "Linf", GRID)[0] == 4 / 255  # by name (the old rule): the grid's middle
    run = RunFolder(
        Path("run"), pd.DataFrame(), {"dataset": {"name": ZIP, "info": _zip_info()}, "data_sha256": "x"}
    )
    assert _dataset([run]) == "cifar10"  # also the model_info folder and the JSON's "dataset"


def test_other_data_keep_their_name():
    other = _zip_info(class_names=tuple(f"c{i}" for i in range(10)))
    assert benchmark(ZIP, other) == ZIP  # ten 32x32 RGB classes, but not CIFAR-10's
    assert benchmark(ZIP, _zip_info(img_size=64)) == ZIP
    fmnist = dataset_info("fashion-mnist")
    assert benchmark("fashion-mnist", fmnist.to_dict()) == "fashion-mnist"
    assert benchmark("cifar10", None) == "cifar10"  # no recorded info: the name
