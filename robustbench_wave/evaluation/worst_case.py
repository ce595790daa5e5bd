"""The per-example worst case of a run's records, and the accuracies, budgets and cross-checks built on it
(after AutoAttack, Croce & Hein 2020). Import these through :mod:`robustbench_wave.evaluation.metrics`.

* :func:`robust_flags` -- the per-example worst case over a set of records: an example is robust at
  (threat, eps) only if it is clean-correct and correct in every row of that threat at that eps or a smaller
  one. It is the one definition; :func:`robust_accuracy`, :func:`example_flags` and every diagnostic use it.
* :func:`example_flags` -- that worst case for every (model, gradient mode) and (threat, eps) of a run, plus
  the worst case over gradient modes; :func:`summarize` turns it into accuracies with 95% Wilson intervals
  (:func:`wilson_interval`).
* :func:`example_status` -- broken / held / unknown per example for one group of attacks, for comparing a
  strong group with a weak one (the gradient-masking checks).
* :func:`backend_agreement` -- how two back-ends of one attack agree on the same points (``--cross-check``).
* :func:`reference_eps` -- the one budget a diagnostic or a verdict reports by default (the suite's declared one,
  :func:`declared_reference`, else the middle of the grid), always on the grid.
* :func:`worst_case_rows` -- the rows every worst case is computed from: the average-case rows (common
  corruptions, :mod:`.corruption_metrics`) left out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from robustbench_wave.attacks import AttackKind, Threat, is_average_case
from robustbench_wave.evaluation.meta_sections import DatasetMeta
from robustbench_wave.models.frontend import GradMode

Z95 = 1.959963984540054
WORST = "worst-case"  # attack label of the per-example worst case over a threat's attacks
WORST_MODE = "worst"  # grad_mode label of the per-example worst case over gradient modes
CLEAN_KIND = AttackKind.CLEAN.value  # records' ``kind`` of the clean rows
CLEAN_THREAT = "none"  # records' ``threat`` of the clean rows
EPS_TOL = 1e-9  # budgets closer than this are the same budget


def wilson_interval(k: float, n: float, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion k/n (NaN for n = 0)."""
    if n <= 0:
        return (math.nan, math.nan)
    p = k / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, center - half), min(1.0, center + half))


# ---------------------------------------------------------------------------------- worst case of a row set


def worst_case_rows(records: pd.DataFrame) -> pd.DataFrame:
    """``records`` without the average-case rows (corruptions): what every worst case is computed from."""
    average = records["threat"].map(is_average_case).astype(bool)
    return records[~average] if average.any() else records


def clean_correct(rows: pd.DataFrame) -> pd.Series:
    """example_id -> correct on the clean input (all examples count as correct if no clean rows exist)."""
    clean = rows[rows["kind"] == CLEAN_KIND]
    if clean.empty:
        ids = rows["example_id"].unique()
        return pd.Series(True, index=pd.Index(sorted(ids), name="example_id"))
    return clean.groupby("example_id")["correct"].all().astype(bool)


def robust_flags(rows: pd.DataFrame, threat: str, eps: float) -> pd.Series:
    """example_id -> robust at (threat, eps) over exactly these rows, whatever attacks and modes they hold.

    Robust = clean-correct AND correct in every row of ``threat`` with eps' <= eps. A skipped point
    (``attacked=False``) is recorded as not correct, so it counts as broken: something earlier broke it.
    Examples are those of the clean rows (all examples when there are none).
    """
    clean = clean_correct(rows)
    at = rows[(rows["threat"] == threat) & (rows["eps"] <= eps + EPS_TOL)]
    if at.empty:
        return clean
    held = at["correct"].astype(bool).groupby(at["example_id"]).all()
    return clean & held.reindex(clean.index, fill_value=True)


def robust_accuracy(rows: pd.DataFrame, threat: str, eps: float) -> tuple[float, int]:
    """(robust accuracy, number of examples) of :func:`robust_flags`; NaN accuracy without examples.

    Select the rows first: one model's rows of one gradient mode give that mode's worst case, all of its
    modes together the worst case over modes.
    """
    flags = robust_flags(rows, threat, eps)
    return (float(flags.mean()) if len(flags) else math.nan), len(flags)


def example_status(rows: pd.DataFrame, threat: str, eps: float) -> pd.Series:
    """Per example: 1.0 = broken by these rows at some eps' <= eps, 0.0 = held (every row at eps attacked
    and still correct), NaN = unknown (a row was skipped because something else broke the point first)."""
    at = rows[(rows["threat"] == threat) & (rows["eps"] <= eps + EPS_TOL)]
    if at.empty:
        return pd.Series(dtype=float)
    attacked = at["attacked"].astype(bool)
    correct = at["correct"].astype(bool)
    broken = (attacked & ~correct).groupby(at["example_id"]).any()
    exact = at["eps"] >= eps - EPS_TOL
    held_rows = (attacked & correct) | ~exact
    held = held_rows.groupby(at["example_id"]).all() & exact.groupby(at["example_id"]).any()
    status = pd.Series(np.nan, index=broken.index)
    status[held] = 0.0
    status[broken] = 1.0
    return status


