"""``--tensorboard`` under torchrun, as processes: with ``--parallel data`` rank 0 alone writes (one event file,
each epoch once); with ``--parallel runs`` each rank writes the runs it trains."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from robustbench_wave.core import tracking
from robustbench_wave.training import checkpoint as ckpt
from tests.support import REPO
from tests.support.tensorboard_runs import ARGS, check_training_copy

pytestmark = pytest.mark.slow  # every test here starts processes


@pytest.mark.parametrize("parallel", ["data", "runs"])
def test_under_torchrun_each_run_is_logged_once_by_the_rank_that_trains_it(tmp_path, parallel):
    """``--parallel data``: rank 0 alone writes (one event file, each epoch once); ``--parallel runs``:
    each rank writes the runs it trains (rank 1 trains wavelet)."""
    pytest.importorskip("tensorboard")
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    args = [*ARGS, "--model", "wavelet", "--train-subset", "64", "--epochs", "1", "--parallel", parallel]
    args += ["--results-dir", str(tmp_path / "out"), "--tensorboard", str(tmp_path / "tb")]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    command = [*launcher, "-m", "robustbench_wave.train", *args]
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for name in ("patch", "wavelet"):
        run = ckpt.run_dir(tmp_path / "out", "synthetic", name, 0)
        check_training_copy(run, tracking.train_log_dir(tmp_path / "tb", "synthetic", name, 0))
