"""Every table rendering of robust accuracy: CSV, LaTeX, terminal text and Markdown, from per-example records.

The numbers come from :mod:`robustbench_wave.evaluation.metrics` (worst case, Wilson intervals); this module
only lays them out, so ``python -m robustbench_wave.report RUN`` rebuilds identical tables without re-running
attacks. Cells are robust accuracy over all evaluated examples (clean errors count as non-robust) with a 95%
Wilson interval, or, over several runs (training seeds), mean ± standard deviation (:func:`seed_summary`).
The ``worst-case`` columns take, per example, the AND over clean and every attack of that threat at that eps or
a smaller one; the ``worst`` row per model takes the AND over its gradient modes. With ``skip_broken`` (the
default) a column is cumulative over the suite's earlier attacks, as in AutoAttack's logs.

Files (:func:`write_tables`): ``summary.csv`` (tidy, numeric: n, n_robust, robust_accuracy, ci_low, ci_high),
``table.csv`` (wide, robust accuracy as a fraction), ``table.tex`` (booktabs; percent ± half-width of the
Wilson interval), ``table_worst.tex`` (only clean and worst-case columns), ``table.txt`` (the terminal
rendering) and, after a cross-check, ``crosscheck.csv``. Common corruptions (an average-case axis, never in
a worst case) get their own files when the records hold them: ``corruptions.csv`` (tidy: accuracy per
model, corruption and severity, severity 0 = clean, with Wilson intervals), ``corruptions_summary.csv`` (one
row per model: clean accuracy, accuracy per corruption averaged over severities 1-5, mean corruption
accuracy, mCE and relative mCE against the baseline model) and ``corruptions.tex``; ``table.txt`` ends with
that summary.

Marks: after the gradient-masking checklist (:func:`write_tables` with ``marks``, from
:class:`robustbench_wave.evaluation.trust.Trust`'s marks), every attack cell of a (model, gradient mode)
that failed a gradient check -- or whose gradient the scan found lost or unhandled with no escalation run --
carries :data:`MARK` (``†``; LaTeX a dagger), the worst-over-modes row when every mode of its model
does, and a legend line (:data:`MARK_LEGEND`) follows the table (the LaTeX caption ends with it); in the CSVs
the boolean column :data:`MARK_COLUMN` says the same per row. Such a cell is an upper bound from attacks
that could not follow the gradient, not robustness. Without ``marks`` (before the checklist ran) the files
are as they always were. The attack command prints table.txt once, after the checklist, with its marks; with
no checklist, with :data:`NO_CHECKLIST_NOTE` below it (on the terminal only, never in a file).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import pandas as pd

from robustbench_wave.analysis.formatting import DASH, number, percent
from robustbench_wave.core.io import atomic_write_text
from robustbench_wave.evaluation.meta_sections import SettingsMeta, SuiteMeta
from robustbench_wave.evaluation.metrics import (
    CLEAN_THREAT,
    WORST,
    WORST_MODE,
    backend_agreement,
    corruption_accuracy,
    corruption_errors,
    corruption_summary,
    default_baseline,
    summarize,
)

#: The files :func:`write_tables` writes, by the key of the paths it returns.
TABLE_FILES = {
    "summary": "summary.csv",
    "table": "table.csv",
    "latex": "table.tex",
    "latex_worst": "table_worst.tex",
    "text": "table.txt",
    "crosscheck": "crosscheck.csv",
    "corruptions": "corruptions.csv",
    "corruptions_summary": "corruptions_summary.csv",
    "corruptions_latex": "corruptions.tex",
}
ROW_KEYS = ["model", "grad_mode"]
COL_KEYS = ["threat", "attack", "eps"]
LATEX_THREAT = {
    CLEAN_THREAT: "clean",
    "Linf": r"$\ell_\infty$",
    "L2": r"$\ell_2$",
    "L0": r"$\ell_0$ (pixel fraction)",
}


def format_eps(eps: float) -> str:
    """Short label: '0.1', '2', or 'k/255' when the value is a multiple of 1/255 without a short decimal."""
    short = f"{eps:.4g}"
    if float(short) == eps:
        return short
    frac = Fraction(eps).limit_denominator(255)
    if 255 % frac.denominator == 0 and abs(float(frac) - eps) < 1e-12:
        return f"{frac.numerator * (255 // frac.denominator)}/255"
    return short


#: The suffix of a marked cell, in text and LaTeX, and the CSVs' column saying which rows are marked.
MARK, LATEX_MARK, MARK_COLUMN = "†", r"$^\dagger$", "gradient_check_failed"
MARK_LEGEND = (
    "† this model and gradient mode failed a gradient check (diagnostics.csv), or the scan found its gradient lost "
    "(escalated or not): an upper bound from attacks that could not follow the gradient, not robustness"
)
#: The line the attack command prints under the table (never written in a file) when no gradient-masking
#: checklist ran (diagnostics off), and under the suite's table when the checklist did not finish.
NO_CHECKLIST_NOTE = (
    "no gradient-masking checklist ran (diagnostics off), so no attack cell is verified: each is an upper "
    "bound from the suite's attacks alone"
)
UNFINISHED_CHECKLIST_NOTE = (
    "the gradient-masking checklist did not finish, so no attack cell is verified: each is an upper bound "
    "from the suite's attacks alone"
)


def with_marks(summary: pd.DataFrame, marks: Mapping[tuple[str, str], str]) -> pd.DataFrame:
    """``summary`` with the boolean :data:`MARK_COLUMN`: the row's (model, grad_mode) is in ``marks`` (the
    ``worst`` row: every mode of its model is) and it is no clean row."""
    modes = summary[summary["grad_mode"] != WORST_MODE].groupby("model", sort=False)["grad_mode"].agg(set)

    def marked(model: str, mode: str) -> bool:
        if mode == WORST_MODE:
            return all((model, m) in marks for m in modes.get(model, ()))
        return (model, mode) in marks

    flags = [
        t != CLEAN_THREAT and marked(str(m), str(g))
        for m, g, t in zip(summary["model"], summary["grad_mode"], summary["threat"])
    ]
    return summary.assign(**{MARK_COLUMN: pd.Series(flags, index=summary.index, dtype=bool)})


def _marked(summary: pd.DataFrame) -> bool:
    return MARK_COLUMN in summary.columns and bool(summary[MARK_COLUMN].any())


def seed_summary(summaries: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Several runs (training seeds) in the layout of :func:`metrics.summarize`: ``robust_accuracy`` is the mean,
    ``sd`` the standard deviation over runs (NaN for one run), ``runs`` their count, and ``ci_low``/``ci_high``
    the band mean ∓ sd clipped to [0, 1] (a spread, not a confidence interval)."""
    keys = [*ROW_KEYS, *COL_KEYS]
    allsum = pd.concat(list(summaries), ignore_index=True)
    out = allsum.groupby(keys, sort=False)["robust_accuracy"].agg(["mean", "std", "count"]).reset_index()
    out = out.rename(columns={"mean": "robust_accuracy", "std": "sd", "count": "runs"})
    spread = out["sd"].fillna(0.0)
    out["ci_low"] = (out["robust_accuracy"] - spread).clip(0, 1)
    out["ci_high"] = (out["robust_accuracy"] + spread).clip(0, 1)
    return out


