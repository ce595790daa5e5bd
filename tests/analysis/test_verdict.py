"""The verdict follows the numbers, never the model names.

Each test checks the numbers first (:func:`claim_numbers`, the categories :func:`categorize` computes from
them, ``Verdict.details``) and only then that the prose renders those numbers.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from robustbench_wave.analysis.formatting import DASH, as_float, interval, number, percent, points
from robustbench_wave.analysis.verdict import (
    CLEAN_FLOOR_SHARE,
    EQUIVALENCE_MARGIN,
    FILTERS_ADVERSARIAL,
    INCONCLUSIVE,
    MASKING,
    MASKING_INCONCLUSIVE,
    NO_DIFFERENCE,
    NOT_ROBUST,
    ROBUST,
    ROBUST_THESE_NETWORKS,
    UNDECIDED,
    VerdictSettings,
    categorize,
    claim_numbers,
    clean_floor,
    judge,
    paired_masking,
    paired_worst_case,
)
from robustbench_wave.evaluation.metrics import paired_table
from robustbench_wave.reporting import verdict_text
from robustbench_wave.reporting.verdict_text import render
from tests.support.masking_models import baseline_spec, masking_spec, synthetic_records
from tests.support.trust import checked, with_checklist

#: The rules of the numbers, with a checklist that passed every mode (the trust rule: tests/reporting/test_marks.py).
verdict = with_checklist(verdict_text.verdict)

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


def _judge(records: pd.DataFrame, cand: str, base: str, settings: VerdictSettings | None = None) -> dict:
    rows = _rows(records)
    paired = paired_worst_case(records, cand, base, "Linf", 0.1)
    masking = paired_masking(records, cand, "Linf", 0.1)
    return categorize(
        rows[cand],
        rows[base],
        chance=CHANCE,
        settings=settings or VerdictSettings(),
        paired=paired,
        masking=masking,
    )


def test_categories_follow_the_numbers():
    """Masking = the paired 95% interval of blocked minus worst case clears gap_tol; robust = the paired
    interval of the candidate's worst case minus the baseline's on the same examples clears the minimum
    effect (10 points)."""
    masked = _judge(_run(), "wavelet", "patch")
    assert masked["gap"] == pytest.approx(0.87) and masked["masking"] is True
    assert masked["above_baseline"] is False and masked["diff"] == pytest.approx(-0.01)
    # nested robust sets: the baseline's 4 robust examples hold the candidate's 3 -- one discordant pair
    assert masked["discordant"] == {"only_candidate": 0, "only_baseline": 1} and masked["p_value"] == 1.0
    assert masked["gap_ci"][0] > 0.10  # the gap's interval clears the tolerance
    assert masked["category"] == MASKING and masked["comparison"] == NO_DIFFERENCE

    robust = masking_spec(blocked=60, exact=60, bpda=60, square=60, transfer=60)
    records = pd.concat([synthetic_records("w", robust), synthetic_records("p", baseline_spec(pgd=5))])
    cat = _judge(records, "w", "p")
    assert (
        cat["gap"] == pytest.approx(0.0)
        and cat["above_baseline"] is True
        and cat["category"] == ROBUST_THESE_NETWORKS
    )
    assert cat["p_value"] == pytest.approx(2 * 2.0**-55)  # 55 discordant pairs, all the candidate's

    honest = masking_spec(blocked=6, exact=5, bpda=5, square=40, transfer=20)
    records = pd.concat([synthetic_records("w", honest), synthetic_records("p", baseline_spec())])
    cat = _judge(records, "w", "p")
    assert cat["gap"] == pytest.approx(0.01) and cat["masking"] is False and cat["category"] == NOT_ROBUST
    assert cat["gap_ci"][1] < 0.10  # masking excluded by the interval, not by the point estimate
    lo, hi = cat["diff_ci"]
    assert lo < 0.01 < hi  # not significant, but within the margin by two one-sided tests: decided
    assert cat["equivalence"]["equivalent"] and cat["equivalence"]["margin"] == EQUIVALENCE_MARGIN
    assert cat["equivalence"]["p_value"] < 0.05 and cat["equivalence"]["level"] == pytest.approx(0.9)
    # a tolerance inside the gap's interval leaves masking undecided (neither shown nor excluded)
    assert _judge(records, "w", "p", VerdictSettings(gap_tol=0.005))["masking"] is None
    with_no_pairs = categorize(
        _rows(records)["w"], _rows(records)["p"], chance=CHANCE, settings=VerdictSettings()
    )
    assert (
        with_no_pairs["category"] == INCONCLUSIVE and "same examples" in with_no_pairs["inconclusive_reason"]
    )


def test_paired_test_sees_what_overlapping_wilson_intervals_miss():
    """30% vs 15% of 100, the baseline's robust examples a subset of the candidate's: the two Wilson
    intervals overlap ([21.9, 39.6] and [9.3, 23.3]); the 15 discordant pairs all go one way (McNemar p =
    2^-14). Significant, but the paired interval [+8, +23] does not clear the minimum effect of 10 points
    (the old rule said robust on significance alone): inconclusive. On 400 images it clears it."""
    cand = masking_spec(blocked=30, exact=30, bpda=30, square=30, transfer=30)
    records = pd.concat([synthetic_records("w", cand), synthetic_records("p", baseline_spec(pgd=15))])
    cat = _judge(records, "w", "p")
    assert cat["category"] == INCONCLUSIVE and cat["p_value"] == pytest.approx(2.0**-14)
    assert cat["above_baseline"] and cat["diff_ci"][0] < 0.10 < cat["diff_ci"][1]
    v = verdict(records, num_classes=4, threats=("Linf",))
    assert v.categories == {"w@Linf": INCONCLUSIVE}
    assert "paired on 100 images: difference +15.0 points" in v.text and "McNemar p = 6.1e-05" in v.text
    assert "does not clear the minimum effect of 10 points" in v.text
    assert "equivalence test (two one-sided tests, margin ±10 points): not shown within the margin" in v.text
    cand = masking_spec(blocked=120, exact=120, bpda=120, square=120, transfer=120)
    spec = baseline_spec(pgd=60, square=60)
    for d in (cand, spec):
        d.update({key: 400 for key in d if key[1] == "noise_sign"})
    records = pd.concat([synthetic_records("w", cand, n=400), synthetic_records("p", spec, n=400)])
    v = verdict(records, num_classes=4, threats=("Linf",))
    assert v.categories == {"w@Linf": ROBUST_THESE_NETWORKS} and v.details["w@Linf"]["diff_ci"][0] > 0.10
    assert "which clears the minimum effect of 10 points" in v.text


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
    assert v.categories == {"w@Linf": ROBUST_THESE_NETWORKS} and v.details["w@Linf"]["above_baseline"] is True
    assert f"**{_pct(_rows(records)['w']['worst_case'])}**" in v.text
    assert "more robust for these networks" in v.text and "one training seed" in v.headline

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
    assert v.categories == {"w@Linf": ROBUST_THESE_NETWORKS}
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


# ------------------------------------------------------------------------------- no verdict at this scale
def _near_chance(model: str, spec: dict, clean: int, n: int = 100) -> pd.DataFrame:
    """``synthetic_records`` whose model classifies only the first ``clean`` examples right."""
    records = synthetic_records(model, spec, n=n)
    wrong = (records["kind"] == "clean") & (records["example_id"] >= clean)
    records.loc[wrong, "correct"] = False
    return records


def test_clean_floor_is_well_above_chance():
    assert clean_floor(10) == pytest.approx(0.40) and clean_floor(4) == pytest.approx(0.50)
    assert clean_floor(10) == pytest.approx(0.1 + CLEAN_FLOOR_SHARE * 0.9)
    with pytest.raises(ValueError, match="num_classes"):
        clean_floor(1)


def test_near_chance_model_gets_no_verdict():
    """A new user's CIFAR-10 try: 12% clean accuracy for 10 classes. The numbers would say 'not supported';
    the verdict says inconclusive and why."""
    records = pd.concat(
        [
            _near_chance("w", masking_spec(blocked=5, exact=5, bpda=5, square=5, transfer=5), clean=12),
            _near_chance("p", baseline_spec(pgd=4, square=4), clean=12),
        ],
        ignore_index=True,
    )
    v = verdict(records, num_classes=10, threats=("Linf",))
    assert v.numbers.set_index("model").loc["w", "clean"] == pytest.approx(0.12)
    assert v.categories == {"w@Linf": INCONCLUSIVE}
    reason = v.details["w@Linf"]["inconclusive_reason"]
    assert "candidate w's clean accuracy 12.0% is below the floor of 40.0%" in reason
    assert "baseline p's clean accuracy 12.0%" in reason
    assert v.headline.startswith("inconclusive at this scale") and "not supported" not in v.headline
    assert "inconclusive at this scale — the candidate w's clean accuracy" in v.text
    # the same records judged as a 4-class problem (floor 50%) or with a lower floor are still refused /
    # judged: the floor is a setting
    lenient = verdict(
        records, num_classes=10, threats=("Linf",), settings=VerdictSettings(clean_floor_share=0.0)
    )
    assert lenient.categories == {"w@Linf": NOT_ROBUST}


def test_wide_interval_is_inconclusive_narrow_one_decides():
    """30% vs 20% on 20 examples: not significant and the interval is ~45 points wide -> inconclusive;
    the same rates on 1000 nested examples -> significant."""

    def run(n: int, cand: int, base: int) -> pd.DataFrame:
        spec = masking_spec(blocked=cand, exact=cand, bpda=cand, square=cand, transfer=cand)
        base_spec = baseline_spec(base, base)
        for d in (spec, base_spec):  # noise holds every example, however many
            d.update({key: n for key in d if key[1] == "noise_sign"})
        return pd.concat([synthetic_records("w", spec, n=n), synthetic_records("p", base_spec, n=n)])

    small = verdict(run(20, 6, 4), num_classes=4, threats=("Linf",))
    d = small.details["w@Linf"]
    assert small.categories == {"w@Linf": INCONCLUSIVE}
    assert not d["equivalence"]["equivalent"] and d["p_value"] == 0.5
    assert "nor lies within ±10 points by the equivalence test" in d["inconclusive_reason"]
    assert (
        "attack more examples" in d["inconclusive_reason"] and "inconclusive at this scale" in small.headline
    )
    assert verdict(run(1000, 350, 200), num_classes=4, threats=("Linf",)).categories == {
        "w@Linf": ROBUST_THESE_NETWORKS
    }
    # masking stands on its own; only the comparison with the baseline is left open
    masked = verdict(
        pd.concat(
            [
                synthetic_records("w", masking_spec(blocked=18, exact=2, bpda=2, square=8, transfer=4), n=20),
                synthetic_records("p", baseline_spec(1, 1), n=20),
            ]
        ),
        num_classes=4,
        threats=("Linf",),
    )
    assert masked.categories == {"w@Linf": MASKING_INCONCLUSIVE}  # masking alone never says "not supported"
    assert masked.details["w@Linf"]["comparison"] == UNDECIDED
    assert "whether what survives is above the baseline is inconclusive at this scale" in masked.text


def test_seed_level_spread_of_the_paired_difference():
    runs = [
        pd.concat(
            [
                synthetic_records("w", masking_spec(blocked=b, exact=b, bpda=b, square=b, transfer=b)),
                synthetic_records("p", baseline_spec(pgd=5)),
            ]
        )
        for b in (50, 60, 70)
    ]
    v = verdict(runs, num_classes=4, threats=("Linf",), seeds=[0, 1, 2])
    d = v.details["w@Linf"]
    assert v.categories == {"w@Linf": ROBUST} and d["seed_agreement"] == "3/3 seeds"
    assert d["seed_diff_mean"] == pytest.approx(0.55) and d["seed_diff_sd"] == pytest.approx(0.10)
    assert d["n_paired"] == 100 and d["n_seeds"] == 3  # the image is the unit: 100 images, 3 seeds each
    assert d["unit"] == "100 images × 3 seeds" and "paired on 100 images × 3 seeds" in v.text
    assert "paired difference to the baseline +55.0 ± 10.0 points over the seeds" in v.text


# ------------------------------------------------------------------------------------------------ numbers in words
def test_the_one_number_formatter_against_hand_written_strings():
    assert percent(0.123) == "12.3%" and percent(0.9, 0.02) == "90.0 ± 2.0%"
    assert percent(0.9, float("nan")) == "90.0%" and percent(0.9, None) == "90.0%"  # no spread, no '±'
    assert percent(None) == "n/a" and percent(float("nan")) == "n/a" and percent("x", missing=DASH) == "--"
    assert percent(0.12345, digits=2, unit="", missing="") == "12.35" and percent(None, missing="") == ""
    assert points(0.15) == "+15.0 points" and points(-0.01, unit=" pts") == "-1.0 pts"
    assert points(0.55, 0.1) == "+55.0 ± 10.0 points" and points(None, unit=" pts") == "n/a"
    assert interval(-0.069, 0.271) == "[-6.9, +27.1]"
    assert number(0.2, scale=100, digits=0, unit=" points") == "20 points"
    assert number(0.9, 0.04, scale=100, pm=r" $\pm$ ", missing=DASH) == r"90.0 $\pm$ 4.0"
    assert number(123.456, 7.89, digits=0) == "123 ± 8" and number(float("nan"), 1.0) == "n/a"
    assert as_float(None) != as_float(None) and as_float(np.float64(0.25)) == 0.25  # NaN for None


def test_judgement_holds_the_numbers_and_the_words_render_them():
    """analysis.verdict.judge decides (categories, energy contrast, doubts); reporting only words them."""
    robust = masking_spec(blocked=60, exact=60, bpda=60, square=60, transfer=60)
    records = pd.concat([synthetic_records("w", robust), synthetic_records("p", baseline_spec(pgd=5))])
    j = judge(
        records,
        num_classes=4,
        threats=("Linf",),
        energy={"w": {"noise": 0.2, "pgd": 0.8}, "p": {"noise": None, "pgd": 0.1}},
        diagnostics_failures={"w": {"bpda": ["c", "c"], "blocked": []}, "p": {}},
        trust=checked(records),
    )
    assert j.categories == {"w@Linf": ROBUST_THESE_NETWORKS} and j.caution == ["w"]
    assert j.energy["w"].removes_more == FILTERS_ADVERSARIAL and "p" not in j.energy
    assert j.diagnostics == {"w": {"bpda": ["c"]}}
    assert not hasattr(j, "text")
    v = render(j)
    assert v.categories == j.categories and v.details == j.details
    assert "it removes more of the adversarial perturbation than of noise" in v.text
    assert v.headline.endswith("the diagnostics flag the evaluation of w outside blocked gradients, so this "
                               "robustness may be overestimated.")  # fmt: skip


def test_the_same_run_three_times_pools_to_the_single_run():
    """Seeds nested in images: three copies of one run are one run's evidence, not three times as much."""
    spec = masking_spec(blocked=14, exact=14, bpda=14, square=14, transfer=14)
    run = pd.concat([synthetic_records("w", spec, n=60), synthetic_records("p", baseline_spec(8, 8), n=60)])
    one = verdict(run, num_classes=4, threats=("Linf",)).details["w@Linf"]
    three = verdict([run] * 3, num_classes=4, threats=("Linf",), seeds=[0, 1, 2]).details["w@Linf"]
    for key in ("diff", "diff_ci", "p_value", "n_paired", "equivalence", "discordant"):
        expected = one[key] if key != "discordant" else {k: 3 * v for k, v in one[key].items()}
        assert three[key] == expected, key
    assert three["n_seeds"] == 3 and one["n_seeds"] == 1


