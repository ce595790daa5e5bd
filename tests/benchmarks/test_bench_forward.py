"""The forward benchmark's pieces (no timings asserted): its attention paths compute the same function as
timm's default, its switch restores the model, and its profile groups partition the pass."""

from __future__ import annotations

import contextlib

import pytest
import torch

from benchmarks.bench_forward import (
    _contexts,
    _group,
    explicit_attention,
    forward_call,
    logit_gaps,
    profile_rows,
)
from robustbench_wave.data import dataset_info
from robustbench_wave.models.vit import build_model


@pytest.fixture(scope="module")
def model_and_batch() -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = build_model("wavelet", dataset_info("fashion-mnist")).eval()
    return model, torch.rand(8, 1, 32, 32, generator=torch.Generator().manual_seed(1))


def test_attention_paths_compute_the_default_function(model_and_batch) -> None:
    model, x = model_and_batch
    calls = {k: forward_call(model, x, c) for k, c in _contexts(model).items()}
    gaps = logit_gaps(calls, "sdpa_flash (default)")
    assert gaps["sdpa_flash (default)"] == "max |logit diff| 0.0e+00"
    ref = calls["sdpa_flash (default)"]()
    for name in ("sdpa_math", "explicit_attention"):  # float32 reorderings only
        assert torch.allclose(calls[name](), ref, atol=1e-5), name
    assert not torch.equal(calls["bf16_autocast"](), ref)  # bf16 rounds: a different protocol
    assert torch.allclose(calls["bf16_autocast"](), ref, atol=0.1)


def test_explicit_attention_switches_and_restores_even_on_error(model_and_batch) -> None:
    model, _ = model_and_batch
    blocks = [m for m in model.modules() if hasattr(m, "fused_attn")]
    assert blocks and all(m.fused_attn for m in blocks)
    with contextlib.suppress(RuntimeError), explicit_attention(model):
        assert not any(m.fused_attn for m in blocks)
        raise RuntimeError("inside")
    assert all(m.fused_attn for m in blocks)


@pytest.mark.parametrize(
    ("op", "group"),
    [
        ("aten::addmm", "matrix products"),
        ("aten::mm", "matrix products"),
        ("aten::_scaled_dot_product_flash_attention_for_cpu_backward", "attention kernels"),
        ("aten::_softmax", "attention kernels"),
        ("aten::native_layer_norm", "everything else"),
        ("aten::copy_", "everything else"),
    ],
)
def test_profile_groups(op: str, group: str) -> None:
    assert _group(op).startswith(group)


def test_profile_shares_partition_the_pass(model_and_batch, monkeypatch) -> None:
    import benchmarks.bench_forward as bf

    model, x = model_and_batch
    monkeypatch.setattr(bf, "BATCH", len(x))
    y = torch.zeros(len(x), dtype=torch.long)
    rows = profile_rows("wavelet", model, x, y, reps=1)
    whole, parts = rows[0], rows[1:]
    assert whole.ratio == 1.0 and "GFLOP/s" in whole.note
    assert {r.variant.split(" ")[0] for r in parts} == {"matrix", "attention", "everything"}
    assert sum(r.ratio for r in parts) == pytest.approx(1.0)
    assert sum(r.median_s for r in parts) == pytest.approx(whole.median_s)
