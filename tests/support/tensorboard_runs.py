"""Reading back what ``--tensorboard`` wrote (TensorBoard's own reader) and comparing it with a training
run's files; the small training run the tracking tests log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

#: The train command on a slice of the synthetic data set (add ``--results-dir`` and ``--tensorboard``).
ARGS = ["--dataset", "synthetic", "--train-subset", "96", "--n-examples", "32", "--batch-size", "32",
        "--epochs", "2", "--no-progress", "--model", "patch"]  # fmt: skip
#: metrics.jsonl key -> the TensorBoard tag it must appear under (written out, not computed by epoch_tag).
EPOCH_TAGS = {
    "train_loss": "train/loss", "train_accuracy": "train/accuracy", "train_images_per_s": "train/images_per_s",
    "val_loss": "val/loss", "val_accuracy": "val/accuracy", "lr": "train/lr",
    "epoch_seconds": "train/epoch_seconds",
}  # fmt: skip


def read_scalars(log_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of a TensorBoard run as (step, value) pairs, by TensorBoard's own reader."""
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    acc = accumulator.EventAccumulator(str(log_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def event_files(log_dir: Path) -> list[Path]:
    """The event files of one TensorBoard run folder."""
    return sorted(log_dir.glob("events.out.tfevents.*"))


def check_training_copy(run: Path, log_dir: Path) -> None:
    """TensorBoard holds each metrics.jsonl row once, at step = its epoch, and config.json's test numbers
    at the last epoch (float32, as TensorBoard stores scalars)."""
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    final = json.loads((run / "config.json").read_text())["final"]
    scalars = read_scalars(log_dir)
    for key, tag in EPOCH_TAGS.items():
        assert [s for s, _ in scalars[tag]] == [m["epoch"] for m in metrics], tag  # each epoch once
        assert [v for _, v in scalars[tag]] == pytest.approx([m[key] for m in metrics], rel=1e-6), tag
    assert scalars["test/accuracy"] == [(len(metrics), pytest.approx(final["test_accuracy"], rel=1e-6))]
    assert scalars["test/loss"] == [(len(metrics), pytest.approx(final["test_loss"], rel=1e-6))]
    assert len(event_files(log_dir)) == 1  # superseded event files are gone
