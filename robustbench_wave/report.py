"""Command line: rebuild the comparison tables of an attack run from its saved records (no attacks re-run).

    python -m robustbench_wave.report results/attack/fashion-mnist/<run-name>

reads ``records.csv.gz`` (+ ``meta.json``, ``crosscheck_records.csv.gz``) and rewrites summary.csv,
table.csv, table.tex and table.txt (and crosscheck.csv), then prints the table.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from robustbench_wave.evaluation.records import read_run
from robustbench_wave.reporting import tables


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m robustbench_wave.report",
        description="Rebuild robustness tables (CSV, LaTeX, text) from the records of an attack run.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("run_dir", type=Path, help="an attack run folder (holds records.csv.gz and meta.json)")
    p.add_argument("--out", type=Path, default=None, help="write the tables here instead of into RUN_DIR")
    p.add_argument("--quiet", action="store_true", help="do not print the table")
    return p


def main(argv: list[str] | None = None) -> int:
    args = get_args_parser().parse_args(argv)
    try:
        records, meta, cross = read_run(args.run_dir)
    except ValueError as err:
        raise SystemExit(str(err)) from None
    paths = tables.write_tables(records, args.out or args.run_dir, meta=meta, cross=cross)
    if not args.quiet:
        sys.stdout.write(paths["text"].read_text(encoding="utf-8"))
    sys.stdout.write("wrote " + ", ".join(str(p) for p in paths.values()) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
