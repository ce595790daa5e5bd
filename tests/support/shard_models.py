"""The tiny models of the sharding and saved-adversarial tests, and the attack command that runs them.

A fixed Haar front-end + a per-patch head, trained on the synthetic data set; the suite is the smoke suite
with ``rng_block = 8`` and Linf budgets 0.05 and 0.25, run on 43 examples, so two shards are uneven (24 + 19)
and batches of 5 straddle the seeding blocks. Run as a module (``torchrun ... -m tests.support.shard_models
ARGS``) it is the attack CLI with the tiny models in place of trained checkpoints.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from robustbench_wave import attack
from robustbench_wave.data import load_split, to_float
from robustbench_wave.training import checkpoint
from tests.support import REPO
from tests.support.attack_models import ToyFrontEnd

WEIGHTS_ENV = "RBW_TEST_SHARD_WEIGHTS"  # folder with tiny.pt and tiny2.pt (set for the torchrun ranks)
N, RNG_BLOCK = 43, 8
ATTACKS = "noise_uniform,fgsm,pgd_linf,apgd_ce,square,transfer_pgd_linf"
RUN_NAME = "run"


class PatchHead(nn.Module):
    """Per-patch MLP, averaged: like a ViT, every matrix product has many rows (patches x batch), so each
    example's logits do not depend on the other examples of its batch (a matrix-vector product for a batch
    of one rounds differently from a matrix product, which would move the last bits of loss_final)."""

    def __init__(self) -> None:
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(64, 32), nn.Tanh(), nn.Linear(32, 10))

    def forward(self, w: torch.Tensor) -> torch.Tensor:  # (B, 4, 16, 16) Haar coefficients
        patches = w.unfold(2, 4, 4).unfold(3, 4, 4)  # (B, 4, 4, 4, 4, 4)
        tokens = patches.permute(0, 2, 3, 1, 4, 5).reshape(len(w), 16, 64)
        return self.mlp(tokens).mean(1)


def _build() -> nn.Module:
    return nn.Sequential(ToyFrontEnd(), PatchHead())


def load_trained(
    name: str, dataset: str, results_dir: object = "results", seed: int = 0
) -> tuple[nn.Module, dict[str, str]]:
    """Stand-in for checkpoint.load_trained: the tiny models :func:`write_weights` trained."""
    if name not in ("tiny", "tiny2"):
        raise ValueError(f"no trained model {name}")
    model = _build()
    model.load_state_dict(torch.load(Path(os.environ[WEIGHTS_ENV]) / f"{name}.pt", weights_only=True))
    return model.eval(), {
        "checkpoint_sha256": f"sha-{name}",
        "clean_accuracy": 0.5,
        "run_dir": f"runs/{name}",
    }


def _train(seed: int, steps: int) -> nn.Module:
    images, labels, _ = load_split("synthetic", "train")
    x, y = to_float(images[:2000]), torch.as_tensor(labels[:2000]).long()
    torch.manual_seed(seed)
    model = _build()
    opt = torch.optim.Adam(model[1].parameters(), lr=0.01)
    for _ in range(steps):
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return model.eval()


def write_weights(folder: Path) -> Path:
    """Train ``tiny`` and ``tiny2`` into ``folder`` (tiny.pt, tiny2.pt) beside the tests' suite.toml."""
    torch.save(_train(0, 40).state_dict(), folder / "tiny.pt")
    torch.save(_train(1, 10).state_dict(), folder / "tiny2.pt")
    suite = (REPO / "attacks" / "smoke.toml").read_text(encoding="utf-8")
    suite = suite.replace("rng_block = 16", f"rng_block = {RNG_BLOCK}")
    suite = suite.replace("[eps.default]\nLinf = [0.03, 0.1]", "[eps.default]\nLinf = [0.05, 0.25]")
    assert "Linf = [0.05, 0.25]" in suite  # large enough that the library attacks break points
    (folder / "suite.toml").write_text(suite, "utf-8")
    return folder


def use_tiny_models(monkeypatch: pytest.MonkeyPatch, weights: Path) -> None:
    """Let the attack command load the tiny models of ``weights`` as if they were trained checkpoints."""
    monkeypatch.setenv(WEIGHTS_ENV, str(weights))
    monkeypatch.setattr(checkpoint, "load_trained", load_trained)


def attack_args(out: Path, weights: Path, *extra: str) -> list[str]:
    """The attack command's arguments for the tiny models (``tiny``, surrogate ``tiny2``) on N examples; an
    ``--attacks`` in ``extra`` replaces ATTACKS (a repeated list flag would add to it)."""
    attacks = [] if "--attacks" in extra else ["--attacks", ATTACKS]
    return [
        "--model", "tiny", "--surrogate", "tiny2", "--dataset", "synthetic", "--n-examples", str(N),
        "--suite", str(weights / "suite.toml"), *attacks, "--out", str(out),
        "--run-name", RUN_NAME, "--batch-size", "5", "--device", "cpu", "--no-progress", *extra,
    ]  # fmt: skip


def run_dir(out: Path) -> Path:
    """The run folder :func:`attack_args` writes under ``out``."""
    return out / "attack" / "synthetic" / RUN_NAME


if __name__ == "__main__":  # a torchrun rank: the attack CLI with the tiny models
    checkpoint.load_trained = load_trained
    raise SystemExit(attack.main(sys.argv[1:]))
