"""Zoo models: timm registration, tokenizer equivalences, invariants over every zoo entry."""

from __future__ import annotations

import pytest
import timm
import torch
from timm.layers import PatchEmbed

from robustbench_wave.data import DatasetInfo
from robustbench_wave.models import tokenizers
from robustbench_wave.models.compiled import COMPILE_ENV, CompileMode, compile_mode_from_env, compile_model
from robustbench_wave.models.frontend import grad_mode, has_fixed_front_end
from robustbench_wave.models.tokenizers import (
    OverlapPatchEmbed,
    TokenWidthRule,
    WaveletEmbed,
    get_tokenizer,
    list_tokenizers,
    proportional_token_widths,
    register_tokenizer,
    resolve_token_widths,
    source_paper_token_widths,
)
from robustbench_wave.models.vit import Normalize, build_model, describe, rbw_vit
from robustbench_wave.models.zoo import list_zoo, load_spec


def _info(in_chans: int = 1, img_size: int = 32) -> DatasetInfo:
    return DatasetInfo(
        name="synthetic", slug="synthetic", num_classes=10, in_chans=in_chans, img_size=img_size,
        mean=(0.5,) * in_chans, std=(0.25,) * in_chans, class_names=tuple(str(i) for i in range(10)),
    )  # fmt: skip


def test_strided_conv_patch_embedding_equals_flatten_plus_linear():
    torch.manual_seed(0)
    embed = PatchEmbed(img_size=32, patch_size=4, in_chans=3, embed_dim=16)
    x = torch.rand(2, 3, 32, 32)
    patches = x.unfold(2, 4, 4).unfold(3, 4, 4)  # (B, C, 8, 8, 4, 4)
    flat = patches.permute(0, 2, 3, 1, 4, 5).reshape(2, 64, 3 * 16)  # (B, T, c·p²), row-major over the grid
    linear = flat @ embed.proj.weight.reshape(16, -1).T + embed.proj.bias
    torch.testing.assert_close(embed(x), linear, atol=1e-5, rtol=1e-5)


def test_overlapping_patches_keep_token_count_and_see_neighbours():
    embed = OverlapPatchEmbed(img_size=32, patch_size=4, in_chans=1, embed_dim=8, overlap=2)
    assert embed.proj.kernel_size == (6, 6) and embed.proj.stride == (4, 4)
    x = torch.zeros(1, 1, 32, 32)
    y = x.clone()
    y[..., 4, 4] = 1.0  # first pixel of token (1, 1): also inside the overlapping kernel of token (0, 0)
    diff = (embed(y) - embed(x)).abs().sum(-1).view(8, 8)
    assert embed(x).shape == (1, 64, 8)
    assert diff[1, 1] > 0 and diff[0, 0] > 0 and diff[2, 2] == 0
    with pytest.raises(ValueError, match="even"):
        OverlapPatchEmbed(img_size=32, patch_size=4, in_chans=1, embed_dim=8, overlap=3)


def test_token_width_rules():
    assert source_paper_token_widths([12, 36, 144], 0.25) == [12, 36, 36]  # H_k = C_k for the two coarsest
    # the stored config value "seed" names the source paper's rule
    assert resolve_token_widths(TokenWidthRule.SOURCE_PAPER.value, [12, 36, 144], 64, 0.25) == [12, 36, 36]
    assert resolve_token_widths("proportional", [4, 12], 64, 0.5) == [16, 48]
    with pytest.raises(ValueError, match="'proportional' or 'seed'"):
        resolve_token_widths("paper", [4, 12], 64, 0.5)
    widths = proportional_token_widths([4, 12], 64)
    assert widths == [16, 48] and sum(widths) == 64
    assert sum(proportional_token_widths([12, 36, 144, 192], 100)) == 100
    assert resolve_token_widths([8, 8], [4, 12], 64, 0.5) == [8, 8]
    with pytest.raises(ValueError, match="one positive width per level"):
        resolve_token_widths([8], [4, 12], 64, 0.5)


