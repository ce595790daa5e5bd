"""The pairwise masking checks test the weak attack's exclusive breaks among the points the strong attack held
against a small tolerated rate (one-sided exact binomial), whatever the reverse pairs; and a transfer from
a model to itself is a white-box restart (so the patch ViT of ``make demo`` raises no false alarm).

Until issue 32 a check fired only when the weak attack's exclusive breaks significantly outnumbered the
strong attack's: the strong attack's own breaks excused the weak one's, a test locked in a pass where Square
broke 6 of the 56 points PGD held (10.7%), and under skip-broken 7 violations were needed whatever n.
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
from robustbench_wave.evaluation.metrics import binomial_tail
from tests.support.masking_models import (
    Info,
    QuadrantLinear,
    attack_rows,
    clean_rows,
    quadrant_data,
    square_breaks_held,
)

PAIRWISE = ("whitebox_beats_blackbox", "gradient_mode_gap")


def _broken(ids: range | list[int], n: int) -> list[bool]:
    """correct flags of ``n`` examples with ``ids`` broken."""
    return [i not in ids for i in range(n)]


def _square(broken: range | list[int], n: int, attacked: list[bool] | None = None) -> pd.DataFrame:
    return attack_rows("square", "square", "black-box", 0.1, _broken(broken, n), attacked=attacked)


def _judge(*frames: pd.DataFrame, n: int) -> dict[str, object]:
    records = pd.concat([clean_rows(n), *frames], ignore_index=True)
    return {name: get_check(name)().run(CheckInputs(records=records), "exact") for name in PAIRWISE}


def test_the_strong_attacks_own_breaks_no_longer_excuse_the_weak_ones():
    """Square breaks 6 of the 56 points PGD held (10.7%), PGD breaks 6 that Square held. The old rule
    (McNemar on the discordant pairs, 6 vs 6: p = 0.61) passed it -- this test used to lock that pass in.
    Against the tolerated rate of 2% it fires: P(X >= 6 | 56, 0.02) = 0.00088. gradient_mode_gap tolerates
    5% (two gradients legitimately differ near the boundary): P(X >= 6 | 56, 0.05) = 0.060, a pass."""
    pgd = attack_rows("pgd", "pgd", "white-box", 0.1, _broken(range(56, 62), 62))
    results = _judge(pgd, _square(range(6), 62), n=62)
    wb = results["whitebox_beats_blackbox"]
    assert wb.passed is False and wb.numbers["Linf@0.1"] == "6/56 held (reverse 6, p=0.00088 vs rate 2%)"
    assert "one-sided exact binomial p = 0.00088 < 0.01 against a tolerated rate of 2%" in wb.meaning
    assert binomial_tail(6, 56, 0.02) == pytest.approx(0.00088, abs=1e-5)
    gap = results["gradient_mode_gap"]
    assert gap.passed is True and "p = 0.06 >= 0.01" in gap.meaning, gap


def test_a_one_sided_excess_fires():
    """Square breaks 12 of the 62 points PGD held, PGD none that Square held."""
    pgd = attack_rows("pgd", "pgd", "white-box", 0.1, [True] * 62)
    for name, result in _judge(pgd, _square(range(12), 62), n=62).items():
        assert result.passed is False, (name, result)
        assert "12 of the 62 points the stronger attack held" in result.meaning


def test_binomial_tail_against_a_hand_computed_case():
    # P(X >= 2 | 3, 0.5) = 4/8; P(X >= 1 | 10, 0.1) = 1 - 0.9^10
    assert binomial_tail(2, 3, 0.5) == pytest.approx(0.5)
    assert binomial_tail(1, 10, 0.1) == pytest.approx(1 - 0.9**10)
    assert binomial_tail(0, 10, 0.1) == 1.0 and binomial_tail(11, 10, 0.1) == 0.0


@pytest.mark.parametrize(
    ("square_share", "reverse", "fires"),
    [(0.05, 0, True), (0.05, 20, True), (0.01, 0, False), (0.01, 20, False)],
)
def test_square_breaking_5_percent_of_the_points_pgd_held_fires_at_n_500(square_share, reverse, fires):
    """The planted records of ``masking_models.square_breaks_held``: PGD holds 60% of n = 500 (300 points),
    Square breaks 5% of them: 15 vs the 6 a 2% rate allows, P(X >= 15 | 300, 0.02) = 0.00056 -- whether
    Square ran skip-broken (only on those 300) or on every point, holding 20 that PGD broke. The old rule
    passed the second (15 against 20 reverse pairs: one-sided McNemar p = 0.84). At 1% (3 points) both pass."""
    records = square_breaks_held(500, square_share, reverse=reverse)
    result = get_check("whitebox_beats_blackbox")().run(CheckInputs(records=records), "exact")
    assert result.passed is (not fires), result
    assert result.numbers["source"] == "records"  # Square ran on every point PGD held
    held = result.numbers["Linf@0.1"]
    assert held.startswith(f"{round(square_share * 300)}/300 held (reverse {reverse}"), held


@pytest.mark.parametrize(
    ("n", "pgd_held", "square_breaks"),
    [(200, 0.52, 1), (1000, 0.159, 0), (1000, 0.712, 0)],
    ids=["gallery-cnn", "demo-patch-0.03", "demo-patch-0.01"],
)
def test_the_published_honest_models_do_not_fire(n, pgd_held, square_breaks):
    """The counts of the published honest models: the gallery's undefended CNN (results/published/gallery:
    exact white-box 52%, every attack 51.5% of 200 at L∞ 0.03, so Square/transfer broke at most 1 of the 104
    points white-box held, P(X >= 1 | 104, 0.02) = 0.88) and the demo's patch ViT (diagnostics.csv: Square
    broke 0 of the 159 / 712 points PGD held)."""
    held = round(pgd_held * n)
    records = square_breaks_held(n, square_breaks / held, pgd_held)
    result = get_check("whitebox_beats_blackbox")().run(CheckInputs(records=records), "exact")
    assert result.passed is True, result
    assert result.numbers["Linf@0.1"].startswith(f"{square_breaks}/{held} held")


def test_skip_broken_hiding_the_weak_attacks_breaks_defers_to_the_subset():
    """Square ran first and broke points 0-2; PGD then skipped 0 and 1 (and broke 2): whether PGD holds 0
    and 1 is unknown, so a pass on the other points is not measurable on these records (the diagnostics
    subset decides), while a firing stands (the hidden points could only add violations)."""
    n = 100
    pgd = attack_rows(
        "pgd", "pgd", "white-box", 0.1, _broken(range(3), n), attacked=[i >= 2 for i in range(n)]
    )
    result = _judge(_square(range(3), n), pgd, n=n)["whitebox_beats_blackbox"]
    assert result.passed is None and "skip_broken hid" in result.meaning, result
    square = _square([*range(3), *range(10, 20)], n)  # and 10 of the 97 points PGD held: fires
    result = _judge(square, pgd, n=n)["whitebox_beats_blackbox"]
    assert result.passed is False and "10/97 held (reverse 0, 2 unseen" in result.numbers["Linf@0.1"]
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
