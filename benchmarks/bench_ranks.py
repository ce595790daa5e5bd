"""An attack run on 1 rank vs 2 ranks (torchrun, gloo on CPU): the speed-up, and whether the records match.

Both run ``python -m robustbench_wave.attack`` on the tiny trained ``wavelet`` model with the smoke suite
(every gradient mode, no diagnostics, a fresh output folder each time so nothing resumes); the 2-rank run is
``torchrun --standalone --nproc_per_node 2 -m robustbench_wave.attack``, one thread per rank. A third variant
gives the single process both cores as threads, so the table says whether ranks beat threads. The note of
the other rows says whether their (merged) ``records.csv.gz`` equals the 1-rank, 1-thread run's, and if not,
which columns differ by how much (several threads may reorder float reductions).

Run alone: ``python -m benchmarks.bench_ranks [--quick]``.
"""

from __future__ import annotations

import argparse
import shutil
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from benchmarks.harness import (
    RESULTS,
    CliRun,
    Row,
    bench_dataset,
    interleaved,
    ratio_rows,
    run_cli,
    run_script,
    trained_root,
)

MODEL = "wavelet"
RUN_NAME = "bench"


def attack_args(dataset: str, n: int, root: Path, out: Path, threads: int) -> list[str]:
    """The attack CLI's arguments: the smoke suite, no diagnostics, a fixed run name under ``out``."""
    return [
        "robustbench_wave.attack", "--model", MODEL, "--dataset", dataset, "--suite", "smoke",
        "--n-examples", str(n), "--results-dir", str(root), "--out", str(out), "--run-name", RUN_NAME,
        "--surrogate", "none", "--no-diagnostics", "--no-progress", "--device", "cpu", "--threads", str(threads),
    ]  # fmt: skip


def records_path(out: Path, dataset: str) -> Path:
    """Where :func:`attack_args` makes the run write its (merged) records."""
    return out / "attack" / dataset / RUN_NAME / "records.csv.gz"


def records_difference(a: Path, b: Path) -> str:
    """'' when the two runs' records are equal value for value; else which columns differ, and by how much."""
    if not b.exists():
        return f"no records at {b}"
    ra, rb = pd.read_csv(a), pd.read_csv(b)
    if ra.shape != rb.shape or list(ra.columns) != list(rb.columns):
        return f"records shape {rb.shape} vs {ra.shape}"
    if ra.equals(rb):
        return ""
    parts = []
    for col in ra.columns:
        if ra[col].equals(rb[col]):
            continue
        if pd.api.types.is_float_dtype(ra[col]):
            parts.append(f"{col} (max |diff| {(ra[col] - rb[col]).abs().max():.1e})")
        else:
            parts.append(f"{col} ({int((ra[col] != rb[col]).sum())} rows)")
    return "records differ: " + ", ".join(parts)


def variant(
    name: str, ranks: int, threads: int, make_args: Callable[[Path, int], list[str]], runs: dict[str, list]
) -> Callable[[], None]:
    """A timed CLI run into a fresh folder (``runs[name]`` collects the folder and the outcome)."""

    def call() -> None:
        out = RESULTS / "ranks-tmp" / f"{name}-{len(runs.setdefault(name, []))}"
        shutil.rmtree(out, ignore_errors=True)
        runs[name].append((out, run_cli(make_args(out, threads), ranks=ranks, threads=1)))

    return call


def bench(args: argparse.Namespace) -> list[Row]:
    """The three launches, interleaved; 2 repetitions (1 with ``--quick``), n = 256 (32)."""
    reps = args.reps or (1 if args.quick else 2)
    n = 32 if args.quick else 256  # large enough that process start-up is not the whole run
    dataset = bench_dataset()
    root = trained_root(MODEL, dataset, args.trained_dir)
    runs: dict[str, list[tuple[Path, CliRun]]] = {}

    def make(out: Path, threads: int) -> list[str]:
        return attack_args(dataset, n, root, out, threads)

    fns = {
        "1 rank, 1 thread": variant("r1t1", 1, 1, make, runs),
        "1 rank, 2 threads": variant("r1t2", 1, 2, make, runs),
        "2 ranks, 1 thread each": variant("r2t1", 2, 1, make, runs),
    }
    times = interleaved(fns, reps, warmup=0)  # each run is a fresh process: nothing to warm up in here
    reference = records_path(runs["r1t1"][0][0], dataset)
    notes = {}
    for label, key in zip(fns, ("r1t1", "r1t2", "r2t1")):
        failed = [r.tail for _, r in runs[key] if not r.ok]
        if failed:
            notes[label] = f"FAILED: {failed[0][:150]}"
        elif key != "r1t1":
            diffs = [records_difference(reference, records_path(out, dataset)) for out, _ in runs[key]]
            notes[label] = next((d for d in diffs if d), "records identical to 1 rank, 1 thread")
    shutil.rmtree(RESULTS / "ranks-tmp", ignore_errors=True)
    case = f"attack CLI, {MODEL}, smoke suite, n={n}"
    return ratio_rows("ranks", case, times, "1 rank, 1 thread", unit="run", notes=notes)


if __name__ == "__main__":
    run_script("ranks", __doc__.splitlines()[0], bench)
