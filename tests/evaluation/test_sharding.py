"""Sharded attack runs in one process (evaluation.sharding, the attack CLI's --shard jobs, report merge): the
merged records.csv.gz must be byte-identical to a one-process run's, merge must refuse shards that do not
make one run, and each shard resumes from its own chunks. (Ranks under torchrun: test_sharding_torchrun.py.)

The models, suite and one-process records: tests/support/shard_models.py, trained by this folder's conftest.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from robustbench_wave import attack, report
from robustbench_wave.core.distributed import shard_bounds
from robustbench_wave.evaluation import EvalSettings, evaluate
from robustbench_wave.evaluation.records import RECORDS_FILE
from robustbench_wave.evaluation.sharding import Shard, ShardJob, merge_results, shard_positions
from tests.support.shard_models import RNG_BLOCK, N, attack_args, load_trained, run_dir

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


@pytest.mark.slow
def test_unaligned_shards_would_change_records(tiny: Path) -> None:
    """Why boundaries fall on rng blocks: a library attack (Square) split mid-block computes other points."""
    from robustbench_wave.attacks import load_suite
    from robustbench_wave.data import load_split, to_float

    images, labels, info = load_split("synthetic", "test")
    x, y = to_float(images[:24]), torch.as_tensor(labels[:24]).long()
    model, _ = load_trained("tiny", "synthetic")
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


@pytest.mark.slow
def test_shard_jobs_merge_to_the_one_process_records(tiny: Path, tmp_path: Path, reference: bytes) -> None:
    for i in (1, 0):  # any order
        assert attack.main(attack_args(tmp_path, tiny, "--shard", f"{i}/2")) == 0
    run = run_dir(tmp_path)
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


@pytest.mark.slow
def test_merge_refuses_shards_that_do_not_make_one_run(tiny: Path, tmp_path: Path) -> None:
    run = run_dir(tmp_path)
    fast = ("--no-diagnostics", "--attacks", "noise_uniform,fgsm", "--surrogate", "none")
    assert attack.main([*attack_args(tmp_path, tiny, "--shard", "0/2"), *fast]) == 0
    with pytest.raises(SystemExit, match=r"shard 1/2 is missing.*--shard 1/2"):
        report.main(["merge", str(run)])
    assert attack.main([*attack_args(tmp_path, tiny, "--shard", "1/2", "--seed", "1"), *fast]) == 0
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


@pytest.mark.slow
def test_a_shard_resumes_from_its_own_chunks(tiny: Path, tmp_path: Path) -> None:
    args = [*attack_args(tmp_path, tiny, "--shard", "0/2"), "--no-diagnostics"]
    assert attack.main(args) == 0
    folder = run_dir(tmp_path) / "shards" / "0-of-2"
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
