"""The verdict follows the numbers, never the model names."""

from __future__ import annotations

import pandas as pd
import pytest

from robustbench_wave.analysis.verdict import (
    MASKING,
    NOT_ROBUST,
    ROBUST,
    claim_numbers,
    headline_eps,
    verdict,
)
from tests.support.masking_models import baseline_spec, masking_spec, synthetic_records


def _run(candidate: str = "wavelet", baseline: str = "patch", **masking) -> pd.DataFrame:
    return pd.concat(
        [synthetic_records(candidate, masking_spec(**masking)), synthetic_records(baseline, baseline_spec())],
        ignore_index=True,
    )


def test_claim_numbers_per_mode_and_worst_case():
    nums = claim_numbers(_run()).set_index("model")
    w = nums.loc["wavelet"]
    assert (w["wb_blocked"], w["wb_exact"], w["wb_bpda"]) == (0.90, 0.05, 0.03)
    assert (w["gradient_free"], w["transfer"], w["noise"], w["clean"]) == (0.40, 0.20, 0.95, 1.0)
    assert w["worst_case"] == 0.03  # per-example AND over everything = the minimum for nested sets
    assert nums.loc["patch", "worst_case"] == 0.04 and pd.isna(nums.loc["patch", "wb_blocked"])


def test_masking_verdict_quotes_the_numbers():
    v = verdict(_run(), num_classes=4, threats=("Linf",))
    assert v.categories == {"wavelet@Linf": MASKING}
    assert "Under blocked gradients **wavelet** keeps 90.0%" in v.text
    assert "falls to **3.0%**" in v.text and "BPDA 3.0%" in v.text and "Square 40.0%" in v.text
    assert "gradient masking" in v.text and "patch (the baseline) keeps 4.0%" in v.text
    assert "not supported" in v.headline


def test_swapping_names_swaps_the_verdict():
    """The model called 'patch' now carries the fixed front-end and the masked numbers: it gets the verdict."""
    v = verdict(_run(candidate="patch", baseline="wavelet"), num_classes=4, threats=("Linf",))
    assert v.categories == {"patch@Linf": MASKING}
    assert "Under blocked gradients **patch** keeps 90.0%" in v.text
    assert "wavelet (the baseline) keeps 4.0%" in v.text


def test_robust_and_not_robust_verdicts():
    robust = masking_spec(blocked=60, exact=60, bpda=60, square=60, transfer=60)
    records = pd.concat([synthetic_records("w", robust), synthetic_records("p", baseline_spec(pgd=5))])
    v = verdict(records, num_classes=4, threats=("Linf",))
    assert v.categories == {"w@Linf": ROBUST}
    assert "robust under all attacks" in v.text and "**60.0%**" in v.text
    assert "holds as measured" in v.headline

    honest = masking_spec(blocked=6, exact=5, bpda=5, square=40, transfer=20)
    records = pd.concat([synthetic_records("w", honest), synthetic_records("p", baseline_spec())])
    v = verdict(records, num_classes=4, threats=("Linf",))
    assert v.categories == {"w@Linf": NOT_ROBUST}
    assert "no natural robustness" in v.text and "gradient masking" not in v.text


def test_explicit_baseline_and_unknown_baseline():
    v = verdict(_run(), num_classes=4, threats=("Linf",), baseline="patch")
    assert list(v.categories) == ["wavelet@Linf"]
    with pytest.raises(ValueError, match="not in the records"):
        verdict(_run(), num_classes=4, baseline="vit")


def test_several_seeds_give_mean_and_spread():
    runs = [_run(blocked=b, bpda=3) for b in (88, 90, 92)]
    v = verdict(runs, num_classes=4, threats=("Linf",), seeds=[0, 1, 2])
    assert v.categories == {"wavelet@Linf": MASKING}
    assert "90.0 ± 2.0%" in v.text
    assert "3 training seeds" in v.text and "3/3 seeds" in v.text
    assert sorted(v.numbers["seed"].unique()) == [0, 1, 2]


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


def test_headline_eps_is_the_middle_of_the_grid():
    records = pd.concat([synthetic_records("p", baseline_spec(), eps=e) for e in (0.01, 0.03, 0.1, 0.2, 0.3)])
    assert headline_eps(records, "Linf") == 0.1
    assert headline_eps(records, "L2") is None
