"""The gallery's defences do what their papers say, checked against hand-computed cases and a DCT written
from its formula; the factories follow the external-model contract and share the CNN's weights."""

from __future__ import annotations

import math

import pytest
import torch
from safetensors.torch import save_file
from torch import nn

from robustbench_wave.data import dataset_info
from robustbench_wave.models.external import ExternalSpec, build_external
from robustbench_wave.models.frontend import FixedFrontEnd
from robustbench_wave.models.gallery import (
    GALLERY,
    JPEG_LUMINANCE,
    UNDEFENDED,
    BitDepthReduction,
    JpegQuantization,
    RandomResizePad,
    StochasticActivationPruning,
    ThermometerEncoding,
    dct_matrix,
    jpeg_table,
    trained_entries,
)


def test_bit_depth_reduction_keeps_two_to_the_bits_levels() -> None:
    x = torch.tensor([0.0, 0.07, 0.0715, 0.5, 0.93, 1.0])
    # 3 bits: round(7x) / 7; 0.07 * 7 = 0.49 -> 0, 0.0715 * 7 = 0.5005 -> 1, 3.5 -> 4 (half to even)
    expected = torch.tensor([0, 0, 1, 4, 7, 7]) / 7
    assert torch.equal(BitDepthReduction(3)(x), expected)
    assert torch.equal(BitDepthReduction(1)(torch.tensor([0.49, 0.51])), torch.tensor([0.0, 1.0]))
    with pytest.raises(ValueError, match="bits"):
        BitDepthReduction(0)


def test_thermometer_channels_are_cumulative_codes_per_input_channel() -> None:
    # channel k of pixel value v is v >= k/4, k = 1..4
    out = ThermometerEncoding(4)(torch.tensor([0.0, 0.3, 0.5, 1.0]).view(1, 1, 1, 4))
    assert out.shape == (1, 4, 1, 4)
    assert out[0, :, 0].T.tolist() == [[0, 0, 0, 0], [1, 0, 0, 0], [1, 1, 0, 0], [1, 1, 1, 1]]
    two = ThermometerEncoding(4)(torch.tensor([0.3, 1.0]).view(1, 2, 1, 1))
    assert two.flatten().tolist() == [1, 0, 0, 0, 1, 1, 1, 1]  # channel c * levels + (k - 1)


def _reference_dct(block: list[list[float]]) -> list[list[float]]:
    """The 8x8 DCT-II of JPEG (ITU-T T.81, A.3.3) from its formula, in plain Python."""

    def c(k: int) -> float:
        return 1 / math.sqrt(2) if k == 0 else 1.0

    return [
        [
            c(u) * c(v) / 4
            * sum(
                block[x][y] * math.cos((2 * x + 1) * u * math.pi / 16) * math.cos((2 * y + 1) * v * math.pi / 16)
                for x in range(8)
                for y in range(8)
            )
            for v in range(8)
        ]
        for u in range(8)
    ]  # fmt: skip


def _reference_idct(coef: list[list[float]]) -> list[list[float]]:
    def c(k: int) -> float:
        return 1 / math.sqrt(2) if k == 0 else 1.0

    return [
        [
            sum(
                c(u) * c(v) / 4 * coef[u][v]
                * math.cos((2 * x + 1) * u * math.pi / 16) * math.cos((2 * y + 1) * v * math.pi / 16)
                for u in range(8)
                for v in range(8)
            )
            for y in range(8)
        ]
        for x in range(8)
    ]  # fmt: skip


def test_the_dct_matrix_is_jpegs_dct_written_from_its_formula() -> None:
    block = torch.rand(8, 8, generator=torch.Generator().manual_seed(0)) * 255 - 128
    d = dct_matrix().double()
    ours = d @ block.double() @ d.T
    reference = torch.tensor(_reference_dct(block.double().tolist()), dtype=torch.float64)
    assert torch.allclose(ours, reference, atol=1e-4)
    assert torch.allclose(d @ d.T, torch.eye(8, dtype=torch.float64), atol=1e-6)  # orthonormal