def shared_status(rows: pd.DataFrame, threat: str, eps: float) -> pd.Series:
    """:func:`example_status` of attacks run once for every gradient mode (noise, Square, transfer): their
    rows are copies per mode, skipped in a mode where another attack broke the point first, so one row per
    (attack, eps, example) is kept, an attacked one where there is one."""
    ranked = rows.sort_values("attacked", ascending=False, kind="stable")
    return example_status(ranked.drop_duplicates(["attack", "eps", "example_id"]), threat, eps)


# --------------------------------------------------------------------------------------- a whole run's table


def _column_order(records: pd.DataFrame) -> list[tuple[str, str, float]]:
    """(threat, attack, eps) in suite order: clean first, then each threat's attacks, then its worst case."""
    cols = records[["threat", "attack", "eps"]].drop_duplicates()
    threats = [t for t in dict.fromkeys(cols["threat"]) if t != CLEAN_THREAT]
    out: list[tuple[str, str, float]] = [
        (CLEAN_THREAT, a, e) for _, a, e in cols[cols["threat"] == CLEAN_THREAT].itertuples(index=False)
    ]
    for t in threats:
        sub = cols[cols["threat"] == t]
        for a in dict.fromkeys(sub["attack"]):
            out += [(t, a, float(e)) for e in sorted(sub.loc[sub["attack"] == a, "eps"])]
        out += [(t, WORST, float(e)) for e in sorted(set(sub["eps"]))]
    return out


def _check_unique(records: pd.DataFrame) -> None:
    key = ["model", "grad_mode", "attack", "eps", "example_id"]
    dup = records.duplicated(key)
    if dup.any():
        first = records.loc[dup, key].iloc[0].to_dict()
        raise ValueError(
            f"records hold {int(dup.sum())} duplicate rows (e.g. {first}); one row per {key} expected"
        )


def _mode_flags(g: pd.DataFrame, order: list[tuple[str, str, float]]) -> pd.DataFrame:
    """One (model, grad_mode) group: correct per example and attack column, plus its worst-case columns."""
    wide = g.pivot(index="example_id", columns=["threat", "attack", "eps"], values="correct").astype(
        "boolean"
    )
    wide.columns = pd.MultiIndex.from_tuples([(t, a, float(e)) for t, a, e in wide.columns])
    for t, a, e in order:
        if a == WORST:
            wide[(t, a, e)] = robust_flags(g, t, e).reindex(wide.index, fill_value=False)
    return wide.reindex(columns=pd.MultiIndex.from_tuples(order))


def example_flags(records: pd.DataFrame, *, worst_over_modes: bool = True) -> pd.DataFrame:
    """Per-example robustness: index (model, grad_mode, example_id), columns (threat, attack, eps), bool.

    Adds, per threat and eps, the column ``worst-case`` (:func:`robust_flags` of that model and mode). With
    ``worst_over_modes`` each model with several gradient modes also gets the row ``grad_mode = "worst"``
    (robust only if robust under every mode).
    """
    _check_unique(records)
    records = worst_case_rows(records)
    order = _column_order(records)
    frames: dict[tuple[str, str], pd.DataFrame] = {
        (model, mode): _mode_flags(g, order)
        for (model, mode), g in records.groupby(["model", "grad_mode"], sort=False)
    }
    if worst_over_modes:
        for model in dict.fromkeys(m for m, _ in frames):
            per_mode = [f for (m, _), f in frames.items() if m == model]
            if len(per_mode) > 1:
                frames[(model, WORST_MODE)] = _worst_over_modes(per_mode)
    models = list(dict.fromkeys(m for m, _ in frames))
    keys = sorted(frames, key=lambda k: (models.index(k[0]), _mode_rank(k[1])))
    out = []
    for model, mode in keys:
        f = frames[(model, mode)]
        f.index = pd.MultiIndex.from_arrays(
            [[model] * len(f), [mode] * len(f), f.index.to_numpy()],
            names=["model", "grad_mode", "example_id"],
        )
        out.append(f)
    return pd.concat(out)


def _worst_over_modes(per_mode: list[pd.DataFrame]) -> pd.DataFrame:
    """Robust under every gradient mode that ran the attack; NA where no mode ran it (an attack only some
    models ran, such as an escalation, is no evidence of robustness for the others)."""
    by_example = pd.concat(per_mode).groupby(level=0, sort=True)
    return by_example.all().astype("boolean").mask(by_example.count() == 0)


_MODE_RANK = {**{m.value: i for i, m in enumerate(GradMode)}, WORST_MODE: 9}


def _mode_rank(mode: str) -> int:
    """Rows in the order exact, blocked, bpda, (unknown modes), worst."""
    return _MODE_RANK.get(mode, 5)


