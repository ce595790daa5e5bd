"""The training summary: ``<out>/train/<dataset>/summary.csv`` (a row per model and seed) and its view.

Kept apart from the training loop so that a summary can be re-read and re-printed without torch state;
the rows come from :func:`robustbench_wave.training.runner.train_model`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pandas as pd

from robustbench_wave.core.io import atomic_write
from robustbench_wave.data import DatasetInfo
from robustbench_wave.training.runner import SUMMARY_COLUMNS

SUMMARY_CSV = "summary.csv"

log = logging.getLogger(__name__)


def write_summary(
    out: str | Path, info: DatasetInfo, rows: list[dict[str, Any]]
) -> tuple[Path, pd.DataFrame]:
    """Merge rows into ``<out>/train/<dataset>/summary.csv`` (a re-trained (model, seed) replaces its row)."""
    path = Path(out) / "train" / info.slug / SUMMARY_CSV
    table = pd.DataFrame(rows, columns=SUMMARY_COLUMNS)
    old = _read_old(path)
    if old is not None:
        table = pd.concat([old, table]).drop_duplicates(["model", "seed"], keep="last")
    table = table.sort_values(["model", "seed"]).reset_index(drop=True)
    atomic_write(path, lambda tmp: table.to_csv(tmp, index=False, float_format="%.6g"))
    return path, table


def _read_old(path: Path) -> pd.DataFrame | None:
    """The rows of an earlier summary; an unreadable one is replaced (with a warning) rather than failing
    at the end of a long training: each run's own ``config.json`` still holds its numbers."""
    if not path.exists():
        return None
    try:
        old = pd.read_csv(path)
    except (OSError, ValueError, UnicodeDecodeError) as err:  # pandas' parser errors are ValueErrors
        log.warning("replacing unreadable %s (%s); it will list only the runs of this command", path, err)
        return None
    if not {"model", "seed"} <= set(old.columns):
        log.warning("replacing %s: it has no model/seed columns; it will list only this command's runs", path)
        return None
    return old


def format_summary(table: pd.DataFrame) -> str:
    """A terminal table: accuracy in %, throughput rounded, one row per model (mean over seeds, ± std)."""
    grouped = table.groupby("model", sort=False)
    view = pd.DataFrame({
        "seeds": grouped["seed"].count(),
        "test acc %": grouped["test_accuracy"].agg(lambda s: _mean_std(100 * s)),
        "params": grouped["params"].first().map("{:,}".format),
        "tokens": grouped["tokens"].first(),
        "H": grouped["token_width"].first(),
        "GMACs": grouped["gmacs"].first().map("{:.4f}".format),
        "MACs saved %": grouped["macs_saved"].first().map(lambda v: f"{100 * v:.1f}"),
        "train img/s": grouped["train_images_per_s"].mean().round(0).astype(int),
        "eval img/s": grouped["eval_images_per_s"].mean().round(0).astype(int),
    })  # fmt: skip
    return view.to_string()


def _mean_std(values: pd.Series) -> str:
    if len(values) < 2:
        return f"{values.iloc[0]:.2f}"
    return f"{values.mean():.2f} ± {values.std(ddof=1):.2f}"