def test_jpeg_quantisation_of_one_block_equals_the_formula_pipeline() -> None:
    x = torch.rand(1, 1, 8, 8, generator=torch.Generator().manual_seed(1))
    table = jpeg_table(50).double().tolist()
    coef = _reference_dct((x[0, 0].double() * 255 - 128).tolist())
    quantised = [[round(coef[u][v] / table[u][v]) * table[u][v] for v in range(8)] for u in range(8)]
    pixels = torch.tensor(_reference_idct(quantised), dtype=torch.float64)
    expected = ((pixels + 128) / 255).clamp(0, 1).float()
    assert torch.allclose(JpegQuantization(50)(x)[0, 0], expected, atol=1e-5)


def test_jpeg_table_follows_libjpegs_quality_scaling() -> None:
    base = torch.tensor(JPEG_LUMINANCE, dtype=torch.float32)
    assert torch.equal(jpeg_table(50), base)
    assert torch.equal(jpeg_table(100), torch.ones(8, 8))
    assert jpeg_table(10)[0, 0] == 80  # scale 500: (16 * 500 + 50) // 100
    assert jpeg_table(75)[0, 0] == 8  # scale 50: (16 * 50 + 50) // 100
    with pytest.raises(ValueError, match="quality"):
        jpeg_table(0)


def test_jpeg_at_quality_100_is_the_identity_up_to_rounding_the_coefficients() -> None:
    x = torch.rand(
        2, 1, 30, 30, generator=torch.Generator().manual_seed(2)
    )  # not whole blocks: padded, cropped
    out = JpegQuantization(100)(x)
    assert out.shape == x.shape
    diff = (out - x).abs() * 255
    # each coefficient moves by <= 0.5 level; a pixel by <= 64 * 0.5 * max|basis| = 8 levels, typically far less
    assert float(diff.max()) <= 8.0
    assert float(diff.mean()) < 0.5
    assert not torch.equal(out, x)


def test_jpeg_at_quality_75_rounds_a_weak_high_frequency_away() -> None:
    d = dct_matrix()
    # level 160 everywhere (DC 8 * 32 = 256, a multiple of its table entry 8) plus the (7, 7) basis image
    # with coefficient 20 (< half its table entry 50 at quality 75): the output is the flat block
    levels = 160 + 20 * torch.outer(d[7], d[7])
    x = (levels / 255).repeat(1, 1, 4, 4)
    assert jpeg_table(75)[7, 7] == 50 and jpeg_table(75)[0, 0] == 8
    out = JpegQuantization(75)(x)
    assert torch.allclose(out, torch.full_like(x, 160 / 255), atol=1e-5)
    assert not torch.allclose(x, out, atol=1e-3)


def test_random_resize_pad_draws_a_size_and_an_offset_per_image() -> None:
    layer = RandomResizePad(32)
    assert layer.out_size == 36
    ones = torch.ones(64, 1, 32, 32)
    torch.manual_seed(0)
    out = layer(ones)
    assert out.shape == (64, 1, 36, 36)
    sides = out.sum(dim=(1, 2, 3)).sqrt().round().long()  # nearest resize of ones: an s x s square of ones
    assert set(sides.tolist()) == {32, 33, 34, 35}
    rows = out[:, 0].sum(dim=2) > 0
    tops = rows.float().argmax(dim=1)
    assert len(set(tops.tolist())) > 1  # offsets differ between images
    torch.manual_seed(0)
    assert torch.equal(layer(ones), out)  # torch's global generator decides
    assert not torch.equal(layer(ones), out)


def test_random_resize_pad_keeps_the_image_content() -> None:
    x = torch.rand(8, 1, 32, 32)
    out = RandomResizePad(32, out_size=33)(x)  # sizes in [32, 33): the image itself at a random offset
    for image, placed in zip(x, out, strict=True):
        crops = [placed[:, t : t + 32, s : s + 32] for t in range(2) for s in range(2)]
        assert any(torch.equal(crop, image) for crop in crops)
        assert float(placed.sum()) == pytest.approx(float(image.sum()), rel=1e-5)  # the rest is zero padding


