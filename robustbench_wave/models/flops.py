"""Analytic per-layer compute of plain and token-pooled ViTs, in multiply-accumulates (MACs).

The source papers count "FLOPs" as MACs (Marin et al., WACV 2023, arXiv 2110.03860, Table 1; Zhu & Soricut
2024 §5.3): per block with T tokens, token width H, attention width d_model and MLP hidden width m·H,

* attention: QKV and O projections ``4·T·H·d_model`` plus scores and weighted sum ``2·T²·d_model``
  (= ``4TH² + 2T²H`` when d_model = H);
* MLP: ``2·m·T·H²`` (every Linear in the block is applied once per token).

Token counts come from one dry forward pass at batch size 1 (so any tokenizer and any pooling schedule is
measured as it actually runs).  The tokenizer/embedding cost is counted with
``torch.utils.flop_counter.FlopCounterMode`` on the embed layer (its convolutions and matmuls: for the patch
tokenizer that is ``T·c·p²·H``; for the wavelet tokenizer the fixed DWT convolutions plus the block-sparse
projection).  The head is one ``H x classes`` matmul.  Norms, softmax, GELU, additions and sorting are not
counted (as in the papers).  Token Pooling's own cost is reported separately (``pooling_macs``), from the
matmuls its implementation runs:

* K-Means (weighted or not): ``iterations · 2·N·K·D`` (distances to the centres, one-hot mean update);
* K-Medoids (weighted or not): ``N²·D`` (pairwise distances) ``+ iterations · K·N²`` (medoid costs);
* grid: ``N·D`` additions; random / importance / top-k: 0 (selection only).

The significance scores cost nothing extra: they are read from the attention probabilities the preceding
block computes anyway (its O(T²) reductions are not counted).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from robustbench_wave.models.tokenpool import PoolMethod, TokenPooledBlocks, TokenPooling

log = logging.getLogger(__name__)


def block_macs(tokens: int, embed_dim: int, attn_dim: int, mlp_hidden: int) -> dict[str, int]:
    """MACs of one standard pre-norm block on ``tokens`` tokens (two-layer MLP), split by component."""
    t, h, d = tokens, embed_dim, attn_dim
    row = {"qkv": 3 * t * h * d, "attn": 2 * t * t * d, "proj": t * d * h, "mlp": 2 * t * h * mlp_hidden}
    row["macs"] = sum(row.values())
    return row


def pooling_macs(method: str, tokens_in: int, tokens_out: int, dim: int, iterations: int) -> int:
    """MACs of one Token Pooling layer (N = ``tokens_in`` non-prefix tokens -> K = ``tokens_out``)."""
    n, k, d = tokens_in, tokens_out, dim
    if method in (PoolMethod.KMEANS, PoolMethod.WEIGHTED_KMEANS):
        return iterations * 2 * n * k * d
    if method in (PoolMethod.KMEDOIDS, PoolMethod.WEIGHTED_KMEDOIDS):
        return (n * n * d + iterations * k * n * n) if iterations else 0
    if method == PoolMethod.GRID:
        return n * d
    return 0


def _find_vit(model: nn.Module) -> nn.Module:
    for module in model.modules():
        if hasattr(module, "blocks") and hasattr(module, "patch_embed"):
            return module
    raise ValueError(
        "vit_flops expects a model containing a timm VisionTransformer ('blocks' and 'patch_embed')"
    )


def _blocks(vit: nn.Module) -> list[nn.Module]:
    blocks = vit.blocks
    if isinstance(blocks, TokenPooledBlocks):
        return [blocks.block(i) for i in range(blocks.depth)]
    return list(blocks)


def _linear_macs_per_token(module: nn.Module) -> int:
    return sum(m.in_features * m.out_features for m in module.modules() if isinstance(m, nn.Linear))


def _block_row(block: nn.Module, tokens: int) -> dict[str, int]:
    attn = getattr(block, "attn", None)
    qkv, proj, mlp = getattr(attn, "qkv", None), getattr(attn, "proj", None), getattr(block, "mlp", None)
    if not isinstance(qkv, nn.Linear) or not isinstance(proj, nn.Linear) or mlp is None:
        raise ValueError(
            f"vit_flops supports timm blocks with attn.qkv, attn.proj and mlp, got {type(block).__name__}"
        )
    attn_dim = qkv.out_features // 3
    counted = {id(m) for m in (qkv, proj, *mlp.modules())}
    other = sum(
        m.in_features * m.out_features
        for m in block.modules()
        if isinstance(m, nn.Linear) and id(m) not in counted
    )
    row = {
        "qkv": tokens * qkv.in_features * qkv.out_features,
        "attn": 2 * tokens * tokens * attn_dim,
        "proj": tokens * proj.in_features * proj.out_features,
        "mlp": tokens * _linear_macs_per_token(mlp),
        "other": tokens * other,
    }
    row["macs"] = sum(row.values())
    return row


def _input_shape(
    model: nn.Module, vit: nn.Module, img_size: int | tuple[int, int] | None, in_chans: int | None
) -> tuple[int, int, int]:
    embed = vit.patch_embed
    if in_chans is None:
        in_chans = getattr(model, "in_chans", None) or getattr(embed, "in_chans", None)
        proj = getattr(embed, "proj", None)
        if in_chans is None and isinstance(proj, nn.Conv2d):
            in_chans = proj.in_channels
    if img_size is None:
        img_size = getattr(model, "img_size", None) or getattr(embed, "img_size", None)
    if in_chans is None or img_size is None:
        raise ValueError("vit_flops could not infer the input shape; pass img_size= and in_chans=")
    h, w = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
    return int(in_chans), int(h), int(w)


@dataclass
class _Trace:
    """What one dry forward pass saw: tokens entering each block, pooling shapes, the embed layer's MACs."""

    tokens: dict[int, int]
    pool_shapes: dict[int, tuple[int, int, int]]  # pool index -> (tokens in, tokens out, dim), non-prefix
    embed_tokens: int
    embed_macs: int


