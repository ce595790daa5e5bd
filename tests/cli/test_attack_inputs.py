"""The attack command against careless and hostile input: nonsense counts refused by the parser, every input
checked before the first write, names that cannot escape ``--out``, the run folder locked, old results
removed when the configuration changes, model specs hashed, the training data set compared, and unreadable
chunks computed again.

The models are tiny stand-ins for trained checkpoints (``checkpoint.load_trained`` is replaced); the tests
edit the training metadata the stand-in returns.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch
from torch import nn

from robustbench_wave import attack, attackrun, report
from robustbench_wave.attacks import load_suite
from robustbench_wave.core.runfolder import RunLock
from robustbench_wave.data import dataset_info, load_split, to_float
from robustbench_wave.evaluation import EvalSettings, evaluate
from robustbench_wave.evaluation.records import RECORDS_FILE
from robustbench_wave.training import checkpoint

SYNTHETIC = dataset_info("synthetic")
FAST = "noise_uniform,noise_sign,fgsm,pgd_linf"  # four chunks for a model without a fixed front-end
RUN = "tiny_smoke_n10_seed0_train0"
SEEDS = {"tiny": 0, "tiny2": 9}  # initialisations that get some of the 10 test images right


def _tiny(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.AvgPool2d(4), nn.Flatten(), nn.Linear(64, 10)).eval()


@pytest.fixture
def trained(monkeypatch: pytest.MonkeyPatch) -> dict[str, dict[str, Any]]:
    """Training metadata of the stand-in checkpoints 'tiny' and 'tiny2', by name (tests may edit it)."""
    metas = {
        name: {
            "checkpoint_sha256": f"sha-{name}",
            "spec_sha256": f"spec-{name}",
            "model_spec": {"name": name, "depth": 1},
            "clean_accuracy": 0.1,
            "run_dir": f"runs/{name}",
            "dataset_info": SYNTHETIC,
        }
        for name in ("tiny", "tiny2")
    }

    def load_trained(name: str, dataset: str, results_dir: object = "results", seed: int = 0):  # type: ignore[no-untyped-def]
        if name not in metas:
            raise ValueError(f"no trained model {name}")
        return _tiny(SEEDS[name]), dict(metas[name])

    monkeypatch.setattr(checkpoint, "load_trained", load_trained)
    return metas


def _args(out: Path, *extra: str) -> list[str]:
    """The base invocation; a case's own ``--attacks`` replaces FAST (repeating the flag would add to it)."""
    attacks = [] if "--attacks" in extra else ["--attacks", FAST]
    return [
        "--model", "tiny", "--dataset", "synthetic", "--n-examples", "10", "--suite", "smoke",
        *attacks, "--surrogate", "none", "--out", str(out), "--no-progress", "--batch-size", "4",
        "--no-diagnostics", *extra,
    ]  # fmt: skip


def _snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes (an empty dict when ``root`` does not exist)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _meta(run: Path) -> dict[str, Any]:
    return json.loads((run / "meta.json").read_text(encoding="utf-8"))


# ------------------------------------------------------------------------------------------------- parser


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--n-examples", "0"),
        ("--n-examples", "ten"),
        ("--batch-size", "-1"),
        ("--n-diagnostics", "0"),
        ("--n-diagnostics", "-3"),
        ("--diagnostics-steps", "0"),
        ("--seed", "-1"),
        ("--train-seed", "-2"),
        ("--threads", "-1"),
    ],
)
def test_the_parser_refuses_nonsense_counts_in_one_line(flag: str, value: str, capsys) -> None:
    with pytest.raises(SystemExit) as err:
        attack.get_args_parser().parse_args(["--model", "tiny", flag, value])
    assert err.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and flag in lines[0] and repr(value) in lines[0], lines


def test_help_shows_defaults_only_for_options_with_values(capsys) -> None:
    with pytest.raises(SystemExit):
        attack.get_args_parser().parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: True)" not in text and "(default: False)" not in text
    assert "(default: 1000)" in text  # --n-examples


# ------------------------------------------------------------------------------ nothing written on bad input


def _suite_file(tmp_path: Path, name: str, text: str) -> list[str]:
    path = tmp_path / f"{name}.toml"
    path.write_text(text, encoding="utf-8")
    return ["--suite", str(path)]


