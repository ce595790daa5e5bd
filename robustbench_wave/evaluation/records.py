"""Per-example attack records: the schema, the one builder of its rows, (de)serialisation and run folders.

One row per (model, grad_mode, attack, eps, example_id): the contract every table, diagnostic and verdict
reads. :func:`build_records` is the only code that turns attack outcomes into rows, so the schema, the dtypes
and the meaning of a skipped point (``attacked=False, correct=False``, no prediction) live in one place. A run
folder holds ``records.csv.gz`` (gzip with a fixed timestamp, so identical records give identical bytes),
``meta.json`` (provenance, suite, seeds, timing) and, with ``--cross-check``, ``crosscheck_records.csv.gz``
(the same schema, one row per point attacked by a second backend).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from robustbench_wave.io import atomic_write_bytes, atomic_write_json

RECORDS_FILE = "records.csv.gz"
CROSSCHECK_FILE = "crosscheck_records.csv.gz"
META_FILE = "meta.json"
SCHEMA_VERSION = 1

DTYPES: dict[str, str] = {
    "model": "string",
    "dataset": "string",
    "grad_mode": "string",  # exact | blocked | bpda
    "attack": "string",  # suite entry name
    "family": "string",  # clean | noise | fgsm | pgd | apgd | square | transfer
    "kind": "string",  # clean | noise | white-box | black-box | transfer
    "threat": "string",  # none | Linf | L2 | L0
    "eps": "float64",  # pixel units (L0: fraction of pixels); 0 for clean
    "backend": "string",  # builtin | torchattacks | foolbox
    "example_id": "int64",
    "label": "int64",
    "pred": "Int64",  # NA when not attacked
    "correct": "bool",
    "norm": "float64",  # NaN when not attacked
    "attacked": "bool",
    "correct_last": "boolean",  # NA unless an iterative builtin attack ran on the point
    "loss_final": "float64",  # cross-entropy at the returned point; NaN when not attacked
}
COLUMNS = list(DTYPES)


def make_frame(columns: dict[str, Any], n: int) -> pd.DataFrame:
    """Records from column values (scalars are broadcast) with the contract's dtypes (for hand-made records;
    attack outcomes go through :func:`build_records`)."""
    data = {}
    for col in COLUMNS:
        v = columns[col]
        data[col] = pd.array(
            np.full(n, v, dtype=object) if np.isscalar(v) or v is None else v, dtype=DTYPES[col]
        )
    return pd.DataFrame(data)


@dataclass(frozen=True)
class RecordBlock:
    """The columns shared by every row of one (model, grad_mode, attack, eps) block.

    Enum members (``GradMode``, ``AttackKind``, ``Threat``) are accepted and stored as their ``.value``:
    records hold plain strings.
    """

    model: str
    dataset: str
    grad_mode: str
    attack: str
    family: str
    kind: str
    threat: str
    eps: float
    backend: str

    def columns(self) -> dict[str, Any]:
        plain = {k: (v.value if isinstance(v, Enum) else v) for k, v in dataclasses.asdict(self).items()}
        return {**plain, "eps": float(self.eps)}


def build_records(
    block: RecordBlock,
    example_ids: np.ndarray,
    labels: np.ndarray,
    attacked: np.ndarray,
    pred: np.ndarray,
    *,
    norm: np.ndarray,
    loss: np.ndarray,
    correct_last: np.ndarray | None = None,
) -> pd.DataFrame:
    """One row per example of ``block``; every array has one entry per example, in the same order.

    ``pred``, ``norm``, ``loss`` and ``correct_last`` are read only where ``attacked``; elsewhere the point
    was skipped and gets no prediction, ``correct=False`` and NaN/NA values. ``correct`` is derived here
    (``pred == label`` on attacked points), never passed in, so no caller can disagree about it.
    """
    n = len(example_ids)
    attacked = np.asarray(attacked, dtype=bool)
    arrays = (labels, attacked, pred, norm, loss) + ((correct_last,) if correct_last is not None else ())
    if any(len(a) != n for a in arrays):
        raise ValueError(
            "build_records needs one label, flag, prediction, norm, loss (and last flag) per example"
        )
    pred_col = np.full(n, None, dtype=object)
    pred_col[attacked] = np.asarray(pred)[attacked].astype(object)
    last_col = np.full(n, None, dtype=object)
    if correct_last is not None:
        last_col[attacked] = np.asarray(correct_last)[attacked].astype(object)
    return make_frame(
        {
            **block.columns(),
            "example_id": np.asarray(example_ids),
            "label": np.asarray(labels),
            "pred": pred_col,
            "correct": attacked & (np.asarray(pred) == np.asarray(labels)),
            "norm": np.where(attacked, np.asarray(norm, dtype=np.float64), np.nan),
            "attacked": attacked,
            "correct_last": last_col,
            "loss_final": np.where(attacked, np.asarray(loss, dtype=np.float64), np.nan),
        },
        n,
    )


def empty_records() -> pd.DataFrame:
    return pd.DataFrame({c: pd.array([], dtype=t) for c, t in DTYPES.items()})


def coerce(df: pd.DataFrame) -> pd.DataFrame:
    """Give a records frame the contract's columns and dtypes (raises if columns are missing)."""
    missing = [c for c in COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"records lack columns {missing}; expected {COLUMNS}")
    out = df[COLUMNS].copy()
    for col, dtype in DTYPES.items():
        if dtype == "bool":
            out[col] = out[col].astype("boolean").fillna(False).astype(bool)
        else:
            out[col] = out[col].astype(dtype)
    return out.reset_index(drop=True)


def concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    frames = [f for f in frames if len(f)]
    return coerce(pd.concat(frames, ignore_index=True)) if frames else empty_records()


def write_records(df: pd.DataFrame, path: str | Path) -> Path:
    text = coerce(df).to_csv(index=False, lineterminator="\n").encode("utf-8")
    data = gzip.compress(text, mtime=0) if str(path).endswith(".gz") else text  # no name/time in the header
    return atomic_write_bytes(path, data)


def read_records(path: str | Path) -> pd.DataFrame:
    path = Path(path)
    if not path.exists():
        raise ValueError(f"no records at {path}; run python -m robustbench_wave.attack first")
    df = pd.read_csv(
        path,
        compression="gzip" if path.suffix == ".gz" else None,
        keep_default_na=False,
        na_values=[""],
        dtype={c: ("object" if t in ("string", "bool", "boolean") else None) for c, t in DTYPES.items()},
    )
    for col in ("correct", "attacked", "correct_last"):
        df[col] = df[col].map({"True": True, "False": False, True: True, False: False}, na_action="ignore")
    return coerce(df)


def write_meta(meta: dict[str, Any], path: str | Path) -> Path:
    return atomic_write_json(path, meta)


def read_meta(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.exists():
        return {}
    return json.loads(path.read_text(encoding="utf-8"))


def read_run(run_dir: str | Path) -> tuple[pd.DataFrame, dict[str, Any], pd.DataFrame | None]:
    """(records, meta, cross-check records or None) of a saved run folder."""
    run_dir = Path(run_dir)
    records = read_records(run_dir / RECORDS_FILE)
    meta = read_meta(run_dir / META_FILE)
    xpath = run_dir / CROSSCHECK_FILE
    return records, meta, (read_records(xpath) if xpath.exists() else None)
