"""An attack run's folder: where it is, what it may hold, when another configuration may be replaced, and
the ``run`` entry of its ``meta.json``.

``OUT/attack/<data set slug>/<run name>/`` holds one configuration at a time, recorded in its
``config.json`` (:data:`~robustbench_wave.evaluation.records.CONFIG_FILE`, the one name of that file). A
folder holding another configuration is refused unless overwritten, and replacing one first removes what
it made (:data:`RUN_FILES`, :data:`RUN_FOLDERS`) and nothing else. The command that writes a folder holds
its :class:`~robustbench_wave.core.runfolder.RunLock` meanwhile.
"""

from __future__ import annotations

import logging
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from robustbench_wave.attackrun.settings import RunRefused
from robustbench_wave.core import runfolder
from robustbench_wave.core.distributed import DistContext, broadcast_object
from robustbench_wave.core.io import atomic_write_json
from robustbench_wave.data import DatasetInfo
from robustbench_wave.evaluation import records as rec
from robustbench_wave.evaluation.adversarial import ADVERSARIAL_DIR
from robustbench_wave.evaluation.sharding import SHARDS_DIR
from robustbench_wave.reporting.runs import FIGURES_DIR, REPORT_OUTPUT_FILES
from robustbench_wave.reporting.tables import TABLE_FILES

log = logging.getLogger(__name__)

#: The finished chunks of a run (or of one shard), kept so a killed run resumes.
CHUNKS_DIR = "chunks"

#: Everything in a run folder (or a ``--shard`` job's folder) that its configuration made: removed, and only
#: this, before another configuration's ``config.json`` is written (:func:`prepare_run_dir`).
RUN_FILES = (
    rec.CONFIG_FILE, rec.RECORDS_FILE, rec.META_FILE, rec.CROSSCHECK_FILE, *TABLE_FILES.values(),
    *REPORT_OUTPUT_FILES,
)  # fmt: skip
RUN_FOLDERS = (FIGURES_DIR, CHUNKS_DIR, SHARDS_DIR, ADVERSARIAL_DIR)

#: What a merge of ``--shard`` jobs replaces in their run folder: the folders of the run's outputs, never
#: the shards it reads (nor the chunks of a one-process run, which it does not write).
MERGED_RUN_FOLDERS = (FIGURES_DIR, ADVERSARIAL_DIR)

#: What to do when another run holds the folder.
LOCK_HINT = "wait for it to finish, or pass --run-name NAME for another folder"


def run_folder(out: Path, name: str, info: DatasetInfo, named: bool) -> Path:
    """``OUT/attack/<data set slug>/<run name>``: every part a safe name, the whole inside ``out``;
    ``named`` says the name came from ``--run-name`` (a ValueError names that flag)."""
    runfolder.check_safe_name(name, "--run-name" if named else "the run name (pass --run-name NAME)")
    runfolder.check_safe_name(info.slug, "the data set's slug")
    run_dir = runfolder.check_inside(out, Path(out) / "attack" / info.slug / name)
    runfolder.check_folders(run_dir, RUN_FOLDERS)
    return run_dir


def run_meta(run_dir: Path, command: str, config: dict[str, Any]) -> dict[str, Any]:
    """The ``run`` entry of a ``meta.json`` (a run's, a ``--shard`` job's, a merged run's): the folder, the
    command that reruns it and its configuration."""
    return {"run_dir": str(run_dir), "command": command, "config": config}


def _read_config(config_path: Path) -> dict[str, Any] | None:
    """The folder's ``config.json``; {} when there is none, None when it cannot be read."""
    try:
        config = rec.read_meta(config_path)
    except (ValueError, OSError):
        return None
    return config if isinstance(config, dict) else None


def prepare_run_dir(run_dir: Path, config: dict[str, Any], overwrite: bool) -> None:
    """Write ``config.json``; a folder holding another configuration is refused unless ``overwrite``.

    Called holding the folder's :class:`~robustbench_wave.core.runfolder.RunLock`. Results without a readable
    ``config.json`` count as another configuration. Replacing one first removes everything it made
    (:data:`RUN_FILES`, :data:`RUN_FOLDERS`) and nothing else, before the new ``config.json`` exists, so a run
    killed later never leaves old records or tables beside the new configuration. Raises ValueError if refused.
    """
    old = _read_config(run_dir / rec.CONFIG_FILE)
    if old == config:
        return
    if old is None or old or _holds_results(run_dir):
        if not overwrite:
            what = "a run with a different configuration" if old else "results without a readable config.json"
            raise ValueError(
                f"{run_dir} holds {what}; pass --run-name NAME for a new folder or --overwrite to replace it"
            )
        runfolder.remove_owned(run_dir, RUN_FILES, RUN_FOLDERS)
    atomic_write_json(run_dir / rec.CONFIG_FILE, config)


def _holds_results(folder: Path) -> bool:
    return any((folder / name).exists() for name in (*RUN_FILES, FIGURES_DIR))


def claim(folder: Path, config: dict[str, Any], overwrite: bool, ctx: DistContext, stack: ExitStack) -> None:
    """Lock ``folder`` for the rest of ``stack`` and write its config.json (rank 0, which writes for every
    rank); a busy folder or another configuration stops every rank with rank 0's one line."""
    refusal = None
    if ctx.is_main:
        try:
            stack.enter_context(runfolder.RunLock(folder, hint=LOCK_HINT))
            prepare_run_dir(folder, config, overwrite)
        except ValueError as err:
            refusal = str(err)
    refusal = broadcast_object(ctx, refusal)
    if refusal is not None:
        raise RunRefused(refusal)


def discard_other_configuration(run_dir: Path, config: dict[str, Any]) -> None:
    """Before a merge writes ``config``: remove another configuration's outputs from ``run_dir`` (by name:
    nothing else is touched, the shards least of all), so no stale diagnostics, energy or cross-check of it
    end up in the merged run's report."""
    old = rec.read_meta(run_dir / rec.CONFIG_FILE)
    if old and old != config:
        log.warning("%s held another configuration's results; removing them", run_dir)
        runfolder.remove_owned(run_dir, RUN_FILES, MERGED_RUN_FOLDERS)
