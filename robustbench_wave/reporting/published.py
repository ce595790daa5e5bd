"""Published results: the small summary files of a documented run, kept under version control, and the
Markdown that quotes them.

A number in a README should be one the code wrote. :func:`publish` copies a run's summary files (tables,
verdict, checklist, claims — never records or weights) into ``results/published/<name>/`` with
``source.json``: the command that made them, the git revision, the date, the library versions and each
file's sha256. A Markdown page then quotes them in two ways, both checked by :func:`check_markdown`:

- ``<!-- include: PATH -->`` … ``<!-- /include -->``: the block between the markers *is* the file
  (``.txt`` in a ``text`` fence, ``.md`` as it is, ``.csv`` as a Markdown table); :func:`render_includes`
  rewrites it from the file.
- ``<!-- source: PATH -->``: every number written in that section's prose (a percentage, a decimal, a
  signed number of points) must be a value of one of the section's files — as the file writes it, or a
  fraction the file holds written as a percentage at the prose's precision. A percentage in a section
  with no source is an error: a measured number needs its file.
- ``<!-- unpublished: REASON -->``: a section quoting measurements made before their summary files were
  kept (or on another machine). It is not checked, and :func:`unpublished_sections` lists it, so a page
  can be held to having none (the README is).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from robustbench_wave.io import atomic_write, atomic_write_json, atomic_write_text, provenance
from robustbench_wave.reporting.tables import WORST_CASE_HEADING

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
_FENCE = re.compile(r"^```.*?^```[^\n]*$", re.DOTALL | re.MULTILINE)
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_LINK_TARGET = re.compile(r"\]\([^)]*\)")
# A quoted number: optional sign, digits, optional decimals, optional percent sign; not part of a word, a
# version (2.14.1), a date (2026-12-01) or a file name.
_NUMBER = re.compile(r"(?<![\w.\-/])([+\-−]?\d+(?:\.\d+)?)(%?)(?![\w.\-/]*\w)")
_LEVEL = re.compile(
    r"\s+(?:(?:Wilson|Newcombe|two-sided|one-sided|t-?|bootstrap|confidence)\s*)*(?:interval|confidence|CI)"
)
_FILE_NUMBER = re.compile(r"[+\-−]?\d+(?:\.\d+)?(?:[eE][+\-]?\d+)?")


@dataclass(frozen=True)
class Problem:
    """One number or block of a Markdown page that its published file does not back."""

    page: str
    section: str
    what: str

    def __str__(self) -> str:
        return f"{self.page} [{self.section}]: {self.what}"


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
    dest.mkdir(parents=True, exist_ok=True)
    digests = {}
    for path in files:
        atomic_write(dest / path.name, lambda tmp, src=path: shutil.copyfile(src, tmp))
        digests[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    _write_worst_case(dest)
    atomic_write_json(dest / SOURCE_FILE, _source_record(source, command, digests))
    return dest


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


def _source_record(source: Path, command: str | None, digests: dict[str, str]) -> dict[str, Any]:
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
        "files": digests,
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
        raise ValueError(f"included file {path} does not exist: publish its run first (report publish)")
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
    """Every include block equal to its file, every number in a sourced section one of its files' values,
    and no percentage in a section without a source. Returns the problems (empty: the page is backed)."""
    root = Path(root)
    problems = []
    if render_includes(text, root) != text:
        stale = [m["path"] for m in _INCLUDE.finditer(text) if _include_is_stale(m, root)]
        problems += [Problem(page, "-", f"include block of {path} differs from the file") for path in stale]
    for title, section in _sections(text):
        if not _UNPUBLISHED.search(section):
            problems += _check_section(page, title, section, root)
    return problems


def unpublished_sections(text: str) -> list[tuple[str, str]]:
    """(section title, reason) of every section marked as quoting unpublished measurements."""
    return [
        (title, m["reason"]) for title, section in _sections(text) for m in _UNPUBLISHED.finditer(section)
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


def _check_section(page: str, title: str, section: str, root: Path) -> list[Problem]:
    paths = [m["path"] for m in _INCLUDE.finditer(section)] + [m["path"] for m in _SOURCE.finditer(section)]
    quoted = list(_quoted_numbers(section))
    if not paths:
        return [
            Problem(page, title, f"'{value}%' is quoted with no published file (add <!-- source: PATH -->)")
            for value, percent in quoted
            if percent
        ]
    missing = [p for p in paths if not (root / p).is_file()]
    if missing:
        return [Problem(page, title, f"source {p} does not exist") for p in missing]
    values = _file_values(root / p for p in paths)
    return [
        Problem(page, title, f"'{value}{percent}' is in none of {', '.join(paths)}")
        for value, percent in quoted
        if not _backed(value, bool(percent), values)
    ]


def _prose(section: str) -> str:
    """The section without code, include blocks, comments and link targets: what a reader reads as prose."""
    for pattern in (_INCLUDE, _FENCE, _COMMENT, _INLINE_CODE, _LINK_TARGET):
        section = pattern.sub(" ", section)
    lines = section.splitlines()
    return "\n".join(lines[1:] if lines and _HEADING.match(lines[0]) else lines)  # a heading quotes nothing


def _quoted_numbers(section: str) -> Iterable[tuple[str, str]]:
    prose = _prose(section)
    for match in _NUMBER.finditer(prose):
        value, percent = match.group(1), match.group(2)
        if percent and (value == "100" or _LEVEL.match(prose, match.end())):
            continue  # a scale's end or a confidence level ("95% Wilson interval"), not a measurement
        if percent or "." in value or value[0] in "+-−":
            yield value, percent


def _file_values(paths: Iterable[Path]) -> list[float]:
    values = []
    for path in paths:
        values += [float(v.replace("−", "-")) for v in _FILE_NUMBER.findall(path.read_text())]
    return values


def _backed(value: str, percent: bool, values: list[float]) -> bool:
    """Whether ``value`` (as the prose writes it) is a file value at the prose's precision, or — for a
    percentage or a number of points — a fraction of the file written in percent."""
    number = float(value.replace("−", "-"))
    decimals = len(value.split(".")[1]) if "." in value else 0
    tolerance = 0.5 * 10.0**-decimals + 1e-9
    for candidate in values:
        if abs(candidate - number) <= tolerance:
            return True
        if abs(candidate) <= 1.0 and abs(100.0 * candidate - number) <= tolerance:
            return True
    return False


def render_pages(pages: Iterable[str | Path], root: str | Path, *, check: bool = False) -> list[Problem]:
    """Re-render the include blocks of each page in place (``check``: change nothing, report what differs),
    then check the numbers; returns every problem found."""
    problems: list[Problem] = []
    for page in map(Path, pages):
        text = page.read_text()
        if not check:
            rendered = render_includes(text, root)
            if rendered != text:
                atomic_write_text(page, rendered)
                text = rendered
        problems += check_markdown(text, root, page=str(page))
    return problems
