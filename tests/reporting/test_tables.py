"""Tables from records: hand-computed worst cases, Wilson intervals, mean ± sd over seeds, LaTeX/CSV/Markdown
output, and the report CLI rebuilding identical tables from saved records."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from robustbench_wave import report
from robustbench_wave.evaluation import EvalSettings, evaluate
from robustbench_wave.evaluation.metrics import WORST, example_flags, summarize, wilson_interval
from robustbench_wave.evaluation.records import make_frame, read_records, write_records
from robustbench_wave.evaluation.result import EvaluationResult
from robustbench_wave.reporting import tables
from tests.support.attack_models import labelled, small_cnn, teacher, tiny_suite, toy_data


def _rows(
    mode: str, attack: str, threat: str, eps: float, correct: list[bool], attacked: list[bool] | None = None
) -> pd.DataFrame:
    n = len(correct)
    attacked = attacked or [True] * n
    return make_frame(
        {
            "model": "m",
            "dataset": "toy",
            "grad_mode": mode,
            "attack": attack,
            "family": "clean" if threat == "none" else "pgd",
            "kind": "clean" if threat == "none" else "white-box",
            "threat": threat,
            "eps": eps,
            "backend": "builtin",
            "example_id": list(range(n)),
            "label": [0] * n,
            "pred": [0 if c else 1 for c in correct],
            "correct": correct,
            "norm": [eps] * n,
            "attacked": attacked,
            "correct_last": [None] * n,
            "loss_final": [0.5] * n,
        },
        n,
    )


def _hand_records() -> pd.DataFrame:
    T, F = True, False
    frames = []
    for mode, a01 in (("exact", [T, F, T, F]), ("blocked", [T, T, T, F])):
        frames += [
            _rows(mode, "clean", "none", 0.0, [T, T, T, F]),
            _rows(mode, "A", "Linf", 0.1, a01),
            _rows(mode, "A", "Linf", 0.2, [T, F, F, F]),
            _rows(mode, "B", "Linf", 0.1, [F, T, T, F]),  # B only has eps 0.1 (a per-attack eps list)
            _rows(mode, "G", "L2", 0.5, [T, T, F, F]),
        ]
    return pd.concat(frames, ignore_index=True)


def test_wilson_interval_matches_hand_computed_values() -> None:
    lo, hi = wilson_interval(8, 10)
    # p = 0.8, z = 1.96: centre (0.8 + z²/20) / (1 + z²/10) = 0.71676, half-width 0.22657
    assert lo == pytest.approx(0.49016, abs=1e-4) and hi == pytest.approx(0.94331, abs=1e-4)
    lo, hi = wilson_interval(0, 20)
    assert lo == 0.0 and hi == pytest.approx(1.959963984540054**2 / (20 + 1.959963984540054**2), abs=1e-12)
    assert all(math.isnan(v) for v in wilson_interval(0, 0))


def test_worst_case_columns_and_rows_match_a_hand_computation() -> None:
    s = summarize(_hand_records())

    def acc(mode: str, attack: str, threat: str, eps: float) -> float:
        row = s[
            (s["grad_mode"] == mode) & (s["attack"] == attack) & (s["threat"] == threat) & (s["eps"] == eps)
        ]
        assert len(row) == 1, (mode, attack, eps)
        return float(row["robust_accuracy"].item())

    # exact: worst(0.1) = clean & A@.1 & B@.1 = [F,F,T,F]; worst(0.2) adds A@.2 = [T,F,F,F] -> none left
    assert acc("exact", WORST, "Linf", 0.1) == 0.25 and acc("exact", WORST, "Linf", 0.2) == 0.0
    # blocked: worst(0.1) = [T,T,T,F] & [F,T,T,F] = [F,T,T,F]
    assert acc("blocked", WORST, "Linf", 0.1) == 0.5
    # worst over modes, per example: A@.1 = [T,F,T,F] & [T,T,T,F]
    assert acc("worst", "A", "Linf", 0.1) == 0.5 and acc("worst", WORST, "Linf", 0.1) == 0.25
    assert acc("exact", WORST, "L2", 0.5) == 0.5  # clean & G
    assert acc("exact", "clean", "none", 0.0) == 0.75
    row = s[(s["grad_mode"] == "exact") & (s["attack"] == WORST) & (s["eps"] == 0.1)].iloc[0]
    assert row["n"] == 4 and row["n_robust"] == 1
    assert (row["ci_low"], row["ci_high"]) == pytest.approx(wilson_interval(1, 4))
    wide = tables.comparison_table(s)
    assert list(wide.index) == [("m", "exact"), ("m", "blocked"), ("m", "worst")]
    assert wide.columns[0] == ("none", "clean", 0.0)
    assert list(wide.columns.get_level_values("attack")[1:6]) == ["A", "A", "B", WORST, WORST]
    assert math.isnan(tables.comparison_table(s).loc[("m", "exact"), ("Linf", "B", 0.1)]) is False
    flags = example_flags(_hand_records())
    exact = flags[flags.index.get_level_values("grad_mode") == "exact"]
    assert exact[("Linf", WORST, 0.1)].tolist() == [False, False, True, False]


def test_worst_over_modes_of_an_attack_no_mode_ran_is_empty_not_robust() -> None:
    """The ``worst`` row reads only the modes that ran an attack: an attack one model of a run ran (an
    escalation) is absent from the others' records, and their worst-over-modes cell was all-robust (100%)."""
    other = _hand_records().assign(model="other")
    escalated = _rows("exact", "E", "Linf", 0.1, [False, True, False, False])  # only m's exact mode ran E
    s = summarize(pd.concat([_hand_records(), escalated, other], ignore_index=True))
    cell = s[(s["attack"] == "E") & (s["grad_mode"] == "worst")].set_index("model")
    assert (
        cell.loc["m", "n"] == 4 and cell.loc["m", "robust_accuracy"] == 0.25
    )  # exact's alone: blocked never ran E
    assert cell.loc["other", "n"] == 0 and math.isnan(cell.loc["other", "robust_accuracy"])
    assert tables.formatted_table(s).loc[("other", "worst"), ("Linf", "E", "0.1")] == "--"


