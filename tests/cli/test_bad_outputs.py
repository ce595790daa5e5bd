"""Bad outputs are refused at load by every door, before any attack (on main before this change a softmax
model ran for minutes and ended in a 40-line ART traceback, or "unverified"); a misspelt ``threat_model`` is
refused before the run (it used to fail after the whole attack and delete the run folder); a run that fails
after its attacks keeps its folder and says how to resume."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

import robustbench_wave
from robustbench_wave import api, attack
from robustbench_wave.data import load_test_images
from robustbench_wave.evaluation import EvalSettings, evaluate
from tests.support import output_models

MODULE = "tests.support.output_models"
CASES = [
    ("probabilities", "returned probabilities"),
    ("nan_logits", "non-finite logits"),
    ("five_classes", r"shape \(8, 5\)"),
]
FAST = {"n_examples": 8, "dataset": "synthetic", "suite": "smoke", "attacks": ["fgsm"], "surrogate": "none"}


@pytest.mark.parametrize(("factory", "message"), CASES)
def test_the_command_line_refuses_bad_outputs_in_one_line_before_any_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], factory: str, message: str
) -> None:
    args = [
        "--model",
        f"{MODULE}:{factory}",
        "--dataset",
        "synthetic",
        "--suite",
        "smoke",
        "--n-examples",
        "8",
    ]
    with pytest.raises(SystemExit) as stop:
        attack.main([*args, "--attacks", "fgsm", "--no-progress", "--out", str(tmp_path / "out")])
    said = str(stop.value.code)  # what the interpreter prints on exit: one line naming the model
    assert re.search(message, said) and f"{MODULE}:{factory}" in said and len(said.splitlines()) == 1
    assert "Traceback" not in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("factory", "message"), CASES)
def test_benchmark_and_evaluate_refuse_an_in_memory_model_with_bad_outputs(
    tmp_path: Path, factory: str, message: str
) -> None:
    model = getattr(output_models, factory)()
    with pytest.raises(ValueError, match=message):
        robustbench_wave.benchmark(model, out=tmp_path / "out", progress=False, **FAST)
    assert not any((tmp_path / "out").rglob("records.csv.gz"))
    data = load_test_images("synthetic", 8)
    with pytest.raises(ValueError, match=message):
        evaluate(model, data.images, data.labels, "smoke", EvalSettings(dataset=data.info), progress=False)


def test_logits_pass_the_same_check() -> None:
    """The control: the same scores without the softmax are accepted (the check is not a blanket refusal)."""
    data = load_test_images("synthetic", 8)
    suite = robustbench_wave.attacks.load_suite("smoke").select(["fgsm"])
    result = evaluate(
        output_models.logits(), data.images, data.labels, suite, EvalSettings(dataset=data.info)
    )
    assert len(result.records) > 0


@pytest.mark.parametrize("spelling", ["linf", "LINF", "Linf"])
def test_threat_model_is_read_case_insensitively(monkeypatch: pytest.MonkeyPatch, spelling: str) -> None:
    seen = []

    def stand_in(settings, options, suite, command, echo, loaded=None):  # type: ignore[no-untyped-def]
        seen.append(suite)
        raise KeyboardInterrupt

    monkeypatch.setattr(api.attackrun, "prepare_job", stand_in)
    with pytest.raises(KeyboardInterrupt):
        robustbench_wave.benchmark("patch", threat_model=spelling, eps=0.1, **FAST)
    assert seen[0].resolved_eps("synthetic")["Linf"] == [0.1]


@pytest.mark.parametrize(
    ("threat", "message"), [("Linfinity", "unknown threat model"), ("none", "names no threat")]
)
def test_a_misspelt_threat_model_is_refused_before_any_attack(
    monkeypatch: pytest.MonkeyPatch, threat: str, message: str
) -> None:
    monkeypatch.setattr(api.attackrun, "prepare_job", lambda *a, **k: pytest.fail("the run started"))
    with pytest.raises(ValueError, match=message):
        robustbench_wave.benchmark("patch", threat_model=threat, **FAST)


def test_a_threat_the_suite_does_not_attack_is_refused_before_any_attack(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(api.attackrun, "prepare_job", lambda *a, **k: pytest.fail("the run started"))
    with pytest.raises(ValueError, match="corruption"):
        robustbench_wave.benchmark("patch", threat_model="corruption", **FAST)


def test_a_run_that_fails_after_its_attacks_keeps_its_folder_and_says_how_to_resume(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("reading back failed")

    monkeypatch.setattr(api, "_read_back", broken)
    with pytest.raises(RuntimeError) as err:
        robustbench_wave.benchmark(output_models.logits(), progress=False, **FAST)
    (note,) = err.value.__notes__
    folder = Path(note.split("the run folder ")[1].split(" is kept")[0])
    try:
        assert "resumes it" in note and any(folder.rglob("records.csv.gz"))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
