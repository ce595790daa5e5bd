"""Published results: the small summary files of a documented run, kept under version control, and the
Markdown that quotes them.

A number in a README should be one the code wrote. :func:`publish` copies a run's summary files (tables,
verdict, checklist, claims — never records or weights) into ``results/published/<name>/`` with
``source.json``: the command that made them, the git revision, the date, the library versions and each
file's sha256. A Markdown page then quotes them in two ways, both checked by :func:`check_markdown`:

- ``<!-- include: PATH -->`` … ``<!-- /include -->``: the block between the markers *is* the file
  (``.txt`` in a ``text`` fence, ``.md`` as it is, ``.csv`` as a Markdown table); :func:`render_includes`
  rewrites it from the file.
- ``<!-- cite: FOLDER`` … ``-->``: one line per number the section's prose writes, naming the file and
  cell it quotes and, after ``in``, the words of the sentence that says what it is
  (``14.0% = summary.csv[model=wavelet, eps=0.1].robust_accuracy % in "L∞ 0.1"``); the grammar, the
  transforms, when a context is needed and what is not a quoted measurement are :mod:`tools.citations`'. A
  section with no cite line may quote no figure that looks measured (a percentage, a ± half-width, a
  p-value, a multiplier, points, a time, a fraction or a ratio) but the settings and rule constants its
  ``<!-- settings: 10 points -->`` names.
- ``<!-- unpublished: REASON -->``: a section quoting measurements made before their summary files were
  kept (or on another machine). It is not checked, and :func:`unpublished_sections` lists it, so a page
  can be held to having none (the README is).

The old ``<!-- source: PATH -->`` (a number passed when it equalled any value of the file) is refused.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from robustbench_wave.core.io import atomic_write, atomic_write_json, atomic_write_text, provenance
from robustbench_wave.reporting.tables import WORST_CASE_HEADING
from tools.citations import Files, Problem, check_section, outside_code

#: Where the documented runs' summaries live in the repository (``results/`` is otherwise git-ignored).
PUBLISHED_DIR = Path("results") / "published"
SOURCE_FILE = "source.json"
#: table.txt's headline block on its own (what a README shows): written by :func:`publish` next to table.txt.
WORST_CASE_FILE = "worst_case.txt"
#: The summary files copied from a run folder when present: small, text, enough to quote every number.
SUMMARY_FILES = (
    "table.txt",
    "table.csv",
    "summary.csv",
    "verdict.json",
    "diagnostics.csv",
    "crosscheck.csv",
    "energy.csv",
    "corruptions_summary.csv",
    "claims.md",
    "gallery.txt",
    "gallery.csv",
    "runs.json",
    "headline-report.md",
)
#: A published file larger than this is not a summary (records, weights and figures stay out of git).
MAX_FILE_BYTES = 512 * 1024

_INCLUDE = re.compile(r"<!-- include: (?P<path>\S+) -->\n(?P<body>.*?)<!-- /include -->", re.DOTALL)
_SOURCE = re.compile(r"<!-- source: (?P<path>\S+) -->")
_UNPUBLISHED = re.compile(r"<!-- unpublished: (?P<reason>.*?) -->", re.DOTALL)
_HEADING = re.compile(r"^#{1,6} ", re.MULTILINE)
_RUNNABLE = re.compile(r"\b(make|python3?|torchrun)\b")
_PLACEHOLDER = re.compile(r"PLACEHOLDER|TODO|TBD|FIXME", re.IGNORECASE)


def publish(source: str | Path, dest: str | Path, *, command: str | None = None) -> Path:
    """Copy the summary files of ``source`` (a run folder, or one summary file) into ``dest`` with
    ``source.json``; return ``dest``. The command defaults to the one the run's meta.json recorded."""
    source, dest = Path(source), Path(dest)
    files = _summary_files(source)
    if not files:
        raise ValueError(
            f"{source} holds none of the summary files {', '.join(SUMMARY_FILES)}: "
            "publish a finished run folder (after its report) or one of those files"
        )
    record = _source_record(source, command)
    refused = command_problem(record["command"])
    if refused:
        raise ValueError(f"{refused}: pass --command with the command that made {source}")
    dest.mkdir(parents=True, exist_ok=True)
    for path in files:
        atomic_write(dest / path.name, lambda tmp, src=path: shutil.copyfile(src, tmp))
    _write_worst_case(dest)
    record["files"] = {path.name: _sha256(dest / path.name) for path in sorted(_published_files(dest))}
    atomic_write_json(dest / SOURCE_FILE, record)
    return dest


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _published_files(folder: Path) -> list[Path]:
    return [p for p in folder.iterdir() if p.is_file() and p.name != SOURCE_FILE]