def _ordered_pivot(summary: pd.DataFrame, values: str | pd.Series) -> pd.DataFrame:
    rows = list(dict.fromkeys(zip(summary["model"], summary["grad_mode"])))
    cols = list(dict.fromkeys(zip(summary["threat"], summary["attack"], summary["eps"])))
    if isinstance(values, pd.Series):
        summary = summary.assign(_value=values)
        values = "_value"
    wide = summary.pivot(index=ROW_KEYS, columns=COL_KEYS, values=values)
    return wide.reindex(
        index=pd.MultiIndex.from_tuples(rows, names=ROW_KEYS),
        columns=pd.MultiIndex.from_tuples(cols, names=COL_KEYS),
    )


def comparison_table(summary: pd.DataFrame, value: str = "robust_accuracy") -> pd.DataFrame:
    """Wide numeric table: rows (model, grad_mode), columns (threat, attack, eps); with :data:`MARK_COLUMN`
    in ``summary``, a last column of that name (True: the row's attack cells are marked)."""
    wide = _ordered_pivot(summary, value)
    if MARK_COLUMN in summary.columns:
        rows = summary.groupby(ROW_KEYS, sort=False)[MARK_COLUMN].any()
        wide[(MARK_COLUMN, "", "")] = [bool(rows.get(key, False)) for key in wide.index]
    return wide


