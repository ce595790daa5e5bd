"""Zoo models: one timm ``VisionTransformer`` body, different tokenizers, normalization inside the model.

Every model built here takes images in [0, 1] and returns logits, so attacks measure eps in pixel units
(RobustBench's convention).  The bodies are timm's own ``VisionTransformer`` with a custom ``embed_layer``;
the variants are registered with ``@register_model`` so ``timm.create_model("vit_tiny_wavelet_db1_l2_32")``
works as for any timm model.  The token width H may differ from the attention width d_model (the source
paper, Zhu & Soricut 2024 §5.3) through timm's ``Attention(attn_head_dim=...)``.  Tokenizers are looked up by
name in :mod:`robustbench_wave.models.tokenizers`' registry.
"""

from __future__ import annotations

import logging
from typing import Any

import timm
import torch
from timm.layers import Attention
from timm.models import register_model
from timm.models.vision_transformer import VisionTransformer
from torch import nn

from robustbench_wave.models.tokenizers import Tokenizer, get_tokenizer
from robustbench_wave.models.zoo import input_normalized, load_spec

log = logging.getLogger(__name__)


class Normalize(nn.Module):
    """``(x - mean) / std`` per channel, as the first layer of the model (RobustBench style)."""

    def __init__(self, mean: tuple[float, ...], std: tuple[float, ...]) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - self.mean) / self.std


class ImageClassifier(nn.Module):
    """[0, 1] images -> logits: input check, optional normalization, then the ViT.

    Whether the data set's mean/std normalise the input is the tokenizer's ``normalize_input``: the wavelet
    tokenizer works on [0, 1] pixels (its YCbCr offsets assume that scale), the patch tokenizer gets the
    usual normalization. A spec's top-level ``normalize_input`` overrides it (an ablation).
    """

    def __init__(self, body: nn.Module, in_chans: int, img_size: int, normalize: Normalize | None) -> None:
        super().__init__()
        self.normalize = normalize if normalize is not None else nn.Identity()
        self.body = body
        self.in_chans = in_chans
        self.img_size = img_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim != 4 or tuple(x.shape[1:]) != (self.in_chans, self.img_size, self.img_size):
            raise ValueError(
                f"this model takes (B, {self.in_chans}, {self.img_size}, {self.img_size}) images in [0, 1], "
                f"got {tuple(x.shape)}; resize/pad the data or build the model for this size"
            )
        return self.body(self.normalize(x))


_TIMM_FACTORY_KWARGS = ("pretrained_cfg", "pretrained_cfg_overlay", "cache_dir")


