"""Sharded attack runs (evaluation.sharding, the attack CLI's torchrun ranks and --shard jobs, report merge):
the merged records.csv.gz must be byte-identical to a one-process run's, merge must refuse shards that do not
make one run, and each shard resumes from its own chunks.

The models are tiny (a fixed Haar front-end + a linear layer, trained here on the synthetic data set); the
suite is the smoke suite with ``rng_block = 8`` and 43 examples, so the two shards are uneven (24 + 19) and
the batches (5) straddle the seeding blocks. Run as a script (``torchrun ... tests/evaluation/test_sharding.py ARGS``)
this file is the attack CLI with the tiny models in place of trained checkpoints.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from robustbench_wave import attack, report
from robustbench_wave.distributed import shard_bounds
from robustbench_wave.evaluation import EvalSettings, evaluate
from robustbench_wave.evaluation.records import RECORDS_FILE, read_run
from robustbench_wave.evaluation.sharding import Shard, ShardJob, merge_results, shard_positions
from robustbench_wave.runfolder import RunLock
from robustbench_wave.training import checkpoint
from tests.support import REPO
from tests.support.attack_models import ToyFrontEnd

WEIGHTS_ENV = "RBW_TEST_SHARD_WEIGHTS"  # folder with tiny.pt and tiny2.pt (set for the torchrun ranks)
N, RNG_BLOCK = 43, 8
ATTACKS = "noise_uniform,fgsm,pgd_linf,apgd_ce,square,transfer_pgd_linf"
RUN_NAME = "run"


# ------------------------------------------------------------------------------------------ tiny models


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


def _load_trained(
    name: str, dataset: str, results_dir: object = "results", seed: int = 0
) -> tuple[nn.Module, dict[str, str]]:
    """Stand-in for checkpoint.load_trained: the tiny models trained by the fixture below."""
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
    from robustbench_wave.data import load_split, to_float

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


@pytest.fixture(scope="module")
def weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("weights")
    torch.save(_train(0, 40).state_dict(), folder / "tiny.pt")
    torch.save(_train(1, 10).state_dict(), folder / "tiny2.pt")
    suite = (REPO / "attacks" / "smoke.toml").read_text(encoding="utf-8")
    suite = suite.replace("rng_block = 16", f"rng_block = {RNG_BLOCK}")
    suite = suite.replace("[eps.default]\nLinf = [0.03, 0.1]", "[eps.default]\nLinf = [0.05, 0.25]")
    assert "Linf = [0.05, 0.25]" in suite  # large enough that the library attacks break points
    (folder / "suite.toml").write_text(suite, "utf-8")
    return folder


@pytest.fixture
def tiny(weights: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(WEIGHTS_ENV, str(weights))
    monkeypatch.setattr(checkpoint, "load_trained", _load_trained)
    return weights


def _args(out: Path, weights: Path, *extra: str) -> list[str]:
    return [
        "--model", "tiny", "--surrogate", "tiny2", "--dataset", "synthetic", "--n-examples", str(N),
        "--suite", str(weights / "suite.toml"), "--attacks", ATTACKS, "--out", str(out),
        "--run-name", RUN_NAME, "--batch-size", "5", "--device", "cpu", "--no-progress", *extra,
    ]  # fmt: skip


def _run_dir(out: Path) -> Path:
    return out / "attack" / "synthetic" / RUN_NAME


@pytest.fixture(scope="module")
def reference(weights: Path, tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """records.csv.gz of the one-process run."""
    out = tmp_path_factory.mktemp("single")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(WEIGHTS_ENV, str(weights))
        mp.setattr(checkpoint, "load_trained", _load_trained)
        assert attack.main(_args(out, weights, "--no-diagnostics")) == 0
    records, _ = read_run(_run_dir(out))
    # the run must exercise both kinds of seeding and points the attacks break and leave standing
    assert records["attacked"].any() and (records["attacked"] & ~records["correct"]).any()
    assert (records["attacked"] & records["correct"] & (records["attack"] == "square")).any()
    assert set(records["grad_mode"]) == {"exact", "blocked", "bpda"}
    return (_run_dir(out) / RECORDS_FILE).read_bytes()


# ------------------------------------------------------------------------------------------ the split


def test_shard_positions_are_whole_blocks_and_match_shard_bounds() -> None:
    ids = torch.arange(N)
    parts = [shard_positions(ids, RNG_BLOCK, i, 2) for i in range(2)]
    assert [len(p) for p in parts] == [24, 19]  # 6 blocks: 3 + 3, the last one short
    for i, p in enumerate(parts):
        assert p.tolist() == list(range(*shard_bounds(N, 2, i, RNG_BLOCK)))
    # ids that are not 0..N-1: shards still own whole blocks of ids and cover every position once
    odd = torch.tensor([100, 101, 117, 3, 4, 5, 60, 61, 62, 63])
    parts = [shard_positions(odd, 4, i, 3).tolist() for i in range(3)]
    assert sorted(p for part in parts for p in part) == list(range(len(odd)))
    blocks = [{int(odd[p]) // 4 for p in part} for part in parts]
    assert all(not (a & b) for i, a in enumerate(blocks) for b in blocks[i + 1 :])


def test_shard_parse_errors() -> None:
    assert Shard.parse("1/4") == Shard(1, 4)
    for bad in ("4/4", "1-4", "-1/2", "a/b"):
        with pytest.raises(ValueError, match="i/n"):
            Shard.parse(bad)


def test_unaligned_shards_would_change_records(tiny: Path) -> None:
    """Why boundaries fall on rng blocks: a library attack (Square) split mid-block computes other points."""
    from robustbench_wave.attacks import load_suite
    from robustbench_wave.data import load_split, to_float

    images, labels, info = load_split("synthetic", "test")
    x, y = to_float(images[:24]), torch.as_tensor(labels[:24]).long()
    model, _ = _load_trained("tiny", "synthetic")
    suite = load_suite(tiny / "suite.toml").select(["square"])
    settings = EvalSettings(dataset=info, grad_modes=("exact",))
    kw = dict(batch_size=5, progress=False)
    whole = evaluate(model, x, y, suite, settings, **kw)

    def split(cut: int):  # type: ignore[no-untyped-def]
        parts = [range(0, cut), range(cut, 24)]
        results = [
            evaluate(model, x[list(p)], y[list(p)], suite, settings, example_ids=list(p), **kw) for p in parts
        ]
        return merge_results(results, [Shard(0, 2), Shard(1, 2)], range(24)).records

    assert split(16).equals(whole.records)  # aligned to rng_block = 8
    assert not split(12).equals(whole.records)  # mid-block: other random draws


# ----------------------------------------------------------------------------------- --shard jobs + merge


def test_the_shard_job_schema_round_trips_and_names_a_bad_field() -> None:
    job = ShardJob(1, 2, [8, 9], 10, "abc", "results", {"diagnostics": False})
    keys = ["index", "count", "example_ids", "run_n_examples", "run_data_sha256", "results_dir", "finalize"]
    assert list(job.to_dict()) == keys
    assert ShardJob.from_dict(json.loads(json.dumps(job.to_dict())), "m.json") == job
    assert ShardJob.from_dict(
        {"index": 0, "count": 1, "example_ids": [], "run_n_examples": 0}, "m"
    ) == ShardJob(
        0, 1, [], 0, None, "results", {}
    )  # what older shard jobs may lack has the defaults the merge always assumed
    with pytest.raises(ValueError, match=r"m\.json: field shard\.count = None is not a whole number"):
        ShardJob.from_dict({"index": 0}, "m.json")
    with pytest.raises(ValueError, match=r"field shard\.example_ids is not a list"):
        ShardJob.from_dict({**job.to_dict(), "example_ids": [True]}, "m.json")


def test_shard_jobs_merge_to_the_one_process_records(tiny: Path, tmp_path: Path, reference: bytes) -> None:
    for i in (1, 0):  # any order
        assert attack.main(_args(tmp_path, tiny, "--shard", f"{i}/2")) == 0
    run = _run_dir(tmp_path)
    assert not (run / RECORDS_FILE).exists()  # a shard job writes only its own folder
    shard_meta = json.loads((run / "shards" / "1-of-2" / "meta.json").read_text())
    assert shard_meta["shard"]["example_ids"] == list(range(24, N))
    assert shard_meta["provenance"]["execution"]["shard"] == "1/2"
    assert ShardJob.from_dict(shard_meta["shard"], "meta.json").to_dict() == shard_meta["shard"]  # one schema
    assert report.main(["merge", str(run)]) == 0
    assert (run / RECORDS_FILE).read_bytes() == reference
    meta = json.loads((run / "meta.json").read_text())
    assert set(meta["run"]) == set(shard_meta["run"]) == {"run_dir", "command", "config"}  # one builder
    assert meta["n_examples"] == N and meta["sharding"]["count"] == 2
    assert [s["n_examples"] for s in meta["sharding"]["shards"]] == [24, 19]
    for name in ("table.csv", "config.json", "report.md", "diagnostics.csv"):
        assert (run / name).exists(), name  # finalized as the attack command does
    assert report.main([str(run), "--quiet", "--no-figures"]) == 0  # the plain usage still works


def test_merge_refuses_shards_that_do_not_make_one_run(tiny: Path, tmp_path: Path) -> None:
    run = _run_dir(tmp_path)
    fast = ("--no-diagnostics", "--attacks", "noise_uniform,fgsm", "--surrogate", "none")
    assert attack.main([*_args(tmp_path, tiny, "--shard", "0/2"), *fast]) == 0
    with pytest.raises(SystemExit, match=r"shard 1/2 is missing.*--shard 1/2"):
        report.main(["merge", str(run)])
    assert attack.main([*_args(tmp_path, tiny, "--shard", "1/2", "--seed", "1"), *fast]) == 0
    with pytest.raises(SystemExit, match=r"shard 1/2 .*another configuration.*seed"):
        report.main(["merge", str(run), "--no-diagnostics"])
    # shard 1 claiming shard 0's examples: overlap
    s0, s1 = run / "shards" / "0-of-2", run / "shards" / "1-of-2"
    shutil.rmtree(s1)
    shutil.copytree(s0, s1)
    meta = json.loads((s1 / "meta.json").read_text())
    meta["shard"]["index"] = 1
    (s1 / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(SystemExit, match=r"shard 1/2 .* and shard 0/2 .* both hold example ids \[0, 1"):
        report.main(["merge", str(run), "--no-diagnostics"])
    # a stray shard of another split
    (run / "shards" / "0-of-3").mkdir()
    shutil.copy(s0 / RECORDS_FILE, run / "shards" / "0-of-3" / RECORDS_FILE)
    with pytest.raises(SystemExit, match="different splits"):
        report.main(["merge", str(run)])


def test_a_shard_resumes_from_its_own_chunks(tiny: Path, tmp_path: Path) -> None:
    args = [*_args(tmp_path, tiny, "--shard", "0/2"), "--no-diagnostics"]
    assert attack.main(args) == 0
    folder = _run_dir(tmp_path) / "shards" / "0-of-2"
    first = (folder / RECORDS_FILE).read_bytes()
    chunks = sorted((folder / "chunks").glob("*.json"))
    assert len(chunks) == 12  # noise, square, transfer shared; fgsm, pgd, apgd once per mode (3 modes)
    chunks[3].unlink()  # the rank was killed before this chunk finished
    assert attack.main([*args, "--batch-size", "7"]) == 0
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["models"]["tiny"]["resumed_chunks"] == 11
    assert (folder / RECORDS_FILE).read_bytes() == first
    assert attack.main(args) == 0
    assert json.loads((folder / "meta.json").read_text())["models"]["tiny"]["resumed_chunks"] == 12


# ------------------------------------------------------------------------------------------- torchrun


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _torchrun(weights: Path, args: list[str], *launcher: str) -> subprocess.CompletedProcess[str]:
    """This file as the attack CLI on two gloo ranks (``launcher``: more torchrun options)."""
    torchrun = Path(sys.executable).with_name("torchrun")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO), WEIGHTS_ENV: str(weights)}
    cmd = [
        str(torchrun), "--nnodes", "1", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
        "--master_port", str(_free_port()), *launcher, str(Path(__file__)), *args,
    ]  # fmt: skip
    return subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)


def test_two_gloo_ranks_give_the_one_process_records(tiny: Path, tmp_path: Path, reference: bytes) -> None:
    proc = _torchrun(tiny, _args(tmp_path, tiny, "--n-diagnostics", "4", "--diagnostics-steps", "2"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run = _run_dir(tmp_path)
    assert (run / RECORDS_FILE).read_bytes() == reference
    meta = json.loads((run / "meta.json").read_text())
    execution = meta["provenance"]["execution"]
    assert execution["world_size"] == 2 and execution["backend"] == "gloo" and execution["device"] == "cpu"
    assert [s["execution"]["rank"] for s in meta["sharding"]["shards"]] == [0, 1]
    assert sorted(p.name for p in (run / "shards").iterdir()) == ["0-of-2", "1-of-2"]  # each rank's chunks
    assert (run / "report.md").exists() and (run / "diagnostics.csv").exists()
    assert proc.stdout.count("verdict:") <= 1 and proc.stdout.count("report:") == 1  # finalized once


def test_every_rank_stops_when_the_run_folder_is_locked(tiny: Path, tmp_path: Path) -> None:
    """Rank 0 takes the lock; the other rank learns of the refusal from it instead of waiting in a collective
    (torchrun, checking its ranks only every 5 s here, would otherwise end it, without its message)."""
    run = _run_dir(tmp_path)
    with RunLock(run):
        proc = _torchrun(tiny, _args(tmp_path, tiny, "--no-diagnostics"), "--monitor-interval", "5")
        assert sorted(p.name for p in run.iterdir()) == [".lock"]
    assert proc.returncode != 0
    assert proc.stderr.count(f"{run} is in use by another run") == 2, proc.stderr[-3000:]


if __name__ == "__main__":  # a torchrun rank: the attack CLI with the tiny models
    checkpoint.load_trained = _load_trained
    raise SystemExit(attack.main(sys.argv[1:]))
