"""Finishing a run whose examples were attacked by ``--shard i/n`` jobs (``report merge RUN``): the merged
records, meta.json, config.json and tables in the run folder, then the diagnostics and report.md the attack
command would have written. The shards are checked and joined by
:func:`robustbench_wave.evaluation.sharding.merge_shard_folders` before anything here runs.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from robustbench_wave.attackrun.finalize import ShardFinalize, echo_table, finalize_merged_run
from robustbench_wave.attackrun.folder import discard_other_configuration, run_meta
from robustbench_wave.attackrun.settings import Echo, RunRefused
from robustbench_wave.core.io import atomic_write_json
from robustbench_wave.evaluation import records as rec
from robustbench_wave.evaluation.result import EvaluationResult
from robustbench_wave.reporting.markdown import write_report
from robustbench_wave.reporting.runs import load_run, report_path
from robustbench_wave.reporting.tables import NO_CHECKLIST_NOTE, write_tables

log = logging.getLogger(__name__)


def write_merged_run(
    run_dir: Path, merged: EvaluationResult, config: dict[str, Any], command: str
) -> dict[str, Path]:
    """Records, meta.json, then config.json (all validated before), then the tables; another
    configuration's outputs are removed first. Returns the paths written."""
    discard_other_configuration(run_dir, config)
    merged.meta["run"] = run_meta(run_dir, command, config)
    paths = merged.save(run_dir)
    atomic_write_json(run_dir / rec.CONFIG_FILE, config)
    paths |= write_tables(merged.records, run_dir, meta=merged.meta)
    return paths


def finish_merged_run(
    run_dir: Path,
    config: dict[str, Any],
    stored: ShardFinalize,
    *,
    diagnostics: bool,
    results_dir: Path,
    device: str,
    figures: bool,
    echo: Echo,
) -> None:
    """Diagnostics, energy and report.md as the attack command writes them, with the finalize options, batch
    size and seed the shards ``stored``, their models reloaded from ``results_dir``; report.md from the records alone when
    ``diagnostics`` is off, the shards ran without them, or a model cannot be loaded. The run's table is
    printed once: marked after the checklist, else plain with the note that no checklist ran."""
    if diagnostics and stored.options.diagnostics:
        try:
            finalize_merged_run(run_dir, config, results_dir, stored, device, echo=echo)
            return
        except RunRefused as err:  # a model that can no longer be loaded as attacked
            log.warning("no diagnostics (%s); writing report.md from the records", err)
    echo_table(run_dir, echo, note=NO_CHECKLIST_NOTE)  # the checklist prints the marked table; none ran
    report = write_report([load_run(run_dir)], report_path([run_dir]), figures=figures)
    echo(f"wrote {report}")
