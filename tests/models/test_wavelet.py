"""The wavelet front-end against independent oracles: PyWavelets, hand-computed cases, spec.md's formulas."""

from __future__ import annotations

import numpy as np
import pytest
import pywt
import torch

from robustbench_wave.models.frontend import GradMode, grad_mode
from robustbench_wave.models.wavelet import (
    WaveletFrontEnd,
    block_sizes,
    dwt2,
    filter_bank,
    idwt2,
    rgb_to_ycbcr,
    wavedec2,
    waverec2,
)

WAVELETS = ["db1", "coif1", "db2", "sym3"]


@pytest.fixture
def double():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


@pytest.mark.parametrize("name", WAVELETS)
def test_one_level_equals_pywavelets_periodization(name, double):
    x = torch.rand(2, 3, 16, 12)
    ours = dwt2(x, filter_bank(name)).numpy()
    ca, (ch, cv, cd) = pywt.dwt2(x.numpy(), name, mode="periodization")
    np.testing.assert_allclose(ours, np.stack([ca, ch, cv, cd], axis=2), atol=1e-12)


@pytest.mark.parametrize("name", WAVELETS)
@pytest.mark.filterwarnings("ignore:Level value")
def test_multilevel_equals_wavedec2_and_inverts_exactly(name, double):
    x = torch.rand(2, 1, 32, 32)
    bank = filter_bank(name)
    approx, details = wavedec2(x, bank, 3)
    ref = pywt.wavedec2(x.numpy(), name, mode="periodization", level=3)
    np.testing.assert_allclose(approx.numpy(), ref[0], atol=1e-12)
    for level in (1, 2, 3):  # pywt lists details coarsest first
        np.testing.assert_allclose(details[level - 1].numpy(), np.stack(ref[-level], axis=2), atol=1e-12)
    torch.testing.assert_close(waverec2(approx, details, bank), x, atol=1e-9, rtol=0)  # pywt filters: ~1e-11
    torch.testing.assert_close(idwt2(dwt2(x, bank), bank), x, atol=1e-9, rtol=0)


def test_haar_hand_computed_case(double):
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]]).view(1, 1, 2, 2)
    bands = dwt2(x, filter_bank("db1")).flatten().tolist()
    # cA = sum/2; cH (detail along y) = (top - bottom)/2; cV (detail along x) = (left - right)/2; cD = diagonal
    assert bands == pytest.approx([5.0, -2.0, -1.0, 0.0])


def test_dwt_is_orthogonal(double):
    x = torch.rand(3, 2, 16, 16)
    coeffs = dwt2(x, filter_bank("coif1"))
    torch.testing.assert_close(coeffs.square().sum(), x.square().sum())


def test_ycbcr_matches_jfif_reference(double):
    rgb = torch.tensor([1.0, 0.0, 0.0]).view(1, 3, 1, 1)  # pure red
    y, cb, cr = rgb_to_ycbcr(rgb).flatten().tolist()
    assert (y, cb, cr) == pytest.approx((0.299, 0.5 - 0.168736, 1.0))
    gray = torch.full((1, 3, 1, 1), 0.4)
    assert rgb_to_ycbcr(gray).flatten().tolist() == pytest.approx([0.4, 0.5, 0.5])


@pytest.mark.parametrize(
    ("in_chans", "levels", "expected"),
    [(1, 1, [4]), (1, 2, [4, 12]), (1, 3, [4, 12, 48]), (3, 1, [6]), (3, 2, [12, 12]), (3, 3, [12, 36, 48]),
     (3, 4, [12, 36, 144, 192])],
)  # fmt: skip
def test_block_sizes_follow_spec_formulas(in_chans, levels, expected):
    sizes = block_sizes(in_chans, levels)
    assert sizes == expected
    assert sum(sizes) == (4**levels if in_chans == 1 else 6 * 4 ** (levels - 1))


def test_source_paper_example_128px_colour_two_levels():
    front = WaveletFrontEnd(128, 3, levels=2, zero_fraction=0.0)
    w = front.pixel_embedding(torch.rand(1, 3, 128, 128))
    assert w.shape == (1, 32 * 32, 24)
    assert front.block_sizes == [12, 12]


