"""PGD per step: the harness (engine and full ``evaluate``) vs a raw hand-written loop vs torchattacks.PGD.

On the same points (the model's own predictions as labels, so every point is attacked by every variant), the
same eps, step size and number of steps, one restart: per step, how much does the harness's bookkeeping (best
iterate, stall check, seeded starts; in ``evaluate`` also the clean pass, audit and records) cost over
forward + backward + sign step + projection? Also the gradient modes (exact / BPDA / blocked) of the
wavelet model, and the compute limit: the model's MACs at this CPU's measured matmul rate.

Run alone: ``python -m benchmarks.bench_pgd [--quick]``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

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
from robustbench_wave.attacks import PGD, GradSafe, Suite, attack_mode, parse_suite
from robustbench_wave.evaluation import EvalSettings, evaluate
from robustbench_wave.models.flops import vit_flops
from robustbench_wave.models.frontend import grad_mode, has_fixed_front_end

EPS = 0.03
REL_STEP = 0.125


def raw_pgd(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, eps: float, alpha: float, steps: int
) -> torch.Tensor:
    """The textbook loop: random start, then forward, backward, sign step, projection; nothing else."""
    adv = (x + torch.empty_like(x).uniform_(-eps, eps)).clamp(0.0, 1.0)
    for _ in range(steps):
        adv.requires_grad_(True)
        loss = F.cross_entropy(model(adv), y)
        (grad,) = torch.autograd.grad(loss, adv)
        adv = adv.detach() + alpha * grad.sign()
        adv = torch.min(torch.max(adv, x - eps), x + eps).clamp(0.0, 1.0)
    return adv


def fwd_bwd(model: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int) -> None:
    """``steps`` bare forward + input-gradient passes: the floor of any gradient attack step."""
    xg = x.clone().requires_grad_(True)
    for _ in range(steps):
        torch.autograd.grad(F.cross_entropy(model(xg), y), xg)


def one_pgd_suite(steps: int) -> Suite:
    """A suite with the clean pass and one PGD-L∞ entry at ``EPS`` (what ``evaluate`` runs per step)."""
    return parse_suite(
        {
            "name": "bench-pgd",
            "eps": {"default": {"Linf": [EPS], "L2": [1.0], "L0": [0.01]}},
            "attack": [
                {"name": "clean", "family": "clean"},
                {
                    "name": "pgd_linf",
                    "family": "pgd",
                    "threat": "Linf",
                    "steps": steps,
                    "rel_step_size": REL_STEP,
                    "restarts": 1,
                    "random_start": True,
                    "backend": "builtin",
                },
            ],
        }
    )


def variants(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int
) -> dict[str, Callable[[], object]]:
    """The five ways of spending ``steps`` PGD steps (or bare passes) on the batch."""
    import torchattacks

    ids = torch.arange(x.shape[0])
    alpha = REL_STEP * EPS
    engine = PGD(EPS, "Linf", steps, alpha, restarts=1, random_start=True)
    suite = one_pgd_suite(steps)
    safe = GradSafe(model)
    ta = torchattacks.PGD(model, eps=EPS, alpha=alpha, steps=steps, random_start=True)
    return {
        "raw_pgd": lambda: raw_pgd(model, x, y, EPS, alpha, steps),
        "fwd_bwd": lambda: fwd_bwd(model, x, y, steps),
        "torchattacks": lambda: ta(x, y),
        "harness_engine": lambda: engine.run(safe, x, y, ids),
        "harness_evaluate": lambda: evaluate(
            model,
            x,
            y,
            suite,
            EvalSettings(grad_modes=("exact",), skip_broken=False),
            progress=False,
            batch_size=len(x),
        ),
    }


def matmul_probe(flops: float, n: int = 1024) -> tuple[Callable[[], object], float]:
    """Float32 ``n``×``n`` matmuls worth about ``flops`` (at least one), and their exact FLOP count.

    Timed *among* the variants, it gives the compute limit under the same load and thread count.
    """
    a, b = torch.randn(n, n), torch.randn(n, n)
    count = max(1, round(flops / (2 * n**3)))

    def run() -> None:
        for _ in range(count):
            torch.matmul(a, b)

    return run, float(count * 2 * n**3)


def step_flops(model: nn.Module, batch: int) -> float:
    """FLOPs of one attack step on ``batch`` images: forward + input-gradient backward = 2 forwards.

    2 FLOPs per MAC; frozen weights, so the backward computes activation gradients only.
    """
    return 2 * 2 * vit_flops(model)["total_macs_with_pooling"] * batch


def limit_rows(name: str, step_rows: list[Row], limit: float, rate: float) -> list[Row]:
    """Each variant's step against ``limit``, the seconds its FLOPs take at the matmul ``rate``."""
    note = f"matmul {rate / 1e9:.1f} GFLOP/s; limit {limit * 1e3:.2f} ms/step"
    case = f"{name} vs compute limit"
    return [
        Row("pgd", case, r.variant, r.median_s, r.unit, "compute_limit", r.median_s / limit, r.reps, note)
        for r in step_rows
    ]


def grad_mode_rows(
    name: str, model: nn.Module, x: torch.Tensor, y: torch.Tensor, steps: int, reps: int
) -> list[Row]:
    """The harness engine under each gradient mode, per requested step, relative to exact."""
    ids = torch.arange(x.shape[0])
    engine = PGD(EPS, "Linf", steps, REL_STEP * EPS, restarts=1, random_start=True)
    safe = GradSafe(model)

    def under(mode: str) -> Callable[[], object]:
        def call() -> object:
            with grad_mode(model, mode):
                return engine.run(safe, x, y, ids)

        return call

    times = interleaved({m: under(m) for m in ("exact", "bpda", "blocked")}, reps)
    notes = {"blocked": "zero gradient: the stall check ends the attack after its first step"}
    return ratio_rows(
        "pgd", f"{name} grad modes", times, "exact", per=steps, unit=f"step (B={len(x)})", notes=notes
    )


def bench(args: argparse.Namespace) -> list[Row]:
    """Both zoo models: the step variants, their compute limit and (wavelet) the gradient modes."""
    reps = args.reps or (2 if args.quick else 3)  # a step variant runs for seconds: 3 are enough
    batch, steps = (32, 5) if args.quick else (128, 10)
    dataset = bench_dataset()
    x, _ = bench_images(batch, dataset)
    rows: list[Row] = []
    for name in ("wavelet", "patch"):
        model, kind = bench_model(name, dataset, args)
        y = predicted_labels(model, x)
        probe, probe_flops = matmul_probe(steps * step_flops(model, batch))
        with attack_mode(model):
            times = interleaved({**variants(model, x, y, steps), "matmul": probe}, reps)
            probe_s = median(times.pop("matmul"))
            limit = probe_s * step_flops(model, batch) / probe_flops  # seconds per step at the limit
            fb = median(times["fwd_bwd"])
            notes = {k: f"{median(t) / fb:.3f}× fwd+bwd" for k, t in times.items()}
            step = ratio_rows(
                "pgd", f"{name} ({kind})", times, "raw_pgd", per=steps, unit=f"step (B={batch})", notes=notes
            )
            rows += step + limit_rows(name, step, limit, probe_flops / probe_s)
            if has_fixed_front_end(model):
                rows += grad_mode_rows(name, model, x, y, steps, reps)
    return rows


if __name__ == "__main__":
    run_script("pgd", __doc__.splitlines()[0], bench)
