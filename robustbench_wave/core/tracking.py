"""Optional experiment tracking: TensorBoard runs rebuilt from a run's own files.

``--tensorboard DIR`` on the train and attack command lines mirrors what a run writes into TensorBoard event
files, laid out like ``results/``: ``DIR/train/<data>/<model>/seed-<s>`` (one run per training run: the
per-epoch rows of ``metrics.jsonl`` at step = epoch, the test numbers of ``config.json`` at the last epoch,
and its hyper-parameters) and ``DIR/attack/<data>/<run>`` (the terminal table and ``summary.csv`` as text),
with one run per (model, gradient mode) below it holding robust accuracy per threat and attack, at step =
the eps's position in that threat's grid (the ``eps/<threat>`` scalar gives its value).

The run's own files are the source of truth and tracking is a copy of them: every time a command opens a
TensorBoard run, it is rewritten whole from those files (the resume state's history after a kill), and the
event files it superseded are deleted once the new one is on disk, so a killed and resumed training never
shows an epoch twice; ``purge_step=0`` also makes an already-open TensorBoard drop the superseded events. A
failure to write (full disk, bad folder, a TensorBoard bug) logs one warning and turns tracking off for
that run; it never stops the run or touches its results.

TensorBoard is an optional dependency (``pip install 'robustbench_wave[tracking]'``):
:func:`check_tensorboard` refuses the flag before any work when it is missing.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import pandas as pd

log = logging.getLogger(__name__)

#: How to install what ``--tensorboard`` needs.
INSTALL_HINT = "pip install 'robustbench_wave[tracking]'"
#: The names TensorBoard gives its event files (``events.out.tfevents.<time>.<host>.<pid>.<n>``).
EVENT_PREFIX = "events.out.tfevents."
#: First words of ``metrics.jsonl`` keys that name their TensorBoard section (others go under ``train/``).
SECTIONS = ("train", "val", "test")


def check_tensorboard(flag: str = "--tensorboard") -> None:
    """ValueError naming the install command when TensorBoard cannot be imported (checked before any work)."""
    try:
        importlib.import_module("torch.utils.tensorboard")
    except ImportError as err:
        raise ValueError(f"{flag} needs the tensorboard package ({err}); {INSTALL_HINT}") from None


def train_log_dir(root: str | Path, dataset_slug: str, model: str, seed: int) -> Path:
    """The TensorBoard run of one training run (the same layout as its folder under ``results/train``)."""
    return Path(root) / "train" / dataset_slug / model / f"seed-{seed}"


def attack_log_dir(root: str | Path, dataset_slug: str, run_name: str) -> Path:
    """The TensorBoard run of one attack run (its tables); its (model, gradient mode) runs lie below."""
    return Path(root) / "attack" / dataset_slug / run_name


class TensorBoardRun:
    """One TensorBoard run, rewritten whole by this object; a no-op when ``log_dir`` is None.

    The event files already in ``log_dir`` when it opens are deleted at the first :meth:`commit` (what
    this object wrote by then supersedes them). Every call is guarded: the first failure logs a warning and
    turns the run off, because losing a copy must not lose the run it copies.
    """

    def __init__(self, log_dir: str | Path | None) -> None:
        self.log_dir = None if log_dir is None else Path(log_dir)
        self._writer: Any = None
        self._stale: list[Path] = []
        if self.log_dir is not None:
            try:
                self._writer = self._open(self.log_dir)
            except Exception as err:  # tracking is a copy: no failure of it may stop or lose the run
                self._fail(err)

    @property
    def active(self) -> bool:
        """Whether this run still writes (False when off or after a failure)."""
        return self._writer is not None

    def _open(self, log_dir: Path) -> Any:
        from torch.utils.tensorboard import SummaryWriter

        log_dir.mkdir(parents=True, exist_ok=True)
        self._stale = sorted(log_dir.glob(EVENT_PREFIX + "*"))
        return SummaryWriter(str(log_dir), purge_step=0)  # an open TensorBoard drops the stale events

    def _guard(self, action: Callable[[], None]) -> None:
        """Run ``action`` while the run is active; its first failure turns the run off."""
        if self._writer is None:
            return
        try:
            action()
        except Exception as err:  # tracking is a copy: no failure of it may stop or lose the run
            self._fail(err)

    def _fail(self, err: Exception) -> None:
        log.warning(
            "TensorBoard logging to %s failed (%s: %s); continuing without it (the run's own files are "
            "complete)", self.log_dir, type(err).__name__, err,
        )  # fmt: skip
        writer, self._writer = self._writer, None
        if writer is not None:
            try:
                writer.close()
            except Exception:  # already failing; the warning above said so
                log.debug("closing the failed TensorBoard writer of %s also failed", self.log_dir)

    def scalars(self, values: Mapping[str, float], step: int) -> None:
        """Each ``tag: value`` at ``step``."""

        def write() -> None:
            for tag, value in values.items():
                self._writer.add_scalar(tag, float(value), global_step=step)

        self._guard(write)

    def text(self, tag: str, markdown: str, step: int = 0) -> None:
        """Markdown text (TensorBoard renders it; wrap fixed-width tables with :func:`preformatted`)."""
        self._guard(lambda: self._writer.add_text(tag, markdown, global_step=step))

    def hparams(self, hparams: Mapping[str, Any], metrics: Mapping[str, float]) -> None:
        """The run's hyper-parameters for TensorBoard's HParams tab, next to ``metrics`` (tags logged as
        scalars elsewhere, so the tab shows their last values and nothing is logged twice)."""
        from torch.utils.tensorboard.summary import hparams as hparams_summary

        def write() -> None:
            clean = {k: v if isinstance(v, int | float | str | bool) else str(v) for k, v in hparams.items()}
            for summary in hparams_summary(clean, dict(metrics)):
                self._writer.file_writer.add_summary(summary)

        self._guard(write)

    def commit(self) -> None:
        """Put everything written so far on disk, then delete the event files it supersedes."""

        def write() -> None:
            self._writer.flush()
            stale, self._stale = self._stale, []
            for path in stale:
                path.unlink(missing_ok=True)

        self._guard(write)

    def close(self) -> None:
        """Commit, then release the writer (idempotent)."""
        self.commit()
        self._guard(lambda: self._writer.close())
        self._writer = None

    def __enter__(self) -> TensorBoardRun:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def preformatted(text: str) -> str:
    """Fixed-width text (a terminal table) as Markdown that TensorBoard shows unchanged."""
    return "\n".join("    " + line for line in text.splitlines())


def epoch_tag(key: str) -> str:
    """``train_loss`` -> ``train/loss``, ``val_accuracy`` -> ``val/accuracy``; ``lr`` -> ``train/lr``."""
    section, _, rest = key.partition("_")
    return f"{section}/{rest}" if section in SECTIONS and rest else f"train/{key}"


class TrainingLog(TensorBoardRun):
    """The TensorBoard run of one training run: its ``metrics.jsonl`` rows and final test numbers."""

    def epochs(self, history: Iterable[Mapping[str, Any]]) -> None:
        """Each row of ``metrics.jsonl`` (or of the resume state's history) at step = its epoch."""
        for row in history:
            numbers = {epoch_tag(k): v for k, v in row.items() if k != "epoch" and _is_number(v)}
            self.scalars(numbers, step=int(row["epoch"]))
        self.commit()

    def final(self, final: Mapping[str, Any], epochs: int, hparams: Mapping[str, Any]) -> None:
        """The finished run's test numbers (``config.json``'s ``final``) at the last epoch, and its
        hyper-parameters with those numbers in the HParams tab."""
        tests = {epoch_tag(k): final[k] for k in ("test_accuracy", "test_loss") if _is_number(final.get(k))}
        self.scalars(tests, step=epochs)
        self.hparams(hparams, tests)
        self.commit()


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def log_attack_tables(log_dir: Path, summary: pd.DataFrame, texts: Mapping[str, str]) -> None:
    """An attack run's tables: ``texts`` (Markdown, e.g. the terminal table) in ``log_dir``, and in
    ``log_dir/<model>/<grad_mode>`` the robust accuracy of ``summary`` (``summary.csv``) per (threat,
    attack) at step = eps's index in the threat's ascending grid, with ``eps/<threat>`` holding that eps
    (TensorBoard steps are whole numbers)."""
    grids = {t: sorted(g["eps"].unique()) for t, g in summary.groupby("threat", sort=False)}
    with TensorBoardRun(log_dir) as run:
        for tag, text in texts.items():
            run.text(tag, text)
        run.text("eps/grid", "\n".join(f"- {t}: {', '.join(f'{e:g}' for e in g)}" for t, g in grids.items()))
    for (model, mode), rows in summary.groupby(["model", "grad_mode"], sort=False):
        with TensorBoardRun(log_dir / str(model) / str(mode)) as run:
            for threat, grid in grids.items():
                for step, eps in enumerate(grid):
                    at = rows[(rows["threat"] == threat) & (rows["eps"] == eps)]
                    values = {
                        f"robust_accuracy/{threat}/{a}": v
                        for a, v in zip(at["attack"], at["robust_accuracy"])
                    }
                    run.scalars({**values, f"eps/{threat}": eps} if values else {}, step=step)


__all__ = [
    "INSTALL_HINT",
    "TensorBoardRun",
    "TrainingLog",
    "attack_log_dir",
    "check_tensorboard",
    "epoch_tag",
    "log_attack_tables",
    "preformatted",
    "train_log_dir",
]
