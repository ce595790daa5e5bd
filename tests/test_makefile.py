"""The Makefile's rank count follows the machine's cores (its CPU affinity), never ``OMP_NUM_THREADS``: with
the docs' one-thread-per-rank setting exported, GNU ``nproc`` says 1 and ``make quick`` ran one rank."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from robustbench_wave.core.distributed import local_cores
from tests.support import REPO

pytestmark = [
    pytest.mark.slow,  # starts make and a Python process
    pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed"),
]


def _nproc(env: dict[str, str]) -> int:
    """``$(NPROC)`` as the Makefile computes it under ``env``."""
    script = "include Makefile\nshow-nproc:\n\t@echo $(NPROC)\n"
    out = subprocess.run(
        ["make", "-s", "-f", "-", "show-nproc"], input=script, cwd=REPO, env=env, text=True,
        capture_output=True, check=True,
    )  # fmt: skip
    return int(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("threads", ["1", "2", None])
def test_ranks_count_the_cores_whatever_omp_num_threads_says(threads: str | None) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("NPROC", "OMP_NUM_THREADS", "MAKEFLAGS")}
    if threads is not None:
        env["OMP_NUM_THREADS"] = threads
    assert _nproc(env) == len(os.sched_getaffinity(0)) == local_cores()