def test_duplicate_records_are_rejected() -> None:
    r = _hand_records()
    with pytest.raises(ValueError, match="duplicate"):
        summarize(pd.concat([r, r.iloc[:1]]))


def test_formats_latex_and_terminal() -> None:
    assert [tables.format_eps(e) for e in (0.1, 0.5, 2.0, 8 / 255, 1 / 255, 0.0)] == [
        "0.1",
        "0.5",
        "2",
        "8/255",
        "1/255",
        "0",
    ]
    s = summarize(_hand_records().replace({"attack": {"A": "pgd_linf"}}))
    latex = tables.to_latex(s, caption="Robust accuracy (n = 4)")
    for token in (
        r"\toprule",
        r"\midrule",
        r"\bottomrule",
        r"pgd\_linf",
        r"$\pm$",
        r"\caption{Robust accuracy (n = 4)}",
    ):
        assert token in latex
    text = tables.render_terminal(s, title="T")
    assert text.startswith("T\n") and "m/exact" in text and "m/worst" in text and "worst-case" in text
    cell = tables.formatted_table(s).loc[("m", "exact"), ("none", "clean", "0")]
    lo, hi = wilson_interval(3, 4)
    assert cell == f"75.0 ± {100 * (hi - lo) / 2:.1f}"


def test_seed_summary_is_mean_and_sd_over_runs() -> None:
    base = summarize(_hand_records())
    runs = [base.assign(robust_accuracy=base["robust_accuracy"] + d) for d in (-0.04, 0.0, 0.04)]
    s = tables.seed_summary(runs)
    assert len(s) == len(base) and set(s["runs"]) == {3}
    pd.testing.assert_series_equal(s["robust_accuracy"], base["robust_accuracy"], check_names=False)
    assert s["sd"].to_numpy() == pytest.approx(0.04)  # sample sd of (-0.04, 0, 0.04)
    assert (s["ci_low"] >= 0).all() and (s["ci_high"] <= 1).all()
    row = s[(s["grad_mode"] == "exact") & (s["attack"] == "clean")].iloc[0]
    assert (row["ci_low"], row["ci_high"]) == pytest.approx((0.71, 0.79))
    cell = tables.formatted_table(s).loc[("m", "exact"), ("none", "clean", "0")]
    assert cell == "75.0 ± 4.0"
    single = tables.formatted_table(tables.seed_summary(runs[:1]))  # one run: no spread to show
    assert single.loc[("m", "exact"), ("none", "clean", "0")] == "71.0"


