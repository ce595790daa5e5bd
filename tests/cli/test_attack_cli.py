"""The attack CLI end to end on synthetic data with tiny stand-in checkpoints: run folder, resume, config
guard, --help."""

from __future__ import annotations

import json
import shlex

import pandas as pd
import pytest
import torch
from torch import nn

from robustbench_wave import attack, attackrun
from robustbench_wave.core.cli import command_line
from robustbench_wave.data import LabelledImages, load_split, load_test_images
from robustbench_wave.evaluation.records import read_run
from robustbench_wave.training import checkpoint


def _tiny(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.AvgPool2d(4), nn.Flatten(), nn.Linear(64, 10)).eval()


@pytest.fixture
def fake_checkpoints(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    loaded: list[str] = []

    def load_trained(name: str, dataset: str, results_dir: object = "results", seed: int = 0):  # type: ignore[no-untyped-def]
        if name not in ("tiny", "tiny2"):
            raise ValueError(f"no trained model {name}")
        loaded.append(name)
        return _tiny(len(name)), {
            "checkpoint_sha256": f"sha-{name}",
            "clean_accuracy": 0.1,
            "run_dir": f"runs/{name}",
        }

    monkeypatch.setattr(checkpoint, "load_trained", load_trained)
    return loaded


def _args(tmp_path, *extra: str) -> list[str]:
    return [
        "--model",
        "tiny",
        "--dataset",
        "synthetic",
        "--n-examples",
        "10",
        "--suite",
        "smoke",
        "--out",
        str(tmp_path),
        "--attacks",
        "noise_uniform,fgsm,pgd_linf,transfer_pgd_linf",
        "--no-progress",
        "--batch-size",
        "4",
        *extra,
    ]


@pytest.mark.slow
def test_cli_writes_a_run_folder_and_resumes(
    tmp_path, capsys, monkeypatch, fake_checkpoints: list[str]
) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert attack.main(_args(tmp_path, "--surrogate", "tiny2")) == 0
    out = capsys.readouterr().out
    assert "tiny/exact" in out and "worst-case" in out
    run_dir = tmp_path / "attack" / "synthetic" / "tiny_smoke_n10_seed0_train0"
    for name in (
        "records.csv.gz",
        "meta.json",
        "summary.csv",
        "table.csv",
        "table.tex",
        "table.txt",
        "config.json",
    ):
        assert (run_dir / name).exists(), name
    records, meta = read_run(run_dir)
    suite = {"clean", "noise_uniform", "fgsm", "pgd_linf", "transfer_pgd_linf"}
    # by default the gradient attacks are cross-checked at the reference budget (the middle of the grid)
    crossed = {"fgsm@builtin", "fgsm@foolbox", "pgd_linf@torchattacks", "pgd_linf@foolbox"}
    assert set(records["attack"]) == suite | crossed
    assert set(records.loc[records["attack"].isin(crossed), "eps"]) == {0.03}
    assert meta["attacks"]["pgd_linf"]["cross_check"] == {
        "backends": ["torchattacks", "foolbox"],
        "eps": [0.03],
    }
    assert records["example_id"].nunique() == 10
    assert meta["models"]["tiny"]["checkpoint_sha256"] == "sha-tiny"
    assert meta["models"]["tiny"]["surrogate"]["name"] == "tiny2"
    assert meta["run"]["config"]["n_examples"] == 10
    # the command that reruns it, not the module's file path that sys.argv[0] holds under python -m
    assert shlex.split(meta["run"]["command"]) == [
        "python",
        "-m",
        "robustbench_wave.attack",
        *_args(tmp_path, "--surrogate", "tiny2"),
    ]
    # a second identical invocation resumes every chunk and reproduces the records (batch size may differ)
    assert attack.main(_args(tmp_path, "--surrogate", "tiny2", "--batch-size", "7")) == 0
    again, meta2 = read_run(run_dir)
    assert meta2["models"]["tiny"]["resumed_chunks"] == 4
    pd.testing.assert_frame_equal(records, again)
    # another configuration in the same folder is refused unless --overwrite
    with pytest.raises(SystemExit, match="different configuration"):
        attack.main(
            _args(
                tmp_path, "--surrogate", "tiny2", "--seed", "1", "--run-name", "tiny_smoke_n10_seed0_train0"
            )
        )
    assert (
        attack.main(
            _args(
                tmp_path,
                "--surrogate",
                "none",
                "--seed",
                "1",
                "--run-name",
                "tiny_smoke_n10_seed0_train0",
                "--overwrite",
            )
        )
        == 0
    )
    assert json.loads((run_dir / "config.json").read_text())["seed"] == 1


def test_cli_errors_and_help(tmp_path, capsys, fake_checkpoints: list[str]) -> None:
    with pytest.raises(SystemExit) as err:
        attack.main(["--help"])
    assert err.value.code == 0
    helptext = capsys.readouterr().out
    for flag in (
        "--model",
        "--suite",
        "--dataset",
        "--n-examples",
        "--batch-size",
        "--seed",
        "--backend",
        "--grad-modes",
        "--out",
        "--train-seed",
        "--cross-check",
        "--surrogate",
        "--no-skip-broken",
        "--run-name",
        "--threads",
        "--device",
        "--shard",
    ):
        assert flag in helptext
    with pytest.raises(SystemExit, match="cannot load model 'patch'"):
        attack.main(_args(tmp_path, "--surrogate", "patch"))  # a named surrogate that is not trained here
    with pytest.raises(SystemExit, match="no attack suite"):
        attack.main([*_args(tmp_path, "--surrogate", "none"), "--suite", "nope"])
    with pytest.raises(SystemExit, match="grad-modes"):
        attack.main(_args(tmp_path, "--surrogate", "none", "--grad-modes", "exact,magic"))
    with pytest.raises(SystemExit, match="i/n"):
        attack.main(_args(tmp_path, "--surrogate", "none", "--shard", "2/2"))
    with pytest.raises(SystemExit, match="shard 0/2 has no examples"):  # 10 examples = one block of 16
        attack.main(_args(tmp_path, "--surrogate", "none", "--shard", "0/2"))


def test_compile_mode_is_part_of_the_run_only_when_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compiled kernels change records in the last bits: a compiled run must not reuse an eager run's folder,
    while eager runs keep the configuration they always had."""
    args = attack.get_args_parser().parse_args(["--model", "patch"])
    assert args.compile == "off"
    suite = attackrun.select_suite("smoke", None)
    eager = attack._settings(args).to_config(suite, {})
    assert "compile" not in eager
    compiled = attack._settings(
        attack.get_args_parser().parse_args(["--model", "patch", "--compile", "default"])
    )
    assert compiled.to_config(suite, {})["compile"] == "default"
    monkeypatch.setenv("RBW_COMPILE", "max-autotune")
    assert attack.get_args_parser().parse_args(["--model", "patch"]).compile == "max-autotune"


@pytest.mark.parametrize(
    ("sizes", "launcher"),
    [
        ({}, ["python"]),
        ({"world_size": 1, "local_world_size": 1}, ["python"]),
        ({"world_size": 2, "local_world_size": 2}, ["torchrun", "--nproc_per_node=2"]),
        ({"world_size": 8, "local_world_size": 4}, ["torchrun", "--nnodes=2", "--nproc_per_node=4"]),
    ],
)
def test_the_recorded_command_reruns_the_invocation(sizes: dict[str, int], launcher: list[str]) -> None:
    argv = ["--model", "patch", "--dataset", "imagefolder:my data/cifar.zip", "--eps", "8/255"]
    line = command_line("robustbench_wave.attack", argv, **sizes)
    # quoted so that a shell gives back the same arguments (the path with a space stays one argument)
    assert shlex.split(line) == [*launcher, "-m", "robustbench_wave.attack", *argv]


def test_the_test_images_come_named_and_at_most_the_split(caplog: pytest.LogCaptureFixture) -> None:
    """An attack run's data travel as LabelledImages (never a tuple read by position): the first N test
    images in [0, 1], and all of them, with a warning, when the split is smaller."""
    data = load_test_images("synthetic", 5)
    assert isinstance(data, LabelledImages) and len(data) == 5 and data.info.name == "synthetic"
    assert (
        data.images.dtype == torch.float32 and 0 <= float(data.images.min()) <= float(data.images.max()) <= 1
    )
    assert data.image_shape == (data.info.in_chans, data.info.img_size, data.info.img_size)
    part = data.subset(torch.tensor([1, 3]))
    assert torch.equal(part.images, data.images[[1, 3]]) and torch.equal(part.labels, data.labels[[1, 3]])
    assert part.info is data.info
    n = len(load_split("synthetic", "test")[1])
    with caplog.at_level("WARNING", logger="robustbench_wave.data.sources"):
        assert len(load_test_images("synthetic", n + 5)) == n
    assert f"the test split has only {n} images" in caplog.text
