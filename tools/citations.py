"""Numbers on a Markdown page tied to the published file and cell they quote.

A section of a page that quotes measurements lists, in one or more HTML comments, where each number comes
from (paths under the comment's folder, itself relative to the repository root)::

    <!-- cite: results/published/demo/
    14.0%  = summary.csv[model=wavelet, grad_mode=blocked, attack=worst-case, eps=0.1].robust_accuracy %
    +5.3   = verdict.json.details."wavelet@Linf".diff %
    1,000  = verdict.json.details."wavelet@Linf".n_paired
    31.9   = ../demo-timing/demo_timing.csv[phase=total].minutes
    -->

The left side is the number as the prose writes it (``1,000`` and ``1000``, ``77 %`` and ``77%``, ``1.8x``
and ``1.8×`` are the same number); the right side a cell and an explicit transform:

- ``FILE[KEY=VALUE, ...].COLUMN``: the one row of a CSV file (or of the Markdown tables of a ``.md`` file)
  whose cells equal the keys (numbers compare as numbers: ``eps=0.1`` matches ``0.1`` and ``1.0`` matches
  ``1``; quote a value holding a comma: ``source="Xu, Evans & Qi 2018"``). A wide CSV with several header
  rows (``table.csv``: threat / attack / eps over model / grad_mode) is read as one row per cell, the keys
  its header and index names and the cell ``.value``.
- ``FILE.KEY.KEY``: a JSON key path; ``."KEY"`` quotes a key holding dots or ``@``, ``.0`` indexes a list,
  ``[KEY=VALUE]`` picks the one element of a list of objects.
- ``@"TEXT"``: a Markdown file's section under the one heading containing TEXT (its tables and text only).
- ``~"TEXT"``: the first number after TEXT in the cell, section or text file; ``#K`` the K-th one.
  A cell's value is its number, or its first number when it holds text ("85.8 ± 2.2", "1.46 s"; "3/64" is
  two numbers).
- transforms, written after the cell: ``%`` (× 100: a fraction quoted as a percentage or in points),
  ``× 1000`` (a unit change: any power of ten), ``A - B`` (a difference of two cells, ``A - B %`` in points)
  and ``A / B`` (a ratio, for a multiplier). Nothing else: the prose's rounding is the only other step — a
  number matches when the transformed cell rounds to it at the prose's precision (``63%`` backs 0.626).

Every number of a cited section's prose needs a line (one line backs every place the section writes that
number; several lines for the same number must all hold), every line's number must be in the prose, and
each line's cell must equal its number. What is *not* a quoted measurement, and so needs no line:
headings, code (spans, fences, indented blocks), include blocks (checked against their file as a whole),
HTML comments, link targets, dates, times, version strings and a reference's year ("(2018)"), numbering
and identifiers (``claim 3``, ``issue 32``, ``step 2``, ``seed 0``, a list item's ``1.``), numbers that are
part of a name (``L2``, ``db1``, ``coif1``, ``ViT-S/16``, ``float32``, ``2-core``, a git revision), and
confidence levels (``95% interval``). A setting the reader would type (a flag's value) belongs in
``code``. A section with no cite line may quote no measurement-looking number: a percentage (other than a
level or ``100%``), a ± half-width, a p-value, a multiplier, or a signed number or decimal of points.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# ------------------------------------------------------------------------------------------- the prose

_INCLUDE = re.compile(r"<!-- include: (?P<path>\S+) -->\n(?P<body>.*?)<!-- /include -->", re.DOTALL)
_HEADING_LINE = re.compile(r"^#{1,6} .*$", re.MULTILINE)
_FENCE = re.compile(r"^```.*?^```[^\n]*$", re.DOTALL | re.MULTILINE)
_INDENTED_CODE = re.compile(r"(?:\A|\n[ \t]*\n)((?:    [^\n]*(?:\n|\Z))+)")
_INLINE_CODE = re.compile(r"`(?:[^`\n]|\n(?![ \t]*\n))*`")
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_LINK_TARGET = re.compile(r"\]\([^)]*\)")
_DATE_TIME_VERSION = re.compile(
    r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2})?)?\b|\b\d{1,2}:\d{2}(?::\d{2})?\b|\b\d+(?:\.\d+){2,}\b"
    r"|\b(?:19|20)\d{2}[a-z]?(?=\))"  # a reference's year: "(2018)", "(TOST, Schuirmann 1987)"
)
_NUMBERING = re.compile(
    r"(?i)(?:\b(?:claims?|issues?|items?|steps?|sections?|stops?|seeds?)\s*|#)\d+(?:\s*(?:and|–|-)\s*\d+)*"
)
_LIST_MARKER = re.compile(r"^([ \t]*)\d+[.)](?=\s)", re.MULTILINE)

_DIGITS = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?(?:[eE][+\-−]?\d+)?"
# A quoted number: a ± half-width or a sign, digits (thousands separated by commas, decimals, an exponent),
# a fraction (8/255) or a range (95-98%, both ends quoted), then % (77 % too) or a multiplier (1.8x, 1.8×).
# Not part of a word or a name: no letter, dot, colon or "word-" / "word/" before, no letter after.
_QUOTED = re.compile(
    r"(?<![\w.:])(?<!\w[-/])"
    rf"(?P<pm>±\s?)?(?P<sign>[+\-−])?(?P<a>{_DIGITS})"
    rf"(?:/(?P<b>{_DIGITS})|[-–](?P<sign_c>[+\-−])?(?P<c>{_DIGITS}))?"
    r"(?P<unit>\s?%|[x×](?!\w))?"
    r"(?!\w|:\d|\.\d|[-/]\w)"
)
# A number in a cited cell or text: any written number, in names too ("15-minute"); "3/64" is two numbers.
_CELL_NUMBER = re.compile(rf"(?<![\w.])(?P<sign>[+\-−])?(?P<a>{_DIGITS})")
_LEVEL = re.compile(
    r"\s+(?:(?:Wilson|Newcombe|two-sided|one-sided|t-?|bootstrap|confidence|equivalence)\s*)*"
    r"(?:interval|confidence|CI|level)"
)
_P_VALUE = re.compile(r"\bp\s*(?:=|<|>|≤|≥)\s*$")
_POINTS = re.compile(r"\s*(?:percentage\s+)?(?:points?|pp)\b")


@dataclass(frozen=True)
class Quoted:
    """One number as the prose (or a cite line's left side) writes it."""

    text: str  # the whole match: "95-98%" for both of its ends
    key: str  # what a cite line names: no thousands commas, "-" for "−", "×" for "x", no space before %
    value: float
    tolerance: float  # half a unit of the last written digit: the prose's precision


def _number(text: str) -> tuple[float, float]:
    """(value, half a unit of its last digit) of a number as written: 1,000 / 14.0 / −2 / 1.7e-06."""
    plain = text.replace(",", "").replace("−", "-")
    mantissa, _, exponent = plain.lower().partition("e")
    decimals = len(mantissa.split(".")[1]) if "." in mantissa else 0
    return float(plain), 0.5 * 10.0 ** (int(exponent or 0) - decimals) + 1e-12


def _quoted(match: re.Match[str]) -> list[Quoted]:
    """The numbers of one match: one, or a range's two ends (with the range's unit)."""
    pm, unit = "±" if match["pm"] else "", (match["unit"] or "").strip().replace("x", "×")

    def key(sign: str | None, digits: str) -> str:
        return f"{pm}{(sign or '').replace('−', '-')}{digits.replace(',', '')}{unit}"

    if match["b"]:  # a fraction, compared at a relative 1e-4 (8/255 = 0.0313725...)
        value = _number((match["sign"] or "") + match["a"])[0] / (_number(match["b"])[0] or math.nan)
        return [Quoted(match[0], key(match["sign"], f"{match['a']}/{match['b']}"), value, 1e-4 * abs(value))]
    ends = [(match["sign"], match["a"]), *([(match["sign_c"], match["c"])] if match["c"] else [])]
    return [Quoted(match[0], key(sign, digits), *_number((sign or "") + digits)) for sign, digits in ends]


def outside_code(section: str) -> str:
    """The section with its fences and code spans blanked out (positions kept): where its markers (cite,
    unpublished) are looked for, so that a page may show one in code."""

    def blank(match: re.Match[str]) -> str:
        return re.sub(r"[^\n]", " ", match[0])  # same length: a marker found here is at its place in section

    return _INLINE_CODE.sub(blank, _FENCE.sub(blank, section))


def prose(section: str) -> str:
    """What a reader reads as quoted numbers: the section without its heading, code, include blocks,
    comments, link targets, dates, versions, numbering and list markers."""
    for pattern in (_INCLUDE, _FENCE, _COMMENT, _INDENTED_CODE):
        section = pattern.sub("\n", section)
    for pattern in (_INLINE_CODE, _LINK_TARGET):
        section = pattern.sub(" ", section)
    section = _DATE_TIME_VERSION.sub(" ", section)
    section = _NUMBERING.sub(" ", section)
    section = _LIST_MARKER.sub(r"\1-", section)
    return _HEADING_LINE.sub("", section)  # a heading quotes nothing


def quoted_numbers(text: str, *, levels: bool = False) -> list[Quoted]:
    """Every number of ``text`` (already :func:`prose`), confidence levels ("95% interval") left out unless
    ``levels``."""
    out = []
    for match in _QUOTED.finditer(text):
        if not levels and match["unit"] and "%" in match["unit"] and _LEVEL.match(text, match.end()):
            continue
        out += _quoted(match)
    return out


def measurement_like(text: str) -> list[str]:
    """The numbers of ``text`` (already :func:`prose`) that look measured: percentages (but a level or
    100%), ± half-widths, multipliers, p-values and signed numbers or decimals of points."""
    found = []
    for match in _QUOTED.finditer(text):
        unit = (match["unit"] or "").strip()
        before = text[max(0, match.start() - 8) : match.start()]
        points = "." in match["a"] and (match["sign"] or _POINTS.match(text, match.end()))
        if unit == "%":
            if _LEVEL.match(text, match.end()) or (match["a"] == "100" and not match["c"]):
                continue
            found.append(match[0])
        elif match["pm"] or unit or points or _P_VALUE.search(before):
            found.append(match[0])
    return found


# ------------------------------------------------------------------------------------------- cite lines

_CITE_MARKER = re.compile(r"<!-- cite\b")
_CITE_BLOCK = re.compile(r"<!-- cite(?::[ \t]*(?P<base>[^\s]*))?[ \t]*\n(?P<body>.*?)-->", re.DOTALL)
_TRANSFORM = re.compile(r"\s+(?:(?P<percent>%)|[×*]\s*(?P<factor>1(?:0+|e\d+)))\s*$")
_FILE = re.compile(r"(?P<file>[^\s\[\]\"~@#]+?\.(?:csv|json|md|txt))(?=[.\[~@#]|$)")
_STEP = re.compile(
    r"\[(?P<select>(?:[^\]\"]|\"[^\"]*\")*)\]"
    r"|\.\"(?P<qkey>[^\"]*)\"|\.(?P<key>[^\s.\[\]\"~@#]+)"
    r"|@\"(?P<heading>[^\"]*)\"|~\"(?P<after>[^\"]*)\"|#(?P<nth>\d+)"
)
_SELECT = re.compile(r"\s*(?P<key>[^=,\]]+?)\s*=\s*(?:\"(?P<quoted>[^\"]*)\"|(?P<value>[^,\]]*?))\s*(?:,|$)")


class CiteError(ValueError):
    """A cite line that names no cell: a missing file, row, column or key, or a cell with no number."""


@dataclass(frozen=True)
class Cite:
    """One ``NUMBER = CELL [op CELL] [transform]`` line of a cite block."""

    line: str
    number: Quoted
    cells: tuple[str, ...]  # full paths relative to the root, with their steps
    op: str  # "", "-" or "/"
    factor: float


def cite_lines(section: str) -> tuple[list[Cite], list[str]]:
    """The section's cite lines and the errors of those it cannot read."""
    cites, errors = [], []
    for block in _CITE_BLOCK.finditer(outside_code(section)):
        base = block["base"] or ""
        body = section[block.start("body") : block.end("body")]
        for line in filter(None, (raw.strip() for raw in body.splitlines())):
            try:
                cites.append(_cite(line, base))
            except CiteError as err:
                errors.append(f"cite line '{line}': {err}")
    return cites, errors


def _cite(line: str, base: str) -> Cite:
    left, eq, right = line.partition("=")
    if not eq:
        raise CiteError("write NUMBER = FILE[ROW].COLUMN")
    numbers = quoted_numbers(left.strip(), levels=True)
    if len(numbers) != 1 or numbers[0].text.strip() != left.strip():
        raise CiteError(f"'{left.strip()}' is not one number as the prose writes it (a range is two lines)")
    factor, right = 1.0, right.strip()
    if transform := _TRANSFORM.search(right):
        factor = 100.0 if transform["percent"] else float(transform["factor"])
        right = right[: transform.start()]
    masked = re.sub(r"\"[^\"]*\"", lambda m: "_" * len(m[0]), right)
    ops = list(re.finditer(r"\s([-/])\s", masked))
    if len(ops) > 1:
        raise CiteError("at most one '-' or '/' between two cells")
    parts = [right] if not ops else [right[: ops[0].start()], right[ops[0].end() :]]
    cells = tuple(_join(base, part.strip()) for part in parts)
    return Cite(line, numbers[0], cells, ops[0][1] if ops else "", factor)


def _join(base: str, cell: str) -> str:
    if not _FILE.match(cell):
        raise CiteError(f"'{cell}' names no .csv, .json, .md or .txt file")
    return str(Path(base) / cell) if base else cell


# ------------------------------------------------------------------------------------------ their cells


class Files:
    """The cited files of one check, each read once."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self._read: dict[str, Any] = {}

    def value(self, cell: str) -> float:
        """The number at ``cell`` (``FILE`` then its steps)."""
        match = _FILE.match(cell)
        if match is None:
            raise CiteError(f"'{cell}' names no file")
        path, rest = match["file"], cell[match.end() :]
        at: Any = self._load(path)
        nth, after = 1, None
        for step in _steps(rest, cell):
            if step["select"] is not None:
                at = _select(at, _selector(step["select"]), path)
            elif step["key"] is not None or step["qkey"] is not None:
                at = _key(at, step["qkey"] if step["qkey"] is not None else step["key"], path)
            elif step["heading"] is not None:
                at = _heading(at, step["heading"], path)
            elif step["after"] is not None:
                at, after = _after(at, step["after"], path), step["after"]
            else:
                nth = int(step["nth"])
        return _cell_number(at, nth, path, after)

    def _load(self, path: str) -> Any:
        if path not in self._read:
            file = self.root / path
            if not file.resolve().is_relative_to(self.root.resolve()):
                raise CiteError(f"{path} is outside the repository: cite a file under results/published/")
            if not file.is_file():
                raise CiteError(
                    f"{path} does not exist: publish its run (python -m tools.docs publish) or fix the path"
                )
            text = file.read_text()
            self._read[path] = (
                _csv_rows(text)
                if file.suffix == ".csv"
                else json.loads(text)
                if file.suffix == ".json"
                else _Text(text, markdown=file.suffix == ".md")
            )
        return self._read[path]


@dataclass(frozen=True)
class _Text:
    """A Markdown or text file, or a section of one."""

    text: str
    markdown: bool


def _steps(rest: str, cell: str) -> list[re.Match[str]]:
    steps, at = [], 0
    while at < len(rest):
        step = _STEP.match(rest, at)
        if step is None:
            raise CiteError(
                f'cannot read \'{rest[at:]}\' in {cell}: use [KEY=VALUE], .COLUMN, @"HEADING", ~"TEXT"'
            )
        steps.append(step)
        at = step.end()
    return steps


def _selector(text: str) -> dict[str, str]:
    pairs, at = {}, 0
    while at < len(text):
        pair = _SELECT.match(text, at)
        if pair is None or pair.end() == at:
            raise CiteError(f"cannot read the row selector [{text}]: write [KEY=VALUE, ...]")
        pairs[pair["key"]] = pair["quoted"] if pair["quoted"] is not None else pair["value"]
        at = pair.end()
    return pairs


def _csv_rows(text: str) -> list[dict[str, str]]:
    """A CSV's rows as dicts; a wide one with several header rows (pandas' MultiIndex) one row per cell."""
    rows = list(csv.reader(io.StringIO(text)))
    for i, row in enumerate(rows[1:8], start=1):
        filled = [bool(c) for c in row]
        width = filled.index(False) if False in filled else len(row)
        index_names = 0 < width < len(row) and not any(filled[width:])
        if index_names and all(r and r[0] and not any(r[1:width]) for r in rows[:i]):
            return _melted(rows[:i], row[:width], rows[i + 1 :])
    header, body = rows[0], rows[1:]
    return [dict(zip(header, r, strict=False)) for r in body]


def _melted(levels: list[list[str]], index: list[str], body: list[list[str]]) -> list[dict[str, str]]:
    width = len(index)
    out = []
    for row in body:
        for column in range(width, len(row)):
            keys = {level[0]: level[column] for level in levels}
            out.append({**dict(zip(index, row[:width], strict=True)), **keys, "value": row[column]})
    return out


def _md_rows(text: str) -> list[dict[str, str]]:
    rows, header = [], None
    for line in [*text.splitlines(), ""]:
        if not line.lstrip().startswith("|"):
            header = None
            continue
        cells = [_plain(c) for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if header is None:
            header = cells
        elif not all(re.fullmatch(r":?-+:?", c) for c in cells):
            rows.append(dict(zip(header, cells, strict=False)))
    return rows


def _plain(cell: str) -> str:
    return cell.strip().replace("**", "").replace("`", "").replace("\\|", "|").strip()


def _equal(cell: Any, wanted: str) -> bool:
    cell = _plain(str(cell))
    if cell == wanted.strip():
        return True
    try:
        return math.isclose(float(cell), float(wanted), rel_tol=1e-12)
    except ValueError:
        return False


def _select(at: Any, keys: dict[str, str], path: str) -> dict[str, Any]:
    rows = _md_rows(at.text) if isinstance(at, _Text) else at
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise CiteError(f"{path}: [{_show(keys)}] selects a row of a table or a list of objects, not of this")
    unknown = [k for k in keys if not any(k in r for r in rows)]
    if unknown:
        columns = sorted({k for r in rows for k in r})
        raise CiteError(f"{path} has no column '{unknown[0]}' (its columns: {', '.join(columns)})")
    found = [r for r in rows if all(k in r and _equal(r[k], v) for k, v in keys.items())]
    if not found:
        raise CiteError(f"[{_show(keys)}] matches no row of {path}")
    if len(found) > 1:
        raise CiteError(
            f"[{_show(keys)}] matches {len(found)} rows of {path}: add a key that tells them apart"
        )
    return found[0]


def _show(keys: dict[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in keys.items())


def _key(at: Any, key: str, path: str) -> Any:
    if isinstance(at, dict):
        if key not in at:
            raise CiteError(f"{path} has no column or key '{key}' here (there: {', '.join(map(str, at))})")
        return at[key]
    if isinstance(at, list) and key.isdigit() and int(key) < len(at):
        return at[int(key)]
    raise CiteError(f"{path}: .{key} names nothing here (not a key of an object, nor an index of a list)")


def _heading(at: Any, text: str, path: str) -> _Text:
    if not isinstance(at, _Text) or not at.markdown:
        raise CiteError(f'{path}: @"{text}" picks a section of a Markdown file')
    headings = [m for m in re.finditer(r"^(#{1,6}) (.*)$", at.text, re.MULTILINE) if text in m[2]]
    if len(headings) != 1:
        raise CiteError(f'@"{text}" matches {len(headings)} headings of {path}: name one')
    level = len(headings[0][1])
    end = re.compile(rf"^#{{1,{level}}} ", re.MULTILINE).search(at.text, headings[0].end())
    return _Text(at.text[headings[0].end() : end.start() if end else len(at.text)], markdown=True)


def _after(at: Any, text: str, path: str) -> str:
    body = at.text if isinstance(at, _Text) else str(at)
    if text not in body:
        raise CiteError(f"'{text}' is not in {path} there")
    return body[body.index(text) + len(text) :]


def _cell_number(at: Any, nth: int, path: str, after: str | None) -> float:
    if isinstance(at, bool) or at is None:
        raise CiteError(f"{path}: the cell is {at!r}, not a number")
    if isinstance(at, int | float):
        return float(at)
    if isinstance(at, dict | list):
        raise CiteError(f"{path}: this names a row or an object, not a cell: add .COLUMN or .KEY")
    text = at.text if isinstance(at, _Text) else str(at)
    values = [_cell_value(m) for m in _CELL_NUMBER.finditer(text)]
    if len(values) < nth:
        where = f" after '{after}'" if after is not None else ""
        raise CiteError(f"{path}: '{text[:60].strip()}'{where} holds {len(values)} numbers, not {nth}")
    return values[nth - 1]


def _cell_value(match: re.Match[str]) -> float:
    return (-1.0 if match["sign"] in ("-", "−") else 1.0) * _number(match["a"])[0]


# ------------------------------------------------------------------------------------------- the check


@dataclass(frozen=True)
class Problem:
    """One number or block of a Markdown page that its published file does not back."""

    page: str
    section: str
    what: str

    def __str__(self) -> str:
        return f"{self.page} [{self.section}]: {self.what}"


def check_section(page: str, title: str, section: str, files: Files) -> list[Problem]:
    """A cited section: every quoted number named by a line whose cell equals it; an uncited one: no
    measurement-looking number."""
    text = prose(section)
    markers = len(_CITE_MARKER.findall(outside_code(section)))
    if markers != len(_CITE_BLOCK.findall(outside_code(section))):
        return [
            Problem(
                page,
                title,
                "a <!-- cite comment this check cannot read: write '<!-- cite: FOLDER', then one "
                "'NUMBER = FILE[KEY=VALUE].COLUMN' per line, then '-->' on its own line",
            )
        ]
    if not markers:
        return [
            Problem(
                page,
                title,
                f"'{number}' looks measured and names no cell: add a <!-- cite: --> line "
                "for it (NUMBER = FILE[ROW].COLUMN) or write it as a setting in `code`",
            )
            for number in measurement_like(text)
        ]
    cites, errors = cite_lines(section)
    problems = [Problem(page, title, error) for error in errors]
    quoted = quoted_numbers(text)
    keys = {q.key for q in quoted}
    cited = {c.number.key for c in cites}
    for q in _unique(quoted):
        if q.key not in cited:
            problems.append(
                Problem(
                    page,
                    title,
                    f"'{q.key}' (in '{q.text}') is not cited: add a line "
                    f"'{q.key} = FILE[KEY=VALUE].COLUMN' to the section's <!-- cite: --> block",
                )
            )
    for cite in cites:
        if cite.number.key not in keys:
            problems.append(
                Problem(
                    page,
                    title,
                    f"cite line '{cite.line}': the section does not write "
                    f"'{cite.number.key}': drop the line or correct its number",
                )
            )
            continue
        problems += [Problem(page, title, what) for what in _mismatch(cite, files)]
    return problems


def _unique(quoted: Iterable[Quoted]) -> list[Quoted]:
    return list({q.key: q for q in quoted}.values())


def _mismatch(cite: Cite, files: Files) -> list[str]:
    try:
        values = [files.value(cell) for cell in cite.cells]
        value = cite.factor * (values[0] if not cite.op else _combine(cite.op, *values))
    except CiteError as err:
        return [f"'{cite.number.key}': {err}"]
    if abs(value - cite.number.value) <= cite.number.tolerance:
        return []
    return [
        f"'{cite.number.key}' is not what it cites: {' '.join(cite.line.partition('=')[2].split())} "
        f"gives {value:.6g}; correct the number (or the cite, if it names the wrong cell)"
    ]


def _combine(op: str, a: float, b: float) -> float:
    if op == "-":
        return a - b
    if b == 0:
        raise CiteError("the ratio's denominator is 0")
    return a / b
