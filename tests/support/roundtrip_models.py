"""Defences whose input leaves torch and comes back, written the common way (:mod:`.roundtrip`): a JPEG
round trip through PIL per image (torchvision's ``to_pil_image`` -> ``BytesIO`` -> ``to_tensor``), a NumPy
quantiser, a ``.tolist()`` copy and an 8-bit cast through NumPy; and factories for the attack command
(``--model tests.support.roundtrip_models:NAME``) that share the weights of
:func:`~tests.support.external_models.pooled_linear` as ``1.<key>``."""

from __future__ import annotations

import io

import numpy as np
import torch
import torchvision.transforms.functional as TF
from PIL import Image
from torch import nn

from tests.support.external_models import pooled_linear

QUALITY = 40  # the JPEG quality


def pil_jpeg(image: torch.Tensor, quality: int = QUALITY) -> torch.Tensor:
    """One (C, H, W) image in [0, 1] through a PIL JPEG save and load at ``quality``."""
    buffer = io.BytesIO()
    TF.to_pil_image(image).save(buffer, format="JPEG", quality=quality)
    buffer.seek(0)
    return TF.to_tensor(Image.open(buffer))


class PilJpeg(nn.Module):
    """JPEG compression as a defence, the way it is usually written: PIL, one image at a time."""

    def __init__(self, quality: int = QUALITY) -> None:
        super().__init__()
        self.quality = quality

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([pil_jpeg(image, self.quality) for image in x]).to(x.device)


class NumpySevenths(nn.Module):
    """``round(7x) / 7`` in NumPy: ``x.detach().cpu().numpy()`` out, ``torch.from_numpy`` back."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(np.round(x.detach().cpu().numpy() * 7) / 7)


class TensorConstructor(nn.Module):
    """The same through ``torch.Tensor(array)``, which a torch function mode never sees."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.Tensor(np.round(x.detach().cpu().numpy() * 7) / 7)


class Reversed(nn.Module):
    """Each image out to NumPy on its own, and back in the reverse order: ``g(x) = x.flip(0)``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        arrays = [image.detach().numpy() for image in x]
        return torch.stack([torch.from_numpy(a) for a in reversed(arrays)])


class Inverted(nn.Module):
    """``1 - x`` in NumPy: the values come back in the same shape but do not follow the departed ones."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(1 - x.detach().numpy())


class ListCopy(nn.Module):
    """The values as a Python list and back (``torch.tensor(x.tolist())``): the identity, no gradient."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tensor(x.tolist())


class ByteNumpy(nn.Module):
    """8-bit levels in torch (``x.mul(255).byte()``), out to NumPy and back, then to [0, 1] again."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(x.mul(255).byte().numpy().copy()).float() / 255


# ------------------------------------------------------------------------- factories for the attack CLI


def jpeg_pooled_linear(num_classes: int = 10) -> nn.Module:
    """:func:`pooled_linear` behind the PIL JPEG round trip at quality 40."""
    return nn.Sequential(PilJpeg(), pooled_linear(num_classes))


def undefended_pooled_linear(num_classes: int = 10) -> nn.Module:
    """Its undefended twin, with the same state-dict keys."""
    return nn.Sequential(nn.Identity(), pooled_linear(num_classes))
