"""More torchrun ranks than seeding blocks (``make demo`` on a machine with many cores): the ranks beyond the
blocks idle, rank 0 says so, and the records are the one-process run's, byte for byte.

Three gloo ranks on 16 examples of the tiny models' suite (``rng_block = 8``: two blocks), four of its attacks:
random draws per seeding block (uniform noise, Square), a gradient (FGSM) and the surrogate's transfer. The
whole suite on two ranks, diagnostics and report included, is test_sharding_torchrun.py's (43 examples).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from robustbench_wave import attack
from robustbench_wave.evaluation.records import RECORDS_FILE
from tests.support import REPO, shard_models
from tests.support.shard_models import RNG_BLOCK, attack_args, run_dir

pytestmark = pytest.mark.slow  # starts processes

N_EXAMPLES, RANKS = 2 * RNG_BLOCK, 3
ATTACKS = "noise_uniform,fgsm,square,transfer_pgd_linf"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_ranks_beyond_the_seeding_blocks_idle_and_records_match(tiny: Path, tmp_path: Path) -> None:
    flags = ["--n-examples", str(N_EXAMPLES), "--attacks", ATTACKS, "--no-diagnostics"]
    args = attack_args(tmp_path / "ranks", tiny, *flags)
    torchrun = Path(sys.executable).with_name("torchrun")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), shard_models.WEIGHTS_ENV: str(tiny)}
    cmd = [
        str(torchrun), "--nnodes", "1", "--nproc_per_node", str(RANKS), "--master_addr", "127.0.0.1",
        "--master_port", str(_free_port()), "-m", shard_models.__name__, *args,
    ]  # fmt: skip
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "3 ranks, but 16 examples make 2 seeding blocks of 8: ranks 2-2 idle" in proc.stderr

    one = tmp_path / "one"
    assert attack.main(attack_args(one, tiny, *flags)) == 0
    ranked = run_dir(tmp_path / "ranks")
    assert (ranked / RECORDS_FILE).read_bytes() == (run_dir(one) / RECORDS_FILE).read_bytes()
    meta = json.loads((ranked / "meta.json").read_text())
    assert [s["execution"]["rank"] for s in meta["sharding"]["shards"]] == [0, 1]  # rank 2 evaluated nothing
    assert sorted(p.name for p in (ranked / "shards").iterdir()) == ["0-of-2", "1-of-2"]
