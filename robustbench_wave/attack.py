"""Command line: attack trained zoo models with a suite and write records + comparison tables.

This module owns the ``python -m robustbench_wave.attack`` command: it parses the flags, loads the trained
models and the test images, chooses the run folder and hands the work to
:func:`robustbench_wave.evaluation.evaluate`; the attacks, records and reports live in the library.

    python -m robustbench_wave.attack --model patch --model wavelet --dataset fashion-mnist --n-examples 1000

loads ``results/train/<dataset>/<model>/seed-<train-seed>/`` for every ``--model``, attacks the first
``--n-examples`` test images under every gradient mode (models with a fixed front-end) and writes
``<out>/attack/<dataset-slug>/<run-name>/`` with records.csv.gz, meta.json, summary.csv, table.csv,
table.tex and table.txt. Finished (model, attack, grad mode) chunks are saved in ``chunks/`` as they complete,
so re-running a killed command with the same arguments resumes where it stopped. With ``--save-adversarial`` the
run also keeps the audited adversarial examples behind its worst case in ``adversarial/<model>.safetensors``
(:mod:`robustbench_wave.evaluation.adversarial`; ``python -m robustbench_wave.report --reaudit RUN`` checks them).

Besides zoo models, ``--model`` takes any model from outside the zoo with local safetensors weights
(:mod:`robustbench_wave.models.external`): ``timm:NAME`` or ``MODULE:FACTORY`` / ``path/to/file.py:FACTORY``,
each followed by its ``--weights FILE.safetensors``; they are attacked by the same suites and diagnosed the
same way, named ``timm-NAME`` / ``ext-FACTORY-<hash>`` in records and folder names.

Every input is checked before anything is written, the run folder included: flags, suite (budgets against the
image size), data set, models (trained on that data set), and the run folder's name (safe, inside ``--out``).
The command holds the run folder's lock while it writes there (a ``--shard`` job: its shard's folder), so a
second run into it stops with one line. ``config.json`` records the settings with the checkpoint and spec
hashes; a folder holding another configuration is refused unless ``--overwrite``, which first deletes what the
old configuration wrote (records, tables, report, chunks) and nothing else.

The examples (never the attacks) can be split over processes, with records identical to one process's:

    torchrun --nproc_per_node 4 -m robustbench_wave.attack ...   # ranks; rank 0 merges and reports
    python -m robustbench_wave.attack ... --shard 2/4            # one shard as its own job (Slurm array)
    python -m robustbench_wave.report merge RUN                  # joins the --shard jobs' folders

Each shard caches its chunks in ``RUN/shards/<i>-of-<n>/chunks/`` and so resumes by itself
(:mod:`robustbench_wave.evaluation.sharding` owns the split and the merge).
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch import nn

from robustbench_wave import runfolder
from robustbench_wave.attacks import BACKENDS, Suite, list_suites, load_suite
from robustbench_wave.cli import Parser, command_line, non_negative_int, positive_int
from robustbench_wave.data import DatasetInfo, describe_datasets, load_split, to_float
from robustbench_wave.distributed import (
    DEVICE_CHOICES,
    DistContext,
    all_gather_object,
    barrier,
    broadcast_object,
    init_distributed,
    resolve_device,
    shutdown,
)
from robustbench_wave.evaluation import ALL_MODES, EvalSettings, EvaluationResult, evaluate
from robustbench_wave.evaluation import records as rec
from robustbench_wave.evaluation.adversarial import ADVERSARIAL_DIR
from robustbench_wave.evaluation.chunks import tensor_sha256
from robustbench_wave.evaluation.plan import CrossCheck, check_budgets
from robustbench_wave.evaluation.records import read_meta
from robustbench_wave.evaluation.sharding import SHARDS_DIR, Shard, merge_results, shard_dir
from robustbench_wave.io import atomic_write_json
from robustbench_wave.models.compiled import CompileMode, compile_mode_from_env, compile_model
from robustbench_wave.models.external import (
    PROBE_SIZE,
    TIMM_NAMES_HINT,
    ExternalSpec,
    build_external,
    is_external,
    parse_normalize,
)
from robustbench_wave.reporting import tables
from robustbench_wave.reporting.finalize import finalize_run
from robustbench_wave.reporting.runs import FIGURES_DIR, REPORT_OUTPUT_FILES, VERDICT_JSON
from robustbench_wave.tracking import attack_log_dir, check_tensorboard, log_attack_tables, preformatted
from robustbench_wave.training import checkpoint

#: A trained model and the metadata of its training run (checkpoint hash, run folder, clean accuracy).
Loaded = tuple[nn.Module, dict[str, Any]]

#: ``--surrogate`` value that skips the transfer attack.
NO_SURROGATE = "none"

#: What this module writes into a run folder (records, tables and report are written by the library).
CONFIG_JSON = "config.json"
CHUNKS_DIR = "chunks"

#: Everything in a run folder (or a ``--shard`` job's folder) that its configuration made: removed, and only
#: this, before another configuration's ``config.json`` is written (:func:`prepare_run_dir`).
RUN_FILES = (
    CONFIG_JSON, rec.RECORDS_FILE, rec.META_FILE, rec.CROSSCHECK_FILE, *tables.TABLE_FILES.values(),
    *REPORT_OUTPUT_FILES,
)  # fmt: skip
RUN_FOLDERS = (FIGURES_DIR, CHUNKS_DIR, SHARDS_DIR, ADVERSARIAL_DIR)

#: What to do when another run holds the folder.
LOCK_HINT = "wait for it to finish, or pass --run-name NAME for another folder"

#: How long ranks wait for each other in a collective (a rank's shard may take hours longer than another's;
#: torchrun stops every rank as soon as one fails, so a long wait never hides a crash).
COLLECTIVE_TIMEOUT_S = 7 * 24 * 3600

#: Columns of the cross-check table printed on the terminal.
CROSSCHECK_COLUMNS = [
    "model", "grad_mode", "attack", "eps", "primary_backend", "backend", "n_points", "difference",
    "n_only_backend", "n_only_primary",
]  # fmt: skip

log = logging.getLogger("robustbench_wave.attack")


def echo(msg: str = "") -> None:
    """Terminal output of the command (results, not log messages)."""
    sys.stdout.write(msg + "\n")
    sys.stdout.flush()


class _WeightsOf(argparse.Action):
    """``--weights FILE`` belongs to the external ``--model`` given just before it: {reference: FILE}."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, _: Any = None
    ) -> None:
        models = getattr(namespace, "model", None) or []
        if not models or not is_external(models[-1]):
            parser.error(f"--weights {values} must follow the timm: or FACTORY --model it belongs to")
        owned = dict(getattr(namespace, self.dest) or {})
        if owned.get(models[-1], values) != values:
            parser.error(f"--model {models[-1]} has two --weights; attack each file in its own run")
        setattr(namespace, self.dest, owned | {models[-1]: values})