def _huge_l2(tmp_path: Path, trained: dict) -> list[str]:
    text = (
        'name = "huge"\n[eps.default]\nLinf = [0.03]\nL2 = [0.5, 1000.0]\n'
        '[[attack]]\nname = "clean"\nfamily = "clean"\n'
        '[[attack]]\nname = "pgd_l2"\nfamily = "pgd"\nthreat = "L2"\nsteps = 2\n'
    )
    return [*_suite_file(tmp_path, "huge", text), "--attacks", "pgd_l2"]


def _no_threat(tmp_path: Path, trained: dict) -> list[str]:
    text = (
        'name = "nothreat"\n[eps.default]\nLinf = [0.03]\n'
        '[[attack]]\nname = "clean"\nfamily = "clean"\n[[attack]]\nname = "fgsm"\nfamily = "fgsm"\n'
    )
    return [*_suite_file(tmp_path, "nothreat", text), "--attacks", "fgsm"]


def _unsafe_suite_name(tmp_path: Path, trained: dict) -> list[str]:
    text = 'name = "../../../../evil"\n[eps.default]\nLinf = [0.03]\n[[attack]]\nname = "clean"\nfamily = "clean"\n'
    return [*_suite_file(tmp_path, "evil", text), "--attacks", "clean"]


def _other_dataset(who: str) -> Callable[[Path, dict], list[str]]:
    def setup(tmp_path: Path, trained: dict) -> list[str]:
        trained[who]["dataset_info"] = dataclasses.replace(SYNTHETIC, name="gratings-v2", slug="gratings-v2")
        return ["--surrogate", who]

    return setup


def _args_only(*extra: str) -> Callable[[Path, dict], list[str]]:
    return lambda tmp_path, trained: list(extra)


