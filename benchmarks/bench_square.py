"""Square L∞: the harness's runner (:mod:`robustbench_wave.attacks.square`) vs torchattacks' ``Square``.

Both run the same algorithm on the same random stream and return the same points (the note says whether they
did); the harness's runner does not query the model on a proposal that leaves a point unchanged. Two cases:

* ``square``: one Square run, 1,000 queries (the default suite's budget) at L∞ 0.01 and 0.03, on the first
  test images with the model's own predictions as labels (every point attacked), per model; the note gives
  the share of single-point forwards skipped.
* ``suite``: the whole default suite on the ``wavelet`` model (every gradient mode, ``patch`` as the transfer
  surrogate) through ``evaluation.evaluate``, once with each Square, one run each: the ratio is what the
  change gives a default-suite attack run, Square's share of it included; the note says whether the records
  are identical.

Run alone: ``python -m benchmarks.bench_square [--quick]``.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import pandas as pd
import tomllib
import torch
import torchattacks
from torch import nn

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
from robustbench_wave.attacks import GradSafe, Suite, attack_mode, parse_suite, seeded
from robustbench_wave.attacks import torchattacks_backend as backend
from robustbench_wave.attacks.square import QueryCount, SquareSettings, square_linf
from robustbench_wave.evaluation import EvalSettings, evaluate

EPS = (0.01, 0.03)


def torchattacks_square(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, s: SquareSettings, votes: Any = None
) -> Any:
    """torchattacks' ``Square`` with ``s``'s settings, in :func:`square_linf`'s calling convention (single
    draws only: the reference has no K-draw vote)."""
    if votes is not None:
        raise ValueError("the torchattacks reference queries single draws; run it with vote_draws = 1")
    atk = torchattacks.Square(
        model, norm="Linf", eps=s.eps, n_queries=s.n_queries, n_restarts=s.n_restarts, p_init=s.p_init,
        loss=s.loss, seed=s.seed,
    )  # fmt: skip
    return atk(x, y).detach(), QueryCount()


@contextmanager
def reference_square() -> Iterator[None]:
    """The evaluation's L∞ Square runs torchattacks' ``Square`` (the code before this runner existed)."""
    with mock.patch.object(backend, "square_linf", torchattacks_square):
        yield


def square_case(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, settings: SquareSettings, reps: int
) -> tuple[dict[str, list[float]], str]:
    """Seconds per run of both variants (interleaved) and the note: same points? forwards skipped? the ratio
    of the process's CPU time (on a shared machine it moves less with other jobs than the wall time)?"""
    out: dict[str, Any] = {}
    cpu: dict[str, list[float]] = {"torchattacks": [], "harness": []}

    def run(variant: str, fn: Callable) -> Callable[[], None]:
        def call() -> None:
            t0 = time.process_time()
            with seeded(0):
                out[variant] = fn(model, x, y, settings)
            cpu[variant].append(time.process_time() - t0)

        return call

    variants = {
        "torchattacks": run("torchattacks", torchattacks_square),
        "harness": run("harness", square_linf),
    }
    times = interleaved(variants, reps, warmup=0)  # a run is seconds of the same loop: nothing to warm up
    count = out["harness"][1]
    same = torch.equal(out["harness"][0], out["torchattacks"][0])
    skipped = count.skipped / max(1, count.made + count.skipped)
    cpu_ratio = median(cpu["harness"]) / median(cpu["torchattacks"])
    note = f"same points: {'yes' if same else 'NO'}; forwards skipped: {skipped:.0%}; CPU-time ratio {cpu_ratio:.2f}"
    return times, note


def square_rows(
    name: str, model: nn.Module, x: torch.Tensor, y: torch.Tensor, n_queries: int, reps: int
) -> list[Row]:
    """One Square run per variant and eps on (x, y); ratio per run."""
    rows = []
    with attack_mode(model):
        for eps in EPS:
            settings = SquareSettings(eps=eps, n_queries=n_queries, seed=1)
            times, note = square_case(GradSafe(model), x, y, settings, reps)
            case = f"{name}, n={len(x)}, Linf {eps}, {n_queries} queries"
            rows += ratio_rows("square", case, times, "torchattacks", notes={"harness": note}, unit="run")
    return rows


def default_suite(quick: bool) -> Suite:
    """``attacks/default.toml`` as it is, or with 100 Square queries (``--quick``)."""
    with open(REPO / "attacks" / "default.toml", "rb") as fh:
        data = tomllib.load(fh)
    if quick:
        data["attack"] = [dict(a, n_queries=100) if a["family"] == "square" else a for a in data["attack"]]
    return parse_suite(data)


def suite_rows(dataset: str, n: int, args: argparse.Namespace) -> list[Row]:
    """The default suite on ``wavelet`` with each Square, one run each (no warm-up: a run is minutes)."""
    model, kind = bench_model("wavelet", dataset, args)
    surrogate, _ = bench_model("patch", dataset, args)
    x, y = bench_images(n, dataset)
    suite = default_suite(args.quick)
    records: dict[str, pd.DataFrame] = {}

    def run(variant: str) -> Callable[[], None]:
        def call() -> None:
            settings = EvalSettings(model_name="wavelet", dataset=dataset)
            result = evaluate(model, x, y, suite, settings, surrogate=surrogate, progress=False)
            records[variant] = result.records

        return call

    def reference() -> None:
        with reference_square():
            run("torchattacks")()

    times = interleaved({"torchattacks": reference, "harness": run("harness")}, reps=1, warmup=0)
    same = records["harness"].equals(records["torchattacks"])
    note = f"records identical: {'yes' if same else 'NO'}"
    case = f"wavelet ({kind}), default suite, every grad mode, n={n}"
    return ratio_rows("square", case, times, "torchattacks", notes={"harness": note}, unit="run")


def bench(args: argparse.Namespace) -> list[Row]:
    """Square alone on both models (64 points), then the default suite on wavelet (32 points): about 8 min
    on an idle 2-core machine."""
    reps = args.reps or 1
    dataset = bench_dataset()
    n_queries = 100 if args.quick else 1000
    x, _ = bench_images(32 if args.quick else 64, dataset)  # skipping needs batches of MIN_SKIP_ROWS or more
    rows: list[Row] = []
    for name in ("wavelet", "patch"):
        model, kind = bench_model(name, dataset, args)
        rows += square_rows(f"{name} ({kind})", model, x, predicted_labels(model, x), n_queries, reps)
    return rows + suite_rows(dataset, 8 if args.quick else 32, args)


if __name__ == "__main__":
    run_script("square", __doc__.splitlines()[0], bench)
