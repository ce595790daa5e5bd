"""Sharded evaluation: which examples a shard owns, and how shards' results join into one run's result.

An evaluation is split over examples only, never over attacks (each attack runs only on the points earlier
ones left standing, so attacks depend on each other). Library attacks are seeded per block of example ids
(``id // rng_block``) and builtin ones per example, so a shard that owns whole id blocks computes exactly the
rows a single process computes for those examples: :func:`shard_positions` assigns whole blocks. Joining is
pure bookkeeping: :func:`merge_records` puts the shards' rows back into the single-process order (block by
block, examples in run order), :func:`check_complete` proves every example is there exactly once per
(model, grad_mode, attack, eps), and :func:`merge_meta` joins the shards' provenance (:func:`merge_results`
also joins their saved adversarial examples, :mod:`adversarial`). The attack command
(torchrun ranks or ``--shard i/n`` jobs) and ``python -m robustbench_wave.report merge`` both use them. A
``--shard`` job's ``meta.json`` says what it holds of the whole run in :class:`ShardJob`, written by the
attack run and read here by :func:`merge_shard_folders`, the merge that needs it.

Identity holds bit for bit when the model's output for an example does not depend on the rest of its batch.
A shard batches its points differently from one process, so a model that rounds differently for different
batch sizes (on CPU: a batch of one point, whose head is a matrix-vector product) can move the last bits of
``loss_final`` of such points.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from robustbench_wave.core.distributed import shard_bounds
from robustbench_wave.evaluation import records as rec
from robustbench_wave.evaluation.adversarial import META_KEY, merge_sets
from robustbench_wave.evaluation.meta_sections import InvocationMeta, ModelsMeta, ProvenanceMeta, SettingsMeta
from robustbench_wave.evaluation.metrics import CLEAN_THREAT
from robustbench_wave.evaluation.result import EvaluationResult

#: Folder of a run that holds one sub-folder per shard (``<i>-of-<n>``: its chunks; for a ``--shard`` job also
#: its records, meta.json and config.json).
SHARDS_DIR = "shards"

#: Where a ``--shard`` job's ``meta.json`` keeps its :class:`ShardJob`.
SHARD_META_KEY = "shard"

#: Columns that name one block of records (one attack of one model at one eps under one gradient mode).
BLOCK_COLUMNS = ["model", "grad_mode", "attack", "eps", "backend"]


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (written ``i/n`` on the command line, ``i-of-n`` in folder names)."""

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if self.count < 1 or not 0 <= self.index < self.count:
            raise ValueError(
                f"shard {self.index}/{self.count}: need 0 <= i < n (write --shard i/n, e.g. 0/2)"
            )

    @classmethod
    def parse(cls, text: str) -> Shard:
        """``"i/n"`` -> Shard(i, n); anything else is an error that says what to write."""
        match = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text)
        if not match:
            raise ValueError(f"--shard {text!r}: write i/n with 0 <= i < n, e.g. --shard 0/4")
        return cls(int(match.group(1)), int(match.group(2)))

    @property
    def label(self) -> str:
        return f"{self.index}-of-{self.count}"

    @property
    def is_whole(self) -> bool:
        """A single shard is the whole run (no sharding)."""
        return self.count == 1

    def positions(self, example_ids: torch.Tensor, rng_block: int) -> torch.Tensor:
        return shard_positions(example_ids, rng_block, self.index, self.count)

    def to_dict(self) -> dict[str, int]:
        return {"index": self.index, "count": self.count}


def shard_dir(run_dir: str | Path, shard: Shard) -> Path:
    """``RUN/shards/<i>-of-<n>``: where one shard keeps its chunks (and, as a job, its results)."""
    return Path(run_dir) / SHARDS_DIR / shard.label


