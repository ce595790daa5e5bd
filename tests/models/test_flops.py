"""Analytic ViT MACs (the source papers' formulas) against a hand-computed case and a brute-force count with
``torch.utils.flop_counter.FlopCounterMode`` on plain and token-pooled tiny ViTs."""

from __future__ import annotations

import pytest
import torch
from timm.layers import Attention
from timm.models.vision_transformer import VisionTransformer
from torch.utils.flop_counter import FlopCounterMode

from robustbench_wave.models.flops import block_macs, flops_summary, pooling_macs, vit_flops
from robustbench_wave.models.tokenpool import TokenPoolConfig, apply_token_pooling

T, H, M, P, C, CLASSES = 65, 32, 4, 4, 3, 10  # tokens (64 patches + CLS), width, mlp ratio, patch, chans


class WideAttention(Attention):
    """Attention width d_model = 48 != token width H = 32 (the source paper's H != d_model trade-off)."""

    def __init__(self, dim: int, **kwargs) -> None:
        super().__init__(dim, attn_head_dim=24, **kwargs)


def tiny_vit(**kwargs) -> VisionTransformer:
    torch.manual_seed(0)
    args = dict(img_size=32, patch_size=P, in_chans=C, num_classes=CLASSES, embed_dim=H, depth=4, num_heads=2)
    return VisionTransformer(**{**args, **kwargs}).eval()


def brute_force_macs(vit: VisionTransformer) -> int:
    """Count every conv/matmul the forward pass runs (explicit attention so its matmuls are counted too)."""
    for module in vit.modules():
        if hasattr(module, "fused_attn"):
            module.fused_attn = False
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        vit(torch.rand(1, C, 32, 32))
    return counter.get_total_flops() // 2


def test_plain_vit_matches_hand_computed_paper_formulas():
    report = vit_flops(tiny_vit(), 32, in_chans=C)
    attention = 2 * T**2 * H + 4 * T * H**2  # seed: 2T²H + 4TH² per block
    mlp = 2 * M * T * H**2  # seed: 2mTH²
    embed = (T - 1) * C * P * P * H  # patch tokenizer: one c·p² -> H map per patch
    assert report["tokens"] == [T] * 4
    for row in report["rows"][1:5]:
        assert row["qkv"] + row["attn"] + row["proj"] == attention and row["mlp"] == mlp and row["other"] == 0
    assert report["embed_macs"] == embed == 98304
    assert report["head_macs"] == H * CLASSES
    assert report["total_macs"] == 4 * (attention + mlp) + embed + H * CLASSES == 4375104
    assert report["pooling_macs"] == 0 and report["dense_macs"] == report["total_macs"]
    assert report["saved_fraction"] == 0.0
    assert block_macs(T, H, H, M * H)["macs"] == attention + mlp


def test_pooled_vit_rows_follow_token_schedule():
    vit = apply_token_pooling(
        tiny_vit(), TokenPoolConfig(method="kmeans", keep=(48, 32, 16, 16), iterations=3)
    )
    report = vit_flops(vit, 32, in_chans=C)
    assert report["tokens"] == [65, 49, 33, 17]
    blocks = [r for r in report["rows"] if r["layer"].startswith("block")]
    assert [r["macs"] for r in blocks] == [block_macs(t, H, H, M * H)["macs"] for t in (65, 49, 33, 17)]
    pools = [r for r in report["rows"] if r["layer"].startswith("pool")]
    assert [(r["tokens_in"], r["tokens_out"]) for r in pools] == [(64, 48), (48, 32), (32, 16)]
    assert report["pooling_macs"] == sum(3 * 2 * n * k * H for n, k in [(64, 48), (48, 32), (32, 16)])
    assert report["dense_macs"] == vit_flops(tiny_vit(), 32, in_chans=C)["total_macs"]
    expected_saved = 1 - report["total_macs_with_pooling"] / report["dense_macs"]
    assert report["saved_fraction"] == pytest.approx(expected_saved) and report["saved_fraction"] > 0
    assert flops_summary(report)["gmacs"] == report["total_macs_with_pooling"] / 1e9


@pytest.mark.parametrize(
    ("method", "attn_layer"),
    [
        (None, None),
        (None, WideAttention),
        ("kmeans", None),
        ("weighted-kmedoids", WideAttention),
        ("topk", None),
    ],
)
def test_analytic_count_equals_brute_force(method, attn_layer):
    vit = tiny_vit(**({"attn_layer": attn_layer} if attn_layer else {}))
    if method:
        apply_token_pooling(vit, TokenPoolConfig(method=method, keep=(48, 32, 16, 16)))
    report = vit_flops(vit, 32, in_chans=C)
    assert report["total_macs_with_pooling"] == brute_force_macs(vit)


def test_pooling_cost_formulas():
    assert pooling_macs("weighted-kmedoids", 64, 48, 32, 3) == 64 * 64 * 32 + 3 * 48 * 64 * 64
    assert pooling_macs("kmedoids", 64, 48, 32, 0) == 0
    assert pooling_macs("grid", 64, 16, 32, 3) == 64 * 32
    assert pooling_macs("topk", 64, 16, 32, 3) == pooling_macs("random", 64, 16, 32, 3) == 0
