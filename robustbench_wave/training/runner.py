"""Train one zoo model for one seed: data preparation, the epoch loop with resume, and the final metrics.

This module owns what ``python -m robustbench_wave.train`` does per (model, seed), as library functions
with explicit parameters: :func:`load_training_data` draws the seeded subset and validation split,
:func:`train_model` trains, resumes a killed run from its last completed epoch (bit-identically: the
per-epoch generator and the saved optimizer, scheduler and RNG state make the draws the same), or reuses a
finished run with the same configuration -- in one process or, under torchrun, as one DDP run over all
ranks (:mod:`robustbench_wave.training.parallel`). Everything is checked before the run folder is touched
(counts, splits, the folder inside ``out``); the folder is then locked while the run writes it, so a second
training into it stops with a clear message instead of interleaving its epochs. The loop itself lives in
:mod:`robustbench_wave.training.engine`, the checkpoint files in :mod:`robustbench_wave.training.checkpoint`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from robustbench_wave.core.distributed import DistContext, barrier, broadcast_object
from robustbench_wave.core.io import atomic_write_json, provenance, read_jsonl
from robustbench_wave.core.runfolder import RESULTS_ROOT, FolderBusyError, RunLock, check_inside, remove_owned
from robustbench_wave.core.tracking import TrainingLog, check_tensorboard, train_log_dir
from robustbench_wave.data import DEFAULT_DATASET, DatasetInfo, load_split, train_val_split
from robustbench_wave.models.flops import flops_summary, vit_flops
from robustbench_wave.models.vit import build_model, describe
from robustbench_wave.models.zoo import load_spec
from robustbench_wave.training import checkpoint as ckpt
from robustbench_wave.training.engine import (
    Recipe,
    build_optimizer,
    build_scheduler,
    clean_metrics,
    train_one_epoch,
)
from robustbench_wave.training.parallel import SINGLE, check_bf16, check_global_batch, wrap_model

log = logging.getLogger(__name__)

#: Columns of ``summary.csv``: one row per (model, seed).
SUMMARY_COLUMNS = [
    "model", "seed", "test_accuracy", "val_accuracy", "params", "tokens", "token_width", "gmacs",
    "macs_saved", "train_images_per_s", "eval_images_per_s", "epochs", "train_seconds",
]  # fmt: skip

#: Seed of epoch ``e``'s batch-order and augmentation generator: ``seed * EPOCH_SEED_STRIDE + e``.
EPOCH_SEED_STRIDE = 100_003


@dataclass(frozen=True)
class TrainConfig:
    """Everything that decides one training run besides the model and the seed.

    ``train_subset``/``test_subset`` shrink the splits for smoke runs and are part of the run's
    fingerprint, as is ``bf16`` (autocast on CUDA) when on; ``fresh`` discards an existing run;
    ``progress`` only shows bars; ``tensorboard``, a folder, copies each run into a TensorBoard run there
    (:mod:`robustbench_wave.core.tracking`; needs the ``tracking`` extra), and is not part of the run either.
    Where the run executes (device, number of ranks) is provenance, not configuration: results of several
    ranks differ from one only by floating-point reduction order, so a
    run resumes and is reused across device counts. Counts are checked here (ValueError), so a library
    caller gets the command line's rules: a subset is None (the whole split) or >= 1, never 0.
    """

    out: Path = RESULTS_ROOT
    recipe: Recipe = field(default_factory=Recipe)
    dataset: str = DEFAULT_DATASET
    data_dir: str | None = None
    train_subset: int | None = None
    test_subset: int | None = None
    fresh: bool = False
    progress: bool = True
    bf16: bool = False
    tensorboard: Path | None = None

    def __post_init__(self) -> None:
        if self.tensorboard is not None:
            check_tensorboard()
        for what, value in self.subsets.items():
            if value is not None:
                check_count(value, f"TrainConfig.{what}", "or None for the whole split")
        check_recipe(self.recipe)

    @property
    def subsets(self) -> dict[str, int | None]:
        return {"train_subset": self.train_subset, "test_subset": self.test_subset}

    @property
    def fingerprint_fields(self) -> dict[str, Any]:
        """What besides model, recipe, data and seed identifies the run (float32 adds nothing, so runs
        trained before bf16 existed keep their fingerprint)."""
        return {**self.subsets, **({"precision": "bf16"} if self.bf16 else {})}


def check_count(value: object, what: str, hint: str = "") -> int:
    """``value`` when it is a whole number >= 1 (a bool is not); else ValueError naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{what} = {value!r} must be a whole number >= 1{' ' + hint if hint else ''}")
    return value


