"""Token Pooling (Marin et al., WACV 2023): clustering against hand-computed / brute-force oracles, and the
pooling layer inside a tiny timm ViT (schedule, CLS, identity, gradients, gradient modes, determinism)."""

from __future__ import annotations

import itertools

import pytest
import torch
from timm.models.vision_transformer import VisionTransformer

from robustbench_wave.models.frontend import grad_mode, has_fixed_front_end
from robustbench_wave.models.tokenpool import (
    METHODS,
    TokenPoolConfig,
    TokenPooledBlocks,
    TokenPooling,
    apply_token_pooling,
    clustering_objective,
    grid_pool,
    importance_index,
    kmeans,
    kmedoids,
    pool_tokens,
    soft_kmeans_step,
    soft_medoid_step,
    token_pooling_layers,
    token_significance,
)

KEEP = (48, 32, 16, 16)  # 8x8 = 64 patch tokens; the last entry equals the incoming count: no pooling there
GRID_KEEP = (36, 16, 4, 4)


def tiny_vit(**kwargs) -> VisionTransformer:
    torch.manual_seed(0)
    args = dict(img_size=32, patch_size=4, in_chans=3, num_classes=10, embed_dim=32, depth=4, num_heads=2)
    return VisionTransformer(**{**args, **kwargs})


def pooled_vit(method: str, **kwargs) -> VisionTransformer:
    keep = GRID_KEEP if method == "grid" else KEEP
    return apply_token_pooling(tiny_vit(**kwargs), TokenPoolConfig(method=method, keep=keep))


def block_input_lengths(vit: VisionTransformer, x: torch.Tensor) -> list[int]:
    lengths: list[int] = []
    blocks = [vit.blocks.block(i) for i in range(len(vit.blocks))]
    handles = [b.register_forward_pre_hook(lambda _m, a: lengths.append(a[0].shape[1])) for b in blocks]
    try:
        with torch.no_grad():
            vit(x)
    finally:
        for h in handles:
            h.remove()
    return lengths


def line(*values: float) -> torch.Tensor:
    """Points on a line as a (1, N, 1) float64 token batch."""
    return torch.tensor(values, dtype=torch.float64).view(1, -1, 1)


# ------------------------------------------------------------------------------------------ clustering


def test_kmeans_hand_computed_unweighted_and_weighted():
    x = line(0, 1, 2, 10, 11, 12)
    init = torch.tensor([[0, 3]])
    assert kmeans(x, init, 1).centers.flatten().tolist() == [1.0, 11.0]
    w = torch.tensor([[1.0, 1.0, 10.0, 1.0, 1.0, 1.0]], dtype=torch.float64)
    centers = kmeans(x, init, 1, weights=w).centers.flatten()
    torch.testing.assert_close(centers, torch.tensor([21 / 12, 11.0], dtype=torch.float64))


def test_kmeans_empty_cluster_keeps_previous_centre():
    x = line(0, 0, 5)  # both initial centres at 0: ties go to cluster 0, cluster 1 stays empty
    centers = kmeans(x, torch.tensor([[0, 1]]), 1).centers.flatten()
    torch.testing.assert_close(centers, torch.tensor([5 / 3, 0.0], dtype=torch.float64))


def reference_lloyd(x: torch.Tensor, init: torch.Tensor, iterations: int, w: torch.Tensor) -> torch.Tensor:
    """Loop-based Lloyd on one example (N, D): the oracle for the batched implementation."""
    centers = x[init].clone()
    for _ in range(iterations):
        assign = [min(range(len(centers)), key=lambda j: float(((xi - centers[j]) ** 2).sum())) for xi in x]
        for j in range(len(centers)):
            members = [i for i, a in enumerate(assign) if a == j]
            if members:
                centers[j] = sum(w[i] * x[i] for i in members) / sum(w[i] for i in members)
    return centers


