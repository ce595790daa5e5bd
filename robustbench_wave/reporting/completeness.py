"""Checks that a run folder's records are the complete, unedited output of the configuration it names.

A report built from a partial or hand-edited ``records.csv.gz`` prints a plausible, wrong table, so
:func:`check_folder` runs before any table: the records must match the sha256 and row count ``meta.json``
recorded when they were written (runs saved before that was recorded skip this), ``meta.json`` must describe
the configuration in the folder's ``config.json`` (an interrupted ``--overwrite`` leaves the old records next
to a new configuration), and the records must be structurally complete (every block of a model covers the
examples of its clean rows, and those are the ``n_examples`` of ``meta.json``), which holds for old runs too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from robustbench_wave.evaluation import records as rec
from robustbench_wave.evaluation.meta_sections import DatasetMeta, InvocationMeta, ModelsMeta
from robustbench_wave.evaluation.metrics import CLEAN_THREAT

RERUN = rec.RERUN


def check_folder(run_dir: Path, records: pd.DataFrame, meta: dict[str, Any]) -> None:
    """ValueError (one line: the file, what differs, what to do) unless the folder's records are complete."""
    digest = meta.get(rec.META_RECORDS)
    if digest is not None:
        rec.check_digest(run_dir / rec.RECORDS_FILE, digest, len(records))
    check_config(run_dir, meta)
    check_complete(run_dir / rec.RECORDS_FILE, records, meta)


def check_config(run_dir: Path, meta: dict[str, Any]) -> None:
    """The configuration ``meta.json`` recorded is the one in ``config.json`` (when both record one)."""
    recorded = InvocationMeta.from_meta(meta, run_dir / rec.META_FILE).config
    config = rec.read_meta(run_dir / rec.CONFIG_FILE)
    if not recorded or not config or recorded == config:
        return
    keys = sorted(k for k in set(recorded) | set(config) if recorded.get(k) != config.get(k))
    raise ValueError(
        f"{run_dir} holds records of another configuration than its {rec.CONFIG_FILE} ({', '.join(keys)} differ); "
        "re-run the attack command"
    )


def check_complete(path: Path, records: pd.DataFrame, meta: dict[str, Any]) -> None:
    """Every model listed in meta has rows; its clean rows cover ``n_examples``; every (grad_mode, attack,
    eps) block of the model holds exactly the examples of its clean rows, once each."""
    where = path.parent / rec.META_FILE
    missing = sorted(set(ModelsMeta.from_meta(meta, where)) - set(records["model"]))
    if missing:
        raise ValueError(
            f"{path} holds no rows of model {missing[0]!r}, which {rec.META_FILE} lists; {RERUN}"
        )
    n = DatasetMeta.from_meta(meta, where).n_examples
    for model, rows in records.groupby("model", sort=False):
        want = np.unique(rows.loc[rows["threat"] == CLEAN_THREAT, "example_id"].to_numpy(dtype=np.int64))
        if not len(want):
            raise ValueError(f"{path} holds no clean rows of model {model!r}; {RERUN}")
        if n is not None and len(want) != n:
            raise ValueError(
                f"{path}: the clean rows of model {model!r} cover {len(want)} examples, {rec.META_FILE} "
                f"records n_examples {n}; the file was modified or the run was interrupted; {RERUN}"
            )
        for key, block in rows.groupby(["grad_mode", "attack", "eps"], sort=False):
            _check_block(path, (model, *key), block["example_id"].to_numpy(dtype=np.int64), want)


def _check_block(path: Path, key: tuple[Any, ...], got: np.ndarray, want: np.ndarray) -> None:
    got = np.sort(got)
    if np.array_equal(got, want):
        return
    missing = np.setdiff1d(want, got)[:5].tolist()
    repeated = got[1:][got[1:] == got[:-1]][:5].tolist()
    extra = np.setdiff1d(got, want)[:5].tolist()
    block = "model {!r}, grad_mode {!r}, attack {!r}, eps {:g}".format(*key)
    raise ValueError(
        f"{path} is incomplete: {block} holds {len(got)} rows for {len(want)} examples (missing ids {missing}, "
        f"repeated {repeated}, not clean ids {extra}); the file was modified or the run was interrupted; {RERUN}"
    )
