"""The zoo's Token Pooling models: built by ``models.build_model`` from ``models/*-tokenpool.toml``, same body
and tokenizer as their unpooled twins (so the plain weights load), pooled on schedule, fewer MACs."""

from __future__ import annotations

import pytest
import torch

from robustbench_wave.data import DatasetInfo
from robustbench_wave.models.flops import vit_flops
from robustbench_wave.models.frontend import grad_mode
from robustbench_wave.models.tokenpool import token_pooling_layers
from robustbench_wave.models.vit import build_model
from robustbench_wave.models.zoo import list_zoo, load_spec

INFO = DatasetInfo("synthetic", "synthetic", 10, 1, 32, (0.5,), (0.25,), tuple(str(i) for i in range(10)))


@pytest.mark.parametrize(
    ("pooled", "plain"), [("patch-tokenpool", "patch"), ("wavelet-tokenpool", "wavelet")]
)
def test_zoo_tokenpool_model_matches_its_plain_twin(pooled, plain):
    assert pooled in list_zoo()
    spec, twin_spec = load_spec(pooled), load_spec(plain)
    assert spec["body"] == twin_spec["body"] and spec["tokenizer_args"] == twin_spec["tokenizer_args"]
    model, twin = build_model(pooled, INFO).eval(), build_model(plain, INFO).eval()
    assert len(token_pooling_layers(model)) == 3 and not token_pooling_layers(twin)
    model.load_state_dict(twin.state_dict(), strict=True)  # same parameters: pooling adds none
    x = torch.rand(2, 1, 32, 32, requires_grad=True)
    report = vit_flops(model)
    assert report["tokens"] == [65, 49, 33, 17]
    assert report["dense_macs"] == vit_flops(twin)["total_macs"]
    assert report["saved_fraction"] > 0.2
    with grad_mode(model, "blocked"):
        assert all(p.grad_mode.value == "blocked" for p in token_pooling_layers(model))
        out = model(x)
        assert torch.autograd.grad(out.sum(), x, allow_unused=True)[0] is None
    assert out.shape == (2, 10) and torch.isfinite(out).all()
