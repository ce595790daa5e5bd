"""The last step of an attack run: the gradient-masking checklist, energy, figures, verdict and report.md
(:func:`robustbench_wave.attackrun.measure.measure_run`), after the run's records are written, or later
for a run joined from ``--shard`` jobs, whose models and test images are then reloaded and checked.

When every gradient mode of a model failed the checklist, the run escalates
(:func:`robustbench_wave.attackrun.run_escalation.after_checklist`): its records grow by the escalation's rows,
and the checklist, verdict and report are computed again from them. The tables are then written again with
the checklist's marks (:func:`robustbench_wave.reporting.tables.write_tables`), and the table is printed: the
attack command prints it here, once, with its marked cells and legend, never the suite's unmarked one before it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from robustbench_wave.analysis.diagnostics import DIAGNOSTICS_SAMPLE, DIAGNOSTICS_STEPS
from robustbench_wave.attackrun.measure import measure_run
from robustbench_wave.attackrun.models import Loaded, load_model, reload_models
from robustbench_wave.attackrun.run_escalation import Surrogate, after_checklist
from robustbench_wave.attackrun.settings import NO_SURROGATE, RUN_EVALUATION, Echo
from robustbench_wave.core.distributed import DistContext, resolve_device
from robustbench_wave.core.naming import check_whole
from robustbench_wave.data import LabelledImages, load_test_images
from robustbench_wave.evaluation.plan import DEFAULT_BATCH_SIZE
from robustbench_wave.evaluation.records import read_meta, read_run
from robustbench_wave.evaluation.trust import Trust
from robustbench_wave.models.external import ExternalSpec
from robustbench_wave.reporting.runs import DIAGNOSTICS_JSON, VERDICT_JSON
from robustbench_wave.reporting.tables import TABLE_FILES, UNFINISHED_CHECKLIST_NOTE, write_tables


@dataclass(frozen=True)
class FinalizeOptions:
    """How the finished run is diagnosed. The batch size and the seed are the run's own
    (``RunOptions.batch_size``, the evaluation's seed), given beside these wherever they are used."""

    diagnostics: bool = True
    n_diagnostics: int = DIAGNOSTICS_SAMPLE
    diagnostics_steps: int = DIAGNOSTICS_STEPS

    def __post_init__(self) -> None:
        if not isinstance(self.diagnostics, bool):
            raise ValueError(f"finalize option diagnostics = {self.diagnostics!r} must be true or false")
        check_whole(self.n_diagnostics, 1, "finalize option n_diagnostics")
        check_whole(self.diagnostics_steps, 1, "finalize option diagnostics_steps")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class ShardFinalize:
    """What a ``--shard`` job stores in its meta.json (``shard.finalize``) for ``report merge`` to diagnose
    the joined run as the attack command would have: the :class:`FinalizeOptions` and the run's batch size
    and seed, as one flat object (the keys every shard job has written)."""

    options: FinalizeOptions
    batch_size: int
    seed: int

    def __post_init__(self) -> None:
        check_whole(self.batch_size, 1, "finalize option batch_size")
        check_whole(self.seed, 0, "finalize option seed")

    @classmethod
    def from_dict(cls, data: Any) -> ShardFinalize:
        """The record a ``--shard`` job stored; ValueError names a bad, missing or unknown field."""
        if not isinstance(data, dict):
            raise ValueError(f"finalize options must be a JSON object, not {data!r:.60}")
        own = {f.name for f in dataclasses.fields(FinalizeOptions)}
        unknown = sorted(set(data) - own - {"batch_size", "seed"})
        if unknown:
            raise ValueError(f"unknown finalize options {unknown}")
        options = FinalizeOptions(**{k: v for k, v in data.items() if k in own})
        return cls(options, data.get("batch_size", DEFAULT_BATCH_SIZE), data.get("seed", RUN_EVALUATION.seed))

    def to_dict(self) -> dict[str, Any]:
        return self.options.to_dict() | {"batch_size": self.batch_size, "seed": self.seed}


def finalize_run(
    options: FinalizeOptions,
    run_dir: Path,
    models: dict[str, Loaded],
    data: LabelledImages,
    echo: Echo,
    *,
    batch_size: int,
    seed: int,
    surrogate: Surrogate | None = None,
    baseline: str | None = None,
    escalate: bool = True,
    ctx: DistContext | None = None,
) -> None:
    """Gradient-masking checklist, figures, verdict and report.md of the finished run (``batch_size`` and
    ``seed``: the run's); a model whose every gradient mode failed the checklist is escalated (transfer from
    ``surrogate``, the run's) and the run diagnosed again (unless not ``escalate``: ``--escalation off``);
    finally the tables with the checklist's marks (``baseline``: the verdict's), the table printed with them
    (when the checklist fails with an error, the suite's table is printed, saying so, before it propagates).

    Under torchrun (``ctx``) every rank calls it: rank 0 diagnoses and writes, and the ranks share the
    escalation (:func:`~robustbench_wave.attackrun.run_escalation.after_checklist`)."""
    ctx = ctx or DistContext()
    modules = {name: model for name, (model, _) in models.items()}

    def escalation(reports: list[dict[str, Any]] | None) -> list[str]:
        if not escalate:
            return []
        sur = surrogate or Surrogate()
        return after_checklist(run_dir, modules, data, reports, sur, batch_size=batch_size, ctx=ctx)

    if not ctx.is_main:
        escalation(None)  # rank 0 decides; this rank escalates its share
        return

    checked: dict[str, Any] = {}  # the checklist's reports by model: a second pass checks the escalated only

    def finalize(energy: bool) -> tuple[Path, list[dict[str, Any]]]:
        report = measure_run(
            run_dir, modules, data.images, data.labels, data.info, n_diagnostics=options.n_diagnostics,
            diagnostics_steps=options.diagnostics_steps, seed=seed, batch_size=batch_size,
            baseline=baseline, energy=energy, checked=checked,
        )  # fmt: skip
        return report, (read_meta(run_dir / DIAGNOSTICS_JSON) or {}).get("models", [])

    finished = False
    try:
        report, reports = finalize(energy=True)
        escalated = escalation(reports)
        if escalated:
            report, reports = _after_escalation(escalated, checked, finalize, echo)
        finished = True
    finally:
        if not finished:  # the checklist ended with an error: the suite's table, as the files hold it
            echo_table(run_dir, echo, note=UNFINISHED_CHECKLIST_NOTE)
    _finish_terminal(run_dir, reports, report, echo, baseline)


def _after_escalation(
    escalated: list[str],
    checked: dict[str, Any],
    finalize: Callable[[bool], tuple[Path, list[dict[str, Any]]]],
    echo: Echo,
) -> tuple[Path, list[dict[str, Any]]]:
    """The second pass after a checklist escalation: only the escalated models' records grew, so only they are
    checked again, and energy.csv stays (the escalation attacks at the suite's own budgets, so the energy
    PGD's budget is the first pass's)."""
    echo(f"\nescalated after the checklist (every gradient mode failed it): {', '.join(escalated)}")
    for name in escalated:
        checked.pop(name, None)
    return finalize(False)


def _finish_terminal(
    run_dir: Path, reports: list[dict[str, Any]], report: Path, echo: Echo, baseline: str | None
) -> None:
    """The tables with the checklist's marks (written, and printed), then the verdict and where the report is."""
    _write_marked_tables(run_dir, reports, echo, baseline=baseline)
    verdict = read_meta(run_dir / VERDICT_JSON) or {}
    if verdict.get("text"):
        echo(f"\nverdict: {verdict['text']}")
    echo(f"report: {report}")


def echo_table(run_dir: Path, echo: Echo, *, note: str | None = None) -> None:
    """Print the run's table.txt as written (its marked cells and legend, if any), then ``note`` (a line of
    the terminal only, never of a file), then a blank line; nothing when the run has no table.txt."""
    path = run_dir / TABLE_FILES["text"]
    if path.is_file():
        echo("\n" + path.read_text(encoding="utf-8") + (f"{note}\n" if note else ""))


def _write_marked_tables(
    run_dir: Path, reports: list[dict[str, Any]], echo: Echo, *, baseline: str | None
) -> None:
    """The run's tables with the checklist's marks (``reports``: diagnostics.json's entries), and the table
    printed: what the terminal shows of the run's numbers, its marked cells ending with ``†`` above the legend."""
    records, meta = read_run(run_dir)
    marks = dict(Trust.from_run(meta, reports).marks)
    write_tables(records, run_dir, meta=meta, marks=marks, baseline=baseline)
    echo_table(run_dir, echo)


def finalize_merged_run(
    run_dir: Path,
    config: dict[str, Any],
    results_dir: Path,
    stored: ShardFinalize,
    device: str = "auto",
    *,
    echo: Echo,
) -> None:
    """What the attack command does after writing a run, for a run joined from ``--shard`` jobs: reload its
    models (their checkpoints and specs must still be the ones attacked) and test images, then
    :func:`finalize_run`."""
    models = reload_models(config, results_dir, "since the shards were attacked; cannot diagnose")
    data = load_test_images(config["dataset"], config["n_examples"])
    dev = resolve_device(device)
    for model, _ in models.values():
        model.to(dev)
    surrogate = _surrogate(config, results_dir, models, data)
    if surrogate.model is not None:
        surrogate.model.to(dev)
    finalize_run(
        stored.options, run_dir, models, data, echo, batch_size=stored.batch_size, seed=stored.seed,
        surrogate=surrogate, baseline=config.get("baseline"), escalate=config.get("escalation", "auto") == "auto",
    )  # fmt: skip


def _surrogate(
    config: dict[str, Any], results_dir: Path, models: dict[str, Loaded], data: LabelledImages
) -> Surrogate:
    """The run's transfer surrogate under its record name (a model of the run is that very module), for an
    escalation after the checklist; none when the run has none."""
    name = config.get("surrogate") or NO_SURROGATE
    if name.lower() == NO_SURROGATE:
        return Surrogate()
    external = (config.get("external") or {}).get(name)
    spec = ExternalSpec.from_config(external) if external else None
    key = spec.slug if spec is not None else name
    loaded = models.get(key) or load_model(
        name, config["dataset"], results_dir, config["train_seed"], spec, data
    )
    return Surrogate(loaded[0], key)
