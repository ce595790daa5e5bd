"""Killing a training run mid-way, as a test's stand-in for kill -9 (resume must then lose nothing), and a
small training run of the command line."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from robustbench_wave import train
from robustbench_wave.training import engine, runner


def kill_in_epoch(monkeypatch: pytest.MonkeyPatch, epoch: int = 2) -> Callable[[], None]:
    """Make the run's ``epoch``-th epoch raise KeyboardInterrupt (as if killed mid-epoch); returns the
    function that restores the real loop (for the resumed run)."""
    real_epoch = engine.train_one_epoch
    calls = {"n": 0}

    def killed(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == epoch:
            raise KeyboardInterrupt
        return real_epoch(*args, **kwargs)

    monkeypatch.setattr(runner, "train_one_epoch", killed)
    return lambda: monkeypatch.setattr(runner, "train_one_epoch", real_epoch)


#: ``python -m robustbench_wave.train`` on a slice of the synthetic data set, two epochs (seconds on a CPU);
#: add ``--model`` (and ``--out``).
SMALL = ["--dataset", "synthetic", "--train-subset", "80", "--n-examples", "32", "--batch-size", "32",
         "--epochs", "2", "--no-progress"]  # fmt: skip


def train_small(out: Path, *extra: str) -> int:
    """The train command on :data:`SMALL` into ``out``; its exit code."""
    return train.main([*SMALL, "--results-dir", str(out), *extra])
