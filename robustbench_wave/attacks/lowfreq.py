"""The low-frequency attack: PGD whose perturbation lives in the coarsest low-frequency band.

The source paper (Zhu & Soricut 2024) argues that sparsification zeroes the small, high-frequency
coefficients a white-noise perturbation lands in. An *adaptive* attacker (Athalye et al. 2018; Carlini et al.
2019, "design attacks for the defence") therefore puts its whole budget where sparsification cannot remove
it. For the Haar wavelet (db1) the span of the level-L approximation (LL) band is exactly the space of images
that are constant on every ``2^L x 2^L`` block, so the orthogonal projection onto it is block-mean pooling
followed by nearest up-sampling (:func:`block_mean_project`). The same block grid carries the coarsest band
of every YCbCr channel (chroma is 2x2 down-sampled and gets L-1 levels), and a per-pixel colour transform or
per-channel normalization keeps a block-constant RGB perturbation block-constant. For other wavelets (coif1,
...) the block-average subspace is the Haar LL band on the model's token grid, a close but not exact stand-in
for that wavelet's LL band; ``basis="wavelet"`` projects onto the model wavelet's own LL band instead
(:func:`wavelet_ll_project`), at the cost of an approximate box constraint.

This module owns the band projections and :class:`LowFreqPGD`, the hooks that turn the PGD engine
(:mod:`robustbench_wave.attacks.pgd`) into this attack; the suite family ``lowfreq-pgd`` is registered with
the other builtin attacks (:mod:`robustbench_wave.attacks.builtin`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

import torch
import torch.nn.functional as F
from torch import nn

from robustbench_wave.attacks.pgd import NORMS, PGD
from robustbench_wave.models.wavelet import filter_bank, wavedec2, waverec2

Projector = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (delta, x) -> feasible delta
AUTO_LEVEL = "auto"
LOWFREQ_FAMILY = "lowfreq-pgd"  # the suite family (records' ``family`` column)


class Basis(str, Enum):
    """The band a low-frequency perturbation lives in (suite parameter ``basis``)."""

    HAAR = "haar"  # block averages: the exact LL band for db1, a stand-in for other wavelets
    WAVELET = "wavelet"  # the model wavelet's own LL band (approximate box constraint)


# --------------------------------------------------------------------------------------------------------
# projections
# --------------------------------------------------------------------------------------------------------
def _check_level(x: torch.Tensor, level: int) -> int:
    k = 2**level
    if level < 0 or x.shape[-1] % k or x.shape[-2] % k:
        raise ValueError(
            f"image size {tuple(x.shape[-2:])} is not divisible by 2^level = {k}; choose a smaller level"
        )
    return k


def block_mean_project(delta: torch.Tensor, level: int) -> torch.Tensor:
    """Orthogonal projection onto images constant on ``2^level`` blocks (= the Haar LL band at that level)."""
    k = _check_level(delta, level)
    if k == 1:
        return delta
    return F.avg_pool2d(delta, k).repeat_interleave(k, dim=-2).repeat_interleave(k, dim=-1)


def wavelet_ll_project(delta: torch.Tensor, level: int, wavelet: str) -> torch.Tensor:
    """Orthogonal projection onto the span of ``wavelet``'s level-``level`` approximation band.

    Uses the package's periodized torch DWT (orthogonal, so zeroing the details and inverting is the
    orthogonal projection).  Equals :func:`block_mean_project` for db1.
    """
    _check_level(delta, level)
    bank = filter_bank(wavelet)
    approx, details = wavedec2(delta, bank, level)
    return waverec2(approx, [torch.zeros_like(d) for d in details], bank)


def band_project(delta: torch.Tensor, level: int, basis: str, wavelet: str) -> torch.Tensor:
    """Orthogonal projection onto the attack's band: block means (``haar``) or the wavelet's LL band."""
    if basis == Basis.HAAR.value:
        return block_mean_project(delta, level)
    return wavelet_ll_project(delta, level, wavelet)


def _block_box(x: torch.Tensor, level: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-block bounds [lo, hi] on a block-constant delta that keep x + delta in [0, 1] on every pixel."""
    k = 2**level
    lo = F.max_pool2d(-x, k) if k > 1 else -x  # -min over the block
    hi = 1.0 - (F.max_pool2d(x, k) if k > 1 else x)
    if k > 1:
        lo = lo.repeat_interleave(k, dim=-2).repeat_interleave(k, dim=-1)
        hi = hi.repeat_interleave(k, dim=-2).repeat_interleave(k, dim=-1)
    return lo, hi


