"""Cells whose model and gradient mode failed a gradient check (or lost their gradient with no escalation) are
marked in table.txt, table.csv / summary.csv and table.tex, and the verdict never quotes them as robustness.

The candidate here would be "robust under all attacks" on its numbers alone (85% in every mode against a
baseline at 4%); marked in every mode it becomes "unverified" and its number is stated only as an upper
bound. Marked in its blocked mode alone (the zoo wavelet's case) its category is what the numbers say.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from robustbench_wave.analysis.verdict import ROBUST, UNVERIFIED, unverified_cells
from robustbench_wave.reporting.markdown import comparison_markdown
from robustbench_wave.reporting.runs import RunFolder
from robustbench_wave.reporting.tables import MARK, MARK_COLUMN, MARK_LEGEND, write_tables
from robustbench_wave.reporting.verdict_text import verdict
from tests.support.masking_models import baseline_spec, masking_spec, synthetic_records

MODES = ("exact", "blocked", "bpda")
ALL_MARKED = {("wavelet", m): "failed gradient checks: gradient_health" for m in MODES}


def _records() -> pd.DataFrame:
    honest = masking_spec(blocked=85, exact=85, bpda=85, square=85, transfer=85)
    return pd.concat(
        [synthetic_records("wavelet", honest), synthetic_records("patch", baseline_spec())], ignore_index=True
    )


def test_marks_appear_in_the_three_table_formats(tmp_path: Path) -> None:
    records = _records()
    marks = {("wavelet", "blocked"): "failed gradient checks: gradient_health"}
    paths = write_tables(records, tmp_path, marks=marks)
    text = paths["text"].read_text(encoding="utf-8")
    lines = text.splitlines()
    blocked = next(line for line in lines if line.startswith("wavelet/blocked"))
    assert blocked.count(MARK) == 1 and blocked.rstrip().endswith(MARK)  # its attack cell, not clean
    assert not any(MARK in line for line in lines if line.startswith(("wavelet/exact", "patch/")))
    assert MARK_LEGEND in lines
    tex = paths["latex"].read_text(encoding="utf-8")
    summary = pd.read_csv(paths["summary"])
    cells = summary[(summary["model"] == "wavelet") & (summary["grad_mode"] == "blocked")]
    assert tex.count(r"$^\dagger$") == (cells["attack"] != "clean").sum() + 1  # each attack cell + the legend
    assert r"\caption{" in tex and tex.split(r"\caption{")[1].split("}")[0].count(r"$^\dagger$") == 1
    table = pd.read_csv(paths["table"], header=[0, 1, 2], index_col=[0, 1])
    flags = table.xs(MARK_COLUMN, axis=1, level=0).iloc[:, 0]
    assert flags.to_dict() == {
        ("wavelet", "exact"): False, ("wavelet", "blocked"): True, ("wavelet", "bpda"): False,
        ("wavelet", "worst"): False, ("patch", "exact"): False,
    }  # fmt: skip
    marked = summary[summary[MARK_COLUMN]]
    assert set(zip(marked["model"], marked["grad_mode"])) == {("wavelet", "blocked")}
    assert (marked["attack"] != "clean").all()


def test_the_worst_over_modes_row_is_marked_when_every_mode_is(tmp_path: Path) -> None:
    paths = write_tables(_records(), tmp_path, marks=ALL_MARKED)
    summary = pd.read_csv(paths["summary"])
    worst = summary[(summary["model"] == "wavelet") & (summary["grad_mode"] == "worst")]
    assert worst[MARK_COLUMN].to_list() == (worst["attack"] != "clean").to_list()  # clean is no robustness
    assert worst[MARK_COLUMN].any() and not summary[summary["model"] == "patch"][MARK_COLUMN].any()


def test_without_marks_the_tables_are_as_before(tmp_path: Path) -> None:
    paths = write_tables(_records(), tmp_path)
    assert MARK not in paths["text"].read_text(encoding="utf-8")
    assert MARK_COLUMN not in paths["summary"].read_text(encoding="utf-8")
    assert r"\dagger" not in paths["latex"].read_text(encoding="utf-8")


def test_the_verdict_never_quotes_a_marked_cell_as_robustness() -> None:
    records = _records()
    honest = verdict(records, num_classes=4, threats=("Linf",))
    assert honest.categories == {"wavelet@Linf": ROBUST}
    assert "**wavelet** keeps **85.0%**" in honest.text  # quoted as robustness when nothing is marked
    marked = verdict(records, num_classes=4, threats=("Linf",), unverified=ALL_MARKED)
    assert marked.categories == {"wavelet@Linf": UNVERIFIED}
    assert "keeps **85.0%**" not in marked.text and "robust under all attacks" not in marked.text
    assert (
        "is an upper bound from attacks that could not follow the gradient, not a robust accuracy"
        in marked.text
    )
    assert marked.headline.startswith("unverified for wavelet@Linf")
    assert marked.details["wavelet@Linf"]["unverified_modes"] == {
        m: ALL_MARKED[("wavelet", m)] for m in MODES
    }
    # one mode marked (the zoo wavelet's blocked mode): the category stands, the mode is named
    one = verdict(records, num_classes=4, threats=("Linf",), unverified={("wavelet", "blocked"): "x"})
    assert one.categories == {"wavelet@Linf": ROBUST}
    assert one.details["wavelet@Linf"]["unverified_modes"] == {"blocked": "x"}


def test_a_lost_gradient_is_marked_until_it_is_escalated() -> None:
    path = {
        "summary": "s",
        "modes": ["exact"],
        "exact_gradient": False,
        "bpda_gradient": False,
        "findings": [],
    }
    meta = {"models": {"m": {"grad_modes": ["exact"], "gradient_path": path}}}
    assert list(unverified_cells(meta, [])) == [("m", "exact")]
    meta["models"]["m"]["escalation"] = {"stage": "scan"}
    assert unverified_cells(meta, []) == {}


def test_the_report_marks_the_failed_modes_cells(tmp_path: Path) -> None:
    diagnostics = [
        {"model": "wavelet", "checks": [{"name": "gradient_health", "grad_mode": "blocked", "passed": False}]}
    ]
    meta = {"models": {"wavelet": {"grad_modes": list(MODES)}, "patch": {"grad_modes": ["exact"]}}}
    text = comparison_markdown([RunFolder(tmp_path, _records(), meta, diagnostics)])
    header = next(line for line in text.splitlines() if line.startswith("| threat"))
    blocked = header.split(" | ").index("wavelet / blocked")
    rows = [line.split(" | ") for line in text.splitlines() if line.startswith("| Linf")]
    assert rows and all(r[blocked].endswith(MARK) for r in rows)
    assert not any(MARK in cell for r in rows for i, cell in enumerate(r) if i != blocked)
    assert MARK_LEGEND in text