def check_recipe(recipe: Recipe) -> None:
    """Numbers of the recipe that would train nonsense (ValueError naming the field)."""
    check_count(recipe.epochs, "Recipe.epochs")
    check_count(recipe.batch_size, "Recipe.batch_size")
    if not (isinstance(recipe.lr, int | float) and 0 < recipe.lr < math.inf):
        raise ValueError(f"Recipe.lr = {recipe.lr!r} must be a finite number > 0")
    if not (isinstance(recipe.weight_decay, int | float) and 0 <= recipe.weight_decay < math.inf):
        raise ValueError(f"Recipe.weight_decay = {recipe.weight_decay!r} must be a finite number >= 0")
    if not (isinstance(recipe.val_fraction, int | float) and 0 < recipe.val_fraction < 1):
        raise ValueError(
            f"Recipe.val_fraction = {recipe.val_fraction!r} must lie strictly between 0 and 1 (a run "
            "without validation images would record a validation accuracy of 0)"
        )


@dataclass(frozen=True)
class TrainingData:
    """uint8 images and labels of the training, validation and test splits of one seed."""

    info: DatasetInfo
    train_images: torch.Tensor
    train_labels: torch.Tensor
    val_images: torch.Tensor
    val_labels: torch.Tensor
    test_images: torch.Tensor
    test_labels: torch.Tensor


@dataclass
class _Run:
    """One (model, seed) being trained: where it lives and the objects the epochs update."""

    name: str
    seed: int
    directory: Path
    fingerprint: str
    model: nn.Module  # the plain module: evaluated, saved
    module: nn.Module  # what is trained: ``model`` itself, or its DDP wrapper on several ranks
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    ctx: DistContext
    bf16: bool


def load_training_data(
    dataset: str,
    seed: int,
    *,
    val_fraction: float,
    train_subset: int | None = None,
    test_subset: int | None = None,
    data_dir: str | None = None,
) -> TrainingData:
    """The splits of one seed: a seeded random training subset, a seeded validation split, the first
    test images. A subset of None is the whole split; 0 or a negative count is refused, never "all"."""
    for what, value in (("train_subset", train_subset), ("test_subset", test_subset)):
        if value is not None:
            check_count(value, what, "or None for the whole split")
    images, labels, info = load_split(dataset, "train", root=data_dir)
    test_images, test_labels, _ = load_split(dataset, "test", root=data_dir)
    if train_subset is not None:
        if train_subset > len(labels):
            log.warning("the training split has only %d images; training on all of them", len(labels))
        keep = torch.randperm(len(labels), generator=torch.Generator().manual_seed(seed))[:train_subset]
        images, labels = images[keep.sort().values], labels[keep.sort().values]
    if test_subset is not None:
        if test_subset > len(test_labels):
            log.warning("the test split has only %d images; testing on all of them", len(test_labels))
        test_images, test_labels = test_images[:test_subset], test_labels[:test_subset]
    train_idx, val_idx = train_val_split(len(labels), val_fraction, seed)
    return TrainingData(
        info=info,
        train_images=images[train_idx], train_labels=labels[train_idx],
        val_images=images[val_idx], val_labels=labels[val_idx],
        test_images=test_images, test_labels=test_labels,
    )  # fmt: skip


