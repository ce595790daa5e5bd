"""The gallery's one table: per defence, what a naive evaluation sees and what the adaptive one finds.

Every number is recomputed from the run folders' records (:func:`robustbench_wave.evaluation.metrics.
robust_flags`, the per-example worst case) at one budget, the threat's reference budget of the undefended
CNN's run unless given, with 95 % Wilson intervals:

* ``clean`` -- clean accuracy of the adaptive run (for a random model: decided over the run's draws);
* ``exact`` -- the naive run's exact-gradient attacks alone (white-box rows of mode ``exact``, counting only
  the points they broke themselves, not those another attack broke first and they skipped): what a
  gradient-based evaluation that trusts the model reports;
* ``naive`` -- the naive run's worst case over every attack (noise, gradient-free, transfer included);
* ``adaptive`` -- the adaptive run's worst case over every attack and gradient mode (automatic BPDA / EOT);
* ``within_undefended`` -- whether that adaptive worst case lies inside the undefended CNN's interval;
* ``broken`` -- whether it is no more robust than the undefended CNN (inside its interval or below it): what
  the terminal and LaTeX tables show, since a defence that falls below the undefended level is broken too;
* ``checks_naive`` / ``checks_adaptive`` -- the checklist's failed checks: of the naive run, and of the
  adaptive run's adaptive gradient mode (``bpda`` where the run has it, else every mode) with its
  model-wide checks ("" = none failed; NaN = the run has no diagnostics).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from robustbench_wave.analysis.formatting import DASH, number
from robustbench_wave.attacks import AttackKind, Threat
from robustbench_wave.defenses.runs import ADAPTIVE, NAIVE, AttackOptions, run_dir
from robustbench_wave.evaluation.metrics import (
    CLEAN_KIND,
    EPS_TOL,
    clean_correct,
    declared_reference,
    reference_eps,
    robust_flags,
    threat_eps,
    wilson_interval,
)
from robustbench_wave.io import atomic_write_text
from robustbench_wave.models.frontend import GradMode
from robustbench_wave.models.gallery import GALLERY, UNDEFENDED
from robustbench_wave.reporting.runs import RunFolder, load_run

#: Accuracy columns of the table, each with ``_low`` / ``_high`` (Wilson) beside it.
ACCURACIES = ("clean", "exact", "naive", "adaptive")
TABLE_FILES = {"csv": "gallery.csv", "tex": "gallery.tex", "txt": "gallery.txt"}
HEADERS = {
    "clean": "clean",
    "exact": "exact gradients",
    "naive": "naive (all attacks)",
    "adaptive": "BPDA / EOT (all attacks)",
}

GalleryRuns = Mapping[str, Mapping[str, RunFolder]]  # defence -> protocol -> run


def load_gallery_runs(options: AttackOptions) -> dict[str, dict[str, RunFolder]]:
    """Every (defence, protocol) run folder of ``options``, checked by :func:`reporting.runs.load_run`."""
    runs: dict[str, dict[str, RunFolder]] = {}
    for defence in options.defences:
        for protocol in (NAIVE, ADAPTIVE):
            path = run_dir(defence, protocol, options)
            if not (path / "records.csv.gz").exists():
                raise ValueError(
                    f"no {protocol} run of {defence} in {path}; run python -m robustbench_wave.gallery attack "
                    "with the same --results-dir, --dataset, --suite, --n-examples and --seed first"
                )
            runs.setdefault(defence, {})[protocol] = load_run(path)
    return runs


def _accuracy(prefix: str, flags: pd.Series) -> dict[str, float]:
    k, n = int(flags.sum()), len(flags)
    low, high = wilson_interval(k, n)
    return {prefix: k / n if n else math.nan, f"{prefix}_low": low, f"{prefix}_high": high}


def _records(run: RunFolder, threat: str, eps: float) -> pd.DataFrame:
    """The run's one model's records; ValueError for a run of several models or without ``eps``."""
    records = run.records
    models = records["model"].unique()
    if len(models) != 1:
        raise ValueError(f"{run.path} holds {len(models)} models; a gallery run attacks one defence")
    if not any(abs(e - eps) <= EPS_TOL for e in threat_eps(records, threat)):
        raise ValueError(
            f"{run.path} has no {threat} eps = {eps:g}; attack every defence with the same suite"
        )
    return records


def failed_checks(run: RunFolder, modes: set[str] | None = None) -> Any:
    """Names of the run's failed checks (of ``modes`` and the model-wide ones; all when None), sorted and
    joined by ', '; NaN when the run has no diagnostics."""
    checks = [c for entry in run.diagnostics for c in entry.get("checks", [])]
    if not checks:
        return math.nan
    failed = {
        c["name"]
        for c in checks
        if c.get("passed") is False and (modes is None or c.get("grad_mode") in modes | {None})
    }
    return ", ".join(sorted(failed))


def _adaptive_modes(records: pd.DataFrame) -> set[str]:
    """The gradient modes an adaptive run is judged by: ``bpda`` where it ran, else every mode it ran."""
    modes = set(records["grad_mode"].unique())
    return {GradMode.BPDA.value} if GradMode.BPDA.value in modes else modes


def _own_breaks(rows: pd.DataFrame) -> pd.DataFrame:
    """``rows`` with the points their attack skipped counted as standing.

    Under skip-broken a point that any earlier attack broke (the transfer attack, Square, ...) is recorded
    as skipped and not correct by every attack after it, so the white-box rows alone would carry those
    breaks. Here only what the white-box attacks broke themselves counts: points another attack broke first
    stand, which makes the column an upper bound of what exact gradients alone find.
    """
    skipped = (rows["kind"] != CLEAN_KIND) & ~rows["attacked"].astype(bool)
    return rows.assign(correct=rows["correct"].astype(bool) | skipped)


def defence_row(naive: RunFolder, adaptive: RunFolder, threat: str, eps: float) -> dict[str, Any]:
    """One defence's numbers (see the module docstring)."""
    plain, best = _records(naive, threat, eps), _records(adaptive, threat, eps)
    white = plain[
        (plain["grad_mode"] == GradMode.EXACT.value)
        & plain["kind"].isin([CLEAN_KIND, AttackKind.WHITE_BOX.value])
    ]
    if white.empty:
        raise ValueError(f"{naive.path} has no exact-gradient records; the naive run must include 'exact'")
    white = _own_breaks(white)
    return {
        "model": best["model"].iloc[0],
        "n": int(best["example_id"].nunique()),
        **_accuracy("clean", clean_correct(best)),
        **_accuracy("exact", robust_flags(white, threat, eps)),
        **_accuracy("naive", robust_flags(plain, threat, eps)),
        **_accuracy("adaptive", robust_flags(best, threat, eps)),
        "modes_naive": "+".join(sorted(plain["grad_mode"].unique())),
        "modes_adaptive": "+".join(sorted(best["grad_mode"].unique())),
        "checks_naive": failed_checks(naive),
        "checks_adaptive": failed_checks(adaptive, _adaptive_modes(best)),
    }


