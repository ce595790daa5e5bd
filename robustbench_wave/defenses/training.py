"""Train the gallery's CNNs with the project's one recipe and keep their weights as safetensors.

Three networks are trained (:func:`robustbench_wave.models.gallery.trained_entries`), each as a whole
model, defence included: the undefended CNN, whose weights bit-depth reduction, JPEG and SAP reuse (as their
papers apply them to a trained network), the CNN on thermometer codes (its input has ``levels`` channels)
and the CNN behind random resize-and-pad (it learns the draws' shifts and scales). Each goes to ``OUT/weights/<entry>/model.safetensors`` with ``train.json`` beside it
(recipe, data, seed, accuracies, the weights' sha256). A finished run with the same fingerprint is reused; a
different one is refused unless ``fresh`` (so attack runs never silently change weights under them).
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from robustbench_wave.core.io import atomic_write_json, provenance, sha256_file
from robustbench_wave.core.runfolder import RunLock, check_inside
from robustbench_wave.data import DEFAULT_DATASET, DatasetInfo
from robustbench_wave.models.gallery import GalleryEntry, trained_entries
from robustbench_wave.training.checkpoint import save_weights
from robustbench_wave.training.engine import (
    Recipe,
    build_optimizer,
    build_scheduler,
    clean_metrics,
    train_one_epoch,
)
from robustbench_wave.training.runner import (
    EPOCH_SEED_STRIDE,
    TrainingData,
    check_recipe,
    check_splits,
    load_training_data,
)

log = logging.getLogger(__name__)

#: The shared recipe (AdamW, warm-up, cosine, label smoothing) for two epochs: the CNN reaches about 89-90 %.
GALLERY_RECIPE = Recipe(epochs=2)
WEIGHTS_FILE = "model.safetensors"
TRAIN_JSON = "train.json"


@dataclass(frozen=True)
class TrainOptions:
    """Where and on what the gallery trains; subsets shrink the splits for tests (part of the fingerprint)."""

    out: Path
    dataset: str = DEFAULT_DATASET
    recipe: Recipe = field(default_factory=lambda: GALLERY_RECIPE)
    seed: int = 0
    train_subset: int | None = None
    test_subset: int | None = None
    data_dir: str | None = None
    fresh: bool = False
    progress: bool = True

    def __post_init__(self) -> None:
        check_recipe(self.recipe)


def weights_path(out: str | Path, entry: str) -> Path:
    """The weights file of a trained gallery entry (``GalleryEntry.weights_of``) under the gallery root."""
    return Path(out) / "weights" / entry / WEIGHTS_FILE


def train_gallery(options: TrainOptions) -> dict[str, dict[str, Any]]:
    """Train (or reuse) every network the gallery needs; returns ``train.json``'s content per entry."""
    data = load_training_data(
        options.dataset, options.seed, val_fraction=options.recipe.val_fraction,
        train_subset=options.train_subset, test_subset=options.test_subset, data_dir=options.data_dir,
    )  # fmt: skip
    check_splits(data, options.recipe)
    return {entry.name: train_entry(entry, data, options) for entry in trained_entries()}


def fingerprint(entry: GalleryEntry, info: DatasetInfo, options: TrainOptions) -> str:
    """What decides the weights: the factory, the recipe, the data set, the seed and the subsets."""
    blob = {
        "factory": entry.reference, "recipe": options.recipe.to_dict(), "data": info.name,
        "seed": options.seed, "train_subset": options.train_subset, "test_subset": options.test_subset,
    }  # fmt: skip
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:16]


def train_entry(entry: GalleryEntry, data: TrainingData, options: TrainOptions) -> dict[str, Any]:
    """Train one gallery network into its folder (locked while it works), or reuse the finished one."""
    path = check_inside(options.out, weights_path(options.out, entry.name))
    key = fingerprint(entry, data.info, options)
    with RunLock(path.parent, hint="wait for it to finish or train into another --results-dir"):
        done = _finished(path, key, options.fresh)
        if done is not None:
            log.info("gallery %s: already trained (%s)", entry.name, path)
            return done
        model, history = _train(entry, data, options)
        test = clean_metrics(model, data.test_images, data.test_labels)
        record = {
            "entry": entry.name, "factory": entry.reference, "fingerprint": key,
            "dataset": data.info.name, "seed": options.seed, "recipe": options.recipe.to_dict(),
            "train_subset": options.train_subset, "test_subset": options.test_subset,
            "test_accuracy": test["accuracy"], "test_loss": test["loss"], "epochs": history,
            "weights_sha256": save_weights(path, model), "provenance": provenance(),
        }  # fmt: skip
        atomic_write_json(path.parent / TRAIN_JSON, record)
    log.info("gallery %s: test accuracy %.4f (%s)", entry.name, test["accuracy"], path)
    return record


def _finished(path: Path, fingerprint: str, fresh: bool) -> dict[str, Any] | None:
    """The record of a finished training with this fingerprint whose weights are intact; None to train.
    A finished training of another configuration is refused unless ``fresh``."""
    record_path = path.parent / TRAIN_JSON
    if not record_path.exists() or fresh:
        return None
    try:
        record = json.loads(record_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ValueError(
            f"{record_path} cannot be read ({err}); delete {path.parent} or pass --overwrite"
        ) from None
    if record.get("fingerprint") != fingerprint:
        raise ValueError(
            f"{path.parent} holds weights trained with another configuration (recipe, data, seed or subsets); "
            "pass --overwrite to retrain them (attack runs of the old weights then become a new configuration) "
            "or choose another --results-dir"
        )
    if not path.exists() or sha256_file(path) != record.get("weights_sha256"):
        return None  # killed between the weights and the record, or the file was replaced: train again
    return record


def _train(entry: GalleryEntry, data: TrainingData, options: TrainOptions) -> tuple[nn.Module, list[dict]]:
    """The shared recipe's loop on one seeded model: the epoch order seeded as ``training.runner`` seeds it."""
    info, recipe = data.info, options.recipe
    torch.manual_seed(options.seed)
    model = entry.factory(num_classes=info.num_classes, img_size=info.img_size)
    optimizer = build_optimizer(model, recipe)
    scheduler = build_scheduler(optimizer, recipe, len(data.train_labels) // recipe.batch_size)
    history = []
    for epoch in range(recipe.epochs):
        generator = torch.Generator().manual_seed(options.seed * EPOCH_SEED_STRIDE + epoch)
        start = time.perf_counter()
        stats = train_one_epoch(
            model, data.train_images, data.train_labels, optimizer, scheduler, recipe, generator,
            device=torch.device("cpu"), desc=f"gallery {entry.name} epoch {epoch + 1}/{recipe.epochs}",
            progress=options.progress,
        )  # fmt: skip
        val = clean_metrics(model, data.val_images, data.val_labels)
        history.append(
            {"epoch": epoch + 1, **stats, "val_accuracy": val["accuracy"],
             "epoch_seconds": time.perf_counter() - start}
        )  # fmt: skip
        log.info("gallery %s epoch %d: val accuracy %.4f", entry.name, epoch + 1, val["accuracy"])
    return model.eval(), history