def run_fingerprint(spec: dict, recipe: Recipe, info: DatasetInfo, seed: int, fields: dict) -> str:
    """Identifies a run's configuration; a run folder with another fingerprint is never resumed."""
    blob = json.dumps(
        {"spec": spec, "recipe": recipe.to_dict(), "data": info.name, "seed": seed, **fields}, sort_keys=True
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def check_splits(data: TrainingData, recipe: Recipe) -> None:
    """Splits that can train and validate: at least one global batch and one validation image. Checked
    before the run folder is touched, so a refused run leaves nothing behind."""
    if len(data.train_labels) < recipe.batch_size:
        raise ValueError(
            f"the training split has fewer images ({len(data.train_labels)}) than one batch "
            f"({recipe.batch_size}); lower --batch-size or raise --train-subset"
        )
    if len(data.val_labels) < 1:
        raise ValueError(
            f"the validation split is empty ({len(data.train_labels)} training images, val_fraction "
            f"{recipe.val_fraction}); raise --val-fraction or --train-subset"
        )


def train_model(
    name: str, data: TrainingData, config: TrainConfig, seed: int, ctx: DistContext = SINGLE
) -> dict[str, Any]:
    """Train (or resume, or reuse) one model for one seed on ``ctx``'s device; returns its summary row.

    With several ranks (``ctx`` from :func:`robustbench_wave.core.distributed.init_distributed` under torchrun)
    every rank calls this with the same arguments: they train one DDP model, rank 0 locks the run folder
    and writes the files, and every rank returns the same row. ``config.out`` must be a folder every rank
    can read. A folder locked by another run ends this one with :class:`~robustbench_wave.core.runfolder.
    FolderBusyError` (a ValueError) on every rank.
    """
    check_global_batch(config.recipe.batch_size, ctx)
    check_bf16(ctx.device, config.bf16)
    check_splits(data, config.recipe)
    spec = load_spec(name)
    directory = check_inside(config.out, ckpt.run_dir(config.out, data.info.slug, spec["name"], seed))
    init = init_source(spec, data.info, config.out, seed)
    fields = {**config.fingerprint_fields, **({"init_from": init} if init else {})}
    fingerprint = run_fingerprint(spec, config.recipe, data.info, seed, fields)
    tracked = config.tensorboard is not None and ctx.is_main  # --parallel runs: each rank its own runs
    log_dir = train_log_dir(config.tensorboard, data.info.slug, spec["name"], seed) if tracked else None
    with _locked(directory, ctx), TrainingLog(log_dir) as tb:
        return _train_locked(spec, data, config, seed, ctx, directory, fingerprint, init, tb)


def init_source(spec: dict, info: DatasetInfo, out: Path, seed: int) -> dict[str, Any] | None:
    """The finished run a spec with ``init_from`` fine-tunes from (same data set, same seed): its model,
    seed and weights' sha256, which enter the fine-tuned run's fingerprint (a retrained base retrains the
    fine-tuned run). None without ``init_from``; ValueError naming the command that trains a missing base."""
    base = spec.get("init_from")
    if base is None:
        return None
    directory = ckpt.run_dir(out, info.slug, base, seed)
    config = ckpt.read_config(directory) if (directory / ckpt.CONFIG).exists() else {}
    sha = (config.get("final") or {}).get("checkpoint_sha256")
    if not isinstance(sha, str):
        raise ValueError(
            f"{spec['name']} fine-tunes from {base!r} (init_from), which has no finished run in {directory}; "
            f"train it first: python -m robustbench_wave.train --model {base} --dataset {info.name} "
            f"--train-seed {seed} --results-dir {out}"
        )
    return {"model": base, "seed": seed, "checkpoint_sha256": sha}


def load_init_weights(model: nn.Module, init: dict[str, Any], info: DatasetInfo, out: Path) -> None:
    """Copy the base run's weights (sha256 and spec hash checked by ``load_trained``) into ``model``; a
    base whose parameters do not fit the fine-tuned model is refused naming both."""
    base, _ = ckpt.load_trained(init["model"], info.slug, out, init["seed"])
    try:
        model.load_state_dict(base.state_dict())
    except RuntimeError as err:
        raise ValueError(
            f"init_from {init['model']!r}: its weights do not fit this model ({str(err).splitlines()[0]}); "
            "init_from must name the same architecture without pooling"
        ) from None


@contextmanager
def _locked(directory: Path, ctx: DistContext) -> Iterator[None]:
    """Rank 0 holds the run folder's lock; a refusal reaches every rank (so none waits for the others)."""
    lock = RunLock(directory, hint="wait for it to finish or train into another --results-dir")
    refusal: tuple[bool, str] | None = None
    if ctx.is_main:
        try:
            lock.acquire()
        except FolderBusyError as err:
            refusal = (True, str(err))
        except OSError as err:
            refusal = (False, f"cannot create or lock the run folder {directory}: {err.strerror or err}")
    refusal = broadcast_object(ctx, refusal)
    if refusal is not None:
        busy, message = refusal
        raise FolderBusyError(message) if busy else ValueError(message)
    try:
        yield
    finally:
        lock.release()


def _train_locked(
    spec: dict, data: TrainingData, config: TrainConfig, seed: int, ctx: DistContext, directory: Path,
    fingerprint: str, init: dict[str, Any] | None = None, tb: TrainingLog | None = None,
) -> dict[str, Any]:  # fmt: skip
    """:func:`train_model` once the run folder is locked: discard (--overwrite), reuse, or train and resume.
    ``tb`` gets a copy of what the run writes, rebuilt from its files (resume state, metrics.jsonl)."""
    tb = tb or TrainingLog(None)
    name, recipe = spec["name"], config.recipe
    if config.fresh and ctx.is_main:
        remove_owned(directory, ckpt.OWNED_FILES)
    barrier(ctx)  # every rank sees the folder after --overwrite
    existing = _finished_run(directory, fingerprint)
    if existing is not None:
        log.info("%s seed %d: already trained (%s); pass --overwrite to retrain", name, seed, directory)
        _track_finished(tb, directory)
        return existing
    run, done, history = _start_run(name, spec, data, config, seed, ctx, directory, fingerprint, init)
    if done:
        log.info("%s seed %d: resuming after epoch %d/%d", name, seed, done, recipe.epochs)
    run_config = _run_config(run, spec, data.info, config) | ({"init_from": init} if init else {})
    if ctx.is_main:
        atomic_write_json(directory / ckpt.CONFIG, run_config)
        ckpt.write_metrics(directory, history)  # the resume state's epochs, each once
    tb.epochs(history)  # the TensorBoard run restarts from the same epochs
    for epoch in range(done, recipe.epochs):
        history.append(_train_epoch(run, data, recipe, epoch, config.progress))
        _save_epoch(run, epoch + 1, history)
        tb.epochs(history[-1:])  # after the run's own files hold the epoch
    final = {**_finish(run, data, history), "spec_sha256": ckpt.spec_sha256(spec, data.info.to_dict())}
    if ctx.is_main:
        run_config["final"] = final
        atomic_write_json(directory / ckpt.CONFIG, run_config)
        ckpt.clear_resume_state(directory)
    tb.final(final, recipe.epochs, tracked_hparams(run_config))
    barrier(ctx)  # the run is complete on disk before any rank moves on
    return summary_row(name, seed, recipe.epochs, final)


def tracked_hparams(run_config: dict[str, Any]) -> dict[str, Any]:
    """What TensorBoard's HParams tab shows of a run: model, data set, seed, recipe, precision, subsets."""
    keys = ("model", "dataset", "seed", "precision", "train_subset", "test_subset")
    return {**{k: run_config.get(k) for k in keys}, **run_config.get("recipe", {})}


def _track_finished(tb: TrainingLog, directory: Path) -> None:
    """Copy a finished run that is reused (not retrained) into ``tb`` from its metrics.jsonl and config.json."""
    if tb.active:
        config = ckpt.read_config(directory)
        tb.epochs(read_jsonl(directory / ckpt.METRICS))
        tb.final(config["final"], config["recipe"]["epochs"], tracked_hparams(config))


def _run_config(run: _Run, spec: dict, info: DatasetInfo, config: TrainConfig) -> dict[str, Any]:
    """What ``config.json`` records before the run's ``final`` numbers are known."""
    return {
        "model": run.name, "model_spec": spec, "dataset": info.name, "dataset_info": info.to_dict(),
        "recipe": config.recipe.to_dict(), "seed": run.seed, "fingerprint": run.fingerprint, **config.subsets,
        "precision": "bf16" if config.bf16 else "float32", "description": describe(run.model),
        "provenance": {**provenance(), **run.ctx.provenance()},
    }  # fmt: skip


def _start_run(
    name: str, spec: dict, data: TrainingData, config: TrainConfig, seed: int, ctx: DistContext,
    directory: Path, fingerprint: str, init: dict[str, Any] | None = None,
) -> tuple[_Run, int, list[dict[str, Any]]]:  # fmt: skip
    """The seeded model, optimizer and schedule, restored from the resume state on every rank (the
    number of completed epochs and their metrics are returned); DDP wraps the model only after that, so all
    ranks agree. With ``init`` the model starts from the base run's weights (a resume state overrides them)."""
    torch.manual_seed(seed)
    model = build_model(spec, data.info)
    if init is not None:
        load_init_weights(model, init, data.info, config.out)
    model = model.to(ctx.device)
    optimizer = build_optimizer(model, config.recipe)
    scheduler = build_scheduler(optimizer, config.recipe, len(data.train_labels) // config.recipe.batch_size)
    done, history = ckpt.load_resume_state(directory, model, optimizer, scheduler, fingerprint)
    barrier(ctx)  # every rank has read the resume state before rank 0 may overwrite it
    module = wrap_model(model, ctx)
    return (
        _Run(name, seed, directory, fingerprint, model, module, optimizer, scheduler, ctx, config.bf16),
        done,
        history,
    )


def _train_epoch(run: _Run, data: TrainingData, recipe: Recipe, epoch: int, progress: bool) -> dict[str, Any]:
    """One epoch and its validation; returns its metrics row."""
    generator = torch.Generator().manual_seed(run.seed * EPOCH_SEED_STRIDE + epoch)  # order/augmentation
    start = time.perf_counter()
    stats = train_one_epoch(
        run.module, data.train_images, data.train_labels, run.optimizer, run.scheduler, recipe, generator,
        device=run.ctx.device, desc=f"{run.name} s{run.seed} epoch {epoch + 1}/{recipe.epochs}",
        progress=progress, ctx=run.ctx, bf16=run.bf16,
    )  # fmt: skip
    val = clean_metrics(run.model, data.val_images, data.val_labels, device=run.ctx.device, ctx=run.ctx)
    row = {
        "epoch": epoch + 1,
        **stats,
        "val_loss": val["loss"],
        "val_accuracy": val["accuracy"],
        "lr": run.scheduler.get_last_lr()[0],
        "epoch_seconds": time.perf_counter() - start,
    }
    log.info(
        "%s seed %d epoch %d: loss %.3f train acc %.3f val acc %.3f (%.0f img/s)",
        run.name, run.seed, epoch + 1, stats["train_loss"], stats["train_accuracy"], val["accuracy"],
        stats["train_images_per_s"],
    )  # fmt: skip
    return row


def _save_epoch(run: _Run, epochs_done: int, history: list[dict[str, Any]]) -> None:
    """Rank 0 saves the resume state after ``epochs_done`` epochs (with ``history``) first, then rewrites ``metrics.jsonl`` from it: a
    kill between the two loses nothing and duplicates nothing, since a resumed run rewrites the file."""
    if run.ctx.is_main:
        ckpt.save_resume_state(
            run.directory, run.model, run.optimizer, run.scheduler, epochs_done, run.fingerprint, history
        )
        ckpt.write_metrics(run.directory, history)


def _finish(run: _Run, data: TrainingData, history: list[dict[str, Any]]) -> dict[str, Any]:
    """Test accuracy, final weights (their sha256), throughput, cost and the model's description;
    rank 0 writes the weights and its numbers are every rank's."""
    test = clean_metrics(run.model, data.test_images, data.test_labels, device=run.ctx.device, ctx=run.ctx)
    sha = ckpt.save_weights(run.directory / ckpt.WEIGHTS, run.model) if run.ctx.is_main else None
    desc = describe(run.model)
    final = {
        "test_accuracy": test["accuracy"], "test_loss": test["loss"],
        "eval_images_per_s": test["images_per_s"],
        "val_accuracy": history[-1]["val_accuracy"] if history else None,
        "train_images_per_s": sum(h["train_images_per_s"] for h in history) / max(1, len(history)),
        "train_seconds": sum(h["epoch_seconds"] for h in history), "checkpoint_sha256": sha,
        **compute_cost(run.model, data.info), **desc,
    }  # fmt: skip
    return broadcast_object(run.ctx, final)


def compute_cost(model: nn.Module, info: DatasetInfo) -> dict[str, float]:
    """Analytic giga-MACs per image and the share saved by Token Pooling (the source papers' per-layer
    formulas, see :mod:`robustbench_wave.models.flops`)."""
    summary = flops_summary(vit_flops(model, info.img_size))
    return {"gmacs": summary["gmacs"], "macs_saved": summary["saved_fraction"]}


def summary_row(name: str, seed: int, epochs: int, final: dict[str, Any]) -> dict[str, Any]:
    """The ``summary.csv`` row of a finished run (see :data:`SUMMARY_COLUMNS`)."""
    row = {"model": name, "seed": seed, "epochs": epochs}
    row.update({k: final.get(k) for k in SUMMARY_COLUMNS if k not in row})
    return row


def _finished_run(directory: Path, fingerprint: str) -> dict[str, Any] | None:
    """The summary row of a finished run with this fingerprint; None when there is none to reuse."""
    path = directory / ckpt.CONFIG
    if not path.exists():
        return None
    config = ckpt.read_config(directory)
    if config.get("fingerprint") != fingerprint:
        if "final" in config:
            raise ValueError(
                f"{directory} holds a finished run with a different configuration; pass --overwrite to "
                "overwrite it or choose another --results-dir"
            )
        return None  # an unfinished run of another config: load_resume_state will refuse it clearly
    if "final" not in config or not (directory / ckpt.WEIGHTS).exists():
        return None
    return summary_row(config["model"], config["seed"], config["recipe"]["epochs"], config["final"])
