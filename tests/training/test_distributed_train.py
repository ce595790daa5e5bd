"""Training on several ranks (gloo on CPU), in processes of their own: a DDP step matches the one-process
step, the sharded evaluation is the one-process evaluation, ``torchrun -m robustbench_wave.train`` writes one
run that matches one process and resumes after a kill -9, a locked run folder stops every rank, and
``--parallel runs`` trains every run exactly once. (The rules that need no process: test_parallel.py.)"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
import torch.multiprocessing as mp
from safetensors.torch import load_file

from robustbench_wave import train
from robustbench_wave.core.distributed import DistContext, distributed_run
from robustbench_wave.core.runfolder import LOCK_FILE, RunLock
from robustbench_wave.data import load_split
from robustbench_wave.models.vit import build_model
from robustbench_wave.training import checkpoint as ckpt
from robustbench_wave.training import engine, parallel
from robustbench_wave.training.runner import TrainConfig, load_training_data, train_model
from tests.support import REPO as ROOT

ATOL = 2e-5  # two ranks differ from one only by floating-point reduction order: a few steps (AdamW divides
# by sqrt(v): on a weight whose gradient is near zero that order moves the step by ~1e-5, seen on a 2-core machine)
RUN_ATOL = 1e-4  # ... and after a whole run (10 AdamW steps that move weights by ~1e-2)
pytestmark = pytest.mark.slow  # every test here starts processes

ARGS = ["--dataset", "synthetic", "--train-subset", "200", "--n-examples", "64", "--batch-size", "32",
        "--epochs", "2", "--model", "patch", "--no-progress"]  # fmt: skip


@contextmanager
def _one_thread():
    """One intra-op thread, as each gloo rank has, so that per-batch sums are computed the same way."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _few_steps(ctx: DistContext) -> dict:
    """Evaluate a seeded tiny model, then train it three steps (global batch 32, augmentation on)."""
    images, labels, info = load_split("synthetic-rgb", "train")
    images, labels = images[:96], labels[:96]
    torch.manual_seed(0)
    model = build_model("patch", info)
    recipe = engine.Recipe(epochs=1, batch_size=32, augmentation=True)
    optimizer = engine.build_optimizer(model, recipe)
    scheduler = engine.build_scheduler(optimizer, recipe, len(labels) // recipe.batch_size)
    before = engine.clean_metrics(model, images, labels, batch_size=16, ctx=ctx)
    stats = engine.train_one_epoch(
        parallel.wrap_model(model, ctx), images, labels, optimizer, scheduler, recipe,
        torch.Generator().manual_seed(1), device=ctx.device, progress=False, ctx=ctx,
    )  # fmt: skip
    return {"state": model.state_dict(), "eval": before, "stats": stats}


def _rank_main(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world), OMP_NUM_THREADS="1",
    )  # fmt: skip
    torch.set_num_threads(1)
    with distributed_run("cpu") as ctx:
        result = _few_steps(ctx)
        if ctx.is_main:
            torch.save(result, out)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_ddp_steps_match_one_process_and_sharded_evaluation_is_exact(tmp_path):
    out = tmp_path / "ddp.pt"
    mp.spawn(_rank_main, args=(2, _free_port(), str(out)), nprocs=2, join=True)
    ddp = torch.load(out)
    with _one_thread():
        single = _few_steps(DistContext())
    assert ddp["eval"]["loss"] == single["eval"]["loss"]  # same batches, summed in the same order
    assert ddp["eval"]["accuracy"] == single["eval"]["accuracy"]
    torch.manual_seed(0)
    initial = build_model("patch", load_split("synthetic-rgb", "train")[2]).state_dict()
    for key, value in single["state"].items():
        torch.testing.assert_close(ddp["state"][key], value, rtol=0, atol=ATOL)
    moved = max((single["state"][k] - initial[k]).abs().max().item() for k in initial if k in single["state"])
    assert moved > 100 * ATOL  # the steps did change the weights, so the tolerance means something
    assert ddp["stats"]["train_loss"] == pytest.approx(single["stats"]["train_loss"], rel=1e-5)


