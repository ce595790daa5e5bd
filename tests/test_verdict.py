"""The verdict follows the numbers, never the model names.

Each test checks the numbers first (:func:`claim_numbers`, the categories :func:`categorize` computes from
them, ``Verdict.details``) and only then that the prose renders those numbers.
"""

from __future__ import annotations

import pandas as pd
import pytest

from robustbench_wave.analysis.verdict import (
    MASKING,
    NOT_ROBUST,
    ROBUST,
    VerdictSettings,
    categorize,
    claim_numbers,
    verdict,
)
from tests.support.masking_models import baseline_spec, masking_spec, synthetic_records

CHANCE = 0.25  # 4 classes


def _run(candidate: str = "wavelet", baseline: str = "patch", **masking) -> pd.DataFrame:
    return pd.concat(
        [synthetic_records(candidate, masking_spec(**masking)), synthetic_records(baseline, baseline_spec())],
        ignore_index=True,
    )


def _rows(records: pd.DataFrame) -> dict[str, dict]:
    nums = claim_numbers(records)
    return {row["model"]: row for row in nums.to_dict(orient="records")}


def _pct(value: float) -> str:
    return f"{100 * value:.1f}%"


def test_claim_numbers_per_mode_and_worst_case():
    nums = claim_numbers(_run()).set_index("model")
    w = nums.loc["wavelet"]
    assert (w["wb_blocked"], w["wb_exact"], w["wb_bpda"]) == (0.90, 0.05, 0.03)
    assert (w["gradient_free"], w["transfer"], w["noise"], w["clean"]) == (0.40, 0.20, 0.95, 1.0)
    assert w["worst_case"] == 0.03  # per-example AND over everything = the minimum for nested sets
    assert (w["n"], w["modes"], w["eps"]) == (100, "exact,blocked,bpda", 0.1)
    assert nums.loc["patch", "worst_case"] == 0.04 and pd.isna(nums.loc["patch", "wb_blocked"])
    assert nums.loc["patch", "modes"] == "exact"


def test_categories_follow_the_numbers():
    """Masking = blocked minus worst case >= gap_tol; robust = worst case clearly above the baseline's."""
    settings = VerdictSettings()
    rows = _rows(_run())
    masked = categorize(rows["wavelet"], rows["patch"], chance=CHANCE, settings=settings)
    assert masked["gap"] == pytest.approx(0.87) and masked["masking"] is True
    assert masked["above_baseline"] is False and masked["diff"] == pytest.approx(-0.01)
    assert masked["category"] == MASKING

    robust = masking_spec(blocked=60, exact=60, bpda=60, square=60, transfer=60)
    rows = _rows(pd.concat([synthetic_records("w", robust), synthetic_records("p", baseline_spec(pgd=5))]))
    cat = categorize(rows["w"], rows["p"], chance=CHANCE, settings=settings)
    assert cat["gap"] == pytest.approx(0.0) and cat["above_baseline"] is True and cat["category"] == ROBUST

    honest = masking_spec(blocked=6, exact=5, bpda=5, square=40, transfer=20)
    rows = _rows(pd.concat([synthetic_records("w", honest), synthetic_records("p", baseline_spec())]))
    cat = categorize(rows["w"], rows["p"], chance=CHANCE, settings=settings)
    assert cat["gap"] == pytest.approx(0.01) and cat["masking"] is False and cat["category"] == NOT_ROBUST
    # a looser tolerance turns the same numbers into masking
    assert categorize(rows["w"], rows["p"], chance=CHANCE, settings=VerdictSettings(gap_tol=0.005))["masking"]


def test_masking_verdict_renders_the_numbers():
    records = _run()
    rows = _rows(records)
    v = verdict(records, num_classes=4, threats=("Linf",))
    assert v.categories == {"wavelet@Linf": MASKING}
    assert v.details["wavelet@Linf"]["gap"] == pytest.approx(0.87)
    assert v.numbers.set_index("model").loc["wavelet", "worst_case"] == rows["wavelet"]["worst_case"]
    w, p = rows["wavelet"], rows["patch"]
    assert f"Under blocked gradients **wavelet** keeps {_pct(w['wb_blocked'])}" in v.text
    assert f"falls to **{_pct(w['worst_case'])}**" in v.text
    assert f"BPDA {_pct(w['wb_bpda'])}" in v.text and f"Square {_pct(w['gradient_free'])}" in v.text
    assert f"patch (the baseline) keeps {_pct(p['worst_case'])}" in v.text
    assert "gradient masking" in v.text and "not supported" in v.headline


def test_swapping_names_swaps_the_verdict():
    """The model called 'patch' now carries the fixed front-end and the masked numbers: it gets the verdict."""
    swapped = _run(candidate="patch", baseline="wavelet")
    rows = _rows(swapped)
    assert rows["patch"]["wb_blocked"] == 0.90 and pd.isna(rows["wavelet"]["wb_blocked"])
    v = verdict(swapped, num_classes=4, threats=("Linf",))
    assert v.categories == {"patch@Linf": MASKING}
    assert "Under blocked gradients **patch** keeps 90.0%" in v.text
    assert "wavelet (the baseline) keeps 4.0%" in v.text