def _normalize_arg(text: str) -> str:
    try:
        return parse_normalize(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix(f"--normalize {text!r}: ")) from None


def get_args_parser() -> Parser:
    p = Parser(
        prog="python -m robustbench_wave.attack",
        description="Attack trained zoo models with an attack suite; write per-example records and tables.",
    )
    p.add_argument(
        "--model",
        action="append",
        required=True,
        metavar="NAME",
        help="model to attack; repeat for several models. A zoo NAME loads its trained checkpoint; "
        "timm:ARCH builds any timm architecture (pretrained=False, the data set's classes and channels; "
        f"{TIMM_NAMES_HINT}); MODULE:FACTORY or path/to/file.py:FACTORY calls your function, which returns an "
        "nn.Module taking [0,1] images (N,C,H,W) to logits (N,classes). Records and the run folder name "
        "these timm-ARCH and ext-FACTORY-<8 hex of the reference>. They are attacked with exact gradients "
        "only, unless a sub-module subclasses models.frontend.FixedFrontEnd (then every --grad-modes)",
    )
    p.add_argument(
        "--weights",
        action=_WeightsOf,
        default=None,
        metavar="FILE",
        help="safetensors weights of the timm: or FACTORY --model just before it, loaded strictly (every "
        "tensor, exact shapes; never pickle); their sha256 joins config.json, so changed weights are a new "
        "configuration. Needed unless the model has no parameters or buffers",
    )
    p.add_argument(
        "--num-classes",
        type=positive_int,
        default=None,
        help="external models: passed as num_classes to the factory / timm (default for timm: the data "
        "set's; a factory gets it only when given); must equal the data set's classes",
    )
    p.add_argument(
        "--img-size",
        type=positive_int,
        default=None,
        help="external models: passed as img_size to the factory / timm architectures that take it (default "
        "for timm: the data set's image size); the model must still take the data set's images",
    )
    p.add_argument(
        "--normalize",
        type=_normalize_arg,
        default=None,
        metavar="MEAN,STD",
        help="external models: input standardisation put in front of the model, so attacks still see [0,1] "
        "images: 'cfg' = timm's pretrained_cfg mean/std (the default for timm:), 'data' = the data set's "
        "training statistics, 'none' (the default for a factory), or MEAN,STD (per channel joined by '/', "
        "e.g. 0.485/0.456/0.406,0.229/0.224/0.225)",
    )
    p.add_argument(
        "--suite",
        default="default",
        help=f"attack suite: a name in attacks/ ({', '.join(list_suites())}) or a TOML path",
    )
    p.add_argument(
        "--attacks",
        default=None,
        metavar="A,B",
        help="run only these suite entries (comma separated; clean is always kept)",
    )
    p.add_argument(
        "--dataset",
        default="fashion-mnist",
        help=f"data set spec the models were trained on: {describe_datasets()}",
    )
    p.add_argument("--n-examples", type=positive_int, default=1000, help="attack the first N test images")
    p.add_argument(
        "--batch-size",
        type=positive_int,
        default=128,
        help="examples per forward/backward pass (memory only: results do not depend on it)",
    )
    p.add_argument(
        "--seed",
        type=non_negative_int,
        default=0,
        help="attack seed (random starts, noise, library attack blocks)",
    )
    p.add_argument(
        "--train-seed", type=non_negative_int, default=0, help="which training run (seed-<s>) to load"
    )
    p.add_argument(
        "--backend",
        default="auto",
        choices=["auto", *BACKENDS],
        help="implementation for attacks that several backends provide; auto = builtin PGD, "
        "torchattacks FGSM/APGD/Square. The backend of every record is saved with it",
    )
    p.add_argument(
        "--cross-check",
        nargs="?",
        const=CrossCheck.ALL.value,
        default=CrossCheck.HEADLINE.value,
        choices=[c.value for c in CrossCheck],
        help="where every other back-end of each gradient attack also runs, on the points the primary one "
        "attacked: 'headline' (default) = each threat's reference budget (the middle of its grid), 'all' "
        "(also the bare flag) = every budget, 'off'. Their breaks count in the worst case (records "
        "'attack@backend'); crosscheck.csv says what each back-end found",
    )
    p.add_argument(
        "--grad-modes",
        default=",".join(ALL_MODES),
        help="gradient rules through fixed front-ends (exact, blocked, bpda); models without a fixed "
        "front-end always run exact only",
    )
    p.add_argument(
        "--surrogate",
        default="patch",
        help="model whose exact gradients craft the transfer attack: a zoo NAME or an external reference "
        "like --model ('none' skips transfer)",
    )
    p.add_argument(
        "--surrogate-weights",
        default=None,
        metavar="FILE",
        help="safetensors weights of an external --surrogate that is not also a --model (one that is uses "
        "its --weights)",
    )
    p.add_argument(
        "--save-adversarial",
        action="store_true",
        help="also save the audited adversarial examples that break points: per model, gradient mode, threat "
        "and eps the point that first made each example non-robust there (RUN/adversarial/<model>"
        ".safetensors; check them with python -m robustbench_wave.report --reaudit RUN). Records do not change",
    )
    p.add_argument(
        "--no-skip-broken",
        dest="skip_broken",
        action="store_false",
        help="run every attack on every clean-correct point instead of only on still-robust ones "
        "(slower; gives each attack's own robust accuracy)",
    )
    p.add_argument("--results-dir", default="results", type=Path, help="where trained runs live (train/...)")
    p.add_argument(
        "--out",
        default="results",
        type=Path,
        help="results root; the run goes to OUT/attack/<dataset>/<run-name>",
    )
    p.add_argument(
        "--run-name",
        default=None,
        help="run folder name, letters, digits and . _ + = - (default: models, suite, n and seeds)",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="reuse a run folder that holds a different configuration (its old records, tables, report and "
        "chunks are deleted first)",
    )
    p.add_argument(
        "--device",
        default="auto",
        help=f"{DEVICE_CHOICES}; auto = CUDA when present (each torchrun rank its local GPU), else CPU. "
        "Attacks run in float32",
    )
    p.add_argument(
        "--shard",
        default=None,
        metavar="I/N",
        help="evaluate only shard I of N (whole seeding blocks of examples) as its own job, e.g. a Slurm "
        "array task; writes RUN/shards/I-of-N/ (join with python -m robustbench_wave.report merge RUN). "
        "Under torchrun the ranks are the shards: do not pass it",
    )
    p.add_argument(
        "--threads",
        type=non_negative_int,
        default=0,
        help="CPU threads per process (0 = OMP_NUM_THREADS if set, else the local cores divided by the "
        "local ranks); on a busy shared machine 1 is often fastest",
    )
    p.add_argument(
        "--compile",
        choices=[m.value for m in CompileMode],
        default=compile_mode_from_env().value,
        help="run the models through torch.compile (default: $RBW_COMPILE, else off). Compiled kernels reorder "
        "float operations, so records differ from eager ones in the last bits and the mode is part of the run; "
        "on the 2-core CPU it did not pay (benchmarks/README.md)",
    )
    p.add_argument(
        "--no-diagnostics",
        dest="diagnostics",
        action="store_false",
        help="skip the gradient-masking checklist, energy measurement, figures, verdict and report.md",
    )
    p.add_argument(
        "--n-diagnostics",
        type=positive_int,
        default=32,
        help="examples per model on which the diagnostics run their extra attacks (steps/restarts sweeps, "
        "large eps, gradient health)",
    )
    p.add_argument(
        "--diagnostics-steps",
        type=positive_int,
        default=10,
        help="PGD steps of the diagnostics' extra attacks (x4 sweep)",
    )
    p.add_argument(
        "--tensorboard",
        default=None,
        type=Path,
        metavar="DIR",
        help="also log the run's tables to TensorBoard: the terminal table and summary.csv as text in "
        "DIR/attack/<dataset>/<run-name>, and robust accuracy per threat and attack (step = the eps's "
        "position in the grid, eps/<threat> its value) in one run per model/grad-mode below it; needs pip "
        "install 'robustbench_wave[tracking]'. A --shard job logs nothing (report merge writes the tables). "
        "Off by default",
    )
    p.add_argument("--no-progress", dest="progress", action="store_false", help="hide progress bars")
    p.add_argument("-v", "--verbose", action="store_true", help="log every chunk")
    return p