def summarize_flags(flags: pd.DataFrame) -> pd.DataFrame:
    """Tidy summary: one row per (model, grad_mode, threat, attack, eps) with accuracy and Wilson CI."""
    rows = []
    for (model, mode), g in flags.groupby(level=["model", "grad_mode"], sort=False):
        for col in flags.columns:
            vals = g[col].dropna()
            n, k = len(vals), int(vals.astype(bool).sum())
            lo, hi = wilson_interval(k, n)
            rows.append(
                {
                    "model": model,
                    "grad_mode": mode,
                    "threat": col[0],
                    "attack": col[1],
                    "eps": float(col[2]),
                    "n": n,
                    "n_robust": k,
                    "robust_accuracy": k / n if n else np.nan,
                    "ci_low": lo,
                    "ci_high": hi,
                }
            )
    return pd.DataFrame(rows)


def summarize(records: pd.DataFrame) -> pd.DataFrame:
    """Tidy numeric summary of a run: one row per (model, grad_mode, threat, attack, eps), worst cases
    included (the numbers behind every table)."""
    return summarize_flags(example_flags(records))


def backend_agreement(records: pd.DataFrame) -> pd.DataFrame:
    """Back-end agreement on identical points: each cross-check's rows (attack ``name@backend``) against
    its primary attack's, on the points both attacked. ``n_only_backend`` / ``n_only_primary`` count the
    points one broke and the other did not: what each back-end found (all of it counts in the worst case)."""
    key = ["model", "grad_mode", "attack", "eps", "example_id"]
    attacked = records.loc[records["attacked"], [*key, "backend", "correct"]]
    parts = attacked["attack"].map(split_cross_attack)
    is_cross = parts.map(lambda p: p[1] is not None).astype(bool)
    other = attacked[is_cross].assign(attack=parts[is_cross].map(lambda p: p[0]))
    both = other.merge(attacked[~is_cross], on=key, suffixes=("", "_primary"))
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
                "n_only_backend": int((~g["correct"] & g["correct_primary"]).sum()),
                "n_only_primary": int((g["correct"] & ~g["correct_primary"]).sum()),
            }
        )
    return pd.DataFrame(rows)


# -------------------------------------------------------------------------------------------- cross-checks
CROSS_SEP = "@"  # suite entry names cannot hold it (attacks.suite), so ``attack@backend`` is unambiguous


def cross_attack_name(attack: str, backend: str) -> str:
    """The records' name of ``backend``'s run of suite entry ``attack`` in a cross-check."""
    return f"{attack}{CROSS_SEP}{backend}"


def split_cross_attack(name: str) -> tuple[str, str | None]:
    """(suite entry, cross-check back-end or None) of an attack name in the records."""
    attack, sep, backend = name.partition(CROSS_SEP)
    return attack, (backend if sep else None)


# -------------------------------------------------------------------------------------------------- budgets


def threat_eps(records: pd.DataFrame, threat: str) -> list[float]:
    """The sorted budgets of ``threat`` present in ``records`` (0 included when the grid has it)."""
    return sorted({float(e) for e in records.loc[records["threat"] == threat, "eps"]})


def reference_eps(
    records: pd.DataFrame | None,
    threat: str = Threat.LINF.value,
    fallback: float | None = None,
    declared: Mapping[str, float] | None = None,
) -> float | None:
    """The budget a check, a verdict or an export speaks of: the one the suite declares (``declared``, threat ->
    budget: :func:`declared_reference` of the run's meta.json) when it is on the threat's grid, else the middle
    positive budget of the grid (the lower middle for an even count), chosen before any result; eps = 0 is the
    clean input, not a budget.

    Always a budget that was attacked, never an interpolated median; ``fallback`` when the threat has none. A
    declared budget the records did not attack is refused (ValueError naming the grid), never replaced by
    the middle.
    """
    grid = threat_eps(records, threat) if records is not None and not records.empty else []
    chosen = (declared or {}).get(threat)
    if chosen is not None and grid:
        return check_on_grid(records, threat, chosen)  # a declared budget off the grid: refused, not replaced
    middle = middle_budget(grid)
    return fallback if middle is None else middle


def declared_reference(meta: Mapping[str, Any] | None) -> dict[str, float]:
    """Threat -> the reference budget the run's suite declares (meta.json's ``dataset.reference``, written by
    the evaluation only when the suite has a ``[reference.*]`` block or the budgets came from ``--eps``); {}
    for a run without one, whose references are the middle of each grid."""
    return dict(DatasetMeta.from_meta(meta or {}).reference)


def check_on_grid(rows: pd.DataFrame, threat: str, eps: float) -> float:
    """``eps`` as attacked (the grid's own float) when ``threat`` was attacked at it; ValueError naming the
    grid otherwise, so no accuracy is ever answered for a budget that was not attacked (below the grid,
    :func:`robust_flags` would give the clean accuracy; between budgets, a smaller budget's)."""
    grid = threat_eps(rows, threat)
    match = [e for e in grid if math.isclose(float(eps), e, abs_tol=EPS_TOL)]
    if not match:
        raise ValueError(
            f"{threat} eps={float(eps):g} was not evaluated (not attacked); the attacked {threat} budgets: {grid} "
            "(attack it with --eps / benchmark(eps=...))"
        )
    return match[0]


def middle_budget(grid: Sequence[float]) -> float | None:
    """The middle positive budget of a grid (the lower middle for an even count); None without one."""
    eps = sorted(float(e) for e in grid if e > 0)
    return eps[(len(eps) - 1) // 2] if eps else None
