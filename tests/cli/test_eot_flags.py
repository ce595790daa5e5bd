"""The attack command's ``--eot`` and ``--eot-draws``: parsed and checked before anything is written, part of
``config.json`` only when not the default (so earlier runs keep their configuration), and end to end on a
factory model behind input noise: found randomised, attacked with EOT, the rule in meta.json and report.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from robustbench_wave import attack, attackrun
from robustbench_wave.attackrun import select_suite
from robustbench_wave.data import load_split, to_float
from robustbench_wave.evaluation.eot import EOT_ITER, EotSettings
from robustbench_wave.evaluation.records import read_run
from tests.support import external_models as ext

NOISY = "tests.support.noisy_models:noisy_pooled_linear"


def _settings(*flags: str):  # type: ignore[no-untyped-def]
    return attack._settings(attack.get_args_parser().parse_args(["--model", "patch", *flags]))


def test_flags_reach_the_evaluation_and_the_config_only_when_set() -> None:
    default = _settings()
    assert default.eval_settings("patch", None, ["exact"]).eot == EotSettings()
    assert not {"eot", "eot_draws"} & set(default.to_config(select_suite("smoke", None), {}))
    chosen = _settings("--eot", "off", "--eot-draws", "7")
    assert chosen.eval_settings("patch", None, ["exact"]).eot == EotSettings("off", 7)
    config = chosen.to_config(select_suite("smoke", None), {})
    assert config["eot"] == "off" and config["eot_draws"] == 7


@pytest.mark.parametrize("flags", [["--eot", "sometimes"], ["--eot-draws", "0"], ["--eot-draws", "two"]])
def test_bad_values_end_with_one_line(flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        attack.get_args_parser().parse_args(["--model", "patch", *flags])
    assert "--eot" in capsys.readouterr().err


@pytest.mark.slow
def test_a_noisy_factory_model_is_attacked_with_eot_end_to_end(tmp_path: Path) -> None:
    """FAB-T has no EOT and is skipped with its reason; PGD and APGD run with 20 EOT iterations; the saved
    points re-audit to their recorded classes exactly (the run's own common random numbers)."""
    images, labels, _ = load_split("synthetic", "train")
    weights = tmp_path / "linear.safetensors"
    state = ext.fit_pooled_linear(to_float(images[:2000]), labels[:2000])
    ext.save_weights({f"net.{k}": v for k, v in state.items()}, str(weights))
    out = tmp_path / "out"
    args = [
        "--model", NOISY, "--weights", str(weights), "--dataset", "synthetic", "--suite", "smoke",
        "--attacks", "pgd_linf,apgd_ce,fab_t", "--n-examples", "16", "--eot-draws", "5", "--surrogate", "none",
        "--out", str(out), "--no-progress", "--device", "cpu", "--n-diagnostics", "8", "--diagnostics-steps", "2",
        "--save-adversarial", "--seed", "3",
    ]  # fmt: skip
    assert attack.main(args) == 0
    (run,) = (out / "attack").glob("*/*")
    records, meta = read_run(run)
    (name,) = meta["models"]
    eot = meta["models"][name]["eot"]
    assert eot["stochastic"] and eot["draws"] == 5 and eot["eot_iter"] == EOT_ITER
    assert set(eot["skipped"]) == {"fab_t"} and meta["models"][name]["plan"]["not_applicable"]["fab_t"]
    assert meta["attacks"]["pgd_linf"]["params"]["eot_iter"] == EOT_ITER
    assert {a.split("@")[0] for a in records["attack"]} == {"clean", "pgd_linf", "apgd_ce"}  # + cross-checks
    assert json.loads((run / "config.json").read_text())["eot_draws"] == 5
    report = (run / "report.md").read_text()
    assert "randomised" in report and "plurality vote of K draws" in report and "fab_t" in report
    assert "common random numbers" in report
    table, problems = attackrun.reaudit_run(run, tmp_path, "cpu")
    assert problems == [] and table["n_checked"].sum() > 0, table
    assert table["n_pred_mismatches"].sum() == 0 and table["n_vote_flips"].sum() == 0
