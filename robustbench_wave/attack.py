"""Command line: attack trained models with a suite and write per-example records, tables and a report.

    python -m robustbench_wave.attack --model patch --model wavelet --dataset fashion-mnist --n-examples 1000
    torchrun --nproc_per_node 4 -m robustbench_wave.attack ...   # ranks are shards; rank 0 reports
    python -m robustbench_wave.attack ... --shard 2/4            # one shard as its own job (report merge RUN)

This module parses and checks the flags (before anything is written), builds the run's
:class:`~robustbench_wave.attackrun.RunSettings` and :class:`~robustbench_wave.attackrun.RunOptions` (whose
fields give the flags their defaults, as they do ``robustbench_wave.benchmark``'s keywords) and
calls :mod:`robustbench_wave.attackrun`, which owns the run folder ``<out>/attack/<dataset-slug>/<run-name>/``
from its ``config.json`` to its report: models (zoo checkpoints, or ``timm:NAME`` / ``MODULE:FACTORY`` with
``--weights``), overwrite rules, resume from ``chunks/``, shards and finalize.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

import torch

from robustbench_wave import attackrun
from robustbench_wave.attackrun import RunOptions, RunSettings
from robustbench_wave.attacks import BACKENDS, DEFAULT_SUITE, Suite, list_suites
from robustbench_wave.core import runfolder
from robustbench_wave.core.cli import (
    BareMeans,
    ListAction,
    Parser,
    add_verbosity,
    command_line,
    field_default,
    non_negative_int,
    positive_int,
    setup_logging,
)
from robustbench_wave.core.distributed import DEVICE_CHOICES, DistContext, init_distributed, shutdown
from robustbench_wave.core.tracking import check_tensorboard
from robustbench_wave.data import describe_datasets
from robustbench_wave.evaluation.eot import EOT_ITER, EotMode
from robustbench_wave.evaluation.plan import CrossCheck
from robustbench_wave.models.compiled import CompileMode
from robustbench_wave.models.external import TIMM_NAMES_HINT

#: How long ranks wait for each other in a collective (a rank's shard may take hours longer than another's;
#: torchrun stops every rank as soon as one fails, so a long wait never hides a crash).
COLLECTIVE_TIMEOUT_S = 7 * 24 * 3600


def echo(msg: str = "") -> None:
    """Terminal output of the command (results, not log messages)."""
    sys.stdout.write(msg + "\n")
    sys.stdout.flush()


def get_args_parser() -> Parser:
    p = Parser(
        prog="python -m robustbench_wave.attack",
        description="Attack trained zoo models with an attack suite; write per-example records and tables.",
    )
    p.add_argument(
        "--config",
        type=Path,
        metavar="RUN/config.json",
        help="rerun a run from its folder's config.json: its models, data, suite and settings (the flags that "
        "choose them are refused beside it); the checkpoints must be those it names (sha256). --out, "
        "--results-dir, --run-name, --batch-size, --device and the checklist flags stay yours",
    )
    p.add_argument(
        "--model",
        action=ListAction,
        default=None,
        metavar="NAME",
        help="model to attack (required unless --config); repeat the flag for several models (or NAME,NAME). A zoo NAME loads its trained checkpoint; "
        "timm:ARCH builds any timm architecture (pretrained=False, the data set's classes and channels; "
        f"{TIMM_NAMES_HINT}); MODULE:FACTORY or path/to/file.py:FACTORY calls your function, which returns an "
        "nn.Module taking [0,1] images (N,C,H,W) to logits (N,classes). Records and the run folder name "
        "these timm-ARCH and ext-FACTORY-<8 hex of the reference>. They are attacked with exact gradients, "
        "and with bpda where rounding, thresholds or integer casts cut their input gradient (found "
        "automatically: models/autobpda.py); every --grad-modes when a sub-module subclasses "
        "models.frontend.FixedFrontEnd",
    )
    attackrun.add_external_flags(p)
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
        "--suite",
        default=DEFAULT_SUITE,
        help=f"attack suite: a name in attacks/ ({', '.join(list_suites())}) or a TOML path",
    )
    p.add_argument(
        "--attacks",
        action=ListAction,
        default=None,
        metavar="NAME",
        help="run only this suite entry; repeat the flag (or A,B) for several; clean is always kept",
    )
    p.add_argument(
        "--dataset",
        default=RunSettings.evaluation.dataset,
        help=f"data set spec the models were trained on: {describe_datasets()}",
    )
    p.add_argument(
        "--n-examples", type=positive_int, default=RunSettings.n_examples, help="attack the first N test images"
    )  # fmt: skip
    p.add_argument(
        "--batch-size",
        type=positive_int,
        default=RunOptions.batch_size,
        help="examples per forward/backward pass (memory only: results do not depend on it)",
    )
    p.add_argument(
        "--seed",
        type=non_negative_int,
        default=RunSettings.evaluation.seed,
        help="attack seed (random starts, noise, library attack blocks)",
    )
    p.add_argument(
        "--train-seed", type=non_negative_int, default=RunSettings.train_seed,
        help="which training run (seed-<s>) to load",
    )  # fmt: skip
    p.add_argument(
        "--backend",
        default=RunSettings.evaluation.backend,
        choices=["auto", *BACKENDS],
        help="implementation for attacks that several backends provide; auto = builtin PGD, "
        "torchattacks FGSM/APGD/Square. The backend of every record is saved with it",
    )
    p.add_argument(
        "--cross-check",
        action=BareMeans,
        nargs="?",
        bare=CrossCheck.ALL.value,
        default=RunSettings.evaluation.cross_check,
        choices=[c.value for c in CrossCheck],
        help="where every other back-end of each gradient attack also runs, on the points the primary one "
        "attacked: 'headline' (default) = each threat's reference budget (the suite's declared one, else the "
        "middle of its grid; with --eps the largest or --reference-eps), 'all' "
        "= every budget, 'off'. Their breaks count in the worst case (records "
        "'attack@backend'); crosscheck.csv says what each back-end found",
    )
    p.add_argument(
        "--eot",
        choices=[m.value for m in EotMode],
        default=RunSettings.evaluation.eot.mode,
        help="randomised models (two forwards of a batch differ, tested before the attacks): 'auto' (default) "
        f"attacks them with AutoAttack's 'rand' protocol: {EOT_ITER} EOT iterations in every gradient attack "
        "that has them (the others are skipped, said in the report), each prediction, clean included, the "
        "plurality vote of --eot-draws draws; 'on' does so for every model; 'off' gives every attack single-draw "
        "gradients, while a randomised model's predictions stay votes of --eot-draws draws (--eot-draws 1: single "
        "draws). A randomised model's draw k of example i is the same for every input classified (common random "
        "numbers)",
    )
    p.add_argument(
        "--eot-draws",
        type=positive_int,
        default=RunSettings.evaluation.eot.draws,
        metavar="K",
        help=f"draws per prediction of a randomised model, or of every model under --eot on (default "
        f"{RunSettings.evaluation.eot.draws}: odd, so two classes never tie)",
    )
    attackrun.add_request_flags(p)
    p.add_argument(
        "--surrogate",
        default=RunSettings.surrogate,
        help="model whose exact gradients craft the transfer attack: a zoo NAME or an external reference "
        f"like --model; 'none' skips transfer; '{attackrun.AUTO_SURROGATE}' (the default) = the --baseline, "
        f"else the zoo {attackrun.AUTO_SURROGATE_MODEL} of the same --train-seed when it is trained for the "
        "data set, else none (config.json records the choice, report.md says why)",
    )
    p.add_argument("--baseline", default=None, metavar="MODEL", help=attackrun.BASELINE_HELP)
    p.add_argument(
        "--escalation", choices=attackrun.ESCALATION_CHOICES, default=RunSettings.escalation,
        help=attackrun.ESCALATION_HELP,
    )  # fmt: skip
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
        ".safetensors; check them with python -m robustbench_wave.report reaudit RUN). Records do not change",
    )
    p.add_argument(
        "--no-skip-broken",
        dest="skip_broken",
        action="store_false",
        help="run every attack on every clean-correct point instead of only on still-robust ones "
        "(slower; gives each attack's own robust accuracy)",
    )
    p.add_argument(
        "--results-dir",
        default=RunOptions.results_dir,
        type=Path,
        help="results root, the train command's --results-dir: trained runs are read from RESULTS_DIR/train/ "
        "and the run goes to RESULTS_DIR/attack/<dataset>/<run-name>",
    )
    p.add_argument(
        "--out",
        default=None,
        type=Path,
        help="another root for the run (OUT/attack/<dataset>/<run-name>); default: --results-dir",
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
        default=field_default(RunSettings, "compile"),
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
        default=attackrun.FinalizeOptions.n_diagnostics,
        help="examples per model on which the diagnostics run their extra attacks (steps/restarts sweeps, "
        "large eps, gradient health)",
    )
    p.add_argument(
        "--diagnostics-steps",
        type=positive_int,
        default=attackrun.FinalizeOptions.diagnostics_steps,
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
    add_verbosity(p, quiet_help="warnings and errors only (the default; -v also logs every chunk)")
    return p


#: Flags that are :class:`~robustbench_wave.attackrun.RunSettings` fields of the same name.
def _from_config(args: argparse.Namespace) -> tuple[RunSettings, Suite, dict[str, Any]]:
    try:
        return attackrun.read_config_flag(args, get_args_parser().parse_args(["--config", str(args.config)]))
    except ValueError as err:
        raise SystemExit(str(err)) from None


def _settings(args: argparse.Namespace) -> RunSettings:
    try:
        return attackrun.settings_from_args(args)
    except ValueError as err:
        raise SystemExit(str(err)) from None


def _options(args: argparse.Namespace) -> RunOptions:
    finalize = attackrun.FinalizeOptions(args.diagnostics, args.n_diagnostics, args.diagnostics_steps)
    return RunOptions(
        args.results_dir, args.out, args.run_name, args.overwrite, args.batch_size, args.progress,
        args.tensorboard, finalize,
    )  # fmt: skip


def _suite(
    args: argparse.Namespace, settings: RunSettings, options: RunOptions, recorded: Suite | None = None
) -> Suite:
    """The checks that need no data (--out, the model names, --tensorboard, the gradient modes' models: whether
    each model offers its modes is checked once it is loaded, still before any write), and the suite at its
    budgets (``recorded``: a config.json's, already at them)."""
    try:
        attackrun.check_run(settings, options)
        if args.tensorboard is not None:
            runfolder.check_writable_root(args.tensorboard, "--tensorboard")
            check_tensorboard()
        if recorded is not None:
            return recorded
        suite = attackrun.select_suite(
            args.suite, None if args.attacks is None else ",".join(dict.fromkeys(args.attacks))
        )
        return attackrun.suite_at_budgets(suite, args.eps, args.reference_eps)
    except ValueError as err:
        raise SystemExit(str(err)) from None


def resolve(argv: list[str]) -> tuple[RunSettings, RunOptions, Suite]:
    """What an invocation means before any data is loaded: its settings (the gradient-mode request among
    them), options and suite (at its budgets); SystemExit on bad input."""
    args = get_args_parser().parse_args(argv)
    settings, suite, _ = _from_config(args) if args.config else (_settings(args), None, None)
    options = _options(args)
    return settings, options, _suite(args, settings, options, suite)


def _configure_logging(args: argparse.Namespace, ctx: DistContext) -> None:
    prefix = f"[rank {ctx.rank}] " if ctx.distributed else ""
    setup_logging(args, f"{prefix}%(levelname)s %(name)s: %(message)s", default=logging.WARNING)


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
        _configure_logging(args, ctx)
        if args.threads > 0:
            torch.set_num_threads(args.threads)  # explicit user request for this process only
        shard = attackrun.choose_shard(args.shard, ctx)
        settings, suite, recorded = _from_config(args) if args.config else (_settings(args), None, None)
        options = _options(args)
        suite = _suite(args, settings, options, suite)
        command = command_line("robustbench_wave.attack", raw_argv, ctx.world_size, ctx.local_world_size)
        job = attackrun.prepare_job(settings, options, suite, command, echo)
        if recorded is not None:
            attackrun.check_rerun(args.config, recorded, job.config)
        for line in attackrun.gradient_path_lines(job) if ctx.rank == 0 else ():
            echo(line)
        if not ctx.distributed:  # torchrun's ranks beyond the seeding blocks idle (attackrun.rank_shard)
            attackrun.check_shards(job, [shard])
        attackrun.run_job(job, shard, ctx)
    except attackrun.RunRefused as err:  # a model that cannot be loaded, a busy run folder ...
        raise SystemExit(str(err)) from None
    finally:
        shutdown(ctx)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
