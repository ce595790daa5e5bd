"""``--surrogate auto``, the default: the zoo ``patch`` of the same training seed when its training run finished
for the data set, else none (the transfer attacks skipped); config.json stores the chosen name, so a run made
with ``--surrogate patch`` is the same configuration, and meta.json and report.md say how it was chosen."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from robustbench_wave import attack
from robustbench_wave.evaluation.records import read_run
from robustbench_wave.training import checkpoint

ATTACKS = "fgsm,transfer_pgd_linf"


def _tiny(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.AvgPool2d(4), nn.Flatten(), nn.Linear(64, 10)).eval()


@pytest.fixture
def zoo(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Trained stand-ins for the zoo's ``tiny`` (the attacked model) and ``patch``; returns what was loaded."""
    loaded: list[str] = []

    def load_trained(name: str, dataset: str, results_dir: object = "results", seed: int = 0):  # type: ignore[no-untyped-def]
        loaded.append(name)
        return _tiny(len(name)), {"checkpoint_sha256": f"sha-{name}", "run_dir": f"runs/{name}"}

    monkeypatch.setattr(checkpoint, "load_trained", load_trained)
    return loaded


def _train_folder(results: Path, seed: int = 0) -> Path:
    return checkpoint.run_dir(results, "synthetic", "patch", seed)


def _trained_patch(results: Path, *, finished: bool = True, seed: int = 0) -> None:
    """A training run folder of ``patch`` as the train command leaves it (its config.json is what counts)."""
    folder = _train_folder(results, seed)
    folder.mkdir(parents=True)
    config = {"model_spec": {}, **({"final": {"test_accuracy": 0.5}} if finished else {})}
    (folder / checkpoint.CONFIG).write_text(json.dumps(config))


def _run(tmp_path: Path, *extra: str) -> tuple[Path, dict]:
    argv = [
        "--model", "tiny", "--dataset", "synthetic", "--n-examples", "8", "--suite", "smoke", "--attacks", ATTACKS,
        "--no-progress", "--batch-size", "8", "--cross-check", "off", "--results-dir", str(tmp_path / "results"),
        "--out", str(tmp_path / "out"), "--device", "cpu", *extra,
    ]  # fmt: skip
    assert attack.main(argv) == 0
    (run,) = (tmp_path / "out" / "attack" / "synthetic").iterdir()
    return run, json.loads((run / "config.json").read_text())


@pytest.mark.slow
def test_auto_is_the_default_and_takes_a_trained_patch(tmp_path: Path, zoo: list[str]) -> None:
    _trained_patch(tmp_path / "results")
    run, config = _run(tmp_path, "--no-diagnostics")
    assert config["surrogate"] == "patch" and zoo == ["tiny", "patch"]
    records, meta = read_run(run)
    assert meta["models"]["tiny"]["surrogate"]["name"] == "patch"
    assert meta["models"]["tiny"]["surrogate_choice"].startswith("--surrogate auto: patch (its finished")
    assert "transfer_pgd_linf" in set(records["attack"])
    # the same configuration as naming it: every chunk resumes, the records are the same
    named, _ = _run(tmp_path, "--no-diagnostics", "--surrogate", "patch")
    again, meta2 = read_run(named)
    assert (
        meta2["models"]["tiny"]["resumed_chunks"] == 2 and "surrogate_choice" not in meta2["models"]["tiny"]
    )
    assert again.equals(records)


@pytest.mark.slow
@pytest.mark.parametrize("why", ["untrained", "unfinished", "other train seed"])
def test_auto_without_a_trained_patch_is_none_and_says_so(tmp_path: Path, zoo: list[str], why: str) -> None:
    if why == "unfinished":
        _trained_patch(tmp_path / "results", finished=False)
    elif why == "other train seed":
        _trained_patch(tmp_path / "results", seed=1)
    run, config = _run(tmp_path)
    assert config["surrogate"] == "none" and zoo == ["tiny"]
    records, meta = read_run(run)
    assert "transfer_pgd_linf" not in set(records["attack"])
    assert meta["attacks"]["transfer_pgd_linf"]["skipped"] == "no surrogate model given"
    note = meta["models"]["tiny"]["surrogate_choice"]
    assert note.startswith("--surrogate auto: none (no finished training run of patch in")
    assert str(_train_folder(tmp_path / "results")) in note
    report = (run / "report.md").read_text(encoding="utf-8")
    assert f"Transfer surrogate: {note}." in report
    assert "- `transfer_pgd_linf`: skipped for every model (no surrogate model given)" in report


def test_auto_refuses_an_unreadable_training_run(tmp_path: Path, zoo: list[str]) -> None:
    """A damaged run of patch is an error, as it is when named, not a silent run without transfer."""
    folder = _train_folder(tmp_path / "results")
    folder.mkdir(parents=True)
    (folder / checkpoint.CONFIG).write_text("{not json")
    with pytest.raises(SystemExit, match="--surrogate auto: cannot read the training run of patch"):
        _run(tmp_path)
    assert not (tmp_path / "out" / "attack").exists()
