"""Numbers on a Markdown page tied to the published file and cell they quote.

A section of a page that quotes measurements lists, in one or more HTML comments, where each number comes
from (paths under the comment's folder, itself relative to the repository root)::

    <!-- cite: results/published/demo/
    14.0%  = summary.csv[model=wavelet, grad_mode=blocked, attack=worst-case, eps=0.1].robust_accuracy %
    +5.3   = verdict.json.details."wavelet@Linf".diff % in "+5.3 points", "L∞ 0.1"
    13.2%  = verdict.json.numbers[model=wavelet, threat=L2].worst_case % in "13.2% at L2 1"
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
- last, optionally, its context: ``in "PHRASE", "PHRASE"``. The line then backs its number only in a
  sentence (or table cell) that holds every phrase (case, emphasis, code marks and line breaks aside). A
  phrase may hold the number itself (``"13.2% at L2 1"``) to bind it to the words beside it.

Every number of a cited section's prose needs a line, every line's number must be in the prose, and each
line's cell must equal its number (several lines for the same number must all hold). A number means what
its sentence says, so each place the section writes it must be backed there: by a line whose context that
sentence holds, or, when the section writes the number in one sentence only, by a line with no context. A
number written in two sentences needs contexts; written in two senses with the same value, one line per
sense. A sentence ends at ``.``, ``!`` or ``?`` before a space (not "e.g.", "et al."), at a blank line, a
list item or a table; a table cell is read with its column's header and its row. The check cannot tell two
numbers of one sentence apart: a phrase holding the number can.

What is *not* a quoted measurement, and so needs no line: headings, code (spans, fences, indented blocks),
include blocks (checked against their file as a whole), HTML comments, link targets, dates, times, version
strings and a reference's year ("(2018)"), numbering and identifiers (``claim 3``, ``issue 32``, ``step 2``,
``seed 0``, ``rank 0``, a list item's ``1.``), numbers that are part of a name (``L2``, ``db1``, ``coif1``,
``ViT-S/16``, ``float32``, ``2-core``, a git revision), and confidence levels (``95% interval``). A setting
the reader would type (a flag's value) belongs in ``code``.

A section with no cite line may quote no figure that looks measured: a percentage (other than a level or
``100%``), a ± half-width, a p-value, a multiplier (``2.5x``), a number of points (``10 points``, or a
signed decimal), a time (``47 min``, ``2,805 s``, ``six minutes``), a fraction (``3/64``; not a budget after
its threat, ``L∞ 8/255``) or a ratio (``9 of 38``); the numbers of a list share the unit of its last one
(``2,805 and 2,634 s``, ``+8, −2, +6 points``). Plain counts (``2 cores``, ``5,000 queries``) are not
figures. A rule's constant or a setting with a unit (``10 points``, a test's planted ``6 of 56``) is named
in the section's ``<!-- settings: 10 points, 6 of 56 -->``: a whole number of points, a fraction or a
ratio, never a percentage, a time, a ± half-width, a p-value or a multiplier (only a measurement is one),
and every entry written by the section. A time in words is refused in a cited section too: no line can
back it.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import pairwise
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
    r"(?i)(?:\b(?:claims?|issues?|items?|steps?|sections?|stops?|seeds?|ranks?)\s*|#)\d+(?:\s*(?:and|–|-)\s*\d+)*"
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
_POINTS = re.compile(r"\s*(?:percentage\s+)?(?:points?|pts|pp)\b")


@dataclass(frozen=True)
class Quoted:
    """One number as the prose (or a cite line's left side) writes it."""

    text: str  # the whole match: "95-98%" for both of its ends
    key: str  # what a cite line names: no thousands commas, "-" for "−", "×" for "x", no space before %
    value: float
    tolerance: float  # half a unit of the last written digit: the prose's precision
    at: int = field(default=0, compare=False)  # where it starts in the text it was read from


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
        written = key(match["sign"], f"{match['a']}/{match['b']}")
        return [Quoted(match[0], written, value, 1e-4 * abs(value), match.start())]
    ends = [(match["sign"], match["a"], match.start())]
    if match["c"]:
        ends.append((match["sign_c"], match["c"], match.start("c")))
    return [
        Quoted(match[0], key(sign, digits), *_number((sign or "") + digits), at) for sign, digits, at in ends
    ]


def _blank(match: re.Match[str]) -> str:
    """The match as spaces, its line breaks kept: what is cut stays at its place, so a position found in
    the result is the same in the section (its line, its sentence)."""
    return re.sub(r"[^\n]", " ", match[0])


def outside_code(section: str) -> str:
    """The section with its fences and code spans blanked out (positions kept): where its markers (cite,
    settings, unpublished) are looked for, so that a page may show one in code."""
    return _INLINE_CODE.sub(_blank, _FENCE.sub(_blank, section))


def _layout(section: str) -> str:
    """The section with what stands between its paragraphs blanked out: include blocks, fences, comments,
    indented code. A line blank here ends a paragraph; a line of code spans does not. A comment is one
    outside code: a page showing `<!-- cite: FOLDER` in a code span hides none of its prose."""
    for pattern in (_INCLUDE, _FENCE):
        section = pattern.sub(_blank, section)
    for comment in _COMMENT.finditer(_INLINE_CODE.sub(_blank, section)):
        section = section[: comment.start()] + _blank(comment) + section[comment.end() :]
    return _INDENTED_CODE.sub(_blank, section)


def prose(section: str) -> str:
    """What a reader reads as quoted numbers: the section without its heading, code, include blocks,
    comments, link targets, dates, versions, numbering and list markers, each blanked out where it was
    (same length, same lines)."""
    section = _layout(section)
    for pattern in (_INLINE_CODE, _LINK_TARGET, _DATE_TIME_VERSION, _NUMBERING):
        section = pattern.sub(_blank, section)
    section = _LIST_MARKER.sub(lambda m: m[1] + "-" + " " * (len(m[0]) - len(m[1]) - 1), section)
    return _HEADING_LINE.sub(_blank, section)  # a heading quotes nothing


def quoted_numbers(text: str, *, levels: bool = False) -> list[Quoted]:
    """Every number of ``text`` (already :func:`prose`), confidence levels ("95% interval") left out unless
    ``levels``."""
    out = []
    for match in _QUOTED.finditer(text):
        if not levels and match["unit"] and "%" in match["unit"] and _LEVEL.match(text, match.end()):
            continue
        out += _quoted(match)
    return out


# ----------------------------------------------------------------------------- figures of uncited prose

_TIME = re.compile(r"\s?(?P<unit>ms|s|secs?|seconds?|min|mins|minutes?|h|hrs?|hours?|days?)\b")
_OF = re.compile(r"\s+of\s+(?:the\s+|its\s+|their\s+)?")
_LIST_GAP = re.compile(r"\s*(?:,|,?\s*\b(?:and|or|to)\b)\s*")  # between the numbers of a list
_BUDGET = re.compile(r"(?:L∞|Linf|L\d|eps|ε)\s*=?\s*$")  # "L∞ 8/255": a budget, written after its threat
_NUMBER_WORD = (
    r"one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|fifteen|twenty|thirty|forty|fifty"
    r"|sixty|ninety|a\s+hundred|half\s+an?"
)
_SPELLED_TIME = re.compile(
    rf"(?i)\b(?:{_NUMBER_WORD})(?:[\s-]+(?:{_NUMBER_WORD}))*\s+(?:seconds?|minutes?|hours?|days?)\b"
)
_TIME_UNITS = {"ms": "ms", "s": "s", "sec": "s", "secs": "s", "second": "s", "seconds": "s", "min": "min",
               "mins": "min", "minute": "min", "minutes": "min", "h": "h", "hr": "h", "hrs": "h", "hour": "h",
               "hours": "h", "day": "days", "days": "days"}  # fmt: skip
#: What a setting or a rule's constant can be (``10 points``, ``8/255``, ``6 of 56``): never a percentage,
#: a time, a ± half-width, a p-value or a multiplier, which on these pages only a measurement is.
SETTING_KINDS = frozenset({"points", "fraction", "ratio"})
_KIND_NAMES = {"percent": "a percentage", "half-width": "a ± half-width", "multiplier": "a multiplier",
               "p-value": "a p-value", "points": "a decimal of points", "time": "a time",
               "fraction": "a fraction of decimals", "ratio": "a ratio"}  # fmt: skip


@dataclass(frozen=True)
class Figure:
    """A number written with a unit, or a ratio: what a measurement looks like on a page."""

    text: str  # as written: "2,805 s", "± 2.2", "15 of the 300 points", "six minutes"
    key: str  # what a settings entry names: "2805 s", "±2.2", "15 of 300", "10 points"
    kind: str  # percent, half-width, multiplier, p-value, points, time, fraction or ratio
    at: int  # where it starts in the text
    unit: str = ""  # what the numbers of a list before it share: "%", " points", " min"


def figures(text: str) -> list[Figure]:
    """The figures of ``text`` (already :func:`prose`) that look measured: percentages (but a level or
    100%), ± half-widths, multipliers, p-values, points, times (in words too: "six minutes"), fractions
    (but a budget after its threat, "L∞ 8/255") and ratios ("9 of its 38")."""
    found: list[Figure] = []
    listed: list[re.Match[str]] = []  # plain numbers of a list whose last one may bring the unit
    for match in _QUOTED.finditer(text):
        if found and match.start() < found[-1].at + len(found[-1].text):
            continue  # the second number of a ratio
        if listed and not _LIST_GAP.fullmatch(text, listed[-1].end(), match.start()):
            listed = []
        figure = _ratio(text, match) or _figure(text, match)
        if figure is None:
            listed += [match] if not any(match[g] for g in ("pm", "unit", "b", "c")) else []
            continue
        found += [_sharing(m, figure) for m in listed if figure.unit]  # "2,805 and 2,634 s"
        found.append(figure)
        listed = []
    found += spelled_times(text)
    return sorted(found, key=lambda f: f.at)


def _sharing(match: re.Match[str], figure: Figure) -> Figure:
    """A number of a list ("+8, −2, +6 points") with the unit of the figure that ends it."""
    return Figure(match[0], _figure_key(match[0]) + figure.unit, figure.kind, match.start(), figure.unit)


def spelled_times(text: str) -> list[Figure]:
    """Times written in words ("about six minutes"): no cite line can back one, so none may stand."""
    return [
        Figure(m[0], " ".join(m[0].casefold().split()), "time", m.start())
        for m in _SPELLED_TIME.finditer(text)
    ]


def _figure(text: str, match: re.Match[str]) -> Figure | None:
    unit, end, key = (match["unit"] or "").strip(), match.end(), _figure_key(match[0])
    if unit == "%":
        level = _LEVEL.match(text, end) or (match["a"] == "100" and not match["c"])
        return None if level else Figure(match[0], key, "percent", match.start(), "%")
    if match["pm"]:
        return Figure(match[0], key, "half-width", match.start())
    if unit:
        return Figure(match[0], key, "multiplier", match.start(), "×")
    if _P_VALUE.search(text[max(0, match.start() - 8) : match.start()]):
        return Figure(match[0], key, "p-value", match.start())
    if points := _POINTS.match(text, end):
        return Figure(text[match.start() : points.end()], f"{key} points", "points", match.start(), " points")
    if time := _TIME.match(text, end):
        unit = f" {_TIME_UNITS[time['unit'].lower()]}"
        return Figure(text[match.start() : time.end()], f"{key}{unit}", "time", match.start(), unit)
    if "." in match["a"] and match["sign"]:  # a signed decimal: a difference in points
        return Figure(match[0], key, "points", match.start())
    if match["b"] and not _BUDGET.search(text[max(0, match.start() - 12) : match.start()]):
        return Figure(match[0], key, "fraction", match.start())
    return None


def _ratio(text: str, match: re.Match[str]) -> Figure | None:
    """``N of M`` (``9 of its 38``, ``15 of the 300 points``) as one figure, M's unit word included."""
    if (
        any(match[g] for g in ("pm", "unit", "b", "c"))
        or "." in match["a"]
        or not (of := _OF.match(text, match.end()))
    ):
        return None
    second = _QUOTED.match(text, of.end())
    if second is None or any(second[g] for g in ("pm", "sign", "unit", "b", "c")) or "." in second["a"]:
        return None
    end = points.end() if (points := _POINTS.match(text, second.end())) else second.end()
    key = f"{_figure_key(match[0])} of {_figure_key(second[0])}"
    return Figure(text[match.start() : end], key, "ratio", match.start())


def may_be_setting(figure: Figure) -> bool:
    """Whether a settings entry may name ``figure``: whole numbers of points, fractions and ratios only."""
    return figure.kind in SETTING_KINDS and "." not in figure.key


def _figure_key(written: str) -> str:
    return re.sub(r"\s+", "", written).replace(",", "").replace("−", "-").replace("x", "×")


_SETTINGS = re.compile(r"<!-- settings:(?P<body>.*?)-->", re.DOTALL)


def settings_entries(section: str) -> tuple[dict[str, str], list[str]]:
    """The figures a section's ``<!-- settings: 10 points, 8/255 -->`` comments name as settings or a rule's
    constants, not measurements (key -> entry as written), and the errors of the entries it refuses."""
    allowed, errors = {}, []
    for block in _SETTINGS.finditer(outside_code(section)):
        for entry in filter(None, (e.strip() for e in re.split(r",\s+|;|\n", block["body"]))):
            found = figures(entry)
            if len(found) != 1 or " ".join(found[0].text.split()) != " ".join(entry.split()):
                errors.append(
                    f"settings entry '{entry}' is not one figure with a unit or a ratio (10 points, 8/255, "
                    "6 of 56): a plain count needs no entry"
                )
            elif found[0].kind not in SETTING_KINDS:
                errors.append(
                    f"settings entry '{entry}' is {_KIND_NAMES[found[0].kind]}: a time, a percentage, a ± "
                    "half-width, a p-value or a multiplier is a measurement, never a setting: cite it or cut it"
                )
            elif not may_be_setting(found[0]):
                errors.append(
                    f"settings entry '{entry}' has decimals: a setting or a rule's constant is a whole number, "
                    "a decimal a measurement's precision: cite it"
                )
            else:
                allowed[found[0].key] = entry
    return allowed, errors


# ------------------------------------------------------------------------------------------- sentences

_ITEM = re.compile(r"[ \t]*(?:[-*+]|\d+[.)])[ \t]")  # a list item's first line
_SENTENCE_END = re.compile(r"[.!?][\"')\]*_]*(?=\s|\Z)")
_ABBREVIATION = re.compile(r"(?i)\b(?:e\.g|i\.e|et al|vs|cf|etc|approx|resp|fig|eq|no)$")


@dataclass(frozen=True)
class Unit:
    """A sentence, or a table cell (read with its column's header and its row): where a number's meaning is
    stated."""

    start: int
    end: int
    context: str  # its text as a cite line's context is looked for in it (:func:`normal`)
    cell: bool = False  # a table cell: a problem shows its row


def normal(text: str) -> str:
    """Text as a context phrase is compared: no emphasis or code marks, one space, case folded."""
    return " ".join(re.sub(r"[*`]", "", text).replace("−", "-").split()).casefold()


def units(section: str) -> list[Unit]:
    """The section's sentences and table cells, in order. A sentence ends at ``.``, ``!`` or ``?`` before a
    space (not after "e.g.", "et al." and the like), at a blank line and where a list item or table starts;
    its text is the section's, with comments and link targets cut, code spans kept."""
    text, source = prose(section), _LINK_TARGET.sub(_blank, _COMMENT.sub(_blank, section))
    out: list[Unit] = []
    start: int | None = None  # of the open paragraph or list item
    header: tuple[int, int] | None = None  # the open table's first row
    at = 0
    for line in _HEADING_LINE.sub(_blank, _layout(section)).splitlines(keepends=True):
        begin, at = at, at + len(line)
        body = line.strip()
        if start is not None and (not body or body.startswith("|") or _ITEM.match(line)):
            out += _sentences(text, source, start, begin)
            start = None
        if body.startswith("|"):
            header = header or (begin, at)
            out += _cells(text, source, (begin, at), header)
            continue
        header = None
        if body and start is None:
            start = begin
    if start is not None:
        out += _sentences(text, source, start, len(text))
    return out


def _cells(text: str, source: str, row: tuple[int, int], header: tuple[int, int]) -> list[Unit]:
    """A table row's cells, each read with its column's header and its row: "84.0" in the row of the
    512-image run, under "wavelet/blocked"."""
    heads = [source[a:b] for a, b in _cell_spans(text, *header)]
    out = []
    for column, (a, b) in enumerate(_cell_spans(text, *row)):
        head = heads[column] if row != header and column < len(heads) else ""
        out.append(Unit(a, b, normal(f"{head} | {source[row[0] : row[1]]}"), cell=True))
    return out


def _cell_spans(text: str, start: int, end: int) -> list[tuple[int, int]]:
    row = text[start:end].rstrip()
    bars = [m.start() for m in re.finditer(r"(?<!\\)\|", row)]
    if not row.endswith("|"):  # a row may leave out its closing bar
        bars.append(len(row))
    return [(start + a + 1, start + b) for a, b in pairwise(bars)]


def _sentences(text: str, source: str, start: int, end: int) -> list[Unit]:
    out, at = [], start
    for stop in _SENTENCE_END.finditer(text, start, end):
        if _ABBREVIATION.search(text, max(at, stop.start() - 8), stop.start()):
            continue
        out.append(Unit(at, stop.end(), normal(source[at : stop.end()])))
        at = stop.end()
    if text[at:end].strip():
        out.append(Unit(at, end, normal(source[at:end])))
    return out


def unit_at(found: list[Unit], at: int) -> Unit:
    """The unit holding position ``at`` (a quoted number's)."""
    return next((u for u in found if u.start <= at < u.end), Unit(at, at + 1, ""))


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
_CONTEXT = re.compile(r"\s+in\s+(?P<phrases>\"[^\"]*\"(?:\s*,\s*\"[^\"]*\")*)\s*$")
_QUOTES = re.compile(r"\"([^\"]*)\"")
_SELECT = re.compile(r"\s*(?P<key>[^=,\]]+?)\s*=\s*(?:\"(?P<quoted>[^\"]*)\"|(?P<value>[^,\]]*?))\s*(?:,|$)")


class CiteError(ValueError):
    """A cite line that names no cell: a missing file, row, column or key, or a cell with no number."""


@dataclass(frozen=True)
class Cite:
    """One ``NUMBER = CELL [op CELL] [transform] [in "PHRASE", ...]`` line of a cite block."""

    line: str
    number: Quoted
    cells: tuple[str, ...]  # full paths relative to the root, with their steps
    op: str  # "", "-" or "/"
    factor: float
    contexts: tuple[str, ...] = ()  # phrases its sentence must hold (compared as :func:`normal`)

    @property
    def cell_text(self) -> str:
        """The line's cell and transform as written, without its context (what a problem quotes)."""
        return " ".join(_contexts(self.line.partition("=")[2].strip())[0].split())

    def backs(self, unit: Unit) -> bool:
        """Whether this line backs its number where ``unit`` writes it: every context phrase is there."""
        return all(normal(phrase) in unit.context for phrase in self.contexts)


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
    right, contexts = _contexts(right.strip())
    factor = 1.0
    if transform := _TRANSFORM.search(right):
        factor = 100.0 if transform["percent"] else float(transform["factor"])
        right = right[: transform.start()]
    masked = re.sub(r"\"[^\"]*\"", lambda m: "_" * len(m[0]), right)
    ops = list(re.finditer(r"\s([-/])\s", masked))
    if len(ops) > 1:
        raise CiteError("at most one '-' or '/' between two cells")
    parts = [right] if not ops else [right[: ops[0].start()], right[ops[0].end() :]]
    cells = tuple(_join(base, part.strip()) for part in parts)
    return Cite(line, numbers[0], cells, ops[0][1] if ops else "", factor, contexts)


def _contexts(right: str) -> tuple[str, tuple[str, ...]]:
    """A cite line's right side without its ``in "PHRASE", ...`` clause, and that clause's phrases."""
    masked = _QUOTES.sub(lambda m: "_" * len(m[0]), right)
    clause = _CONTEXT.search(right)
    if clause is not None and masked[clause.start() : clause.start("phrases")].strip() == "in":
        phrases = tuple(_QUOTES.findall(clause["phrases"]))
        if not all(map(normal, phrases)):
            raise CiteError('a context phrase is empty: write in "WORDS OF ITS SENTENCE"')
        return right[: clause.start()], phrases
    if re.search(r"\sin\s", masked):
        raise CiteError('write the context in quotes after the cell: ... in "L2 1"')
    return right, ()


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
    line: int | None = None  # the page's line, where the problem is one place of the prose

    def __str__(self) -> str:
        where = f"{self.page}:{self.line}" if self.line is not None else self.page
        return f"{where} [{self.section}]: {self.what}"


@dataclass(frozen=True)
class _Section:
    """One section under check: where it starts on its page, for the problems' lines."""

    page: str
    title: str
    markdown: str
    first_line: int

    def line(self, at: int) -> int:
        """The page's line of position ``at`` of the section."""
        return self.first_line + self.markdown.count("\n", 0, at)

    def problem(self, what: str, at: int | None = None) -> Problem:
        return Problem(self.page, self.title, what, None if at is None else self.line(at))


def check_section(page: str, title: str, section: str, files: Files, first_line: int = 1) -> list[Problem]:
    """A cited section: every quoted number named by a line whose cell equals it and whose context its
    sentence holds; an uncited one: no figure that looks measured but the settings it names.
    ``first_line``: the page's line the section starts at (for the problems' lines)."""
    where = _Section(page, title, section, first_line)
    markers = len(_CITE_MARKER.findall(outside_code(section)))
    if markers != len(_CITE_BLOCK.findall(outside_code(section))):
        return [
            where.problem(
                "a <!-- cite comment this check cannot read: write '<!-- cite: FOLDER', then one "
                "'NUMBER = FILE[KEY=VALUE].COLUMN' per line, then '-->' on its own line"
            )
        ]
    if not markers:
        return _check_uncited(where, prose(section))
    return _check_cited(where, prose(section), files)


def _check_cited(where: _Section, text: str, files: Files) -> list[Problem]:
    """Every number of the prose with a line, every line's number in the prose, its cell equal to it, and
    each place the number is written backed there (:func:`_context_problems`)."""
    problems = [
        where.problem(
            f"'{t.text}' is a time in words, which no cite line can back: write it in figures and cite it, "
            "or cut it",
            t.at,
        )
        for t in spelled_times(text)
    ]
    if _SETTINGS.search(outside_code(where.markdown)):
        problems.append(
            where.problem("a <!-- settings: --> comment in a cited section: cite its numbers instead")
        )
    cites, errors = cite_lines(where.markdown)
    problems += [where.problem(error) for error in errors]
    quoted = quoted_numbers(text)
    keys = {q.key for q in quoted}
    cited = {c.number.key for c in cites}
    problems += [
        where.problem(
            f"'{q.key}' (in '{q.text}') is not cited: add a line '{q.key} = FILE[KEY=VALUE].COLUMN' to the "
            "section's <!-- cite: --> block"
        )
        for q in _unique(quoted)
        if q.key not in cited
    ]
    for cite in cites:
        if cite.number.key not in keys:
            problems.append(
                where.problem(
                    f"cite line '{cite.line}': the section does not write "
                    f"'{cite.number.key}': drop the line or correct its number"
                )
            )
        else:
            problems += [where.problem(what) for what in _mismatch(cite, files)]
    return problems + _context_problems(where, cites, quoted)


def _check_uncited(where: _Section, text: str) -> list[Problem]:
    """No figure that looks measured, but those its ``<!-- settings: -->`` comments name."""
    allowed, errors = settings_entries(where.markdown)
    problems = [where.problem(error) for error in errors]
    named = set()
    for figure in figures(text):
        if may_be_setting(figure) and figure.key in allowed:
            named.add(figure.key)
            continue
        instead = (
            "or, if it is a setting or a rule's constant and not a measurement, name it in the section's "
            "<!-- settings: --> comment"
            if may_be_setting(figure)
            else f"or cut it ({_KIND_NAMES[figure.kind]} is a measurement; a setting the reader types belongs in "
            "`code`)"
        )
        problems.append(
            where.problem(
                f"'{figure.text}' looks measured and names no cell: add a <!-- cite: --> line for it "
                f"(NUMBER = FILE[ROW].COLUMN) {instead}",
                figure.at,
            )
        )
    problems += [
        where.problem(f"settings entry '{entry}': the section does not write it: drop it")
        for key, entry in allowed.items()
        if key not in named
    ]
    return problems


def _context_problems(where: _Section, cites: list[Cite], quoted: list[Quoted]) -> list[Problem]:
    """Each place a cited number is written backed by one of its lines: a line with a context where the
    sentence holds it, a line without one only where the section writes the number in one sentence."""
    found = units(where.markdown)
    problems = []
    for key in dict.fromkeys(c.number.key for c in cites):
        lines = [c for c in cites if c.number.key == key]
        places = [(q, unit_at(found, q.at)) for q in quoted if q.key == key]
        if not places:
            continue  # the section does not write it: reported with the line
        free = [c for c in lines if not c.contexts]
        if free and len({u for _, u in places}) > 1 and not all(_backed(lines, u) for _, u in places):
            problems.append(_ambiguous(where, key, places))
            continue
        unbacked = [(q, u) for q, u in places if not free and not _backed(lines, u)]
        problems += [_out_of_context(where, q, u, lines) for q, u in unbacked]
        if not unbacked:
            problems += [
                where.problem(
                    f"cite line '{c.line}': no sentence writing '{key}' holds {_phrases(c)}: "
                    "correct its context or drop the line"
                )
                for c in lines
                if c.contexts and not any(c.backs(u) for _, u in places)
            ]
    return problems


def _backed(lines: list[Cite], unit: Unit) -> bool:
    return any(c.contexts and c.backs(unit) for c in lines)


def _ambiguous(where: _Section, key: str, places: list[tuple[Quoted, Unit]]) -> Problem:
    lines = sorted({where.line(q.at) for q, _ in places})
    return where.problem(
        f"'{key}' is written in {len({u for _, u in places})} sentences (lines "
        f"{', '.join(map(str, lines))}) and a cite line with no context backs a number written in "
        f'one only: give its line a context its sentences share (... in "PHRASE"), or one line per sense',
        places[0][0].at,
    )


def _out_of_context(where: _Section, q: Quoted, unit: Unit, lines: list[Cite]) -> Problem:
    expected = " or ".join(_phrases(c) for c in lines)
    text = where.markdown
    if unit.cell:  # read with its row and its column's header: show the row
        start, end = text.rfind("\n", 0, q.at) + 1, text.find("\n", q.at)
        end = len(text) if end < 0 else end
    else:
        start, end = unit.start, unit.end
    place = "its row or its column's header" if unit.cell else "the same sentence"
    return where.problem(
        f"'{q.key}' is written where its cite line's context is not: expected {expected} in {place}, read "
        f"'{_excerpt(' '.join(text[start:end].split()), q.text)}': reword it or cite this use on its own line",
        q.at,
    )


def _phrases(cite: Cite) -> str:
    return " and ".join(f'"{p}"' for p in cite.contexts) if cite.contexts else "no context"


def _excerpt(sentence: str, number: str, width: int = 90) -> str:
    at = max(0, sentence.find(number) - width // 2)
    cut = sentence[at : at + width]
    return ("…" if at else "") + cut + ("…" if at + width < len(sentence) else "")


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
        f"'{cite.number.key}' is not what it cites: {cite.cell_text} "
        f"gives {value:.6g}; correct the number (or the cite, if it names the wrong cell)"
    ]


def _combine(op: str, a: float, b: float) -> float:
    if op == "-":
        return a - b
    if b == 0:
        raise CiteError("the ratio's denominator is 0")
    return a / b