def lowfreq_projector(
    level: int, eps: float, norm: str, basis: str = Basis.HAAR.value, wavelet: str = "db1"
) -> Projector:
    """Projection onto {block-constant delta} ∩ {||delta|| <= eps} ∩ {x + delta in [0, 1]}.

    Linf: clipping a block-constant delta to [-eps, eps] keeps it block-constant, but clipping x + delta to
    [0, 1] would not (x varies inside a block).  Instead each block's value is clipped to
    ``[-min_block(x), 1 - max_block(x)] ∩ [-eps, eps]``; because the constraint set is a product of
    intervals over blocks, this is the exact Euclidean projection, and the result stays in the subspace.
    L2: clip to the same per-block box, then rescale into the eps-ball (the box contains 0 and is convex, so
    rescaling stays feasible).  This is feasible but not the exact projection onto the intersection, the
    usual choice in PGD.  ``basis="wavelet"`` (non-Haar wavelets) alternates three times between the
    wavelet's LL band and the box, ending on the box: feasible, approximately in the band.
    """
    if norm not in NORMS:
        raise ValueError(f"threat model must be 'Linf' or 'L2', got {norm!r}")
    if basis not in {b.value for b in Basis}:
        raise ValueError(f"basis must be 'haar' (block averages, exact for db1) or 'wavelet', got {basis!r}")
    haar = basis == Basis.HAAR.value

    def project(delta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        lo, hi = _block_box(x, level) if haar else (-x, 1.0 - x)
        if norm == "Linf":
            lo, hi = lo.clamp(min=-eps), hi.clamp(max=eps)
        for _ in range(1 if haar else 3):
            delta = torch.maximum(torch.minimum(band_project(delta, level, basis, wavelet), hi), lo)
        if norm == "L2":
            scale = (eps / delta.flatten(1).norm(dim=1).clamp_min(1e-12)).clamp(max=1.0)
            delta = delta * scale.view(-1, *([1] * (delta.dim() - 1)))
        return delta

    return project


# --------------------------------------------------------------------------------------------------------
# the attack: hooks of the PGD engine
# --------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LowFreqPGD(PGD):
    """PGD restricted to the coarsest low-frequency band, under the same pixel-space eps budget.

    Hooks: the random start (the engine's one distribution) keeps one value per ``2^level`` block, so it is
    block-constant rather than a shrunken block mean; the ascent direction is the gradient projected onto
    the band (for Linf its sign is then still block-constant, the steepest-ascent step over block values);
    every iterate is projected by :func:`lowfreq_projector`.
    """

    level: int = 0
    basis: str = Basis.HAAR.value
    wavelet: str = "db1"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.level < 0:
            raise ValueError(f"level must be >= 0, got {self.level}")
        lowfreq_projector(self.level, self.eps, self.norm, self.basis, self.wavelet)  # validates the basis

    def init_delta(self, delta: torch.Tensor) -> torch.Tensor:
        k = 2**self.level
        return delta[..., ::k, ::k].repeat_interleave(k, dim=-2).repeat_interleave(k, dim=-1)

    def direction(self, grad: torch.Tensor) -> torch.Tensor:
        return band_project(grad, self.level, self.basis, self.wavelet)

    def project(self, x_adv: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        project = lowfreq_projector(self.level, self.eps, self.norm, self.basis, self.wavelet)
        return (x + project(x_adv - x, x)).clamp(0.0, 1.0)


def find_wavelet_front_end(model: nn.Module) -> nn.Module | None:
    """The first sub-module with the wavelet front-end interface (``pixel_embedding`` and ``sparsify``)."""
    for module in model.modules():
        if callable(getattr(module, "pixel_embedding", None)) and callable(getattr(module, "sparsify", None)):
            return module
    return None


def model_wavelet(model: nn.Module) -> str:
    """The wavelet of the model's front-end (``db1`` for models without one)."""
    front = find_wavelet_front_end(model)
    return str(getattr(front, "wavelet", "db1")) if front is not None else "db1"


def _patch_size(model: nn.Module) -> int | None:
    """The patch size of the first patch tokenizer (timm's ``PatchEmbed.patch_size``: int or square pair)."""
    for module in model.modules():
        size = getattr(module, "patch_size", None)
        if isinstance(size, int):
            return size
        if isinstance(size, tuple | list) and len(size) == 2 and size[0] == size[1]:
            return int(size[0])
    return None


def resolve_level(model: nn.Module, level: int | str) -> int:
    """The band level: an explicit int, or ``"auto"`` = the wavelet front-end's levels, else log2 of the
    patch tokenizer's patch size (one token = one ``2^level`` block)."""
    if level != AUTO_LEVEL:
        return int(level)
    own, why = _model_level(model)
    if own is not None:
        return own
    raise ValueError(
        f"level = 'auto' needs a wavelet front-end or a patch tokenizer with a power-of-two patch size ({why}): "
        "set `level = N` in the suite entry (perturbations constant on 2^N x 2^N blocks)"
    )


def _model_level(model: nn.Module) -> tuple[int | None, str]:
    """The level the model's own tokens give (front-end levels, log2 of a power-of-two patch size), or None
    and the reason it gives none."""
    front = find_wavelet_front_end(model)
    if front is not None:
        return int(front.levels), ""
    patch = _patch_size(model)
    if patch is not None and patch >= 1 and patch & (patch - 1) == 0:
        return int(math.log2(patch)), ""
    if patch is not None:
        return None, f"its patch size {patch} is not a power of two"
    return None, "the model has no wavelet front-end or patch tokenizer"


#: The image-size rule's smallest band: 8 x 8 coefficients, the token grid of the zoo (4-pixel patches or a
#: 2-level DWT on 32 x 32 images) and of a ViT-B/16 on 224 x 224 images (16-pixel patches, 14 x 14 tokens).
MIN_BAND = 8


def level_from_image(height: int, width: int) -> int:
    """The coarsest level whose ``2^level`` blocks tile an ``height x width`` image and whose LL band keeps
    at least :data:`MIN_BAND` coefficients per side; 0 when there is none (an odd side, or one under 16).

    A model without tokens has no band of its own, so the attack takes the one a ViT of this image size
    would have: 32 x 32 -> 2 (4 x 4 blocks, as the zoo), 224 x 224 -> 4 (16 x 16 blocks, ViT-B/16), 28 x 28
    -> 1. A coarser band (fewer, larger blocks) is a weaker attack, a finer one is close to plain PGD.
    """
    level = 0
    while all(
        side % 2 ** (level + 1) == 0 and side // 2 ** (level + 1) >= MIN_BAND for side in (height, width)
    ):
        level += 1
    return level


@dataclass(frozen=True)
class LevelChoice:
    """The band level of a low-frequency attack on one model and image size: ``level`` None when there is
    no band to attack; ``note`` says why when the level is not the suite's or the model's own."""

    level: int | None
    note: str | None = None


def choose_level(model: nn.Module, level: int | str, image_size: tuple[int, int]) -> LevelChoice:
    """The level an entry's ``level`` (an int or ``"auto"``) gives on ``model`` for images of ``image_size``
    (H, W): the suite's int if its blocks tile the image; ``"auto"``: the model's own (:func:`resolve_level`)
    if it tiles the image, else :func:`level_from_image`; None (with the reason) if no level fits."""
    h, w = image_size
    if level != AUTO_LEVEL:
        k = 2 ** int(level)
        if h % k or w % k:
            return LevelChoice(None, f"level = {level}: {k}x{k} blocks do not tile {h}x{w} images")
        return LevelChoice(int(level))
    own, why = _model_level(model)
    if own is not None and not (h % 2**own or w % 2**own):
        return LevelChoice(own)
    if own is not None:
        why = f"its {2**own}x{2**own} tokens do not tile {h}x{w} images"
    chosen = level_from_image(h, w)
    if chosen == 0:
        return LevelChoice(
            None,
            f"level = 'auto': {why}, and no 2^N x 2^N blocks of {h}x{w} images keep a {MIN_BAND}x{MIN_BAND} "
            "band; set `level = N` in the suite entry",
        )
    return LevelChoice(
        chosen,
        f"level = 'auto' -> {chosen} from the image size ({why}): {2**chosen}x{2**chosen} blocks, the "
        f"coarsest band with at least {MIN_BAND}x{MIN_BAND} coefficients",
    )
