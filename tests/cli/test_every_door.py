"""Every door gives one defence the same treatment: a PIL JPEG round trip in front of a linear model (a
non-differentiable step the scan links by the identity, BPDA) through the attack command, ``benchmark()`` with
the module and with its ``FILE.py:FACTORY``, ``evaluate()`` with the module, and the gallery's ``--defence``:
the same records (same seed, same images), the ``bpda`` mode in each, and an in-memory model scanned like a
loaded one. On main before this change ``evaluate()`` and ``benchmark(module)`` never scanned an in-memory
model: no ``bpda`` rows, and a higher robust accuracy than the command line's."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch

import robustbench_wave
from robustbench_wave import api, attack, gallery
from robustbench_wave.attacks import load_suite
from robustbench_wave.data import load_split, load_test_images, to_float
from robustbench_wave.evaluation import EvalSettings, evaluate
from robustbench_wave.evaluation.records import read_run
from robustbench_wave.models.autobpda import gradient_path
from tests.support import REPO
from tests.support import external_models as ext
from tests.support.gallery_in_process import attack_in_process
from tests.support.roundtrip_models import jpeg_pooled_linear

FACTORY = f"{REPO / 'tests' / 'support' / 'roundtrip_models.py'}:jpeg_pooled_linear"
N = 8
ATTACKS = "fgsm,pgd_l2"
#: What identifies a record besides the model's name (its record name differs by door: the reference's slug,
#: or ``model_name``).
KEY = ["grad_mode", "attack", "threat", "eps", "example_id"]
SAME = ["pred", "correct", "attacked", "norm"]


@pytest.fixture(scope="module")
def weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    images, labels, _ = load_split("synthetic", "train")
    fitted = ext.fit_pooled_linear(to_float(images[:2000]), labels[:2000])
    path = tmp_path_factory.mktemp("weights") / "jpeg.safetensors"
    ext.save_weights({f"1.{k}": v for k, v in fitted.items()}, str(path))
    return path


def _module(weights: Path) -> torch.nn.Module:
    from safetensors.torch import load_file

    model = jpeg_pooled_linear()
    model.load_state_dict(load_file(str(weights)))
    return model.eval()


def _suite_rows(records: pd.DataFrame) -> pd.DataFrame:
    """The suite's rows (the checklist's escalation, which only a run folder has, left out), in one order."""
    rows = records[~records["attack"].str.startswith("escalation_")]
    return rows.sort_values(KEY).reset_index(drop=True)[KEY + SAME]


def _run_records(out: Path) -> pd.DataFrame:
    (run,) = [p.parent for p in out.rglob("meta.json") if (p.parent / "config.json").exists()]
    return read_run(run)[0]


@pytest.mark.slow  # six runs of a small suite on 8 images, all in this process (~10 s)
def test_one_defence_through_every_door_gives_the_same_records(
    tmp_path: Path, weights: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    common = ["--dataset", "synthetic", "--suite", "smoke", "--attacks", ATTACKS, "--n-examples", str(N)]
    common += ["--surrogate", "none", "--no-progress", "--device", "cpu", "--no-diagnostics"]
    assert (
        attack.main([*common, "--model", FACTORY, "--weights", str(weights), "--out", str(tmp_path / "c")])
        == 0
    )
    by_door = {"command line": _suite_rows(_run_records(tmp_path / "c"))}

    kwargs = {"n_examples": N, "dataset": "synthetic", "suite": "smoke", "attacks": ATTACKS.split(",")}
    kwargs |= {"surrogate": "none", "progress": False, "device": "cpu", "diagnostics": False}
    module = robustbench_wave.benchmark(_module(weights), **kwargs)
    factory = robustbench_wave.benchmark(FACTORY, weights=weights, **kwargs)
    by_door |= {"benchmark(module)": _suite_rows(module.records)}
    by_door |= {"benchmark(FILE.py:f)": _suite_rows(factory.records)}

    data = load_test_images("synthetic", N)
    settings = EvalSettings(model_name="model", dataset=data.info, cross_check="headline")  # the command's
    suite = load_suite("smoke").select(ATTACKS.split(","))
    result = evaluate(_module(weights), data.images, data.labels, suite, settings, progress=False)
    by_door |= {"evaluate(module)": _suite_rows(result.records)}

    flags = f"--attacks {ATTACKS} --surrogate none"
    args = ["attack", "--results-dir", str(tmp_path / "g"), "--dataset", "synthetic", "--suite", "smoke"]
    args += ["--n-examples", str(N), "--defence", FACTORY, "--weights", str(weights), "--no-progress"]
    args += ["--adaptive-args", flags, "--naive-args", flags, "--attack-args=--no-diagnostics"]  # as above
    # the gallery's records, not its process (test_gallery_end_to_end starts one): its commands run here
    launched = attack_in_process(monkeypatch)
    assert gallery.main(args) == 0
    assert len(launched) == 2 and all("--no-diagnostics" in c for c in launched)  # naive and adaptive
    runs = json.loads(next((tmp_path / "g").rglob("runs.json")).read_text())
    adaptive = next(Path(r["run"]) for r in runs if r["protocol"] == "adaptive")
    by_door |= {"gallery --defence": _suite_rows(read_run(adaptive)[0])}

    reference = by_door["command line"]
    assert set(reference["grad_mode"]) == {"exact", "bpda"}  # the scan linked the JPEG round trip
    for door, rows in by_door.items():
        pd.testing.assert_frame_equal(rows, reference, obj=door)


class _Stop(Exception):
    """Raised by the stand-in for ``run_job``: the job is caught once prepared, before any attack."""


def test_an_in_memory_model_offers_the_bpda_mode_the_scan_found(
    monkeypatch: pytest.MonkeyPatch, weights: Path
) -> None:
    """``benchmark(module, grad_modes=["bpda"])`` was refused ("the model does not offer bpda"): the module was
    never scanned. Now it is prepared before its modes are resolved, as a loaded model is."""
    jobs = []

    def stand_in(job, *args, **kwargs):  # type: ignore[no-untyped-def]
        jobs.append(job)
        raise _Stop

    monkeypatch.setattr(api.attackrun, "run_job", stand_in)
    with pytest.raises(_Stop):
        robustbench_wave.benchmark(
            _module(weights),
            n_examples=N,
            dataset="synthetic",
            suite="smoke",
            grad_modes=["bpda"],
            progress=False,
        )
    (job,) = jobs
    assert list(job.modes["model"]) == ["bpda"]
    assert gradient_path(job.models["model"][0]).round_trips  # the PIL round trip, linked by the identity
