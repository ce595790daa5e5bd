"""eps_monotone and large_eps_to_chance can fail (issue 22): each has a planted model where it fires and an
honest one where it passes, and the evidence that made them unable to fail is no longer counted.

Oracles: the planted models' behaviour measured directly (the budget sweep's accuracy per budget; PGD with
the uniform random start, the old check's attack), against what the checks conclude.
"""

from __future__ import annotations

import pandas as pd
import pytest

from robustbench_wave.analysis.checks import CheckInputs, get_check
from robustbench_wave.attacks import attack_mode, pgd_with_history
from tests.support.masking_models import (
    NUM_CLASSES,
    NoiseFragileQuadrant,
    QuadrantLinear,
    RoughnessTrap,
    _swept,
    attack_rows,
    clean_rows,
    quadrant_data,
)


def _skip_broken_records() -> pd.DataFrame:
    """PGD breaks 7 of 10 at eps 0.1; under skip-broken those 7 are never attacked at 0.2 (recorded broken)."""
    small = attack_rows("pgd", "pgd", "white-box", 0.1, [True] * 3 + [False] * 7)
    large = attack_rows(
        "pgd", "pgd", "white-box", 0.2, [True] * 3 + [False] * 7, attacked=[True] * 3 + [False] * 7
    )
    return pd.concat([clean_rows(10), small, large], ignore_index=True)


@pytest.mark.slow
def test_eps_monotone_reads_the_sweep_when_skip_broken_records_cannot_fail():
    check = get_check("eps_monotone")()
    hidden = check.judge(_skip_broken_records(), "exact")
    assert hidden.passed is None and "cannot show a rise" in hidden.meaning

    trap = _swept(RoughnessTrap)()
    acc = trap.sweep_records.query("attack == 'pgd_linf'").groupby("eps")["correct"].mean()
    assert list(acc.index) == [0.1, 0.2, 0.4] and acc[0.4] - acc[0.1] > 0.5  # the planted rise, measured
    fired = check.run(CheckInputs(records=_skip_broken_records(), sweep_records=trap.sweep_records), "exact")
    assert fired.passed is False and fired.numbers["source"] == "budget sweep n=16 eps=0.1/0.2/0.4"
    assert fired.numbers["max_rise"] > 0.5

    sweep = _swept(QuadrantLinear)().sweep_records
    honest = check.run(CheckInputs(records=_skip_broken_records(), sweep_records=sweep), "exact")
    assert honest.passed is True and honest.numbers["source"].startswith("budget sweep")
    assert check.run(CheckInputs(records=_skip_broken_records()), "exact").passed is None  # no sweep: n/a


def test_large_eps_to_chance_does_not_score_the_random_start():
    x, y = quadrant_data(16)
    model = NoiseFragileQuadrant().eval()
    with attack_mode(model):  # the old attack: the uniform random start alone breaks the model
        x_adv, _ = pgd_with_history(model, x, y, eps=0.5, norm="Linf", steps=5, step_size=0.25, seed=0)
        assert float((model(x_adv).argmax(1) == y).float().mean()) <= 1 / NUM_CLASSES + 0.05
    check = get_check("large_eps_to_chance")(steps=5)
    inputs = CheckInputs(model=model, x=x, y=y, num_classes=NUM_CLASSES)
    fired = check.run(inputs, "exact")
    assert fired.passed is False and fired.numbers["accuracy"] == 1.0  # no gradient: never leaves the image
    assert fired.numbers["start"] == "the image (no random start)"
    honest = check.run(CheckInputs(model=QuadrantLinear().eval(), x=x, y=y, num_classes=NUM_CLASSES), "exact")
    assert honest.passed is True and honest.numbers["accuracy"] == 0.0
