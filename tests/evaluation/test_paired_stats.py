"""Paired statistics (evaluation.metrics): the exact McNemar test, Newcombe's paired interval, the seed spread.

Hand-computed cases first (binomial tails of small n by counting), then scipy as an oracle where it is
installed (it is not a dependency of the package: the library computes the tails with integers).
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from robustbench_wave.evaluation.metrics import (
    Z95,
    binomial_half_cdf,
    mcnemar_exact,
    paired_comparison,
    paired_difference_interval,
    paired_table,
    seed_spread,
    wilson_interval,
)


def test_binomial_tail_by_counting():
    assert binomial_half_cdf(0, 6) == 1 / 64
    assert binomial_half_cdf(1, 6) == 7 / 64  # C(6,0) + C(6,1)
    assert binomial_half_cdf(2, 5) == 16 / 32  # symmetric: exactly one half
    assert binomial_half_cdf(6, 6) == 1.0 and binomial_half_cdf(9, 6) == 1.0
    assert binomial_half_cdf(0, 2000) == 2.0**-2000  # no overflow, no underflow to 0 above float's range
    with pytest.raises(ValueError, match="non-negative integer"):
        binomial_half_cdf(-1, 3)


def test_mcnemar_hand_computed():
    assert mcnemar_exact(6, 0) == 2 / 64  # two-sided: 2 P(X <= 0), n = 6
    assert mcnemar_exact(0, 6) == 2 / 64
    assert mcnemar_exact(5, 1) == 14 / 64  # 2 (C(6,0) + C(6,1)) / 64
    assert mcnemar_exact(6, 6) == 1.0 and mcnemar_exact(1, 0) == 1.0 and mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(6, 0, "greater") == 1 / 64  # P(X >= 6)
    assert mcnemar_exact(6, 0, "less") == 1.0
    assert mcnemar_exact(5, 1, "greater") == 7 / 64  # P(X >= 5) = P(X <= 1)
    assert mcnemar_exact(6, 6, "greater") == pytest.approx(1 - binomial_half_cdf(5, 12))
    with pytest.raises(ValueError, match="alternative"):
        mcnemar_exact(1, 2, "bigger")
    with pytest.raises(ValueError, match="only_b"):
        mcnemar_exact(1, 2.5)


def test_mcnemar_matches_scipy():
    stats = pytest.importorskip("scipy.stats")
    for b in range(0, 25, 3):
        for c in range(0, 25, 4):
            if b + c == 0:
                continue
            for alt in ("two-sided", "greater", "less"):
                expected = stats.binomtest(b, b + c, 0.5, alternative=alt).pvalue
                assert mcnemar_exact(b, c, alt) == pytest.approx(expected, rel=1e-12, abs=1e-15)
    big = stats.binomtest(3000, 6300, 0.5).pvalue
    assert mcnemar_exact(3000, 3300) == pytest.approx(big, rel=1e-9)


def test_newcombe_interval_hand_computed():
    # no success anywhere: phi = 0 (an empty margin) and the interval is +- the upper Wilson bound of 0/16
    lo, hi = paired_difference_interval(0, 0, 0, 16)
    w = Z95**2 / (16 + Z95**2)
    assert (lo, hi) == pytest.approx((-w, w))
    # 10 robust under both, 10 under neither (n = 20): p = 1/2 each; A = 10*10 = 100 > n/2, so
    # phi = (100 - 10) / sqrt(10^4) = 0.9 and each side is h sqrt(2 - 2 * 0.9) = h sqrt(0.2), h = Wilson half
    l1, u1 = wilson_interval(10, 20)
    h = (u1 - l1) / 2
    assert paired_difference_interval(10, 0, 0, 10) == pytest.approx(
        (-h * math.sqrt(0.2), h * math.sqrt(0.2))
    )
    # A < 0 keeps phi = A / sqrt(margins); the interval brackets the difference and stays in [-1, 1]
    lo, hi = paired_difference_interval(1, 1, 7, 12)  # Bentur et al. 2009, Fagerland et al. 2014
    assert lo < (1 + 1 - 1 - 7) / 21 < hi < 0
    assert (lo, hi) == pytest.approx((-0.5069, -0.0256), abs=5e-4)
    assert all(math.isnan(v) for v in paired_difference_interval(0, 0, 0, 0))


def test_paired_comparison_pairs_by_example_id():
    a = pd.Series([True, True, False, False, True], index=[0, 1, 2, 3, 9])
    b = pd.Series([True, False, True, False], index=[3, 2, 1, 0])  # another order; example 9 unpaired
    cmp = paired_comparison(a, b)
    # example 0: A only; 1: both; 2: B only; 3: neither
    assert (cmp.n, cmp.both, cmp.only_a, cmp.only_b, cmp.neither) == (4, 1, 1, 1, 1)
    assert cmp.diff == 0.0 and cmp.p_value == 1.0 and cmp.acc_a == 0.5
    assert cmp.ci_low < 0 < cmp.ci_high and cmp.ci_width == pytest.approx(cmp.ci_high - cmp.ci_low)
    assert cmp == paired_table(1, 1, 1, 1)
    assert cmp.to_dict()["diff"] == 0.0
    with pytest.raises(ValueError, match="share no example_id"):
        paired_comparison(a, pd.Series([True], index=[42]))


def test_same_accuracies_different_pairs():
    """Unpaired intervals cannot tell these apart; the paired test can: 30% vs 10% with the 10% a subset of
    the 30% (20 discordant pairs, all one way) is decisive, the same accuracies with 30 pairs split 25/5 less so."""
    nested = paired_table(10, 20, 0, 70)
    assert nested.diff == pytest.approx(0.2) and nested.p_value == 2 * 2.0**-20
    split = paired_table(5, 25, 5, 65)
    assert split.diff == pytest.approx(0.2) and split.p_value > nested.p_value
    assert split.ci_width > nested.ci_width


def test_seed_spread():
    s = seed_spread([0.1, 0.2, 0.3])
    assert (s.mean, s.sd, s.n_seeds) == (pytest.approx(0.2), pytest.approx(0.1), 3)
    one = seed_spread([0.4, float("nan")])
    assert one.mean == 0.4 and math.isnan(one.sd) and one.n_seeds == 1
    assert seed_spread([]).n_seeds == 0
