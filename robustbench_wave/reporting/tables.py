"""Comparison tables from per-example records: rows model x gradient mode, columns threat/attack x eps.

Every number is recomputed from the records (never from stored summaries), so ``python -m
robustbench_wave.report RUN_DIR`` rebuilds identical tables without re-running attacks. Cells are robust
accuracy over all evaluated examples (clean errors count as non-robust) with a 95% Wilson interval; the
``worst-case`` columns take, per example, the AND over clean and every attack of that threat at that eps or a
smaller one; the ``worst`` row per model takes the AND over its gradient modes. With ``skip_broken`` (the
default) a column is cumulative over the suite's earlier attacks, as in AutoAttack's logs.

Files: ``summary.csv`` (tidy, numeric: n, n_robust, robust_accuracy, ci_low, ci_high), ``table.csv`` (wide,
robust accuracy as a fraction), ``table.tex`` (booktabs; percent ± half-width of the Wilson interval),
``table_worst.tex`` (only clean and worst-case columns), ``table.txt`` (the terminal rendering) and,
after a cross-check, ``crosscheck.csv``.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import pandas as pd

from robustbench_wave.evaluation.metrics import WORST, example_flags, summarize_flags
from robustbench_wave.io import atomic_write, atomic_write_text

ROW_KEYS = ["model", "grad_mode"]
COL_KEYS = ["threat", "attack", "eps"]


def format_eps(eps: float) -> str:
    """Short label: '0.1', '2', or 'k/255' when the value is a multiple of 1/255 without a short decimal."""
    short = f"{eps:.4g}"
    if float(short) == eps:
        return short
    frac = Fraction(eps).limit_denominator(255)
    if 255 % frac.denominator == 0 and abs(float(frac) - eps) < 1e-12:
        return f"{frac.numerator * (255 // frac.denominator)}/255"
    return short


def summarize(records: pd.DataFrame) -> pd.DataFrame:
    """Tidy numeric summary: one row per (model, grad_mode, threat, attack, eps), worst cases included."""
    return summarize_flags(example_flags(records))


def _ordered_pivot(summary: pd.DataFrame, values: str) -> pd.DataFrame:
    rows = list(dict.fromkeys(zip(summary["model"], summary["grad_mode"])))
    cols = list(dict.fromkeys(zip(summary["threat"], summary["attack"], summary["eps"])))
    wide = summary.pivot(index=ROW_KEYS, columns=COL_KEYS, values=values)
    return wide.reindex(
        index=pd.MultiIndex.from_tuples(rows, names=ROW_KEYS),
        columns=pd.MultiIndex.from_tuples(cols, names=COL_KEYS),
    )


def comparison_table(summary: pd.DataFrame, value: str = "robust_accuracy") -> pd.DataFrame:
    """Wide numeric table: rows (model, grad_mode), columns (threat, attack, eps)."""
    return _ordered_pivot(summary, value)


def _cell(acc: float, lo: float, hi: float, pm: str) -> str:
    if math.isnan(acc):
        return "--"
    return f"{100 * acc:.1f}{pm}{100 * (hi - lo) / 2:.1f}"


def formatted_table(summary: pd.DataFrame, pm: str = " ± ") -> pd.DataFrame:
    """Wide table of strings 'acc ± half-width' in percent."""
    acc = _ordered_pivot(summary, "robust_accuracy")
    lo = _ordered_pivot(summary, "ci_low")
    hi = _ordered_pivot(summary, "ci_high")
    out = acc.copy().astype(object)
    for c in acc.columns:
        out[c] = [_cell(a, b, d, pm) for a, b, d in zip(acc[c], lo[c], hi[c])]
    out.columns = pd.MultiIndex.from_tuples(
        [(t, a, format_eps(e)) for t, a, e in acc.columns], names=COL_KEYS
    )
    return out


def worst_case_summary(summary: pd.DataFrame) -> pd.DataFrame:
    """Only clean accuracy and the per-threat worst case: the headline numbers."""
    return summary[(summary["threat"] == "none") | (summary["attack"] == WORST)].reset_index(drop=True)


def render_terminal(summary: pd.DataFrame, title: str = "") -> str:
    """Readable text: the full table transposed (one line per threat/attack/eps, one column per model/mode,
    since the table is wide), then the headline worst case with one row per model/mode."""
    table = formatted_table(summary).T
    table.columns = [f"{m}/{g}" for m, g in table.columns]
    table.index = pd.MultiIndex.from_tuples(
        [(t if t != "none" else "", a, e if t != "none" else "") for t, a, e in table.index]
    )
    head = formatted_table(worst_case_summary(summary))
    head.columns = [("clean" if t == "none" else f"{t} {e}") for t, _, e in head.columns]
    head.index = [f"{m}/{g}" for m, g in head.index]
    lines = [title] if title else []
    lines.append(table.to_string(sparsify=True))
    lines.append("")
    lines.append("worst case over the whole suite (per example; 'worst' rows: over gradient modes too):")
    lines.append(head.to_string())
    lines.append(
        "cells: robust accuracy % ± half-width of the 95% Wilson interval over all evaluated examples"
    )
    return "\n".join(lines) + "\n"


LATEX_THREAT = {
    "none": "clean",
    "Linf": r"$\ell_\infty$",
    "L2": r"$\ell_2$",
    "L0": r"$\ell_0$ (pixel fraction)",
}


def _latex_escape(text: str) -> str:
    for a, b in (("\\", r"\textbackslash{}"), ("_", r"\_"), ("%", r"\%"), ("&", r"\&"), ("#", r"\#")):
        text = text.replace(a, b)
    return text


def to_latex(summary: pd.DataFrame, caption: str = "", label: str = "tab:robustness") -> str:
    """booktabs LaTeX via pandas' Styler: rows model x mode, columns threat / attack / eps."""
    table = formatted_table(summary, pm=r" $\pm$ ")
    table.index = pd.MultiIndex.from_tuples(
        [(_latex_escape(m), _latex_escape(g)) for m, g in table.index], names=["model", "grad mode"]
    )
    table.columns = pd.MultiIndex.from_tuples(
        [(LATEX_THREAT.get(t, _latex_escape(t)), _latex_escape(a), e) for t, a, e in table.columns],
        names=["threat", "attack", r"$\epsilon$"],
    )
    styler = table.style
    return styler.to_latex(
        column_format="ll" + "r" * table.shape[1],
        hrules=True,
        multicol_align="c",
        multirow_align="t",
        caption=_latex_escape(caption) if caption else None,
        label=label,
        position_float="centering",
    )


