"""How training shares work among ranks, without starting any: each rank takes a fixed disjoint slice of every
global batch, runs are spread over ranks once each, and settings the ranks cannot honour are refused. (The
ranks themselves, as processes: test_distributed_train.py.)"""

from __future__ import annotations

import pytest
import torch

from robustbench_wave import train
from robustbench_wave.core.distributed import DistContext
from robustbench_wave.data import iterate_batches, load_split
from robustbench_wave.training import parallel
from tests.support.training import SMALL


def test_each_rank_takes_a_fixed_disjoint_slice_of_every_global_batch():
    images, labels, _ = load_split("synthetic-rgb", "train")
    images, labels = images[:64], labels[:64]

    def global_batches():
        return iterate_batches(
            images, labels, 16, generator=torch.Generator().manual_seed(3), augmentation=True
        )

    ranks = [
        list(parallel.shard_batches(global_batches(), DistContext(rank=r, world_size=2))) for r in (0, 1)
    ]
    for (x, y), (x0, y0), (x1, y1) in zip(global_batches(), *ranks, strict=True):
        assert len(y0) == len(y1) == 8
        assert torch.equal(torch.cat([x0, x1]), x) and torch.equal(torch.cat([y0, y1]), y)


def test_runs_are_spread_over_ranks_once_each():
    jobs = [(seed, name) for seed in (0, 1) for name in ("patch", "wavelet", "patch-overlap")]
    shares = [parallel.assign_runs(jobs, DistContext(rank=r, world_size=4)) for r in range(4)]
    assert sorted(job for share in shares for job in share) == sorted(jobs)
    assert [len(share) for share in shares] == [2, 2, 1, 1]


def test_uneven_global_batch_and_bf16_on_cpu_are_refused(tmp_path):
    with pytest.raises(ValueError, match="choose a multiple of 2"):
        parallel.check_global_batch(33, DistContext(world_size=2))
    with pytest.raises(SystemExit, match="--bf16 needs a CUDA device"):
        train.main([*SMALL, "--model", "patch", "--results-dir", str(tmp_path), "--device", "cpu", "--bf16"])
