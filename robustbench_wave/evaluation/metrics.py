"""Every robustness number is computed here, from per-example records (after AutoAttack, Croce & Hein 2020).

* :func:`example_flags` -- the per-example worst case: an example is robust at (threat, eps) only if it is
  clean-correct and no attack of that threat broke it at that eps or a smaller one; per model with several
  gradient modes also the worst case over modes.
* :func:`summarize_flags` -- accuracy with the 95% Wilson interval (:func:`wilson_interval`) per column.
* :func:`robust_accuracy` -- one (threat, eps) cell of that worst case for one gradient mode.
* :func:`reference_eps` -- the one budget a diagnostic or a verdict reports by default, always on the grid.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

Z95 = 1.959963984540054
WORST = "worst-case"  # attack label of the per-example worst case over a threat's attacks
WORST_MODE = "worst"  # grad_mode label of the per-example worst case over gradient modes


def wilson_interval(k: float, n: float, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion k/n (NaN for n = 0)."""
    if n <= 0:
        return (math.nan, math.nan)
    p = k / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, center - half), min(1.0, center + half))


def _column_order(records: pd.DataFrame) -> list[tuple[str, str, float]]:
    """(threat, attack, eps) in suite order: clean first, then each threat's attacks, then its worst case."""
    cols = records[["threat", "attack", "eps"]].drop_duplicates()
    threats = [t for t in dict.fromkeys(cols["threat"]) if t != "none"]
    out: list[tuple[str, str, float]] = [
        ("none", a, e) for _, a, e in cols[cols["threat"] == "none"].itertuples(index=False)
    ]
    for t in threats:
        sub = cols[cols["threat"] == t]
        for a in dict.fromkeys(sub["attack"]):
            out += [(t, a, float(e)) for e in sorted(sub.loc[sub["attack"] == a, "eps"])]
        out += [(t, WORST, float(e)) for e in sorted(set(sub["eps"]))]
    return out


def example_flags(records: pd.DataFrame, *, worst_over_modes: bool = True) -> pd.DataFrame:
    """Per-example robustness: index (model, grad_mode, example_id), columns (threat, attack, eps), bool.

    Adds, per threat and eps, the column ``worst-case``: robust only if clean-correct and no attack of that
    threat broke the example at that eps or a smaller one. With ``worst_over_modes`` each model with several
    gradient modes also gets the row ``grad_mode = "worst"`` (robust only if robust under every mode).
    """
    key = ["model", "grad_mode", "attack", "eps", "example_id"]
    dup = records.duplicated(key)
    if dup.any():
        first = records.loc[dup, key].iloc[0].to_dict()
        raise ValueError(
            f"records hold {int(dup.sum())} duplicate rows (e.g. {first}); one row per {key} expected"
        )
    order = _column_order(records)
    frames: dict[tuple[str, str], pd.DataFrame] = {}
    for (model, mode), g in records.groupby(["model", "grad_mode"], sort=False):
        wide = g.pivot(index="example_id", columns=["threat", "attack", "eps"], values="correct").astype(
            "boolean"
        )
        wide.columns = pd.MultiIndex.from_tuples([(t, a, float(e)) for t, a, e in wide.columns])
        clean_cols = [c for c in wide.columns if c[0] == "none"]
        for t, a, e in order:
            if a != WORST:
                continue
            cols = clean_cols + [c for c in wide.columns if c[0] == t and c[1] != WORST and c[2] <= e + 1e-12]
            wide[(t, a, e)] = wide[cols].fillna(False).all(axis=1)
        frames[(model, mode)] = wide.reindex(columns=pd.MultiIndex.from_tuples(order))
    if worst_over_modes:
        for model in dict.fromkeys(m for m, _ in frames):
            per_mode = [f for (m, _), f in frames.items() if m == model]
            if len(per_mode) > 1:
                frames[(model, WORST_MODE)] = (
                    pd.concat(per_mode).groupby(level=0, sort=True).all().astype("boolean")
                )
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


def _mode_rank(mode: str) -> int:
    return {"exact": 0, "blocked": 1, "bpda": 2, WORST_MODE: 9}.get(mode, 5)


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


def threat_eps(records: pd.DataFrame, threat: str) -> list[float]:
    """The sorted budgets of ``threat`` present in ``records``."""
    return sorted({float(e) for e in records.loc[records["threat"] == threat, "eps"]})


def reference_eps(
    records: pd.DataFrame | None, threat: str = "Linf", fallback: float | None = None
) -> float | None:
    """The middle budget of a threat's grid (the lower middle for an even count), chosen before any result.

    Always a budget that was attacked, never an interpolated median; ``fallback`` when the threat has none.
    """
    eps = threat_eps(records, threat) if records is not None and not records.empty else []
    return eps[(len(eps) - 1) // 2] if eps else fallback
