"""The zoo's ablations of the wavelet-vs-patch gap (claim 3 of claims.md): what each entry changes, and the
identity behind them: with db1 at L = 2 on gray images each token is an orthogonal transform of its own 4x4
block, so ``wavelet-denseproj`` (dense projection, no sparsification) is ``patch-raw`` up to a fixed rotation.

Oracles: PyWavelets' ``wavedec2`` of each block, linear algebra (R Rᵀ = I, weights moved through R), hand
counts of parameters, and literal spec dicts and hashes recorded before these options existed.
"""

from __future__ import annotations

import numpy as np
import pytest
import pywt
import torch
from torch import nn

from robustbench_wave.data import DatasetInfo
from robustbench_wave.models.tokenizers import BlockSparseProjection, WaveletEmbed
from robustbench_wave.models.vit import Normalize, build_model, check_buildable, count_parameters
from robustbench_wave.models.zoo import list_zoo, load_spec
from robustbench_wave.training.checkpoint import spec_sha256

INFO = DatasetInfo("synthetic", "synthetic", 10, 1, 32, (0.5,), (0.25,), tuple(str(i) for i in range(10)))
BLOCK = 4  # 2^L pixels: one token's block side for L = 2


def _pywt_token(block: np.ndarray) -> np.ndarray:
    """One token's coefficients from PyWavelets: the level-2 [A, H, V, D], then level 1's [H, V, D] (2x2 each,
    row-major), the front-end's documented layout."""
    approx, coarse, fine = pywt.wavedec2(block, "db1", mode="periodization", level=2)
    return np.concatenate([approx.ravel(), *(c.ravel() for c in coarse), *(f.ravel() for f in fine)])


def _pywt_embedding(x: torch.Tensor) -> np.ndarray:
    """(B, 1, 32, 32) images -> (B, T, 16) coefficients, each token from its own level-shifted 4x4 block."""
    pixels = x[:, 0].double().numpy() - 0.5  # the front-end's DC level shift
    grid = pixels.shape[-1] // BLOCK
    corners = [(r * BLOCK, c * BLOCK) for r in range(grid) for c in range(grid)]  # row-major token order
    return np.stack([[_pywt_token(img[r : r + BLOCK, c : c + BLOCK]) for r, c in corners] for img in pixels])


