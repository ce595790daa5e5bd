"""The benchmark harness's pure parts: medians, interleaving, ratios, tables, and the baselines' correctness.

No timings are asserted here (speed is what ``make bench`` measures); these tests check that the numbers the
benchmarks report are computed right and that their hand-written baselines do what they claim.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

from benchmarks.bench_frontend import pywt_frontend
from benchmarks.bench_pgd import raw_pgd
from benchmarks.bench_ranks import records_difference
from benchmarks.bench_suite import counting_passes
from benchmarks.harness import Row, interleaved, markdown_table, median, ratio_rows, read_csv, write_csv
from robustbench_wave.models.wavelet import WaveletFrontEnd


def test_median_of_odd_and_even_counts_and_none():
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 3.0, 2.0]) == 2.5
    with pytest.raises(ValueError, match="at least one repetition"):
        median([])


def test_interleaved_warms_up_then_rotates_the_order():
    calls: list[str] = []
    fns = {name: (lambda n=name: calls.append(n)) for name in "abc"}
    times = interleaved(fns, reps=3, warmup=2)
    assert calls[:6] == ["a", "a", "b", "b", "c", "c"]  # warm-up, untimed
    assert calls[6:] == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]  # repetition r starts at variant r
    assert {k: len(v) for k, v in times.items()} == {"a": 3, "b": 3, "c": 3}
    cpu: dict[str, list[float]] = {}
    interleaved(fns, reps=2, warmup=0, cpu=cpu)
    assert {k: len(v) for k, v in cpu.items()} == {"a": 2, "b": 2, "c": 2}
    assert all(s >= 0.0 for v in cpu.values() for s in v)
    with pytest.raises(ValueError, match="reps"):
        interleaved(fns, reps=0)


def test_ratio_rows_divide_medians_by_the_baseline_and_by_the_units():
    times = {"base": [2.0, 4.0, 3.0], "fast": [1.0, 1.5, 30.0]}  # medians 3.0 and 1.5
    rows = {
        r.variant: r for r in ratio_rows("b", "c", times, "base", per=10, unit="step", notes={"fast": "n"})
    }
    assert rows["base"].ratio == 1.0 and rows["fast"].ratio == 0.5
    assert rows["fast"].median_s == pytest.approx(0.15) and rows["fast"].unit == "step"
    assert rows["fast"].reps == 3 and rows["fast"].note == "n" and rows["base"].note == ""
    with pytest.raises(ValueError, match="baseline"):
        ratio_rows("b", "c", times, "missing")


def test_csv_round_trip_and_markdown_table(tmp_path):
    rows = [
        Row("pgd", "wavelet", "raw", 0.04, "step", "raw", 1.0, 5),
        Row("pgd", "wavelet", "ours", 0.05, "step", "raw", 1.25, 5, "x"),
    ]
    write_csv(rows, tmp_path / "t.csv")
    assert read_csv(tmp_path / "t.csv") == rows
    table = markdown_table(rows, {"cores": 2})
    assert table.startswith("Machine: cores 2")
    assert "| pgd | wavelet | ours | 1.250 | raw | 50.00 ms | step | 5 | x |" in table


def test_raw_pgd_stays_in_the_budget():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(16, 3))
    x = torch.rand(8, 1, 4, 4)
    y = torch.randint(0, 3, (8,))
    adv = raw_pgd(model, x, y, eps=0.05, alpha=0.02, steps=4)
    assert (adv - x).abs().max() <= 0.05 + 1e-6
    assert adv.min() >= 0 and adv.max() <= 1
    assert not torch.equal(adv, x)


@pytest.mark.parametrize("channels", [1, 3])
def test_pywavelets_baseline_keeps_what_the_front_end_keeps(channels):
    x = torch.rand(4, channels, 32, 32, generator=torch.Generator().manual_seed(1))
    front = WaveletFrontEnd(32, channels, levels=2, wavelet="db1", zero_fraction=0.8)
    with torch.no_grad():
        ours = front(x).flatten(1).double()
    theirs = pywt_frontend(x.numpy().astype(np.float64))
    assert theirs.shape == ours.shape
    assert ((theirs == 0).sum(1) >= round(0.8 * theirs.shape[1])).all()
    np.testing.assert_allclose(np.sort(np.abs(theirs), 1), np.sort(ours.abs().numpy(), 1), atol=1e-5)


def test_counting_passes_separates_gradient_and_inference_passes():
    model = nn.Linear(3, 2)
    with counting_passes(model) as counts:
        model(torch.zeros(5, 3))
        with torch.no_grad():
            model(torch.zeros(7, 3))
    assert counts == {"grad": 5, "nograd": 7}
    model(torch.zeros(1, 3))  # the hook is gone after the block
    assert counts == {"grad": 5, "nograd": 7}


def test_records_difference_names_the_columns_that_differ(tmp_path):
    a = pd.DataFrame({"example_id": [0, 1], "pred": [3, 4], "loss_final": [0.5, 1.0]})
    a.to_csv(tmp_path / "a.csv.gz", index=False)
    a.to_csv(tmp_path / "same.csv.gz", index=False)
    b = a.assign(loss_final=[0.5, 1.0 + 2e-7], pred=[3, 5])
    b.to_csv(tmp_path / "b.csv.gz", index=False)
    assert records_difference(tmp_path / "a.csv.gz", tmp_path / "same.csv.gz") == ""
    diff = records_difference(tmp_path / "a.csv.gz", tmp_path / "b.csv.gz")
    assert "pred (1 rows)" in diff and "loss_final (max |diff| 2.0e-07)" in diff
    assert "no records" in records_difference(tmp_path / "a.csv.gz", tmp_path / "missing.csv.gz")
