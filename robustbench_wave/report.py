"""Command line: rebuild the tables and the Markdown report of attack runs from their saved files.

    python -m robustbench_wave.report run results/attack/fashion-mnist/RUN   # or without the word "run"
    python -m robustbench_wave.report run RUN_SEED0 RUN_SEED1 RUN_SEED2 --out results/headline
    python -m robustbench_wave.report merge results/attack/fashion-mnist/RUN   # after --shard I/N jobs
    python -m robustbench_wave.report reaudit RUN          # re-check attack --save-adversarial's examples
    python -m robustbench_wave.report export RUN [RUN ...] --out DIR   # RobustBench model_info + transfer matrix
    python -m robustbench_wave.report claims --run RUN --train DIR --out claims.md

This module owns the ``python -m robustbench_wave.report`` command, argparse subcommands each with its own
``--help`` (:data:`SUBCOMMANDS`); a first argument that names none is a run folder (``report RUN`` is
``report run RUN``), and the old ``--reaudit`` flag, anywhere, still selects ``reaudit`` with a warning.
Nothing is re-run. One run folder: its
tables (summary.csv, table.csv, table.tex, table_worst.tex, table.txt, crosscheck.csv after a cross-check)
are rebuilt from ``records.csv.gz`` and its ``report.md`` is rewritten. Several run folders (one per training
seed): one combined report (mean ± sd over the runs). Diagnostics and energy come from the files
``measure_run`` left in the run folders (the attack command runs it).

``merge RUN`` joins the ``RUN/shards/I-of-N/`` folders of ``python -m robustbench_wave.attack --shard I/N``
jobs into the run's records.csv.gz (identical to a one-process run's), meta.json, config.json and tables,
after checking that the shards ran the same configuration on disjoint examples that together make the run.
It then finalizes the run as the attack command would (diagnostics, energy, verdict, report.md), which
reloads the models: from the ``--results-dir`` the shards were given unless ``--results-dir`` says otherwise.
With ``--no-diagnostics`` (or when the shards were run with it, or when a model cannot be loaded) it writes
report.md from the records alone. Outputs of another configuration in RUN are removed (by name) first.

Before anything is written, every input is checked: the records must be readable, complete and those
``meta.json`` describes, of the configuration in the folder's config.json (:func:`load_run`), and ``--out``
a writable place. Both commands hold the lock of the folder they write into
(:class:`robustbench_wave.core.runfolder.RunLock`), so a run being attacked cannot be reported into. Bad input
ends with one line naming the file or flag, never a traceback.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from robustbench_wave.attackrun import ShardFinalize, finish_merged_run, reaudit_run, write_merged_run
from robustbench_wave.core.cli import (
    ListAction,
    Parser,
    add_verbosity,
    command_line,
    positive_int,
    setup_logging,
)
from robustbench_wave.core.runfolder import RESULTS_ROOT, RunLock, check_writable_root
from robustbench_wave.evaluation.sharding import merge_shard_folders
from robustbench_wave.reporting.markdown import table_marks, write_report
from robustbench_wave.reporting.runs import RunFolder, load_run, report_path
from robustbench_wave.reporting.tables import write_tables

#: The subcommand that reports run folders (the default: ``report RUN`` = ``report run RUN``).
RUN = "run"
#: The subcommand that joins the shards of ``attack --shard`` jobs.
MERGE = "merge"
#: The subcommand that writes claims.md from saved results.
CLAIMS = "claims"
#: The subcommand that re-audits saved adversarial examples; ``--reaudit`` is its old spelling.
REAUDIT = "reaudit"
OLD_REAUDIT = "--reaudit"
#: The subcommand that writes the leaderboard export (RobustBench model_info JSON, transfer matrix).
EXPORT = "export"
log = logging.getLogger("robustbench_wave.report")
BUSY_HINT = "wait for it to finish, then run this command again"


PROG = "python -m robustbench_wave.report"
RUN_DESCRIPTION = (
    "Rebuild the tables and report.md of one attack run folder, or write one report over several run folders "
    "(training seeds, combined into mean ± sd). No attack is re-run."
)


def _run_arguments(p: Parser) -> None:
    p.add_argument(
        "run_dirs",
        nargs="+",
        type=Path,
        metavar="RUN",
        help="attack run folder(s) holding records.csv.gz and meta.json; several = one per training seed",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="PATH",
        help="the report file (a path ending in .md) or a folder for report.md; the tables (one run), "
        "verdict.json and figures/ go into the same folder (default: RUN/report.md for one run, report.md "
        "next to the first RUN for several)",
    )
    p.add_argument(
        "--baseline",
        default=None,
        metavar="MODEL",
        help="model the verdict compares against (default: the models without gradient modes), and the "
        "denominator of the corruption errors (mCE) of a corruptions run (default: patch, else the first model)",
    )
    p.add_argument("--no-figures", dest="figures", action="store_false", help="skip the PNG figures")
    add_verbosity(p, quiet_help="print only the paths written (no table, no progress log)")


MERGE_DESCRIPTION = (
    "Join the RUN/shards/I-of-N/ folders of attack --shard I/N jobs into one run folder (records identical to "
    "a one-process run), then write its tables and report."
)


def _merge_arguments(p: Parser) -> None:
    p.add_argument("run_dir", type=Path, metavar="RUN", help="the run folder the --shard jobs wrote into")
    p.add_argument(
        "--no-diagnostics",
        dest="diagnostics",
        action="store_false",
        help="skip the gradient-masking checklist and energy measurement (they reload the models); "
        "report.md is written from the records",
    )
    p.add_argument(
        "--results-dir",
        type=Path,
        default=None,
        help="where the trained runs live (default: the --results-dir the shards were given)",
    )
    p.add_argument("--device", default="auto", help="device of the diagnostics (auto | cpu | cuda | cuda:N)")
    p.add_argument("--no-figures", dest="figures", action="store_false", help="skip the PNG figures")
    add_verbosity(p, quiet_help="print only the paths written")


def _setup_logging(quiet: bool) -> None:
    logging.basicConfig(
        level=logging.WARNING if quiet else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )


def _echo(msg: str) -> None:
    sys.stdout.write(msg + "\n")
    sys.stdout.flush()


def merge_main(args: Any, argv: list[str]) -> int:
    """``report merge RUN``: check the shards, then (holding the run folder's lock) write and finalize the run
    (:mod:`robustbench_wave.attackrun.merge`)."""
    setup_logging(args, "%(levelname)s %(name)s: %(message)s")
    try:
        merged, folders = merge_shard_folders(args.run_dir)
        job, config = folders[0].job, folders[0].config
        stored = ShardFinalize.from_dict(job.finalize)
        with RunLock(args.run_dir, hint=BUSY_HINT):
            command = command_line("robustbench_wave.report", [MERGE, *argv])
            paths = write_merged_run(args.run_dir, merged, config, command)
            sys.stdout.write(
                f"merged {len(folders)} shards into {args.run_dir}: {', '.join(sorted(paths))}\n"
            )
            finish_merged_run(
                args.run_dir, config, stored, diagnostics=args.diagnostics,
                results_dir=args.results_dir or Path(job.results_dir), device=args.device,
                figures=args.figures, echo=_echo,
            )  # fmt: skip
    except ValueError as err:
        raise SystemExit(f"cannot merge {args.run_dir}: {err}") from None
    return 0


def check_report_out(out: Path) -> Path:
    """The report file ``out`` (from :func:`report_path`) when it and its folder can be written; one-line
    ValueError naming ``--out`` otherwise. Nothing is created."""
    if out.is_dir():
        raise ValueError(f"--out {out}: is a folder; give a path ending in .md or a folder for report.md")
    check_writable_root(out.parent, "--out")
    return out


def check_baseline(runs: list[RunFolder], baseline: str | None) -> None:
    """``--baseline`` names a model of every run's records (checked before the report folder is locked)."""
    models = sorted(set.intersection(*(set(r.records["model"]) for r in runs)))
    if baseline is not None and baseline not in models:
        raise ValueError(f"--baseline {baseline!r} is not a model of the records; choose one of {models}")


def _write_one_or_combined(runs: list[RunFolder], out: Path, args: Any) -> list[Path]:
    written: list[Path] = []
    if len(runs) == 1:
        run = runs[0]
        marks = table_marks(run)
        tables = write_tables(run.records, out.parent, meta=run.meta, baseline=args.baseline, marks=marks)
        if not args.quiet:
            sys.stdout.write(tables["text"].read_text(encoding="utf-8"))
        written += tables.values()
    written.append(write_report(runs, out, baseline=args.baseline, figures=args.figures))
    return written


CLAIMS_DESCRIPTION = (
    "Write claims.md: every claim of the source papers with its numbers, test, command and verdict, from saved "
    "training runs, attack runs and the benchmarks' CSVs (nothing is re-run; a claim whose input is missing is "
    "'inconclusive at this scale: not measured')."
)


def _claims_arguments(p: Parser) -> None:
    runs = p.add_argument(
        "--run", dest="runs", action=ListAction, item=Path, default=[], metavar="RUN",
        help="an attack run folder; repeat the flag for several",
    )  # fmt: skip
    p.add_alias("--runs", runs, nargs="+")
    p.add_argument(
        "--train", action=ListAction, item=Path, default=[], metavar="DIR",
        help="a training data-set folder results/train/<slug>; repeat the flag for several data sets",
    )  # fmt: skip
    p.add_argument(
        "--cost-model", type=Path, default=None, metavar="CSV", help="benchmarks/bench_cost_model.py's CSV"
    )
    p.add_argument(
        "--throughput", type=Path, default=None, metavar="CSV",
        help="benchmarks/bench_tokenizer_speed.py's paired repeats (tokenizer_speed_pairs.csv): claim 1's "
        "speed half from wavelet and patch training steps timed side by side, instead of the training runs' "
        "own images/s (which depend on what else the machine ran); needs --train",
    )  # fmt: skip
    p.add_argument(
        "--out", type=Path, default=Path("results/claims.md"), metavar="PATH", help="the claims file"
    )
    p.add_argument("--no-figures", dest="figures", action="store_false", help="skip the Pareto figure(s)")


def claims_main(args: Any, argv: list[str]) -> int:
    """``report claims``: check every input, then write --out (atomically; no lock: it writes only --out
    and the Pareto figures next to it)."""
    from robustbench_wave.reporting.claims_page import load_inputs, write_claims

    _setup_logging(quiet=True)
    command = " ".join(["python -m robustbench_wave.report", CLAIMS, *argv])
    try:
        out = check_report_out(args.out)
        inputs = load_inputs(args.runs, args.train, args.cost_model, command, args.throughput)
        written = write_claims(inputs, out, figures=args.figures)
    except ValueError as err:
        raise SystemExit(f"cannot write the claims report: {err}") from None
    sys.stdout.write("wrote " + ", ".join(str(p) for p in written) + "\n")
    return 0


REAUDIT_DESCRIPTION = (
    "Re-check a run's saved adversarial examples (attack --save-adversarial): each within its budget (norm <= "
    "eps, pixels in [0,1]), re-classified by the reloaded models (checkpoints and specs checked) with the "
    "recorded prediction reproduced exactly, and every break in the records backed by a saved example. Prints "
    "one row per model, gradient mode, threat and eps; exits 1 on any failure."
)


def _reaudit_arguments(p: Parser) -> None:
    p.add_argument("run_dir", type=Path, metavar="RUN", help="an attack run folder with adversarial/")
    p.add_argument(
        "--results-dir", type=Path, default=RESULTS_ROOT, help="where the trained runs live (train/...)"
    )
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    p.add_argument(
        "--batch-size", type=positive_int, default=None, help="examples per forward pass (default: the run's)"
    )


def reaudit_main(args: Any, argv: list[str]) -> int:
    """``report reaudit RUN``: 0 when every saved example passes, 1 otherwise (the table says where)."""
    _setup_logging(quiet=True)
    try:
        table, problems = reaudit_run(args.run_dir, args.results_dir, args.device, args.batch_size)
    except ValueError as err:
        raise SystemExit(f"cannot re-audit {args.run_dir}: {err}") from None
    sys.stdout.write(table.to_string(index=False) + "\n")
    for line in problems:
        sys.stderr.write(f"re-audit FAILED: {line}\n")
    if not problems:
        sys.stdout.write(f"re-audit passed: {int(table['n_checked'].sum())} saved adversarial examples\n")
    return 1 if problems else 0


EXPORT_DESCRIPTION = (
    "Leaderboard-ready files from saved runs (nothing is re-run): a RobustBench model_info JSON per model and "
    "threat model (OUT/model_info/<dataset>/<threat>/<model>.json, at RobustBench's standard eps when attacked, "
    "else the run's reference eps) and, when the runs hold transfer attacks (one run per --surrogate), "
    "transfer.csv, transfer_matrix.csv and transfer_matrix.tex."
)


def _export_arguments(p: Parser) -> None:
    p.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN", help="attack run folders (same data)")
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="the folder to write into")


