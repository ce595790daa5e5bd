"""Every robustness number is computed here, from per-example records (after AutoAttack, Croce & Hein 2020).

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
* :func:`corruption_accuracy`, :func:`corruption_errors`, :func:`corruption_summary` -- the average-case
  axis (common corruptions, Hendrycks & Dietterich 2019): accuracy per corruption and severity, corruption
  errors relative to a baseline model (CE, mCE, relative mCE); :func:`worst_case_rows` keeps these rows out
  of every worst case.
* :func:`paired_over_seeds` -- the one paired comparison of two sets of per-example flags on the same images
  (two models, two modes, or two attack groups), one pair of flag sets per training seed, with the image as
  the unit (every seed attacks the same first N images): the exact sign-flip test stratified by image
  (:func:`sign_flip_p`; one seed: the exact McNemar test, :func:`mcnemar_exact`), Newcombe's paired interval
  on the seed-averaged table (:func:`paired_difference_interval`) and the equivalence test (TOST,
  :meth:`PairedComparison.equivalence`); :func:`paired_comparison` is its one-seed case and
  :func:`seed_spread` the spread of per-seed differences.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from statistics import NormalDist
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

    Always a budget that was attacked, never an interpolated median; ``fallback`` when the threat has none.
    """
    grid = threat_eps(records, threat) if records is not None and not records.empty else []
    chosen = (declared or {}).get(threat)
    if chosen is not None:
        on_grid = [e for e in grid if math.isclose(e, chosen, abs_tol=EPS_TOL)]
        if on_grid:
            return on_grid[0]
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


# ------------------------------------------------------------------------------------------ paired statistics
ALTERNATIVES = ("two-sided", "greater", "less")


def _check_counts(**counts: int) -> None:
    for name, value in counts.items():
        if isinstance(value, bool) or int(value) != value or value < 0:
            raise ValueError(f"{name} must be a count (a non-negative integer), got {value!r}")


def binomial_half_cdf(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2), exact (integer arithmetic, one division at the end)."""
    _check_counts(k=k, n=n)
    if k >= n:
        return 1.0
    term, total = 1, 1  # C(n, 0)
    for j in range(int(k)):
        term = term * (n - j) // (j + 1)  # C(n, j + 1), exact
        total += term
    return total / 2**n  # int / int is correctly rounded, however large


def binomial_tail(k: int, n: int, rate: float) -> float:
    """P(X >= k) for X ~ Binomial(n, ``rate``): the exact one-sided p-value of H0 "the true rate is at most
    ``rate``" after k successes in n trials (log-space terms, no overflow for any n). 1.0 for k = 0."""
    _check_counts(k=k, n=n)
    if not 0 < rate < 1:
        raise ValueError(f"rate must be in (0, 1), got {rate}")
    if k == 0:
        return 1.0
    if k > n:
        return 0.0
    log_p, log_q = math.log(rate), math.log1p(-rate)
    terms = [
        math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) + j * log_p + (n - j) * log_q
        for j in range(int(k), int(n) + 1)
    ]
    top = max(terms)
    return float(min(1.0, math.exp(top) * sum(math.exp(t - top) for t in terms)))


def holm_adjusted(p_values: Sequence[float]) -> list[float]:
    """Holm's (1979) step-down adjusted p-values, in the input's order: the k-th smallest of m becomes
    max over j <= k of min(1, (m - j + 1) p_(j)). Rejecting where the adjusted p-value is below alpha controls
    the familywise error rate at alpha for any dependence between the tests. NaN p-values stay NaN and do
    not count towards m."""
    finite = [(p, i) for i, p in enumerate(p_values) if not math.isnan(float(p))]
    out = [math.nan] * len(p_values)
    m, running = len(finite), 0.0
    for rank, (p, i) in enumerate(sorted(finite)):
        running = max(running, min(1.0, (m - rank) * float(p)))
        out[i] = running
    return out