@dataclass(frozen=True)
class RunSettings:
    """The choices that make two invocations the same run.

    Batch size, device, threads and progress bars only change how fast a run goes, so they are not part
    of it; a run folder whose ``config.json`` holds other settings is refused unless overwritten.
    """

    models: list[str]
    dataset: str
    n_examples: int
    seed: int
    train_seed: int
    backend: str
    grad_modes: str
    surrogate: str
    skip_broken: bool
    cross_check: str  # a CrossCheck value
    compile: str = CompileMode.OFF.value
    save_adversarial: bool = False
    external: tuple[ExternalSpec, ...] = ()  # the models (and surrogate) from outside the zoo

    @property
    def has_surrogate(self) -> bool:
        return self.surrogate.lower() != NO_SURROGATE

    def external_spec(self, reference: str) -> ExternalSpec | None:
        return next((e for e in self.external if e.reference == reference), None)

    def key(self, reference: str) -> str:
        """The name records, tables and folders give a ``--model`` / ``--surrogate`` (a zoo name itself)."""
        spec = self.external_spec(reference)
        return spec.slug if spec is not None else reference

    def to_config(
        self, suite: Suite, hashes: dict[str, str], specs: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """The ``config.json`` of the run: these settings, the suite, the checkpoint and spec hashes."""
        optional = {"compile": self.compile} if self.compile != CompileMode.OFF.value else {}
        if self.save_adversarial:  # only when on: the config of a run without it is what it was
            optional["save_adversarial"] = True
        if self.external:  # likewise: reference, weights file, num_classes, img_size, normalisation
            optional["external"] = {e.reference: e.to_config() for e in self.external}
        return {
            "models": self.models,
            "suite": {k: v for k, v in suite.to_dict().items() if k not in ("description", "source")},
            "dataset": self.dataset,
            "n_examples": self.n_examples,
            "seed": self.seed,
            "train_seed": self.train_seed,
            "backend": self.backend,
            "grad_modes": self.grad_modes,
            "surrogate": self.surrogate,
            "skip_broken": self.skip_broken,
            "cross_check": self.cross_check,
            "checkpoints": hashes,
            "specs": specs or {},
        } | optional


def select_suite(suite: str, attacks: str | None) -> Suite:
    """Load a suite by name or path and keep only the comma-separated ``attacks`` (clean always stays)."""
    loaded = load_suite(suite)
    if attacks is None:
        return loaded
    names = [a.strip() for a in attacks.split(",") if a.strip()]
    if not names:
        raise ValueError(
            f"--attacks {attacks!r} names no attack; give comma-separated entries of suite {loaded.name!r}: "
            f"{[a.name for a in loaded.attacks]}"
        )
    return loaded.select(names)


def parse_grad_modes(text: str) -> list[str]:
    """The comma-separated gradient modes, each one of ``ALL_MODES``."""
    modes = [m.strip() for m in text.split(",") if m.strip()]
    if not modes:
        raise ValueError(f"--grad-modes {text!r} names no gradient mode; choose from {ALL_MODES}")
    bad = sorted(set(modes) - set(ALL_MODES))
    if bad:
        raise ValueError(f"unknown --grad-modes {bad}; choose from {ALL_MODES}")
    return modes


def load_test_images(dataset: str, n_examples: int) -> tuple[torch.Tensor, torch.Tensor, DatasetInfo]:
    """The first ``n_examples`` test images as floats in [0, 1], their labels and the data set info."""
    images_u8, labels, info = load_split(dataset, "test")
    n = min(n_examples, len(labels))
    if n < n_examples:
        log.warning("the test split has only %d images; attacking all of them", n)
    return to_float(images_u8[:n]), labels[:n], info


def load_models(
    names: list[str],
    dataset: str,
    results_dir: Path,
    train_seed: int,
    external: tuple[ExternalSpec, ...] = (),
    data: tuple[torch.Tensor, torch.Tensor, DatasetInfo] | None = None,
) -> dict[str, Loaded]:
    """Load every model once (a repeated name is loaded once), in order, under the name records give it:
    a zoo name's trained checkpoint, or the external model of that reference in ``external``."""
    specs = {e.reference: e for e in external}
    loaded = {}
    for name in dict.fromkeys(names):
        spec = specs.get(name)
        loaded[spec.slug if spec else name] = load_model(name, dataset, results_dir, train_seed, spec, data)
    return loaded


def load_model(
    name: str,
    dataset: str,
    results_dir: Path,
    train_seed: int,
    external: ExternalSpec | None = None,
    data: tuple[torch.Tensor, torch.Tensor, DatasetInfo] | None = None,
) -> Loaded:
    """One trained zoo model, or the ``external`` one checked on ``data``'s first images (loaded when not
    given); a missing or corrupt checkpoint, or a model that does not fit the data, ends the command with one
    clear line."""
    try:
        if external is None:
            return checkpoint.load_trained(name, dataset, results_dir, train_seed)
        images, _, info = data or load_test_images(dataset, PROBE_SIZE)
        return build_external(external, info, images)
    except ValueError as err:
        raise SystemExit(f"cannot load model {name!r}: {err}") from None


def model_hashes(
    models: dict[str, Loaded], surrogate_name: str, surrogate: Loaded | None, key: str = "checkpoint_sha256"
) -> dict[str, str]:
    """Every model's ``key`` from its training metadata (the checkpoint's sha256, or ``spec_sha256``), the
    surrogate's under ``surrogate:<name>``; "" where the metadata lacks it."""
    hashes = {k: v[1].get(key) or "" for k, v in models.items()}
    if surrogate is not None:
        hashes[f"surrogate:{surrogate_name}"] = surrogate[1].get(key) or ""
    return hashes


def default_run_name(models: list[str], suite_name: str, n: int, seed: int, train_seed: int) -> str:
    """Folder name of a run: its models, suite, number of examples and seeds."""
    return f"{'+'.join(models)}_{suite_name}_n{n}_seed{seed}_train{train_seed}"


def _describe(info: DatasetInfo) -> str:
    return f"{info.name} ({info.num_classes} classes, {info.in_chans}x{info.img_size}x{info.img_size})"


def check_dataset(name: str, train_meta: dict[str, Any], info: DatasetInfo) -> None:
    """A model is attacked only on the data set it was trained on: same name, classes, size and channels
    (two data sets with the same channel count would otherwise run and give meaningless numbers)."""
    trained_on = train_meta.get("dataset_info")
    if trained_on is None or all(
        getattr(trained_on, f, None) == getattr(info, f)
        for f in ("name", "num_classes", "img_size", "in_chans")
    ):
        return
    raise SystemExit(
        f"model {name!r} was trained on {_describe(trained_on)}, not on {_describe(info)}; attack it with "
        f"--dataset {trained_on.name}"
    )


def _read_config(config_path: Path) -> dict[str, Any] | None:
    """The folder's ``config.json``; {} when there is none, None when it cannot be read."""
    try:
        config = read_meta(config_path)
    except (ValueError, OSError):
        return None
    return config if isinstance(config, dict) else None


def prepare_run_dir(run_dir: Path, config: dict[str, Any], overwrite: bool) -> None:
    """Write ``config.json``; a folder holding another configuration is refused unless ``overwrite``.

    Called holding the folder's :class:`~robustbench_wave.runfolder.RunLock`. Results without a readable
    ``config.json`` count as another configuration. Replacing one first removes everything it made
    (:data:`RUN_FILES`, :data:`RUN_FOLDERS`) and nothing else, before the new ``config.json`` exists, so a run
    killed later never leaves old records or tables beside the new configuration. Raises ValueError if refused.
    """
    old = _read_config(run_dir / CONFIG_JSON)
    if old == config:
        return
    if old is None or old or _holds_results(run_dir):
        if not overwrite:
            what = "a run with a different configuration" if old else "results without a readable config.json"
            raise ValueError(
                f"{run_dir} holds {what}; pass --run-name NAME for a new folder or --overwrite to replace it"
            )
        runfolder.remove_owned(run_dir, RUN_FILES, RUN_FOLDERS)
    atomic_write_json(run_dir / CONFIG_JSON, config)


def _holds_results(folder: Path) -> bool:
    return any((folder / name).exists() for name in (*RUN_FILES, FIGURES_DIR))


def _summary_line(name: str, result: EvaluationResult) -> str:
    m = result.meta["models"][name]
    return (
        f"{name}: clean accuracy {m['clean_accuracy']:.4f}, {m['seconds_total']:.0f} s "
        f"(attacks took {m['seconds_attacks']:.0f} s when computed; {m['resumed_chunks']} chunks resumed)"
    )


def _configure_logging(verbose: bool, ctx: DistContext) -> None:
    prefix = f"[rank {ctx.rank}] " if ctx.distributed else ""
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format=f"{prefix}%(levelname)s %(name)s: %(message)s",
    )


