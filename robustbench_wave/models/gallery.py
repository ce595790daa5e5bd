"""A gallery of input defences known to be broken, in front of one small Fashion-MNIST CNN.

Athalye, Carlini & Wagner (ICML 2018, "Obfuscated gradients give a false sense of security") broke most
pre-processing and randomised defences of ICLR 2018 by attacking them adaptively: BPDA through the
non-differentiable step, EOT over the random one. The harness must do the same on small versions of them
(``docs/spec.md`` §5), so each defence here is written the way a user writes one -- plain torch ops
(``torch.round``, comparisons turned into floats, ``torch.rand``/``torch.multinomial``) and no
:class:`~robustbench_wave.models.frontend.FixedFrontEnd` -- and the automatic detectors must find them.

Every factory follows the external-model contract (:mod:`robustbench_wave.models.external`): keyword
arguments ``num_classes`` and ``img_size`` with defaults, returns an ``nn.Module`` from [0, 1] images to
logits, and is attacked as ``--model robustbench_wave.models.gallery:bit_depth_cnn --weights FILE``. Each
returns a :class:`Defended` (``defence`` then ``net``), so bit-depth reduction, JPEG and SAP share the
undefended CNN's weights file (same ``net.*`` keys), as their papers apply them to a trained network;
thermometer encoding changes the CNN's input channels and random resize-and-pad the scale and position of
its input, so those two are trained on their own. :data:`GALLERY` lists them with the weights each loads
(``python -m robustbench_wave.gallery`` trains and attacks them all).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

#: Fashion-MNIST as the harness loads it: one channel, zero-padded to 32x32, ten classes.
IN_CHANS, IMG_SIZE, NUM_CLASSES = 1, 32, 10


class SmallCNN(nn.Module):
    """Three 3x3 conv blocks (width, 2 width, 4 width channels, each ReLU + 2x2 max-pool) and a two-layer head.

    About 0.16 M parameters and 2.5 M multiply-adds per 32x32 image: one epoch of Fashion-MNIST on one CPU
    core takes about a minute. The adaptive pooling before the head makes it take any image size >= 8
    (random resize-and-pad feeds it 36x36). ``activation`` builds each non-linearity, one module per slot,
    so a randomised activation (stochastic activation pruning) keeps the state-dict keys of the plain CNN.
    """

    def __init__(
        self,
        num_classes: int = NUM_CLASSES,
        in_chans: int = IN_CHANS,
        width: int = 16,
        activation: Callable[[], nn.Module] = nn.ReLU,
    ) -> None:
        super().__init__()
        w = width
        self.features = nn.Sequential(
            nn.Conv2d(in_chans, w, 3, padding=1), activation(), nn.MaxPool2d(2),
            nn.Conv2d(w, 2 * w, 3, padding=1), activation(), nn.MaxPool2d(2),
            nn.Conv2d(2 * w, 4 * w, 3, padding=1), activation(), nn.MaxPool2d(2),
            nn.AdaptiveAvgPool2d(4),
        )  # fmt: skip
        self.head = nn.Sequential(
            nn.Flatten(), nn.Linear(64 * w, 128), activation(), nn.Linear(128, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class Defended(nn.Module):
    """``net(defence(x))``: a parameter-free defence in front of a classifier (``nn.Identity`` = undefended)."""

    def __init__(self, defence: nn.Module, net: nn.Module) -> None:
        super().__init__()
        self.defence = defence
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(self.defence(x))


# ------------------------------------------------------------------------------------------------ defences


class BitDepthReduction(nn.Module):
    """Feature squeezing's colour-depth reduction (Xu, Evans & Qi, NDSS 2018): ``round(x (2^b - 1)) / (2^b - 1)``.

    Each pixel keeps ``2^bits`` levels. The gradient of ``torch.round`` is zero almost everywhere, so exact
    gradients see nothing; BPDA with the identity backward breaks it (Athalye et al. 2018).
    """

    def __init__(self, bits: int = 5) -> None:
        super().__init__()
        if not 1 <= bits <= 8:
            raise ValueError(f"bits = {bits} must lie in 1..8 (levels per pixel: 2^bits)")
        self.levels = 2**bits - 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.round(x * self.levels) / self.levels


#: The JPEG standard's luminance quantisation table (ITU-T T.81, Annex K, Table K.1), row = vertical frequency.
JPEG_LUMINANCE = (
    (16, 11, 10, 16, 24, 40, 51, 61),
    (12, 12, 14, 19, 26, 58, 60, 55),
    (14, 13, 16, 24, 40, 57, 69, 56),
    (14, 17, 22, 29, 51, 87, 80, 62),
    (18, 22, 37, 56, 68, 109, 103, 77),
    (24, 35, 55, 64, 81, 104, 113, 92),
    (49, 64, 78, 87, 103, 121, 120, 101),
    (72, 92, 95, 98, 112, 100, 103, 99),
)
JPEG_BLOCK = 8


def jpeg_table(quality: int) -> torch.Tensor:
    """The luminance table scaled to ``quality`` (1-100) as libjpeg's ``jpeg_quality_scaling`` does:
    scale = 5000 / q below 50, else 200 - 2 q; entries ``(base * scale + 50) // 100`` clipped to 1..255."""
    if not 1 <= quality <= 100:
        raise ValueError(f"quality = {quality} must lie in 1..100 (libjpeg's scale)")
    scale = 5000 // quality if quality < 50 else 200 - 2 * quality
    base = torch.tensor(JPEG_LUMINANCE, dtype=torch.float64)
    return torch.clamp(torch.floor((base * scale + 50) / 100), 1, 255).float()


