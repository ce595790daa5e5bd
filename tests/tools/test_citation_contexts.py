"""A cited number backed where its sentence says what it is (tools.citations' ``in "PHRASE"``), and an uncited
section quoting no figure that looks measured but the settings it names: a 13.2% cited as the L2 worst case
and written about L∞ fails, a +4.0 written in another sense fails, a number written in two sentences needs a
context, an uncited "47 min" fails, and the same numbers in their own sentences pass."""

from __future__ import annotations

import json

import pytest

from tools.citations import CiteError, _cite, units
from tools.published import check_markdown

VERDICT = {
    "numbers": [
        {"model": "wavelet", "threat": "Linf", "eps": 0.1, "worst_case": 0.04},
        {"model": "wavelet", "threat": "L2", "eps": 1.0, "worst_case": 0.132},
        {"model": "patch", "threat": "Linf", "eps": 0.1, "worst_case": 0.0},
        {"model": "patch", "threat": "L2", "eps": 1.0, "worst_case": 0.04},
    ],
    "details": {"wavelet@Linf": {"diff": 0.04, "n_paired": 1000}},
}
WAVELET_L2 = "verdict.json.numbers[model=wavelet, threat=L2].worst_case %"
WAVELET_LINF = "verdict.json.numbers[model=wavelet, threat=Linf].worst_case %"
PATCH_L2 = "verdict.json.numbers[model=patch, threat=L2].worst_case %"
DIFF = 'verdict.json.details."wavelet@Linf".diff %'
N = 'verdict.json.details."wavelet@Linf".n_paired'


@pytest.fixture
def root(tmp_path):
    run = tmp_path / "pub" / "run"
    run.mkdir(parents=True)
    (run / "verdict.json").write_text(json.dumps(VERDICT))
    return tmp_path


def _page(prose_text: str, *cites: str) -> str:
    block = "<!-- cite: pub/run/\n" + "".join(f"{c}\n" for c in cites) + "-->\n" if cites else ""
    return f"# Title\n\n## Results\n\n{block}{prose_text}\n"


def _problems(root, prose_text, *cites) -> list[str]:
    return [str(p) for p in check_markdown(_page(prose_text, *cites), root, page="page.md")]


# ------------------------------------------------------------------------------------- cited sections


def test_a_cited_l2_number_in_a_sentence_about_linf_fails_naming_file_line_number_and_context(root):
    cite = f'13.2% = {WAVELET_L2} in "L2"'
    assert _problems(root, "The worst case leaves the wavelet ViT 13.2% at L2.", cite) == []
    (problem,) = _problems(root, "The worst case leaves the wavelet ViT 13.2% at L∞.", cite)
    assert problem.startswith("page.md:8 [Results]: '13.2%' is written where its cite line's context is not")
    assert 'expected "L2" in the same sentence' in problem
    assert "read 'The worst case leaves the wavelet ViT 13.2% at L∞.'" in problem


def test_a_number_read_with_the_previous_sentences_threat_fails_until_its_own_sentence_says_it(root):
    """The README's old wording: "leave 4.0% and 13.2%, against 0.0% for the patch ViT at L∞" reads
    13.2% as an L∞ number; the sentence must name its threat."""
    cites = [f'4.0% = {WAVELET_LINF} in "4.0% at L∞"', f'13.2% = {WAVELET_L2} in "13.2% at L2"']
    ambiguous = "The attacks leave 4.0% and 13.2%, against the patch ViT at L∞."
    problems = _problems(root, ambiguous, *cites)
    assert [p.split("'")[1] for p in problems] == ["4.0%", "13.2%"]
    assert _problems(root, "The attacks leave 4.0% at L∞ and 13.2% at L2.", *cites) == []