def command_problem(command: Any) -> str | None:
    """Why ``command`` cannot stand as the command that made a published folder (None: it can): a reader
    must be able to run it again, so it names one of this repository's commands."""
    if not isinstance(command, str) or not command.strip():
        return "source.json names no command"
    if not _RUNNABLE.search(command) or _PLACEHOLDER.search(command):
        return f"source.json's command {command[:60]!r} is not a command a reader can run (make, python -m, torchrun)"
    return None


def check_published(root: str | Path) -> list[Problem]:
    """Every folder under ``root`` (``results/published``) as :func:`publish` left it: a runnable command in
    its source.json, every file listed there with its sha256, and nothing else beside them. A hand-edited or
    stale file, or a command never filled in, is a problem the docs check reports."""
    problems = []
    for source in sorted(Path(root).glob(f"*/{SOURCE_FILE}")):
        folder, where = source.parent, str(source)
        try:
            record = json.loads(source.read_text())
        except (OSError, json.JSONDecodeError) as err:
            problems.append(Problem(where, "-", f"unreadable: {err}"))
            continue
        if refused := command_problem(record.get("command")):
            problems.append(Problem(where, "-", refused))
        listed = record.get("files") or {}
        present = sorted(_published_files(folder))
        for path in present:
            if path.name not in listed:
                problems.append(
                    Problem(where, path.name, "a file source.json does not list: publish it again")
                )
            elif _sha256(path) != listed[path.name]:
                problems.append(Problem(where, path.name, "differs from the sha256 source.json recorded"))
        for name in sorted(set(listed) - {p.name for p in present}):
            problems.append(Problem(where, name, "listed in source.json but missing"))
    return problems


def _write_worst_case(dest: Path) -> None:
    """table.txt's headline block (its last lines, from :data:`WORST_CASE_HEADING`) as its own file."""
    table = dest / "table.txt"
    if table.is_file() and WORST_CASE_HEADING in (text := table.read_text()):
        atomic_write_text(dest / WORST_CASE_FILE, text[text.index(WORST_CASE_HEADING) :])


def _summary_files(source: Path) -> list[Path]:
    if source.is_file():
        candidates = [source]
    elif source.is_dir():
        candidates = [source / name for name in SUMMARY_FILES if (source / name).is_file()]
    else:
        raise ValueError(f"{source} does not exist: give a run folder or a summary file")
    too_big = [p for p in candidates if p.stat().st_size > MAX_FILE_BYTES]
    if too_big:
        raise ValueError(
            f"{too_big[0]} is {too_big[0].stat().st_size:,} bytes, over {MAX_FILE_BYTES:,}: "
            "published files are summaries; keep records, weights and figures out of the repository"
        )
    return candidates


