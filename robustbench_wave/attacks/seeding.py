"""The one seeding rule and the one random-start distribution of every attack.

Builtin attacks draw a point's randomness from a CPU generator seeded by ``(seed, stream, example_id,
restart)`` only (:func:`example_generators`), never by its batch or position, so their results do not depend
on ``--batch-size``; ``stream`` is the suite entry's name. Library attacks draw from torch's global RNG and are
called inside :func:`seeded` on fixed blocks of example ids. A randomised model's predictions draw from
:func:`draw_seed` (common random numbers: the same draws for a point whatever input or batch is classified).
:func:`seeded` seeds NumPy's legacy global RNG and Python's ``random`` beside torch's, since a user's defence
may draw from any of the three (``np.random.rand``, ``random.randint``). :func:`random_delta` is the PGD
random start of every PGD variant: uniform in the L∞ cube, uniform in the L2 ball.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import random
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch


def derive_seed(*parts: Any) -> int:
    """A 63-bit seed from any parts (stable across runs and machines, unlike ``hash()``)."""
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


@contextlib.contextmanager
def host_rngs(seed: int) -> Iterator[None]:
    """Seed NumPy's legacy global RNG (32 bits: ``seed % 2**32``) and Python's ``random`` (``seed``),
    restoring the caller's states afterwards: the sources torch's seeding does not reach."""
    np_state, py_state = np.random.get_state(), random.getstate()  # noqa: NPY002
    np.random.seed(seed % (1 << 32))  # noqa: NPY002  (the legacy global RNG is the one user code draws from)
    random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(np_state)  # noqa: NPY002
        random.setstate(py_state)


@contextlib.contextmanager
def seeded(seed: int, device: torch.device | None = None) -> Iterator[None]:
    """Seed torch's global RNG for a library call or a randomised model's draws, and NumPy's and Python's
    global RNGs from the same seed (:func:`host_rngs`), restoring the caller's states afterwards.

    Torch's stream is the one ``torch.manual_seed(seed % 2**63)`` gives, whatever the other two draw. On
    a CPU ``device`` only the CPU generator is seeded (the same stream): ``torch.manual_seed`` would also
    queue a lazy CUDA seeding with a formatted stack trace, a cost per call that per-query and per-example
    seeding pays thousands of times."""
    seed = seed % (1 << 63)
    devices = [device] if device is not None and device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices), host_rngs(seed):
        if device is not None and device.type == "cpu":
            torch.default_generator.manual_seed(seed)
        else:
            torch.manual_seed(seed)
        yield


def draw_seed(seed: int, example_id: int, draw: int) -> int:
    """The seed of a randomised model's ``draw``-th prediction draw of one example: (seed, example id, draw)
    only, so its clean point, every attack's output and a re-audit are classified under the same draws."""
    return derive_seed(seed, "vote", example_id, draw)


def example_generators(seed: int, stream: str, ids: torch.Tensor, restart: int) -> list[torch.Generator]:
    """One CPU generator per example, seeded by (seed, stream, example_id, restart) only."""
    return [torch.Generator().manual_seed(derive_seed(seed, stream, int(i), restart)) for i in ids.tolist()]


def per_example(
    draw: Callable[[torch.Generator], torch.Tensor], gens: list[torch.Generator], device: torch.device
) -> torch.Tensor:
    """Stack one draw per example generator, then move the batch to ``device``."""
    return torch.stack([draw(g) for g in gens]).to(device)


def random_delta(
    norm: str, shape: tuple[int, ...], eps: float, gens: list[torch.Generator], device: torch.device
) -> torch.Tensor:
    """A random start inside the eps-ball: uniform in the L∞ cube, uniform in the L2 ball."""
    if norm == "Linf":
        return eps * (2 * per_example(lambda g: torch.rand(shape, generator=g), gens, device) - 1)
    dim = math.prod(shape)

    def l2(g: torch.Generator) -> torch.Tensor:
        d = torch.randn(shape, generator=g)
        radius = torch.rand((), generator=g) ** (1.0 / dim)
        return d / d.norm().clamp_min(1e-12) * radius

    return eps * per_example(l2, gens, device)