def test_a_signed_difference_used_in_another_sense_fails(root):
    cite = f'+4.0 = {DIFF} in "+4.0 points over the patch ViT", "L∞"'
    assert _problems(root, "At L∞ the wavelet ViT keeps +4.0 points over the patch ViT.", cite) == []
    (problem,) = _problems(
        root, "Training moved the wavelet ViT's clean accuracy by +4.0 points at L2.", cite
    )
    assert "'+4.0' is written where its cite line's context is not" in problem
    assert 'expected "+4.0 points over the patch ViT" and "L∞" in the same sentence' in problem


def test_a_number_written_in_two_sentences_needs_a_context_on_its_line(root):
    text = "We attack the first 1,000 test images.\nThe McNemar test pairs the same 1,000 images."
    (problem,) = _problems(root, text, f"1,000 = {N}")
    assert problem.startswith("page.md:8 [Results]: '1000' is written in 2 sentences (lines 8, 9)")
    assert _problems(root, text, f'1,000 = {N} in "images"') == []
    two_lines = [f'1,000 = {N} in "first 1,000 test images"', f'1,000 = {N} in "same 1,000 images"']
    assert _problems(root, text, *two_lines) == []


def test_one_value_in_two_senses_takes_one_line_per_sense(root):
    text = "The wavelet ViT keeps 4.0% at L∞. The patch ViT keeps 4.0% at L2."
    senses = [f'4.0% = {WAVELET_LINF} in "wavelet ViT", "L∞"', f'4.0% = {PATCH_L2} in "patch ViT", "L2"']
    assert _problems(root, text, *senses) == []
    swapped = "The wavelet ViT keeps 4.0% at L2. The patch ViT keeps 4.0% at L∞."
    assert len(_problems(root, swapped, *senses)) == 2
    assert "'4.0%' is written in 2 sentences" in _problems(root, text, f"4.0% = {WAVELET_LINF}")[0]


def test_a_context_no_sentence_holds_fails(root):
    problems = _problems(
        root, "It keeps 13.2% at L2.", f"13.2% = {WAVELET_L2}", f'13.2% = {WAVELET_L2} in "L∞"'
    )
    assert problems == [
        f"page.md [Results]: cite line '13.2% = {WAVELET_L2} in \"L∞\"': no sentence writing '13.2%' holds "
        '"L∞": correct its context or drop the line'
    ]


def test_a_table_cell_is_read_with_its_column_header_and_its_row(root):
    table = "| model | L∞ | L2 |\n|---|---:|---:|\n| wavelet | 4.0 | 13.2 |\n| patch | 0.0 | 4.0 |"
    cites = [
        f'4.0 = {WAVELET_LINF} in "wavelet", "L∞"',
        f'4.0 = {PATCH_L2} in "patch", "L2"',
        f'13.2 = {WAVELET_L2} in "L2"',
        f'0.0 = {WAVELET_LINF.replace("wavelet", "patch")} in "patch"',
    ]
    assert _problems(root, table, *cites) == []
    swapped = table.replace("| patch | 0.0 | 4.0 |", "| patch | 4.0 | 0.0 |")
    (problem,) = _problems(root, swapped, *cites)
    assert problem.startswith("page.md:14 [Results]: '4.0' is written where its cite line's context is not")
    assert 'expected "wavelet" and "L∞" or "patch" and "L2" in its row or its column\'s header' in problem
    assert "read '| patch | 4.0 | 0.0 |'" in problem


def test_a_time_in_words_fails_in_a_cited_section(root):
    (problem,) = _problems(root, "It took about six minutes on 1,000 images.", f"1,000 = {N}")
    assert "'six minutes' is a time in words, which no cite line can back" in problem