@pytest.mark.parametrize("weighted", [False, True])
def test_kmeans_objective_never_increases_and_matches_reference(weighted):
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(3, 20, 4, generator=gen, dtype=torch.float64)
    w = torch.rand(3, 20, generator=gen, dtype=torch.float64) + 0.1 if weighted else None
    init = torch.randperm(20, generator=gen)[:5].sort().values.expand(3, 5)
    objectives = [clustering_objective(x, kmeans(x, init, t, w).centers, w) for t in range(6)]
    for before, after in itertools.pairwise(objectives):
        assert (after <= before + 1e-9).all()
    assert (objectives[-1] < objectives[0]).all()
    got = kmeans(x, init, 3, w).centers
    for b in range(3):
        weights = w[b] if weighted else torch.ones(20, dtype=torch.float64)
        torch.testing.assert_close(got[b], reference_lloyd(x[b], init[b], 3, weights))


def brute_force_medoids(x: torch.Tensor, k: int, w: torch.Tensor | None = None) -> float:
    """Global optimum of the (weighted) K-Medoids objective for one example (1, N, D): every K-subset."""
    subsets = torch.tensor(list(itertools.combinations(range(x.shape[1]), k)))  # (S, K)
    n_sub = subsets.shape[0]
    weights = None if w is None else w.expand(n_sub, -1)
    return float(clustering_objective(x.expand(n_sub, -1, -1), x[0, subsets], weights).min())


def test_kmedoids_picks_actual_tokens_and_reaches_brute_force_optimum():
    # three 2-D blobs; the initial medoids are each blob's outermost point, the optimum its central point
    pts = [(0, 0), (1, 0), (2, 0), (10, 10), (10, 11), (10, 12), (20, 0), (21, 0), (22, 0)]
    x = torch.tensor(pts, dtype=torch.float64).unsqueeze(0)
    result = kmedoids(x, torch.tensor([[0, 3, 8]]), 2)
    assert result.index.tolist() == [[1, 4, 7]]
    for row in result.centers[0]:
        assert any(torch.equal(row, token) for token in x[0])
    assert float(clustering_objective(x, result.centers)) == pytest.approx(brute_force_medoids(x, 3))


def test_kmedoids_random_cases_bounded_by_brute_force_and_monotone():
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(4, 8, 2, generator=gen, dtype=torch.float64)
    w = torch.rand(4, 8, generator=gen, dtype=torch.float64) + 0.1
    init = torch.stack([torch.randperm(8, generator=gen)[:3].sort().values for _ in range(4)])
    objectives = torch.stack([clustering_objective(x, kmedoids(x, init, t, w).centers, w) for t in range(5)])
    assert (objectives[1:] <= objectives[:-1] + 1e-12).all()
    for b in range(4):
        assert float(objectives[-1, b]) >= brute_force_medoids(x[b : b + 1], 3, w[b : b + 1]) - 1e-12


def test_weighted_kmedoids_honours_weights():
    x = line(0, 1, 2)
    init = torch.tensor([[0]])
    assert kmedoids(x, init, 2).index.tolist() == [[1]]  # unweighted medoid: the middle point
    w = torch.tensor([[1.0, 1.0, 10.0]], dtype=torch.float64)
    assert kmedoids(x, init, 2, weights=w).index.tolist() == [[2]]  # cost 5 at 2 vs 11 at 1 vs 41 at 0


def test_significance_is_powerbert_score():
    gen = torch.Generator().manual_seed(3)
    probs = torch.softmax(torch.randn(2, 3, 5, 5, generator=gen), dim=-1)  # (B, heads, T, T)
    got = token_significance(probs, num_prefix_tokens=1)
    for b in range(2):
        for j in range(1, 5):
            expected = sum(probs[b, h, i, j] for h in range(3) for i in range(5) if i != j) / 3
            torch.testing.assert_close(got[b, j - 1], expected)


def test_captured_attention_is_timms_softmax():
    vit = pooled_vit("topk")
    block = vit.blocks.block(0)
    x = torch.randn(2, 65, 32)
    captured: list[torch.Tensor] = []
    handle = block.attn.attn_drop.register_forward_hook(lambda _m, a, _o: captured.append(a[0]))
    with torch.no_grad():
        block(x)
    handle.remove()
    a = block.attn
    qkv = a.qkv(block.norm1(x)).reshape(2, 65, 3, 2, 16).permute(2, 0, 3, 1, 4)
    expected = torch.softmax(qkv[0] @ qkv[1].transpose(-2, -1) * 16**-0.5, dim=-1)
    torch.testing.assert_close(captured[0], expected)


