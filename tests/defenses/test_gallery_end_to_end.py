"""The gallery command end to end on the synthetic data: train the CNNs a little, attack two defences under
both protocols with the attack command, write the table; then every step again reuses what is finished.

The first attack command starts ``python -m robustbench_wave.attack`` as a process, as the gallery always does
(the only test that does: the other gallery tests run every command in their own process); the other three run
its ``main`` in this process (tests/support/gallery_in_process.py), each into its log file."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from robustbench_wave import gallery
from robustbench_wave.attack import get_args_parser as attack_parser
from robustbench_wave.defenses import PROTOCOLS
from tests.support.gallery_in_process import LAUNCH, attack_in_process

ATTACK_ARGS = "--attacks clean,fgsm,pgd_linf --n-diagnostics 8 --diagnostics-steps 2 --cross-check off"
SMALL = [
    "--dataset", "synthetic", "--epochs", "1", "--train-subset", "300", "--train-n-examples", "50",
    "--n-examples", "8", "--suite", "smoke", "--defence", "cnn", "--defence", "bit_depth",
    "--surrogate", "none", "--attack-args", ATTACK_ARGS, "--no-progress",
]  # fmt: skip


def _protocol_args() -> list[str]:
    """The default protocols where the attack command knows their flags (``--eot``), else the naive one
    without the flags it lacks."""
    known = {s for action in attack_parser()._actions for s in action.option_strings}
    flags = [f for f in PROTOCOLS["naive"] if f.startswith("--")]
    if all(f in known for f in flags):
        return []
    return ["--naive-args", "--grad-modes exact"]


@pytest.mark.slow
def test_the_gallery_trains_attacks_and_tabulates(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "gallery"
    launched = attack_in_process(monkeypatch, real=1)
    assert gallery.main(["all", "--results-dir", str(out), *SMALL, *_protocol_args()]) == 0
    assert len(launched) == 4 and all(c[: len(LAUNCH)] == LAUNCH for c in launched)
    table = pd.read_csv(out / "gallery.csv")
    assert table["defence"].tolist() == ["cnn", "bit_depth"]
    assert (table["n"] == 8).all() and (table["eps"] == 0.03).all()
    for col in ("clean", "exact", "naive", "adaptive"):
        assert table[col].between(0, 1).all()
        assert (table[f"{col}_low"] <= table[col]).all() and (table[col] <= table[f"{col}_high"]).all()
    assert table.loc[0, "within_undefended"]  # the undefended CNN lies in its own interval
    assert (table["naive"] <= table["exact"]).all()  # more attacks never raise the worst case
    runs = json.loads((out / "runs.json").read_text())
    assert [(r["defence"], r["protocol"]) for r in runs] == [
        ("cnn", "naive"), ("cnn", "adaptive"), ("bit_depth", "naive"), ("bit_depth", "adaptive"),
    ]  # fmt: skip
    assert all(Path(r["log"]).is_file() and (Path(r["run"]) / "diagnostics.json").is_file() for r in runs)
    text = (out / "gallery.txt").read_text()
    assert "Defences known to be broken on synthetic (n = 8)" in text

    weights = (out / "weights" / "cnn" / "train.json").read_text()
    assert (
        gallery.main(["table", "--results-dir", str(out), *SMALL]) == 0
    )  # rebuilt from the saved runs alone
    assert (out / "gallery.txt").read_text() == text
    assert gallery.main(["train", "--results-dir", str(out), *SMALL]) == 0  # reused, not retrained
    assert (out / "weights" / "cnn" / "train.json").read_text() == weights
    with pytest.raises(SystemExit, match="--overwrite"):
        gallery.main(["train", "--results-dir", str(out), *SMALL, "--epochs", "2"])


def test_the_gallery_refuses_colour_data_and_untrained_weights(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match="not gray"):
        gallery.main(["train", "--results-dir", str(tmp_path), "--dataset", "synthetic-rgb"])
    with pytest.raises(SystemExit, match="gallery train"):
        gallery.main(["attack", "--results-dir", str(tmp_path), "--dataset", "synthetic"])
    assert not (tmp_path / "attack").exists()


def test_runs_json_keeps_the_runs_of_earlier_attack_steps(tmp_path: Path) -> None:
    """`gallery attack --defence sap` after the other defences: runs.json still lists theirs, with sap's
    entries replaced where sap was attacked before; a broken runs.json is refused, not overwritten."""
    from robustbench_wave.defenses.protocols import merge_runs, read_runs

    def run(name: str, seconds: float) -> dict:
        return {"defence": name, "protocol": "naive", "run": f"attack/{name}-naive", "seconds": seconds}

    earlier = [run("cnn", 1.0), run("sap", 2.0), run("jpeg", 3.0)]
    merged = merge_runs(earlier, [run("sap", 20.0), run("thermometer", 4.0)])
    assert [(r["defence"], r["seconds"]) for r in merged] == [
        ("cnn", 1.0), ("sap", 20.0), ("jpeg", 3.0), ("thermometer", 4.0),
    ]  # fmt: skip
    assert read_runs(tmp_path) == []
    (tmp_path / "runs.json").write_text(json.dumps(earlier))
    assert read_runs(tmp_path) == earlier
    (tmp_path / "runs.json").write_text('{"not": "a list"}')
    with pytest.raises(ValueError, match="not a list of gallery runs"):
        read_runs(tmp_path)