@pytest.mark.parametrize(
    ("line", "contexts"),
    [
        (f'13.2% = {WAVELET_L2} in "L2"', ("L2",)),
        (f'+4.0 = {DIFF} in "+4.0 points", "L∞"', ("+4.0 points", "L∞")),
        ('3 = notes.txt~"robust in "', ()),  # " in " inside a cell's quoted text is no context
        (f"13.2% = {WAVELET_L2}", ()),
    ],
)
def test_the_context_clause_is_read_after_the_cell(line, contexts):
    cite = _cite(line, "pub/run")
    assert cite.contexts == contexts
    assert " in " not in cite.cells[0].replace('"robust in "', "")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (f"13.2% = {WAVELET_L2} in L2", 'write the context in quotes after the cell: ... in "L2 1"'),
        (f'13.2% = {WAVELET_L2} in " "', "a context phrase is empty"),
    ],
)
def test_a_context_clause_it_cannot_read_is_refused(line, message):
    with pytest.raises(CiteError, match=message):
        _cite(line, "pub/run")


def test_sentences_end_where_a_reader_stops_not_at_an_abbreviation():
    section = (
        "# T\n\nSquare, e.g. at 0.1, breaks 3 of them. Carlini et al. 2019 found 4 (it ran.) Next 5!\n"
        "- an item 6\n- **Bold.** and 7\n\n`code. 8` continues the sentence 9.\n"
    )
    assert [" ".join(section[u.start : u.end].split()) for u in units(section)] == [
        "Square, e.g. at 0.1, breaks 3 of them.",
        "Carlini et al. 2019 found 4 (it ran.)",
        "Next 5!",
        "- an item 6",
        "- **Bold.**",
        "and 7",
        "`code. 8` continues the sentence 9.",
    ]


# ------------------------------------------------------------------------------------ uncited sections


def test_an_uncited_section_quoting_a_measured_time_fails_naming_its_line(tmp_path):
    text = "The escalation took 2,805 s on rank 0:\nabout 47 min of wall clock."
    problems = [str(p) for p in check_markdown(f"# T\n\n## S\n\n{text}\n", tmp_path, page="esc.md")]
    assert [p.split("'")[1] for p in problems] == ["2,805 s", "47 min"]
    assert problems[1].startswith("esc.md:6 [S]: '47 min' looks measured and names no cell")
    assert "or cut it (a time is a measurement" in problems[1]
    assert check_markdown("# T\n\n## S\n\nThe escalation ran on both ranks.\n", tmp_path) == []


def test_settings_name_a_rules_constants_but_never_a_time_or_an_accuracy(tmp_path):
    def problems(body: str) -> list[str]:
        return [p.what for p in check_markdown(f"# T\n\n## S\n\n{body}\n", tmp_path)]

    rule = "A minimum effect of 10 points; the test plants 6 of the 56 points; at 3/64 of the grid."
    assert problems(rule) and problems(f"<!-- settings: 10 points, 6 of 56, 3/64 -->\n{rule}") == []
    for entry, why in [
        (
            "47 min",
            "is a time: a time, a percentage, a ± half-width, a p-value or a multiplier is a measurement",
        ),
        ("13.2%", "is a percentage"),
        ("4.5 points", "has decimals"),
        ("2 cores", "is not one figure with a unit or a ratio"),
    ]:
        found = problems(f"<!-- settings: {entry} -->\nIt took 47 min, kept 13.2%, 4.5 points, on 2 cores.")
        assert any(f"settings entry '{entry}' {why}" in p for p in found), found
        assert any("'47 min' looks measured" in p for p in found)  # never let through
    assert problems("<!-- settings: 12 points -->\nA margin of 10 points.") == [
        "'10 points' looks measured and names no cell: add a <!-- cite: --> line for it (NUMBER = "
        "FILE[ROW].COLUMN) or, if it is a setting or a rule's constant and not a measurement, name it in the "
        "section's <!-- settings: --> comment",
        "settings entry '12 points': the section does not write it: drop it",
    ]


def test_a_settings_comment_in_a_cited_section_is_refused(root):
    problems = _problems(
        root, "<!-- settings: 10 points -->\nThe ViT keeps 13.2% at L2.", f"13.2% = {WAVELET_L2}"
    )
    assert problems == [
        "page.md [Results]: a <!-- settings: --> comment in a cited section: cite its numbers instead"
    ]
