"""The default suite per image vs a naive per-attack, per-eps torchattacks loop on the same points.

The naive loop is what a user without the harness writes: every attack of the suite at every eps on every
clean-correct point (PGD's restarts as repeated runs). The harness runs the same attacks (the default suite's
FGSM, PGD-L∞/L2, APGD-CE and Square entries, exact gradients) but each one only on points still robust
(skip-broken) and PGD from the best iterate with stall detection. Both are also stated as a multiple of the
compute limit: the passes they made (counted by a forward hook) times the model's FLOPs, at the measured
matmul rate. ``--quick`` shrinks the steps and queries on both sides alike.

Run alone: ``python -m benchmarks.bench_suite [--quick]``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import tomllib
import torch
import torchattacks
from torch import nn

from benchmarks.bench_pgd import matmul_probe
from benchmarks.harness import (
    REPO,
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
from robustbench_wave.attacks import AttackEntry, Suite, parse_suite
from robustbench_wave.evaluation import EvalSettings, evaluate
from robustbench_wave.models.flops import vit_flops

ATTACKS = ("clean", "fgsm", "pgd_linf", "pgd_l2", "apgd_ce", "square")
QUICK = {
    "pgd_linf": {"steps": 10},
    "pgd_l2": {"steps": 10},
    "apgd_ce": {"steps": 20},
    "square": {"n_queries": 100},
}


def bench_suite(quick: bool) -> Suite:
    """The default suite's entries that torchattacks also provides (cheaper steps and queries if ``quick``)."""
    with open(REPO / "attacks" / "default.toml", "rb") as fh:
        data = tomllib.load(fh)
    data["name"] = "bench-suite"
    data["attack"] = [
        dict(a, **(QUICK.get(a["name"], {}) if quick else {})) for a in data["attack"] if a["name"] in ATTACKS
    ]
    return parse_suite(data)


def naive_attack(
    model: nn.Module, entry: AttackEntry, eps: float
) -> Callable[[torch.Tensor, torch.Tensor], Any]:
    """The torchattacks attack a suite entry names, at one eps."""
    p = entry.params
    if entry.family == "fgsm":
        return torchattacks.FGSM(model, eps=eps)
    if entry.family == "pgd":
        cls = torchattacks.PGD if entry.threat == "Linf" else torchattacks.PGDL2
        return cls(
            model, eps=eps, alpha=p["rel_step_size"] * eps, steps=p["steps"], random_start=p["random_start"]
        )
    if entry.family == "apgd":
        return torchattacks.APGD(
            model,
            norm=entry.threat,
            eps=eps,
            steps=p["steps"],
            n_restarts=p["restarts"],
            loss=p["loss"],
            rho=p["rho"],
            seed=0,
        )
    if entry.family == "square":
        return torchattacks.Square(
            model,
            norm=entry.threat,
            eps=eps,
            n_queries=p["n_queries"],
            n_restarts=p["restarts"],
            p_init=p["p_init"],
            loss=p["loss"],
            seed=0,
        )
    raise ValueError(f"no naive torchattacks counterpart for family {entry.family!r}")


def naive_loop(model: nn.Module, x: torch.Tensor, y: torch.Tensor, suite: Suite, dataset: str) -> None:
    """Every attack at every eps on every point; PGD's restarts are whole reruns."""
    for entry in suite.attacks:
        if entry.family == "clean":
            continue
        runs = entry.params.get("restarts", 1) if entry.family == "pgd" else 1
        for eps in suite.entry_eps(entry, dataset):
            attack = naive_attack(model, entry, eps)
            for _ in range(runs):
                attack(x, y)


@contextmanager
def counting_passes(model: nn.Module) -> Iterator[dict[str, int]]:
    """Count images through ``model``: with gradients enabled (forward + backward) and without."""
    counts = {"grad": 0, "nograd": 0}

    def hook(_module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
        counts["grad" if torch.is_grad_enabled() else "nograd"] += inputs[0].shape[0]

    handle = model.register_forward_pre_hook(hook)
    try:
        yield counts
    finally:
        handle.remove()


def counted(
    model: nn.Module, counts: dict[str, dict[str, int]], key: str, fn: Callable[[], Any]
) -> Callable[[], None]:
    """``fn`` with the images it passes through ``model`` added up in ``counts[key]`` over every call."""

    def call() -> None:
        with counting_passes(model) as c:
            fn()
        total = counts.setdefault(key, {"grad": 0, "nograd": 0})
        for k, v in c.items():
            total[k] += v

    return call


def limit_seconds(model: nn.Module, counts: dict[str, int], rate: float) -> float:
    """Seconds the counted passes need at ``rate``: 2 FLOPs/MAC; a pass with gradients costs 2 forwards."""
    macs = vit_flops(model)["total_macs_with_pooling"]
    return 2 * macs * (counts["nograd"] + 2 * counts["grad"]) / rate


def suite_rows(
    case: str,
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    suite: Suite,
    dataset: str,
    reps: int,
) -> list[Row]:
    """Both sides on one model, interleaved, each with its passes counted and stated against the limit."""
    counts: dict[str, dict[str, int]] = {}
    probe, probe_flops = matmul_probe(2e10)  # the compute limit's rate, measured among the runs
    fns = {
        "naive_torchattacks": counted(
            model, counts, "naive_torchattacks", lambda: naive_loop(model, x, y, suite, dataset)
        ),
        "harness_suite": counted(
            model,
            counts,
            "harness_suite",
            lambda: evaluate(
                model, x, y, suite, EvalSettings(dataset=dataset, grad_modes=("exact",)), progress=False
            ),
        ),
        "matmul": probe,
    }
    times = interleaved(fns, reps, warmup=0)  # no warm-up: each run takes tens of seconds
    rate = probe_flops / median(times.pop("matmul"))
    limit = {v: limit_seconds(model, counts[v], rate) / reps for v in times}
    notes = {
        v: f"{median(t) / limit[v]:.2f}× the compute limit of its passes ({limit[v] / len(x) * 1e3:.1f} ms/img)"
        for v, t in times.items()
    }
    return ratio_rows("suite", case, times, "naive_torchattacks", per=len(x), unit="image", notes=notes)


def bench(args: argparse.Namespace) -> list[Row]:
    """Both models; 16 points, 1 repetition: the naive loop takes a minute, ratios are ~2× from 1."""
    reps = args.reps or 1
    n = 16
    dataset = bench_dataset()
    suite = bench_suite(args.quick)
    x, _ = bench_images(n, dataset)
    rows: list[Row] = []
    for name in ("wavelet", "patch"):
        model, kind = bench_model(name, dataset, args)
        y = predicted_labels(model, x)  # every point clean-correct: both sides attack all of them
        rows += suite_rows(f"{name} ({kind}), n={n}", model, x, y, suite, dataset, reps)
    return rows


if __name__ == "__main__":
    run_script("suite", __doc__.splitlines()[0], bench)