def test_importance_sampling_frequencies_follow_significance():
    n_draws = 20000
    significance = torch.tensor([[1.0, 2.0, 3.0, 4.0]]).expand(n_draws, 4)
    noise = torch.rand(n_draws, 4, generator=torch.Generator().manual_seed(4))
    first = importance_index(significance, noise, 1).flatten()
    freq = torch.bincount(first, minlength=4).double() / n_draws
    torch.testing.assert_close(
        freq, torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64), atol=0.015, rtol=0
    )
    two = importance_index(significance[:50], noise[:50], 2)
    assert (two[:, 0] < two[:, 1]).all()  # distinct (without replacement), in token order


def test_grid_pool_is_block_average():
    x = torch.arange(16.0).view(1, 16, 1)  # 4x4 grid, row-major
    got = grid_pool(x, (4, 4), 4).flatten()
    torch.testing.assert_close(got, torch.tensor([2.5, 4.5, 10.5, 12.5]))


@pytest.mark.parametrize("method", METHODS)
def test_pool_keeps_requested_count_and_is_identity_at_k_equals_n(method):
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(2, 16, 8, generator=gen)
    sig = torch.rand(2, 16, generator=gen) + 0.01
    noise = torch.rand(1, 16, generator=gen)
    kw = dict(significance=sig, noise=noise, grid=(4, 4))
    pooled, _ = pool_tokens(x, 4, method, **kw)
    assert pooled.shape == (2, 4, 8)
    if method in ("random", "importance", "topk", "kmedoids", "weighted-kmedoids"):
        for b in range(2):  # selections: every output is an input token, no duplicates
            idx = [int((x[b] == row).all(-1).nonzero()) for row in pooled[b]]
            assert len(set(idx)) == 4
    if method == "topk":
        assert torch.equal(
            pooled, x.gather(1, sig.topk(4).indices.sort().values.unsqueeze(-1).expand(-1, -1, 8))
        )
    identity, _ = pool_tokens(x, 16, method, **kw)
    torch.testing.assert_close(identity, x)


def test_bpda_surrogates_tend_to_the_exact_step():
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(2, 20, 3, generator=gen, dtype=torch.float64)
    init = torch.arange(5).expand(2, 5)
    km = kmeans(x, init, 3)
    torch.testing.assert_close(soft_kmeans_step(x, km.anchors, None, 1e-4), km.centers)
    kd = kmedoids(x, init, 3)
    torch.testing.assert_close(soft_medoid_step(x, kd.assignment, kd.index, None, 1e-4), kd.centers)


# ---------------------------------------------------------------------------------- inside a tiny ViT


def test_token_counts_follow_schedule():
    x = torch.rand(2, 3, 32, 32)
    assert block_input_lengths(pooled_vit("kmeans"), x) == [65, 49, 33, 17]
    assert block_input_lengths(pooled_vit("grid"), x) == [65, 37, 17, 5]
    ratio = apply_token_pooling(tiny_vit(), TokenPoolConfig(method="topk", keep_ratio=(0.75, 0.5, 0.5, 0.25)))
    assert block_input_lengths(ratio, x) == [65, 49, 33, 33]
    assert sorted(int(k) for k in ratio.blocks.pools) == [0, 1, 3]  # equal entries insert no layer


def test_model_without_cls_token_pools_every_token():
    vit = pooled_vit("weighted-kmedoids", class_token=False, global_pool="avg")
    assert block_input_lengths(vit, torch.rand(2, 3, 32, 32)) == [64, 48, 32, 16]
    assert vit(torch.rand(2, 3, 32, 32)).shape == (2, 10)


def input_gradient(
    vit: VisionTransformer, x: torch.Tensor, mode: str
) -> tuple[torch.Tensor, torch.Tensor | None]:
    x = x.clone().requires_grad_(True)
    with grad_mode(vit, mode):
        out = vit(x)
        (grad,) = torch.autograd.grad(out[:, 0].sum(), x, allow_unused=True)
    return out.detach(), grad


