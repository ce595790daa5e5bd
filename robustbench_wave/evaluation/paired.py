"""Paired statistics: two sets of per-example flags on the same images compared, with the image as the unit.
Import these through :mod:`robustbench_wave.evaluation.metrics`; docs/statistics.md says why each test.

:func:`paired_over_seeds` is the one paired comparison of two sets of per-example flags on the same images
(two models, two modes, or two attack groups), one pair of flag sets per training seed (every seed attacks
the same first N images): the exact sign-flip test stratified by image (:func:`sign_flip_p`; one seed: the
exact McNemar test, :func:`mcnemar_exact`), Newcombe's paired interval on the seed-averaged table
(:func:`paired_difference_interval`) and the equivalence test (TOST, :meth:`PairedComparison.equivalence`);
:func:`paired_comparison` is its one-seed case and :func:`seed_spread` the spread of per-seed differences.
Beside it: the seeds' t interval (:func:`seed_interval`), Holm's adjusted p-values (:func:`holm_adjusted`)
and the binomial tail the masking checks test against a tolerated rate (:func:`binomial_tail`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Any

import numpy as np
import pandas as pd

from robustbench_wave.evaluation.worst_case import Z95, wilson_interval

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
