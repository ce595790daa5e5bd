"""``python -m robustbench_wave.train``: train zoo models with one shared recipe and write a summary table.

This module is the command line only: it parses the flags into a
:class:`~robustbench_wave.training.runner.TrainConfig` and calls the library. Per model and seed,
:func:`~robustbench_wave.training.runner.train_model` writes safetensors weights, the resolved config (JSON)
and per-epoch metrics to ``<results-dir>/train/<dataset>/<model>/seed-<s>/`` and resumes from the last completed
epoch when re-run after a kill; :mod:`robustbench_wave.training.summary` writes the summary (CSV + terminal
table: clean test accuracy, parameters, tokens, token width, FLOPs and throughput). Under
``torchrun --nproc_per_node N`` the ranks either train each model together with DDP (``--parallel data``)
or share out the (model, seed) runs (``--parallel runs``); see :mod:`robustbench_wave.training.parallel`.

Every input is checked before the first write (:func:`check_inputs`): counts, model specs, the data set,
the device, ``--results-dir`` and that every run folder lies inside it, so a refused command ends with one line and
leaves nothing behind. Old spellings (``--out``, ``--seed``, ``--test-subset``, ``--fresh``) still work and warn.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

from robustbench_wave.core.cli import (
    ALL,
    ListAction,
    Parser,
    add_verbosity,
    count_or_all,
    non_negative_int,
    open_fraction,
    positive_float,
    positive_int,
    setup_logging,
)
from robustbench_wave.core.distributed import (
    DEVICE_CHOICES,
    DistContext,
    all_gather_object,
    barrier,
    distributed_run,
    resolve_device,
)
from robustbench_wave.core.runfolder import check_inside, check_writable_root
from robustbench_wave.data import DatasetInfo, dataset_info, describe_datasets, load_split
from robustbench_wave.models.vit import check_buildable
from robustbench_wave.models.zoo import list_zoo, load_spec, spec_path
from robustbench_wave.training.checkpoint import run_dir
from robustbench_wave.training.engine import Recipe
from robustbench_wave.training.parallel import Parallelism, assign_runs, check_bf16
from robustbench_wave.training.runner import (
    TrainConfig,
    TrainingData,
    check_splits,
    init_source,
    load_training_data,
    train_model,
)
from robustbench_wave.training.summary import format_summary, write_summary

#: How long a rank waits for the others at a barrier: with ``--parallel runs`` a rank that finished its
#: runs waits for the longest run of another rank, which can take hours.
TRAIN_TIMEOUT_S = 7 * 24 * 3600


def non_negative_float(text: str) -> float:
    """A weight decay: a finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0.0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number >= 0")
    return value