def dct_matrix(n: int = JPEG_BLOCK) -> torch.Tensor:
    """The orthonormal DCT-II matrix ``D[u, x] = a(u) cos((2x + 1) u pi / 2n)``, a(0) = sqrt(1/n), else sqrt(2/n):
    a block's coefficients are ``D B D^T`` and ``D^T C D`` inverts them."""
    u = torch.arange(n, dtype=torch.float64)[:, None]
    x = torch.arange(n, dtype=torch.float64)[None, :]
    alpha = torch.where(u == 0, math.sqrt(1 / n), math.sqrt(2 / n))
    return (alpha * torch.cos((2 * x + 1) * u * math.pi / (2 * n))).float()


class JpegQuantization(nn.Module):
    """JPEG-style compression as a defence (Dziugaite et al. 2016; Das et al. 2017; Guo et al., ICLR 2018).

    Pixels to 0-255 levels shifted by -128, 8x8 block DCT, each coefficient divided by the quality-scaled
    luminance table, rounded, multiplied back, inverse DCT, shifted back and clipped to [0, 1] (every channel
    with the luminance table; no chroma subsampling). Edges are padded by replication to whole blocks and
    cropped again. The rounding is the only step without a gradient; at quality 100 the table is all ones
    and the transform is the identity up to that rounding.
    """

    def __init__(self, quality: int = 75) -> None:
        super().__init__()
        self.register_buffer("table", jpeg_table(quality), persistent=False)
        self.register_buffer("dct", dct_matrix(), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        b = JPEG_BLOCK
        pad_h, pad_w = -h % b, -w % b
        if pad_h or pad_w:
            x = F.pad(x, (0, pad_w, 0, pad_h), mode="replicate")
        blocks = (x * 255 - 128).reshape(n, c, x.shape[2] // b, b, x.shape[3] // b, b)
        coef = torch.einsum("ux,ncixjy,vy->nciujv", self.dct, blocks, self.dct)
        table = self.table[:, None, :]  # (u, 1, v) against coef's (..., u, j, v)
        coef = torch.round(coef / table) * table
        pixels = torch.einsum("ux,nciujv,vy->ncixjy", self.dct, coef, self.dct)
        out = (pixels.reshape(n, c, x.shape[2], x.shape[3]) + 128) / 255
        return torch.clamp(out[:, :, :h, :w], 0, 1)


class ThermometerEncoding(nn.Module):
    """Thermometer encoding (Buckman, Roy, Raffel & Goodfellow, ICLR 2018): channel k of each input channel is
    ``x >= k / levels`` for k = 1..levels, so the classifier takes ``levels * C`` binary channels (and is
    trained on them). The comparison has no gradient; BPDA through it breaks the defence (Athalye et al.)."""

    def __init__(self, levels: int = 16) -> None:
        super().__init__()
        if levels < 2:
            raise ValueError(f"levels = {levels} must be >= 2")
        self.levels = levels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        codes = [(x >= k / self.levels).float() for k in range(1, self.levels + 1)]
        return torch.stack(codes, dim=2).flatten(1, 2)  # (N, C, levels, H, W) -> channel c*levels + k-1


class RandomResizePad(nn.Module):
    """Randomisation at inference (Xie, Wang, Zhang, Ren & Yuille, ICLR 2018): each image is resized
    (nearest neighbour) to a random side s in [img_size, out_size) and zero-padded at a random offset to
    ``out_size`` x ``out_size`` (the paper: 299 -> [299, 331) -> 331; here 32 -> [32, 36) -> 36 by default,
    the same 11 % margin). Every forward draws anew from torch's global generator; EOT breaks it."""

    def __init__(self, img_size: int = IMG_SIZE, out_size: int | None = None) -> None:
        super().__init__()
        self.img_size = img_size
        self.out_size = out_size if out_size is not None else img_size + max(1, img_size // 8)
        if self.out_size <= img_size:
            raise ValueError(f"out_size = {self.out_size} must exceed img_size = {img_size}")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        sizes = torch.randint(self.img_size, self.out_size, (len(x),)).tolist()
        out = []
        for image, size in zip(x, sizes, strict=True):
            resized = F.interpolate(image[None], size=(size, size), mode="nearest")
            room = self.out_size - size
            top, left = torch.randint(0, room + 1, (2,)).tolist()
            out.append(F.pad(resized, (left, room - left, top, room - top)))
        return torch.cat(out)


class StochasticActivationPruning(nn.Module):
    """Stochastic activation pruning (Dhillon et al., ICLR 2018) after a ReLU: per example, ``r`` = ``samples``
    x (number of activations) draws with replacement with probability p_j = |h_j| / sum |h| decide which
    activations survive, and each survivor is scaled by 1 / P(kept) = 1 / (1 - (1 - p_j)^r), so its
    expectation is the unpruned activation. Each activation is kept independently with exactly that
    probability: the marginals of the paper's multinomial draw (which correlates the draws only through
    their fixed total), at a tenth of ``torch.multinomial``'s cost on the CPU. Every forward draws anew
    from torch's global generator; EOT breaks it (Athalye et al.)."""

    def __init__(self, samples: float = 1.0) -> None:
        super().__init__()
        if not samples > 0:
            raise ValueError(f"samples = {samples} must be > 0 (draws per activation, SAP-100 = 1.0)")
        self.samples = samples

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = torch.relu(h)
        flat = h.flatten(1)
        r = max(1, round(self.samples * flat.shape[1]))
        total = flat.sum(1, keepdim=True)  # |h| = h after the ReLU
        p = flat / total.clamp_min(1e-30)
        keep_prob = -torch.expm1(r * torch.log1p(-p.clamp(max=1 - 1e-7)))
        kept = torch.bernoulli(keep_prob.detach())  # which survive: random, not a function to differentiate
        return (flat * kept / keep_prob.clamp_min(1e-30)).view_as(h)


# ----------------------------------------------------------------------------------------------- factories


def cnn(num_classes: int = NUM_CLASSES, img_size: int = IMG_SIZE, in_chans: int = IN_CHANS) -> Defended:
    """The undefended CNN (the reference every broken defence falls back to)."""
    return Defended(nn.Identity(), SmallCNN(num_classes, in_chans))


def bit_depth_cnn(
    num_classes: int = NUM_CLASSES, img_size: int = IMG_SIZE, in_chans: int = IN_CHANS, bits: int = 5
) -> Defended:
    """The CNN behind 5-bit colour-depth reduction (Xu et al. 2018's CIFAR-10 setting); the undefended CNN's
    weights. Coarser steps are partly robust for real at small budgets on Fashion-MNIST, whose background is
    exactly 0: with 3 bits no pixel at 0 reaches the first rounding boundary (1/14) within L-inf 0.03, and
    PGD through the identity BPDA kept 79 % there (n = 200) against the undefended CNN's 54.5 %; with 5 bits
    (boundary 1/62) it fell to 53.5 %, while exact gradients kept 89 %."""
    return Defended(BitDepthReduction(bits), SmallCNN(num_classes, in_chans))


def jpeg_cnn(
    num_classes: int = NUM_CLASSES, img_size: int = IMG_SIZE, in_chans: int = IN_CHANS, quality: int = 75
) -> Defended:
    """The CNN behind JPEG-style DCT quantisation at quality 75 (Guo et al. 2018); the undefended CNN's weights."""
    return Defended(JpegQuantization(quality), SmallCNN(num_classes, in_chans))


def thermometer_cnn(
    num_classes: int = NUM_CLASSES, img_size: int = IMG_SIZE, in_chans: int = IN_CHANS, levels: int = 16
) -> Defended:
    """A CNN trained on 16-level thermometer codes (Buckman et al. 2018): its own weights. Its first
    threshold, 1/16, lies beyond L-inf 0.03 of Fashion-MNIST's zero background, so at that budget part of
    its robustness is real: PGD through BPDA (straight-through or Athalye et al.'s smooth thermometer) kept
    77-79 % (n = 200, undefended 54.5 %); at 0.1 it fell to 6.5 % (undefended 5.0 %), exact gradients 91.5 %."""
    return Defended(ThermometerEncoding(levels), SmallCNN(num_classes, in_chans * levels))


def resize_pad_cnn(
    num_classes: int = NUM_CLASSES,
    img_size: int = IMG_SIZE,
    in_chans: int = IN_CHANS,
    out_size: int | None = None,
) -> Defended:
    """A CNN trained behind random resize-and-pad (Xie et al. 2018): its own weights. The paper put it in
    front of ImageNet networks already invariant to such shifts and scales; the small CNN is not (the
    undefended weights keep about 60 % clean accuracy behind it), so it learns them from the same draws."""
    return Defended(RandomResizePad(img_size, out_size), SmallCNN(num_classes, in_chans))


def sap_cnn(
    num_classes: int = NUM_CLASSES, img_size: int = IMG_SIZE, in_chans: int = IN_CHANS, samples: float = 1.0
) -> Defended:
    """The CNN with stochastic activation pruning after every ReLU (Dhillon et al. 2018, SAP-100), as the
    paper on a trained network: the undefended CNN's weights."""
    return Defended(
        nn.Identity(),
        SmallCNN(num_classes, in_chans, activation=lambda: StochasticActivationPruning(samples)),
    )


# ------------------------------------------------------------------------------------------------ registry


@dataclass(frozen=True)
class GalleryEntry:
    """One defence of the gallery: its factory, the factory whose trained weights it loads, its source and
    the adaptive attack that breaks it."""

    name: str
    factory: Callable[..., nn.Module]
    weights_of: str  # the entry whose training produces this entry's weights (itself: trained on its own)
    source: str
    broken_by: str

    @property
    def reference(self) -> str:
        """``--model`` reference of the attack command."""
        return f"{__name__}:{self.factory.__name__}"


UNDEFENDED = "cnn"

#: The gallery in table order, the undefended CNN first.
GALLERY: dict[str, GalleryEntry] = {
    e.name: e
    for e in (
        GalleryEntry(UNDEFENDED, cnn, UNDEFENDED, "undefended", "--"),
        GalleryEntry("bit_depth", bit_depth_cnn, UNDEFENDED, "Xu, Evans & Qi 2018", "BPDA (identity)"),
        GalleryEntry("jpeg", jpeg_cnn, UNDEFENDED, "Guo et al. 2018; Das et al. 2017", "BPDA (identity)"),
        GalleryEntry("thermometer", thermometer_cnn, "thermometer", "Buckman et al. 2018", "BPDA (identity)"),
        GalleryEntry("resize_pad", resize_pad_cnn, "resize_pad", "Xie et al. 2018", "EOT"),
        GalleryEntry("sap", sap_cnn, UNDEFENDED, "Dhillon et al. 2018", "EOT"),
    )
}


def trained_entries() -> list[GalleryEntry]:
    """The entries whose weights are trained (each other entry loads one of theirs)."""
    return [GALLERY[name] for name in dict.fromkeys(e.weights_of for e in GALLERY.values())]
