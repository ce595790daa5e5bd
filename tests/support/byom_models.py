"""Models of the three kinds the attack command takes, small enough to run every suite in a test.

* :func:`small_cnn`: a CNN as a user brings it (``--model tests/support/byom_models.py:small_cnn --weights W``):
  no front-end, no patch tokenizer, nothing the zoo knows; Fashion-MNIST-shaped (1x32x32 gray), ``in_chans=3``
  (:func:`small_cnn_rgb`) for colour data.
* a ``timm:`` architecture (timm's ``test_vit``: 16-pixel patches, 2x2 tokens on 32x32 images).
* :func:`stand_in_zoo`: a zoo spec (its tokenizer and front-end) on a one-block body, served in place of a
  trained checkpoint.

Every head is a least-squares fit on random features (:func:`fit_head`, :func:`fit_data`): the models classify
the images a test attacks and break at small budgets, so each suite's attacks end after a few steps instead of
spending their whole query budget on robust points. No training loop.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import timm
import torch
from safetensors.torch import save_file
from torch import nn

from robustbench_wave.data import DatasetInfo, dataset_info, load_split, to_float
from robustbench_wave.models.vit import build_model
from robustbench_wave.models.zoo import load_spec
from robustbench_wave.training import checkpoint

#: The factory as a ``--model`` file reference (a path, as a user passes it).
FILE = Path(__file__).resolve()
CNN = f"{FILE}:small_cnn"
CNN_RGB = f"{FILE}:small_cnn_rgb"
TIMM_ARCH = "test_vit"
#: The stand-in zoo models' body: one transformer block of width 16 (the zoo's is 4 blocks of 64).
TINY_BODY = {"embed_dim": 16, "depth": 1, "num_heads": 2, "mlp_ratio": 2.0}


def small_cnn(num_classes: int = 10, img_size: int = 32, in_chans: int = 1) -> nn.Module:
    """conv-relu-pool twice, then a linear head: logits from [0, 1] images (N, in_chans, img_size, img_size)."""
    return nn.Sequential(
        nn.Conv2d(in_chans, 8, 3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(16 * 4 * 4, num_classes),
    )


def small_cnn_rgb(num_classes: int = 10, img_size: int = 32) -> nn.Module:
    """:func:`small_cnn` for colour images."""
    return small_cnn(num_classes, img_size, in_chans=3)


def fit_data(dataset: str, n_attacked: int, n_train: int = 50) -> tuple[torch.Tensor, torch.Tensor]:
    """What a head is fitted on: the first ``n_attacked`` test images with their labels, and ``n_train``
    training images with shuffled labels. Interpolating those forces a large head, so the model classifies
    the attacked images yet breaks at the smallest budgets: every attack runs, none spends long."""
    x, y, _ = load_split(dataset, "train")
    xt, yt, _ = load_split(dataset, "test")
    shuffled = y[:n_train][torch.randperm(n_train, generator=torch.Generator().manual_seed(0))]
    images = torch.cat([to_float(x[:n_train]), to_float(xt[:n_attacked])])
    return images, torch.cat([shuffled, yt[:n_attacked]]).long()


def fit_head(
    trunk: Callable[[torch.Tensor], torch.Tensor], head: nn.Linear, images: torch.Tensor, labels: torch.Tensor
) -> None:
    """Least-squares ``head`` on the (random) features ``trunk`` makes of ``images``."""
    with torch.no_grad():
        feats = trunk(images).flatten(1)
        feats = torch.cat([feats, torch.ones(len(feats), 1)], dim=1)
        targets = nn.functional.one_hot(labels, head.out_features).float()
        solution = torch.linalg.lstsq(feats, targets).solution
        head.weight.copy_(solution[:-1].T)
        head.bias.copy_(solution[-1])


def _save(model: nn.Module, path: Path) -> Path:
    save_file({k: v.detach().contiguous() for k, v in model.state_dict().items()}, str(path))
    return path


def cnn_weights(path: Path, data: tuple[torch.Tensor, torch.Tensor], in_chans: int = 1) -> Path:
    """:func:`small_cnn` (seed 0) with its head fitted on ``data`` (images, labels), as safetensors."""
    torch.manual_seed(0)
    net = small_cnn(in_chans=in_chans).eval()
    fit_head(net[:-1], net[-1], *data)
    return _save(net, path)


def timm_weights(path: Path, arch: str, info: DatasetInfo, data: tuple[torch.Tensor, torch.Tensor]) -> Path:
    """timm's ``arch`` (seed 0) for ``info``'s images, its head fitted on ``data`` as the attack command
    wraps it (timm's ``pretrained_cfg`` mean/std in front), as safetensors."""
    torch.manual_seed(0)
    kwargs = {"img_size": info.img_size} if arch == TIMM_ARCH else {}
    net = timm.create_model(
        arch, pretrained=False, num_classes=info.num_classes, in_chans=info.in_chans, **kwargs
    )
    net.eval()
    cfg = net.pretrained_cfg
    mean = torch.tensor(cfg["mean"][: info.in_chans]).view(1, -1, 1, 1)
    std = torch.tensor(cfg["std"][: info.in_chans]).view(1, -1, 1, 1)
    images, labels = data
    fit_head(
        lambda x: net.forward_head(net.forward_features((x - mean) / std), pre_logits=True),
        net.get_classifier(),
        images,
        labels,
    )
    return _save(net, path)


def stand_in_zoo(
    name: str, info: DatasetInfo, data: tuple[torch.Tensor, torch.Tensor]
) -> tuple[nn.Module, dict[str, Any]]:
    """The zoo spec ``name`` (its tokenizer and front-end) on :data:`TINY_BODY`, head fitted on ``data``, with
    the metadata ``checkpoint.load_trained`` returns."""
    spec = load_spec(name) | {"body": dict(TINY_BODY)}
    torch.manual_seed(0)
    model = build_model(spec, info).eval()
    body = model.body
    fit_head(
        lambda x: body.forward_head(body.forward_features(model.normalize(x)), pre_logits=True),
        body.head,
        *data,
    )
    meta = {
        "checkpoint_sha256": f"stand-in-{name}",
        "spec_sha256": f"stand-in-spec-{name}",
        "clean_accuracy": None,
        "run_dir": f"stand-in/{name}",
        "model_spec": spec,
        "dataset_info": info,
    }
    return model, meta


def serve_zoo(monkeypatch: pytest.MonkeyPatch, dataset: str, n_attacked: int) -> None:
    """Make ``checkpoint.load_trained`` return :func:`stand_in_zoo` models for ``dataset`` (any zoo name)."""
    info = dataset_info(dataset)
    data = fit_data(dataset, n_attacked)

    def load_trained(name: str, dataset_: str, results_dir: Any = "results", seed: int = 0) -> Any:
        return stand_in_zoo(name, info, data)

    monkeypatch.setattr(checkpoint, "load_trained", load_trained)