def test_an_interval_reaching_past_the_margin_is_not_no_robustness():
    """[-0, +18]: not significant and under 20 points wide, so the old rule said "no more robust", yet it does
    not exclude an advantage of 10 points or more: inconclusive now (the equivalence test fails)."""
    honest = masking_spec(blocked=6, exact=5, bpda=5, square=40, transfer=20)
    rows = _rows(pd.concat([synthetic_records("w", honest), synthetic_records("p", baseline_spec())]))
    paired = paired_table(20, 15, 6, 59)  # +9 points, McNemar p = 0.078
    assert paired.ci_low < 0 < paired.ci_high < 0.18 and paired.ci_width < 0.20
    cat = categorize(rows["w"], rows["p"], chance=CHANCE, settings=VerdictSettings(), paired=paired)
    assert cat["category"] == INCONCLUSIVE and not cat["equivalence"]["equivalent"]
    assert "nor lies within ±10 points by the equivalence test" in cat["inconclusive_reason"]
    # a minimum effect wide enough to hold the whole 90% interval decides it
    wide = categorize(
        rows["w"], rows["p"], chance=CHANCE, settings=VerdictSettings(minimum_effect=0.2), paired=paired
    )
    assert wide["category"] == NOT_ROBUST and wide["equivalence"]["equivalent"]


