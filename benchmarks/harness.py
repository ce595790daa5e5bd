"""The benchmark harness: interleaved repetitions, medians, ratios, machine facts, the CSV and Markdown table.

Every benchmark in this folder compares variants *side by side in one process*: each repetition runs every
variant once (in a rotated order, after one warm-up call each), and a variant's number is the median of its
repetitions divided by the baseline's median. On a small, shared machine absolute seconds move with the load;
ratios measured this way move much less, so the tables report ratios and keep the seconds for reference.
The harness also finds (or trains, once) the tiny models and the images the benchmarks use, so every script
runs on a fresh clone.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import logging
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger("benchmarks")

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
TRAINED = REPO / "results"  # `make demo` trains here; reused when present
TRAIN_CACHE = RESULTS / "train-cache"  # tiny models trained by the benchmarks themselves


@dataclass(frozen=True)
class Row:
    """One line of the table: a variant's median time and its ratio to the case's baseline."""

    bench: str  # which script (pgd, suite, frontend, ranks, train)
    case: str  # what is held fixed (model, data, grad mode, ...)
    variant: str  # what is timed
    median_s: float  # median seconds per ``unit``
    unit: str  # step, image, batch, run, ...
    baseline: str  # the variant the ratio divides by
    ratio: float  # median_s / baseline's median_s: below 1 is faster than the baseline
    reps: int
    note: str = ""


def median(values: Sequence[float]) -> float:
    """Median of a non-empty sequence (the statistic every row reports)."""
    if not values:
        raise ValueError("median of no values: run at least one repetition")
    return float(statistics.median(values))


def interleaved(
    fns: Mapping[str, Callable[[], Any]],
    reps: int,
    warmup: int = 1,
    cpu: dict[str, list[float]] | None = None,
) -> dict[str, list[float]]:
    """Seconds of ``reps`` calls of every function, interleaved, after ``warmup`` untimed calls each.

    Repetition r starts at variant r (mod the count), so no variant always runs first after a pause or
    always right after the heaviest one. ``cpu`` (when given) receives each call's CPU seconds of this
    process, which other jobs on a shared machine move much less than the wall time.
    """
    if reps < 1:
        raise ValueError(f"reps must be >= 1, got {reps}")
    names = list(fns)
    for name in names:
        for _ in range(warmup):
            fns[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    cpu_times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(reps):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            t0, c0 = time.perf_counter(), time.process_time()
            fns[name]()
            times[name].append(time.perf_counter() - t0)
            cpu_times[name].append(time.process_time() - c0)
    if cpu is not None:
        cpu.update(cpu_times)
    return times


def ratio_rows(
    bench: str,
    case: str,
    times: Mapping[str, Sequence[float]],
    baseline: str,
    *,
    per: float = 1.0,
    unit: str = "call",
    notes: Mapping[str, str] | None = None,
) -> list[Row]:
    """Rows for one case: each variant's median (divided by ``per`` units) and its ratio to ``baseline``."""
    if baseline not in times:
        raise ValueError(f"baseline {baseline!r} is not among the variants {sorted(times)}")
    base = median(times[baseline])
    notes = notes or {}
    return [
        Row(bench, case, name, median(t) / per, unit, baseline, median(t) / base, len(t), notes.get(name, ""))
        for name, t in times.items()
    ]


def git_revision() -> str:
    """The checkout's commit (``+dirty`` with local changes), or 'unknown' outside git."""
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True, text=True)
        return rev + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine_facts() -> dict[str, Any]:
    """What a reader needs to compare two tables: cores, threads, versions, revision, load."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "date_utc": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "cores": cores,
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
        "git": git_revision(),
        "load_avg_1m": round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None,
    }


def write_csv(rows: Iterable[Row], path: Path) -> None:
    """All rows, one per line, with the columns of :class:`Row`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=[f.name for f in fields(Row)])
        writer.writeheader()
        for row in rows:
            writer.writerow(asdict(row))


def read_csv(path: Path) -> list[Row]:
    """Rows written by :func:`write_csv` (numbers parsed back)."""
    numbers = {"median_s": float, "ratio": float, "reps": int}
    with open(path, newline="") as fh:
        return [Row(**{k: numbers.get(k, str)(v) for k, v in r.items()}) for r in csv.DictReader(fh)]


def _seconds(value: float) -> str:
    if value >= 1:
        return f"{value:.2f} s"
    if value >= 1e-3:
        return f"{value * 1e3:.2f} ms"
    return f"{value * 1e6:.1f} µs"


def markdown_table(rows: Sequence[Row], facts: Mapping[str, Any] | None = None) -> str:
    """A Markdown table of ``rows`` (ratio first: it is the number that counts), machine facts above it."""
    lines = []
    if facts:
        lines += ["Machine: " + ", ".join(f"{k} {v}" for k, v in facts.items()), ""]
    lines += [
        "| bench | case | variant | ratio | to | median | per | reps | note |",
        "|---|---|---|---:|---|---:|---|---:|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.bench} | {r.case} | {r.variant} | {r.ratio:.3f} | {r.baseline} | {_seconds(r.median_s)} "
            f"| {r.unit} | {r.reps} | {r.note} |"
        )
    return "\n".join(lines) + "\n"


def write_outputs(rows: Sequence[Row], facts: Mapping[str, Any], out: Path, stem: str) -> tuple[Path, Path]:
    """``OUT/STEM.csv`` and ``OUT/STEM.md`` (the Markdown one with the machine facts)."""
    out.mkdir(parents=True, exist_ok=True)
    csv_path, md_path = out / f"{stem}.csv", out / f"{stem}.md"
    write_csv(rows, csv_path)
    md_path.write_text(markdown_table(rows, facts))
    return csv_path, md_path


