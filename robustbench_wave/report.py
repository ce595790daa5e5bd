"""Command line: rebuild the tables and the Markdown report of attack runs from their saved files.

    python -m robustbench_wave.report results/attack/fashion-mnist/RUN
    python -m robustbench_wave.report RUN_SEED0 RUN_SEED1 RUN_SEED2 --out results/headline
    python -m robustbench_wave.report merge results/attack/fashion-mnist/RUN   # after --shard I/N jobs

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

from robustbench_wave.cli import Parser
from robustbench_wave.evaluation import records as rec
from robustbench_wave.evaluation.result import EvaluationResult
from robustbench_wave.evaluation.sharding import ShardFolder, merge_shard_folders
from robustbench_wave.io import atomic_write_json
from robustbench_wave.reporting.markdown import write_report
from robustbench_wave.reporting.runs import FIGURES_DIR, REPORT_OUTPUT_FILES, RunFolder, load_run, report_path
from robustbench_wave.reporting.tables import TABLE_FILES, write_tables
from robustbench_wave.runfolder import RunLock, check_writable_root, remove_owned

#: First word that selects the merge subcommand (any other first argument is a run folder).
MERGE = "merge"
#: First word that selects the claims subcommand (claims.md from saved results).
CLAIMS = "claims"
log = logging.getLogger("robustbench_wave.report")
BUSY_HINT = "wait for it to finish, then run this command again"


def get_args_parser() -> Parser:
    p = Parser(
        prog="python -m robustbench_wave.report",
        description="Rebuild the tables and report.md of one attack run folder, or write one report over "
        "several run folders (training seeds, combined into mean ± sd). No attack is re-run. "
        f"'python -m robustbench_wave.report {MERGE} RUN --help': join the shards of attack --shard jobs.",
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
        help="model the verdict compares against (default: the models without gradient modes)",
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


def _discard_other_configuration(run_dir: Path, config: dict[str, Any]) -> None:
    """Remove the outputs of another configuration from ``run_dir`` (by name: nothing else is touched), so
    no stale diagnostics, energy or cross-check of it end up in the merged run's report."""
    old = rec.read_meta(run_dir / rec.CONFIG_FILE)
    if old and old != config:
        log.warning("%s held another configuration's results; removing them", run_dir)
        files = [rec.RECORDS_FILE, rec.META_FILE, rec.CROSSCHECK_FILE, rec.CONFIG_FILE]
        remove_owned(run_dir, [*files, *TABLE_FILES.values(), *REPORT_OUTPUT_FILES], [FIGURES_DIR])


def _write_merged(run_dir: Path, merged: EvaluationResult, folders: list[ShardFolder], quiet: bool) -> None:
    """Records, meta.json, then config.json (all validated before), then the tables."""
    config = folders[0].config
    _discard_other_configuration(run_dir, config)
    merged.meta["run"] = {"run_dir": str(run_dir), "command": " ".join(sys.argv), "config": config}
    paths = merged.save(run_dir)
    atomic_write_json(run_dir / rec.CONFIG_FILE, config)
    paths |= write_tables(merged.records, run_dir, meta=merged.meta)
    if not quiet:
        sys.stdout.write(paths["text"].read_text(encoding="utf-8"))
    sys.stdout.write(f"merged {len(folders)} shards into {run_dir}: {', '.join(sorted(paths))}\n")


def _finalize_merged(args: Any, config: dict[str, Any], info: dict[str, Any], options: Any) -> None:
    """Diagnostics, energy and report.md as the attack command writes them; report.md from the records alone
    with --no-diagnostics (or when the shards ran without them, or a model cannot be loaded)."""
    from robustbench_wave import attack  # the attack command's model loading and finalize step

    if args.diagnostics and options.diagnostics:
        results_dir = args.results_dir or Path(info.get("results_dir", "results"))
        try:
            attack.finalize_merged_run(args.run_dir, config, results_dir, options, args.device)
            return
        except SystemExit as err:
            log.warning("no diagnostics (%s); writing report.md from the records", err)
    report = write_report([load_run(args.run_dir)], report_path([args.run_dir]), figures=args.figures)
    sys.stdout.write(f"wrote {report}\n")


def merge_main(argv: list[str]) -> int:
    """``report merge RUN``: check the shards, then (holding the run folder's lock) write and finalize the run."""
    from robustbench_wave import attack  # the finalize options the shards stored

    args = get_merge_parser().parse_args(argv)
    _setup_logging(args.quiet)
    try:
        merged, folders = merge_shard_folders(args.run_dir)
        info = folders[0].info
        options = attack.FinalizeOptions.from_dict(info.get("finalize", {}))
        with RunLock(args.run_dir, hint=BUSY_HINT):
            _write_merged(args.run_dir, merged, folders, args.quiet)
            _finalize_merged(args, folders[0].config, info, options)
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
        tables = write_tables(run.records, out.parent, meta=run.meta)
        if not args.quiet:
            sys.stdout.write(tables["text"].read_text(encoding="utf-8"))
        written += tables.values()
    written.append(write_report(runs, out, baseline=args.baseline, figures=args.figures))
    return written


def get_claims_parser() -> Parser:
    p = Parser(
        prog=f"python -m robustbench_wave.report {CLAIMS}",
        description="Write claims.md: every claim of the source papers with its numbers, test, command and "
        "verdict, from saved training runs, attack runs and the cost-model CSV (nothing is re-run; a claim "
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
        inputs = load_inputs(args.runs, args.train, args.cost_model, command)
        written = write_claims(inputs, out, figures=args.figures)
    except ValueError as err:
        raise SystemExit(f"cannot write the claims report: {err}") from None
    sys.stdout.write("wrote " + ", ".join(str(p) for p in written) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
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
