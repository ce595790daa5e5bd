"""Compare two results folders file by file: the check that a refactor moved no number.

Run the same attack command at two revisions into two results folders, then::

    python -m tools.compare_runs BEFORE AFTER

Every file of BEFORE is compared with its namesake in AFTER: bytes (a ``.gz`` file decompressed first), else,
for JSON and Markdown, once the values that name a moment, a duration, a revision, a process or a place on
disk are removed. Anything else that differs is listed and the exit status is 1. Records, tables,
diagnostics, verdicts and figures must be byte-identical; meta.json and report.md may differ only in those
volatile values. The training folder (``train/``) is skipped: it is the input, not the output.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from pathlib import Path
from typing import Any

#: Keys of JSON values that change from run to run without any number moving.
VOLATILE_KEY = re.compile(
    r"utc|seconds|time|git|path|dir|created|duration|elapsed|platform|host|command|argv|file|pid|since|"
    r"surrogate_choice|source",
    re.I,
)
#: What Markdown pages write of those values: timestamps, revisions, absolute paths, durations.
VOLATILE_TEXT = re.compile(r"\d{4}-\d\d-\d\d[T ][\d:.+]*|[0-9a-f]{40}(-dirty)?|/\S+|\b\d+(\.\d+)? s\b")
SKIPPED = {"train", ".lock"}


def scrub(value: Any) -> Any:
    """``value`` without the entries whose keys name something volatile, recursively."""
    if isinstance(value, dict):
        return {k: scrub(v) for k, v in value.items() if not VOLATILE_KEY.search(k)}
    if isinstance(value, list):
        return [scrub(v) for v in value]
    return value


def same_file(before: Path, after: Path) -> str | None:
    """'bytes' or 'scrubbed' when the two files agree that way, None when they differ."""
    x, y = before.read_bytes(), after.read_bytes()
    if before.suffix == ".gz":
        x, y = gzip.decompress(x), gzip.decompress(y)
    if x == y:
        return "bytes"
    if before.suffix == ".json" and scrub(json.loads(x)) == scrub(json.loads(y)):
        return "scrubbed"
    if before.suffix == ".md" and VOLATILE_TEXT.sub("", x.decode()) == VOLATILE_TEXT.sub("", y.decode()):
        return "scrubbed"
    return None


def compare(before: Path, after: Path) -> tuple[dict[str, int], list[str]]:
    """Counts of agreeing files by kind, and the relative paths that differ or are missing from ``after``."""
    counts, problems = {"bytes": 0, "scrubbed": 0}, []
    for path in sorted(p for p in before.rglob("*") if p.is_file()):
        rel = path.relative_to(before)
        if SKIPPED & set(rel.parts) or rel.name in SKIPPED:
            continue
        other = after / rel
        agreement = same_file(path, other) if other.is_file() else None
        if agreement is None:
            problems.append(f"{rel}: {'differs' if other.is_file() else 'missing in ' + str(after)}")
        else:
            counts[agreement] += 1
    return counts, problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.compare_runs", description=__doc__.split("\n")[0])
    parser.add_argument("before", type=Path, help="results folder written at the old revision")
    parser.add_argument("after", type=Path, help="results folder written at the new revision")
    args = parser.parse_args(argv)
    for folder in (args.before, args.after):
        if not folder.is_dir():
            raise SystemExit(
                f"{folder} is not a folder: give two results folders (--results-dir of each run)"
            )
    counts, problems = compare(args.before, args.after)
    sys.stdout.writelines(f"{line}\n" for line in problems)
    sys.stdout.write(
        f"{counts['bytes']} files byte-identical, {counts['scrubbed']} identical once times, revisions, "
        f"processes and paths are removed, {len(problems)} differ\n"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