def test_markdown_table_and_reading_layout() -> None:
    df = pd.DataFrame({"a": ["x|y", "z"], "b": [0.123456, float("nan")]})
    assert tables.markdown_table(df).splitlines() == [
        "| a | b |",
        "|---|---|",
        "| x\\|y | 0.1235 |",
        "| z |  |",
    ]
    by = tables.by_column(tables.formatted_table(summarize(_hand_records())))
    assert list(by.columns) == ["m/exact", "m/blocked", "m/worst"]
    assert by.index[0] == ("", "clean", "") and by.index[1] == ("Linf", "A", "0.1")


def test_records_round_trip_through_csv_gz(tmp_path) -> None:
    r = _hand_records()
    r.loc[0, "attacked"] = False
    r.loc[0, "pred"] = pd.NA
    r.loc[1, "correct_last"] = True
    r.loc[2, "eps"] = 8 / 255
    write_records(r, tmp_path / "r.csv.gz")
    back = read_records(tmp_path / "r.csv.gz")
    pd.testing.assert_frame_equal(back, r)
    # identical records give identical bytes (gzip without timestamp)
    write_records(r, tmp_path / "s.csv.gz")
    assert (tmp_path / "r.csv.gz").read_bytes() == (tmp_path / "s.csv.gz").read_bytes()


def test_report_cli_rebuilds_identical_tables_from_records(tmp_path, capsys) -> None:
    model = small_cnn()
    x = toy_data(16)
    y = labelled(model, x)
    y[::5] = (y[::5] + 1) % 3
    settings = EvalSettings(model_name="cnn", cross_check="all")
    run = evaluate(model, x, y, tiny_suite(), settings, progress=False, surrogate=teacher())
    run = EvaluationResult.merge([run])
    run.save(tmp_path)
    tables.write_tables(run.records, tmp_path, meta=run.meta)
    names = ["summary.csv", "table.csv", "table.tex", "table_worst.tex", "table.txt", "crosscheck.csv"]
    original = {n: (tmp_path / n).read_bytes() for n in names}
    for n in names:
        (tmp_path / n).unlink()
    assert report.main([str(tmp_path), "--no-figures"]) == 0
    assert {n: (tmp_path / n).read_bytes() for n in names} == original
    out = capsys.readouterr().out
    assert "cnn/exact" in out and f"wrote {tmp_path / 'summary.csv'}" in out
    assert "## Robust accuracy" in (tmp_path / "report.md").read_text()  # one run: tables and its report
    assert not (tmp_path / "figures").exists()
    elsewhere = tmp_path / "elsewhere"
    assert report.main([str(tmp_path), "--out", str(elsewhere), "--quiet", "--no-figures"]) == 0
    assert "cnn/exact" not in capsys.readouterr().out  # --quiet: paths only
    assert (elsewhere / "table.txt").read_bytes() == original["table.txt"]
    assert (elsewhere / "report.md").is_file() and (elsewhere / "verdict.json").is_file()
    # the rebuilt summary matches the in-memory one numerically
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "summary.csv"), run.summary(), check_dtype=False)
    loaded = EvaluationResult.load(tmp_path)
    pd.testing.assert_frame_equal(loaded.records, run.records)
    with pytest.raises(SystemExit, match="no records"):
        report.main([str(tmp_path / "missing")])
    assert torch.isfinite(torch.tensor(loaded.summary()["robust_accuracy"].to_numpy())).all()
