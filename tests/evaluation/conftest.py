"""The tiny trained models of tests/support/shard_models.py and their one-process records, shared by the
sharding and saved-adversarial tests (trained once per session; nothing writes into them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from robustbench_wave import attack
from robustbench_wave.evaluation.records import RECORDS_FILE, read_run
from tests.support.shard_models import attack_args, run_dir, use_tiny_models, write_weights


@pytest.fixture(scope="session")
def weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder with tiny.pt, tiny2.pt and suite.toml."""
    return write_weights(tmp_path_factory.mktemp("weights"))


@pytest.fixture
def tiny(weights: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The tiny models in place of trained checkpoints for this test; their folder."""
    use_tiny_models(monkeypatch, weights)
    return weights


@pytest.fixture(scope="session")
def reference(weights: Path, tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """records.csv.gz of the one-process run."""
    out = tmp_path_factory.mktemp("single")
    with pytest.MonkeyPatch.context() as mp:
        use_tiny_models(mp, weights)
        assert attack.main(attack_args(out, weights, "--no-diagnostics")) == 0
    records, _ = read_run(run_dir(out))
    # the run must exercise both kinds of seeding and points the attacks break and leave standing
    assert records["attacked"].any() and (records["attacked"] & ~records["correct"]).any()
    assert (records["attacked"] & records["correct"] & (records["attack"] == "square")).any()
    assert set(records["grad_mode"]) == {"exact", "blocked", "bpda"}
    return (run_dir(out) / RECORDS_FILE).read_bytes()
