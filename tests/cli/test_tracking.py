"""``--tensorboard`` (robustbench_wave.core.tracking): the event files, read back with TensorBoard's own reader,
hold exactly the numbers of the run's files (metrics.jsonl, config.json, summary.csv), once per step after
a kill and a resume; a missing package is refused before any write; a failing writer loses no result.
(Ranks under torchrun: test_tracking_torchrun.py.)"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch import nn
from torch.nn import functional as F

from robustbench_wave import attack, train
from robustbench_wave.core import tracking
from robustbench_wave.data import load_split, to_float
from robustbench_wave.training import checkpoint as ckpt
from tests.support.tensorboard_runs import ARGS, check_training_copy, event_files, read_scalars
from tests.support.training import kill_in_epoch


def _train(out: Path, tb: Path, *extra: str) -> int:
    return train.main([*ARGS, "--results-dir", str(out), "--tensorboard", str(tb), *extra])


def test_training_curves_equal_metrics_jsonl(tmp_path):
    pytest.importorskip("tensorboard")
    assert _train(tmp_path / "out", tmp_path / "tb") == 0
    run = ckpt.run_dir(tmp_path / "out", "synthetic", "patch", 0)
    log_dir = tracking.train_log_dir(tmp_path / "tb", "synthetic", "patch", 0)
    check_training_copy(run, log_dir)
    # re-running reuses the finished run and rebuilds the same TensorBoard run (no step twice)
    before = read_scalars(log_dir)
    assert _train(tmp_path / "out", tmp_path / "tb") == 0
    assert read_scalars(log_dir) == before
    check_training_copy(run, log_dir)


def test_killed_and_resumed_training_logs_every_epoch_once(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    restore = kill_in_epoch(monkeypatch, epoch=2)
    with pytest.raises(KeyboardInterrupt):
        _train(tmp_path / "out", tmp_path / "tb", "--epochs", "3")
    log_dir = tracking.train_log_dir(tmp_path / "tb", "synthetic", "patch", 0)
    assert [s for s, _ in read_scalars(log_dir)["train/loss"]] == [1]
    # a stale event file from the killed run that logged past its resume state (as a SIGKILL between the
    # copy and the state could leave): the resumed run must drop it, not show epoch 2 twice
    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(str(log_dir)) as stale:
        stale.add_scalar("train/loss", 99.0, global_step=2)
    assert len(event_files(log_dir)) == 2
    restore()
    assert _train(tmp_path / "out", tmp_path / "tb", "--epochs", "3") == 0
    check_training_copy(ckpt.run_dir(tmp_path / "out", "synthetic", "patch", 0), log_dir)


def test_a_failing_writer_loses_no_result(tmp_path, monkeypatch, caplog):
    """Tracking is a copy: its failure warns once and the run's files are those of an untracked run."""
    pytest.importorskip("tensorboard")
    from torch.utils.tensorboard import SummaryWriter

    assert train.main([*ARGS, "--results-dir", str(tmp_path / "plain")]) == 0

    def broken(self, *args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(SummaryWriter, "add_scalar", broken)
    with caplog.at_level(logging.WARNING, logger="robustbench_wave.core.tracking"):
        assert _train(tmp_path / "out", tmp_path / "tb") == 0
    assert len([r for r in caplog.records if "disk full" in r.getMessage()]) == 1
    plain = ckpt.run_dir(tmp_path / "plain", "synthetic", "patch", 0)
    tracked = ckpt.run_dir(tmp_path / "out", "synthetic", "patch", 0)
    assert (tracked / "model.safetensors").read_bytes() == (plain / "model.safetensors").read_bytes()
    strip = {"epoch_seconds", "train_images_per_s"}  # timings
    rows = [
        [
            {k: v for k, v in json.loads(line).items() if k not in strip}
            for line in path.read_text().splitlines()
        ]
        for path in (plain / "metrics.jsonl", tracked / "metrics.jsonl")
    ]
    assert rows[0] == rows[1]


@pytest.mark.parametrize("command", ["train", "attack"])
def test_missing_tensorboard_is_refused_before_any_write(tmp_path, monkeypatch, capsys, command):
    for module in ("tensorboard", "torch.utils.tensorboard"):
        monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    out, tb = tmp_path / "out", tmp_path / "tb"
    with pytest.raises(SystemExit) as exc:
        if command == "train":
            _train(out, tb)
        else:
            attack.main(
                ["--model", "patch", "--dataset", "synthetic", "--out", str(out), "--tensorboard", str(tb)]
            )
    message = str(exc.value)
    assert "pip install 'robustbench_wave[tracking]'" in message and len(message.splitlines()) == 1
    assert not out.exists() and not tb.exists()


@pytest.mark.parametrize("command", ["train", "attack"])
def test_a_file_as_tensorboard_folder_is_refused_before_any_write(tmp_path, command):
    out, tb = tmp_path / "out", tmp_path / "tb"
    tb.write_text("not a folder")
    with pytest.raises(SystemExit, match=r"--tensorboard .*tb: is a file"):
        if command == "train":
            _train(out, tb)
        else:
            attack.main(
                ["--model", "patch", "--dataset", "synthetic", "--out", str(out), "--tensorboard", str(tb)]
            )
    assert not out.exists() and tb.read_text() == "not a folder"


def test_help_explains_the_flag(capsys):
    for main in (train.main, attack.main):
        with pytest.raises(SystemExit):
            main(["--help"])
        text = capsys.readouterr().out
        assert "--tensorboard" in text and "robustbench_wave[tracking]" in text


def _fitted(n_train: int) -> nn.Module:
    """A linear model least-squares fitted to ``n_train`` synthetic images: accurate, but not robust, so
    its robust accuracy falls from clean through the eps grid (values worth comparing)."""
    images, labels, _ = load_split("synthetic", "train")
    model = nn.Sequential(nn.AvgPool2d(4), nn.Flatten(), nn.Linear(64, 10)).eval()
    features = model[:2](to_float(images[:n_train]))
    design = torch.cat([features, torch.ones(n_train, 1)], 1)
    solution = torch.linalg.lstsq(design, F.one_hot(labels[:n_train].long(), 10).float()).solution
    with torch.no_grad():
        model[2].weight.copy_(solution[:-1].T)
        model[2].bias.copy_(solution[-1])
    return model


def test_attack_tables_equal_summary_csv(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")

    def load_trained(name: str, dataset: str, results_dir: object = "results", seed: int = 0):  # type: ignore[no-untyped-def]
        meta = {"checkpoint_sha256": f"sha-{name}", "clean_accuracy": 0.1, "run_dir": f"runs/{name}"}
        return _fitted(100 * len(name)), meta

    monkeypatch.setattr(ckpt, "load_trained", load_trained)
    args = ["--model", "tiny", "--model", "tiny22", "--dataset", "synthetic", "--n-examples", "16", "--suite",
            "smoke", "--attacks", "noise_uniform,fgsm", "--surrogate", "none", "--cross-check", "off",
            "--no-diagnostics", "--no-progress", "--out", str(tmp_path / "out"), "--run-name", "r",
            "--tensorboard", str(tmp_path / "tb")]  # fmt: skip
    for _ in range(2):  # a re-run (resumed from its chunks) rebuilds the same TensorBoard runs
        assert attack.main(args) == 0
    summary = pd.read_csv(tmp_path / "out" / "attack" / "synthetic" / "r" / "summary.csv")
    root = tracking.attack_log_dir(tmp_path / "tb", "synthetic", "r")
    assert len(event_files(root)) == 1
    for (model, mode), rows in summary.groupby(["model", "grad_mode"]):
        scalars = read_scalars(root / model / mode)
        for threat, by_threat in rows.groupby("threat"):
            grid = sorted(by_threat["eps"].unique())
            assert scalars[f"eps/{threat}"] == [(i, pytest.approx(e, rel=1e-6)) for i, e in enumerate(grid)]
            for attack_name, g in by_threat.groupby("attack"):
                expected = [
                    (grid.index(e), pytest.approx(a, rel=1e-6))
                    for e, a in zip(g["eps"], g["robust_accuracy"])
                ]
                assert scalars[f"robust_accuracy/{threat}/{attack_name}"] == expected
        assert len(event_files(root / model / mode)) == 1
    assert {"tiny", "tiny22"} == {p.name for p in root.iterdir() if p.is_dir()}
