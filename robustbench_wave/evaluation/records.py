"""Per-example attack records: the schema, the one builder of its rows, (de)serialisation and run folders.

One row per (model, grad_mode, attack, eps, example_id): the contract every table, diagnostic and verdict
reads. :func:`build_records` is the only code that turns attack outcomes into rows, so the schema, the dtypes
and the meaning of a skipped point (``attacked=False, correct=False``, no prediction) live in one place. A run
folder holds ``records.csv.gz`` (gzip with a fixed timestamp, so identical records give identical bytes),
``meta.json`` (provenance, suite, seeds, timing); a cross-check's rows are records like any other, of attack
``name@backend`` (their breaks count in the worst case). ``meta.json`` records the sha256 and row count of the
records file (:func:`file_digest`), so readers can refuse an edited or partial one
(:func:`check_digest`); the readers turn any damaged file into a one-line ValueError naming it.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import json
import zlib
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from robustbench_wave.core.io import atomic_write_bytes, atomic_write_json

RECORDS_FILE = "records.csv.gz"
#: Where runs before cross-check rows joined the records kept them; only removed now, with a run's outputs.
CROSSCHECK_FILE = "crosscheck_records.csv.gz"
META_FILE = "meta.json"
#: An attack run's configuration, the one name of that file (written by ``robustbench_wave.attackrun.folder``),
#: which ``meta.json`` repeats under ``run.config``; readers compare the two to spot records left by another
#: configuration.
CONFIG_FILE = "config.json"
#: The key of ``meta.json`` holding ``{"sha256", "rows"}`` of records.csv.gz.
META_RECORDS = "records"
#: What to do about damaged or partial records.
RERUN = "re-run the attack command (it resumes)"
SCHEMA_VERSION = 1

DTYPES: dict[str, str] = {
    "model": "string",
    "dataset": "string",
    "grad_mode": "string",  # exact | blocked | bpda
    "attack": "string",  # suite entry name
    "family": "string",  # clean | noise | fgsm | pgd | apgd | square | transfer | corruption | ...
    "kind": "string",  # clean | noise | white-box | black-box | transfer | corruption
    "threat": "string",  # none | Linf | L2 | L0 | corruption (average case, never in a worst case)
    "eps": "float64",  # pixel units (L0: fraction of pixels; corruption: severity 1-5); 0 for clean
    "backend": "string",  # builtin | torchattacks | foolbox
    "example_id": "int64",
    "label": "int64",
    "pred": "Int64",  # NA when not attacked
    "correct": "bool",
    "norm": "float64",  # in the threat's measure (corruption: L2 distance); NaN when not attacked
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
    """The records of a ``.csv(.gz)`` file; a missing, truncated, non-gzip or non-records file (wrong columns,
    unparsable values) is a one-line ValueError naming the file, never a parser's traceback."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"no records at {path}; run python -m robustbench_wave.attack first")
    try:
        return _parse_records(path)
    except _UNREADABLE as err:
        why = " ".join(str(err).split()) or type(err).__name__
        raise ValueError(
            f"{path} is not a readable records file ({why}); re-run the attack command to rewrite it"
        ) from None


#: What a damaged records file raises while it is read (gzip: BadGzipFile is an OSError; EOFError when
#: truncated; zlib.error when corrupt; pandas: ParserError and EmptyDataError are ValueErrors).
_UNREADABLE = (OSError, EOFError, zlib.error, UnicodeDecodeError, ValueError, TypeError)


def _parse_records(path: Path) -> pd.DataFrame:
    data = path.read_bytes()
    text = (gzip.decompress(data) if path.suffix == ".gz" else data).decode("utf-8")
    df = pd.read_csv(
        io.StringIO(text),
        keep_default_na=False,
        na_values=[""],
        dtype={c: ("object" if t in ("string", "bool", "boolean") else None) for c, t in DTYPES.items()},
    )
    if list(df.columns) != COLUMNS:
        missing = [c for c in COLUMNS if c not in df.columns]
        extra = [c for c in df.columns if c not in DTYPES]
        raise ValueError(f"columns differ from the records schema: missing {missing}, unexpected {extra}")
    for col in ("example_id", "label", "pred"):
        values = df[col].dropna()
        if values.dtype.kind == "f" and len(values) and not (values % 1 == 0).all():
            raise ValueError(f"column {col} holds {values[values % 1 != 0].iloc[0]!r}, not a whole number")
    for col in ("correct", "attacked", "correct_last"):
        flags = df[col].map(_FLAGS, na_action="ignore")
        bad = df[col][flags.isna() & (df[col].notna() if col == "correct_last" else True)]
        if len(bad):
            raise ValueError(
                f"column {col} holds {bad.iloc[0]!r} in data row {bad.index[0] + 1}, not True/False"
            )
        df[col] = flags
    return coerce(df)


_FLAGS = {"True": True, "False": False, True: True, False: False}


def file_sha256(path: str | Path) -> str:
    """The hex sha256 of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def file_digest(path: str | Path, rows: int) -> dict[str, Any]:
    """What ``meta.json`` records about a records file it describes (:data:`META_RECORDS`)."""
    return {"sha256": file_sha256(path), "rows": int(rows)}


def check_digest(path: Path, digest: Any, rows: int | None) -> None:
    """``path`` holds ``rows`` rows (None: no file) and the bytes whose :func:`file_digest` is ``digest``;
    else a one-line ValueError: the file was edited, or written by an interrupted run."""
    expected = digest.get("rows") if isinstance(digest, dict) else None
    same_hash = rows is not None and isinstance(digest, dict) and file_sha256(path) == digest.get("sha256")
    if rows != expected or not same_hash:
        got = "no file" if rows is None else f"{rows} rows"
        raise ValueError(
            f"{path} does not match {META_FILE} ({got}, expected {expected}; sha256 "
            f"{'matches' if same_hash else 'differs'}): the file was modified or the run was interrupted; {RERUN}"
        )


def write_meta(meta: dict[str, Any], path: str | Path) -> Path:
    return atomic_write_json(path, meta)


def read_meta(path: str | Path) -> dict[str, Any]:
    """A JSON object file (``meta.json``, ``config.json``); {} when missing. Invalid JSON or anything but an
    object is a one-line ValueError naming the file."""
    path = Path(path)
    if not path.exists():
        return {}
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(
            f"{path} is not valid JSON ({err.msg} at line {err.lineno}); restore it or re-run the command "
            "that wrote it"
        ) from None
    except (OSError, UnicodeDecodeError) as err:
        why = " ".join(str(err).split())
        raise ValueError(
            f"{path} cannot be read ({why}); restore it or re-run the command that wrote it"
        ) from None
    if not isinstance(value, dict):
        raise ValueError(
            f"{path} holds a JSON {type(value).__name__}, not an object; restore it or re-run the command "
            "that wrote it"
        )
    return value


def read_run(run_dir: str | Path) -> tuple[pd.DataFrame, dict[str, Any]]:
    """(records, meta) of a saved run folder; ValueError naming the file when records or meta.json are
    missing or unreadable."""
    run_dir = Path(run_dir)
    records = read_records(run_dir / RECORDS_FILE)
    if not (run_dir / META_FILE).exists():
        raise ValueError(f"{run_dir / META_FILE} is missing (the records have no provenance); {RERUN}")
    return records, read_meta(run_dir / META_FILE)