def mcnemar_exact(only_a: int, only_b: int, alternative: str = "two-sided") -> float:
    """Exact McNemar p-value from the discordant pairs of two paired binary outcomes.

    ``only_a``: pairs where A succeeded and B did not; ``only_b``: the reverse. Under H0 (both equally
    likely) ``only_a`` ~ Binomial(only_a + only_b, 1/2). ``"two-sided"``: min(1, 2 P(X <= min)), which is
    scipy's ``binomtest(only_a, n, 0.5).pvalue`` (the distribution is symmetric); ``"greater"``: P(X >=
    only_a), evidence that A succeeds more often; ``"less"``: P(X <= only_a). 1.0 without discordant pairs.
    """
    _check_counts(only_a=only_a, only_b=only_b)
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {ALTERNATIVES}, got {alternative!r}")
    n = int(only_a) + int(only_b)
    if n == 0:
        return 1.0
    if alternative == "greater":
        return binomial_half_cdf(int(only_b), n)  # X >= only_a  <=>  n - X <= only_b
    if alternative == "less":
        return binomial_half_cdf(int(only_a), n)
    return min(1.0, 2 * binomial_half_cdf(min(int(only_a), int(only_b)), n))


def paired_difference_interval(
    both: int, only_a: int, only_b: int, neither: int, z: float = Z95
) -> tuple[float, float]:
    """Interval for p_A - p_B of paired proportions: Newcombe's (1998) square-and-add of the two Wilson
    intervals with the correlation of the pairs, as given by Fagerland, Lydersen & Laake (2014).

    p_A = (both + only_a) / n, p_B = (both + only_b) / n; the correlation phi = (both*neither -
    only_a*only_b) / sqrt(product of the margins), with Newcombe's correction (shrunk by n/2 when positive,
    0 when a margin is empty). NaN for n = 0.
    """
    _check_counts(both=both, only_a=only_a, only_b=only_b, neither=neither)
    return _newcombe(both, only_a, only_b, neither, z)


def _newcombe(both: float, only_a: float, only_b: float, neither: float, z: float) -> tuple[float, float]:
    """:func:`paired_difference_interval` on counts that may be fractional (a seed-averaged table)."""
    n = both + only_a + only_b + neither
    if n == 0:
        return (math.nan, math.nan)
    succ_a, succ_b = both + only_a, both + only_b
    p_a, p_b = succ_a / n, succ_b / n
    l_a, u_a = wilson_interval(succ_a, n, z)
    l_b, u_b = wilson_interval(succ_b, n, z)
    margins = succ_a * (n - succ_a) * succ_b * (n - succ_b)
    phi = 0.0
    if margins > 0:
        cross = both * neither - only_a * only_b
        if cross > n / 2:
            phi = (cross - n / 2) / math.sqrt(margins)
        elif cross < 0:
            phi = cross / math.sqrt(margins)
    lo_sq = (p_a - l_a) ** 2 + (u_b - p_b) ** 2 - 2 * phi * (p_a - l_a) * (u_b - p_b)
    hi_sq = (p_b - l_b) ** 2 + (u_a - p_a) ** 2 - 2 * phi * (p_b - l_b) * (u_a - p_a)
    diff = p_a - p_b
    return (max(-1.0, diff - math.sqrt(max(lo_sq, 0.0))), min(1.0, diff + math.sqrt(max(hi_sq, 0.0))))


UNIT = "image"
"""The unit of every paired test and interval: the image. Every training seed attacks the same first N
images, so seeds pooled are repeated measurements of one image, not new images (:func:`paired_over_seeds`)."""


@dataclass(frozen=True)
class Equivalence:
    """Two one-sided tests (TOST, Schuirmann 1987) that |p_A - p_B| < ``margin``: equivalent when the
    (1 - 2 alpha) interval lies inside (-margin, +margin); ``p_value`` is the larger one-sided p-value."""

    margin: float
    alpha: float
    ci_low: float
    ci_high: float
    p_value: float
    equivalent: bool