def _rotation(front_end: nn.Module) -> torch.Tensor:
    """R (16 x 16) with W(token 0) = R · (pixels of block 0 - 0.5), read off the front-end on unit images."""
    basis = torch.zeros(BLOCK * BLOCK, 1, 32, 32)
    for k in range(BLOCK * BLOCK):
        basis[k, 0, k // BLOCK, k % BLOCK] = 1.0
    with torch.no_grad():
        response = front_end.pixel_embedding(basis) - front_end.pixel_embedding(torch.zeros(1, 1, 32, 32))
    assert response[:, 1:].abs().max() == 0  # a pixel of block 0 reaches no other token
    return response[:, 0, :].T.double()


def test_db1_l2_front_end_is_an_orthogonal_rotation_of_each_block_as_pywavelets_computes_it():
    front_end = build_model("wavelet-denseproj", INFO).body.patch_embed.front_end
    rotation = _rotation(front_end)
    torch.testing.assert_close(rotation @ rotation.T, torch.eye(16, dtype=torch.float64), atol=1e-5, rtol=0)
    units = np.eye(16).reshape(16, BLOCK, BLOCK)
    expected = np.stack([_pywt_token(unit) for unit in units], axis=1)  # column k: block with pixel k lit
    np.testing.assert_allclose(rotation.numpy(), expected, atol=1e-6)
    x = torch.rand(3, 1, 32, 32, generator=torch.Generator().manual_seed(1))
    np.testing.assert_allclose(front_end(x).double().numpy(), _pywt_embedding(x), atol=1e-5)


def test_dense_projection_wavelet_model_is_the_unnormalised_patch_model_up_to_a_rotation():
    """conv weight = A·R and bias = b - 0.5·A·R·1 (the level shift) turn ``patch-raw`` into ``wavelet-denseproj``."""
    torch.manual_seed(0)
    wavelet = build_model("wavelet-denseproj", INFO).eval()
    patch = build_model("patch-raw", INFO).eval()
    assert isinstance(wavelet.normalize, nn.Identity) and isinstance(patch.normalize, nn.Identity)
    embed = wavelet.body.patch_embed
    linear = embed.projection
    assert isinstance(linear, nn.Linear) and len(embed.dense) == 0
    rotation = _rotation(embed.front_end)
    folded = linear.weight.double() @ rotation  # (H, 16): the dense Linear seen from the pixels
    level_shift = -0.5 * folded @ torch.ones(16, dtype=torch.float64)
    conv = patch.body.patch_embed.proj
    with torch.no_grad():
        conv.weight.copy_(folded.reshape(conv.weight.shape).float())
        conv.bias.copy_((linear.bias.double() + level_shift).float())
    x = torch.rand(4, 1, 32, 32, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(patch.body.patch_embed(x), embed(x), atol=1e-5, rtol=0)
        body = {k: v for k, v in wavelet.state_dict().items() if "patch_embed" not in k}
        missing, unexpected = patch.load_state_dict(body, strict=False)
        assert not unexpected and all("patch_embed" in k for k in missing)
        torch.testing.assert_close(patch(x), wavelet(x), atol=1e-4, rtol=0)


def test_dense_projection_with_sparsification_projects_the_sparsified_coefficients():
    """``wavelet-denseproj-sparse``: one Linear over W with the 80% smallest-magnitude entries of each image
    zeroed, W from PyWavelets and the zeroing by hand."""
    torch.manual_seed(0)
    embed = build_model("wavelet-denseproj-sparse", INFO).body.patch_embed
    x = torch.rand(2, 1, 32, 32, generator=torch.Generator().manual_seed(3))
    w = _pywt_embedding(x)
    for image in w:  # in place: zero round(0.8 · n) smallest magnitudes per image
        flat = image.reshape(-1)
        flat[np.argsort(np.abs(flat))[: round(0.8 * flat.size)]] = 0.0
    linear = embed.projection
    expected = torch.from_numpy(w) @ linear.weight.double().T + linear.bias.double()
    with torch.no_grad():
        torch.testing.assert_close(embed(x).double(), expected, atol=1e-5, rtol=0)


def test_dense_projection_is_one_linear_and_the_default_stays_block_sparse():
    dense = WaveletEmbed(img_size=32, in_chans=1, embed_dim=64, projection="dense")
    block = WaveletEmbed(img_size=32, in_chans=1, embed_dim=64)
    assert isinstance(dense.projection, nn.Linear)
    assert (dense.projection.in_features, dense.projection.out_features) == (16, 64)
    assert isinstance(block.projection, BlockSparseProjection)
    # hand count: dense 16·64 + 64; block [4, 12] -> [16, 48]: 4·16 + 16 + 12·48 + 48
    assert count_parameters(dense) == 1088 and count_parameters(block) == 704
    colour = WaveletEmbed(img_size=32, in_chans=3, embed_dim=64, projection="dense")
    assert colour.projection.in_features == 24  # YCbCr 4:2:0 at L = 2: blocks [12, 12]
    wavelet = build_model("wavelet", INFO)
    assert [k for k in wavelet.state_dict() if "patch_embed" in k] == [
        "body.patch_embed.projection.levels.0.weight",
        "body.patch_embed.projection.levels.0.bias",
        "body.patch_embed.projection.levels.1.weight",
        "body.patch_embed.projection.levels.1.bias",
    ]
    assert len(wavelet.state_dict()) == 58
    denseproj = build_model("wavelet-denseproj", INFO)
    assert count_parameters(denseproj) - count_parameters(build_model("wavelet-dense", INFO)) == 1088 - 704
    torch.manual_seed(5)
    default = build_model("wavelet", INFO).state_dict()
    torch.manual_seed(5)
    explicit = build_model(_with_args("wavelet", projection="block"), INFO).state_dict()
    assert default.keys() == explicit.keys() and all(torch.equal(default[k], explicit[k]) for k in default)


def _with_args(name: str, **args: object) -> dict:
    spec = load_spec(name)
    spec["tokenizer_args"] = {**spec["tokenizer_args"], **args}
    return spec


@pytest.mark.parametrize("value", ["sparse", "Dense", 1])
def test_unknown_projection_is_refused_in_one_line_naming_it_and_the_file(tmp_path, value):
    with pytest.raises(ValueError, match=r"unknown projection .* block, dense") as exc:
        WaveletEmbed(img_size=32, in_chans=1, embed_dim=64, projection=value)
    assert "\n" not in str(exc.value)
    path = tmp_path / "bad-projection.toml"
    path.write_text(
        f'tokenizer = "wavelet"\nbody = "tiny"\n[tokenizer_args]\nprojection = {value!r}\n'.replace("'", '"')
    )
    with pytest.raises(ValueError, match="projection") as exc:
        check_buildable(load_spec(path), INFO, str(path))
    assert str(exc.value).startswith(str(path)) and "\n" not in str(exc.value)


def test_normalize_input_switch_overrides_the_tokenizer_default(tmp_path):
    x = torch.rand(2, 1, 32, 32, generator=torch.Generator().manual_seed(4))
    raw = build_model("patch-raw", INFO).eval()
    assert isinstance(raw.normalize, nn.Identity)
    with torch.no_grad():
        torch.testing.assert_close(raw(x), raw.body(x), atol=0, rtol=0)
    path = tmp_path / "wavelet-normalized.toml"
    path.write_text(
        'tokenizer = "wavelet"\nbody = "tiny"\nnormalize_input = true\n[tokenizer_args]\nlevels = 2\n'
    )
    assert load_spec(path)["normalize_input"] is True
    model = build_model(load_spec(path), INFO).eval()
    assert isinstance(model.normalize, Normalize)
    assert model.normalize.mean.flatten().tolist() == [0.5] and model.normalize.std.flatten().tolist() == [
        0.25
    ]
    with torch.no_grad():
        torch.testing.assert_close(model(x), model.body((x - 0.5) / 0.25), atol=1e-6, rtol=0)
    assert isinstance(build_model("wavelet", INFO).normalize, nn.Identity)  # the default is untouched
    assert isinstance(build_model("patch", INFO).normalize, Normalize)


def test_patch_raw_differs_from_patch_only_in_the_normalisation():
    spec, reference = load_spec("patch-raw"), load_spec("patch")
    assert spec.pop("normalize_input") is False and "normalize_input" not in reference
    for s in (spec, reference):
        del s["name"], s["description"]
    assert spec == reference
    torch.manual_seed(6)
    raw = build_model("patch-raw", INFO).state_dict()
    torch.manual_seed(6)
    standardised = build_model("patch", INFO).state_dict()
    assert set(standardised) - set(raw) == {"normalize.mean", "normalize.std"}
    assert all(torch.equal(raw[k], standardised[k]) for k in raw)  # same draws: same initial weights


@pytest.mark.parametrize("value", ['"false"', "0", "1", '"yes"'])
def test_non_boolean_normalize_input_is_refused_in_one_line_naming_the_file(tmp_path, value):
    path = tmp_path / "bad-normalize.toml"
    path.write_text(f'tokenizer = "patch"\nbody = "tiny"\nnormalize_input = {value}\n')
    with pytest.raises(ValueError, match="normalize_input") as exc:
        load_spec(path)
    message = str(exc.value)
    assert message.startswith(str(path)) and "true or false" in message and "\n" not in message
    spec = {
        **load_spec("patch"),
        "normalize_input": "false",
    }  # a resolved spec handed straight to build_model
    with pytest.raises(ValueError, match="normalize_input"):
        build_model(spec, INFO)


def test_ablation_entries_change_only_what_they_ablate():
    assert {"wavelet-denseproj", "wavelet-denseproj-sparse", "patch-raw"} <= set(list_zoo())
    assert load_spec("wavelet-denseproj")["tokenizer_args"] == {
        **load_spec("wavelet-dense")["tokenizer_args"],
        "projection": "dense",
    }
    assert load_spec("wavelet-denseproj-sparse")["tokenizer_args"] == {
        **load_spec("wavelet")["tokenizer_args"],
        "projection": "dense",
    }
    for name in ("wavelet-denseproj", "wavelet-denseproj-sparse", "patch-raw"):
        spec = load_spec(name)
        assert spec["body"] == load_spec("patch")["body"] and spec["description"]
        assert build_model(name, INFO).body.patch_embed.num_patches == 64


TINY = {"embed_dim": 64, "depth": 4, "num_heads": 4, "mlp_ratio": 2.0}


def test_existing_specs_and_their_hashes_are_unchanged():
    """Recorded before ``projection`` and ``normalize_input`` existed: trained checkpoints keep verifying."""
    assert load_spec("patch") == {
        "description": "ViT with the standard non-overlapping 4x4 patch tokenizer (strided conv; seed 002)",
        "body": TINY, "tokenizer": "patch", "tokenizer_args": {"patch_size": 4}, "name": "patch",
        "body_name": "tiny",
    }  # fmt: skip
    assert load_spec("wavelet") == {
        "description": "ViT with the wavelet tokenizer: db1 (Haar), L=2, 80% of W zeroed per image, "
        "block-sparse projection",
        "body": TINY, "tokenizer": "wavelet",
        "tokenizer_args": {"wavelet": "db1", "levels": 2, "zero_fraction": 0.8, "exempt_approximation": False,
                           "token_widths": "proportional"},
        "name": "wavelet", "body_name": "tiny",
    }  # fmt: skip
    recorded = {
        "patch": "383bebf4445274abb0976e1a8912541edff89ef88cf58d6e5fe4fd5478022729",
        "wavelet": "9051d1fb47724b019f2367834ce22bdae2e2cc9362750ffe48ca4330195451df",
        "wavelet-coif1": "bb8d004ce8a300f2291933edca363af1f32245e218785334ee547f96bf1271b4",
        "wavelet-dense": "40fc49bdf1a1a3842b92717fef4c1f588dc306a367b865408fe4eb9b92cd2de3",
    }
    assert {name: spec_sha256(load_spec(name), INFO.to_dict()) for name in recorded} == recorded
