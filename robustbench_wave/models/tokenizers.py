"""Image tokenizers that plug into timm's ``VisionTransformer(embed_layer=...)``.

* :class:`OverlapPatchEmbed` -- timm's ``PatchEmbed`` (seed 002) with a kernel larger than its stride,
  the overlapping-patch variant; the non-overlapping tokenizer is timm's ``PatchEmbed`` itself.
* :class:`WaveletEmbed` -- the wavelet tokenizer (Zhu & Soricut 2024): the fixed
  :class:`~robustbench_wave.wavelet.WaveletFrontEnd` followed by the learned block-sparse projection
  ``Q = blockdiag(Q_L, ..., Q_1)`` (one ``Linear(C_k, H_k)`` per level) and optional dense layers.

Both follow the ``PatchEmbed`` constructor contract (``img_size, patch_size, in_chans, embed_dim, bias``)
and expose ``num_patches``, ``grid_size``, ``patch_size`` and ``feat_ratio()``, as timm's hybrid embeds do.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from timm.layers import PatchEmbed
from torch import nn

from robustbench_wave.models.wavelet import WaveletFrontEnd


class OverlapPatchEmbed(PatchEmbed):
    """Patch embedding whose ``kernel = patch_size + overlap`` exceeds its stride ``patch_size``.

    Padding ``overlap // 2`` keeps the token count ``(N / patch_size)²`` of the non-overlapping tokenizer.
    """

    def __init__(self, *args, overlap: int = 2, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if overlap < 0 or overlap % 2:
            raise ValueError(f"overlap must be a non-negative even number of pixels, got {overlap}")
        stride = self.patch_size
        kernel = (stride[0] + overlap, stride[1] + overlap)
        old = self.proj
        self.proj = nn.Conv2d(
            old.in_channels,
            old.out_channels,
            kernel,
            stride=stride,
            padding=overlap // 2,
            bias=old.bias is not None,
        )
        self.overlap = overlap


def seed_token_widths(block_sizes: Sequence[int], fine_fraction: float) -> list[int]:
    """The seed's rule: ``H_k = C_k`` for the two coarsest levels, ``H_k = ceil(p·C_k)`` for finer ones."""
    if not 0.0 < fine_fraction <= 1.0:
        raise ValueError(f"fine_fraction p must be in (0, 1], got {fine_fraction}")
    return [c if i < 2 else math.ceil(fine_fraction * c) for i, c in enumerate(block_sizes)]


def proportional_token_widths(block_sizes: Sequence[int], total: int) -> list[int]:
    """Split ``total`` over the level blocks in proportion to ``C_k`` (each block gets at least one unit)."""
    if total < len(block_sizes):
        raise ValueError(f"token width {total} is smaller than the number of level blocks {len(block_sizes)}")
    raw = [total * c / sum(block_sizes) for c in block_sizes]
    widths = [max(1, math.floor(r)) for r in raw]
    order = sorted(range(len(raw)), key=lambda i: raw[i] - math.floor(raw[i]), reverse=True)
    for i in order[: total - sum(widths)]:
        widths[i] += 1
    return widths


def resolve_token_widths(
    rule: str | Sequence[int], block_sizes: Sequence[int], embed_dim: int, fine_fraction: float
) -> list[int]:
    if isinstance(rule, str):
        if rule == "proportional":
            return proportional_token_widths(block_sizes, embed_dim)
        if rule == "seed":
            return seed_token_widths(block_sizes, fine_fraction)
        raise ValueError(f"token_widths must be 'proportional', 'seed' or a list of ints, got {rule!r}")
    widths = [int(w) for w in rule]
    if len(widths) != len(block_sizes) or min(widths) < 1:
        raise ValueError(
            f"token_widths needs one positive width per level block ({len(block_sizes)} blocks of sizes "
            f"{list(block_sizes)}), got {widths}"
        )
    return widths


