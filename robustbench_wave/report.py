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
report.md from the records alone.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from robustbench_wave.evaluation.sharding import merge_shard_folders
from robustbench_wave.io import atomic_write_json
from robustbench_wave.reporting.markdown import write_report
from robustbench_wave.reporting.runs import load_run, report_path
from robustbench_wave.reporting.tables import write_tables


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
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


#: First word that selects the merge subcommand (any other first argument is a run folder).
MERGE = "merge"
log = logging.getLogger("robustbench_wave.report")


def get_merge_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
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


def merge_main(argv: list[str]) -> int:
    """``report merge RUN``: join the shards, write the run, finalize it (see the module docstring)."""
    from robustbench_wave import attack  # the attack command's model loading and finalize step

    args = get_merge_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        merged, folders = merge_shard_folders(args.run_dir)
    except ValueError as err:
        raise SystemExit(f"cannot merge {args.run_dir}: {err}") from None
    config, info = folders[0].config, folders[0].info
    merged.meta["run"] = {"run_dir": str(args.run_dir), "command": " ".join(sys.argv), "config": config}
    paths = merged.save(args.run_dir)
    atomic_write_json(args.run_dir / attack.CONFIG_JSON, config)
    paths |= write_tables(merged.records, args.run_dir, meta=merged.meta, cross=merged.crosscheck_records)
    if not args.quiet:
        sys.stdout.write(paths["text"].read_text(encoding="utf-8"))
    sys.stdout.write(f"merged {len(folders)} shards into {args.run_dir}: {', '.join(sorted(paths))}\n")
    options = attack.FinalizeOptions(**info.get("finalize", {}))
    if args.diagnostics and options.diagnostics:
        results_dir = args.results_dir or Path(info.get("results_dir", "results"))
        try:
            attack.finalize_merged_run(args.run_dir, config, results_dir, options, args.device)
            return 0
        except SystemExit as err:
            log.warning("no diagnostics (%s); writing report.md from the records", err)
    report = write_report([load_run(args.run_dir)], report_path([args.run_dir]), figures=args.figures)
    sys.stdout.write(f"wrote {report}\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == [MERGE]:
        return merge_main(argv[1:])
    args = get_args_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        runs = [load_run(d) for d in args.run_dirs]
        out = report_path(args.run_dirs, args.out)
        written: list[Path] = []
        if len(runs) == 1:
            run = runs[0]
            tables = write_tables(run.records, out.parent, meta=run.meta, cross=run.crosscheck)
            if not args.quiet:
                sys.stdout.write(tables["text"].read_text(encoding="utf-8"))
            written += tables.values()
        written.append(write_report(runs, out, baseline=args.baseline, figures=args.figures))
    except ValueError as err:
        raise SystemExit(str(err)) from None
    sys.stdout.write("wrote " + ", ".join(str(p) for p in written) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