def test_wavelet_embed_is_block_sparse():
    """Each level's coefficients reach only that level's slice of the token (Q = blockdiag(Q_L, ..., Q_1))."""
    embed = WaveletEmbed(img_size=32, in_chans=1, embed_dim=64, levels=2, zero_fraction=0.0)
    w = torch.zeros(1, 64, 16)
    w[..., 0] = 1.0  # a coarsest-level coefficient
    out = embed.projection(w) - embed.projection(torch.zeros_like(w))
    assert out[..., :16].abs().sum() > 0 and out[..., 16:].abs().sum() == 0
    assert len(embed.dense) == 0  # H = embed_dim: no adapter


def test_wavelet_embed_adapter_when_token_width_differs():
    embed = WaveletEmbed(img_size=32, in_chans=3, embed_dim=64, levels=2, token_widths="seed", dense_layers=1)
    assert embed.token_width == 24  # seed rule at L = 2: H_k = C_k = 12 + 12
    assert embed(torch.rand(2, 3, 32, 32)).shape == (2, 64, 64)


def test_registered_timm_variants():
    for name in (
        "vit_tiny_patch4_32",
        "vit_tiny_wavelet_db1_l2_32",
        "vit_tiny_wavelet_coif1_l2_32",
        "rbw_vit",
    ):
        assert name in timm.list_models("*")
    model = timm.create_model("vit_tiny_wavelet_coif1_l2_32", in_chans=3, num_classes=7)
    assert model(torch.rand(2, 3, 32, 32)).shape == (2, 7)
    with pytest.raises(ValueError, match="pretrained"):
        timm.create_model("vit_tiny_patch4_32", pretrained=True)


def test_token_width_can_differ_from_attention_width():
    model = rbw_vit(tokenizer="wavelet", embed_dim=64, attn_dim=128, num_heads=4)
    attn = model.blocks[0].attn
    assert attn.qkv.in_features == 64 and attn.qkv.out_features == 3 * 128 and attn.proj.out_features == 64
    assert model(torch.rand(1, 1, 32, 32)).shape == (1, 10)


def test_zoo_has_the_required_entries_with_equal_bodies_and_token_counts():
    zoo = list_zoo()
    for name in ("patch", "wavelet", "wavelet-coif1", "wavelet-dense"):
        assert name in zoo
    info = _info()
    described = {
        name: describe(build_model(name, info))
        for name in ("patch", "wavelet", "wavelet-coif1", "wavelet-dense")
    }
    assert len({d["tokens"] for d in described.values()}) == 1
    assert len({d["embed_dim"] for d in described.values()}) == 1
    assert load_spec("wavelet-dense")["tokenizer_args"]["zero_fraction"] == 0.0


@pytest.mark.parametrize("name", list_zoo())
@pytest.mark.parametrize("in_chans", [1, 3])
def test_every_zoo_model_outputs_logits_and_every_parameter_gets_a_gradient(name, in_chans):
    torch.manual_seed(0)
    model = build_model(name, _info(in_chans))
    x = torch.rand(4, in_chans, 32, 32, requires_grad=True)
    logits = model(x)
    assert logits.shape == (4, 10) and torch.isfinite(logits).all()
    logits.logsumexp(1).sum().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None or p.grad.abs().sum() == 0]
    assert not missing
    assert x.grad.abs().sum() > 0  # the exact input gradient crosses the fixed front-end


@pytest.mark.parametrize("name", ["wavelet", "wavelet-coif1"])
def test_blocked_mode_zeroes_input_gradient_of_wavelet_models(name):
    model = build_model(name, _info()).eval()
    assert has_fixed_front_end(model)
    x = torch.rand(2, 1, 32, 32, requires_grad=True)
    with grad_mode(model, "blocked"):
        model(x).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() == 0


def test_wrong_image_size_raises_value_error():
    model = build_model("patch", _info())
    with pytest.raises(ValueError, match="takes"):
        model(torch.rand(1, 1, 28, 28))
    with pytest.raises(ValueError, match="not divisible"):
        build_model("wavelet", _info(img_size=30))


def test_unknown_model_lists_the_zoo():
    with pytest.raises(ValueError, match=r"unknown model 'nope'.*wavelet"):
        load_spec("nope")