def get_args_parser() -> argparse.ArgumentParser:
    defaults = Recipe()
    p = Parser(
        prog="python -m robustbench_wave.train",
        description="Train zoo ViTs (patch, wavelet, Token Pooling) on one shared recipe; write checkpoints "
        "(safetensors), per-epoch metrics and a summary table. Re-running a killed command resumes it. "
        "Under `torchrun --nproc_per_node N -m robustbench_wave.train ...` the ranks share the work "
        "(see --parallel); without torchrun it is one process.",
    )
    p.add_argument(
        "--model",
        action=ListAction,
        metavar="NAME",
        help="zoo model (models/NAME.toml) or a TOML path; repeat the flag for several (or NAME,NAME); "
        f"default: the whole zoo ({', '.join(list_zoo())})",
    )
    p.add_argument(
        "--dataset",
        default=TrainConfig.dataset,
        help=f"data set spec: {describe_datasets()}",
    )
    p.add_argument(
        "--data-dir",
        default=None,
        help="cache/download folder for data sets (default $RBW_DATA_DIR or ~/.cache/robustbench_wave/data)",
    )
    p.add_argument(
        "--epochs", type=positive_int, default=defaults.epochs, help="training epochs (same for every model)"
    )
    p.add_argument(
        "--batch-size",
        type=positive_int,
        default=defaults.batch_size,
        help="global training batch size (under torchrun with --parallel data, each of N ranks takes batch/N)",
    )
    p.add_argument(
        "--lr", type=positive_float, default=defaults.lr, help="peak AdamW learning rate (cosine schedule)"
    )
    p.add_argument(
        "--weight-decay",
        type=non_negative_float,
        default=defaults.weight_decay,
        help="AdamW weight decay (>= 0)",
    )
    p.add_argument(
        "--augmentation",
        action="store_true",
        help="random crop (4 px padding) + horizontal flip for colour images; off by default because "
        "it slows the few-epoch CPU schedules down (see README)",
    )
    seeds = p.add_argument(
        "--train-seed",
        action=ListAction,
        item=non_negative_int,
        default=[0],
        metavar="S",
        help="training seed; repeat the flag (or S,S) for several runs per model (mean ± spread later)",
    )
    p.add_alias("--seed", seeds, nargs="+")
    p.add_argument(
        "--train-subset",
        type=count_or_all,
        default=None,
        metavar="N",
        help=f"train on a random N-image subset of the training split (smoke runs; N >= 1), or '{ALL}': "
        "the whole split (default)",
    )
    p.add_alias(
        "--test-subset",
        p.add_argument(
            "--n-examples",
            type=count_or_all,
            default=None,
            metavar="N",
            help=f"test the trained model on the first N test images only (smoke runs; N >= 1), or '{ALL}': "
            "the whole split (default)",
        ),
    )
    p.add_argument(
        "--val-fraction",
        type=open_fraction,
        default=defaults.val_fraction,
        help="share of the training split held out for validation (seeded split; strictly between 0 and 1)",
    )
    p.add_alias(
        "--out",
        p.add_argument(
            "--results-dir",
            default=str(TrainConfig.out),
            help="results root, the attack command's --results-dir: runs go to "
            "RESULTS_DIR/train/<dataset>/<model>/seed-S (training writes nothing outside it; data set downloads "
            "go to --data-dir)",
        ),
    )
    p.add_argument(
        "--device",
        default="auto",
        help=f"{DEVICE_CHOICES}; auto: CUDA when present (each torchrun rank its local GPU), else the CPU",
    )
    p.add_argument(
        "--bf16",
        action="store_true",
        help="bf16 autocast for the training forward pass on CUDA (refused on CPU); evaluation stays "
        "float32. Part of the run's configuration",
    )
    p.add_argument(
        "--parallel",
        choices=[m.value for m in Parallelism],
        default=Parallelism.DATA.value,
        help="under torchrun --nproc_per_node N: 'data' trains one model at a time with DDP (the same "
        "recipe and global --batch-size, each rank taking batch/N of every batch; matches one process up "
        "to floating-point reduction order), 'runs' gives each rank whole (model, seed) runs, each "
        "trained as one process. Without torchrun both are one process",
    )
    p.add_alias(
        "--fresh",
        p.add_argument(
            "--overwrite",
            action="store_true",
            help="discard an existing run (the files training writes, nothing else) instead of resuming or "
            "reusing it",
        ),
    )
    p.add_argument(
        "--tensorboard",
        default=None,
        metavar="DIR",
        help="also log each run's per-epoch metrics (loss, accuracy, learning rate, throughput), test "
        "accuracy and hyper-parameters to TensorBoard in DIR/train/<dataset>/<model>/seed-S, rebuilt from "
        "the run's files (a resumed run shows each epoch once); needs pip install "
        "'robustbench_wave[tracking]'. Off by default",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bars (e.g. in CI logs)")
    add_verbosity(p)
    return p


def config_from_args(args: argparse.Namespace) -> TrainConfig:
    """The library configuration of a parsed command line."""
    recipe = Recipe(
        epochs=args.epochs,
        batch_size=args.batch_size,
        lr=args.lr,
        weight_decay=args.weight_decay,
        augmentation=args.augmentation,
        val_fraction=args.val_fraction,
    )
    return TrainConfig(
        out=Path(args.results_dir),
        recipe=recipe,
        dataset=args.dataset,
        data_dir=args.data_dir,
        train_subset=args.train_subset,
        test_subset=args.n_examples,
        fresh=args.overwrite,
        progress=not args.no_progress,
        bf16=args.bf16,
        tensorboard=None if args.tensorboard is None else Path(args.tensorboard),
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point; bad input (unknown model or data set, corrupt checkpoint ...) ends with one clear line."""
    try:
        return run(argv)
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None


def run(argv: list[str] | None = None) -> int:
    """Train every model for every seed (on this process or over torchrun's ranks), then write the
    summary (rank 0)."""
    args = get_args_parser().parse_args(argv)
    setup_logging(args, "%(asctime)s %(levelname)s %(name)s: %(message)s")
    names, seeds, config, info = check_inputs(args)
    with distributed_run(args.device, timeout_s=TRAIN_TIMEOUT_S) as ctx:
        if not ctx.is_main:
            for logger in (logging.getLogger(), logging.getLogger("robustbench_wave")):
                logger.setLevel(logging.WARNING)  # one log, from rank 0
        _fetch_data_once(config, ctx)
        loaded = {seeds[0]: _data_of(config, seeds[0])}
        check_splits(loaded[seeds[0]], config.recipe)  # on every rank before any run (no seed changes sizes)
        jobs = [(seed, name) for seed in seeds for name in names]
        if Parallelism(args.parallel) is Parallelism.RUNS:
            rows = _train_runs_per_rank(jobs, config, ctx, loaded)
        else:
            rows = _train_together(jobs, config, ctx, loaded)
        if ctx.is_main:
            path, table = write_summary(config.out, info, rows)
            shown = table[table["model"].isin([r["model"] for r in rows])]
            sys.stdout.write(f"\nTraining summary ({info.name}; {path}):\n{format_summary(shown)}\n")
    return 0


def check_inputs(args: argparse.Namespace) -> tuple[list[str], list[int], TrainConfig, DatasetInfo]:
    """Everything that can be refused, refused before the first write (ValueError): ``--results-dir``, the recipe,
    every model spec, the data set, the device and ``--bf16``, and every run folder inside ``--results-dir``.
    Returns the models and seeds (each once), the configuration and the data set's description."""
    out = check_writable_root(args.results_dir, "--results-dir")
    if args.tensorboard is not None:
        check_writable_root(args.tensorboard, "--tensorboard")
    config = config_from_args(args)  # refuses --tensorboard without the tensorboard package
    names = list(dict.fromkeys(args.model or list_zoo()))
    seeds = list(dict.fromkeys(args.train_seed))
    specs = [load_spec(name) for name in names]
    info = dataset_info(config.dataset, root=config.data_dir)
    for name, spec in zip(names, specs, strict=True):
        check_buildable(spec, info, str(spec_path(name)))
        for seed in seeds:
            check_inside(out, run_dir(out, info.slug, spec["name"], seed))
            init_source(spec, info, out, seed)  # a fine-tuning base must be trained already
    check_bf16(resolve_device(args.device), config.bf16)
    return names, seeds, config, info


def _fetch_data_once(config: TrainConfig, ctx: DistContext) -> None:
    """Rank 0 loads (and, if needed, downloads) the data set before the other ranks read the cache."""
    if ctx.distributed and ctx.is_main:
        for split in ("train", "test"):
            load_split(config.dataset, split, root=config.data_dir)
    barrier(ctx)


def _data_of(config: TrainConfig, seed: int) -> TrainingData:
    return load_training_data(
        config.dataset,
        seed,
        val_fraction=config.recipe.val_fraction,
        train_subset=config.train_subset,
        test_subset=config.test_subset,
        data_dir=config.data_dir,
    )


def _train_together(
    jobs: list[tuple[int, str]], config: TrainConfig, ctx: DistContext, loaded: dict[int, TrainingData]
) -> list[dict[str, Any]]:
    """``--parallel data``: every rank takes part in every run (DDP when there are several); ``loaded``
    holds the splits of one seed already in memory."""
    rows = []
    for seed, name in jobs:
        if seed not in loaded:
            loaded = {seed: _data_of(config, seed)}  # one seed's splits in memory at a time
        rows.append(train_model(name, loaded[seed], config, seed, ctx))
    return rows


def _train_runs_per_rank(
    jobs: list[tuple[int, str]], config: TrainConfig, ctx: DistContext, loaded: dict[int, TrainingData]
) -> list[dict[str, Any]]:
    """``--parallel runs``: run i is trained by rank i mod N alone; every rank gets all rows, in run order.
    A run refused on one rank (e.g. its folder is locked) ends every rank once all have finished theirs."""
    alone = DistContext(device=ctx.device)  # this rank's device, no process group
    mine, refusal = [], None
    try:
        mine = _train_together(assign_runs(jobs, ctx), config, alone, loaded)
    except ValueError as err:
        refusal = str(err)
    parts = all_gather_object(ctx, (mine, refusal))
    refusals = [part[1] for part in parts if part[1] is not None]
    if refusals:
        raise ValueError(refusals[0])
    return [parts[i % ctx.world_size][0][i // ctx.world_size] for i in range(len(jobs))]


if __name__ == "__main__":
    sys.exit(main())