def build_table(runs: GalleryRuns, threat: str = Threat.LINF.value, eps: float | None = None) -> pd.DataFrame:
    """The table, one row per defence in gallery order, the undefended CNN first (it sets the reference)."""
    if UNDEFENDED not in runs:
        raise ValueError("the table compares every defence with the undefended CNN: attack 'cnn' too")
    for defence, protocols in runs.items():
        missing = {NAIVE, ADAPTIVE} - set(protocols)
        if missing:
            raise ValueError(f"{defence} lacks its {', '.join(sorted(missing))} run")
    if eps is None:
        undefended = runs[UNDEFENDED][ADAPTIVE]
        eps = reference_eps(undefended.records, threat, declared=declared_reference(undefended.meta))
        if eps is None:
            raise ValueError(f"the undefended CNN's run has no {threat} budget; pass another threat")
    order = [d for d in GALLERY if d in runs] + [d for d in runs if d not in GALLERY]
    rows = []
    for defence in order:
        entry = GALLERY.get(defence)
        rows.append(
            {
                "defence": defence,
                "source": entry.source if entry else "",
                "broken_by": entry.broken_by if entry else "",
                "threat": threat,
                "eps": float(eps),
                **defence_row(runs[defence][NAIVE], runs[defence][ADAPTIVE], threat, eps),
            }
        )
    table = pd.DataFrame(rows)
    if table["n"].nunique() != 1:
        raise ValueError(f"the runs evaluate different numbers of examples {sorted(table['n'].unique())}")
    ref = table.set_index("defence").loc[UNDEFENDED]
    at_most = table["adaptive"] <= ref["adaptive_high"] + EPS_TOL
    table["within_undefended"] = (table["adaptive"] >= ref["adaptive_low"] - EPS_TOL) & at_most
    table["broken"] = at_most  # no more robust than the undefended CNN: inside its interval or below it
    return table


