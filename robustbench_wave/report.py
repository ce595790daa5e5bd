"""Command line: rebuild the tables and the Markdown report of attack runs from their saved files.

    python -m robustbench_wave.report results/attack/fashion-mnist/RUN
    python -m robustbench_wave.report RUN_SEED0 RUN_SEED1 RUN_SEED2 --out results/headline
    python -m robustbench_wave.report merge results/attack/fashion-mnist/RUN   # after --shard I/N jobs
    python -m robustbench_wave.report --reaudit RUN        # re-check attack --save-adversarial's examples
    python -m robustbench_wave.report export RUN [RUN ...] --out DIR   # RobustBench model_info + transfer matrix

This module owns the ``python -m robustbench_wave.report`` command; nothing is re-run. One run folder: its
tables (summary.csv, table.csv, table.tex, table_worst.tex, table.txt, crosscheck.csv after a cross-check)
are rebuilt from ``records.csv.gz`` and its ``report.md`` is rewritten. Several run folders (one per training
seed): one combined report (mean ± sd over the runs). Diagnostics and energy come from the files
``finalize_run`` left in the run folders (the attack command runs it).

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
(:class:`robustbench_wave.runfolder.RunLock`), so a run being attacked cannot be reported into. Bad input
ends with one line naming the file or flag, never a traceback.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from robustbench_wave.attackrun import FinalizeOptions, finish_merged_run, reaudit_run, write_merged_run
from robustbench_wave.cli import Parser, command_line, positive_int
from robustbench_wave.evaluation.sharding import merge_shard_folders
from robustbench_wave.reporting.markdown import write_report
from robustbench_wave.reporting.runs import RunFolder, load_run, report_path
from robustbench_wave.reporting.tables import write_tables
from robustbench_wave.runfolder import RunLock, check_writable_root

#: First word that selects the merge subcommand (any other first argument is a run folder).
MERGE = "merge"
#: First word that selects the claims subcommand (claims.md from saved results).
CLAIMS = "claims"
#: First words that select the re-audit of saved adversarial examples (``--reaudit RUN`` = ``reaudit RUN``).
REAUDIT = ("reaudit", "--reaudit")
#: First word that selects the leaderboard export (RobustBench model_info JSON, transfer matrix).
EXPORT = "export"
log = logging.getLogger("robustbench_wave.report")
BUSY_HINT = "wait for it to finish, then run this command again"


def get_args_parser() -> Parser:
    p = Parser(
        prog="python -m robustbench_wave.report",
        description="Rebuild the tables and report.md of one attack run folder, or write one report over "
        "several run folders (training seeds, combined into mean ± sd). No attack is re-run. "
        f"'python -m robustbench_wave.report {MERGE} RUN --help': join the shards of attack --shard jobs; "
        "'--reaudit RUN': re-check its saved adversarial examples; "
        f"'{EXPORT} RUN [RUN ...] --out DIR': RobustBench model_info JSON and the transfer matrix.",
    )
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
    p.add_argument(
        "--quiet", action="store_true", help="print only the paths written (no table, no progress log)"
    )
    return p


def get_merge_parser() -> Parser:
    p = Parser(
        prog=f"python -m robustbench_wave.report {MERGE}",
        description="Join the RUN/shards/I-of-N/ folders of attack --shard I/N jobs into one run folder "
        "(records identical to a one-process run), then write its tables and report.",
    )
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
    p.add_argument("--quiet", action="store_true", help="print only the paths written")
    return p


def _setup_logging(quiet: bool) -> None:
    logging.basicConfig(
        level=logging.WARNING if quiet else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )


def _echo(msg: str) -> None:
    sys.stdout.write(msg + "\n")
    sys.stdout.flush()


def merge_main(argv: list[str]) -> int:
    """``report merge RUN``: check the shards, then (holding the run folder's lock) write and finalize the run
    (:mod:`robustbench_wave.attackrun.merge`)."""
    args = get_merge_parser().parse_args(argv)
    _setup_logging(args.quiet)
    try:
        merged, folders = merge_shard_folders(args.run_dir)
        job, config = folders[0].job, folders[0].config
        options = FinalizeOptions.from_dict(job.finalize)
        with RunLock(args.run_dir, hint=BUSY_HINT):
            command = command_line("robustbench_wave.report", [MERGE, *argv])
            paths = write_merged_run(args.run_dir, merged, config, command)
            if not args.quiet:
                sys.stdout.write(paths["text"].read_text(encoding="utf-8"))
            sys.stdout.write(
                f"merged {len(folders)} shards into {args.run_dir}: {', '.join(sorted(paths))}\n"
            )
            finish_merged_run(
                args.run_dir, config, options, diagnostics=args.diagnostics,
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
        tables = write_tables(run.records, out.parent, meta=run.meta, baseline=args.baseline)
        if not args.quiet:
            sys.stdout.write(tables["text"].read_text(encoding="utf-8"))
        written += tables.values()
    written.append(write_report(runs, out, baseline=args.baseline, figures=args.figures))
    return written


def get_claims_parser() -> Parser:
    p = Parser(
        prog=f"python -m robustbench_wave.report {CLAIMS}",
        description="Write claims.md: every claim of the source papers with its numbers, test, command and "
        "verdict, from saved training runs, attack runs and the benchmarks' CSVs (nothing is re-run; a claim "
        "whose input is missing is 'inconclusive at this scale: not measured').",
    )
    p.add_argument("--runs", nargs="+", type=Path, default=[], metavar="RUN", help="attack run folders")
    p.add_argument(
        "--train", action="append", type=Path, default=[], metavar="DIR",
        help="a training data-set folder results/train/<slug> (repeat for several data sets)",
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
    return p


def claims_main(argv: list[str]) -> int:
    """``report claims``: check every input, then write --out (atomically; no lock: it writes only --out
    and the Pareto figures next to it)."""
    from robustbench_wave.reporting.claims import load_inputs, write_claims

    args = get_claims_parser().parse_args(argv)
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


def get_reaudit_parser() -> Parser:
    p = Parser(
        prog="python -m robustbench_wave.report --reaudit",
        description="Re-check a run's saved adversarial examples (attack --save-adversarial): each within its "
        "budget (norm <= eps, pixels in [0,1]), re-classified by the reloaded models (checkpoints and specs "
        "checked) with the recorded prediction reproduced exactly, and every break in the records backed "
        "by a saved example. Prints one row per model, gradient mode, threat and eps; exits 1 on any failure.",
    )
    p.add_argument("run_dir", type=Path, metavar="RUN", help="an attack run folder with adversarial/")
    p.add_argument(
        "--results-dir", type=Path, default=Path("results"), help="where the trained runs live (train/...)"
    )
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N")
    p.add_argument(
        "--batch-size", type=positive_int, default=None, help="examples per forward pass (default: the run's)"
    )
    return p


def reaudit_main(argv: list[str]) -> int:
    """``report --reaudit RUN``: 0 when every saved example passes, 1 otherwise (the table says where)."""
    args = get_reaudit_parser().parse_args(argv)
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


def get_export_parser() -> Parser:
    p = Parser(
        prog=f"python -m robustbench_wave.report {EXPORT}",
        description="Leaderboard-ready files from saved runs (nothing is re-run): a RobustBench model_info "
        "JSON per model and threat model (OUT/model_info/<dataset>/<threat>/<model>.json, at RobustBench's "
        "standard eps when attacked, else the run's reference eps) and, when the runs hold transfer attacks "
        "(one run per --surrogate), transfer.csv, transfer_matrix.csv and transfer_matrix.tex.",
    )
    p.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN", help="attack run folders (same data)")
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="the folder to write into")
    return p


def export_main(argv: list[str]) -> int:
    """``report export RUN [RUN ...] --out DIR``: check every run, then write (atomically) into DIR."""
    from robustbench_wave.reporting.export import write_export

    args = get_export_parser().parse_args(argv)
    _setup_logging(quiet=True)
    try:
        check_writable_root(args.out)
        runs = [load_run(d) for d in args.run_dirs]
        written = write_export(runs, args.out)
    except ValueError as err:
        raise SystemExit(f"cannot export: {err}") from None
    sys.stdout.write("wrote " + ", ".join(str(p) for p in written) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] and argv[0] in REAUDIT:
        return reaudit_main(argv[1:])
    if argv[:1] == [EXPORT]:
        return export_main(argv[1:])
    if argv[:1] == [MERGE]:
        return merge_main(argv[1:])
    if argv[:1] == [CLAIMS]:
        return claims_main(argv[1:])
    args = get_args_parser().parse_args(argv)
    _setup_logging(args.quiet)
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


if __name__ == "__main__":
    raise SystemExit(main())
