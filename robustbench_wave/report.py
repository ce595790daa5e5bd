"""Command line: rebuild the tables and the Markdown report of attack runs from their saved files.

    python -m robustbench_wave.report results/attack/fashion-mnist/RUN
    python -m robustbench_wave.report RUN_SEED0 RUN_SEED1 RUN_SEED2 --out results/headline

This module owns the ``python -m robustbench_wave.report`` command; nothing is re-run. One run folder: its
tables (summary.csv, table.csv, table.tex, table_worst.tex, table.txt, crosscheck.csv after a cross-check)
are rebuilt from ``records.csv.gz`` and its ``report.md`` is rewritten. Several run folders (one per training
seed): one combined report (mean ± sd over the runs). Diagnostics and energy come from the files
``finalize_run`` left in the run folders (the attack command runs it).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from robustbench_wave.reporting.markdown import write_report
from robustbench_wave.reporting.runs import load_run, report_path
from robustbench_wave.reporting.tables import write_tables


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m robustbench_wave.report",
        description="Rebuild the tables and report.md of one attack run folder, or write one report over "
        "several run folders (training seeds, combined into mean ± sd). No attack is re-run.",
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


def main(argv: list[str] | None = None) -> int:
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