def attention_with_width(attn_dim: int) -> type[Attention]:
    """timm ``Attention`` whose q/k/v width is ``attn_dim`` (d_model) rather than the token width H.

    timm's block factory requires an ``Attention`` subclass (a ``partial`` is rejected), hence a class.
    """

    class WidthAttention(Attention):
        def __init__(self, dim: int, num_heads: int = 8, **kwargs: Any) -> None:
            kwargs.setdefault("attn_head_dim", attn_dim // num_heads)
            super().__init__(dim, num_heads, **kwargs)

    WidthAttention.__name__ = WidthAttention.__qualname__ = f"Attention{attn_dim}"
    return WidthAttention


def _check_pretrained(pretrained: bool) -> None:
    if pretrained:
        raise ValueError(
            "robustbench_wave models have no pretrained weights; train them with robustbench_wave.train"
        )


def _token_size(entry: Tokenizer, tokenizer_args: dict[str, Any], img_size: int) -> int:
    """The side in pixels of one token, a whole number >= 1 that divides the image side."""
    try:
        size = entry.token_size(tokenizer_args)
    except (TypeError, ValueError, OverflowError) as err:
        raise ValueError(f"tokenizer_args {tokenizer_args} give no token size: {err}") from None
    if size < 1:
        raise ValueError(f"tokenizer_args {tokenizer_args} give a token size of {size} px; it must be >= 1")
    if img_size % size:
        raise ValueError(
            f"image size {img_size} is not divisible by the token size {size} px (tokenizer_args "
            f"{tokenizer_args}); choose a patch_size, or wavelet levels (token = 2^levels px), that divides it"
        )
    return size


@register_model
def rbw_vit(
    pretrained: bool = False,
    *,
    tokenizer: str = "patch",
    tokenizer_args: dict[str, Any] | None = None,
    img_size: int = 32,
    in_chans: int = 1,
    num_classes: int = 10,
    embed_dim: int = 64,
    depth: int = 4,
    num_heads: int = 4,
    mlp_ratio: float = 2.0,
    attn_dim: int | None = None,
    **kwargs: Any,
) -> VisionTransformer:
    """Generic robustbench_wave ViT: any tokenizer, a timm body whose attention width may differ from H."""
    _check_pretrained(pretrained)
    for key in _TIMM_FACTORY_KWARGS:  # create_model's bookkeeping for pretrained weights, unused here
        kwargs.pop(key, None)
    tokenizer_args = dict(tokenizer_args or {})
    entry = get_tokenizer(tokenizer)
    patch_size = _token_size(entry, tokenizer_args, img_size)
    if attn_dim is not None and attn_dim % num_heads:
        raise ValueError(f"attn_dim {attn_dim} must be divisible by num_heads {num_heads}")
    attn_layer = attention_with_width(attn_dim) if attn_dim else Attention
    return VisionTransformer(
        img_size=img_size,
        patch_size=patch_size,
        in_chans=in_chans,
        num_classes=num_classes,
        embed_dim=embed_dim,
        depth=depth,
        num_heads=num_heads,
        mlp_ratio=mlp_ratio,
        embed_layer=entry.embed_layer(tokenizer_args),
        attn_layer=attn_layer,
        **kwargs,
    )


@register_model
def vit_tiny_patch4_32(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return rbw_vit(pretrained, tokenizer="patch", tokenizer_args={"patch_size": 4}, **kwargs)


@register_model
def vit_tiny_wavelet_db1_l2_32(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return rbw_vit(pretrained, tokenizer="wavelet", tokenizer_args={"wavelet": "db1", "levels": 2}, **kwargs)


@register_model
def vit_tiny_wavelet_coif1_l2_32(pretrained: bool = False, **kwargs: Any) -> VisionTransformer:
    return rbw_vit(
        pretrained, tokenizer="wavelet", tokenizer_args={"wavelet": "coif1", "levels": 2}, **kwargs
    )


def build_model(name_or_spec: str | dict[str, Any], info: Any) -> ImageClassifier:
    """Build a zoo model (name, TOML path or resolved spec) for a data set described by ``info``.

    ``info`` is a :class:`robustbench_wave.data.DatasetInfo` (num_classes, in_chans, img_size, mean, std).
    The spec's optional ``normalize_input`` overrides the tokenizer's choice of input standardisation.
    """
    spec = load_spec(name_or_spec) if not isinstance(name_or_spec, dict) else name_or_spec
    body = timm.create_model(
        "rbw_vit",
        tokenizer=spec["tokenizer"],
        tokenizer_args=spec.get("tokenizer_args", {}),
        img_size=info.img_size,
        in_chans=info.in_chans,
        num_classes=info.num_classes,
        **spec["body"],
    )
    if "tokenpool" in spec:
        from robustbench_wave.models.tokenpool import TokenPoolConfig, apply_token_pooling

        body = apply_token_pooling(body, TokenPoolConfig.from_dict(spec["tokenpool"]))
    normalize = (
        Normalize(tuple(info.mean), tuple(info.std))
        if input_normalized(spec, get_tokenizer(spec["tokenizer"]).normalize_input)
        else None
    )
    model = ImageClassifier(body, info.in_chans, info.img_size, normalize)
    log.debug("built %s: %d parameters", spec.get("name", "model"), count_parameters(model))
    return model


def check_buildable(spec: dict[str, Any], info: Any, where: str) -> None:
    """Build the model once on the CPU, the global random state untouched, so that a spec the data set
    cannot take is refused before its run folder exists; ``where`` (the spec file) starts the message."""
    with torch.random.fork_rng(devices=[]):
        try:
            build_model(spec, info)
        except (ValueError, TypeError) as err:
            raise ValueError(f"{where}: {err}") from None


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def describe(model: ImageClassifier) -> dict[str, Any]:
    """Token count and token width of a built model, for the training summary."""
    embed = model.body.patch_embed
    return {
        "params": count_parameters(model),
        "tokens": int(embed.num_patches),
        "token_width": int(getattr(embed, "token_width", model.body.embed_dim)),
        "embed_dim": int(model.body.embed_dim),
    }
