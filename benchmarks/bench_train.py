"""Training images/s: the package's training loop vs a bare loop, and the train CLI on 1 rank vs 2 (DDP).

In process: :func:`robustbench_wave.training.engine.train_one_epoch` (label smoothing, gradient clipping, the
learning-rate schedule, running metrics, per-batch conversion from uint8) against a bare loop on the same
model and batch size (forward, cross-entropy, backward, AdamW step; pre-converted float images, no metrics),
interleaved. Then the command line, one epoch on a small subset: ``python -m robustbench_wave.train`` vs
``torchrun --standalone --nproc_per_node 2 -m robustbench_wave.train --parallel data`` (DDP, the same global
batch), wall time per run, with each run's own images/s from its ``metrics.jsonl`` in the note.

Run alone: ``python -m benchmarks.bench_train [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.harness import (
    RESULTS,
    CliRun,
    Row,
    bench_dataset,
    interleaved,
    ratio_rows,
    reps_for,
    run_cli,
    run_script,
)
from robustbench_wave.data import dataset_info, load_split
from robustbench_wave.models.vit import build_model
from robustbench_wave.training.engine import Recipe, build_optimizer, build_scheduler, train_one_epoch

MODEL = "wavelet"


def bare_epoch(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, opt: torch.optim.Optimizer, batch: int
) -> None:
    """Forward, loss, backward, AdamW step over fixed batches: the floor of any training loop."""
    model.train()
    for i in range(0, len(y) - batch + 1, batch):
        loss = F.cross_entropy(model(x[i : i + batch]), y[i : i + batch])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


def loop_rows(dataset: str, n: int, reps: int) -> list[Row]:
    """The package's epoch vs the bare loop on ``n`` training images, per image."""
    images, labels, _ = load_split(dataset, "train", download=False)
    images, labels = images[:n], labels[:n]
    info = dataset_info(dataset)
    recipe = Recipe()
    torch.manual_seed(0)
    ours, bare = build_model(MODEL, info), build_model(MODEL, info)
    opt_ours = build_optimizer(ours, recipe)
    sched = build_scheduler(opt_ours, recipe, n // recipe.batch_size)
    opt_bare = torch.optim.AdamW(bare.parameters(), lr=recipe.lr, weight_decay=recipe.weight_decay)
    gen = torch.Generator().manual_seed(0)
    x_float = images.float() / 255.0
    fns = {
        "bare_loop": lambda: bare_epoch(bare, x_float, labels, opt_bare, recipe.batch_size),
        "train_one_epoch": lambda: train_one_epoch(
            ours, images, labels, opt_ours, sched, recipe, gen, device=torch.device("cpu"), progress=False
        ),
    }
    times = interleaved(fns, reps)
    per = n - n % recipe.batch_size
    return ratio_rows(
        "train",
        f"{MODEL}, batch {recipe.batch_size}, {per} images",
        times,
        "bare_loop",
        per=per,
        unit="image",
    )


def train_args(dataset: str, out: Path, subset: int, parallel: bool) -> list[str]:
    """The train CLI's arguments: one epoch, a fresh run; ``parallel`` adds DDP (``--parallel data``)."""
    args = [
        "robustbench_wave.train", "--model", MODEL, "--dataset", dataset, "--epochs", "1",
        "--train-subset", str(subset), "--n-examples", "256", "--results-dir", str(out), "--device", "cpu",
        "--no-progress", "--overwrite",
    ]  # fmt: skip
    return args + (["--parallel", "data"] if parallel else [])


def images_per_s(out: Path, dataset: str) -> float | None:
    """The run's own training throughput (its metrics.jsonl), or None when it wrote none."""
    paths = list((out / "train").glob(f"*/{MODEL}/seed-0/metrics.jsonl"))
    if not paths:
        return None
    return json.loads(paths[0].read_text().splitlines()[-1]).get("train_images_per_s")


def cli_rows(dataset: str, subset: int, reps: int) -> list[Row]:
    """One epoch through the CLI on 1 process vs 2 DDP ranks (fresh output folders, one thread per rank)."""
    runs: dict[str, list[tuple[Path, CliRun]]] = {"1 rank": [], "2 ranks (DDP)": []}

    def variant(label: str, ranks: int) -> Callable[[], None]:
        def call() -> None:
            out = RESULTS / "train-tmp" / f"{ranks}-{len(runs[label])}"
            shutil.rmtree(out, ignore_errors=True)
            runs[label].append((out, run_cli(train_args(dataset, out, subset, ranks > 1), ranks=ranks)))

        return call

    times = interleaved(
        {label: variant(label, r) for label, r in (("1 rank", 1), ("2 ranks (DDP)", 2))}, reps, warmup=0
    )
    notes = {}
    for label, done in runs.items():
        failed = [r.tail for _, r in done if not r.ok]
        speeds = [s for out, _ in done if (s := images_per_s(out, dataset)) is not None]
        notes[label] = (
            f"FAILED: {failed[0][:150]}"
            if failed
            else f"{max(speeds, default=float('nan')):.0f} img/s in the epoch"
        )
    shutil.rmtree(RESULTS / "train-tmp", ignore_errors=True)
    return ratio_rows(
        "train", f"train CLI, {MODEL}, 1 epoch on {subset} images", times, "1 rank", unit="run", notes=notes
    )


def bench(args: argparse.Namespace) -> list[Row]:
    """The in-process loops, then the CLI on 1 and 2 ranks (one repetition each with ``--quick``)."""
    reps = reps_for(args)
    dataset = bench_dataset()
    n = 512 if args.quick else 1024
    cli_reps = args.reps or (1 if args.quick else 2)
    return loop_rows(dataset, n, reps) + cli_rows(dataset, 1024 if args.quick else 4096, cli_reps)


if __name__ == "__main__":
    run_script("train", __doc__.splitlines()[0], bench)
