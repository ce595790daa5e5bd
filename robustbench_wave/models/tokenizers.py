"""Image tokenizers that plug into timm's ``VisionTransformer(embed_layer=...)``, and their registry.

* ``patch`` -- timm's ``PatchEmbed`` (the standard ViT patch embedding, a strided convolution), or
  :class:`OverlapPatchEmbed`, its variant with a kernel larger than its stride, when ``overlap > 0``.
* ``wavelet`` -- :class:`WaveletEmbed`, the wavelet tokenizer (Zhu & Soricut 2024): the fixed
  :class:`~robustbench_wave.models.wavelet.WaveletFrontEnd` followed by the learned block-sparse projection
  ``Q = blockdiag(Q_L, ..., Q_1)`` (one ``Linear(C_k, H_k)`` per level) and optional dense layers; with
  ``projection = "dense"`` one ``Linear(C, H)`` over the whole token instead (an ablation: with db1 at
  ``L = 2`` on gray images that is the patch tokenizer up to a fixed rotation of each 4x4 block).

Every tokenizer follows the ``PatchEmbed`` constructor contract (``img_size, patch_size, in_chans,
embed_dim, bias``) and exposes ``num_patches``, ``grid_size``, ``patch_size`` and ``feat_ratio()``, as timm's
hybrid embeds do. To add one, write the class and register it with :func:`register_tokenizer`; the zoo's
``tokenizer = "NAME"`` and :func:`robustbench_wave.models.vit.build_model` then find it by name.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from functools import partial
from typing import Any, TypeVar

import torch
from timm.layers import PatchEmbed
from torch import nn

from robustbench_wave.core.naming import parse_enum
from robustbench_wave.models.wavelet import WaveletFrontEnd

#: What timm's ``VisionTransformer(embed_layer=...)`` takes: a class or partial building the tokenizer.
EmbedLayer = Callable[..., nn.Module]
_T = TypeVar("_T")

DEFAULT_PATCH_SIZE = 4
DEFAULT_LEVELS = 2


@dataclass(frozen=True)
class Tokenizer:
    """A registered tokenizer: how to build timm's ``embed_layer`` from a spec's ``tokenizer_args``.

    ``token_size`` gives the side in pixels of the image region behind one token (timm's ``patch_size``);
    ``normalize_input`` says whether the model normalises images with the data set's mean/std before the
    tokenizer (the wavelet tokenizer works on [0, 1] pixels, its YCbCr offsets assume that scale).
    """

    name: str
    embed_layer: Callable[[dict[str, Any]], EmbedLayer]
    token_size: Callable[[dict[str, Any]], int]
    normalize_input: bool = True


TOKENIZERS: dict[str, Tokenizer] = {}


def register_tokenizer(
    name: str, *, token_size: Callable[[dict[str, Any]], int], normalize_input: bool = True
) -> Callable[[_T], _T]:
    """Register a tokenizer under ``name``.

    Decorate either an ``nn.Module`` class (the spec's ``tokenizer_args`` become its keyword arguments) or a
    function ``tokenizer_args -> embed_layer`` that chooses among classes.
    """

    def wrap(obj: _T) -> _T:
        if name in TOKENIZERS:
            raise ValueError(f"tokenizer {name!r} is already registered; choose another name")
        build = _keyword_builder(name, obj) if isinstance(obj, type) else obj
        TOKENIZERS[name] = Tokenizer(name, build, token_size, normalize_input)  # type: ignore[arg-type]
        return obj

    return wrap


#: Arguments timm's ``VisionTransformer`` passes to every ``embed_layer``; a spec does not set them.
_TIMM_EMBED_ARGS = frozenset({"self", "img_size", "in_chans", "embed_dim", "bias"})


def _keyword_builder(name: str, cls: type) -> Callable[[dict[str, Any]], EmbedLayer]:
    """``tokenizer_args -> partial(cls, **args)`` that refuses an argument ``cls`` does not name (its
    ``**kwargs`` take timm's extras, and would otherwise swallow a misspelt spec field without a word)."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    params = inspect.signature(cls.__init__).parameters.values()
    accepted = sorted({p.name for p in params if p.kind in kinds} - _TIMM_EMBED_ARGS)

    def build(args: dict[str, Any]) -> EmbedLayer:
        unknown = sorted(set(args) - set(accepted))
        if unknown:
            raise ValueError(f"unknown {name} tokenizer arguments {unknown}; it takes {accepted}")
        return partial(cls, **args)

    return build


def list_tokenizers() -> list[str]:
    """Names a zoo spec may give as ``tokenizer``."""
    return list(TOKENIZERS)


def get_tokenizer(name: str) -> Tokenizer:
    """The registered tokenizer ``name``; an unknown name says which ones exist."""
    try:
        return TOKENIZERS[name]
    except KeyError:
        raise ValueError(f"unknown tokenizer {name!r}; use one of {list_tokenizers()}") from None


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


@register_tokenizer("patch", token_size=lambda args: int(args.get("patch_size", DEFAULT_PATCH_SIZE)))
def patch_embed_layer(tokenizer_args: dict[str, Any]) -> EmbedLayer:
    """timm's ``PatchEmbed``, or :class:`OverlapPatchEmbed` when ``overlap`` (pixels) is positive."""
    args = dict(tokenizer_args)
    args.pop("patch_size", None)  # passed by the ViT as its patch_size
    overlap = args.pop("overlap", 0)
    if args:
        raise ValueError(f"unknown patch tokenizer arguments: {sorted(args)}")
    return partial(OverlapPatchEmbed, overlap=overlap) if overlap else PatchEmbed


class TokenWidthRule(str, Enum):
    """Named rules for the per-level token widths ``H_k`` (the ``token_widths`` value of a wavelet spec)."""

    PROPORTIONAL = "proportional"
    SOURCE_PAPER = "seed"  # the stored config value; the rule of the source paper (Zhu & Soricut 2024)


def source_paper_token_widths(block_sizes: Sequence[int], fine_fraction: float) -> list[int]:
    """The source paper's rule (Zhu & Soricut 2024): ``H_k = C_k`` for the two coarsest levels,
    ``H_k = ceil(p·C_k)`` for finer ones."""
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
    """Per-level widths ``H_k`` from a named :class:`TokenWidthRule` or an explicit list of ints."""
    if isinstance(rule, str):
        try:
            named = TokenWidthRule(rule)
        except ValueError:
            names = " or ".join(repr(r.value) for r in TokenWidthRule)
            raise ValueError(f"token_widths must be {names} or a list of ints, got {rule!r}") from None
        if named is TokenWidthRule.PROPORTIONAL:
            return proportional_token_widths(block_sizes, embed_dim)
        return source_paper_token_widths(block_sizes, fine_fraction)
    widths = [int(w) for w in rule]
    if len(widths) != len(block_sizes) or min(widths) < 1:
        raise ValueError(
            f"token_widths needs one positive width per level block ({len(block_sizes)} blocks of sizes "
            f"{list(block_sizes)}), got {widths}"
        )
    return widths


class ProjectionKind(str, Enum):
    """The wavelet tokenizer's learned projection (the ``projection`` value of a wavelet spec)."""

    BLOCK = "block"  # the paper's block-sparse Q = blockdiag(Q_L, ..., Q_1)
    DENSE = "dense"  # one Linear(C, H) over the whole token: the ablation of the block structure

    @classmethod
    def parse(cls, value: str) -> ProjectionKind:
        return parse_enum(cls, value, "projection")


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


@register_tokenizer(
    "wavelet",
    token_size=lambda args: int(args.get("patch_size", 2 ** args.get("levels", DEFAULT_LEVELS))),
    normalize_input=False,
)
class WaveletEmbed(nn.Module):
    """Wavelet tokenizer: fixed front-end (colour, DWT, W, sparsification) + learned semantic embedding.

    ``patch_size`` is accepted for timm's constructor contract; the token grid is set by ``levels``
    (one token per ``2^L x 2^L`` region). When the token width ``H = Σ H_k`` differs from the body's
    ``embed_dim`` a final ``Linear(H, embed_dim)`` adapts it (the source paper, Zhu & Soricut 2024 §5.3,
    treats them as separate knobs). ``projection = "dense"`` replaces the block-sparse projection by one
    ``Linear(C, H)`` (``H = Σ H_k``; only the sum of ``token_widths`` matters then).
    """

    def __init__(
        self,
        img_size: int | tuple[int, int] = 32,
        patch_size: int | None = None,
        in_chans: int = 1,
        embed_dim: int = 64,
        bias: bool = True,
        *,
        levels: int = DEFAULT_LEVELS,
        wavelet: str = "db1",
        zero_fraction: float = 0.8,
        exempt_approximation: bool = False,
        level_shift: bool = True,
        token_widths: str | Sequence[int] = TokenWidthRule.PROPORTIONAL.value,
        fine_fraction: float = 0.5,
        dense_layers: int = 0,
        projection: str = ProjectionKind.BLOCK.value,
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
        token_width = sum(widths)
        self.projection_kind = ProjectionKind.parse(projection)
        self.projection: nn.Module = (
            BlockSparseProjection(self.front_end.block_sizes, widths, bias=bias)
            if self.projection_kind is ProjectionKind.BLOCK
            else nn.Linear(self.front_end.embed_dim, token_width, bias=bias)
        )
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