def export_main(args: Any, argv: list[str]) -> int:
    """``report export RUN [RUN ...] --out DIR``: check every run, then write (atomically) into DIR."""
    from robustbench_wave.reporting.export import write_export

    _setup_logging(quiet=True)
    try:
        check_writable_root(args.out)
        runs = [load_run(d) for d in args.run_dirs]
        written = write_export(runs, args.out)
    except ValueError as err:
        raise SystemExit(f"cannot export: {err}") from None
    sys.stdout.write("wrote " + ", ".join(str(p) for p in written) + "\n")
    return 0


def run_main(args: Any, argv: list[str]) -> int:
    """``report run RUN [RUN ...]``: the tables and report.md of one run, or one report over several."""
    setup_logging(args, "%(levelname)s %(name)s: %(message)s")
    try:
        runs = [load_run(d) for d in args.run_dirs]
        out = check_report_out(report_path(args.run_dirs, args.out))
        check_baseline(runs, args.baseline)
        with RunLock(out.parent, hint=BUSY_HINT):
            written = _write_one_or_combined(runs, out, args)
    except ValueError as err:
        raise SystemExit(str(err)) from None
    sys.stdout.write("wrote " + ", ".join(str(p) for p in written) + "\n")
    return 0


#: Every subcommand: its name, one line for ``report --help``, its description, its arguments, its handler.
SUBCOMMANDS: dict[str, tuple[str, str, Callable[[Parser], None], Callable[[Any, list[str]], int]]] = {
    RUN: ("the tables and report.md of run folder(s) (the default)", RUN_DESCRIPTION, _run_arguments, run_main),
    MERGE: ("join the shards of attack --shard I/N jobs", MERGE_DESCRIPTION, _merge_arguments, merge_main),
    REAUDIT: ("re-check saved adversarial examples", REAUDIT_DESCRIPTION, _reaudit_arguments, reaudit_main),
    EXPORT: ("RobustBench model_info JSON and the transfer matrix", EXPORT_DESCRIPTION, _export_arguments,
             export_main),
    CLAIMS: ("claims.md: every claim of the source papers", CLAIMS_DESCRIPTION, _claims_arguments, claims_main),
}  # fmt: skip


