"""Honest bookkeeping for robustness numbers (after AutoAttack, Croce & Hein 2020).

* :func:`audit` checks every adversarial example before it counts: finite, inside [0,1], perturbation norm
  within the budget (plus a float tolerance). A violation stops the run with an error naming the attack.
* :class:`RobustState` holds AutoAttack-style robust flags per (gradient mode, threat, eps): an example is
  robust at (threat, eps) only if no attack broke it at that eps or a smaller one; later attacks and larger
  budgets then run only on points still robust.
* :func:`example_flags` recomputes the per-example worst case from saved records, so every table can be
  rebuilt without re-running attacks; :func:`wilson_interval` gives the 95% confidence interval.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

Z95 = 1.959963984540054
LINF_ATOL = 1e-6
L2_RTOL = 1e-5
WORST = "worst-case"  # attack label of the per-example worst case over a threat's attacks
WORST_MODE = "worst"  # grad_mode label of the per-example worst case over gradient modes


class BudgetViolation(RuntimeError):
    """An attack returned a point outside its threat model; its results must not be counted."""


def perturbation_norm(delta: torch.Tensor, threat: str) -> torch.Tensor:
    """Per-example size of ``delta`` (B, C, H, W) in the threat model's measure (float64).

    L0 is the fraction of pixel positions where any channel changed (the salt-and-pepper budget).
    """
    d = delta.detach().to(torch.float64)
    if threat in ("Linf", "none"):
        return d.flatten(1).abs().amax(1) if d[0].numel() else torch.zeros(d.shape[0], dtype=torch.float64)
    if threat == "L2":
        return d.flatten(1).norm(dim=1)
    if threat == "L0":
        return (d.abs().amax(1) > 0).flatten(1).to(torch.float64).mean(1)
    raise ValueError(f"unknown threat model {threat!r}")


def budget_tolerance(eps: float, threat: str) -> float:
    return LINF_ATOL + (L2_RTOL * eps if threat == "L2" else 0.0)


def audit(x: torch.Tensor, x_adv: torch.Tensor, eps: float, threat: str, attack: str) -> torch.Tensor:
    """Check returned points and give their perturbation norms; raise :class:`BudgetViolation` if not."""
    if x_adv.shape != x.shape:
        raise BudgetViolation(
            f"attack {attack!r} returned shape {tuple(x_adv.shape)} for inputs {tuple(x.shape)}"
        )
    if len(x_adv) == 0:
        return torch.zeros(0, dtype=torch.float64)
    if not torch.isfinite(x_adv).all():
        n = int((~torch.isfinite(x_adv)).flatten(1).any(1).sum())
        raise BudgetViolation(f"attack {attack!r} returned {n} examples with NaN/inf values (eps={eps})")
    lo, hi = float(x_adv.min()), float(x_adv.max())
    if lo < 0.0 or hi > 1.0:
        raise BudgetViolation(
            f"attack {attack!r} left the [0,1] image box (values in [{lo:.4g}, {hi:.4g}], eps={eps})"
        )
    norms = perturbation_norm(x_adv - x, threat)
    limit = (0.0 if threat == "none" else eps) + budget_tolerance(eps, threat)
    over = norms > limit
    if bool(over.any()):
        worst = float(norms.max())
        raise BudgetViolation(
            f"attack {attack!r} exceeded its {threat} budget eps={eps:.6g}: {int(over.sum())} of {len(norms)} "
            f"examples, largest norm {worst:.6g} (tolerance {budget_tolerance(eps, threat):.1e}); fix the attack "
            "or its hyper-parameters before trusting any number"
        )
    return norms


def wilson_interval(k: float, n: float, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion k/n (NaN for n = 0)."""
    if n <= 0:
        return (math.nan, math.nan)
    p = k / n
    denom = 1 + z * z / n
    center = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, center - half), min(1.0, center + half))


class RobustState:
    """Robust flags per (grad mode, threat): a bool matrix (N examples, eps grid of that threat)."""

    def __init__(
        self, clean_correct: torch.Tensor, modes: list[str], threat_eps: dict[str, list[float]]
    ) -> None:
        self.clean_correct = clean_correct.clone().bool().cpu()
        self.eps = {t: list(v) for t, v in threat_eps.items()}
        n = len(self.clean_correct)
        self.flags = {
            m: {t: self.clean_correct.view(n, 1).repeat(1, len(v)) for t, v in self.eps.items()}
            for m in modes
        }

    def _k(self, threat: str, eps: float) -> int:
        try:
            return self.eps[threat].index(eps)
        except (KeyError, ValueError):
            raise ValueError(
                f"eps {eps} of threat {threat} is not on the suite's budget grid {self.eps}"
            ) from None

    def robust(self, mode: str, threat: str, eps: float) -> torch.Tensor:
        return self.flags[mode][threat][:, self._k(threat, eps)].clone()

    def mark_broken(self, mode: str, threat: str, eps: float, broken: torch.Tensor) -> None:
        """``broken`` (N,) bool: these examples fell at ``eps``, hence at every larger budget too."""
        k = self._k(threat, eps)
        self.flags[mode][threat][:, k:] &= ~broken.cpu().view(-1, 1)

    def apply_records(self, records: pd.DataFrame, example_ids: list[int]) -> None:
        """Replay saved records (e.g. a resumed chunk) into the flags; ``example_ids`` gives the row order."""
        index = pd.Index(example_ids)
        attacked = records[records["attacked"].astype(bool) & (records["threat"] != "none")]
        for (mode, threat, eps), g in attacked.groupby(["grad_mode", "threat", "eps"], sort=False):
            if mode not in self.flags:
                continue
            rows = index.get_indexer(g.loc[~g["correct"].astype(bool), "example_id"])
            if (rows < 0).any():
                raise ValueError("records name example ids that are not part of this evaluation")
            broken = torch.zeros(len(self.clean_correct), dtype=torch.bool)
            broken[torch.as_tensor(rows, dtype=torch.long)] = True
            self.mark_broken(mode, threat, float(eps), broken)


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
