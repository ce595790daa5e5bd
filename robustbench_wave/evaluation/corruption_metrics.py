"""The average-case axis: common corruptions (Hendrycks & Dietterich 2019) from records. Import these
through :mod:`robustbench_wave.evaluation.metrics`.

:func:`corruption_accuracy` gives the accuracy per corruption and severity, :func:`corruption_errors` the
corruption errors relative to a baseline model (CE, mCE, relative mCE), :func:`corruption_summary` both per
model (:func:`~robustbench_wave.evaluation.worst_case.worst_case_rows` keeps these rows out of every worst
case).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import pandas as pd

from robustbench_wave.attacks import Threat
from robustbench_wave.evaluation.worst_case import CLEAN_KIND, wilson_interval

CORRUPTION_THREAT = Threat.CORRUPTION.value
_SEVERITY = "severity"
ACCURACY_COLUMNS = ["model", "grad_mode", "corruption", _SEVERITY, "n", "n_correct", "accuracy", "error"]
ACCURACY_COLUMNS += ["ci_low", "ci_high"]


def corruption_accuracy(records: pd.DataFrame) -> pd.DataFrame:
    """Accuracy per (model, grad_mode, corruption, severity) over every example, with its 95% Wilson interval.

    Severity 0 is the clean accuracy of the same model and mode, repeated for every corruption (the start of
    each curve). Columns: model, grad_mode, corruption (the suite entry's name), severity, n, n_correct,
    accuracy, error, ci_low, ci_high; empty without corruption rows.
    """
    rows = records[records["threat"] == CORRUPTION_THREAT]
    if rows.empty:
        return pd.DataFrame(columns=ACCURACY_COLUMNS)
    keys = ["model", "grad_mode"]
    counts = (
        rows.assign(correct=rows["correct"].astype(bool))
        .groupby([*keys, "attack", "eps"], sort=False)["correct"]
        .agg(["size", "sum"])
        .reset_index()
    )
    clean = records[records["kind"] == CLEAN_KIND]
    clean = clean.assign(correct=clean["correct"].astype(bool)).groupby(keys)["correct"].agg(["size", "sum"])
    zero = counts.drop_duplicates([*keys, "attack"]).drop(columns=["size", "sum"]).assign(eps=0.0)
    zero = zero.join(clean, on=keys).fillna({"size": 0, "sum": 0})
    out = pd.concat([zero, counts], ignore_index=True)
    groups = {k: i for i, k in enumerate(dict.fromkeys(zip(counts["model"], counts["grad_mode"])))}
    attacks = {a: i for i, a in enumerate(dict.fromkeys(counts["attack"]))}
    out["_g"] = [groups[k] for k in zip(out["model"], out["grad_mode"])]
    out["_a"] = out["attack"].map(attacks)
    out = out.sort_values(["_g", "_a", "eps"], kind="stable")  # records' order, severity 0 first
    return pd.DataFrame(
        [
            _accuracy_row(r.model, r.grad_mode, r.attack, round(float(r.eps)), int(r.size), int(r.sum))
            for r in out.itertuples(index=False)
        ],
        columns=ACCURACY_COLUMNS,
    )


def _accuracy_row(model: str, mode: str, name: str, severity: int, n: int, k: int) -> dict[str, Any]:
    lo, hi = wilson_interval(k, n)
    acc = k / n if n else math.nan
    return {
        "model": model,
        "grad_mode": mode,
        "corruption": name,
        _SEVERITY: severity,
        "n": n,
        "n_correct": k,
        "accuracy": acc,
        "error": 1.0 - acc,
        "ci_low": lo,
        "ci_high": hi,
    }


def default_baseline(models: Sequence[str], preferred: str = "patch") -> str | None:
    """The model corruption errors are normalised by: ``preferred`` when present, else the first model."""
    models = list(models)
    return preferred if preferred in models else (models[0] if models else None)


def corruption_errors(accuracy: pd.DataFrame, baseline: str | None = None) -> pd.DataFrame:
    """Corruption errors of every model relative to ``baseline`` (Hendrycks & Dietterich 2019, Sec. 4):
    CE_c = sum_s E(model, c, s) / sum_s E(baseline, c, s) and relative CE_c = sum_s (E(model, c, s) -
    E(model, clean)) / sum_s (E(baseline, c, s) - E(baseline, clean)), over severities 1-5 that both have.

    ``accuracy`` is :func:`corruption_accuracy`; ``baseline`` defaults to :func:`default_baseline`. A ratio
    whose denominator is not positive (the baseline made no error, or none beyond its clean error) is NaN.
    Columns: model, grad_mode, corruption, error (mean over severities), ce, relative_ce.
    """
    cols = ["model", "grad_mode", "corruption", "error", "ce", "relative_ce"]
    if accuracy.empty:
        return pd.DataFrame(columns=cols)
    baseline = baseline or default_baseline(list(dict.fromkeys(accuracy["model"])))
    if baseline not in set(accuracy["model"]):
        raise ValueError(
            f"corruption baseline {baseline!r} has no corruption rows; models: {sorted(set(accuracy['model']))}"
        )
    sums = _error_sums(accuracy)
    base = sums[sums["model"] == baseline].drop_duplicates("corruption").set_index("corruption")
    out = []
    for r in sums.itertuples(index=False):
        b = base.loc[r.corruption] if r.corruption in base.index else None
        out.append(
            {
                "model": r.model,
                "grad_mode": r.grad_mode,
                "corruption": r.corruption,
                "error": r.err / r.n_sev if r.n_sev else math.nan,
                "ce": _ratio(r.err, None if b is None else b["err"]),
                "relative_ce": _ratio(r.rel, None if b is None else b["rel"]),
            }
        )
    return pd.DataFrame(out, columns=cols)


def _error_sums(accuracy: pd.DataFrame) -> pd.DataFrame:
    """Per (model, grad_mode, corruption): the summed error over severities >= 1, the summed error beyond
    clean, and the number of severities."""
    rows = []
    for (model, mode, name), g in accuracy.groupby(["model", "grad_mode", "corruption"], sort=False):
        clean_err = float(g.loc[g[_SEVERITY] == 0, "error"].mean())
        sev = g[g[_SEVERITY] > 0]
        err = float(sev["error"].sum())
        rows.append((model, mode, name, err, err - len(sev) * clean_err, len(sev)))
    return pd.DataFrame(rows, columns=["model", "grad_mode", "corruption", "err", "rel", "n_sev"])


def _ratio(num: float, den: float | None) -> float:
    return num / den if den is not None and den > 0 and not math.isnan(den) else math.nan


def corruption_summary(records: pd.DataFrame, baseline: str | None = None) -> pd.DataFrame:
    """One row per (model, grad_mode) with corruption rows: clean accuracy, mean corruption accuracy (over
    corruptions and severities 1-5), mCE and relative mCE (means of :func:`corruption_errors` over the
    corruptions where they are defined; ``corruptions`` counts them) and the baseline's name."""
    acc = corruption_accuracy(records)
    cols = ["model", "grad_mode", "clean_accuracy", "mean_corruption_accuracy", "mce", "relative_mce"]
    if acc.empty:
        return pd.DataFrame(columns=[*cols, "corruptions", "baseline"])
    baseline = baseline or default_baseline(list(dict.fromkeys(acc["model"])))
    ce = corruption_errors(acc, baseline)
    out = []
    for (model, mode), g in acc.groupby(["model", "grad_mode"], sort=False):
        c = ce[(ce["model"] == model) & (ce["grad_mode"] == mode)]
        out.append(
            {
                "model": model,
                "grad_mode": mode,
                "clean_accuracy": float(g.loc[g[_SEVERITY] == 0, "accuracy"].iloc[0]),
                "mean_corruption_accuracy": float(g.loc[g[_SEVERITY] > 0, "accuracy"].mean()),
                "mce": float(c["ce"].mean()),
                "relative_mce": float(c["relative_ce"].mean()),
                "corruptions": int(c["ce"].notna().sum()),
                "baseline": baseline,
            }
        )
    return pd.DataFrame(out)
