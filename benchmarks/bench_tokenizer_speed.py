"""Claim 1's speed half: training images/s of the wavelet ViT against the patch ViT, side by side.

The claim "the wavelet tokenizer trains faster" is a ratio of two throughputs. Read off two training runs it
is only as fair as the machine was quiet during both (here the runs shared two cores with other jobs). This
benchmark times one training step (forward, label-smoothed cross-entropy, backward, the recipe's AdamW step)
of each zoo model on the same real batches, interleaved in one process (:func:`benchmarks.harness.interleaved`),
so load that comes and goes hits both models alike. Repeat r of the candidate and repeat r of the baseline
run back to back, so each repeat gives one paired speed-up (baseline seconds / candidate seconds); the
claims report takes a one-sided exact sign test over the repeats.

Writes ``OUT/tokenizer_speed_pairs.csv`` (one row per data set and repeat; the input of
``python -m robustbench_wave.report claims --throughput``) and the harness's ``tokenizer_speed.csv/.md``.
Data sets: Fashion-MNIST and CIFAR-10 (the JPEG tree under ``../shared/data`` when present, else the
downloaded copy), each skipped with a warning when not available offline. Untrained models: a step's cost
does not depend on the weights. About two minutes on one thread.

Run alone: ``python -m benchmarks.bench_tokenizer_speed [--quick]``.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.harness import Row, interleaved, ratio_rows, run_script
from robustbench_wave.core.io import atomic_write_text
from robustbench_wave.data import dataset_info, load_split
from robustbench_wave.models.vit import build_model
from robustbench_wave.training.engine import Recipe, build_optimizer

log = logging.getLogger(__name__)

CANDIDATE, BASELINE = "wavelet", "patch"
CIFAR10_JPEG = Path("../shared/data/cifar10-jpeg.zip")
PAIRS_FILE = "tokenizer_speed_pairs.csv"
PAIRS_COLUMNS = (
    "dataset", "candidate", "baseline", "rep", "candidate_images_per_s", "baseline_images_per_s", "speedup",
    "batch", "steps", "threads",
)  # fmt: skip


def default_datasets() -> list[str]:
    """Fashion-MNIST and CIFAR-10 (the JPEG tree when this checkout sits beside ``shared/``)."""
    return ["fashion-mnist", f"imagefolder:{CIFAR10_JPEG}" if CIFAR10_JPEG.is_file() else "cifar10"]


def available(dataset: str) -> bool:
    """Whether ``dataset``'s training split loads without a download (a warning names what is missing)."""
    try:
        load_split(dataset, "train", download=False)
    except (OSError, ValueError, RuntimeError) as err:
        log.warning("%s is not available offline (%s): left out", dataset, " ".join(str(err).split()))
        return False
    return True


def step_fn(model_name: str, dataset: str, batch: int, steps: int) -> Callable[[], None]:
    """``steps`` training steps of a fresh ``model_name`` on the first ``steps`` batches of ``dataset``."""
    images, labels, _ = load_split(dataset, "train", download=False)
    n = batch * steps
    x, y = images[:n].float() / 255.0, labels[:n]
    recipe = Recipe()
    torch.manual_seed(0)
    model: nn.Module = build_model(model_name, dataset_info(dataset)).train()
    opt = build_optimizer(model, recipe)

    def run() -> None:
        for i in range(0, n, batch):
            logits = model(x[i : i + batch])
            loss = F.cross_entropy(logits, y[i : i + batch], label_smoothing=recipe.label_smoothing)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

    return run


def paired_rows(dataset: str, times: dict[str, list[float]], images: int) -> list[dict]:
    """One row per repeat: both models' images/s and the paired speed-up (baseline time / candidate time)."""
    slug = dataset_info(dataset).slug
    return [
        {
            "dataset": slug,
            "candidate": CANDIDATE,
            "baseline": BASELINE,
            "rep": r,
            "candidate_images_per_s": images / t_cand,
            "baseline_images_per_s": images / t_base,
            "speedup": t_base / t_cand,
        }
        for r, (t_cand, t_base) in enumerate(zip(times[CANDIDATE], times[BASELINE], strict=True))
    ]


def write_pairs(rows: list[dict], path: Path) -> Path:
    """The paired repeats as CSV (atomically: the package's write-then-rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(path, pd.DataFrame(rows, columns=list(PAIRS_COLUMNS)).to_csv(index=False))


def bench(args: argparse.Namespace) -> list[Row]:
    """Both models on every available data set; writes the paired CSV and returns the harness's rows."""
    reps = args.reps or (3 if args.quick else 11)
    batch, steps = Recipe().batch_size, (1 if args.quick else 3)
    pairs, rows = [], []
    for dataset in (d for d in default_datasets() if available(d)):
        fns = {name: step_fn(name, dataset, batch, steps) for name in (CANDIDATE, BASELINE)}
        times = interleaved(fns, reps)
        extra = {"batch": batch, "steps": steps, "threads": torch.get_num_threads()}
        pairs += [{**row, **extra} for row in paired_rows(dataset, times, batch * steps)]
        rows += ratio_rows(
            "tokenizer_speed",
            f"{dataset_info(dataset).slug}, training step, batch {batch}",
            times,
            BASELINE,
            per=batch * steps,
            unit="image",
        )
    if not pairs:
        raise SystemExit(
            "neither Fashion-MNIST nor CIFAR-10 loads offline: install dataset-fashion-mnist, or run "
            "python -m robustbench_wave.train once with network access to download it"
        )
    write_pairs(pairs, Path(args.out) / PAIRS_FILE)
    return rows


if __name__ == "__main__":
    run_script("tokenizer_speed", __doc__.splitlines()[0], bench)