def test_robust_and_not_robust_verdicts():
    robust = masking_spec(blocked=60, exact=60, bpda=60, square=60, transfer=60)
    records = pd.concat([synthetic_records("w", robust), synthetic_records("p", baseline_spec(pgd=5))])
    v = verdict(records, num_classes=4, threats=("Linf",))
    assert v.categories == {"w@Linf": ROBUST} and v.details["w@Linf"]["above_baseline"] is True
    assert f"**{_pct(_rows(records)['w']['worst_case'])}**" in v.text
    assert "robust under all attacks" in v.text and "holds as measured" in v.headline

    honest = masking_spec(blocked=6, exact=5, bpda=5, square=40, transfer=20)
    records = pd.concat([synthetic_records("w", honest), synthetic_records("p", baseline_spec())])
    v = verdict(records, num_classes=4, threats=("Linf",))
    assert v.categories == {"w@Linf": NOT_ROBUST} and v.details["w@Linf"]["masking"] is False
    assert "no natural robustness" in v.text and "gradient masking" not in v.text


def test_explicit_baseline_and_unknown_baseline():
    v = verdict(_run(), num_classes=4, threats=("Linf",), baseline="patch")
    assert list(v.categories) == ["wavelet@Linf"]
    with pytest.raises(ValueError, match="not in the records"):
        verdict(_run(), num_classes=4, baseline="vit")


def test_several_seeds_give_mean_and_spread():
    runs = [_run(blocked=b, bpda=3) for b in (88, 90, 92)]
    v = verdict(runs, num_classes=4, threats=("Linf",), seeds=[0, 1, 2])
    per_seed = v.numbers[v.numbers["model"] == "wavelet"].set_index("seed")["wb_blocked"]
    assert per_seed.to_dict() == {0: 0.88, 1: 0.90, 2: 0.92}
    assert per_seed.mean() == pytest.approx(0.90) and per_seed.std() == pytest.approx(0.02)
    assert v.categories == {"wavelet@Linf": MASKING}
    assert v.details["wavelet@Linf"]["seed_agreement"] == "3/3 seeds"
    assert "90.0 ± 2.0%" in v.text and "3 training seeds" in v.text


def test_energy_and_diagnostics_sentences():
    v = verdict(
        _run(),
        num_classes=4,
        threats=("Linf",),
        energy={"wavelet": {"noise": 0.8, "pgd": 0.2, "lowfreq_pgd": 0.0}},
        diagnostics_failures={"wavelet": {"blocked": ["gradient_health"]}, "patch": {}},
    )
    assert "removes 80.0% of a random perturbation" in v.text and "filters noise, not adversarial" in v.text
    assert "under blocked gradients the checklist flags gradient_health" in v.text
    assert "Diagnostics for **patch**" not in v.text


def test_robust_verdict_is_qualified_by_failed_diagnostics():
    robust = masking_spec(blocked=60, exact=60, bpda=60, square=60, transfer=60)
    records = pd.concat([synthetic_records("w", robust), synthetic_records("p", baseline_spec(pgd=5))])
    v = verdict(
        records,
        num_classes=4,
        threats=("Linf",),
        diagnostics_failures={"w": {"bpda": ["attack_convergence"]}},
    )
    assert v.categories == {"w@Linf": ROBUST}
    assert "may be overestimated" in v.headline and "under bpda gradients attack_convergence fail" in v.text
    quiet = verdict(records, num_classes=4, threats=("Linf",), diagnostics_failures={"w": {"blocked": ["x"]}})
    assert "Caution" not in quiet.headline


def test_verdict_is_judged_at_the_reference_eps():
    """The middle budget of the grid (the lower middle for an even count), and masking at other budgets is
    listed by the grid sentence."""
    odd = pd.concat([synthetic_records("p", baseline_spec(), eps=e) for e in (0.01, 0.03, 0.1, 0.2, 0.3)])
    assert claim_numbers(odd)["eps"].tolist() == [0.1]
    grid = (0.05, 0.1)
    records = pd.concat(
        [synthetic_records("w", masking_spec(), eps=e) for e in grid]
        + [synthetic_records("p", baseline_spec(), eps=e) for e in grid],
        ignore_index=True,
    ).drop_duplicates(["model", "grad_mode", "attack", "eps", "example_id"])
    v = verdict(records, num_classes=4, threats=("Linf", "L2"))
    assert v.numbers["eps"].unique().tolist() == [0.05]
    assert list(v.categories) == ["w@Linf"]  # no L2 rows: nothing to judge there
    assert v.details["w@Linf"]["masking_eps"] == [0.05, 0.1]
    assert "Across the Linf grid (ε = 0.05, 0.1)" in v.text
