"""``report publish`` and ``report docs``: the documented runs' summary files kept under version control, and
the Markdown pages that quote them (:mod:`robustbench_wave.reporting.published`).

    python -m robustbench_wave.report publish results/attack/fashion-mnist/RUN --name demo
    python -m robustbench_wave.report docs            # re-render README.md's and docs/*.md's include blocks
    python -m robustbench_wave.report docs --check    # change nothing; exit 1 if a quoted number lacks its cell

A section's numbers are tied to cells by its ``<!-- cite: FOLDER`` lines (``14.0% = summary.csv[...].COLUMN %``;
the grammar is :mod:`robustbench_wave.reporting.citations`').
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from robustbench_wave.cli import Parser, add_verbosity, setup_logging
from robustbench_wave.reporting.published import PUBLISHED_DIR, publish, render_pages, unpublished_sections
from robustbench_wave.runfolder import check_safe_name

log = logging.getLogger("robustbench_wave.report")

PUBLISH = "publish"
DOCS = "docs"
PUBLISH_DESCRIPTION = (
    "Copy a finished run's summary files (tables, verdict, checklist, claims; never records or weights) into "
    "results/published/NAME/ with source.json (the command that made them, git revision, library versions, "
    "sha256 of each file), so that the README and docs/ can quote them and 'report docs --check' can hold them "
    "to it."
)
DOCS_DESCRIPTION = (
    "Re-render the include blocks (<!-- include: PATH --> ... <!-- /include -->) of Markdown pages from their "
    "published files, then check that every number their prose quotes is named, with the file and cell it "
    "quotes, by a line of its section's <!-- cite: FOLDER ... --> comment (NUMBER = FILE[KEY=VALUE].COLUMN, "
    "a % or a difference or ratio of two cells as transform) and equals that cell, and that a section with no "
    "cite line quotes no measurement-looking number. Exit 1 on a problem; --check changes nothing."
)


def publish_arguments(p: Parser) -> None:
    p.add_argument("source", type=Path, metavar="RUN", help="a finished run folder, or one summary file")
    p.add_argument("--name", required=True, help="the published name: results/published/NAME/")
    p.add_argument(
        "--into",
        type=Path,
        default=PUBLISHED_DIR,
        metavar="DIR",
        help=f"the published root (default {PUBLISHED_DIR})",
    )
    p.add_argument(
        "--command",
        dest="made_by",
        default=None,
        metavar="TEXT",
        help="the command that made the source (default: the one its meta.json recorded)",
    )


def publish_main(args: Any, argv: list[str]) -> int:
    """``report publish RUN --name NAME``: one line naming the folder written."""
    try:
        check_safe_name(args.name, "--name")
        dest = publish(args.source, args.into / args.name, command=args.made_by)
    except ValueError as err:
        raise SystemExit(f"cannot publish {args.source}: {err}") from None
    sys.stdout.write(f"published {args.source} as {dest}\n")
    return 0


def docs_arguments(p: Parser) -> None:
    p.add_argument(
        "pages",
        nargs="*",
        type=Path,
        metavar="PAGE",
        help="Markdown pages (default: README.md and docs/*.md under --root)",
    )
    p.add_argument(
        "--root", type=Path, default=Path("."), help="the repository root the pages' paths start at"
    )
    p.add_argument("--check", action="store_true", help="change nothing; only report what differs")
    add_verbosity(p, quiet_help="print only the problems")


def docs_main(args: Any, argv: list[str]) -> int:
    """``report docs``: 0 when every page is backed by its files, 1 otherwise (one line per problem)."""
    setup_logging(args, "%(levelname)s %(name)s: %(message)s")
    pages = args.pages or [args.root / "README.md", *sorted((args.root / "docs").glob("*.md"))]
    missing = [p for p in pages if not p.is_file()]
    if missing:
        raise SystemExit(f"no such page: {missing[0]}")
    try:
        problems = render_pages(pages, args.root, check=args.check)
    except ValueError as err:
        raise SystemExit(f"cannot render the pages: {err}") from None
    for page in pages:
        for title, reason in unpublished_sections(page.read_text()):
            log.info("%s [%s]: unpublished (%s)", page, title, reason)
    for problem in problems:
        sys.stderr.write(f"{problem}\n")
    if not problems and not args.quiet:
        sys.stdout.write(f"{len(pages)} pages: every include block and quoted number backed by its cell\n")
    return 1 if problems else 0
