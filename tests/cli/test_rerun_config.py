"""``attack --config RUN/config.json`` reruns a run (issue 42, item 3): the settings round-trip through
config.json, a rerun writes the same records, and anything that would make it another run is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from robustbench_wave import attack
from robustbench_wave.attackrun import RunSettings
from robustbench_wave.data import load_split, to_float
from robustbench_wave.evaluation.records import read_run
from tests.support import external_models as ext

FACTORY = "tests.support.external_models:pooled_linear"
CHECKPOINTS, SPECS = {"m": "0" * 64}, {"m": "1" * 64}

INVOCATIONS = [
    ["--model", "patch"],
    ["--model", "patch", "--model", "wavelet", "--suite", "smoke", "--attacks", "fgsm,pgd_l2", "--eps", "Linf=0.02,0.05"],
    ["--model", "wavelet", "--grad-modes", "exact;wavelet=exact,bpda", "--eot", "on", "--eot-draws", "5",
     "--seed", "3", "--train-seed", "2", "--n-examples", "40", "--no-skip-broken", "--cross-check", "off"],
    ["--model", "patch", "--model", "wavelet", "--baseline", "patch", "--escalation", "off", "--save-adversarial",
     "--surrogate", "none", "--backend", "foolbox", "--dataset", "synthetic"],
    ["--model", FACTORY, "--weights", "w.safetensors", "--name", "mine", "--normalize", "none",
     "--num-classes", "10", "--img-size", "32", "--dataset", "synthetic", "--baseline", "mine"],
]  # fmt: skip


@pytest.mark.parametrize("argv", INVOCATIONS, ids=range(len(INVOCATIONS)))
def test_the_settings_and_suite_round_trip_through_config_json(argv: list[str], tmp_path: Path) -> None:
    """argv -> settings -> config.json -> settings: the same config (checkpoints given) and the same suite."""
    settings, _, suite = attack.resolve([*argv, "--out", str(tmp_path)])
    config = json.loads(json.dumps(settings.to_config(suite, CHECKPOINTS, SPECS)))  # as the file holds it
    again, suite_again = RunSettings.from_config(config)
    assert again.to_config(suite_again, CHECKPOINTS, SPECS) == config
    assert suite_again.to_dict() == suite.to_dict()  # a shipped suite's description and source come back


def test_a_file_that_is_not_a_runs_config_is_one_line(tmp_path: Path) -> None:
    for text, why in [("{", "Expecting"), ('{"models": ["patch"]}', "lacks"), ("[]", "lacks")]:
        path = tmp_path / "config.json"
        path.write_text(text, encoding="utf-8")
        with pytest.raises(SystemExit, match=why) as err:
            attack.resolve(["--config", str(path)])
        assert "\n" not in str(err.value)


def test_without_model_or_config_the_command_says_to_name_one(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"--model NAME.*--config"):
        attack.resolve(["--out", str(tmp_path)])


def _first_run(tmp_path: Path) -> tuple[Path, Path]:
    images, labels, _ = load_split("synthetic", "train")
    weights = tmp_path / "w.safetensors"
    ext.save_weights(ext.fit_pooled_linear(to_float(images[:2000]), labels[:2000]), str(weights))
    args = ["--model", FACTORY, "--weights", str(weights), "--dataset", "synthetic", "--suite", "smoke"]
    args += ["--attacks", "fgsm,pgd_linf,square", "--n-examples", "12", "--seed", "5", "--no-diagnostics"]
    assert attack.main([*args, "--no-progress", "--out", str(tmp_path / "first")]) == 0
    (run,) = (tmp_path / "first" / "attack" / "synthetic").iterdir()
    return run, weights


def test_a_rerun_from_config_json_is_the_same_run_and_a_changed_one_is_refused(tmp_path: Path) -> None:
    run, weights = _first_run(tmp_path)
    config = run / "config.json"
    argv = ["--config", str(config), "--no-progress", "--no-diagnostics", "--batch-size", "5"]
    assert attack.main([*argv, "--out", str(tmp_path / "again")]) == 0
    (rerun,) = (tmp_path / "again" / "attack" / "synthetic").iterdir()
    assert rerun.name == run.name
    assert json.loads((rerun / "config.json").read_text()) == json.loads(config.read_text())
    suite_meta = [json.loads((r / "meta.json").read_text())["suite"] for r in (run, rerun)]
    assert suite_meta[0] == suite_meta[1]
    (records, _), (again, _) = read_run(run), read_run(rerun)
    assert records.equals(again)

    with pytest.raises(SystemExit, match="drop --attacks, --seed "):  # a flag that would make another run
        attack.main([*argv, "--seed", "6", "--attacks", "fgsm", "--out", str(tmp_path / "other")])
    retrained = {k: v + 1e-3 for k, v in load_file(weights).items()}  # the same flags, another model
    save_file(retrained, weights)
    with pytest.raises(SystemExit, match="checkpoints differ"):
        attack.main([*argv, "--out", str(tmp_path / "retrained")])
    assert (
        not (tmp_path / "other").exists() and not (tmp_path / "retrained" / "attack" / "synthetic").exists()
    )