def _width(summary: pd.DataFrame) -> pd.Series:
    """Twice what follows '±': two standard deviations of a :func:`seed_summary`, else the Wilson interval."""
    if "sd" in summary.columns:
        return 2 * summary["sd"]
    return summary["ci_high"] - summary["ci_low"]


def _cell(value: float, width: float, pm: str) -> str:
    """'acc ± width/2' in percent; '--' for a missing value, no '±' part for a missing width."""
    return number(value, width / 2, scale=100.0, pm=pm, missing=DASH)


def formatted_table(summary: pd.DataFrame, pm: str = " ± ", mark: str = MARK) -> pd.DataFrame:
    """Wide table of strings 'acc ± half-width' in percent (a :func:`metrics.summarize` or
    :func:`seed_summary`); a cell of a row :data:`MARK_COLUMN` marks ends with ``mark``."""
    acc = _ordered_pivot(summary, "robust_accuracy")
    width = _ordered_pivot(summary, _width(summary))
    flags = _ordered_pivot(summary, summary[MARK_COLUMN].astype(object)) if _marked(summary) else None
    out = acc.copy().astype(object)
    for c in acc.columns:
        out[c] = [_cell(a, w, pm) for a, w in zip(acc[c], width[c])]
        if flags is not None:
            out[c] = [f"{v}{mark}" if f is True else v for v, f in zip(out[c], flags[c])]
    out.columns = pd.MultiIndex.from_tuples(
        [(t, a, format_eps(e)) for t, a, e in acc.columns], names=COL_KEYS
    )
    return out


def by_column(table: pd.DataFrame, sep: str = "/") -> pd.DataFrame:
    """A :func:`formatted_table` transposed for reading (the table is wide): one row per threat/attack/eps
    (threat and eps blank on the clean row), one column per ``model{sep}grad_mode``."""
    out = table.T
    out.columns = [f"{m}{sep}{g}" for m, g in out.columns]
    out.index = pd.MultiIndex.from_tuples(
        [(t, a, e) if t != CLEAN_THREAT else ("", a, "") for t, a, e in out.index], names=COL_KEYS
    )
    return out


#: The line of table.txt above its headline block (the per-example worst case, one row per model/mode).
WORST_CASE_HEADING = "worst case over the whole suite (per example; 'worst' rows: over gradient modes too):"


def worst_case_summary(summary: pd.DataFrame) -> pd.DataFrame:
    """Only clean accuracy and the per-threat worst case: the headline numbers."""
    keep = (summary["threat"] == CLEAN_THREAT) | (summary["attack"] == WORST)
    return summary[keep].reset_index(drop=True)


def render_terminal(summary: pd.DataFrame, title: str = "") -> str:
    """Readable text: the full table by column (:func:`by_column`), then the headline worst case with one row
    per model/mode."""
    head = formatted_table(worst_case_summary(summary))
    head.columns = [("clean" if t == CLEAN_THREAT else f"{t} {e}") for t, _, e in head.columns]
    head.index = [f"{m}/{g}" for m, g in head.index]
    lines = [title] if title else []
    lines.append(by_column(formatted_table(summary)).rename_axis([None] * 3).to_string(sparsify=True))
    lines.append("")
    lines.append(WORST_CASE_HEADING)
    lines.append(head.to_string())
    lines.append(
        "cells: robust accuracy % ± half-width of the 95% Wilson interval over all evaluated examples"
    )
    if _marked(summary):
        lines.append(MARK_LEGEND)
    return "\n".join(lines) + "\n"


def markdown_table(df: pd.DataFrame, index: bool = False) -> str:
    """A GitHub Markdown table (no extra dependency); floats in 4 significant digits, '|' in cells escaped."""
    if index:
        df = df.reset_index()
    cols = [str(c) for c in df.columns]

    def cell(v: Any) -> str:
        if isinstance(v, float):
            v = "" if math.isnan(v) else f"{v:.4g}"
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


