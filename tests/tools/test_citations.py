"""Every number a page quotes tied to the file and cell it names (tools.citations): a number equal to
some other cell, a changed cell, an uncited number and a cite of a missing row all fail."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tools.citations import Files, prose, quoted_numbers
from tools.published import check_markdown

ROOT = Path(__file__).resolve().parents[2]

SUMMARY = """model,grad_mode,threat,attack,eps,n,n_robust,robust_accuracy
patch,exact,none,clean,0.0,200,172,0.86
wavelet,exact,none,clean,0.0,200,173,0.865
patch,exact,Linf,worst-case,0.1,200,19,0.095
wavelet,exact,Linf,worst-case,0.1,200,36,0.18
wavelet,blocked,Linf,worst-case,0.1,200,154,0.77
"""
# pandas' to_csv of a frame with three column levels over a (model, grad_mode) index: what table.csv is
TABLE = """threat,,none,Linf,Linf
attack,,clean,pgd,worst-case
eps,,0.0,0.1,0.1
model,grad_mode,,,
patch,exact,0.86,0.1,0.095
wavelet,exact,0.865,0.2,0.18
"""
VERDICT = {"details": {"wavelet@Linf": {"diff": 0.085, "diff_ci": [0.053, 0.117], "n_paired": 200}}}
CLAIMS = """# Claims of the source papers, tested

| claim | verdict |
|---|---|
| 1 | supported |

## 1. The wavelet tokenizer resists attacks

### fashion-mnist, L∞

Measured: wavelet 18.0% vs patch 9.5% at L∞ 0.1 (seeds 0, 1, 2).

| model | seeds | worst case % | ± |
|---|---:|---:|---:|
| patch | 3 | 9.5 | 4.1 |
| wavelet | 3 | 18.0 | 5.3 |

### cifar10, L∞