def _settings(args: argparse.Namespace) -> RunSettings:
    return RunSettings(
        models=args.model,
        dataset=args.dataset,
        n_examples=args.n_examples,
        seed=args.seed,
        train_seed=args.train_seed,
        backend=args.backend,
        grad_modes=args.grad_modes,
        surrogate=args.surrogate,
        skip_broken=args.skip_broken,
        cross_check=args.cross_check,
        compile=args.compile,
        save_adversarial=args.save_adversarial,
        external=_external_specs(args),
    )


def _external_specs(args: argparse.Namespace) -> tuple[ExternalSpec, ...]:
    """The ``--model``s (and ``--surrogate``) from outside the zoo with their weights and shared flags;
    flags that only external models take are refused without one."""
    refs = [r for r in dict.fromkeys(args.model) if is_external(r)]
    surrogate_weights = None
    if is_external(args.surrogate) and args.surrogate not in refs:
        refs.append(args.surrogate)
        surrogate_weights = args.surrogate_weights
    elif args.surrogate_weights is not None:
        what = "is a --model: its --weights are used" if args.surrogate in refs else "is not external"
        raise SystemExit(f"--surrogate {args.surrogate} {what}; drop --surrogate-weights")
    flags = (
        ("--num-classes", args.num_classes),
        ("--img-size", args.img_size),
        ("--normalize", args.normalize),
    )
    given = [flag for flag, value in flags if value is not None]
    if given and not refs:
        raise SystemExit(f"{', '.join(given)} only apply to external models (timm:ARCH, MODULE:FACTORY)")
    weights = args.weights or {}
    try:
        specs = tuple(
            ExternalSpec(
                ref,
                _absolute(weights.get(ref, surrogate_weights if ref == args.surrogate else None)),
                args.num_classes,
                args.img_size,
                args.normalize,
            )
            for ref in refs
        )
    except ValueError as err:
        raise SystemExit(str(err)) from None
    slugs = [s.slug for s in specs] + [m for m in args.model if not is_external(m)]
    if len(set(slugs)) != len(slugs):
        raise SystemExit(f"--model: two models would share a name in records ({sorted(slugs)}); drop one")
    return specs