def _latex_escape(text: str) -> str:
    for a, b in (("\\", r"\textbackslash{}"), ("_", r"\_"), ("%", r"\%"), ("&", r"\&"), ("#", r"\#")):
        text = text.replace(a, b)
    return text


def to_latex(summary: pd.DataFrame, caption: str = "", label: str = "tab:robustness") -> str:
    """booktabs LaTeX via pandas' Styler: rows model x mode, columns threat / attack / eps (marked cells end
    with :data:`LATEX_MARK`, and the caption with the legend)."""
    table = formatted_table(summary, pm=r" $\pm$ ", mark=LATEX_MARK)
    cap = _latex_escape(caption) if caption else None
    if _marked(summary):  # the legend, its dagger in math mode
        legend = f"{LATEX_MARK} {_latex_escape(MARK_LEGEND.removeprefix(MARK).strip())}"
        cap = f"{cap}. {legend}" if cap else legend
    table.index = pd.MultiIndex.from_tuples(
        [(_latex_escape(m), _latex_escape(g)) for m, g in table.index], names=["model", "grad mode"]
    )
    table.columns = pd.MultiIndex.from_tuples(
        [(LATEX_THREAT.get(t, _latex_escape(t)), _latex_escape(a), e) for t, a, e in table.columns],
        names=["threat", "attack", r"$\epsilon$"],
    )
    return table.style.to_latex(
        column_format="ll" + "r" * table.shape[1],
        hrules=True,
        multicol_align="c",
        multirow_align="t",
        caption=cap,
        label=label,
        position_float="centering",
    )


def table_title(records: pd.DataFrame, meta: dict[str, Any] | None = None) -> str:
    """One line naming the data, n, the suite and how the attack columns were computed."""
    datasets = ", ".join(dict.fromkeys(records["dataset"].astype(str)))
    n = records["example_id"].nunique()
    suite = SuiteMeta.from_meta(meta or {}).name or ""
    skip = SettingsMeta.from_meta(meta or {}).skip_broken
    parts = [f"Robust accuracy on {datasets} (n = {n})"]
    if suite:
        parts.append(f"suite {suite}")
    if skip is True:
        parts.append("attack columns cumulative in suite order")
    elif skip is False:
        parts.append("attack columns: each attack alone")
    return "; ".join(parts)


def _csv_text(df: pd.DataFrame, index: bool) -> str:
    return df.to_csv(index=index, lineterminator="\n")


# ---------------------------------------------------------------------------------------- common corruptions
CORRUPTION_COLUMNS = {
    "clean_accuracy": "clean",
    "mean_corruption_accuracy": "mean corruption acc.",
    "mce": "mCE",
    "relative_mce": "relative mCE",
}


def corruption_table(records: pd.DataFrame, baseline: str | None = None) -> pd.DataFrame:
    """Wide numeric table, one row per (model, grad_mode): clean accuracy, the accuracy under each corruption
    averaged over severities 1-5, the mean corruption accuracy, mCE and relative mCE (fractions; the CEs
    relative to ``baseline``, :func:`metrics.corruption_errors`). Empty without corruption rows."""
    acc = corruption_accuracy(records)
    if acc.empty:
        return pd.DataFrame()
    summary = corruption_summary(records, baseline).set_index(ROW_KEYS)
    per = acc[acc["severity"] > 0].groupby([*ROW_KEYS, "corruption"], sort=False)["accuracy"].mean()
    wide = per.unstack("corruption").reindex(
        index=summary.index, columns=list(dict.fromkeys(acc["corruption"]))
    )
    out = pd.concat(
        [summary[["clean_accuracy"]], wide, summary[["mean_corruption_accuracy", "mce", "relative_mce"]]],
        axis=1,
    )
    return out.rename(columns=CORRUPTION_COLUMNS)


def _corruption_cells(table: pd.DataFrame) -> pd.DataFrame:
    """Percent strings with one decimal ('--' for a missing value)."""
    return table.map(lambda v: percent(v, unit="", missing=DASH))