def _torchrun(
    *args: str, program: list[str] | None = None, check: bool = True, timeout: float | None = None
) -> subprocess.CompletedProcess:
    """Two gloo ranks of ``python -m robustbench_wave.train ARGS`` (or of ``program``)."""
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    target = ["--no-python", *program] if program else ["-m", "robustbench_wave.train"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [*launcher, *target, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"torchrun failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return proc


def _weights(root: Path, name: str = "patch", seed: int = 0) -> dict[str, torch.Tensor]:
    return load_file(str(ckpt.run_dir(root, "synthetic", name, seed) / ckpt.WEIGHTS))


def _assert_close(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=RUN_ATOL)


@pytest.fixture(scope="module")
def one_rank(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("one-rank")
    with _one_thread():
        train.main([*ARGS, "--results-dir", str(out)])
    return out


KILL_RANK_1_IN_EPOCH_2 = """
import json, os, signal, sys, time
from pathlib import Path
from robustbench_wave import train
from robustbench_wave.training import runner
real, calls = runner.train_one_epoch, []
resume = Path(sys.argv[sys.argv.index("--results-dir") + 1]) / "train/synthetic/patch/seed-0/resume.json"
def dies_in_epoch_2(*args, **kwargs):
    calls.append(1)
    if len(calls) == 2 and os.environ["RANK"] == "1":
        while not (resume.exists() and json.loads(resume.read_text())["epoch"] == 1):
            time.sleep(0.05)  # rank 0 has saved epoch 1; rank 0 now waits for rank 1 in epoch 2
        os.kill(os.getpid(), signal.SIGKILL)
    return real(*args, **kwargs)
runner.train_one_epoch = dies_in_epoch_2
sys.exit(train.main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def killed_and_resumed(tmp_path_factory) -> SimpleNamespace:
    """Two ranks of ``python -m robustbench_wave.train`` whose rank 1 is killed (-9) in epoch 2, then the same
    command again, which resumes and finishes the run: one pair of launches for the two tests below (each
    launch starts three interpreters). ``left``: what the killed launch left behind, seen before the second
    launch (its exit status, resume.json, whether the weights exist); ``alone``: a copy of that state."""
    root = tmp_path_factory.mktemp("two-ranks")
    killed = _torchrun(*ARGS, "--results-dir", str(root), program=[sys.executable, "-c", KILL_RANK_1_IN_EPOCH_2],
                       check=False)  # fmt: skip
    directory = ckpt.run_dir(root, "synthetic", "patch", 0)
    resume = directory / ckpt.RESUME_STATE
    left = SimpleNamespace(
        returncode=killed.returncode,
        resume=json.loads(resume.read_text()) if resume.exists() else None,
        weights=(directory / ckpt.WEIGHTS).exists(),
    )
    shutil.copytree(root / "train", root / "alone" / "train")
    resumed = _torchrun(*ARGS, "--results-dir", str(root))
    return SimpleNamespace(root=root, directory=directory, left=left, resumed=resumed, alone=root / "alone")


def test_two_rank_cli_writes_one_run_that_matches_one_process(killed_and_resumed, one_rank):
    """The run the two ranks finished (epoch 1 before the kill, epoch 2 after it; the resume is the next
    test's): written once, by rank 0, as one process writes it."""
    root, directory = killed_and_resumed.root, killed_and_resumed.directory
    metrics = [json.loads(line) for line in (directory / ckpt.METRICS).read_text().splitlines()]
    assert [m["epoch"] for m in metrics] == [1, 2]  # written once, by rank 0
    assert sorted(p.name for p in directory.iterdir()) == [LOCK_FILE, ckpt.CONFIG, ckpt.METRICS, ckpt.WEIGHTS]
    config = json.loads((directory / ckpt.CONFIG).read_text())
    assert config["provenance"]["world_size"] == 2 and config["provenance"]["backend"] == "gloo"
    assert config["provenance"]["device"] == "cpu" and config["precision"] == "float32"
    reference = json.loads((ckpt.run_dir(one_rank, "synthetic", "patch", 0) / ckpt.CONFIG).read_text())
    assert config["fingerprint"] == reference["fingerprint"]  # the number of ranks is not configuration
    _assert_close(_weights(root), _weights(one_rank))
    summary = pd.read_csv(root / "train" / "synthetic" / "summary.csv")
    assert list(summary["model"]) == ["patch"]


def test_two_ranks_resume_after_kill_9_and_so_does_one(killed_and_resumed, one_rank):
    run = killed_and_resumed
    assert run.left.returncode != 0
    assert run.left.resume is not None and run.left.resume["epoch"] == 1
    assert not run.left.weights
    assert "resuming after epoch 1/2" in run.resumed.stderr + run.resumed.stdout
    metrics = [json.loads(line) for line in (run.directory / ckpt.METRICS).read_text().splitlines()]
    assert [m["epoch"] for m in metrics] == [1, 2]
    assert not (run.directory / ckpt.RESUME_STATE).exists()
    _assert_close(_weights(run.root), _weights(one_rank))
    # the number of ranks is not configuration: one process resumes the two ranks' run as well
    alone = ckpt.run_dir(run.alone, "synthetic", "patch", 0) / ckpt.METRICS
    epoch_1 = alone.read_text().splitlines()
    with _one_thread():
        train.main([*ARGS, "--results-dir", str(run.alone)])
    assert alone.read_text().splitlines()[:1] == epoch_1 and len(alone.read_text().splitlines()) == 2
    _assert_close(_weights(run.alone), _weights(one_rank))


def test_a_locked_run_folder_stops_every_rank(tmp_path):
    """Rank 0 holds the lock for the run; when it is refused, rank 1 learns it too instead of waiting in
    the first collective (for TRAIN_TIMEOUT_S)."""
    directory = ckpt.run_dir(tmp_path, "synthetic", "patch", 0)
    with RunLock(directory):
        proc = _torchrun(*ARGS, "--results-dir", str(tmp_path), check=False, timeout=300)
    assert proc.returncode != 0
    assert proc.stderr.count("is in use by another run") == 2  # each rank ends with the lock's message
    assert sorted(p.name for p in directory.iterdir()) == [LOCK_FILE]


def test_a_run_refused_on_one_rank_of_parallel_runs_ends_every_rank(tmp_path):
    """``--parallel runs``: rank 0's run folder is locked; rank 1 trains its own run, then both stop with
    the lock's message instead of rank 1 waiting for rank 0's rows."""
    args = ["--dataset", "synthetic", "--train-subset", "100", "--n-examples", "32", "--batch-size", "30",
            "--epochs", "1", "--no-progress", "--model", "patch", "--model", "wavelet", "--parallel", "runs"]  # fmt: skip
    with RunLock(ckpt.run_dir(tmp_path, "synthetic", "patch", 0)):
        proc = _torchrun(*args, "--results-dir", str(tmp_path), check=False, timeout=300)
    assert proc.returncode != 0 and proc.stderr.count("is in use by another run") == 2
    assert (ckpt.run_dir(tmp_path, "synthetic", "wavelet", 0) / ckpt.WEIGHTS).exists()  # rank 1's run
    assert not (tmp_path / "train" / "synthetic" / "summary.csv").exists()


def test_parallel_runs_trains_each_run_once_on_one_rank(tmp_path):
    args = ["--dataset", "synthetic", "--train-subset", "100", "--n-examples", "32", "--batch-size", "30",
            "--epochs", "1", "--no-progress", "--model", "patch", "--model", "wavelet", "--train-seed", "0", "--train-seed", "1",
            "--parallel", "runs"]  # fmt: skip
    _torchrun(*args, "--results-dir", str(tmp_path))
    summary = pd.read_csv(tmp_path / "train" / "synthetic" / "summary.csv")
    assert sorted(zip(summary["model"], summary["seed"], strict=True)) == [
        ("patch", 0),
        ("patch", 1),
        ("wavelet", 0),
        ("wavelet", 1),
    ]
    for name in ("patch", "wavelet"):
        for seed in (0, 1):
            directory = ckpt.run_dir(tmp_path, "synthetic", name, seed)
            assert len((directory / ckpt.METRICS).read_text().splitlines()) == 1
            assert json.loads((directory / ckpt.CONFIG).read_text())["provenance"]["world_size"] == 1
    # a run of one rank is a plain one-process run: the same bytes as training it alone
    config = TrainConfig(
        out=tmp_path / "alone", recipe=engine.Recipe(epochs=1, batch_size=30), dataset="synthetic",
        train_subset=100, test_subset=32, progress=False,
    )  # fmt: skip
    data = load_training_data("synthetic", 1, val_fraction=0.1, train_subset=100, test_subset=32)
    with _one_thread():
        train_model("wavelet", data, config, 1)
    assert (ckpt.run_dir(tmp_path, "synthetic", "wavelet", 1) / ckpt.WEIGHTS).read_bytes() == (
        ckpt.run_dir(tmp_path / "alone", "synthetic", "wavelet", 1) / ckpt.WEIGHTS
    ).read_bytes()