def _absolute(path: str | None) -> str | None:
    return None if path is None else os.path.abspath(path)


def _model_extra(settings: RunSettings, tmeta: dict[str, Any]) -> dict[str, Any]:
    """What meta.json records about a model beyond what evaluate measures: its training run and spec."""
    return {
        "checkpoint_sha256": tmeta.get("checkpoint_sha256"),
        "checkpoint_dir": tmeta.get("run_dir"),
        "train_seed": tmeta.get("train_seed", settings.train_seed),  # None: an external model
        "train_test_accuracy": tmeta.get("clean_accuracy"),
        "spec_sha256": tmeta.get("spec_sha256"),
        "model_spec": tmeta.get("model_spec"),
    } | ({"external": tmeta["external"]} if "external" in tmeta else {})


def _spec_ids(tmeta: dict[str, Any], surrogate: Loaded | None) -> dict[str, str]:
    """The spec hashes that join the chunk fingerprint (none known: the fingerprint is as before)."""
    ids = {
        "model": tmeta.get("spec_sha256"),
        "surrogate": surrogate[1].get("spec_sha256") if surrogate else None,
    }
    return {k: v for k, v in ids.items() if v}


def attack_models(
    settings: RunSettings,
    suite: Suite,
    data: tuple[torch.Tensor, torch.Tensor, DatasetInfo],
    modes: list[str],
    models: dict[str, Loaded],
    surrogate: Loaded | None,
    cache_dir: Path,
    *,
    device: torch.device,
    batch_size: int,
    progress: bool,
    example_ids: torch.Tensor | None = None,
) -> list[EvaluationResult]:
    """Run the suite on every model in turn; finished chunks are cached in ``cache_dir``.

    ``device``, ``batch_size`` and ``progress`` change only speed and memory, never the records;
    ``example_ids`` (default ``0..N-1``) are the ids of ``data``'s images in the whole run (a shard's slice).
    """
    images, labels, info = data
    results = []
    for name, (model, tmeta) in models.items():
        model.to(device)
        sur = surrogate[0].to(device) if surrogate is not None else None
        if sur is model:
            log.info("%s is its own surrogate: the transfer attack is a white-box attack here", name)
        settings_of_model = EvalSettings(
            model_name=name,
            dataset=info,
            grad_modes=tuple(modes),
            backend=settings.backend,
            seed=settings.seed,
            skip_broken=settings.skip_broken,
            cross_check=settings.cross_check,
        )
        result = evaluate(
            model,
            images,
            labels,
            suite,
            settings_of_model,
            surrogate=sur,
            surrogate_name=settings.key(settings.surrogate) if sur is not None else None,
            example_ids=example_ids,
            batch_size=batch_size,
            progress=progress,
            cache_dir=cache_dir,
            save_adversarial=settings.save_adversarial,
            specs=_spec_ids(tmeta, surrogate),
            extra_meta=_model_extra(settings, tmeta),
        )
        results.append(result)
        echo(_summary_line(name, result))
    return results