def corruption_latex(table: pd.DataFrame, caption: str = "", label: str = "tab:corruptions") -> str:
    """booktabs LaTeX of :func:`corruption_table` in percent (accuracies; mCE and relative mCE in % of the
    baseline's errors)."""
    cells = _corruption_cells(table)
    cells.index = pd.MultiIndex.from_tuples(
        [(_latex_escape(m), _latex_escape(g)) for m, g in cells.index], names=["model", "grad mode"]
    )
    cells.columns = [_latex_escape(str(c)) for c in cells.columns]
    return cells.style.to_latex(
        column_format="ll" + "r" * cells.shape[1],
        hrules=True,
        caption=_latex_escape(caption) if caption else None,
        label=label,
        position_float="centering",
    )


def render_corruptions(table: pd.DataFrame, baseline: str | None) -> str:
    """Terminal text of :func:`corruption_table`: corruptions as rows, one column per model/mode."""
    cells = _corruption_cells(table).T
    cells.columns = [f"{m}/{g}" for m, g in cells.columns]
    return (
        "common corruptions (Hendrycks & Dietterich 2019), accuracy % averaged over severities 1-5; "
        f"mCE and relative mCE in % of the baseline {baseline!r}'s errors:\n{cells.to_string()}\n"
    )


def _corruption_texts(records: pd.DataFrame, baseline: str | None, title: str) -> dict[str, str]:
    """The corruption files' texts (none without corruption rows) and the terminal summary under "text"."""
    table = corruption_table(records, baseline)
    if table.empty:
        return {}
    baseline = baseline or default_baseline(list(dict.fromkeys(table.index.get_level_values(0))))
    acc = corruption_accuracy(records)
    errors = corruption_errors(acc, baseline)
    tidy = acc.merge(errors.drop(columns="error"), on=[*ROW_KEYS, "corruption"], how="left")
    caption = (
        f"{title}; common corruptions, accuracy averaged over severities 1-5, mCE relative to {baseline}"
    )
    return {
        "corruptions": _csv_text(tidy, index=False),
        "corruptions_summary": _csv_text(table, index=True),
        "corruptions_latex": corruption_latex(table, caption=caption),
        "text": render_corruptions(table, baseline),
    }


def write_tables(
    records: pd.DataFrame,
    out_dir: str | Path,
    *,
    meta: dict[str, Any] | None = None,
    baseline: str | None = None,
    marks: Mapping[tuple[str, str], str] | None = None,
) -> dict[str, Path]:
    """Write summary.csv, table.csv, table.tex, table_worst.tex, table.txt (with ``marks``, the checklist's
    (model, gradient mode) pairs that are no measure of robustness: marked cells, :data:`MARK_COLUMN` and
    the legend; without, as before the checklist) (and, when the records hold a
    cross-check, crosscheck.csv: each back-end's robust accuracy on the same points, and what each found;
    when they hold common corruptions, corruptions.csv, corruptions_summary.csv and corruptions.tex with
    CEs relative to ``baseline``, default the ``patch`` model, else the first)."""
    out_dir = Path(out_dir)
    summary = summarize(records)
    if marks is not None:
        summary = with_marks(summary, marks)
    title = table_title(records, meta)
    worst = to_latex(
        worst_case_summary(summary), caption=f"{title}; worst case", label="tab:robustness-worst"
    )
    texts = {
        "summary": _csv_text(summary, index=False),
        "table": _csv_text(comparison_table(summary), index=True),
        "latex": to_latex(summary, caption=title),
        "latex_worst": worst,
        "text": render_terminal(summary, title=title),
    }
    agreement = backend_agreement(records)
    if len(agreement):
        texts["crosscheck"] = _csv_text(agreement, index=False)
    corruptions = _corruption_texts(records, baseline, title)
    if corruptions:
        texts |= {**corruptions, "text": texts["text"] + "\n" + corruptions["text"]}
    return {key: atomic_write_text(out_dir / TABLE_FILES[key], text) for key, text in texts.items()}


__all__ = [
    "MARK",
    "MARK_COLUMN",
    "MARK_LEGEND",
    "NO_CHECKLIST_NOTE",
    "TABLE_FILES",
    "UNFINISHED_CHECKLIST_NOTE",
    "by_column",
    "comparison_table",
    "corruption_latex",
    "corruption_table",
    "format_eps",
    "formatted_table",
    "markdown_table",
    "render_corruptions",
    "render_terminal",
    "seed_summary",
    "table_title",
    "to_latex",
    "with_marks",
    "worst_case_summary",
    "write_tables",
]
