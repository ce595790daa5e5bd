"""``--name`` names a model from outside the zoo on the command line (as ``model_name`` does in Python): its
records, tables, report and run folder use it instead of ``ext-FACTORY-<hash>``; a bad or doubled name is
refused before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from robustbench_wave import attack
from robustbench_wave.attackrun import ExternalFlags, external_specs
from robustbench_wave.data import load_split, to_float
from robustbench_wave.evaluation.records import read_run
from robustbench_wave.models.external import ExternalSpec
from tests.support import external_models as ext

LINEAR = "tests.support.external_models:pooled_linear"
QUANTISED = "tests.support.autobpda_models:quantized_pooled_linear"


def test_the_name_becomes_the_record_name_and_stays_out_of_old_configs() -> None:
    named = ExternalSpec(LINEAR, name="my-linear")
    assert named.slug == "my-linear" and named.to_config()["name"] == "my-linear"
    plain = ExternalSpec(LINEAR)
    assert plain.slug.startswith("ext-pooled_linear-") and "name" not in plain.to_config()
    assert ExternalSpec.from_config(plain.to_config()) == plain  # a run recorded before --name resumes
    flags = ExternalFlags([LINEAR, QUANTISED], "none", names={LINEAR: "mine", QUANTISED: "mine"})
    with pytest.raises(ValueError, match="two models would share a name"):
        external_specs(flags)
    with pytest.raises(ValueError, match="--name"):
        ExternalSpec(LINEAR, name="../escape")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--model", "patch", "--name", "mine"], "--name mine must follow the timm: or FACTORY --model"),
        (["--model", LINEAR, "--name", "a", "--name", "b"], f"--model {LINEAR} has two --name"),
    ],
)
def test_misplaced_names_are_refused_in_one_line(argv: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit):
        attack.get_args_parser().parse_args(argv)
    assert message in capsys.readouterr().err


@pytest.mark.slow  # one small attack run (~10 s)
def test_a_named_model_is_named_everywhere(tmp_path: Path) -> None:
    images, labels, _ = load_split("synthetic", "train")
    weights = tmp_path / "linear.safetensors"
    fitted = ext.fit_pooled_linear(to_float(images[:1000]), labels[:1000])
    ext.save_weights({f"1.{k}": v for k, v in fitted.items()}, str(weights))
    args = ["--model", QUANTISED, "--weights", str(weights), "--name", "bit-depth-8"]
    args += ["--dataset", "synthetic", "--suite", "smoke", "--attacks", "fgsm", "--n-examples", "8"]
    args += ["--surrogate", "none", "--no-diagnostics", "--no-progress", "--device", "cpu"]
    assert attack.main([*args, "--out", str(tmp_path / "out")]) == 0
    (run,) = (tmp_path / "out" / "attack").glob("*/*")
    records, meta = read_run(run)
    assert run.name.startswith("bit-depth-8_smoke")
    assert set(records["model"]) == {"bit-depth-8"} and list(meta["models"]) == ["bit-depth-8"]
    assert (
        "bit-depth-8/exact" in (run / "table.txt").read_text()
        and "ext-" not in (run / "table.txt").read_text()
    )
