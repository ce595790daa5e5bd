"""One attack invocation resolved before anything is written: :class:`RunOptions` (how it runs and where it
writes, never part of the configuration) and :class:`Job` (settings, suite, test images, loaded models, the
``config.json`` to write and the run folder), built by :func:`prepare_job` the same way on every rank.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from robustbench_wave.attackrun.finalize import FinalizeOptions
from robustbench_wave.attackrun.folder import run_folder
from robustbench_wave.attackrun.models import Loaded, choose_surrogate, load_run_models, model_hashes
from robustbench_wave.attackrun.settings import (
    Echo,
    RunRefused,
    RunSettings,
    check_grad_mode_models,
    check_names,
    default_run_name,
    resolve_model_modes,
)
from robustbench_wave.attacks import Suite
from robustbench_wave.core.naming import check_whole
from robustbench_wave.core.runfolder import RESULTS_ROOT
from robustbench_wave.data import LabelledImages, load_test_images
from robustbench_wave.evaluation.plan import DEFAULT_BATCH_SIZE, check_budgets
from robustbench_wave.models.autobpda import gradient_path


@dataclass(frozen=True)
class RunOptions:
    """What an invocation chooses beside its :class:`RunSettings`: where the trained models are read and the
    run is written, whether another configuration may be replaced, and speed, display and finishing choices
    that never change the records (``batch_size`` for the attacks and the checklist alike). The attack
    command reads its flags' defaults from these fields."""

    results_dir: Path = RESULTS_ROOT
    out: Path | None = None  # None: results_dir
    run_name: str | None = None
    overwrite: bool = False
    batch_size: int = DEFAULT_BATCH_SIZE
    progress: bool = True
    tensorboard: Path | None = None
    finalize: FinalizeOptions = field(default_factory=FinalizeOptions)

    def __post_init__(self) -> None:
        check_whole(self.batch_size, 1, "batch_size")
        object.__setattr__(self, "results_dir", Path(self.results_dir))
        object.__setattr__(self, "out", self.results_dir if self.out is None else Path(self.out))


@dataclass(frozen=True)
class Job:
    """One invocation's inputs, resolved and validated (the same on every rank)."""

    settings: RunSettings
    options: RunOptions
    suite: Suite
    modes: dict[str, list[str]]  # record name -> its gradient modes, resolved from settings.grad_modes
    data: LabelledImages
    models: dict[str, Loaded]
    surrogate: Loaded | None
    config: dict[str, Any]
    run_dir: Path
    command: str  # the invocation, recorded with the run (cli.command_line)
    echo: Echo  # the terminal output of the command (results, not log messages)
    surrogate_note: str | None = None  # how --surrogate auto chose (in meta.json); None: named


def load_run_data(settings: RunSettings, suite: Suite) -> LabelledImages:
    """The test images, with the suite's budgets checked against their size."""
    try:
        data = load_test_images(settings.dataset, settings.n_examples)
    except ValueError as err:
        raise RunRefused(f"cannot load {settings.dataset!r} test data: {err}") from None
    try:
        check_budgets(suite, data.info, data.image_shape)
    except ValueError as err:
        raise RunRefused(str(err)) from None
    return data


def prepare_job(
    settings: RunSettings,
    options: RunOptions,
    suite: Suite,
    command: str,
    echo: Echo,
    loaded: dict[str, Loaded] | None = None,
) -> Job:
    """Load the test images and the models (``--surrogate auto`` resolved: :func:`choose_surrogate`), resolve
    each model's gradient modes from ``settings.grad_modes`` (a mode it does not offer is refused:
    :func:`resolve_model_modes`) and choose the run folder; nothing is written here, and bad input is refused
    with one clear line (:class:`RunRefused`, a ValueError). ``loaded``:
    the models already in memory under their record names (``robustbench_wave.benchmark``), none loaded."""
    data = load_run_data(settings, suite)
    settings, surrogate_note = choose_surrogate(settings, options.results_dir, data.info)
    models, surrogate = load_run_models(settings, options.results_dir, data, loaded)
    try:
        model_modes = resolve_model_modes(settings, {key: m[0] for key, m in models.items()})
    except ValueError as err:
        raise RunRefused(str(err)) from None
    sur_key = settings.key(settings.surrogate)
    config = settings.to_config(
        suite,
        model_hashes(models, sur_key, surrogate),
        model_hashes(models, sur_key, surrogate, "spec_sha256"),
    )
    name = options.run_name or default_run_name(
        list(models), suite.name, len(data), settings.evaluation.seed, settings.train_seed
    )
    try:
        run_dir = run_folder(options.out, name, data.info, named=bool(options.run_name))
    except ValueError as err:
        raise RunRefused(str(err)) from None
    return Job(
        settings,
        options,
        suite,
        model_modes,
        data,
        models,
        surrogate,
        config,
        run_dir,
        command,
        echo,
        surrogate_note,
    )


def gradient_path_lines(job: Job) -> list[str]:
    """One terminal line per model whose input path the automatic BPDA scan read: what it found, the rule
    each operation got (or "unhandled"), and the gradient modes the run attacks it under. The command
    prints them at the default log level: they say which numbers of the table rest on which gradient."""
    lines = []
    for name, (model, _) in job.models.items():
        path = gradient_path(model)
        if path is not None:
            lines.append(
                f"{name}: gradient path: {path.summary}; attacked under {', '.join(job.modes[name])}"
            )
    return lines


def check_run(settings: RunSettings, options: RunOptions) -> None:
    """The checks of a run that need no data, before anything is loaded or written: the output root and every
    name that becomes a folder (:func:`check_names`), and the models a per-model gradient-mode request names
    (:func:`check_grad_mode_models`). ValueError naming the flag / keyword."""
    check_names(settings, options.out, options.run_name)
    check_grad_mode_models(settings)