# ------------------------------------------------------------------------------------- command lines
def parser(description: str) -> argparse.ArgumentParser:
    """The flags every benchmark script takes."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="fewer points, steps and repetitions (a smoke run)")
    p.add_argument(
        "--reps", type=int, default=None, help="timed repetitions per variant (default 5, quick 2)"
    )
    p.add_argument("--out", type=Path, default=RESULTS, help="folder for STEM.csv and STEM.md")
    p.add_argument(
        "--threads", type=int, default=1, help="torch threads in this process (1: the machine is shared)"
    )
    p.add_argument(
        "--trained-dir",
        type=Path,
        default=None,
        help="results folder with train/<dataset>/<model>/seed-0 (default: results/, else a tiny model trained once)",
    )
    p.add_argument(
        "--untrained", action="store_true", help="time untrained zoo models (speed ratios need no weights)"
    )
    return p


def reps_for(args: argparse.Namespace) -> int:
    """``--reps`` if given, else 5 (2 with ``--quick``)."""
    return args.reps if args.reps is not None else (2 if args.quick else 5)


def run_script(
    stem: str,
    description: str,
    bench: Callable[[argparse.Namespace], list[Row]],
    add_flags: Callable[[argparse.ArgumentParser], None] | None = None,
) -> list[Row]:
    """Parse the flags (``add_flags`` adds a script's own), run ``bench``, write its CSV and Markdown and
    print the table."""
    p = parser(description)
    if add_flags is not None:
        add_flags(p)
    args = p.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("robustbench_wave").setLevel(
        logging.WARNING
    )  # per-attack timings would flood the table
    torch.set_num_threads(args.threads)
    rows = bench(args)
    write_outputs(rows, machine_facts(), args.out, stem)
    sys.stdout.write(markdown_table(rows))
    return rows


# ------------------------------------------------------------------------------ models and images
def bench_dataset(preferred: str = "fashion-mnist") -> str:
    """``preferred`` when its files are here (no download), else 'synthetic', so a fresh clone offline runs."""
    from robustbench_wave.data import load_split

    try:
        load_split(preferred, "test", download=False)
    except (OSError, ValueError, RuntimeError) as err:
        log.warning(
            "%s is not available offline (%s); the benchmarks use the synthetic data set", preferred, err
        )
        return "synthetic"
    return preferred


def bench_images(n: int, dataset: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``n`` test images of ``dataset`` as floats in [0, 1], with their labels."""
    from robustbench_wave.data import load_split

    images, labels, _ = load_split(dataset, "test", download=False)
    return images[:n].float() / 255.0, labels[:n]


def trained_root(model: str, dataset: str, preferred: Path | None = None) -> Path:
    """A results folder holding ``train/<dataset>/<model>/seed-0``: `make demo`'s, else a tiny one trained now.

    The tiny model (2 epochs on 4,096 images: well above chance, far below the demo's models) is enough for
    the speed ratios and for attacks that break some points and not others; its accuracy is not the point.
    """
    from robustbench_wave.training.checkpoint import run_dir

    for root in (preferred, TRAINED, TRAIN_CACHE):
        if root is None:
            continue
        if (run_dir(root, dataset, model, 0) / "model.safetensors").exists():
            return root
    log.info("training a tiny %s on %s for the benchmarks (once; cached in %s)", model, dataset, TRAIN_CACHE)
    flags = [
        "--epochs",
        "2",
        "--train-subset",
        "4096",
        "--n-examples",
        "256",
        "--device",
        "cpu",
        "--no-progress",
    ]
    cmd = [sys.executable, "-m", "robustbench_wave.train", "--model", model, "--dataset", dataset, *flags]
    subprocess.run(
        [*cmd, "--results-dir", str(TRAIN_CACHE)],
        cwd=REPO,
        check=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    return TRAIN_CACHE


def bench_model(model: str, dataset: str, args: argparse.Namespace) -> tuple[torch.nn.Module, str]:
    """A zoo model in eval mode and a word saying which: its trained checkpoint or an untrained build."""
    from robustbench_wave.data import dataset_info
    from robustbench_wave.models.vit import build_model
    from robustbench_wave.training.checkpoint import load_trained

    if not args.untrained:
        net, _ = load_trained(model, dataset, trained_root(model, dataset, args.trained_dir), 0)
        return net.eval(), "trained"
    torch.manual_seed(0)
    return build_model(model, dataset_info(dataset)).eval(), "untrained"


def predicted_labels(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The model's own predictions: every point is clean-correct, so every variant attacks every point."""
    with torch.no_grad():
        return model(x).argmax(1)


# ------------------------------------------------------------------------------------- subprocesses
@dataclass(frozen=True)
class CliRun:
    """One command-line run: its wall time, whether it succeeded, and the end of its output if not."""

    seconds: float
    ok: bool
    tail: str


def run_cli(args: Sequence[str], *, ranks: int = 1, threads: int = 1) -> CliRun:
    """``python -m ARGS`` in one process, or under ``torchrun --standalone`` with ``ranks`` local ranks."""
    if ranks == 1:
        cmd = [sys.executable, "-m", *args]
    else:
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={ranks}",
            "-m",
            *args,
        ]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONUNBUFFERED": "1"}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t0
    lines = (proc.stderr or proc.stdout).strip().splitlines()
    tail = "" if proc.returncode == 0 else (lines[-1] if lines else f"exit status {proc.returncode}")
    return CliRun(seconds, proc.returncode == 0, tail)