| model | seeds | worst case % | ± |
|---|---:|---:|---:|
| wavelet | 3 | 22.4 | 3.0 |
"""
TIMING = "model  seconds\npatch  84.0 s (2 ranks)\nwavelet  151.2 s (2 ranks)\n"


@pytest.fixture
def root(tmp_path):
    run = tmp_path / "pub" / "run"
    run.mkdir(parents=True)
    (run / "summary.csv").write_text(SUMMARY)
    (run / "table.csv").write_text(TABLE)
    (run / "verdict.json").write_text(json.dumps(VERDICT))
    (run / "claims.md").write_text(CLAIMS)
    (run / "timing.txt").write_text(TIMING)
    (run / "eps.csv").write_text("threat,eps,written,n\nLinf,0.03137254901960784,8/255,1000\n")
    return tmp_path


def _page(prose_text: str, *cites: str) -> str:
    block = "<!-- cite: pub/run/\n" + "".join(f"{c}\n" for c in cites) + "-->\n" if cites else ""
    return f"# Title\n\n## Results\n\n{block}{prose_text}\n"


def _problems(root, prose_text, *cites):
    return [p.what for p in check_markdown(_page(prose_text, *cites), root)]


WAVELET_CLEAN = "summary.csv[model=wavelet, attack=clean].n_robust"
N = "summary.csv[model=wavelet, attack=clean].n"

# (prose, its cite lines, the prose with one number wrong: one unit off, or another value of the files)
FORMS = {
    "bare integers": (
        "The wavelet ViT keeps 173 of 200 clean.",
        [f"173 = {WAVELET_CLEAN}", f"200 = {N}"],
        "The wavelet ViT keeps 174 of 200 clean.",
    ),
    "thousands": ("It held 1,000 points.", ["1,000 = eps.csv[threat=Linf].n"], "It held 1,001 points."),
    "range, both ends": (
        "Worst case 9.5-18.0% at L∞ 0.1.",
        [
            "9.5% = summary.csv[model=patch, attack=worst-case].robust_accuracy %",
            "18.0% = summary.csv[model=wavelet, grad_mode=exact, attack=worst-case].robust_accuracy %",
            "0.1 = summary.csv[model=patch, attack=worst-case].eps",
        ],
        "Worst case 9.5-18.1% at L∞ 0.1.",
    ),
    "fraction": (
        "At 8/255 the budget is small.",
        ["8/255 = eps.csv[threat=Linf].eps"],
        "At 9/255 the budget is small.",
    ),
    "multiplier x": (
        "The wavelet ViT keeps 1.9x the patch ViT's.",
        [
            "1.9x = summary.csv[model=wavelet, grad_mode=exact, attack=worst-case].robust_accuracy"
            " / summary.csv[model=patch, attack=worst-case].robust_accuracy"
        ],
        "The wavelet ViT keeps 1.8x the patch ViT's.",
    ),
    "multiplier ×": (
        "Blocked gradients keep 4.3× as much.",
        [
            "4.3× = summary.csv[grad_mode=blocked].robust_accuracy"
            " / summary.csv[model=wavelet, grad_mode=exact, attack=worst-case].robust_accuracy"
        ],
        "Blocked gradients keep 4.1× as much.",
    ),
    "percent with a space": (
        "Blocked: 77 % at L∞ 0.1.",
        [
            "77% = summary.csv[grad_mode=blocked].robust_accuracy %",
            "0.1 = summary.csv[grad_mode=blocked].eps",
        ],
        "Blocked: 78 % at L∞ 0.1.",
    ),
    "± half-width": (
        "Claim 1: wavelet 18.0 ± 5.3 over three seeds.",
        [
            '18.0 = claims.md@"fashion-mnist"[model=wavelet]."worst case %"',
            '±5.3 = claims.md@"fashion-mnist"[model=wavelet].±',
        ],
        "Claim 1: wavelet 18.0 ± 4.1 over three seeds.",
    ),
    "signed points and interval": (
        "A difference of +8.5 points, 95% interval [+5.3, +11.7].",
        [
            '+8.5 = verdict.json.details."wavelet@Linf".diff %',
            '+5.3 = verdict.json.details."wavelet@Linf".diff_ci.0 %',
            '+11.7 = verdict.json.details."wavelet@Linf".diff_ci.1 %',
        ],
        "A difference of +8.5 points, 95% interval [+5.3, +9.5].",
    ),
    "points as a difference of two cells": (
        "Wavelet leaves 8.5 points more than patch.",
        [
            "8.5 = summary.csv[model=wavelet, grad_mode=exact, attack=worst-case].robust_accuracy"
            " - summary.csv[model=patch, attack=worst-case].robust_accuracy %"
        ],
        "Wavelet leaves 9.5 points more than patch.",
    ),
    "wide table.csv": (
        "PGD leaves 20.0%.",
        ["20.0% = table.csv[model=wavelet, grad_mode=exact, attack=pgd].value %"],
        "PGD leaves 10.0%.",
    ),
    "text file, the number after a label": (
        "Attacking wavelet took 151.2 s on 2 ranks.",
        ['151.2 = timing.txt~"wavelet"', '2 = timing.txt~"wavelet"#2'],
        "Attacking wavelet took 84.0 s on 2 ranks.",
    ),
}


@pytest.mark.parametrize("form", list(FORMS), ids=list(FORMS))
def test_each_number_form_is_checked_against_its_cell(root, form):
    good, cites, off = FORMS[form]
    assert _problems(root, good, *cites) == []
    problems = _problems(root, off, *cites)
    assert problems, f"{off!r} passed"
    assert any("is not cited" in p or "does not write" in p for p in problems), problems


def test_a_number_equal_to_another_cell_of_the_same_file_does_not_pass(root):
    # 86.0% is patch's clean accuracy; the cite names wavelet's (86.5%): equal to some cell is not enough
    problems = _problems(
        root,
        "The wavelet ViT keeps 86.0% clean.",
        "86.0% = summary.csv[model=wavelet, attack=clean].robust_accuracy %",
    )
    assert len(problems) == 1
    assert (
        "'86.0%' is not what it cites: summary.csv[model=wavelet, attack=clean].robust_accuracy % gives 86.5"
        in problems[0]
    )


def test_a_number_with_no_cite_line_fails_even_when_a_file_holds_it(root):
    problems = _problems(
        root,
        "It keeps 86.5% and 173 points.",
        "86.5% = summary.csv[model=wavelet, attack=clean].robust_accuracy %",
    )
    assert problems == [
        "'173' (in '173') is not cited: add a line '173 = FILE[KEY=VALUE].COLUMN' to the section's "
        "<!-- cite: --> block"
    ]


@pytest.mark.parametrize(
    ("cite", "message"),
    [
        ("86.5% = nope.csv[model=wavelet].robust_accuracy %", "pub/run/nope.csv does not exist"),
        (
            "86.5% = summary.csv[model=vit].robust_accuracy %",
            "[model=vit] matches no row of pub/run/summary.csv",
        ),
        (
            "86.5% = summary.csv[model=wavelet].robust_accuracy %",
            "matches 3 rows of pub/run/summary.csv: add a key",
        ),
        ("86.5% = summary.csv[model=wavelet, attack=clean].accuracy %", "has no column or key 'accuracy'"),
        ("86.5% = summary.csv[modle=wavelet].robust_accuracy %", "has no column 'modle'"),
        ("86.5% = summary.csv[model=wavelet, attack=clean] %", "names a row or an object, not a cell"),
        ('86.5% = claims.md@"L2"[model=wavelet].±', '@"L2" matches 0 headings'),
        ("86.5% = 0.865", "names no .csv, .json, .md or .txt file"),
        ("86.5% = ../../../x.csv[a=b].c", "is outside the repository"),
    ],
)
def test_a_cite_naming_a_missing_file_row_or_column_fails_and_says_which(root, cite, message):
    problems = _problems(root, "It keeps 86.5%.", cite)
    assert any(message in p for p in problems), problems


def test_a_cite_line_for_a_number_the_prose_does_not_write_fails(root):
    problems = _problems(
        root,
        "It keeps 86.5%.",
        "86.5% = summary.csv[model=wavelet, attack=clean].robust_accuracy %",
        f"173 = {WAVELET_CLEAN}",
    )
    assert len(problems) == 1 and "the section does not write '173'" in problems[0]


def test_every_line_for_the_same_number_must_hold(root):
    first = "0.0 = summary.csv[model=patch, attack=clean].eps"
    assert _problems(root, "At eps 0.0.", first) == []
    assert _problems(root, "At eps 0.0.", first, "0.0 = summary.csv[model=patch, attack=worst-case].eps")


def test_the_problem_names_page_section_number_and_what_to_do(root):
    page = _page("It keeps 86.6%.", "86.6% = summary.csv[model=wavelet, attack=clean].robust_accuracy %")
    (problem,) = check_markdown(page, root, page="docs/results.md")
    assert str(problem).startswith("docs/results.md [Results]: '86.6%' is not what it cites")
    assert "correct the number" in str(problem)


def test_a_changed_cell_in_a_copy_of_the_readmes_published_files_fails_naming_that_cell(tmp_path):
    """The README's demo section against a copy of its published files: it passes, then one cell of the
    training summary changes (0.8532 -> 0.8533) and the check names the number and the cell."""
    shutil.copytree(ROOT / "results" / "published", tmp_path / "results" / "published")
    readme = (ROOT / "README.md").read_text()
    assert check_markdown(readme, tmp_path) == []
    summary = tmp_path / "results" / "published" / "demo-train" / "summary.csv"
    row = "patch,0,0.8532,"
    assert summary.read_text().count(row) == 1
    summary.write_text(summary.read_text().replace(row, "patch,0,0.8533,"))
    problems = [str(p) for p in check_markdown(readme, tmp_path)]
    assert problems == [
        "README.md [The demo table (`make demo`)]: '0.8532' is not what it cites: demo-train/summary.csv"
        "[model=patch].test_accuracy gives 0.8533; correct the number (or the cite, if it names the wrong cell)"
    ]


@pytest.mark.parametrize(
    "text",
    [
        "## Claim 3 at 86.5%",  # a heading
        "`--eps 0.77`, `x - 0.5`",  # code
        "```\nkeeps 99.9% in a fence\n```",
        "\n    an indented block: 42.1%\n",
        "[the page](https://example.org/a/17.5%)",  # a link target
        "torch 2.14.1, on 2026-12-01 at 21:39, git 8ad650c",  # versions, dates, times, revisions
        "Athalye, Carlini & Wagner (2018) and (TOST, Schuirmann 1987)",  # a reference's year
        "claim 3, claims 1 and 2, issue 32, step 2, stop 7, seed 0, rank 1, #12",  # numbering and identifiers
        "L2, L∞, db1, coif1, ViT-S/16, float32, bf16, x86_64, a 2-core machine, 64-bit, 1024x1024",  # names
        "a 95% Wilson interval, a 90% interval, a 95% confidence level",  # levels
        "1. a list item\n2. another",
    ],
)
def test_what_is_not_a_quoted_measurement(text):
    assert quoted_numbers(prose("# T\n" + text)) == []


def test_the_prose_forms_and_their_keys():
    keys = [
        q.key
        for q in quoted_numbers(
            prose("# T\n77 %, 95-98%, 8/255, 1.8x, 2–3×, 86.0 ± 2.2, [+4.0, −6.9], 1,000, p = 2e-5, L2 1")
        )
    ]
    assert keys == [
        "77%",
        "95%",
        "98%",
        "8/255",
        "1.8×",
        "2×",
        "3×",
        "86.0",
        "±2.2",
        "+4.0",
        "-6.9",
        "1000",
        "2e-5",
        "1",
    ]


@pytest.mark.parametrize(
    ("text", "flagged"),
    [
        ("It keeps 62.6%.", ["62.6%"]),
        ("It keeps 77 %.", ["77 %"]),
        ("86.0 ± 2.2 on 200 images", ["± 2.2"]),
        ("significant (p = 0.003)", ["0.003"]),
        ("1.8x faster, 2-3× slower", ["1.8x", "2-3×"]),
        ("a difference of +5.3, then 4.1 points", ["+5.3", "4.1 points"]),
        ("a margin of 10 points, +3 pts", ["10 points", "+3 pts"]),
        (
            "it took 2,805 s on rank 0, 2.5 min, 3 hours, about 47 min",
            ["2,805 s", "2.5 min", "3 hours", "47 min"],
        ),
        ("about six minutes on 2 cores, half an hour", ["six minutes", "half an hour"]),
        (
            "the ranks took 2,805 and 2,634 s; +8, −2, +6 points",
            ["2,805", "2,634 s", "+8", "−2", "+6 points"],
        ),
        (
            "3/64 of the points, 9 of its 38 points, 15 of the 300",
            ["3/64", "9 of its 38 points", "15 of the 300"],
        ),
        (
            "a 95% interval from chance to 100%, L∞ 0.1, L∞ 8/255, n = 1,000, −1 labels, 2 cores, 5,000 queries",
            [],
        ),
    ],
)
def test_a_section_without_cites_may_quote_no_measurement_looking_number(tmp_path, text, flagged):
    problems = [p.what for p in check_markdown(f"# T\n\n## S\n\n{text}\n", tmp_path)]
    assert [p.split("'")[1] for p in problems] == flagged


def test_the_old_source_marker_is_refused_with_what_to_do(root):
    page = "# T\n\n## S\n\n<!-- source: pub/run/summary.csv -->\nNothing.\n"
    assert [p.what for p in check_markdown(page, root)] == [
        "<!-- source: pub/run/summary.csv --> ties numbers to a file, not a cell: list each number in a "
        "<!-- cite: --> block instead"
    ]


def test_cells_read_as_written(root):
    files = Files(root / "pub" / "run")
    assert files.value("table.csv[model=patch, threat=Linf, attack=worst-case].value") == 0.095
    assert files.value("summary.csv[model=wavelet, attack=clean, eps=0].n_robust") == 173  # 0 matches 0.0
    assert files.value('claims.md@"cifar10"[model=wavelet].±') == 3.0
    assert files.value('claims.md@"fashion-mnist"~"patch "') == 9.5
    assert files.value('verdict.json.details."wavelet@Linf".diff_ci.1') == 0.117
    assert files.value('eps.csv[threat=Linf].written~"/"') == 255  # "8/255" is two numbers
    assert files.value('timing.txt~"patch"#2') == 2


def test_a_cite_comment_on_one_line_is_reported_not_ignored(root):
    page = "# T\n\n## S\n\n<!-- cite: pub/run/ 173 = summary.csv[model=wavelet, attack=clean].n_robust -->\n173 kept.\n"
    (problem,) = check_markdown(page, root)
    assert "a <!-- cite comment this check cannot read" in problem.what
