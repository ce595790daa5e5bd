"""The record builder (one schema, one meaning of a skipped point) and the metrics computed from records,
checked against hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from robustbench_wave.attacks import AttackKind, Threat
from robustbench_wave.evaluation import EvaluationResult
from robustbench_wave.evaluation.metrics import (
    WORST,
    WORST_MODE,
    example_status,
    reference_eps,
    robust_accuracy,
    robust_flags,
    summarize,
)
from robustbench_wave.evaluation.records import (
    COLUMNS,
    DTYPES,
    RecordBlock,
    build_records,
    concat,
    read_records,
    write_records,
)
from robustbench_wave.models.frontend import GradMode

IDS = np.array([10, 11, 12, 13])
LABELS = np.array([0, 1, 2, 0])


def _block(mode: str, attack: str, eps: float, threat: str = "Linf") -> RecordBlock:
    if attack == "clean":
        return RecordBlock("m", "toy", mode, "clean", "clean", AttackKind.CLEAN, "none", 0.0, "builtin")
    return RecordBlock("m", "toy", mode, attack, "pgd", AttackKind.WHITE_BOX, threat, eps, "builtin")


def _rows(mode: str, attack: str, eps: float, correct: list[bool], attacked: list[bool] | None = None):
    """Records whose predictions are right exactly where ``correct`` says (wrong = label + 1)."""
    pred = np.where(correct, LABELS, LABELS + 1)
    attacked = np.ones(4, dtype=bool) if attacked is None else np.array(attacked)
    return build_records(
        _block(mode, attack, eps), IDS, LABELS, attacked, pred, norm=np.full(4, eps), loss=np.ones(4)
    )


def test_build_records_schema_dtypes_and_skipped_points() -> None:
    block = RecordBlock(
        "m", "toy", GradMode.BPDA, "pgd", "pgd", AttackKind.WHITE_BOX, Threat.LINF, 0.1, "builtin"
    )
    attacked = np.array([True, True, False, True])
    pred = np.array([0, 2, 2, 0])
    r = build_records(
        block,
        IDS,
        LABELS,
        attacked,
        pred,
        norm=np.array([0.1, 0.05, 0.07, 0.0], dtype=np.float32),
        loss=np.array([0.5, 2.0, 9.0, 0.1], dtype=np.float32),
        correct_last=np.array([True, False, True, True]),
    )
    assert list(r.columns) == COLUMNS
    assert {c: str(t) for c, t in r.dtypes.items()} == DTYPES
    assert len(r) == 4 and list(r["example_id"]) == list(IDS)
    # enum members are stored as their plain values
    assert (
        set(r["grad_mode"]) == {"bpda"} and set(r["kind"]) == {"white-box"} and set(r["threat"]) == {"Linf"}
    )
    assert list(r["correct"]) == [True, False, False, True]  # derived: pred == label where attacked
    skipped = r.iloc[2]
    assert not skipped["correct"] and pd.isna(skipped["pred"]) and math.isnan(skipped["norm"])
    assert math.isnan(skipped["loss_final"]) and pd.isna(skipped["correct_last"])
    assert r["norm"].iloc[1] == np.float32(0.05)  # float32 widened, not rounded through text
    with pytest.raises(ValueError, match="one label"):
        build_records(block, IDS, LABELS[:3], attacked, pred, norm=np.zeros(4), loss=np.zeros(4))


def test_records_round_trip_through_csv_bit_for_bit(tmp_path) -> None:
    r = concat(
        [_rows("exact", "clean", 0.0, [True] * 4), _rows("exact", "a", 0.1, [True, False, True, True])]
    )
    path = write_records(r, tmp_path / "r.csv.gz")
    back = read_records(path)
    pd.testing.assert_frame_equal(back, r)
    assert write_records(back, tmp_path / "s.csv.gz").read_bytes() == path.read_bytes()


@pytest.fixture()
def hand_records() -> pd.DataFrame:
    """Four examples, two modes; 'b' exists only at eps 0.1 but still counts at 0.2 (smaller budget)."""
    frames = []
    for mode, b_correct in (("exact", [False, True, True, False]), ("blocked", [True, True, True, False])):
        frames += [
            _rows(mode, "clean", 0.0, [True, True, True, False]),
            _rows(mode, "a", 0.1, [True, False, True, False]),
            _rows(mode, "a", 0.2, [True, False, False, False]),
            _rows(mode, "b", 0.1, b_correct),
        ]
    return concat(frames)


def test_robust_accuracy_matches_a_hand_computed_worst_case(hand_records: pd.DataFrame) -> None:
    exact = hand_records[hand_records["grad_mode"] == "exact"]
    blocked = hand_records[hand_records["grad_mode"] == "blocked"]
    # exact at 0.1: clean [T,T,T,F] & a [T,F,T,F] & b [F,T,T,F] -> only example 12
    assert list(robust_flags(exact, "Linf", 0.1)) == [False, False, True, False]
    assert robust_accuracy(exact, "Linf", 0.1) == (0.25, 4)
    assert robust_accuracy(exact, "Linf", 0.2) == (0.0, 4)  # a broke 12 at 0.2
    assert robust_accuracy(blocked, "Linf", 0.1) == (0.5, 4)  # 10 and 12
    assert robust_accuracy(hand_records, "Linf", 0.1) == (0.25, 4)  # worst over modes
    assert robust_accuracy(exact, "Linf", 0.05) == (0.75, 4)  # no attack that small: clean accuracy
    # the tables' summary and EvaluationResult give the same numbers
    s = summarize(hand_records)
    cell = s[(s["attack"] == WORST) & (s["eps"] == 0.1)].set_index("grad_mode")["robust_accuracy"]
    assert cell.to_dict() == {"exact": 0.25, "blocked": 0.5, WORST_MODE: 0.25}
    result = EvaluationResult(hand_records, {})
    assert result.robust_accuracy("Linf", 0.1) == 0.25
    assert result.robust_accuracy("Linf", 0.1, grad_mode="blocked") == 0.5
    with pytest.raises(ValueError, match="not evaluated"):
        result.robust_accuracy("Linf", 0.15)


def test_example_status_separates_broken_held_and_unknown() -> None:
    rows = concat(
        [
            _rows("exact", "a", 0.1, [True, False, True, False], attacked=[True, True, True, False]),
            _rows("exact", "a", 0.2, [True, False, False, False], attacked=[True, False, True, False]),
        ]
    )
    status = example_status(rows, "Linf", 0.2)
    # 10 held at 0.2; 11 broken at 0.1; 12 broken at 0.2; 13 never attacked -> unknown
    assert status.loc[10] == 0.0 and status.loc[11] == 1.0 and status.loc[12] == 1.0
    assert math.isnan(status.loc[13])


@pytest.mark.parametrize(
    ("grid", "expected"),
    [
        ([0.01, 0.03, 0.1], 0.03),  # odd: the middle
        ([0.01, 0.03, 0.1, 0.2], 0.03),  # even: the lower middle, on the grid (never the median 0.065)
        ([0.0, 0.05, 0.15], 0.05),  # eps = 0 is the clean input, not a budget
        ([0.5], 0.5),
    ],
)
def test_reference_eps_is_the_lower_middle_of_the_grid(grid: list[float], expected: float) -> None:
    records = concat([_rows("exact", "a", e, [True] * 4) for e in grid])
    assert reference_eps(records, "Linf") == expected
    assert reference_eps(records, "L2", fallback=0.7) == 0.7
    assert reference_eps(None, "Linf") is None
