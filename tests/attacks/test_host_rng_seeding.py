"""Common random numbers beyond torch (attacks.seeding.seeded): a seeding block seeds NumPy's legacy global RNG
and Python's ``random`` from the same seed as torch's, puts the caller's states back, and leaves torch's
stream the one ``torch.manual_seed`` alone gives (so torch-only models' records do not move).

Oracles: NumPy's and Python's own generators seeded by hand with the documented derivation (``seed % 2**32``
and ``seed``); a planted model whose noise comes from each source, classified per example in different
batches (its logits must not depend on the batch).
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from robustbench_wave.attacks.draws import common_draw_logits
from robustbench_wave.attacks.seeding import seeded
from tests.support.host_rng_models import HostNearTie, near_tie_data

CPU = torch.device("cpu")
SEED = (1 << 40) + 12345  # wider than 32 bits: NumPy's seed is its low 32


def test_seeded_seeds_numpy_and_random_as_documented_and_restores_them() -> None:
    np.random.seed(3)  # noqa: NPY002
    random.seed(3)
    np_before, py_before = np.random.get_state()[1].copy(), random.getstate()  # noqa: NPY002
    with seeded(SEED):
        got = (np.random.rand(4), random.random())  # noqa: NPY002
    assert (np.random.get_state()[1] == np_before).all() and random.getstate() == py_before  # noqa: NPY002
    expected_np = np.random.RandomState(SEED % (1 << 32)).rand(4)
    assert np.array_equal(got[0], expected_np)
    assert got[1] == random.Random(SEED).random()


@pytest.mark.parametrize("device", [None, CPU])
def test_seeded_leaves_torchs_stream_as_manual_seed_gives_it(device: torch.device | None) -> None:
    torch.manual_seed(1)
    before = torch.get_rng_state()
    with seeded(SEED, device):
        np.random.rand(10)  # noqa: NPY002  (the host draws move nothing of torch's)
        got = torch.rand(5)
    assert torch.equal(got, torch.rand(5, generator=torch.Generator().manual_seed(SEED)))
    assert torch.equal(torch.get_rng_state(), before)  # the caller's stream goes on where it was


def test_seeding_a_cpu_device_leaves_the_accelerators_seeding_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.manual_seed would also queue a lazy CUDA seeding (with a formatted stack trace) on every call;
    a CPU block seeds the CPU generator alone."""

    def refuse(seed: int) -> None:
        raise AssertionError("a CPU seeding block seeded CUDA")

    monkeypatch.setattr(torch.cuda, "manual_seed_all", refuse)
    with seeded(SEED, CPU):
        got = torch.rand(5)
    assert torch.equal(got, torch.rand(5, generator=torch.Generator().manual_seed(SEED)))


@pytest.mark.parametrize("source", ["numpy", "random"])
def test_a_host_rng_models_draws_are_common_per_example(source: str) -> None:
    """Draw k of example i is the same whatever batch it is classified in, and again on a second call."""
    x, _ = near_tie_data(12)
    ids = torch.arange(50, 62)
    model = HostNearTie(source)
    whole = common_draw_logits(model, x, ids, 7, 5, 256, CPU)
    np.random.seed(99)  # noqa: NPY002  (whatever the caller's states, the draws are the seed's)
    random.seed(99)
    order = torch.randperm(12, generator=torch.Generator().manual_seed(0))
    shuffled = common_draw_logits(model, x[order], ids[order], 7, 5, 256, CPU)
    alone = common_draw_logits(model, x[3:4], ids[3:4], 7, 5, 256, CPU)
    assert torch.equal(shuffled, whole[:, order])
    assert torch.equal(alone, whole[:, 3:4])
    assert not torch.equal(whole[0], whole[1])  # the model does draw: draw 0 and draw 1 differ