@dataclass(frozen=True)
class PairedComparison:
    """Two binary outcomes on the same images (e.g. robust under model A / model B), over ``n_seeds``
    training seeds that each attacked the same ``n`` images: the 2x2 table of (image, seed) pairs, the
    difference of the two proportions with its 95% interval and the two-sided exact p-value, both with
    the image as the unit (:func:`paired_over_seeds`; one seed: Newcombe's interval and exact McNemar)."""

    n: int  # images, the unit
    both: int
    only_a: int
    only_b: int
    neither: int
    ci_low: float
    ci_high: float
    p_value: float
    n_seeds: int = 1

    @property
    def n_pairs(self) -> int:
        """(image, seed) pairs: what the four counts add up to."""
        return self.n * self.n_seeds

    @property
    def acc_a(self) -> float:
        return (self.both + self.only_a) / self.n_pairs if self.n else math.nan

    @property
    def acc_b(self) -> float:
        return (self.both + self.only_b) / self.n_pairs if self.n else math.nan

    @property
    def diff(self) -> float:
        """p_A - p_B = (only_a - only_b) / pairs: only the discordant pairs move it."""
        return (self.only_a - self.only_b) / self.n_pairs if self.n else math.nan

    @property
    def ci_width(self) -> float:
        return self.ci_high - self.ci_low

    @property
    def unit(self) -> str:
        """What the tests count: "200 images" or "200 images x 3 seeds"."""
        seeds = f" × {self.n_seeds} seeds" if self.n_seeds > 1 else ""
        return f"{self.n} {UNIT}{'s' if self.n != 1 else ''}{seeds}"

    def interval(self, z: float = Z95) -> tuple[float, float]:
        """Newcombe's interval at ``z`` on the seed-averaged table with ``n`` images (each image once)."""
        return _newcombe(*_per_image(self.both, self.only_a, self.only_b, self.neither, self.n_seeds), z)

    def equivalence(self, margin: float, alpha: float = 0.05) -> Equivalence:
        """TOST of |diff| < ``margin`` at level ``alpha`` by inverting :meth:`interval` (one-sided z)."""
        if not 0 < margin < 1 or not 0 < alpha < 0.5:
            raise ValueError(f"need 0 < margin < 1 and 0 < alpha < 0.5, got {margin}, {alpha}")
        lo, hi = self.interval(_NORMAL.inv_cdf(1 - alpha))
        p = max(self.one_sided_p(-margin, lower=True), self.one_sided_p(margin, lower=False))
        inside = not math.isnan(lo) and -margin < lo and hi < margin
        return Equivalence(margin, alpha, lo, hi, p, inside)

    def one_sided_p(self, bound: float, *, lower: bool) -> float:
        """p-value of H0: diff <= bound (``lower``) or diff >= bound: the level at which the interval's
        side reaches ``bound`` (bisection on z; the side moves monotonically with z). The 95% interval
        clears ``bound`` exactly when this is below 0.025."""
        if math.isnan(self.diff) or (self.diff <= bound if lower else self.diff >= bound):
            return 1.0

        def beyond(z: float) -> bool:  # the interval's side at z still excludes the bound
            lo, hi = self.interval(z)
            return lo > bound if lower else hi < bound

        z_lo, z_hi = 0.0, 40.0
        if beyond(z_hi):
            return 0.0
        for _ in range(80):
            mid = (z_lo + z_hi) / 2
            z_lo, z_hi = (mid, z_hi) if beyond(mid) else (z_lo, mid)
        return 1 - _NORMAL.cdf(z_lo)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "acc_a": self.acc_a, "acc_b": self.acc_b, "diff": self.diff, "unit": UNIT}


_NORMAL = NormalDist()