@pytest.mark.parametrize("in_chans", [1, 3])
@pytest.mark.parametrize("levels", [1, 2, 3])
@pytest.mark.parametrize("name", ["db1", "coif1"])
def test_pixel_embedding_inverts_exactly_without_sparsification(in_chans, levels, name, double):
    front = WaveletFrontEnd(32, in_chans, levels=levels, wavelet=name, zero_fraction=0.0)
    x = torch.rand(2, in_chans, 32, 32)
    planes = front.reconstruct(front.pixel_embedding(x))
    ycbcr = (x if in_chans == 1 else rgb_to_ycbcr(x)) - 0.5  # JPEG2000 DC level shift
    torch.testing.assert_close(planes[0], ycbcr[:, :1], atol=1e-12, rtol=0)
    if in_chans == 3:
        torch.testing.assert_close(
            planes[1], torch.nn.functional.avg_pool2d(ycbcr[:, 1:], 2), atol=1e-12, rtol=0
        )


def test_token_carries_exactly_its_region():
    """Changing one 4x4 region changes only that region's token (locality of W, spec.md §2.5)."""
    front = WaveletFrontEnd(32, 1, levels=2, wavelet="db1", zero_fraction=0.0)
    x = torch.rand(1, 1, 32, 32)
    y = x.clone()
    y[..., 8:12, 20:24] += 0.3  # token row 2, column 5 of the 8x8 grid
    changed = (
        (front.pixel_embedding(y) - front.pixel_embedding(x)).abs().sum(-1).flatten().nonzero().flatten()
    )
    assert changed.tolist() == [2 * 8 + 5]


def test_db1_embedding_against_pywavelets_coefficients(double):
    """W's coarsest block holds pywt's level-2 bands; the finer block holds level 1 space-to-depth."""
    front = WaveletFrontEnd(16, 1, levels=2, wavelet="db1", zero_fraction=0.0, level_shift=False)
    x = torch.rand(1, 1, 16, 16)
    w = front.pixel_embedding(x)[0]  # (16 tokens, 16 coefficients)
    ca2, (ch2, cv2, cd2), (ch1, cv1, cd1) = pywt.wavedec2(
        x[0, 0].numpy(), "db1", mode="periodization", level=2
    )
    token = 1 * 4 + 2  # grid row 1, column 2
    np.testing.assert_allclose(w[token, :4].numpy(), [ca2[1, 2], ch2[1, 2], cv2[1, 2], cd2[1, 2]], atol=1e-12)
    fine = w[token, 4:].view(3, 2, 2).numpy()  # [H, V, D] bands x 2x2 finer positions
    for band, ref in zip(fine, (ch1, cv1, cd1)):
        np.testing.assert_allclose(band, ref[2:4, 4:6], atol=1e-12)


@pytest.mark.parametrize("fraction", [0.5, 0.8, 0.95])
def test_sparsification_zeroes_requested_fraction_per_image(fraction):
    front = WaveletFrontEnd(32, 3, levels=2, zero_fraction=fraction)
    x = torch.rand(4, 3, 32, 32)
    dense = front.pixel_embedding(x)
    sparse, keep = front.sparsify(dense)
    n = dense[0].numel()
    for i in range(4):
        assert int((~keep[i]).sum()) == round(fraction * n)
        kept_min = dense[i][keep[i]].abs().min()
        dropped_max = dense[i][~keep[i]].abs().max()
        assert kept_min >= dropped_max  # the smallest magnitudes were dropped
    assert torch.equal(sparse, dense * keep)


def test_exempt_approximation_keeps_approximation_coefficients():
    front = WaveletFrontEnd(32, 3, levels=2, zero_fraction=0.95, exempt_approximation=True)
    x = torch.rand(2, 3, 32, 32) * 0.01  # tiny image: approximations would be dropped without the flag
    _, keep = front.sparsify(front.pixel_embedding(x))
    assert keep[..., [0, 4, 8]].all()
    details = keep[..., ~front.approx_mask]
    assert int((~details[0]).sum()) == round(0.95 * details[0].numel())


def _reference_keep(front: WaveletFrontEnd, w: torch.Tensor) -> torch.Tensor:
    """The earlier sparsification: a sorted top-k per image over a mask of candidate entries."""
    batch = w.shape[0]
    magnitude = w.abs().reshape(batch, -1)
    candidates = torch.ones_like(magnitude, dtype=torch.bool)
    if front.exempt_approximation:
        candidates = ~front.approx_mask.expand(w.shape[1], -1).reshape(1, -1).expand(batch, -1)
        magnitude = magnitude.masked_fill(~candidates, float("inf"))
    n_zero = round(front.zero_fraction * int(candidates[0].sum()))
    keep = torch.ones_like(magnitude, dtype=torch.bool)
    if n_zero:
        keep.scatter_(1, magnitude.topk(n_zero, dim=1, largest=False).indices, False)
    return keep.view_as(w)


