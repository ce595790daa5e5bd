"""The pairwise masking checks count a handful of points only with a test, and a transfer from a model to
itself is a white-box restart (so the patch ViT of ``make demo`` raises no false alarm).

The cases that must pass all fire under the checks' earlier rule, a share compared with a tolerance
(2% / 5%) and every transfer attack read as black-box evidence.
"""

from __future__ import annotations

import pandas as pd
import pytest

from robustbench_wave.analysis.checks import CheckInputs, get_check
from robustbench_wave.analysis.checks.compare import (
    PAIRED_ALPHA,
    as_white_box_restarts,
    self_transfer_models,
)
from robustbench_wave.analysis.diagnostics import run_diagnostics
from tests.support.masking_models import Info, QuadrantLinear, attack_rows, clean_rows, quadrant_data

PAIRWISE = ("whitebox_beats_blackbox", "gradient_mode_gap")


def _broken(ids: range, n: int) -> list[bool]:
    """correct flags of ``n`` examples with ``ids`` broken."""
    return [i not in ids for i in range(n)]


def _square(broken: range, n: int, attacked: list[bool] | None = None) -> pd.DataFrame:
    return attack_rows("square", "square", "black-box", 0.1, _broken(broken, n), attacked=attacked)


def _judge(*frames: pd.DataFrame, n: int) -> dict[str, object]:
    records = pd.concat([clean_rows(n), *frames], ignore_index=True)
    return {name: get_check(name)().run(CheckInputs(records=records), "exact") for name in PAIRWISE}


def test_six_of_62_matched_the_other_way_do_not_fire():
    """Square breaks 6 of 62 points PGD held, PGD breaks 6 Square held: two attacks of equal strength."""
    pgd = attack_rows("pgd", "pgd", "white-box", 0.1, _broken(range(56, 62), 62))
    results = _judge(pgd, _square(range(6), 62), n=62)
    for name, result in results.items():
        assert result.passed is True, (name, result)
        assert "too few to count" in result.meaning and "p = 0.61" in result.meaning
    assert results["whitebox_beats_blackbox"].numbers["Linf@0.1"] == "6/62 (reverse 6, p=0.61)"
    assert results["whitebox_beats_blackbox"].numbers["worst_share"] > 0.02  # over the old tolerance


def test_a_one_sided_excess_fires():
    """Square breaks 12 points PGD held and PGD none that Square held: significant (p = 2^-12)."""
    pgd = attack_rows("pgd", "pgd", "white-box", 0.1, [True] * 62)
    for name, result in _judge(pgd, _square(range(12), 62), n=62).items():
        assert result.passed is False, (name, result)
        assert "one-sided exact McNemar p = 0.00024 < 0.01" in result.meaning


@pytest.mark.parametrize(("square_breaks", "fires"), [(6, False), (8, True)])
def test_skip_broken_hides_the_reverse_pairs(square_breaks, fires):
    """Under skip_broken Square ran only on the 62 points PGD held: the reverse pairs are unseen and count
    as none, so the test needs 7 violations at alpha = 0.01 (2^-6 = 0.016, 2^-8 = 0.0039)."""
    n, held = 100, 62
    pgd = attack_rows("pgd", "pgd", "white-box", 0.1, _broken(range(held, n), n))
    ran = [i < held for i in range(n)]
    square = _square(range(square_breaks), n, attacked=ran)
    square.loc[~square["attacked"], "correct"] = False  # skipped points are recorded as not correct
    result = _judge(pgd, square, n=n)["whitebox_beats_blackbox"]
    assert result.passed is (not fires), result
    assert f"{square_breaks}/{held} (reverse 0 + 38 unseen" in result.numbers["Linf@0.1"]
    assert PAIRED_ALPHA == 0.01


# ------------------------------------------------------------------------------------ transfer to itself
def _demo_like(n: int = 100, held: int = 62, transfer_breaks: int = 10) -> pd.DataFrame:
    """PGD holds 62 points, the transfer attack (skip_broken: run on those 62) breaks 10 of them, Square
    none: as the demo's patch ViT, whose transfer attack was crafted on the patch ViT itself."""
    ran = [i < held for i in range(n)]
    pgd = attack_rows("pgd", "pgd", "white-box", 0.1, _broken(range(held, n), n))
    transfer = attack_rows(
        "transfer_pgd", "transfer", "transfer", 0.1, _broken(range(transfer_breaks), n), ran
    )
    transfer.loc[~transfer["attacked"], "correct"] = False
    square = _square(range(0), n, attacked=ran)
    square.loc[~square["attacked"], "correct"] = False
    return pd.concat([clean_rows(n), pgd, transfer, square], ignore_index=True)


def _meta(surrogate: str, own_hash: str | None = "aa", their_hash: str | None = "aa") -> dict:
    return {
        "models": {
            "m": {"param_sha256": own_hash, "surrogate": {"name": surrogate, "param_sha256": their_hash}}
        }
    }


def test_self_transfer_models_reads_meta():
    assert self_transfer_models(_meta("m")) == {"m"}
    assert self_transfer_models(_meta("patch", "aa", "aa")) == {"m"}  # same weights under another name
    assert self_transfer_models(_meta("m", "aa", "bb")) == set()  # same zoo name, another checkpoint
    assert self_transfer_models(_meta("m", None, None)) == {"m"}  # no hashes: the name decides
    assert self_transfer_models(_meta("patch", None, None)) == set()
    assert self_transfer_models({"models": {"m": {"surrogate": None}}}) == set()
    assert self_transfer_models(None) == set()


def test_self_transfer_is_a_white_box_restart():
    records = _demo_like()
    as_black_box = _judge(records[records["kind"] != "clean"], n=100)
    assert as_black_box["whitebox_beats_blackbox"].passed is False  # the demo's false alarm
    restarts = as_white_box_restarts(records, ["m"])
    assert set(restarts.loc[restarts["attack"] == "transfer_pgd", "kind"]) == {"white-box"}
    assert len(restarts) == len(records)
    for name in PAIRWISE:
        result = get_check(name)().run(CheckInputs(records=restarts), "exact")
        assert result.passed is True, (name, result)
    # another model's transfer rows stay black-box evidence
    assert as_white_box_restarts(records, ["other"]) is records


def test_run_diagnostics_reads_the_surrogate_from_meta():
    x, y = quadrant_data(100)
    records = _demo_like()
    fast = {"n": 8, "eps": 0.15, "steps": 2, "square_queries": 0}
    checks = [get_check("whitebox_beats_blackbox")()]
    kw = {"info": Info(), "model_name": "m", "checks": checks, **fast}
    plain = run_diagnostics(QuadrantLinear().eval(), x, y, records, **kw)
    assert plain.checks[0].passed is False and plain.settings["self_transfer"] is False
    itself = run_diagnostics(QuadrantLinear().eval(), x, y, records, meta=_meta("m"), **kw)
    assert itself.checks[0].passed is True and itself.checks[0].numbers["source"] == "records"
    assert itself.settings["self_transfer"] is True
    other = run_diagnostics(QuadrantLinear().eval(), x, y, records, meta=_meta("patch", "aa", "bb"), **kw)
    assert other.checks[0].passed is False
