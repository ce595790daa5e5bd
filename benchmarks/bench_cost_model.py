"""The cost model against the clock: forward + backward step time of the ViT body over a grid of (T, H).

The source paper's cost model (attention ``2T²H + 4TH²``, feed-forward ``2mTH²`` per block;
:func:`robustbench_wave.models.flops.block_macs`) predicts that where T < H, the ``H²`` terms dominate, so
halving the token width H saves more than halving the token count T. Here the body the zoo models share
(``models/bodies.toml``'s ``tiny``: timm ``Block``s, its depth, heads and MLP ratio) runs at width H on T
tokens (the tokenizer and head left out: the claim is about the body), one training step = forward +
backward (weight and activation gradients), every grid point interleaved with the others in one process
(:func:`benchmarks.harness.interleaved`), median of the repeats.

Writes ``OUT/cost_model_grid.csv`` (T, H, predicted_macs, seconds_per_step, batch, steps, reps), the input
of ``python -m robustbench_wave.report claims --cost-model``, and the harness's ``cost_model.csv/.md`` (each
point's time and predicted MACs relative to the largest point). About a minute on one thread.

Run alone: ``python -m benchmarks.bench_cost_model [--quick]``.
"""

from __future__ import annotations

import argparse
import csv
from collections.abc import Callable
from pathlib import Path

import torch
from timm.models.vision_transformer import Block
from torch import nn

from benchmarks.harness import Row, interleaved, median, run_script
from robustbench_wave.models.flops import block_macs
from robustbench_wave.models.zoo import load_bodies

TOKENS = (8, 16, 32, 64, 128)  # T/2 of every T but the first is on the grid, so halving T is measured
WIDTHS = (32, 64, 128)  # likewise H/2; every width divides by the tiny body's 4 heads
QUICK_TOKENS, QUICK_WIDTHS = (8, 16, 32), (32, 64)
BATCH = 16
TARGET_MACS = 2e8  # steps per timed call: about this many forward MACs, so small points are not timer noise
GRID_FILE = "cost_model_grid.csv"
GRID_COLUMNS = ("T", "H", "predicted_macs", "seconds_per_step", "batch", "steps", "reps")


def tiny_body() -> dict:
    """Depth, heads and MLP ratio of the zoo's ``tiny`` body (its width is what the grid varies)."""
    return load_bodies()["tiny"]


def predicted_macs(tokens: int, width: int, body: dict, batch: int = BATCH) -> int:
    """Forward MACs of the body on ``batch`` sequences: ``depth`` blocks of the analytic cost model."""
    hidden = int(width * float(body["mlp_ratio"]))
    return int(body["depth"]) * batch * block_macs(tokens, width, width, hidden)["macs"]


def step_fn(tokens: int, width: int, body: dict, batch: int = BATCH, steps: int = 1) -> Callable[[], None]:
    """``steps`` training steps (forward, backward of a scalar loss) of the body at width H on T tokens."""
    torch.manual_seed(0)
    blocks = nn.Sequential(
        *(Block(width, int(body["num_heads"]), mlp_ratio=float(body["mlp_ratio"]), qkv_bias=True)
          for _ in range(int(body["depth"])))
    ).train()  # fmt: skip
    x = torch.randn(batch, tokens, width)

    def run() -> None:
        for _ in range(steps):
            blocks.zero_grad(set_to_none=True)
            blocks(x).square().mean().backward()

    return run


def measure(grid: list[tuple[int, int]], reps: int, body: dict) -> list[dict]:
    """One row per (T, H): predicted MACs and the median seconds per step over ``reps`` interleaved repeats."""
    steps = {p: max(1, round(TARGET_MACS / predicted_macs(*p, body))) for p in grid}
    fns = {p: step_fn(*p, body, steps=steps[p]) for p in grid}
    times = interleaved({f"T={t},H={h}": fns[(t, h)] for t, h in grid}, reps)
    return [
        {
            "T": t,
            "H": h,
            "predicted_macs": predicted_macs(t, h, body),
            "seconds_per_step": median(times[f"T={t},H={h}"]) / steps[(t, h)],
            "batch": BATCH,
            "steps": steps[(t, h)],
            "reps": reps,
        }
        for t, h in grid
    ]


def write_grid(rows: list[dict], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(GRID_COLUMNS))
        writer.writeheader()
        writer.writerows(rows)
    return path


def bench(args: argparse.Namespace) -> list[Row]:
    """Measure the grid, write ``cost_model_grid.csv`` and return rows relative to the largest point."""
    tokens, widths = (QUICK_TOKENS, QUICK_WIDTHS) if args.quick else (TOKENS, WIDTHS)
    reps = args.reps or (2 if args.quick else 7)
    body = tiny_body()
    rows = measure([(t, h) for t in tokens for h in widths], reps, body)
    write_grid(rows, Path(args.out) / GRID_FILE)
    big = max(rows, key=lambda r: r["predicted_macs"])
    base = f"T={big['T']},H={big['H']}"
    return [
        Row(
            "cost_model",
            f"body depth {body['depth']}, B={BATCH}",
            f"T={r['T']},H={r['H']}",
            r["seconds_per_step"],
            "step",
            base,
            r["seconds_per_step"] / big["seconds_per_step"],
            reps,
            f"predicted MACs ratio {r['predicted_macs'] / big['predicted_macs']:.4f}",
        )
        for r in rows
    ]


if __name__ == "__main__":
    run_script("cost_model", __doc__.splitlines()[0], bench)