BAD_INPUTS = {
    "unknown suite": (_args_only("--suite", "nope"), "no attack suite 'nope'"),
    "unknown grad mode": (_args_only("--grad-modes", "exact,magic"), "grad-modes"),
    "unknown data set": (_args_only("--dataset", "no-such-set"), "no-such-set"),
    "untrained model": (_args_only("--model", "ghost"), "cannot load model 'ghost'"),
    "model name with a path": (_args_only("--model", "../../x"), r"--model '\.\./\.\./x'"),
    "run name escaping --out": (_args_only("--run-name", "../../../escape"), "--run-name"),
    "run name with a slash": (_args_only("--run-name", "a/b"), "--run-name 'a/b'"),
    "L2 budget beyond the diameter": (
        _huge_l2,
        r"attack entry 'pgd_l2'.*eps = 1000 exceeds sqrt\(C\*H\*W\) = 32",
    ),
    "suite entry without threat": (
        _no_threat,
        r"attack entry 'fgsm' \(.*nothreat.toml \[\[attack\]\] #2\) lacks",
    ),
    "suite name with a path": (_unsafe_suite_name, "suite name"),
    "model trained on another data set": (_other_dataset("tiny"), "trained on gratings-v2.*not on synthetic"),
    "surrogate trained on another data set": (_other_dataset("tiny2"), "'tiny2' was trained on gratings-v2"),
    "shard without examples": (_args_only("--shard", "1/4"), "shard 1/4 has no examples"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_ends_with_one_line_and_writes_nothing(case: str, tmp_path: Path, trained: dict) -> None:
    setup, message = BAD_INPUTS[case]
    extra = setup(tmp_path, trained)
    before = _snapshot(tmp_path)
    out = tmp_path / "results" / "fresh"
    with pytest.raises(SystemExit) as err:
        attack.main(_args(out, *extra))
    text = str(err.value.code)
    assert re.search(message, text), text
    assert "\n" not in text
    assert _snapshot(tmp_path) == before and not (tmp_path / "results").exists()


def test_device_cuda_without_a_gpu_writes_nothing(tmp_path: Path, trained: dict) -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(SystemExit, match="--device cuda: CUDA is not available"):
        attack.main(_args(tmp_path / "fresh", "--device", "cuda"))
    assert not (tmp_path / "fresh").exists()


def test_out_that_is_a_file_is_refused(tmp_path: Path, trained: dict) -> None:
    (tmp_path / "results").write_text("not a folder")
    with pytest.raises(SystemExit, match=r"--out .*results: is a file"):
        attack.main(_args(tmp_path / "results"))
    assert (tmp_path / "results").read_text() == "not a folder"


# ----------------------------------------------------------------------------------------------- the lock


def test_a_locked_run_folder_stops_a_second_run(tmp_path: Path, trained: dict) -> None:
    assert attack.main(_args(tmp_path)) == 0
    run = tmp_path / "attack" / "synthetic" / RUN
    with RunLock(run):
        before = _snapshot(tmp_path)
        with pytest.raises(SystemExit, match=f"{re.escape(str(run))} is in use by another run .*pid"):
            attack.main(_args(tmp_path, "--seed", "1", "--overwrite", "--run-name", RUN))
        assert _snapshot(tmp_path) == before
    assert attack.main(_args(tmp_path, "--seed", "1", "--overwrite", "--run-name", RUN)) == 0  # released
    assert json.loads((run / "config.json").read_text())["seed"] == 1


def test_a_shard_job_locks_its_shard_folder(tmp_path: Path, trained: dict) -> None:
    args = [*_args(tmp_path, "--n-examples", "20", "--run-name", "r"), "--shard", "1/2"]
    folder = tmp_path / "attack" / "synthetic" / "r" / "shards" / "1-of-2"
    with RunLock(folder):
        with pytest.raises(SystemExit, match=f"{re.escape(str(folder))} is in use"):
            attack.main(args)
        assert sorted(p.name for p in folder.iterdir()) == [".lock"]
    assert attack.main(args) == 0 and (folder / RECORDS_FILE).exists()


# ------------------------------------------------------------------------------------ stale results removed


def test_a_configuration_change_removes_the_old_results_first(tmp_path: Path, trained: dict) -> None:
    extra = ("--cross-check", "all", "--n-diagnostics", "2", "--diagnostics-steps", "1")
    args = [a for a in _args(tmp_path, *extra) if a != "--no-diagnostics"]
    assert attack.main(args) == 0
    run = tmp_path / "attack" / "synthetic" / RUN
    written = {p.name for p in run.iterdir()}
    assert {"records.csv.gz", "crosscheck.csv", "report.md", "verdict.json", "figures", "chunks"} <= written
    assert written - {".lock"} <= {
        *attackrun.RUN_FILES,
        *attackrun.RUN_FOLDERS,
    }  # every output is known by name
    (run / "notes.txt").write_text("the user's own file")
    config = {**json.loads((run / "config.json").read_text()), "seed": 1}
    with pytest.raises(ValueError, match=r"different configuration.*--overwrite"):
        attackrun.prepare_run_dir(run, config, False)
    attackrun.prepare_run_dir(run, config, True)  # the --overwrite run is killed right after this
    assert sorted(p.name for p in run.iterdir()) == [".lock", "config.json", "notes.txt"]
    assert json.loads((run / "config.json").read_text())["seed"] == 1
    with pytest.raises(SystemExit) as err:  # nothing old left for the report to rebuild
        report.main([str(run), "--quiet", "--no-figures"])
    assert err.value.code not in (0, None)


def test_results_without_a_config_are_replaced_only_with_overwrite(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / RECORDS_FILE).write_bytes(b"of an unknown configuration")
    with pytest.raises(ValueError, match=r"without a readable config\.json"):
        attackrun.prepare_run_dir(run, {"seed": 0}, False)
    assert not (run / "config.json").exists()
    attackrun.prepare_run_dir(run, {"seed": 0}, True)
    assert sorted(p.name for p in run.iterdir()) == ["config.json"]


# ------------------------------------------------------------------------------ provenance and data sets


def test_specs_are_recorded_and_part_of_the_run(tmp_path: Path, trained: dict) -> None:
    assert attack.main(_args(tmp_path, "--surrogate", "tiny2")) == 0
    run = tmp_path / "attack" / "synthetic" / RUN
    config = json.loads((run / "config.json").read_text())
    assert config["specs"] == {"tiny": "spec-tiny", "surrogate:tiny2": "spec-tiny2"}
    model = _meta(run)["models"]["tiny"]
    assert model["spec_sha256"] == "spec-tiny" and model["model_spec"] == {"name": "tiny", "depth": 1}
    trained["tiny"]["spec_sha256"] = "spec-edited"  # same weights, another spec
    with pytest.raises(SystemExit, match="different configuration"):
        attack.main(_args(tmp_path, "--surrogate", "tiny2"))


def test_chunks_made_under_another_spec_are_not_resumed(tmp_path: Path) -> None:
    images, labels, info = load_split("synthetic", "test")
    x, y = to_float(images[:8]), torch.as_tensor(labels[:8]).long()
    suite = load_suite("smoke").select(["fgsm"])
    model = _tiny(4)

    def run(specs: dict[str, str] | None):  # type: ignore[no-untyped-def]
        settings = EvalSettings(dataset=info)
        return evaluate(model, x, y, suite, settings, progress=False, cache_dir=tmp_path, specs=specs)

    first = run({"model": "a"})
    again, other = run({"model": "a"}), run({"model": "b"})
    assert again.meta["models"]["model"]["resumed_chunks"] == 1
    assert other.meta["models"]["model"]["resumed_chunks"] == 0
    assert first.meta["settings"]["fingerprint"] != other.meta["settings"]["fingerprint"]
    pd.testing.assert_frame_equal(first.records, other.records)  # the spec is identity, not a number


# --------------------------------------------------------------------------------------- unreadable chunks


def test_unreadable_chunks_are_computed_again(tmp_path: Path, trained: dict, caplog) -> None:
    assert attack.main(_args(tmp_path)) == 0
    run = tmp_path / "attack" / "synthetic" / RUN
    first = (run / RECORDS_FILE).read_bytes()
    markers = sorted((run / "chunks").glob("*.json"))
    assert len(markers) == 4
    tables = [m.with_name(m.name.replace(".json", ".csv.gz")) for m in markers]
    data = tables[0].read_bytes()
    tables[0].write_bytes(data[: len(data) // 2])  # truncated
    tables[1].write_text("model,attack\ntiny,fgsm\n")  # not gzip
    tables[2].write_bytes(gzip.compress(b"a,b\n1,2\n"))  # wrong columns
    markers[3].write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="robustbench_wave.evaluation.chunks"):
        assert attack.main(_args(tmp_path, "--batch-size", "3")) == 0
    assert (run / RECORDS_FILE).read_bytes() == first
    assert _meta(run)["models"]["tiny"]["resumed_chunks"] == 0
    for damaged in (*tables[:3], markers[3]):
        assert str(damaged) in caplog.text
    assert attack.main(_args(tmp_path)) == 0  # saved again: all resumed now
    assert _meta(run)["models"]["tiny"]["resumed_chunks"] == 4
    assert (run / RECORDS_FILE).read_bytes() == first


# ------------------------------------------------------------------------------------- --shard finalize


def test_finalize_options_of_a_shard_job_are_checked() -> None:
    assert attackrun.ShardFinalize.from_dict({"n_diagnostics": 4}) == attackrun.ShardFinalize(
        attackrun.FinalizeOptions(n_diagnostics=4), attackrun.RunOptions.batch_size, 0
    )
    bad: list[Any] = [
        {"n_diagnostics": 0},
        {"n_diagnostics": -3},
        {"diagnostics_steps": 0},
        {"batch_size": 0},
        {"seed": -1},
        {"n_diagnostics": "4"},
        {"diagnostics": "yes"},
        {"bogus": 1},
        [1, 2],
    ]
    for options in bad:
        with pytest.raises(ValueError, match="finalize option"):
            attackrun.ShardFinalize.from_dict(options)


def test_a_shard_job_stores_the_finalize_record_it_always_stored() -> None:
    """FinalizeOptions no longer restates the run's batch size and seed; the record a --shard job writes for
    the merge still holds them, as one flat object, so shards written before merge as they did."""
    stored = {"diagnostics": True, "n_diagnostics": 8, "diagnostics_steps": 3, "batch_size": 16, "seed": 5}
    record = attackrun.ShardFinalize.from_dict(stored)
    assert record.options == attackrun.FinalizeOptions(True, 8, 3) and (record.batch_size, record.seed) == (
        16,
        5,
    )
    assert record.to_dict() == stored
