"""A model that cannot take the data set's images is told the size the data set serves, in one statement."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from robustbench_wave.data import dataset_info, describe_images
from robustbench_wave.models.external import ExternalSpec, build_external

FACTORY = '''
import torch
from torch import nn

def mnist_sized_net(num_classes=10):
    """A classifier written for MNIST's 28x28 images: its linear layer fixes the input size."""
    return nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, num_classes))
'''


def test_fashion_mnist_says_it_serves_padded_32x32_images() -> None:
    text = describe_images(dataset_info("fashion-mnist"))
    assert text.startswith("fashion-mnist serves 1x32x32 images")
    assert "28x28" in text and "zero-padded" in text
    assert describe_images(dataset_info("synthetic")) == "synthetic serves 1x32x32 images"


def test_a_28x28_model_on_32x32_images_is_told_the_served_size(tmp_path: Path) -> None:
    module = tmp_path / "nets.py"
    module.write_text(FACTORY, encoding="utf-8")
    weights = tmp_path / "net.safetensors"
    save_file({"1.weight": torch.zeros(10, 28 * 28), "1.bias": torch.zeros(10)}, str(weights))
    spec = ExternalSpec(reference=f"{module}:mnist_sized_net", weights=str(weights))
    wanted = r"synthetic serves 1x32x32 images; build the model for that size"
    with pytest.raises(ValueError, match=wanted) as e:
        build_external(spec, dataset_info("synthetic"), torch.rand(2, 1, 32, 32))
    assert "\n" not in str(e.value)