@pytest.mark.parametrize("method", ["kmeans", "weighted-kmedoids", "topk", "grid"])
def test_gradient_modes(method):
    vit = pooled_vit(method).eval()
    assert has_fixed_front_end(vit)
    x = torch.rand(2, 3, 32, 32)
    exact_out, exact_grad = input_gradient(vit, x, "exact")
    blocked_out, blocked_grad = input_gradient(vit, x, "blocked")
    bpda_out, bpda_grad = input_gradient(vit, x, "bpda")
    torch.testing.assert_close(blocked_out, exact_out)
    torch.testing.assert_close(bpda_out, exact_out)
    assert blocked_grad is None  # nothing upstream of the first pooling layer gets a gradient
    assert exact_grad.abs().sum() > 0 and torch.isfinite(bpda_grad).all()
    if method in ("kmeans", "weighted-kmedoids"):  # the soft surrogate changes the backward pass
        assert not torch.allclose(bpda_grad, exact_grad)
    else:  # no smooth surrogate: bpda == exact
        torch.testing.assert_close(bpda_grad, exact_grad)
    assert all(p.grad_mode.value == "exact" for p in token_pooling_layers(vit))  # restored


@pytest.mark.parametrize("method", METHODS)
def test_pooled_vit_prefix_determinism_and_gradients(method):
    """One model per method (CLS + 2 register tokens): prefix tokens leave every pooling layer unchanged,
    eval mode is deterministic and batch-independent, and training gradients reach every parameter."""
    vit = pooled_vit(method, reg_tokens=2).eval()
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []
    for pool in token_pooling_layers(vit):
        pool.register_forward_hook(lambda _m, a, out: seen.append((a[0], out)))
    x = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        first, second, alone = vit(x), vit(x), vit(x[1:])
    assert torch.equal(first, second)
    torch.testing.assert_close(alone, first[1:], atol=1e-5, rtol=1e-4)
    assert [s[1].shape[1] for s in seen[:3]] == [3 + k for k in (GRID_KEEP if method == "grid" else KEEP)[:3]]
    for before, after in seen:
        assert torch.equal(after[:, :3], before[:, :3])
    vit.train()
    vit(x).logsumexp(-1).sum().backward()
    missing = [n for n, p in vit.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert not missing


def test_random_baseline_is_stochastic_in_training_mode():
    vit = pooled_vit("random").train()
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        assert not torch.equal(vit(x), vit(x))


def test_state_dict_keys_match_plain_vit_and_load():
    plain, pooled = tiny_vit(), pooled_vit("weighted-kmedoids")
    assert list(plain.state_dict()) == list(pooled.state_dict())
    pooled.load_state_dict(plain.state_dict(), strict=True)
    with pytest.raises(TypeError, match="cannot be iterated"):
        list(pooled.blocks)
    assert isinstance(pooled.blocks, TokenPooledBlocks) and len(pooled.blocks) == 4
    with pytest.raises(ValueError, match="already has token pooling"):
        apply_token_pooling(pooled, TokenPoolConfig(keep=KEEP))


def test_config_from_dict_and_validation():
    table = {"method": "kmeans", "keep": [48, 32, 16, 16], "iterations": 5}
    config = TokenPoolConfig.from_dict(table)
    assert config.keep == (48, 32, 16, 16) and config.init == "topk-significance"
    assert TokenPoolConfig.from_dict(config.to_dict()) == config
    bad = [
        ({**table, "iters": 3}, "unknown"),
        ({**table, "method": "kmode"}, "unknown token pooling method"),
        ({**table, "keep_ratio": [0.5] * 4}, "exactly one"),
        ({"method": "kmeans"}, "exactly one"),
        ({**table, "keep": [16, 32, 16, 16]}, "non-increasing"),
        ({**table, "keep": [48, 0, 0, 0]}, "positive"),
        ({**table, "iterations": -1}, "iterations"),
    ]
    for values, message in bad:
        with pytest.raises(ValueError, match=message):
            TokenPoolConfig.from_dict(values)
    with pytest.raises(ValueError, match="4 blocks"):
        apply_token_pooling(tiny_vit(), TokenPoolConfig(keep=(48, 32)))
    with pytest.raises(ValueError, match="grid pooling cannot keep 37"):
        apply_token_pooling(tiny_vit(), TokenPoolConfig(method="grid", keep=(37, 16, 4, 4)))


def test_pooling_layer_passes_short_sequences_unchanged():
    pool = TokenPooling("kmeans", 8, num_prefix_tokens=1)
    x = torch.randn(2, 9, 4)
    assert pool(x, torch.rand(2, 8)) is x