# ------------------------------------------------------------------------------------------------ rendering


def _checks_cell(value: Any) -> str:
    if not isinstance(value, str):
        return "not run"
    return f"yes ({len(value.split(', '))})" if value else "no"


def formatted(table: pd.DataFrame, pm: str = " ± ") -> pd.DataFrame:
    """Strings for reading: accuracies as '% ± half-width of the Wilson interval', flags as yes (count) / no."""
    out = pd.DataFrame({"defence": table["defence"], "source": table["source"]})
    for col in ACCURACIES:
        half = (table[f"{col}_high"] - table[f"{col}_low"]) / 2
        out[HEADERS[col]] = [number(v, h, scale=100.0, pm=pm, missing=DASH) for v, h in zip(table[col], half)]
    out["broken"] = ["yes" if w else "no" for w in table["broken"]]
    out["flagged naive"] = [_checks_cell(v) for v in table["checks_naive"]]
    out["flagged adaptive"] = [_checks_cell(v) for v in table["checks_adaptive"]]
    return out


def title(table: pd.DataFrame, dataset: str = "", suite: str = "") -> str:
    """One line: data, n, threat and budget, suite."""
    first = table.iloc[0]
    parts = [f"Defences known to be broken{' on ' + dataset if dataset else ''} (n = {first['n']})"]
    parts.append(f"worst case at {first['threat']} eps = {first['eps']:g}")
    if suite:
        parts.append(f"suite {suite}")
    return "; ".join(parts)


def render_text(table: pd.DataFrame, heading: str) -> str:
    """The terminal table with its legend."""
    lines = [heading, formatted(table).to_string(index=False), ""]
    lines.append(
        "cells: robust accuracy % ± half-width of the 95% Wilson interval; exact gradients = the naive run's "
        "white-box attacks in mode exact (their own breaks only); naive = every attack without BPDA or EOT; BPDA / EOT = every attack "
        "and gradient mode of the adaptive run; broken = no more robust than the undefended CNN (inside its interval or below it); "
        "flagged = checks of the gradient-masking checklist that failed (gallery.csv names them)"
    )
    return "\n".join(lines) + "\n"


def render_latex(table: pd.DataFrame, heading: str) -> str:
    """booktabs LaTeX of :func:`formatted` (pandas' Styler, as ``reporting.tables``)."""
    cells = formatted(table, pm=r" $\pm$ ").map(lambda s: s.replace("_", r"\_").replace("&", r"\&"))
    return cells.style.hide(axis="index").to_latex(
        column_format="ll" + "r" * (cells.shape[1] - 2),
        hrules=True,
        caption=heading.replace("_", r"\_"),
        label="tab:gallery",
        position_float="centering",
    )


def write_table(table: pd.DataFrame, directory: str | Path, heading: str) -> str:
    """Write ``gallery.csv`` (every number and the failed checks' names), ``gallery.tex`` and
    ``gallery.txt`` atomically into ``directory``; returns the terminal text."""
    directory = Path(directory)
    text = render_text(table, heading)
    atomic_write_text(directory / TABLE_FILES["csv"], table.to_csv(index=False, lineterminator="\n"))
    atomic_write_text(directory / TABLE_FILES["tex"], render_latex(table, heading))
    atomic_write_text(directory / TABLE_FILES["txt"], text)
    return text