class BlockSparseProjection(nn.Module):
    """``E = [W_L Q_L, ..., W_1 Q_1]``: one ``Linear(C_k, H_k)`` per level block, outputs concatenated."""

    def __init__(self, block_sizes: Sequence[int], token_widths: Sequence[int], bias: bool = True) -> None:
        super().__init__()
        self.block_sizes = list(block_sizes)
        self.token_widths = list(token_widths)
        self.levels = nn.ModuleList(nn.Linear(c, h, bias=bias) for c, h in zip(block_sizes, token_widths))

    def forward(self, w: torch.Tensor) -> torch.Tensor:  # (B, T, C) -> (B, T, H)
        blocks = torch.split(w, self.block_sizes, dim=-1)
        return torch.cat([proj(block) for proj, block in zip(self.levels, blocks)], dim=-1)


class WaveletEmbed(nn.Module):
    """Wavelet tokenizer: fixed front-end (colour, DWT, W, sparsification) + learned semantic embedding.

    ``patch_size`` is accepted for timm's constructor contract; the token grid is set by ``levels``
    (one token per ``2^L x 2^L`` region). When the token width ``H = Σ H_k`` differs from the body's
    ``embed_dim`` a final ``Linear(H, embed_dim)`` adapts it (seed §5.3 treats them as separate knobs).
    """

    def __init__(
        self,
        img_size: int | tuple[int, int] = 32,
        patch_size: int | None = None,
        in_chans: int = 1,
        embed_dim: int = 64,
        bias: bool = True,
        *,
        levels: int = 2,
        wavelet: str = "db1",
        zero_fraction: float = 0.8,
        exempt_approximation: bool = False,
        level_shift: bool = True,
        token_widths: str | Sequence[int] = "proportional",
        fine_fraction: float = 0.5,
        dense_layers: int = 0,
        **unused,
    ) -> None:
        super().__init__()
        if unused.get("dynamic_img_pad") or unused.get("output_fmt"):
            raise ValueError("the wavelet tokenizer supports only fixed image sizes (dynamic_img_size=False)")
        size = img_size if isinstance(img_size, int) else img_size[0]
        if not isinstance(img_size, int) and img_size[0] != img_size[1]:
            raise ValueError(f"the wavelet tokenizer needs square images, got {img_size}")
        if patch_size is not None and patch_size != 2**levels:
            raise ValueError(
                f"patch_size {patch_size} disagrees with levels={levels} (token = 2^L = {2**levels} px)"
            )
        self.front_end = WaveletFrontEnd(
            size, in_chans, levels, wavelet, zero_fraction, exempt_approximation, level_shift
        )
        widths = resolve_token_widths(token_widths, self.front_end.block_sizes, embed_dim, fine_fraction)
        self.projection = BlockSparseProjection(self.front_end.block_sizes, widths, bias=bias)
        token_width = sum(widths)
        dense: list[nn.Module] = []
        for _ in range(dense_layers):
            dense += [nn.Linear(token_width, token_width), nn.GELU()]
        if token_width != embed_dim:
            dense.append(nn.Linear(token_width, embed_dim))
        self.dense = nn.Sequential(*dense)
        self.img_size = (size, size)
        self.patch_size = (2**levels, 2**levels)
        self.grid_size = (self.front_end.grid_size, self.front_end.grid_size)
        self.num_patches = self.front_end.num_tokens
        self.token_width = token_width
        self.dynamic_img_pad = False

    def init_weights(self, needs_reset: bool = True) -> None:
        """Fan-in scaled init, as the patch tokenizer's conv gets by default.

        timm's ViT init gives every ``nn.Linear`` std 0.02, the scale of the position embedding, which would
        start the wavelet tokens with 14x less content signal than patch tokens (whose conv keeps PyTorch's
        default) and make the comparison unfair. timm calls this after initialising the children.
        """
        for module in self.modules():
            if isinstance(module, nn.Linear):
                module.reset_parameters()

    def feat_ratio(self, as_scalar: bool = True) -> int | tuple[int, int]:
        return self.patch_size[0] if as_scalar else self.patch_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, c, N, N) -> (B, T, embed_dim)
        return self.dense(self.projection(self.front_end(x)))