def _per_image(both: int, only_a: int, only_b: int, neither: int, n_seeds: int) -> list[float]:
    """The table of (image, seed) pairs averaged over seeds: counts of images (fractional where the seeds
    disagree; integers, exactly, where the total is a multiple of the seeds, e.g. one seed)."""
    return [t // n_seeds if t % n_seeds == 0 else t / n_seeds for t in (both, only_a, only_b, neither)]


def paired_table(both: int, only_a: int, only_b: int, neither: int, z: float = Z95) -> PairedComparison:
    """:class:`PairedComparison` of one seed's 2x2 table of counts (one pair per image)."""
    lo, hi = paired_difference_interval(both, only_a, only_b, neither, z)
    n = both + only_a + only_b + neither
    return PairedComparison(n, both, only_a, only_b, neither, lo, hi, mcnemar_exact(only_a, only_b))


def paired_comparison(flags_a: pd.Series, flags_b: pd.Series, z: float = Z95) -> PairedComparison:
    """Compare two boolean per-example outcomes (index: example_id) on the examples both hold: one seed of
    :func:`paired_over_seeds`.

    Raises ValueError when they share no example: an unpaired comparison is not this test.
    """
    return paired_over_seeds([(flags_a, flags_b)], z)


def paired_over_seeds(pairs: Sequence[tuple[pd.Series, pd.Series]], z: float = Z95) -> PairedComparison:
    """The one paired comparison of outcomes A and B (per-example flags, index example_id), one (A, B)
    pair of flags per training seed, on the images every seed holds, with the image as the unit.

    Every seed attacks the same first N images, so seeds are nested in images: the p-value is the exact
    sign-flip (permutation) test stratified by image (:func:`sign_flip_p`: under H0, A and B swap for all
    seeds of an image at once), and the interval is Newcombe's on the seed-averaged table with N images
    (each image counts once, whatever the number of seeds: never narrower than the data allow). One seed,
    or the same seed given several times, gives exactly Newcombe's interval and the exact McNemar test.
    """
    if not pairs:
        raise ValueError("no seeds to compare: pass one (flags_a, flags_b) pair per training seed")
    common = pairs[0][0].index
    for a, b in pairs:
        common = common.intersection(a.index).intersection(b.index)
    if len(common) == 0:
        raise ValueError(
            "the flags share no example_id: pair two models (or modes) attacked on the same examples"
        )
    a = np.stack([fa.reindex(common).astype(bool).to_numpy() for fa, _ in pairs])
    b = np.stack([fb.reindex(common).astype(bool).to_numpy() for _, fb in pairs])
    both, only_a = int((a & b).sum()), int((a & ~b).sum())
    only_b, neither = int((~a & b).sum()), int((~a & ~b).sum())
    lo, hi = _newcombe(*_per_image(both, only_a, only_b, neither, len(pairs)), z)
    per_image = a.astype(np.int64).sum(0) - b.astype(np.int64).sum(0)
    return PairedComparison(
        len(common), both, only_a, only_b, neither, lo, hi, sign_flip_p(per_image), len(pairs)
    )


def sign_flip_p(diffs: Sequence[int] | np.ndarray) -> float:
    """Two-sided exact p-value of the sign-flip test on per-image integer differences (A's minus B's count
    over the seeds): P(|sum of +-|d_i|| >= |sum d_i|) with independent fair signs.

    When every non-zero |d_i| is the same (one seed, or identical seeds) this is the exact McNemar test
    (:func:`mcnemar_exact`, integer arithmetic); otherwise the distribution of the signed sum is the
    convolution of one binomial per magnitude (float64; its rounding is far below any level used).
    """
    d = np.asarray(diffs, dtype=np.int64)
    d = d[d != 0]
    if d.size == 0:
        return 1.0
    mags, counts = np.unique(np.abs(d), return_counts=True)
    if len(mags) == 1:
        return mcnemar_exact(int((d > 0).sum()), int((d < 0).sum()))
    pmf = np.ones(1)
    for k, n_k in zip(mags.tolist(), counts.tolist()):
        step = np.zeros(k * n_k + 1)
        step[::k] = _binomial_half_pmf(n_k)
        pmf = np.convolve(pmf, step)
    total = int((mags * counts).sum())  # signed sum = 2 u - total, u = sum of the positive magnitudes
    observed = abs(int(d.sum()))
    extreme = np.abs(2 * np.arange(len(pmf)) - total) >= observed
    return float(min(1.0, pmf[extreme].sum()))


def _binomial_half_pmf(n: int) -> np.ndarray:
    """P(X = j), j = 0..n, X ~ Binomial(n, 1/2), through log-gamma (no overflow for any n)."""
    j = np.arange(n + 1)
    log_c = np.array([math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) for i in j])
    return np.exp(log_c - n * math.log(2))