def _source_record(source: Path, command: str | None) -> dict[str, Any]:
    """source.json without its ``files`` (:func:`publish` adds them once the copies are written)."""
    meta_path = (source if source.is_dir() else source.parent) / "meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
    run = meta.get("run") or {}
    made_by = meta.get("provenance") or provenance()
    return {
        "source": source.name,
        "command": command or run.get("command"),
        "git_revision": made_by.get("git_revision"),
        "libraries": made_by.get("libraries"),
        "platform": made_by.get("platform"),
        "run_created_utc": meta.get("created_utc"),
        "published_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


# --------------------------------------------------------------------------------------------- includes


def render_includes(text: str, root: str | Path) -> str:
    """Rewrite every include block of a Markdown page from its file (paths relative to ``root``)."""
    root = Path(root)

    def replace(match: re.Match[str]) -> str:
        path = match["path"]
        return f"<!-- include: {path} -->\n{_render_file(root / path)}<!-- /include -->"

    return _INCLUDE.sub(replace, text)


def _render_file(path: Path) -> str:
    if not path.is_file():
        raise ValueError(
            f"included file {path} does not exist: publish its run first (python -m tools.docs publish)"
        )
    if path.suffix == ".csv":
        return _markdown_table(pd.read_csv(path, keep_default_na=False)) + "\n"
    body = path.read_text().rstrip("\n") + "\n"
    return body if path.suffix == ".md" else f"```text\n{body}```\n"


def _markdown_table(frame: pd.DataFrame) -> str:
    rows = [list(map(str, frame.columns))] + [[str(v) for v in row] for row in frame.itertuples(index=False)]
    lines = ["| " + " | ".join(row) + " |" for row in rows]
    lines.insert(1, "|" + "---|" * len(frame.columns))
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- numbers


def check_markdown(text: str, root: str | Path, page: str = "README.md") -> list[Problem]:
    """Every include block equal to its file and every quoted number tied to the cell it quotes
    (:mod:`tools.citations`). Returns the problems (empty: the page is backed)."""
    root = Path(root)
    problems = []
    if render_includes(text, root) != text:
        stale = [m["path"] for m in _INCLUDE.finditer(text) if _include_is_stale(m, root)]
        problems += [Problem(page, "-", f"include block of {path} differs from the file") for path in stale]
    files = Files(root)
    next_line = 1  # the page's line each section starts at, for the problems' lines
    for title, section in _sections(text):
        start, next_line = next_line, next_line + section.count("\n")
        if _UNPUBLISHED.search(outside_code(section)):
            continue
        problems += [
            Problem(
                page,
                title,
                f"<!-- source: {m['path']} --> ties numbers to a file, not a cell: list each "
                "number in a <!-- cite: --> block instead",
            )
            for m in _SOURCE.finditer(outside_code(section))
        ]
        problems += check_section(page, title, section, files, first_line=start)
    return problems


def unpublished_sections(text: str) -> list[tuple[str, str]]:
    """(section title, reason) of every section marked as quoting unpublished measurements."""
    return [
        (title, section[m.start("reason") : m.end("reason")])
        for title, section in _sections(text)
        for m in _UNPUBLISHED.finditer(outside_code(section))
    ]


def _include_is_stale(match: re.Match[str], root: Path) -> bool:
    try:
        return _render_file(root / match["path"]) != match["body"]
    except ValueError:
        return True


def _sections(text: str) -> Iterable[tuple[str, str]]:
    starts = [m.start() for m in _HEADING.finditer(text)]
    bounds = list(zip([0, *starts], [*starts, len(text)], strict=True))
    for begin, end in bounds:
        chunk = text[begin:end]
        title = chunk.splitlines()[0].lstrip("# ").strip() if chunk.strip() else "-"
        yield title, chunk


def render_pages(pages: Iterable[str | Path], root: str | Path, *, check: bool = False) -> list[Problem]:
    """Re-render the include blocks of each page in place (``check``: change nothing, report what differs),
    then check the numbers; returns every problem found."""
    problems = check_published(Path(root) / PUBLISHED_DIR)
    for page in map(Path, pages):
        text = page.read_text()
        if not check:
            rendered = render_includes(text, root)
            if rendered != text:
                atomic_write_text(page, rendered)
                text = rendered
        problems += check_markdown(text, root, page=str(page))
    return problems
