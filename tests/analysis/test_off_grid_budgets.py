"""A budget that was not attacked is refused in the library too, never answered (issue 39): on a grid of
[0.1], eps 0.05 would read the clean accuracy as robust accuracy, with a verdict."""

from __future__ import annotations

import pandas as pd
import pytest

from robustbench_wave.analysis.verdict import claim_numbers, judge
from robustbench_wave.evaluation.metrics import reference_eps
from tests.support.masking_models import baseline_spec, masking_spec, synthetic_records
from tests.support.trust import checked


def _records() -> pd.DataFrame:
    return pd.concat(
        [synthetic_records("w", masking_spec()), synthetic_records("p", baseline_spec())], ignore_index=True
    )


def test_claim_numbers_refuses_a_budget_that_was_not_attacked() -> None:
    records = _records()
    assert claim_numbers(records, eps=0.1)["eps"].tolist() == [0.1, 0.1]  # on the grid: answered
    with pytest.raises(ValueError, match=r"Linf eps=0.05 was not evaluated.*\[0\.1\]"):
        claim_numbers(records, eps=0.05)


def test_judge_refuses_a_budget_that_was_not_attacked() -> None:
    records = _records()
    with pytest.raises(ValueError, match="was not evaluated"):
        judge(records, num_classes=4, threats=("Linf",), eps={"Linf": 0.05}, trust=checked(records))


def test_a_declared_reference_off_the_grid_is_refused_not_replaced_by_the_middle() -> None:
    records = _records()
    assert reference_eps(records, "Linf", declared={"Linf": 0.1}) == 0.1
    assert reference_eps(records, "Linf") == 0.1  # nothing declared: the middle of the grid
    with pytest.raises(ValueError, match="was not evaluated"):
        reference_eps(records, "Linf", declared={"Linf": 0.03})
    assert reference_eps(records, "L2", fallback=0.5, declared={"L2": 1.0}) == 0.5  # a threat not attacked