@dataclass(frozen=True)
class SeedSpread:
    """Mean and standard deviation (ddof = 1; NaN for one seed) of a per-seed quantity."""

    mean: float
    sd: float
    n_seeds: int


def seed_spread(values: Sequence[float]) -> SeedSpread:
    """Spread over training seeds of per-seed values (e.g. paired differences), NaN values dropped."""
    vals = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not vals:
        return SeedSpread(math.nan, math.nan, 0)
    sd = float(np.std(vals, ddof=1)) if len(vals) > 1 else math.nan
    return SeedSpread(float(np.mean(vals)), sd, len(vals))


def t_quantile(q: float, df: int) -> float:
    """The ``q`` quantile of Student's t with ``df`` degrees of freedom (Simpson's rule on the density,
    bisection on the value; accurate to ~1e-6, far below any level used). No SciPy: the package does not
    depend on it."""
    if df < 1 or not 0 < q < 1:
        raise ValueError(f"need df >= 1 and 0 < q < 1, got {df}, {q}")
    if q < 0.5:
        return -t_quantile(1 - q, df)
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def cdf(t: float, steps: int = 4000) -> float:  # P(T <= t) for t >= 0
        h = t / steps
        xs = np.linspace(0.0, t, steps + 1)
        f = np.exp(log_c - (df + 1) / 2 * np.log1p(xs * xs / df))
        return 0.5 + h / 3 * float(f[0] + f[-1] + 4 * f[1:-1:2].sum() + 2 * f[2:-1:2].sum())

    lo, hi = 0.0, 1.0
    while cdf(hi) < q:
        lo, hi = hi, 2 * hi
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < q else (lo, mid)
    return (lo + hi) / 2


@dataclass(frozen=True)
class SeedInterval:
    """The t interval of a per-seed quantity, the training seed as the unit (NaN bounds for one seed)."""

    mean: float
    sd: float
    n_seeds: int
    ci_low: float
    ci_high: float
    level: float


def seed_interval(values: Sequence[float], level: float = 0.95) -> SeedInterval:
    """Mean ± t_{n-1} sd / sqrt(n) of per-seed values (e.g. each seed's paired difference): what a claim
    about an architecture, whose unit is the trained network, rests on. NaN bounds with fewer than 2."""
    spread = seed_spread(values)
    if spread.n_seeds < 2:
        return SeedInterval(spread.mean, spread.sd, spread.n_seeds, math.nan, math.nan, level)
    half = t_quantile(1 - (1 - level) / 2, spread.n_seeds - 1) * spread.sd / math.sqrt(spread.n_seeds)
    return SeedInterval(spread.mean, spread.sd, spread.n_seeds, spread.mean - half, spread.mean + half, level)


# ------------------------------------------------------------------------------- common corruptions (average)
CORRUPTION_THREAT = Threat.CORRUPTION.value
_SEVERITY = "severity"
ACCURACY_COLUMNS = ["model", "grad_mode", "corruption", _SEVERITY, "n", "n_correct", "accuracy", "error"]
ACCURACY_COLUMNS += ["ci_low", "ci_high"]


def worst_case_rows(records: pd.DataFrame) -> pd.DataFrame:
    """``records`` without the average-case rows (corruptions): what every worst case is computed from."""
    average = records["threat"].map(is_average_case).astype(bool)
    return records[~average] if average.any() else records


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
