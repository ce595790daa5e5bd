"""What a training run leaves on disk stays true: ``metrics.jsonl`` holds every epoch exactly once after a
kill and a resume, ``config.json`` hashes the spec with the weights and is checked on load (naming the file
and the field), and an unreadable summary table is replaced instead of crashing the finished training."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import pytest

from robustbench_wave import train
from robustbench_wave.data import dataset_info
from robustbench_wave.models.zoo import load_spec
from robustbench_wave.training import checkpoint as ckpt
from robustbench_wave.training import runner
from robustbench_wave.training.summary import SUMMARY_CSV, write_summary
from tests.support.training import SMALL, kill_in_epoch, train_small


# -- metrics.jsonl from the resume state -----------------------------------------------------------------
@pytest.mark.parametrize("damage", ["stale extra line", "duplicated line", "lost line"])
def test_resumed_metrics_hold_every_epoch_exactly_once(tmp_path, monkeypatch, damage):
    train_small(tmp_path / "whole", "--model", "patch")
    whole = ckpt.run_dir(tmp_path / "whole", "synthetic", "patch", 0)
    with monkeypatch.context() as patch:
        kill_in_epoch(patch, 2)
        with pytest.raises(KeyboardInterrupt):
            train_small(tmp_path / "killed", "--model", "patch")
    directory = ckpt.run_dir(tmp_path / "killed", "synthetic", "patch", 0)
    state = json.loads((directory / ckpt.RESUME_STATE).read_text())
    assert state["epoch"] == 1 and [row["epoch"] for row in state["history"]] == [1]
    metrics = directory / ckpt.METRICS
    lines = metrics.read_text().splitlines()
    stale = json.dumps({**json.loads(lines[0]), "epoch": 2, "val_accuracy": 0.123})
    # a kill between a metrics line and the resume state, or two runs that overlapped, left these behind
    metrics.write_text({"stale extra line": "\n".join([lines[0], stale]), "duplicated line": "\n".join(lines * 2),
                        "lost line": ""}[damage] + "\n")  # fmt: skip
    train_small(tmp_path / "killed", "--model", "patch")
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [row["epoch"] for row in rows] == [1, 2]
    assert rows[0] == json.loads(lines[0]) and rows[1]["val_accuracy"] != 0.123
    reference = [json.loads(line) for line in (whole / ckpt.METRICS).read_text().splitlines()]
    timing = ("epoch_seconds", "train_images_per_s")
    assert [{k: v for k, v in r.items() if k not in timing} for r in rows] == [
        {k: v for k, v in r.items() if k not in timing} for r in reference
    ]
    assert (directory / ckpt.WEIGHTS).read_bytes() == (whole / ckpt.WEIGHTS).read_bytes()


# -- the spec hashed with the weights -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def trained_wavelet(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("trained")
    train.main([*SMALL, "--epochs", "1", "--model", "wavelet", "--results-dir", str(out)])
    return out


def _edited_copy(trained: Path, tmp_path: Path, edit) -> tuple[Path, Path]:
    source = ckpt.run_dir(trained, "synthetic", "wavelet", 0)
    directory = ckpt.run_dir(tmp_path, "synthetic", "wavelet", 0)
    directory.mkdir(parents=True)
    for name in (ckpt.CONFIG, ckpt.WEIGHTS):
        (directory / name).write_bytes((source / name).read_bytes())
    config = json.loads((directory / ckpt.CONFIG).read_text())
    edit(config)
    (directory / ckpt.CONFIG).write_text(json.dumps(config))
    return directory, directory / ckpt.CONFIG


def test_trained_run_records_and_reports_its_spec_hash(trained_wavelet):
    _, meta = ckpt.load_trained("wavelet", "synthetic", trained_wavelet)
    config = meta["config"]
    expected = hashlib.sha256(
        json.dumps({"model_spec": config["model_spec"], "dataset_info": config["dataset_info"]}, sort_keys=True)
        .encode()
    ).hexdigest()  # fmt: skip
    assert config["final"]["spec_sha256"] == meta["spec_sha256"] == expected
    assert (
        meta["model_spec"] == load_spec("wavelet")
        and meta["model_spec"]["tokenizer_args"]["zero_fraction"] == 0.8
    )
    assert meta["dataset_info"].slug == "synthetic"


def test_editing_the_spec_after_training_is_refused(trained_wavelet, tmp_path):
    def zero_nothing(config: dict) -> None:
        config["model_spec"]["tokenizer_args"]["zero_fraction"] = 0.0  # same tensor shapes

    directory, config_path = _edited_copy(trained_wavelet, tmp_path, zero_nothing)
    weights = (directory / ckpt.WEIGHTS).read_bytes()
    with pytest.raises(ValueError, match="spec_sha256") as exc:
        ckpt.load_trained("wavelet", "synthetic", tmp_path)
    assert str(config_path) in str(exc.value) and "\n" not in str(exc.value)
    assert (directory / ckpt.WEIGHTS).read_bytes() == weights


@pytest.mark.parametrize(
    "field", ["final.checkpoint_sha256", "final.test_accuracy", "model_spec", "dataset_info"]
)
def test_config_without_a_required_field_names_the_file_and_field(trained_wavelet, tmp_path, field):
    def drop(config: dict) -> None:
        *parents, last = field.split(".")
        for part in parents:
            config = config[part]
        del config[last]

    _, config_path = _edited_copy(trained_wavelet, tmp_path, drop)
    with pytest.raises(ValueError, match=field.replace(".", r"\.")) as exc:
        ckpt.load_trained("wavelet", "synthetic", tmp_path)
    assert str(config_path) in str(exc.value) and "\n" not in str(exc.value)


def test_a_run_trained_before_spec_hashing_loads_with_a_warning(trained_wavelet, tmp_path, caplog):
    _edited_copy(trained_wavelet, tmp_path, lambda config: config["final"].pop("spec_sha256"))
    with caplog.at_level(logging.WARNING, logger=ckpt.__name__):
        _, meta = ckpt.load_trained("wavelet", "synthetic", tmp_path)
    assert "cannot be verified" in caplog.text
    assert meta["spec_sha256"] == ckpt.spec_sha256(meta["model_spec"], meta["config"]["dataset_info"])


# -- the summary table ------------------------------------------------------------------------------------
def test_an_unreadable_summary_is_replaced_not_a_crash_after_training(tmp_path, caplog):
    info = dataset_info("synthetic")
    path = tmp_path / "train" / info.slug / SUMMARY_CSV
    path.parent.mkdir(parents=True)
    path.write_text("not,a\nsummary,file\n")
    row = {column: 1 for column in runner.SUMMARY_COLUMNS} | {"model": "patch", "seed": 0}
    with caplog.at_level(logging.WARNING):
        written, table = write_summary(tmp_path, info, [row])
    assert written == path and list(table["model"]) == ["patch"] and "no model/seed columns" in caplog.text