def _print_results(merged: EvaluationResult, run_dir: Path, paths: dict[str, Path]) -> None:
    echo()
    echo(paths["text"].read_text(encoding="utf-8"))  # the table rendered by reporting.tables
    xc = merged.crosscheck()
    if xc is not None and len(xc):  # empty when no point was attacked
        echo(
            "cross-check (robust accuracy of the other back-end minus the primary one on the same points; "
            "points only one of them broke; every break counts in the worst case):"
        )
        echo(xc[CROSSCHECK_COLUMNS].to_string(index=False))
    echo(f"\nwrote {run_dir}: " + ", ".join(sorted(p.name for p in paths.values())))


@dataclass(frozen=True)
class FinalizeOptions:
    """How the finished run is diagnosed (a ``--shard`` job stores them for ``report merge``)."""

    diagnostics: bool = True
    n_diagnostics: int = 32
    diagnostics_steps: int = 10
    batch_size: int = 128
    seed: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.diagnostics, bool):
            raise ValueError(f"finalize option diagnostics = {self.diagnostics!r} must be true or false")
        for field, minimum in (
            ("n_diagnostics", 1),
            ("diagnostics_steps", 1),
            ("batch_size", 1),
            ("seed", 0),
        ):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"finalize option {field} = {value!r} must be a whole number >= {minimum}")

    @classmethod
    def from_dict(cls, data: Any) -> FinalizeOptions:
        """The options a ``--shard`` job stored in its meta.json; ValueError names a bad or unknown field."""
        if not isinstance(data, dict):
            raise ValueError(f"finalize options must be a JSON object, not {data!r:.60}")
        unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"unknown finalize options {unknown}")
        return cls(**data)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> FinalizeOptions:
        return cls(args.diagnostics, args.n_diagnostics, args.diagnostics_steps, args.batch_size, args.seed)


def _diagnose(
    options: FinalizeOptions,
    run_dir: Path,
    models: dict[str, Loaded],
    data: tuple[torch.Tensor, torch.Tensor, DatasetInfo],
) -> None:
    """Gradient-masking checklist, figures, verdict and report.md of the finished run."""
    images, labels, info = data
    report = finalize_run(
        run_dir,
        {name: model for name, (model, _) in models.items()},
        images,
        labels,
        info,
        n_diagnostics=options.n_diagnostics,
        diagnostics_steps=options.diagnostics_steps,
        seed=options.seed,
        batch_size=options.batch_size,
    )
    verdict = read_meta(run_dir / VERDICT_JSON) or {}
    if verdict.get("text"):
        echo(f"\nverdict: {verdict['text']}")
    echo(f"report: {report}")


@dataclass(frozen=True)
class Job:
    """One invocation's inputs, resolved and validated (the same on every rank)."""

    args: argparse.Namespace
    settings: RunSettings
    suite: Suite
    modes: list[str]
    data: tuple[torch.Tensor, torch.Tensor, DatasetInfo]
    models: dict[str, Loaded]
    surrogate: Loaded | None
    config: dict[str, Any]
    run_dir: Path
    command: str  # the invocation, recorded with the run (cli.command_line)


def _check_flags(args: argparse.Namespace, settings: RunSettings) -> tuple[Suite, list[str]]:
    """The checks that need no data: --out, the model names, the suite and the gradient modes."""
    try:
        runfolder.check_writable_root(args.out)
        for name in settings.models:
            runfolder.check_safe_name(settings.key(name), _name_of("--model", name, settings))
        if settings.has_surrogate:
            key = settings.key(settings.surrogate)
            runfolder.check_safe_name(key, _name_of("--surrogate", settings.surrogate, settings))
        if args.run_name is not None:
            runfolder.check_safe_name(args.run_name, "--run-name")
        if args.tensorboard is not None:
            runfolder.check_writable_root(args.tensorboard, "--tensorboard")
            check_tensorboard()
        return select_suite(args.suite, args.attacks), parse_grad_modes(settings.grad_modes)
    except ValueError as err:
        raise SystemExit(str(err)) from None


def _name_of(flag: str, reference: str, settings: RunSettings) -> str:
    """What a name check calls a model: the flag, or the record name an external reference becomes."""
    return flag if settings.external_spec(reference) is None else f"the record name of {flag} {reference}:"


def _load_data(settings: RunSettings, suite: Suite) -> tuple[torch.Tensor, torch.Tensor, DatasetInfo]:
    """The test images, with the suite's budgets checked against their size."""
    try:
        data = load_test_images(settings.dataset, settings.n_examples)
    except ValueError as err:
        raise SystemExit(f"cannot load {settings.dataset!r} test data: {err}") from None
    try:
        check_budgets(suite, data[2], tuple(data[0].shape[1:]))
    except ValueError as err:
        raise SystemExit(str(err)) from None
    return data


