"""Specs that extend other specs, and fine-tuning from a trained base (``init_from``): the Token Pooling
grid of claim 4 (``models/tokenpool-pareto/``) is trained this way."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from safetensors.torch import load_file

from robustbench_wave import train
from robustbench_wave.data import dataset_info
from robustbench_wave.models.tokenpool import METHODS
from robustbench_wave.models.vit import build_model
from robustbench_wave.models.zoo import ZOO_DIR, _read_toml, load_spec
from robustbench_wave.training import checkpoint as ckpt
from robustbench_wave.training import runner
from tests.support import REPO as ROOT

GRID = ROOT / "models" / "tokenpool-pareto"
SMALL = ["--dataset", "synthetic", "--train-subset", "64", "--n-examples", "16", "--batch-size", "32",
         "--epochs", "1", "--no-progress"]  # fmt: skip


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_extends_overrides_only_what_the_spec_gives(tmp_path):
    child = _write(
        tmp_path / "pool-km.toml",
        'extends = "patch-tokenpool"\ninit_from = "patch"\n[tokenpool]\nmethod = "kmeans"\nkeep = [56, 48, 40, 32]\n',
    )
    expected = copy.deepcopy(load_spec("patch-tokenpool"))  # the oracle: the base with two fields replaced
    expected["tokenpool"].update(method="kmeans", keep=[56, 48, 40, 32])
    expected.update(name="pool-km", init_from="patch")
    assert load_spec(child) == expected


def test_extends_by_relative_path_and_chains(tmp_path):
    _write(tmp_path / "a.toml", 'extends = "patch"\n[tokenizer_args]\npatch_size = 8\n')
    b = _write(tmp_path / "b.toml", 'extends = "a.toml"\ndescription = "b"\n')
    spec = load_spec(b)
    assert spec["name"] == "b" and spec["tokenizer_args"]["patch_size"] == 8 and spec["description"] == "b"
    assert spec["tokenizer"] == _read_toml(ZOO_DIR / "patch.toml")["tokenizer"]


@pytest.mark.parametrize(
    "text, words",
    [
        ('extends = "no-such-model"\n', "not a zoo model"),
        ("extends = 3\n", "zoo model name"),
        ('extends = "self.toml"\n', "cycle"),
        ('extends = "patch"\ninit_from = 5\n', "init_from"),
        ('extends = "patch"\ninit_from = "self"\n', "names the spec itself"),
        ('extends = "patch"\ninit_from = "../x"\n', "init_from"),
    ],
)
def test_bad_extends_and_init_from_are_refused_naming_the_file(tmp_path, text, words):
    path = _write(tmp_path / "self.toml", text)
    with pytest.raises(ValueError, match=words) as err:
        load_spec(path)
    assert str(path) in str(err.value)


def test_the_pareto_grid_covers_every_method_at_three_budgets():
    specs = [load_spec(p) for p in sorted(GRID.glob("*.toml"))]
    budgets = {
        m: {tuple(s["tokenpool"]["keep"]) for s in specs if s["tokenpool"]["method"] == m} for m in METHODS
    }
    assert all(len(b) == 3 for b in budgets.values()), budgets
    assert all(s["init_from"] == "patch" and s["tokenizer"] == "patch" for s in specs)
    info = dataset_info("fashion-mnist")
    for spec in specs:
        build_model(spec, info)  # every schedule fits the 8x8 token grid (grid pooling) and the depth


def test_fine_tuning_starts_from_the_base_weights_and_refuses_a_missing_base(tmp_path, capsys):
    spec_file = _write(
        tmp_path / "ft.toml",
        'extends = "patch-tokenpool"\ninit_from = "patch"\n[tokenpool]\nmethod = "topk"\n',
    )
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exc:  # no base yet: refused before anything is written
        train.main([*SMALL, "--results-dir", str(out), "--model", str(spec_file)])
    assert "train it first" in str(exc.value.code) and "--model patch" in str(exc.value.code)
    assert not (out / "train" / "synthetic" / "ft").exists()

    assert train.main([*SMALL, "--results-dir", str(out), "--model", "patch"]) == 0
    info = dataset_info("synthetic")
    init = runner.init_source(load_spec(spec_file), info, out, 0)
    base_weights = load_file(ckpt.run_dir(out, "synthetic", "patch", 0) / ckpt.WEIGHTS)
    model = build_model(load_spec(spec_file), info)
    runner.load_init_weights(model, init, info, out)
    state = model.state_dict()
    assert set(state) == set(base_weights)
    assert all((state[k] == base_weights[k]).all() for k in base_weights)

    assert train.main([*SMALL, "--results-dir", str(out), "--model", str(spec_file)]) == 0
    config = ckpt.read_config(ckpt.run_dir(out, "synthetic", "ft", 0))
    assert config["init_from"] == init and config["final"]["checkpoint_sha256"] != init["checkpoint_sha256"]


def test_a_retrained_base_changes_the_fine_tuned_runs_fingerprint(tmp_path):
    out = tmp_path / "out"
    assert train.main([*SMALL, "--results-dir", str(out), "--model", "patch"]) == 0
    spec = {**load_spec("patch-tokenpool"), "init_from": "patch"}
    info = dataset_info("synthetic")
    before = runner.init_source(spec, info, out, 0)
    assert (
        train.main([*SMALL, "--results-dir", str(out), "--model", "patch", "--lr", "0.001", "--overwrite"])
        == 0
    )
    after = runner.init_source(spec, info, out, 0)
    assert before["checkpoint_sha256"] != after["checkpoint_sha256"]