def test_cumulative_and_self_transfer_numbers_say_what_they_are():
    """Square skipped the points earlier attacks broke (skip-broken): its number is cumulative, and says
    so; a transfer attack crafted on the candidate itself is named as the white-box restarts it is."""
    from robustbench_wave.reporting.markdown import NUMBERS_NOTE, verdict_markdown

    spec = masking_spec(blocked=30, exact=30, bpda=30, square=40, transfer=20)
    records = pd.concat([synthetic_records("w", spec), synthetic_records("p", baseline_spec())])
    skipped = (records["model"] == "w") & (records["attack"] == "square") & (records["example_id"] >= 60)
    records.loc[skipped, "attacked"] = False
    v = verdict(records, num_classes=4, threats=("Linf",), self_transfer={"w"})
    row = v.numbers.set_index("model").loc["w"]
    assert row["cumulative"] == "gradient_free" and row["self_transfer"]
    assert v.numbers.set_index("model").loc["p", "cumulative"] == ""
    assert "Square (cumulative with the attacks run before it) 40.0%" in v.text
    assert "white-box restarts (transfer crafted on the model itself) 20.0%" in v.text
    md = verdict_markdown(v)
    assert "40.0% (cum.)" in md and "20.0% (white-box restart)" in md and NUMBERS_NOTE in md
    plain = verdict(records.assign(attacked=True), num_classes=4, threats=("Linf",))
    assert "cumulative" not in plain.text and "white-box restart" not in plain.text


