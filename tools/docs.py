"""``python -m tools.docs``: this repository's documented runs' summary files kept under version control
(``publish``), and the Markdown pages that quote them rendered and checked (``render``;
:mod:`tools.published`). It is the repository's own tooling, not the package's: a user's run folder already
holds these files.

    python -m tools.docs publish results/attack/fashion-mnist/RUN --name demo
    python -m tools.docs render            # re-render README.md's and docs/*.md's include blocks
    python -m tools.docs render --check    # change nothing; exit 1 if a quoted number lacks its cell

A section's numbers are tied to cells, and to the sentences that use them, by its ``<!-- cite: FOLDER`` lines
(``13.2% = verdict.json.numbers[...].worst_case % in "13.2% at L2 1"``; the grammar is :mod:`tools.citations`').
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from robustbench_wave.core.cli import Parser, add_verbosity, setup_logging
from robustbench_wave.core.runfolder import check_safe_name
from tools.published import PUBLISHED_DIR, publish, render_pages, unpublished_sections

log = logging.getLogger("robustbench_wave.report")

PUBLISH = "publish"
DOCS = "render"
PUBLISH_DESCRIPTION = (
    "Copy a finished run's summary files (tables, verdict, checklist, claims; never records or weights) into "
    "results/published/NAME/ with source.json (the command that made them, git revision, library versions, "
    "sha256 of each file), so that the README and docs/ can quote them and 'python -m tools.docs render --check' "
    "can hold them to it."
)
DOCS_DESCRIPTION = (
    "Re-render the include blocks (<!-- include: PATH --> ... <!-- /include -->) of Markdown pages from their "
    "published files, then check that every number their prose quotes is named, with the file and cell it "
    "quotes, by a line of its section's <!-- cite: FOLDER ... --> comment (NUMBER = FILE[KEY=VALUE].COLUMN, "
    'a % or a difference or ratio of two cells as transform, then in "PHRASE": the words its sentence must '
    "hold) and equals that cell, and that a section with no cite line quotes no figure that looks measured (a "
    "percentage, a time, points, a multiplier, a ratio) but the settings its <!-- settings: ... --> comment "
    "names; and that every folder under results/published/ is as its source.json lists it (each file and its "
    "sha256, a command a reader can run). Exit 1 on a problem; --check changes nothing."
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
    """``python -m tools.docs publish RUN --name NAME``: one line naming the folder written."""
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
    """``python -m tools.docs render``: 0 when every page is backed by its files, 1 otherwise (one line per
    problem)."""
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


PROG = "python -m tools.docs"
#: Every subcommand: its name, one line for ``--help``, its description, its arguments, its handler.
SUBCOMMANDS = {
    PUBLISH: ("keep a run's summary files under results/published/", PUBLISH_DESCRIPTION, publish_arguments,
              publish_main),
    DOCS: ("README and docs/ from the published files, checked", DOCS_DESCRIPTION, docs_arguments, docs_main),
}  # fmt: skip


def get_args_parser() -> Parser:
    """``python -m tools.docs``: one argparse subcommand per :data:`SUBCOMMANDS` entry."""
    p = Parser(prog=PROG, description="This repository's published results and the pages that quote them.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True, parser_class=Parser)
    for name, (summary, description, arguments, _) in SUBCOMMANDS.items():
        arguments(sub.add_parser(name, help=summary, description=description))
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = get_args_parser().parse_args(argv)
    return SUBCOMMANDS[args.command][3](args, argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