def get_args_parser() -> Parser:
    """The report command: one argparse subcommand per :data:`SUBCOMMANDS` entry, each with its ``--help``."""
    p = Parser(
        prog=PROG,
        description="Tables, reports and exports from saved attack runs; nothing is re-run. "
        f"'{PROG} COMMAND --help' explains each command. A first argument that is not a command is a run "
        f"folder: '{PROG} RUN' = '{PROG} {RUN} RUN'.",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=Parser)
    for name, (summary, description, arguments, _) in SUBCOMMANDS.items():
        arguments(sub.add_parser(name, help=summary, description=description))
    return p


def with_command(argv: list[str]) -> list[str]:
    """``argv`` with its subcommand first: the old ``--reaudit`` (anywhere) becomes ``reaudit`` (warned), a
    first argument that names no subcommand (a run folder, an option) gets ``run`` in front."""
    if OLD_REAUDIT in argv:
        log.warning("report %s RUN is deprecated: write report %s RUN", OLD_REAUDIT, REAUDIT)
        return [REAUDIT, *(a for a in argv if a != OLD_REAUDIT)]
    if not argv or argv[0] in SUBCOMMANDS or argv[0] in ("-h", "--help"):
        return argv
    return [RUN, *argv]


def main(argv: list[str] | None = None) -> int:
    argv = with_command(sys.argv[1:] if argv is None else list(argv))
    args = get_args_parser().parse_args(argv)
    return SUBCOMMANDS[args.command][3](args, argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