def rank_count(n_examples: int, rng_block: int, world_size: int) -> int:
    """How many of ``world_size`` ranks can share ``n_examples``: a shard owns whole seeding blocks, so at
    most one rank per block (the others idle)."""
    return min(world_size, -(-n_examples // rng_block))


def shard_positions(example_ids: torch.Tensor, rng_block: int, index: int, count: int) -> torch.Tensor:
    """Positions (ascending) of the examples shard ``index`` of ``count`` evaluates.

    Shards own whole seeding blocks (``id // rng_block``), spread as evenly as possible in the order the
    blocks first appear; for ids ``0..N-1`` this is :func:`robustbench_wave.core.distributed.shard_bounds`.
    """
    if rng_block < 1:
        raise ValueError(f"rng_block must be >= 1, got {rng_block}")
    ids = torch.as_tensor(example_ids).long().view(-1)
    blocks = torch.div(ids, rng_block, rounding_mode="floor").tolist()
    order = list(dict.fromkeys(blocks))  # blocks in order of first appearance
    start, stop = shard_bounds(len(order), count, index, 1)
    mine = set(order[start:stop])
    return torch.tensor([p for p, b in enumerate(blocks) if b in mine], dtype=torch.long)


def _block_keys(frame: pd.DataFrame) -> list[tuple[Any, ...]]:
    return list(frame[BLOCK_COLUMNS].drop_duplicates().itertuples(index=False, name=None))


def merge_records(frames: Sequence[pd.DataFrame], example_ids: Sequence[int]) -> pd.DataFrame:
    """The shards' records in the order one process writes them: block by block, examples in run order.

    Every non-empty shard must hold the same blocks in the same order (the same plan ran on each).
    """
    frames = [f for f in frames if len(f)]
    if not frames:
        return rec.empty_records()
    keys = _block_keys(frames[0])
    for i, frame in enumerate(frames[1:], start=1):
        if _block_keys(frame) != keys:
            raise ValueError(
                f"shard records {i} hold other (model, grad_mode, attack, eps) blocks than the first: "
                "the shards did not run the same configuration"
            )
    rank = {k: i for i, k in enumerate(keys)}
    position = {int(e): p for p, e in enumerate(example_ids)}
    joined = rec.concat(list(frames))
    block_rank = np.array([rank[k] for k in joined[BLOCK_COLUMNS].itertuples(index=False, name=None)])
    pos = joined["example_id"].map(position)
    if pos.isna().any():
        raise ValueError(
            f"shard records hold example ids outside the run: {sorted(joined['example_id'][pos.isna()])[:5]}"
        )
    order = np.lexsort((pos.to_numpy(dtype=np.int64), block_rank))
    return rec.coerce(joined.iloc[order])


def check_complete(records: pd.DataFrame, example_ids: Sequence[int]) -> None:
    """Every example id of the run exactly once per (model, grad_mode, attack, eps); ValueError otherwise."""
    want = np.sort(np.asarray(example_ids, dtype=np.int64))
    for key, group in records.groupby(BLOCK_COLUMNS[:4], sort=False):
        got = np.sort(group["example_id"].to_numpy(dtype=np.int64))
        if len(got) != len(want) or not np.array_equal(got, want):
            missing = np.setdiff1d(want, got)[:5].tolist()
            dup = got[1:][got[1:] == got[:-1]][:5].tolist()
            raise ValueError(
                f"merged records of {key} are incomplete: {len(got)} rows for {len(want)} examples "
                f"(missing ids {missing}, repeated ids {dup}); re-run the missing shards"
            )


def _merge_model_meta(
    entries: list[dict[str, Any]], clean_accuracy: float, shards: list[int]
) -> dict[str, Any]:
    """One model's ``models`` entry over its shards: timing tagged by shard, counts summed, the run's clean
    accuracy."""
    merged = copy.deepcopy(entries[0])
    merged["timing"] = [{**t, "shard": s} for s, e in zip(shards, entries) for t in e.get("timing", [])]
    merged["seconds_total"] = max(e.get("seconds_total", 0.0) for e in entries)  # the shards ran side by side
    merged["seconds_attacks"] = round(sum(t["seconds"] for t in merged["timing"]), 3)
    merged["resumed_chunks"] = sum(e.get("resumed_chunks", 0) for e in entries)
    merged["clean_accuracy"] = clean_accuracy
    return merged


def _clean_accuracy(records: pd.DataFrame, model: str) -> float:
    """Computed as ``evaluate`` computes it (a float32 mean over the clean rows of one gradient mode)."""
    rows = records[(records["model"] == model) & (records["threat"] == CLEAN_THREAT)]
    rows = rows[rows["grad_mode"] == rows["grad_mode"].iloc[0]] if len(rows) else rows
    return (
        float(torch.tensor(rows["correct"].to_numpy(dtype=bool)).float().mean())
        if len(rows)
        else float("nan")
    )


def merge_meta(
    metas: Sequence[dict[str, Any]],
    shards: Sequence[Shard],
    records: pd.DataFrame,
    example_ids: Sequence[int],
    data_sha256: str | None,
) -> dict[str, Any]:
    """One run's ``meta.json`` from its shards': run-wide counts, summed timing, and a ``sharding`` entry
    listing every shard's examples and chunk fingerprint."""
    meta = copy.deepcopy(metas[0])
    meta.pop(rec.META_RECORDS, None)  # shard 0's file; the run's is recorded on save
    meta.pop(META_KEY, None)  # shard 0's adversarial examples; the run's are recorded on save
    ids = [int(i) for i in example_ids]
    meta["n_examples"] = len(ids)
    meta["example_ids"] = {"first": ids[0] if ids else None, "last": ids[-1] if ids else None}
    if data_sha256 is not None:
        meta["data_sha256"] = data_sha256
    meta.setdefault("settings", {})["fingerprint"] = None  # one per shard, below
    index = [s.index for s in shards]
    meta["models"] = {
        name: _merge_model_meta([m["models"][name] for m in metas], _clean_accuracy(records, name), index)
        for name in metas[0].get("models", {})
    }
    meta["sharding"] = {
        "count": shards[0].count if shards else 1,
        "shards": [
            {
                **s.to_dict(),
                "n_examples": m.get("n_examples"),
                "example_ids": m.get("example_ids"),
                "fingerprint": SettingsMeta.from_meta(m).fingerprint,
                "execution": ProvenanceMeta.from_meta(m).execution,
            }
            for s, m in zip(shards, metas)
        ],
    }
    return meta


def merge_results(
    results: Sequence[EvaluationResult],
    shards: Sequence[Shard],
    example_ids: Sequence[int],
    data_sha256: str | None = None,
) -> EvaluationResult:
    """The run's result from its shards' results (in any order): records in single-process order, checked
    complete, and one meta."""
    pairs = sorted(zip(shards, results), key=lambda p: p[0].index)
    indices = [s.index for s, _ in pairs]
    count = pairs[0][0].count if pairs else 1
    if indices != list(range(count)) or any(s.count != count for s, _ in pairs):
        missing = sorted(set(range(count)) - set(indices))
        raise ValueError(
            f"need shards 0..{count - 1} of {count} exactly once; have {indices} (missing {missing})"
        )
    records = merge_records([r.records for _, r in pairs], example_ids)
    check_complete(records, example_ids)
    meta = merge_meta([r.meta for _, r in pairs], [s for s, _ in pairs], records, example_ids, data_sha256)
    models = dict.fromkeys(m for _, r in pairs for m in r.adversarial)
    kept = {m: merge_sets(m, [r.adversarial[m] for _, r in pairs if m in r.adversarial]) for m in models}
    return EvaluationResult(records, meta, adversarial=kept)


# ------------------------------------------------------------------------------ shard folders (--shard jobs)


@dataclass(frozen=True)
class ShardJob:
    """What a ``--shard i/n`` job records about the whole run beside its own records (``meta["shard"]``):
    which shard it is, the run-wide ids of its examples, the run's size and data digest, and what the merge
    needs to finish the run (where the trained models live, how to diagnose: the attack command's finalize
    options, a JSON object checked by whoever reads them)."""

    index: int
    count: int
    example_ids: list[int]
    run_n_examples: int
    run_data_sha256: str | None = None
    results_dir: str = "results"
    finalize: Any = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of ``meta["shard"]``, keys in the order every shard job has written them."""
        return {
            "index": self.index,
            "count": self.count,
            "example_ids": list(self.example_ids),
            "run_n_examples": self.run_n_examples,
            "run_data_sha256": self.run_data_sha256,
            "results_dir": self.results_dir,
            "finalize": self.finalize,
        }

    @classmethod
    def from_dict(cls, data: Any, where: str | Path) -> ShardJob:
        """The job a shard's ``meta.json`` (``where``) describes; a one-line ValueError naming the file and
        the field that is missing or malformed."""
        info = data if isinstance(data, dict) else {}
        for name in ("index", "count", "run_n_examples"):
            value = info.get(name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(
                    f"{where}: field shard.{name} = {value!r} is not a whole number; re-run the shard"
                )
        ids = info.get("example_ids")
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            raise ValueError(
                f"{where}: field shard.example_ids is not a list of example ids; re-run the shard"
            )
        return cls(
            info["index"],
            info["count"],
            ids,
            info["run_n_examples"],
            info.get("run_data_sha256"),
            info.get("results_dir", "results"),
            info.get("finalize", {}),
        )


@dataclass(frozen=True)
class ShardFolder:
    """A finished ``--shard`` job's folder: its shard, result, and what its meta says about the whole run."""

    shard: Shard
    path: Path
    result: EvaluationResult
    job: ShardJob

    @property
    def config(self) -> dict[str, Any]:
        return dict(InvocationMeta.from_meta(self.result.meta, self.path / rec.META_FILE).config)

    @property
    def models(self) -> ModelsMeta:
        return ModelsMeta.from_meta(self.result.meta, self.path / rec.META_FILE)

    @property
    def name(self) -> str:
        return f"shard {self.shard.index}/{self.shard.count} ({self.path})"


def find_shard_folders(run_dir: str | Path) -> list[ShardFolder]:
    """Every finished shard of ``run_dir`` (``shards/<i>-of-<n>/`` holding records), checked to be one split
    with no shard missing; ValueError naming the problem otherwise."""
    root = Path(run_dir) / SHARDS_DIR
    found: list[tuple[Shard, Path]] = []
    for path in sorted(root.glob("*-of-*")):
        match = re.fullmatch(r"(\d+)-of-(\d+)", path.name)
        if match and (path / rec.RECORDS_FILE).exists():
            found.append((Shard(int(match.group(1)), int(match.group(2))), path))
    if not found:
        raise ValueError(
            f"{run_dir} holds no finished shard (no {SHARDS_DIR}/I-of-N/{rec.RECORDS_FILE}); run "
            "python -m robustbench_wave.attack ... --shard I/N for every I first"
        )
    counts = sorted({s.count for s, _ in found})
    if len(counts) > 1:
        raise ValueError(
            f"{root} holds shards of different splits (of {counts}); delete the folders of the split "
            "you do not want"
        )
    count, have = counts[0], {s.index for s, _ in found}
    missing = [i for i in range(count) if i not in have]
    if missing:
        raise ValueError(
            f"shard {missing[0]}/{count} is missing or unfinished (no "
            f"{root / Shard(missing[0], count).label / rec.RECORDS_FILE}): run the attack command with "
            f"--shard {missing[0]}/{count}"
        )
    return [_load_shard(s, p) for s, p in sorted(found, key=lambda f: f[0].index)]


def _load_shard(shard: Shard, path: Path) -> ShardFolder:
    """A shard job's folder, its records checked against the digest its meta.json recorded, and its
    :class:`ShardJob` read from its meta.json; a one-line ValueError naming the file and field otherwise."""
    result = EvaluationResult.load(path)
    meta = result.meta
    if rec.META_RECORDS in meta:
        rec.check_digest(path / rec.RECORDS_FILE, meta[rec.META_RECORDS], len(result.records))
    config = rec.read_meta(path / rec.CONFIG_FILE)
    if config and config != InvocationMeta.from_meta(meta, path / rec.META_FILE).config:
        raise ValueError(
            f"{path} holds records of another configuration than its {rec.CONFIG_FILE} (an interrupted run); "
            "re-run the attack command for this shard"
        )
    job = ShardJob.from_dict(meta.get(SHARD_META_KEY), path / rec.META_FILE)
    return ShardFolder(shard, path, result, job)


def _check_same_run(folders: Sequence[ShardFolder]) -> None:
    """The same configuration (suite, models, checkpoints, seeds, data set, n ...) and data in every shard."""
    first = folders[0]
    for f in folders:
        if (f.job.index, f.job.count) != (f.shard.index, f.shard.count):
            raise ValueError(f"{f.name}: its meta.json says shard {f.job.index}/{f.job.count}")
    for f in folders[1:]:
        keys = sorted(k for k in set(first.config) | set(f.config) if first.config.get(k) != f.config.get(k))
        if set(first.models) != set(f.models):
            keys.append("models")
        for field_name in ("run_n_examples", "run_data_sha256"):
            if getattr(first.job, field_name) != getattr(f.job, field_name):
                keys.append(field_name)
        if keys:
            raise ValueError(
                f"{f.name} ran another configuration than {first.name}: {', '.join(keys)} differ; re-run it "
                "with the same arguments"
            )


def _check_ids(folders: Sequence[ShardFolder], n: int) -> None:
    """The shards' example ids are disjoint and together are the run's ids ``0..n-1``."""
    owner: dict[int, str] = {}
    for f in folders:
        ids = [int(i) for i in f.job.example_ids]
        held = sorted(set(f.result.records["example_id"].astype(int)))
        if sorted(ids) != held:
            raise ValueError(f"{f.name}: its records hold other example ids than its meta.json lists")
        overlap = [i for i in ids if i in owner]
        if overlap:
            raise ValueError(
                f"{f.name} and {owner[overlap[0]]} both hold example ids {overlap[:5]}: the shards overlap"
            )
        owner.update({i: f.name for i in ids})
    missing = sorted(set(range(n)) - set(owner))
    if missing:
        raise ValueError(
            f"example ids {missing[:5]} ({len(missing)} in all) are in no shard: the split is incomplete"
        )
    extra = sorted(set(owner) - set(range(n)))
    if extra:
        raise ValueError(f"example ids {extra[:5]} are not ids of this run (0..{n - 1})")


def merge_shard_folders(run_dir: str | Path) -> tuple[EvaluationResult, list[ShardFolder]]:
    """The whole run's result from its ``--shard`` jobs' folders, after checking that they ran the same
    configuration on disjoint examples that together make the run."""
    folders = find_shard_folders(run_dir)
    _check_same_run(folders)
    n = folders[0].job.run_n_examples
    _check_ids(folders, n)
    merged = merge_results(
        [f.result for f in folders],
        [f.shard for f in folders],
        range(n),
        folders[0].job.run_data_sha256,
    )
    merged.meta.pop(SHARD_META_KEY, None)
    return merged, folders
