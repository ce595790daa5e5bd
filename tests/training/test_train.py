"""`python -m robustbench_wave.train` and the training runner: outputs, resume after a kill, bad input,
checkpoint integrity."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file

from robustbench_wave import train
from robustbench_wave.core.distributed import DistContext
from robustbench_wave.data import load_split, to_float
from robustbench_wave.models.vit import build_model
from robustbench_wave.training import checkpoint as ckpt
from robustbench_wave.training import engine, runner
from tests.support.training import kill_in_epoch

ARGS = ["--dataset", "synthetic", "--train-subset", "320", "--n-examples", "128", "--batch-size", "32",
        "--epochs", "2", "--no-progress"]  # fmt: skip


def _run(tmp_path, *extra: str) -> int:
    return train.main([*ARGS, "--results-dir", str(tmp_path), *extra])


@pytest.mark.slow
def test_train_writes_checkpoint_config_metrics_and_summary(tmp_path, capsys):
    assert _run(tmp_path, "--model", "patch", "--model", "wavelet") == 0
    for name in ("patch", "wavelet"):
        directory = ckpt.run_dir(tmp_path, "synthetic", name, 0)
        config = json.loads((directory / "config.json").read_text())
        metrics = [json.loads(line) for line in (directory / "metrics.jsonl").read_text().splitlines()]
        assert [m["epoch"] for m in metrics] == [1, 2]
        assert {"train_loss", "train_accuracy", "val_accuracy", "train_images_per_s"} <= set(metrics[0])
        assert config["recipe"]["epochs"] == 2 and config["model_spec"]["name"] == name
        assert set(load_file(str(directory / "model.safetensors")))  # real safetensors weights
        assert not (directory / "resume.json").exists()
        # the recorded clean accuracy is what the reloaded checkpoint really gets
        model, meta = ckpt.load_trained(name, "synthetic", tmp_path)
        images, labels, _ = load_split("synthetic", "test")
        with torch.no_grad():
            acc = (model(to_float(images[:128])).argmax(1) == labels[:128]).float().mean().item()
        assert acc == pytest.approx(meta["clean_accuracy"])
    summary = pd.read_csv(tmp_path / "train" / "synthetic" / "summary.csv")
    assert sorted(summary["model"]) == ["patch", "wavelet"]
    assert (summary["tokens"] == 64).all() and summary["params"].gt(0).all() and summary["gmacs"].gt(0).all()
    out = capsys.readouterr().out
    assert "Training summary" in out and "wavelet" in out
    config = json.loads((ckpt.run_dir(tmp_path, "synthetic", "patch", 0) / "config.json").read_text())
    assert (
        config["provenance"]["world_size"] == 1 and config["provenance"]["device"] == "cpu"
    )  # --device auto
    assert config["provenance"]["threads_per_rank"] >= 1 and config["precision"] == "float32"


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_weights(tmp_path, monkeypatch):
    _run(tmp_path / "whole", "--model", "wavelet")
    reference = load_file(
        str(ckpt.run_dir(tmp_path / "whole", "synthetic", "wavelet", 0) / "model.safetensors")
    )

    restore = kill_in_epoch(monkeypatch, epoch=2)
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path / "killed", "--model", "wavelet")
    directory = ckpt.run_dir(tmp_path / "killed", "synthetic", "wavelet", 0)
    assert json.loads((directory / "resume.json").read_text())["epoch"] == 1
    restore()
    _run(tmp_path / "killed", "--model", "wavelet")
    resumed = load_file(str(directory / "model.safetensors"))
    for key, value in reference.items():
        torch.testing.assert_close(resumed[key], value, rtol=0, atol=0)
    assert len((directory / "metrics.jsonl").read_text().splitlines()) == 2


def test_rerun_reuses_a_finished_run_and_refuses_a_different_config(tmp_path):
    _run(tmp_path, "--model", "patch")
    weights = ckpt.run_dir(tmp_path, "synthetic", "patch", 0) / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    _run(tmp_path, "--model", "patch")
    assert weights.stat().st_mtime_ns == stamp  # nothing retrained
    with pytest.raises(SystemExit, match="different configuration"):
        _run(tmp_path, "--model", "patch", "--lr", "0.01")


@pytest.mark.slow
def test_corrupt_or_mismatched_checkpoint_is_refused(tmp_path):
    _run(tmp_path, "--model", "patch")
    directory = ckpt.run_dir(tmp_path, "synthetic", "patch", 0)
    weights = directory / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-10:] = b"\x00" * 10
    weights.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="does not match the sha256"):
        ckpt.load_trained("patch", "synthetic", tmp_path)
    weights.write_bytes(b"not a safetensors file")
    with pytest.raises(ValueError, match="corrupt"):
        ckpt.load_weights(weights, build_model("patch", load_split("synthetic", "test")[2]))
    _run(tmp_path, "--model", "patch", "--overwrite")
    wavelet = build_model("wavelet", load_split("synthetic", "test")[2])
    with pytest.raises(ValueError, match="does not fit this model"):
        ckpt.load_weights(weights, wavelet)


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--model", "nope"], "unknown model"), (["--dataset", "mnist3"], "unknown data set"),
     (["--epochs", "0"], "argument --epochs: '0' is not a count >= 1")],
)  # fmt: skip
def test_bad_input_exits_with_a_clear_message(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        train.main([*ARGS, "--results-dir", str(tmp_path), *argv])
    assert message in (exc.value.code if isinstance(exc.value.code, str) else capsys.readouterr().err)


def test_untrained_model_gives_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match=r"run python -m robustbench_wave\.train"):
        ckpt.load_trained("patch", "synthetic", tmp_path)


def test_help_explains_every_flag(capsys):
    with pytest.raises(SystemExit):
        train.main(["--help"])
    text = capsys.readouterr().out
    for flag in (
        "--model",
        "--dataset",
        "--epochs",
        "--batch-size",
        "--train-seed",
        "--results-dir",
        "--train-subset",
        "--overwrite",
        "--device",
        "--bf16",
        "--parallel",
    ):
        assert flag in text


@pytest.mark.slow
def test_library_runner_trains_the_same_weights_as_the_cli(tmp_path):
    """train_model with an explicit TrainConfig (no argparse) is what the CLI runs: same bytes on disk."""
    _run(tmp_path / "cli", "--model", "patch")
    config = runner.TrainConfig(
        out=tmp_path / "lib",
        recipe=engine.Recipe(epochs=2, batch_size=32),
        dataset="synthetic",
        train_subset=320,
        test_subset=128,
        progress=False,
    )
    data = runner.load_training_data("synthetic", 0, val_fraction=0.1, train_subset=320, test_subset=128)
    assert len(data.train_labels) + len(data.val_labels) == 320 and len(data.test_labels) == 128
    row = runner.train_model("patch", data, config, 0, DistContext(device=torch.device("cpu")))
    assert set(row) == set(runner.SUMMARY_COLUMNS) and row["epochs"] == 2
    weights = [
        ckpt.run_dir(root, "synthetic", "patch", 0) / "model.safetensors"
        for root in (tmp_path / "cli", tmp_path / "lib")
    ]
    assert weights[0].read_bytes() == weights[1].read_bytes()
    assert runner.train_model("patch", data, config, 0) == row  # a finished run is reused
