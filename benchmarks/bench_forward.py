"""Where a zoo ViT's pass spends its time, and what the forward options give (attention paths, bf16, compile).

Every attack's cost is passes of the model, so this asks what bounds a pass of the zoo's tiny ViTs (width 64,
4 heads of width 16, 65 tokens) on this CPU, on a batch of 128 test images (one seeding block):

* ``forward`` / ``forward+backward`` (the input gradient, frozen weights: an attack step): timm's default
  attention (``F.scaled_dot_product_attention``, whose CPU kernel is the flash one) against the SDPA
  math kernel, timm's explicit attention (``attn.fused_attn = False``), bf16 autocast and, with ``--compile``,
  ``torch.compile`` (inductor; its note gives the first call's seconds, the compiling). The note gives the largest
  logit difference from the default: only the default path is bit-identical to the records.
* ``profile``: a profiled forward+backward split into matrix products, attention kernels and the rest
  (layer norm, GELU, adds, copies, the front-end), each as a share of the pass (ratio column).
* ``matmul rate``: float32 matrix products at the shapes of the models' linear layers against 1024×1024
  ones; the note gives GFLOP/s, and the ``profile`` note the whole pass's rate at the models' FLOPs.

Run alone: ``python -m benchmarks.bench_forward [--quick] [--compile]``; ``make bench`` runs it without compile.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.profiler import ProfilerActivity, profile

from benchmarks.harness import (
    Row,
    bench_dataset,
    bench_images,
    bench_model,
    interleaved,
    median,
    predicted_labels,
    ratio_rows,
    run_script,
)
from robustbench_wave.attacks import attack_mode
from robustbench_wave.models.flops import vit_flops

BATCH = 128
MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul")
ATTENTION_OPS = ("scaled_dot_product", "_softmax")


@contextlib.contextmanager
def explicit_attention(model: nn.Module) -> Iterator[None]:
    """timm's non-fused attention path (q·kᵀ, softmax, ·v as separate ops) for the block's duration."""
    blocks = [m for m in model.modules() if hasattr(m, "fused_attn")]
    saved = [m.fused_attn for m in blocks]
    for m in blocks:
        m.fused_attn = False
    try:
        yield
    finally:
        for m, flag in zip(blocks, saved, strict=True):
            m.fused_attn = flag


def _contexts(model: nn.Module) -> dict[str, Callable[[], contextlib.AbstractContextManager]]:
    """The attention and precision paths, each a context manager factory around one call."""
    return {
        "sdpa_flash (default)": contextlib.nullcontext,
        "sdpa_math": lambda: sdpa_kernel(SDPBackend.MATH),
        "explicit_attention": lambda: explicit_attention(model),
        "bf16_autocast": lambda: torch.autocast("cpu", dtype=torch.bfloat16),
    }


def forward_call(model: nn.Module, x: torch.Tensor, ctx: Callable) -> Callable[[], torch.Tensor]:
    """One no-grad forward of the batch under ``ctx()``, logits as float32 (what a query costs)."""

    def call() -> torch.Tensor:
        with ctx(), torch.no_grad():
            return model(x).float()

    return call


def forward_backward_call(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, ctx: Callable
) -> Callable[[], object]:
    """One forward + input-gradient pass under ``ctx()`` (what an attack step costs)."""

    def call() -> object:
        xg = x.clone().requires_grad_(True)
        with ctx():
            loss = F.cross_entropy(model(xg).float(), y)
        return torch.autograd.grad(loss, xg)

    return call


def logit_gaps(calls: dict[str, Callable[[], torch.Tensor]], reference: str) -> dict[str, str]:
    """Each variant's largest |logit − reference logit| on the batch, as a note."""
    ref = calls[reference]()
    return {name: f"max |logit diff| {float((call() - ref).abs().max()):.1e}" for name, call in calls.items()}


def first_call_seconds(call: Callable[[], object]) -> float:
    """Seconds of ``call``'s first run (for a compiled model: the compiling)."""
    t0 = time.perf_counter()
    call()
    return time.perf_counter() - t0


def option_rows(
    name: str, model: nn.Module, x: torch.Tensor, y: torch.Tensor, reps: int, compile_too: bool
) -> list[Row]:
    """The forward and forward+backward of every path, relative to the default."""
    ctxs = _contexts(model)
    fwd = {k: forward_call(model, x, c) for k, c in ctxs.items()}
    both = {k: forward_backward_call(model, x, y, c) for k, c in ctxs.items()}
    first_call: dict[str, str] = {}  # the compiled forward's compiling call
    both_notes: dict[str, str] = {}
    if compile_too:  # inductor, one module; the gradient pass compiles its own graph on first use
        compiled = torch.compile(model)
        fwd["torch_compile"] = forward_call(compiled, x, contextlib.nullcontext)
        both["torch_compile"] = forward_backward_call(compiled, x, y, contextlib.nullcontext)
        first_call["torch_compile"] = f"first call {first_call_seconds(fwd['torch_compile']):.0f} s"
        both_notes["torch_compile"] = f"first call {first_call_seconds(both['torch_compile']):.0f} s"
    gaps = logit_gaps(fwd, "sdpa_flash (default)")
    notes = {k: "; ".join(filter(None, (gap, first_call.get(k)))) for k, gap in gaps.items()}
    rows = ratio_rows(
        "forward",
        f"{name} forward",
        interleaved(fwd, reps),
        "sdpa_flash (default)",
        per=BATCH,
        unit="image",
        notes=notes,
    )
    return rows + ratio_rows(
        "forward",
        f"{name} forward+backward",
        interleaved(both, reps),
        "sdpa_flash (default)",
        per=BATCH,
        unit="image",
        notes=both_notes,
    )