def _load_all(
    settings: RunSettings, results_dir: Path, data: tuple[torch.Tensor, torch.Tensor, DatasetInfo]
) -> tuple[dict[str, Loaded], Loaded | None]:
    """The models and the surrogate, each checked to be trained on (external: to fit) ``data``'s data set."""
    info, external = data[2], settings.external
    models = load_models(settings.models, settings.dataset, results_dir, settings.train_seed, external, data)
    surrogate, sur_key = None, settings.key(settings.surrogate)
    if settings.has_surrogate:
        surrogate = models.get(sur_key) or load_model(
            settings.surrogate, settings.dataset, results_dir, settings.train_seed,
            settings.external_spec(settings.surrogate), data,
        )  # fmt: skip
        check_dataset(sur_key, surrogate[1], info)
    for name, (_, meta) in models.items():
        check_dataset(name, meta, info)
    models = {name: (compile_model(m, settings.compile), meta) for name, (m, meta) in models.items()}
    if surrogate is not None and sur_key in models:
        surrogate = models[sur_key]
    return models, surrogate


def _run_dir(args: argparse.Namespace, name: str, info: DatasetInfo) -> Path:
    """``OUT/attack/<data set slug>/<run name>``: every part a safe name, the whole inside ``--out``."""
    try:
        runfolder.check_safe_name(
            name, "--run-name" if args.run_name else "the run name (pass --run-name NAME)"
        )
        runfolder.check_safe_name(info.slug, "the data set's slug")
        run_dir = runfolder.check_inside(args.out, Path(args.out) / "attack" / info.slug / name)
        runfolder.check_folders(run_dir, RUN_FOLDERS)
        return run_dir
    except ValueError as err:
        raise SystemExit(str(err)) from None


def _prepare(args: argparse.Namespace, command: str) -> Job:
    """Validate every input and load the test images and the models; nothing is written here, and bad input
    ends with one clear line."""
    settings = _settings(args)
    suite, modes = _check_flags(args, settings)
    data = _load_data(settings, suite)
    models, surrogate = _load_all(settings, args.results_dir, data)
    config = settings.to_config(
        suite,
        model_hashes(models, settings.key(settings.surrogate), surrogate),
        model_hashes(models, settings.key(settings.surrogate), surrogate, "spec_sha256"),
    )
    name = args.run_name or default_run_name(
        list(models), suite.name, len(data[1]), settings.seed, settings.train_seed
    )
    run_dir = _run_dir(args, name, data[2])
    return Job(args, settings, suite, modes, data, models, surrogate, config, run_dir, command)


def _choose_shard(args: argparse.Namespace, ctx: DistContext) -> Shard:
    """torchrun's ranks are the shards; ``--shard i/n`` is one shard as its own job; else the whole run."""
    if ctx.distributed and args.shard:
        raise SystemExit(
            "--shard is for jobs started without torchrun; under torchrun the ranks are the shards"
        )
    if ctx.distributed:
        return Shard(ctx.rank, ctx.world_size)
    try:
        return Shard.parse(args.shard) if args.shard else Shard()
    except ValueError as err:
        raise SystemExit(str(err)) from None


def _check_shards(job: Job, shards: list[Shard]) -> None:
    """Every shard that will run owns at least one seeding block of examples (checked before any write)."""
    n, block = len(job.data[1]), job.suite.rng_block
    for shard in shards:
        if not shard.is_whole and not len(shard.positions(torch.arange(n), block)):
            raise SystemExit(
                f"shard {shard.index}/{shard.count} has no examples: {n} examples make {-(-n // block)} "
                f"seeding blocks of {block}; use n <= {-(-n // block)} shards"
            )


def _evaluate_shard(job: Job, shard: Shard, ctx: DistContext) -> EvaluationResult:
    """Attack this shard's examples (all of them for the whole run) with every model, chunks cached."""
    images, labels, info = job.data
    if shard.is_whole:
        data, ids, cache = job.data, None, job.run_dir / CHUNKS_DIR
    else:
        ids = shard.positions(torch.arange(len(labels)), job.suite.rng_block)
        data, cache = (images[ids], labels[ids], info), shard_dir(job.run_dir, shard) / CHUNKS_DIR
    results = attack_models(
        job.settings, job.suite, data, job.modes, job.models, job.surrogate, cache,
        device=ctx.device, batch_size=job.args.batch_size, progress=job.args.progress and ctx.is_main,
        example_ids=ids,
    )  # fmt: skip
    merged = EvaluationResult.merge(results)
    merged.meta["provenance"]["execution"] = {
        **ctx.provenance(),
        "rank": ctx.rank,
        "shard": None if shard.is_whole else f"{shard.index}/{shard.count}",
    }
    return merged


def run_data_sha256(data: tuple[torch.Tensor, torch.Tensor, DatasetInfo]) -> str:
    """The ``data_sha256`` one process records for the whole run (images, labels, ids ``0..N-1``)."""
    images, labels, _ = data
    return tensor_sha256(images.detach().float(), labels.long().view(-1), torch.arange(len(labels)))


def _write_run(job: Job, merged: EvaluationResult) -> None:
    """records.csv.gz, meta.json and the tables of the whole run, printed; the report comes after."""
    merged.meta["run"] = {"run_dir": str(job.run_dir), "command": job.command, "config": job.config}
    paths = merged.save(job.run_dir)
    paths |= tables.write_tables(merged.records, job.run_dir, meta=merged.meta)
    _print_results(merged, job.run_dir, paths)
    if job.args.tensorboard is not None:
        _track_tables(job.args.tensorboard, job.data[2].slug, job.run_dir, paths)


def _track_tables(root: Path, slug: str, run_dir: Path, paths: dict[str, Path]) -> None:
    """``--tensorboard``: a copy of the tables just written, read back from their files."""
    summary = pd.read_csv(paths["summary"])
    texts = {
        "robust_accuracy/table": preformatted(paths["text"].read_text(encoding="utf-8")),
        "robust_accuracy/summary": tables.markdown_table(summary),
    }
    log_attack_tables(attack_log_dir(root, slug, run_dir.name), summary, texts)


