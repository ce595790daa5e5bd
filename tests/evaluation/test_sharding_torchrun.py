"""Sharded attack runs on two gloo ranks under torchrun, as processes: the merged records are byte-identical to
a one-process run's, the run is finalized once, and every rank stops when the run folder is locked.

The ranks run ``-m tests.support.shard_models`` (the attack CLI with the tiny models); the one-process records
come from this folder's conftest.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from robustbench_wave.core.runfolder import RunLock
from robustbench_wave.evaluation.records import RECORDS_FILE
from tests.support import REPO, shard_models
from tests.support.shard_models import attack_args, run_dir

pytestmark = pytest.mark.slow  # every test here starts processes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _torchrun(weights: Path, args: list[str], *launcher: str) -> subprocess.CompletedProcess[str]:
    """tests.support.shard_models as the attack CLI on two gloo ranks (``launcher``: more torchrun options)."""
    torchrun = Path(sys.executable).with_name("torchrun")
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(REPO),
        shard_models.WEIGHTS_ENV: str(weights),
    }
    cmd = [
        str(torchrun), "--nnodes", "1", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
        "--master_port", str(_free_port()), *launcher, "-m", shard_models.__name__, *args,
    ]  # fmt: skip
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def test_two_gloo_ranks_give_the_one_process_records(tiny: Path, tmp_path: Path, reference: bytes) -> None:
    proc = _torchrun(tiny, attack_args(tmp_path, tiny, "--n-diagnostics", "4", "--diagnostics-steps", "2"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = run_dir(tmp_path)
    assert (run / RECORDS_FILE).read_bytes() == reference
    meta = json.loads((run / "meta.json").read_text())
    execution = meta["provenance"]["execution"]
    assert execution["world_size"] == 2 and execution["backend"] == "gloo" and execution["device"] == "cpu"
    assert [s["execution"]["rank"] for s in meta["sharding"]["shards"]] == [0, 1]
    assert sorted(p.name for p in (run / "shards").iterdir()) == ["0-of-2", "1-of-2"]  # each rank's chunks
    assert (run / "report.md").exists() and (run / "diagnostics.csv").exists()
    assert proc.stdout.count("verdict:") <= 1 and proc.stdout.count("report:") == 1  # finalized once


def test_every_rank_stops_when_the_run_folder_is_locked(tiny: Path, tmp_path: Path) -> None:
    """Rank 0 takes the lock; the other rank learns of the refusal from it instead of waiting in a collective
    (torchrun, checking its ranks only every 5 s here, would otherwise end it, without its message)."""
    run = run_dir(tmp_path)
    with RunLock(run):
        proc = _torchrun(tiny, attack_args(tmp_path, tiny, "--no-diagnostics"), "--monitor-interval", "5")
        assert sorted(p.name for p in run.iterdir()) == [".lock"]
    assert proc.returncode != 0
    assert proc.stderr.count(f"{run} is in use by another run") == 2, proc.stderr[-3000:]