def crosscheck_table(records: pd.DataFrame, cross: pd.DataFrame) -> pd.DataFrame:
    """Backend agreement on identical points: robust accuracy of each backend on the points both attacked."""
    key = ["model", "grad_mode", "attack", "eps", "example_id"]
    prim = records.loc[records["attacked"], [*key, "backend", "correct"]]
    other = cross.loc[cross["attacked"], [*key, "backend", "correct"]]
    both = other.merge(prim, on=key, suffixes=("", "_primary"))
    rows = []
    for (model, mode, attack, eps, backend), g in both.groupby(
        ["model", "grad_mode", "attack", "eps", "backend"], sort=False
    ):
        acc_o, acc_p = float(g["correct"].mean()), float(g["correct_primary"].mean())
        rows.append(
            {
                "model": model,
                "grad_mode": mode,
                "attack": attack,
                "eps": float(eps),
                "primary_backend": g["backend_primary"].iloc[0],
                "backend": backend,
                "n_points": len(g),
                "robust_accuracy_primary": acc_p,
                "robust_accuracy_backend": acc_o,
                "difference": acc_o - acc_p,
                "n_disagree": int((g["correct"] != g["correct_primary"]).sum()),
            }
        )
    return pd.DataFrame(rows)


def _csv_text(df: pd.DataFrame, index: bool) -> str:
    return df.to_csv(index=index, lineterminator="\n")


def write_tables(
    records: pd.DataFrame,
    out_dir: str | Path,
    *,
    meta: dict[str, Any] | None = None,
    cross: pd.DataFrame | None = None,
) -> dict[str, Path]:
    """Write summary.csv, table.csv, table.tex, table_worst.tex, table.txt (and crosscheck.csv)."""
    out_dir = Path(out_dir)
    summary = summarize(records)
    title = table_title(records, meta)
    paths = {
        "summary": atomic_write_text(out_dir / "summary.csv", _csv_text(summary, index=False)),
        "table": atomic_write_text(out_dir / "table.csv", _csv_text(comparison_table(summary), index=True)),
        "latex": atomic_write_text(out_dir / "table.tex", to_latex(summary, caption=title)),
        "latex_worst": atomic_write_text(
            out_dir / "table_worst.tex",
            to_latex(
                worst_case_summary(summary), caption=f"{title}; worst case", label="tab:robustness-worst"
            ),
        ),
        "text": atomic_write_text(out_dir / "table.txt", render_terminal(summary, title=title)),
    }
    if cross is not None and len(cross):
        xt = crosscheck_table(records, cross)
        paths["crosscheck"] = atomic_write(
            out_dir / "crosscheck.csv", lambda tmp: xt.to_csv(tmp, index=False, lineterminator="\n")
        )
    return paths


def table_title(records: pd.DataFrame, meta: dict[str, Any] | None = None) -> str:
    datasets = ", ".join(dict.fromkeys(records["dataset"].astype(str)))
    n = records["example_id"].nunique()
    suite = (meta or {}).get("suite", {}).get("name", "")
    skip = (meta or {}).get("settings", {}).get("skip_broken")
    parts = [f"Robust accuracy on {datasets} (n = {n})"]
    if suite:
        parts.append(f"suite {suite}")
    if skip is True:
        parts.append("attack columns cumulative in suite order")
    elif skip is False:
        parts.append("attack columns: each attack alone")
    return "; ".join(parts)


__all__ = [
    "WORST",
    "comparison_table",
    "crosscheck_table",
    "format_eps",
    "formatted_table",
    "render_terminal",
    "summarize",
    "table_title",
    "to_latex",
    "worst_case_summary",
    "write_tables",
]