@pytest.mark.parametrize("exempt", [False, True])
@pytest.mark.parametrize("in_chans", [1, 3])
@pytest.mark.parametrize("fraction", [0.01, 0.5, 0.8])  # 0.01: torch's partial-sort branch of top-k
@pytest.mark.parametrize("kind", ["random", "binary", "quantized"])
def test_sparsification_selects_the_same_entries_as_sorted_topk(exempt, in_chans, fraction, kind):
    """Records depend on which tied entries are dropped (the exact gradient flows only through kept ones):
    the unsorted selection must keep exactly the entries the sorted top-k kept, ties included."""
    front = WaveletFrontEnd(32, in_chans, levels=2, zero_fraction=fraction, exempt_approximation=exempt)
    x = torch.rand(16, in_chans, 32, 32, generator=torch.Generator().manual_seed(3))
    if kind == "binary":  # flat regions: many exactly-zero details, tied at the threshold
        x = (x > 0.7).float()
    elif kind == "quantized":
        x = (x * 4).round() / 4
    w = front.pixel_embedding(x)
    _, keep = front.sparsify(w)
    if kind != "random" and fraction >= 0.5:
        dropped_max = w.abs().masked_fill(keep, 0).flatten(1).amax(1)
        kept_at_threshold = (w.abs() == dropped_max[:, None, None]) & keep
        assert kept_at_threshold.any()  # the case has ties across the threshold
    assert torch.equal(keep, _reference_keep(front, w))


@pytest.mark.parametrize("in_chans", [1, 3])
def test_bpda_shares_one_embedding_and_matches_two_passes(in_chans):
    """BPDA's value and gradient are bit-identical to computing the exact and smooth transforms separately."""
    front = WaveletFrontEnd(16, in_chans, levels=2, zero_fraction=0.8)
    x = torch.rand(3, in_chans, 16, 16, requires_grad=True)
    weights = torch.randn(front.num_tokens, front.embed_dim)
    with grad_mode(front, GradMode.BPDA):
        out = front(x)
        (grad,) = torch.autograd.grad((out * weights).sum(), x)
    exact, smooth = front.transform(x), front.smooth_transform(x)
    two_pass = smooth + (exact - smooth).detach()
    (grad_two_pass,) = torch.autograd.grad((two_pass * weights).sum(), x)
    assert torch.equal(out, two_pass) and torch.equal(out, exact)
    assert torch.equal(grad, grad_two_pass)


def test_input_gradient_modes():
    front = WaveletFrontEnd(16, 1, levels=2, zero_fraction=0.8)
    x = torch.rand(2, 1, 16, 16, requires_grad=True)
    weights = torch.randn(16, 16)
    grads = {}
    for mode in GradMode:
        x.grad = None
        with grad_mode(front, mode):
            (front(x) * weights).sum().backward()
        grads[mode] = x.grad.clone()
    assert grads[GradMode.EXACT].abs().sum() > 0
    assert grads[GradMode.BLOCKED].abs().sum() == 0
    # BPDA = gradient of the linear map without the mask: the adjoint of W applied to the weights
    x2 = x.detach().clone().requires_grad_(True)
    (front.pixel_embedding(x2) * weights).sum().backward()
    torch.testing.assert_close(grads[GradMode.BPDA], x2.grad)
    assert not torch.allclose(grads[GradMode.EXACT], grads[GradMode.BPDA])
    assert front.grad_mode is GradMode.EXACT  # restored after the block


def test_bad_configurations_raise_clear_errors():
    with pytest.raises(ValueError, match="not divisible"):
        WaveletFrontEnd(30, 1, levels=2)
    with pytest.raises(ValueError, match="unknown wavelet"):
        WaveletFrontEnd(32, 1, wavelet="nope")
    with pytest.raises(ValueError, match="not orthogonal"):
        WaveletFrontEnd(32, 1, wavelet="bior2.2")
    with pytest.raises(ValueError, match="zero_fraction"):
        WaveletFrontEnd(32, 1, zero_fraction=1.0)
    with pytest.raises(ValueError, match="expects"):
        WaveletFrontEnd(32, 1).pixel_embedding(torch.rand(1, 1, 16, 16))
