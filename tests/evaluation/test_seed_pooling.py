"""Seeds pooled with the image as the unit (evaluation.metrics.paired_over_seeds) and the equivalence test.

Oracles: the single run (the same run given three times must pool to exactly its interval and p-value),
brute-force enumeration of every sign assignment (the exact sign-flip test), and the interval the TOST
inverts (equivalent exactly when its p-value is below alpha).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest

from robustbench_wave.evaluation.metrics import (
    mcnemar_exact,
    paired_comparison,
    paired_over_seeds,
    paired_table,
    sign_flip_p,
)


def _flags(seed: int, n: int = 60, p_a: float = 0.5, p_b: float = 0.35) -> tuple[pd.Series, pd.Series]:
    rng = np.random.default_rng(seed)
    idx = pd.Index(np.arange(n), name="example_id")
    return pd.Series(rng.random(n) < p_a, index=idx), pd.Series(rng.random(n) < p_b, index=idx)


def test_three_copies_of_one_run_pool_to_the_single_run():
    a, b = _flags(0)
    one = paired_comparison(a, b)
    three = paired_over_seeds([(a, b)] * 3)
    assert (three.ci_low, three.ci_high, three.p_value) == (one.ci_low, one.ci_high, one.p_value)
    assert three.diff == one.diff and three.n == one.n == 60 and three.n_seeds == 3
    assert three.unit == "60 images × 3 seeds" and one.unit == "60 images"
    assert three.equivalence(0.1) == one.equivalence(0.1)
    # adding the tables (seeds as independent images) would have narrowed both
    added = paired_table(*(3 * getattr(one, k) for k in ("both", "only_a", "only_b", "neither")))
    assert added.ci_width < one.ci_width and added.p_value < one.p_value


def test_one_seed_is_mcnemar_and_newcombe():
    a, b = _flags(1)
    cmp = paired_over_seeds([(a, b)])
    assert cmp == paired_table(cmp.both, cmp.only_a, cmp.only_b, cmp.neither)
    assert cmp.p_value == mcnemar_exact(cmp.only_a, cmp.only_b)


def test_images_common_to_every_seed():
    a0, b0 = _flags(2, n=10)
    a1, b1 = _flags(3, n=12)
    cmp = paired_over_seeds([(a0, b0), (a1.drop(index=[4]), b1)])
    assert cmp.n == 9 and cmp.n_pairs == 18  # images 0-9 minus 4, in both seeds
    with pytest.raises(ValueError, match="no seeds"):
        paired_over_seeds([])
    with pytest.raises(ValueError, match="share no example_id"):
        paired_over_seeds([(a0, b0), (a0.set_axis(a0.index + 100), b0.set_axis(b0.index + 100))])


@pytest.mark.parametrize("diffs", [[1, -2, 3, 2, 2, -1, 1], [3, 3, 1, 2, -1], [2, -2], [1, 1, 1, 2]])
def test_sign_flip_by_enumeration(diffs):
    mags = [abs(d) for d in diffs]
    observed = abs(sum(diffs))
    hits = sum(
        abs(sum(s * m for s, m in zip(signs, mags))) >= observed
        for signs in itertools.product((1, -1), repeat=len(mags))
    )
    assert sign_flip_p(diffs) == pytest.approx(hits / 2 ** len(mags), rel=1e-12)
    assert sign_flip_p([0, *diffs, 0]) == sign_flip_p(diffs) and sign_flip_p([0, 0]) == 1.0


def test_pooled_p_value_is_the_image_level_test():
    pairs = [_flags(s) for s in (4, 5, 6)]
    cmp = paired_over_seeds(pairs)
    per_image = sum(a.astype(int) - b.astype(int) for a, b in pairs)
    assert cmp.p_value == sign_flip_p(per_image.to_numpy())
    assert cmp.n == 60 and cmp.n_pairs == 180
    assert cmp.diff == pytest.approx(per_image.sum() / 180)
    assert cmp.ci_low < cmp.diff < cmp.ci_high


def test_equivalence_inverts_the_interval():
    # 200 images, difference 0: the 90% interval is about +-0.05, inside a 10-point margin, not a 2-point one
    flat = paired_table(80, 10, 10, 100)
    eq = flat.equivalence(0.10, 0.05)
    assert eq.equivalent and eq.p_value < 0.05 and -0.1 < eq.ci_low < 0 < eq.ci_high < 0.1
    assert not flat.equivalence(0.02).equivalent and flat.equivalence(0.02).p_value > 0.05
    # [-1, +19]-like: a wide interval reaching past the margin is never equivalent
    wide = paired_table(5, 6, 2, 7)
    assert not wide.equivalence(0.10).equivalent and wide.equivalence(0.10).p_value > 0.05
    for table in [(80, 10, 10, 100), (40, 30, 12, 118), (5, 6, 2, 7), (50, 3, 1, 46)]:
        cmp = paired_table(*table)
        for margin in (0.05, 0.1, 0.2):
            res = cmp.equivalence(margin)
            assert res.equivalent == (res.p_value < 0.05), (table, margin, res)
            assert math.isclose(res.alpha, 0.05) and res.margin == margin
    with pytest.raises(ValueError, match="margin"):
        flat.equivalence(0.0)