def _trace(
    model: nn.Module, vit: nn.Module, blocks: list[nn.Module], pools: list[TokenPooling], x: torch.Tensor
) -> _Trace:
    """Run ``model`` once on ``x`` in eval mode, hooks on the blocks and pools; restore the modes after."""
    tokens: dict[int, int] = {}
    pool_shapes: dict[int, tuple[int, int, int]] = {}
    handles = [
        blk.register_forward_pre_hook(lambda _m, args, i=i: tokens.__setitem__(i, args[0].shape[1]))
        for i, blk in enumerate(blocks)
    ]
    handles += [
        pool.register_forward_hook(
            lambda m, args, out, j=j: pool_shapes.__setitem__(
                j, (args[0].shape[1] - m.num_prefix_tokens, out.shape[1] - m.num_prefix_tokens, out.shape[2])
            )
        )
        for j, pool in enumerate(pools)
    ]
    modes = {m: m.training for m in model.modules()}
    try:
        model.eval()
        with torch.no_grad():
            model(x)
            with FlopCounterMode(display=False) as counter:
                embedded = vit.patch_embed(x)
    finally:
        for handle in handles:
            handle.remove()
        for module, mode in modes.items():
            module.training = mode
    return _Trace(tokens, pool_shapes, int(embedded.shape[1]), int(counter.get_total_flops()) // 2)


def _pool_row(i: int, pool: TokenPooling, shape: tuple[int, int, int]) -> dict[str, Any] | None:
    """The row of the pooling layer after block ``i``; None when it did not reduce the tokens."""
    n_in, n_out, dim = shape
    if n_out >= n_in:
        return None
    macs = pooling_macs(pool.method, n_in, n_out, dim, pool.iterations)
    return {"layer": f"pool{i}", "method": pool.method, "tokens_in": n_in, "tokens_out": n_out, "macs": macs}


def vit_flops(
    model: nn.Module, img_size: int | tuple[int, int] | None = None, *, in_chans: int | None = None
) -> dict[str, Any]:
    """Per-layer MACs of a (possibly token-pooled) ViT for one ``img_size`` image.

    Returns ``rows`` (embed, block<i>, pool<i>, head; each with ``macs`` and token counts), ``tokens``
    (sequence length entering each block, prefix included), ``embed_macs``, ``blocks_macs``,
    ``head_macs``, ``pooling_macs``, ``total_macs`` (the source papers' per-layer formulas: embed + blocks +
    head), ``total_macs_with_pooling`` (+ the clustering cost), ``dense_macs`` (the same model without
    pooling: every block at the tokenizer's token count) and ``saved_fraction`` =
    ``1 - total_macs_with_pooling / dense_macs``.
    """
    vit = _find_vit(model)
    c, h, w = _input_shape(model, vit, img_size, in_chans)
    param = next(model.parameters())
    blocks = _blocks(vit)
    pools = [m for m in vit.modules() if isinstance(m, TokenPooling)]
    trace = _trace(model, vit, blocks, pools, torch.zeros(1, c, h, w, dtype=param.dtype, device=param.device))
    tokens = trace.tokens

    rows: list[dict[str, Any]] = [{"layer": "embed", "tokens": trace.embed_tokens, "macs": trace.embed_macs}]
    pool_by_block = {}
    if isinstance(vit.blocks, TokenPooledBlocks):
        pool_by_block = {i: vit.blocks.pool(i) for i in range(len(blocks)) if vit.blocks.pool(i) is not None}
    pool_index = {id(p): j for j, p in enumerate(pools)}
    blocks_total = pooling_total = dense_total = 0
    for i, block in enumerate(blocks):
        row = {"layer": f"block{i}", "tokens": tokens[i], **_block_row(block, tokens[i])}
        rows.append(row)
        blocks_total += row["macs"]
        dense_total += _block_row(block, tokens[0])["macs"]
        pool = pool_by_block.get(i)
        if pool is not None and pool_index[id(pool)] in trace.pool_shapes:
            pool_row = _pool_row(i, pool, trace.pool_shapes[pool_index[id(pool)]])
            if pool_row is not None:
                rows.append(pool_row)
                pooling_total += pool_row["macs"]
    head = getattr(vit, "head", None)
    head_macs = _linear_macs_per_token(head) if isinstance(head, nn.Module) else 0
    rows.append({"layer": "head", "tokens": 1, "macs": head_macs})
    total = trace.embed_macs + blocks_total + head_macs
    dense = trace.embed_macs + dense_total + head_macs
    report = {
        "unit": "MAC", "img_size": [h, w], "in_chans": c, "rows": rows,
        "tokens": [tokens[i] for i in range(len(blocks))],
        "embed_macs": trace.embed_macs, "blocks_macs": blocks_total, "head_macs": head_macs,
        "pooling_macs": pooling_total, "total_macs": total, "total_macs_with_pooling": total + pooling_total,
        "dense_macs": dense, "saved_fraction": 1.0 - (total + pooling_total) / dense,
    }  # fmt: skip
    log.debug(
        "vit_flops: %.4g MACs (%.1f%% saved vs dense)",
        report["total_macs_with_pooling"],
        100 * report["saved_fraction"],
    )
    return report


def flops_summary(report: dict[str, Any]) -> dict[str, float]:
    """The few numbers a training summary shows: GMACs with/without pooling and the fraction saved."""
    return {
        "gmacs": report["total_macs_with_pooling"] / 1e9,
        "gmacs_no_pooling_overhead": report["total_macs"] / 1e9,
        "dense_gmacs": report["dense_macs"] / 1e9,
        "saved_fraction": report["saved_fraction"],
    }