def test_tokenizer_registry_drives_zoo_validation_and_model_assembly(tmp_path, monkeypatch):
    """Adding a tokenizer is one class plus its registration: the zoo accepts it and build_model uses it."""
    assert {"patch", "wavelet"} <= set(list_tokenizers())
    assert get_tokenizer("wavelet").normalize_input is False and get_tokenizer("patch").normalize_input
    assert (
        get_tokenizer("wavelet").token_size({"levels": 3}) == 8 and get_tokenizer("patch").token_size({}) == 4
    )
    with pytest.raises(ValueError, match="unknown tokenizer 'pixel'"):
        get_tokenizer("pixel")
    monkeypatch.setattr(tokenizers, "TOKENIZERS", dict(tokenizers.TOKENIZERS))

    @register_tokenizer("pixel-patch", token_size=lambda args: 2)
    class PixelPatch(PatchEmbed):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **{**kwargs, "patch_size": 2})

    with pytest.raises(ValueError, match="already registered"):
        register_tokenizer("pixel-patch", token_size=lambda args: 2)(PixelPatch)
    spec_file = tmp_path / "pixel.toml"
    spec_file.write_text('tokenizer = "pixel-patch"\nbody = "tiny"\n')
    spec = load_spec(spec_file)  # bodies come from the repository's models/bodies.toml
    model = build_model(spec, _info())
    assert isinstance(model.body.patch_embed, PixelPatch) and describe(model)["tokens"] == 256
    assert model(torch.rand(2, 1, 32, 32)).shape == (2, 10)
    bad = tmp_path / "bad.toml"
    bad.write_text('tokenizer = "nope"\n')
    with pytest.raises(ValueError, match="'tokenizer' must be one of"):
        load_spec(bad)


def _spec_with(tokenizer: str, tmp_path, **top: object) -> dict:
    """A zoo spec file naming ``tokenizer`` with its default arguments on the shared ``tiny`` body, loaded
    (so validated) by the zoo as any ``models/*.toml``."""
    lines = [f'tokenizer = "{tokenizer}"', 'body = "tiny"'] + [
        f"{k} = {str(v).lower()}" for k, v in top.items()
    ]
    path = tmp_path / f"{tokenizer}.toml"
    path.write_text("\n".join(lines) + "\n")
    return load_spec(path)


@pytest.mark.parametrize("in_chans", [1, 3])
@pytest.mark.parametrize("name", list_tokenizers())
def test_every_registered_tokenizer_builds_a_zoo_model(name, in_chans, tmp_path):
    """A zoo model on gray and colour images: one token per token_size x token_size region, logits for every
    image, the input gradient reaching the pixels, and the registry's normalize_input (or the spec's
    override) deciding whether the data set's mean/std standardise the input."""
    entry, info = get_tokenizer(name), _info(in_chans)
    spec = _spec_with(name, tmp_path)
    torch.manual_seed(0)
    model = build_model(spec, info)
    side = info.img_size // entry.token_size(spec.get("tokenizer_args", {}))
    x = torch.rand(3, in_chans, info.img_size, info.img_size, requires_grad=True)
    assert describe(model)["tokens"] == side * side
    assert model.body.patch_embed(model.normalize(x)).shape[:2] == (3, side * side)
    logits = model(x)
    assert logits.shape == (3, info.num_classes) and torch.isfinite(logits).all()
    logits.logsumexp(1).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    assert isinstance(model.normalize, Normalize) is entry.normalize_input
    flipped = build_model(_spec_with(name, tmp_path, normalize_input=not entry.normalize_input), info)
    assert isinstance(flipped.normalize, Normalize) is not entry.normalize_input


@pytest.mark.slow
def test_compile_switch_is_off_by_default_and_wraps_the_same_model():
    model = build_model("wavelet", _info())
    assert compile_model(model) is model
    assert compile_model(model, "off") is model
    compiled = compile_model(model, CompileMode.DEFAULT)  # compiles lazily, on the first call
    assert compiled is not model and compiled._orig_mod is model
    assert [p.data_ptr() for p in compiled.parameters()] == [p.data_ptr() for p in model.parameters()]
    assert has_fixed_front_end(compiled)  # grad_mode and attack_mode reach the wrapped modules


def test_compile_mode_from_env_and_bad_values():
    assert compile_mode_from_env({}) is CompileMode.OFF
    assert compile_mode_from_env({COMPILE_ENV: ""}) is CompileMode.OFF
    assert compile_mode_from_env({COMPILE_ENV: "max-autotune"}) is CompileMode.MAX_AUTOTUNE
    with pytest.raises(ValueError, match="choose one of: off, default, max-autotune"):
        compile_mode_from_env({COMPILE_ENV: "fast"})