def test_sap_keeps_the_expectation_of_every_activation() -> None:
    torch.manual_seed(4)
    h = torch.rand(1, 4, 4, 4) * 2 - 0.5  # some negative: zero after the ReLU
    sap = StochasticActivationPruning(1.0)
    draws = sap(h.expand(20000, -1, -1, -1))  # each example of a batch draws on its own
    mean = draws.mean(0)
    relu = torch.relu(h[0])
    assert torch.equal(mean[relu == 0], relu[relu == 0])
    # a kept activation is h / q with probability q = 1 - (1 - p)^r (r = 64 draws, p = h / sum h): the mean of
    # N draws has standard deviation h sqrt((1 - q) / (q N)); every mean lies within 5 of them
    q = 1 - (1 - relu / relu.sum()) ** relu.numel()
    sd = relu * ((1 - q) / (q * len(draws))).sqrt()
    alive = relu > 0
    assert ((mean - relu).abs()[alive] <= 5 * sd[alive]).all()
    assert (draws[0] == 0).sum() > (relu == 0).sum()  # something was pruned
    assert torch.isfinite(sap(torch.zeros(2, 3, 4, 4))).all()


def test_sap_differentiates_through_the_kept_activations() -> None:
    h = torch.rand(2, 8, requires_grad=True)
    StochasticActivationPruning(0.5)(h).sum().backward()
    assert h.grad is not None and torch.isfinite(h.grad).all() and h.grad.abs().sum() > 0


@pytest.mark.parametrize("name", list(GALLERY))
def test_every_factory_takes_the_contract_and_gives_logits(name: str) -> None:
    model = GALLERY[name].factory(num_classes=10, img_size=32).eval()
    with torch.no_grad():
        out = model(torch.rand(3, 1, 32, 32))
    assert out.shape == (3, 10) and torch.isfinite(out).all()
    assert not any(isinstance(m, FixedFrontEnd) for m in model.modules()), "the detectors must find them"
    assert not list(model.defence.parameters())
    weights_of = GALLERY[GALLERY[name].weights_of].factory()
    assert {k: v.shape for k, v in model.state_dict().items()} == {
        k: v.shape for k, v in weights_of.state_dict().items()
    }


def test_the_thermometer_cnn_takes_levels_channels_and_trains_on_its_own_as_resize_pad_does() -> None:
    model = GALLERY["thermometer"].factory()
    assert model.net.features[0].in_channels == 16
    assert [e.name for e in trained_entries()] == [UNDEFENDED, "thermometer", "resize_pad"]


@pytest.mark.slow
def test_a_gallery_defence_loads_as_an_external_model_with_the_cnns_weights(tmp_path) -> None:
    torch.manual_seed(0)
    trained = GALLERY[UNDEFENDED].factory()
    save_file({k: v.contiguous() for k, v in trained.state_dict().items()}, str(tmp_path / "cnn.safetensors"))
    spec = ExternalSpec(GALLERY["bit_depth"].reference, weights=str(tmp_path / "cnn.safetensors"))
    model, meta = build_external(spec, dataset_info("synthetic"), torch.rand(2, 1, 32, 32))
    assert meta["name"].startswith("ext-bit_depth_cnn-")
    x = torch.rand(4, 1, 32, 32)
    with torch.no_grad():
        assert torch.equal(model(x), trained.net(torch.round(x * 31) / 31))  # 5 bits


def test_the_sap_cnn_is_random_and_the_cnn_is_not() -> None:
    x = torch.rand(4, 1, 32, 32)
    with torch.no_grad():
        cnn, sap = GALLERY[UNDEFENDED].factory().eval(), GALLERY["sap"].factory().eval()
        assert torch.equal(cnn(x), cnn(x))
        assert not torch.equal(sap(x), sap(x))
    assert isinstance(sap.defence, nn.Identity)
