"""The last step of an attack run: the gradient-masking checklist, energy, figures, verdict and report.md
(:func:`robustbench_wave.reporting.finalize.finalize_run`), after the run's records are written, or later
for a run joined from ``--shard`` jobs, whose models and test images are then reloaded and checked.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from robustbench_wave.attackrun.models import Loaded, reload_models
from robustbench_wave.attackrun.settings import Echo
from robustbench_wave.data import LabelledImages, load_test_images
from robustbench_wave.distributed import resolve_device
from robustbench_wave.evaluation.records import read_meta
from robustbench_wave.reporting.finalize import finalize_run
from robustbench_wave.reporting.runs import VERDICT_JSON


@dataclass(frozen=True)
class FinalizeOptions:
    """How the finished run is diagnosed (a ``--shard`` job stores them for ``report merge``)."""

    diagnostics: bool = True
    n_diagnostics: int = 32
    diagnostics_steps: int = 10
    batch_size: int = 128
    seed: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.diagnostics, bool):
            raise ValueError(f"finalize option diagnostics = {self.diagnostics!r} must be true or false")
        for field, minimum in (
            ("n_diagnostics", 1),
            ("diagnostics_steps", 1),
            ("batch_size", 1),
            ("seed", 0),
        ):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
                raise ValueError(f"finalize option {field} = {value!r} must be a whole number >= {minimum}")

    @classmethod
    def from_dict(cls, data: Any) -> FinalizeOptions:
        """The options a ``--shard`` job stored in its meta.json; ValueError names a bad or unknown field."""
        if not isinstance(data, dict):
            raise ValueError(f"finalize options must be a JSON object, not {data!r:.60}")
        unknown = sorted(set(data) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"unknown finalize options {unknown}")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def diagnose(
    options: FinalizeOptions, run_dir: Path, models: dict[str, Loaded], data: LabelledImages, echo: Echo
) -> None:
    """Gradient-masking checklist, figures, verdict and report.md of the finished run."""
    report = finalize_run(
        run_dir,
        {name: model for name, (model, _) in models.items()},
        data.images,
        data.labels,
        data.info,
        n_diagnostics=options.n_diagnostics,
        diagnostics_steps=options.diagnostics_steps,
        seed=options.seed,
        batch_size=options.batch_size,
    )
    verdict = read_meta(run_dir / VERDICT_JSON) or {}
    if verdict.get("text"):
        echo(f"\nverdict: {verdict['text']}")
    echo(f"report: {report}")


def finalize_merged_run(
    run_dir: Path,
    config: dict[str, Any],
    results_dir: Path,
    options: FinalizeOptions,
    device: str = "auto",
    *,
    echo: Echo,
) -> None:
    """What the attack command does after writing a run, for a run joined from ``--shard`` jobs: reload its
    models (their checkpoints and specs must still be the ones attacked) and test images, then
    :func:`diagnose`."""
    models = reload_models(config, results_dir, "since the shards were attacked; cannot diagnose")
    data = load_test_images(config["dataset"], config["n_examples"])
    dev = resolve_device(device)
    for model, _ in models.values():
        model.to(dev)
    diagnose(options, run_dir, models, data, echo)
