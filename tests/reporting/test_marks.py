"""Cells whose model and gradient mode failed a gradient check (or lost their gradient with no escalation) are
marked in table.txt, table.csv / summary.csv and table.tex, and the verdict never quotes them as robustness.

The candidate here would be "robust under all attacks" on its numbers alone (85% in every mode against a
baseline at 4%); marked in every mode it becomes "unverified" and its number is stated only as an upper
bound. Marked in its blocked mode alone (the zoo wavelet's case) its category is what the numbers say.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from robustbench_wave.analysis.verdict import (
    BOUND_UNDECIDED,
    NO_ADVANTAGE,
    ROBUST_THESE_NETWORKS,
    UNCHECKED,
    UNVERIFIED,
)
from robustbench_wave.evaluation.trust import Standing, Trust
from robustbench_wave.reporting.markdown import comparison_markdown
from robustbench_wave.reporting.runs import RunFolder
from robustbench_wave.reporting.tables import MARK, MARK_COLUMN, MARK_LEGEND, write_tables
from robustbench_wave.reporting.verdict_text import verdict
from tests.support.masking_models import baseline_spec, masking_spec, synthetic_records
from tests.support.trust import checked

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
    honest = verdict(records, num_classes=4, threats=("Linf",), trust=checked(records))
    assert honest.categories == {"wavelet@Linf": ROBUST_THESE_NETWORKS}
    assert "**wavelet** keeps **85.0%**" in honest.text  # quoted as robustness when nothing is marked
    marked = verdict(records, num_classes=4, threats=("Linf",), trust=checked(records, ALL_MARKED))
    assert marked.categories == {"wavelet@Linf": UNVERIFIED}
    assert "keeps **85.0%**" not in marked.text and "robust under all attacks" not in marked.text
    assert "is an upper bound, not a robust accuracy" in marked.text
    assert marked.headline.startswith("unverified for wavelet@Linf")
    assert marked.details["wavelet@Linf"]["unverified_modes"] == {
        m: ALL_MARKED[("wavelet", m)] for m in MODES
    }
    # one mode marked (the zoo wavelet's blocked mode): the category stands, the mode is named
    one = verdict(
        records, num_classes=4, threats=("Linf",), trust=checked(records, {("wavelet", "blocked"): "x"})
    )
    assert one.categories == {"wavelet@Linf": ROBUST_THESE_NETWORKS}
    assert one.details["wavelet@Linf"]["unverified_modes"] == {"blocked": "x"}


def test_an_upper_bound_never_reads_more_robust_in_words_or_json() -> None:
    """The published demo's shape: the candidate's every mode failed a check, its upper bound is far above the
    baseline at one budget and within the minimum effect at another. Upper bounds can rule an advantage out
    (against a verified baseline); they never establish one: no 'more robust', no 'advantage ends', no
    ``above_baseline`` true, in the text or in verdict.json's fields."""
    candidate = masking_spec(blocked=85, exact=85, bpda=85, square=85, transfer=85)
    records = pd.concat(
        [synthetic_records("wavelet", candidate), synthetic_records("patch", baseline_spec())],
        ignore_index=True,
    )
    v = verdict(records, num_classes=4, threats=("Linf",), trust=checked(records, ALL_MARKED))
    d = v.details["wavelet@Linf"]
    assert v.categories == {"wavelet@Linf": UNVERIFIED} and d["upper_bound"] is True
    assert d["comparison"] == d["outcome"] == BOUND_UNDECIDED and d["above_baseline"] is None
    assert "architecture" not in d and d.get("advantage_eps", []) == []
    assert "more robust" not in v.text and "advantage ends" not in v.text
    assert "establishes no advantage" in v.text
    # the same upper bound within the minimum effect of a verified baseline: no advantage, even so
    close = masking_spec(blocked=9, exact=5, bpda=5, square=5, transfer=5)
    near = pd.concat(
        [synthetic_records("wavelet", close), synthetic_records("patch", baseline_spec())], ignore_index=True
    )
    w = verdict(near, num_classes=4, threats=("Linf",), trust=checked(near, ALL_MARKED))
    assert w.details["wavelet@Linf"]["outcome"] == NO_ADVANTAGE
    assert "Even this upper bound shows no advantage" in w.text and "not supported" in w.headline
    # ... but not against a baseline that is an upper bound itself
    both = {**ALL_MARKED, ("patch", "exact"): "failed gradient checks: x"}
    b = verdict(near, num_classes=4, threats=("Linf",), trust=checked(near, both))
    assert b.details["wavelet@Linf"]["outcome"] == BOUND_UNDECIDED


def test_no_checklist_no_robustness() -> None:
    """A run whose checklist did not run (``--no-diagnostics``, or a library call without a Trust) carries no
    marks, yet nothing in it may be called robust: the candidate is *unchecked*."""
    records = _records()
    v = verdict(records, num_classes=4, threats=("Linf",))  # no trust: no checklist
    assert v.categories == {"wavelet@Linf": UNCHECKED}
    assert "robust under all attacks" not in v.text and "more robust" not in v.text
    assert v.headline.startswith("unchecked for wavelet@Linf")
    trust = Trust.from_run({"models": {"wavelet": {"grad_modes": list(MODES)}}}, None)
    assert trust.standing("wavelet") is Standing.UNCHECKED and not trust.marks


def test_a_lost_gradient_stays_marked_when_it_is_escalated() -> None:
    """The escalation's gradient-free and transfer attacks lower the number; they do not give the gradient
    attacks a gradient: a model escalated at the scan keeps its mark (issue 39)."""
    path = {
        "summary": "s",
        "modes": ["exact"],
        "exact_gradient": False,
        "bpda_gradient": False,
        "findings": [],
    }
    meta = {"models": {"m": {"grad_modes": ["exact"], "gradient_path": path}}}
    assert list(Trust.from_run(meta, None).marks) == [("m", "exact")]
    meta["models"]["m"]["escalation"] = {"stage": "scan"}
    escalated = Trust.from_run(meta, None)
    assert list(escalated.marks) == [("m", "exact")] and "escalated" in escalated.marks[("m", "exact")]
    assert escalated.standing("m") is Standing.UNVERIFIED


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