def _claim(folder: Path, job: Job, ctx: DistContext, stack: ExitStack) -> None:
    """Lock ``folder`` for the rest of the command and write its config.json (rank 0, which writes for
    every rank); a busy folder or another configuration stops every rank with rank 0's one line."""
    refusal = None
    if ctx.is_main:
        try:
            stack.enter_context(runfolder.RunLock(folder, hint=LOCK_HINT))
            prepare_run_dir(folder, job.config, job.args.overwrite)
        except ValueError as err:
            refusal = str(err)
    refusal = broadcast_object(ctx, refusal)
    if refusal is not None:
        raise SystemExit(refusal)


def _run_ranks(job: Job, shard: Shard, ctx: DistContext) -> None:
    """Every rank evaluates its shard (the whole run in one process); rank 0 merges and writes the run."""
    result = _evaluate_shard(job, shard, ctx)
    if not ctx.distributed:
        _write_run(job, result)
        return
    gathered = all_gather_object(ctx, (shard, result))
    if ctx.is_main:
        merged = merge_results(
            [r for _, r in gathered],
            [s for s, _ in gathered],
            range(len(job.data[1])),
            run_data_sha256(job.data),
        )
        _write_run(job, merged)
    barrier(ctx)


def _run_shard_job(job: Job, shard: Shard, ctx: DistContext) -> None:
    """One ``--shard i/n`` job: its records and meta in RUN/shards/i-of-n/, merged later by the report CLI."""
    folder = shard_dir(job.run_dir, shard)
    result = _evaluate_shard(job, shard, ctx)
    a = job.args
    result.meta["run"] = {"run_dir": str(job.run_dir), "command": job.command, "config": job.config}
    result.meta["shard"] = {
        **shard.to_dict(),
        "example_ids": shard.positions(torch.arange(len(job.data[1])), job.suite.rng_block).tolist(),
        "run_n_examples": len(job.data[1]),
        "run_data_sha256": run_data_sha256(job.data),
        "results_dir": str(a.results_dir),
        "finalize": dataclasses.asdict(FinalizeOptions.from_args(a)),
    }
    paths = result.save(folder)
    echo(f"wrote shard {shard.index}/{shard.count} of {job.run_dir}: {folder} ({', '.join(sorted(paths))})")
    echo(f"when every shard is done: python -m robustbench_wave.report merge {job.run_dir}")


def reload_models(config: dict[str, Any], results_dir: Path, why: str) -> dict[str, Loaded]:
    """A finished run's models (its ``config.json``), their checkpoints and specs checked to be the ones
    attacked; SystemExit naming the changed ones, ending with ``why``."""
    try:
        external = tuple(ExternalSpec.from_config(e) for e in (config.get("external") or {}).values())
    except ValueError as err:
        raise SystemExit(str(err)) from None
    models = load_models(config["models"], config["dataset"], results_dir, config["train_seed"], external)
    changed = [
        k
        for field, key in (("checkpoints", "checkpoint_sha256"), ("specs", "spec_sha256"))
        for k, v in model_hashes(models, "", None, key).items()
        if field in config and config[field].get(k) != v
    ]
    if changed:
        raise SystemExit(f"the checkpoints of {sorted(set(changed))} changed {why}")
    return models


def finalize_merged_run(
    run_dir: Path, config: dict[str, Any], results_dir: Path, options: FinalizeOptions, device: str = "auto"
) -> None:
    """What the attack command does after writing a run, for a run joined from ``--shard`` jobs: reload its
    models (their checkpoints and specs must still be the ones attacked) and test images, then
    :func:`finalize_run`."""
    models = reload_models(config, results_dir, "since the shards were attacked; cannot diagnose")
    data = load_test_images(config["dataset"], config["n_examples"])
    dev = resolve_device(device)
    for model, _ in models.values():
        model.to(dev)
    _diagnose(options, run_dir, models, data)


def _run(job: Job, shard: Shard, ctx: DistContext) -> None:
    """Hold the run's folder (a ``--shard`` job: its shard's folder) while this command writes there."""
    with ExitStack() as stack:
        if not ctx.distributed and not shard.is_whole:
            _claim(shard_dir(job.run_dir, shard), job, ctx, stack)
            _run_shard_job(job, shard, ctx)
            return
        _claim(job.run_dir, job, ctx, stack)
        _run_ranks(job, shard, ctx)
        if job.args.diagnostics and ctx.is_main:
            _diagnose(FinalizeOptions.from_args(job.args), job.run_dir, job.models, job.data)


def main(argv: list[str] | None = None) -> int:
    """Entry point; bad input (unknown suite, model or grad mode ...) ends with one clear line before anything
    is written.

    Started by torchrun, every rank evaluates its shard of the examples and rank 0 writes the run; the other
    ranks wait at a barrier and return 0.
    """
    raw_argv = sys.argv[1:] if argv is None else list(argv)
    args = get_args_parser().parse_args(raw_argv)
    try:
        ctx = init_distributed(args.device, timeout_s=COLLECTIVE_TIMEOUT_S)
    except ValueError as err:
        raise SystemExit(str(err)) from None
    try:
        _configure_logging(args.verbose, ctx)
        if args.threads > 0:
            torch.set_num_threads(args.threads)  # explicit user request for this process only
        shard = _choose_shard(args, ctx)
        job = _prepare(
            args, command_line("robustbench_wave.attack", raw_argv, ctx.world_size, ctx.local_world_size)
        )
        _check_shards(
            job, [Shard(i, shard.count) for i in range(shard.count)] if ctx.distributed else [shard]
        )
        _run(job, shard, ctx)
    finally:
        shutdown(ctx)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