def _group(op: str) -> str:
    if op in MATMUL_OPS:
        return "matrix products (mm, addmm, bmm)"
    if any(key in op for key in ATTENTION_OPS):
        return "attention kernels (SDPA, softmax)"
    return "everything else (norms, GELU, adds, copies, front-end, autograd)"


def profile_rows(name: str, model: nn.Module, x: torch.Tensor, y: torch.Tensor, reps: int) -> list[Row]:
    """A profiled forward+backward by op group: seconds per pass and share of the pass (ratio)."""
    call = forward_backward_call(model, x, y, contextlib.nullcontext)
    call()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(reps):
            call()
    groups: dict[str, float] = {}
    for event in prof.key_averages():  # self times partition the profiled time
        group = _group(event.key)
        groups[group] = groups.get(group, 0.0) + event.self_cpu_time_total / 1e6 / reps
    total = sum(groups.values())
    flops = 2 * 2 * vit_flops(model)["total_macs_with_pooling"] * BATCH  # forward + input backward
    note = f"the pass: {flops / total / 1e9:.1f} GFLOP/s at the model's FLOPs"
    rows = [
        Row(
            "forward",
            f"{name} profile",
            "whole pass (profiled)",
            total / BATCH,
            "image",
            "whole pass (profiled)",
            1.0,
            reps,
            note,
        )
    ]
    for group, seconds in sorted(groups.items(), key=lambda kv: -kv[1]):
        rows.append(
            Row(
                "forward",
                f"{name} profile",
                group,
                seconds / BATCH,
                "image",
                "whole pass (profiled)",
                seconds / total,
                reps,
            )
        )
    return rows


def matmul_rows(reps: int) -> list[Row]:
    """Float32 matmul rates: 1024² against the zoo models' linear layers at batch 128 (B·65 rows, width 64)."""
    rows_n = BATCH * 65
    shapes = {
        "1024x1024x1024": (1024, 1024, 1024),
        "qkv (8320x64 @ 64x192)": (rows_n, 64, 192),
        "fc1 (8320x64 @ 64x128)": (rows_n, 64, 128),
        "proj (8320x64 @ 64x64)": (rows_n, 64, 64),
        "fc2 (8320x128 @ 128x64)": (rows_n, 128, 64),
    }
    mats = {k: (torch.randn(m, k_), torch.randn(k_, n)) for k, (m, k_, n) in shapes.items()}
    flops = {k: 2.0 * m * k_ * n for k, (m, k_, n) in shapes.items()}
    counts = {k: max(1, round(4e9 / f)) for k, f in flops.items()}  # ~4 GFLOP a call: no timer noise

    def timed(key: str) -> Callable[[], None]:
        a, b = mats[key]

        def call() -> None:
            for _ in range(counts[key]):
                torch.matmul(a, b)

        return call

    times = interleaved({k: timed(k) for k in shapes}, reps)
    per_gflop = {k: [t * 1e9 / (counts[k] * flops[k]) for t in ts] for k, ts in times.items()}
    notes = {k: f"{1 / median(ts):.1f} GFLOP/s" for k, ts in per_gflop.items()}
    return ratio_rows("forward", "matmul rate", per_gflop, "1024x1024x1024", unit="GFLOP", notes=notes)


def add_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--compile", action="store_true", help="also time torch.compile's forward (compiles for minutes)"
    )


def bench(args: argparse.Namespace) -> list[Row]:
    """Both zoo models: the options, the profile; then the matmul rates."""
    reps = args.reps or (2 if args.quick else 5)
    dataset = bench_dataset()
    x, _ = bench_images(BATCH, dataset)
    rows: list[Row] = []
    for name in ("wavelet", "patch"):
        model, _ = bench_model(name, dataset, args)
        with attack_mode(model):
            y = predicted_labels(model, x)
            rows += option_rows(name, model, x, y, reps, getattr(args, "compile", False))
            rows += profile_rows(name, model, x, y, reps)
    return rows + matmul_rows(reps)


if __name__ == "__main__":
    run_script("forward", __doc__.splitlines()[0], bench, add_flags)