def test_pooled_comparison_decides_and_the_seeds_agreement_stands_beside_it():
    """Seeds keep 14, 18 and 12 of 30 images (the baseline 4): on its own the third seed is undecided
    (+26.7 points, interval reaching under 10). Pooled by image, the 14 images that differ all favour the
    candidate: the exact sign-flip test gives p = 2 / 2^14, the interval clears 10 points, and so does the
    seeds' t interval; but the architecture claim needs every seed to clear the minimum effect on its own
    (issue 39: a rule no clearing seed can weaken), so these networks are more robust, the architecture is
    not confirmed, "2/3 seeds" beside it."""
    runs = [
        pd.concat(
            [
                synthetic_records("w", masking_spec(blocked=k, exact=k, bpda=k, square=k, transfer=k), n=30),
                synthetic_records("p", baseline_spec(pgd=4, square=4), n=30),
            ]
        )
        for k in (14, 18, 12)
    ]
    v = verdict(runs, num_classes=4, threats=("Linf",), seeds=[0, 1, 2])
    d = v.details["w@Linf"]
    assert d["p_value"] == pytest.approx(2 / 2**14) and d["unit"] == "30 images × 3 seeds"
    assert v.categories == {"w@Linf": ROBUST_THESE_NETWORKS} and d["architecture"]["confirmed"] is False
    assert (
        d["seed_categories"] == [ROBUST_THESE_NETWORKS, ROBUST_THESE_NETWORKS, INCONCLUSIVE]
        and d["seed_agreement"] == "2/3 seeds"
    )
    assert "category decided on the seeds pooled by image, reached by 2/3 seeds on their own" in v.text
