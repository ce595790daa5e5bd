"""The attack command's flags as a run's settings: built from the flags (:func:`settings_from_args`), or read
back from a run folder's ``config.json`` (``attack --config RUN/config.json``: :func:`read_config_flag`), the
rerun then checked to be that run, checkpoints included (:func:`check_rerun`)."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from robustbench_wave.attackrun.settings import (
    ExternalFlags,
    GradModeRequest,
    RunRefused,
    RunSettings,
    baseline_reference,
    external_specs,
    parse_grad_modes,
)
from robustbench_wave.attacks import Suite
from robustbench_wave.evaluation.eot import EotSettings
from robustbench_wave.models.intake import one_line

#: The flags (argparse destinations) that set a :class:`RunSettings` field of the same name.
SETTINGS_FLAGS = (
    "n_examples", "train_seed", "surrogate", "compile", "save_adversarial", "baseline", "escalation",
)  # fmt: skip
#: The attack command's flags that choose what a run is, all of which a config.json gives: refused beside
#: ``--config``.
RUN_FLAGS = (
    "model", "weights", "surrogate_weights", "num_classes", "img_size", "normalize", "name", "suite", "attacks",
    "dataset", "seed", "backend", "cross_check", "eot", "eot_draws", "grad_modes", "eps", "reference_eps",
    "skip_broken", *SETTINGS_FLAGS,
)  # fmt: skip


def settings_from_args(args: argparse.Namespace) -> RunSettings:
    """The run the attack command's flags ask for; ValueError (one line) for a bad combination."""
    if args.model is None:
        raise ValueError("name a model to attack (--model NAME), or rerun a run (--config RUN/config.json)")
    flags = ExternalFlags(
        args.model, args.surrogate, args.weights, args.surrogate_weights, args.num_classes, args.img_size,
        args.normalize, args.name,
    )  # fmt: skip
    evaluation = dataclasses.replace(
        RunSettings.evaluation, dataset=args.dataset, backend=args.backend, seed=args.seed,
        skip_broken=args.skip_broken, cross_check=args.cross_check, eot=EotSettings(args.eot, args.eot_draws),
    )  # fmt: skip
    named = {name: getattr(args, name) for name in SETTINGS_FLAGS}
    modes = parse_grad_modes(args.grad_modes) if args.grad_modes else GradModeRequest()
    settings = RunSettings(args.model, evaluation, grad_modes=modes, external=external_specs(flags), **named)
    return baseline_reference(settings)


def read_config_flag(
    args: argparse.Namespace, defaults: argparse.Namespace
) -> tuple[RunSettings, Suite, dict[str, Any]]:
    """``attack --config``: :func:`read_config` of ``args.config``; ValueError (one line) for a flag given beside
    it (a value other than its default, ``defaults``) that would make the rerun another run."""
    given = [f"--{n.replace('_', '-')}" for n in RUN_FLAGS if getattr(args, n) != getattr(defaults, n)]
    if given:
        raise ValueError(
            f"--config {args.config} gives the run's settings; drop {', '.join(given)} (or attack without "
            "--config to make another run)"
        )
    return read_config(args.config)


def read_config(path: str | Path) -> tuple[RunSettings, Suite, dict[str, Any]]:
    """The settings and suite ``path`` (a run's config.json) records, and the file's contents; ValueError (one
    line, naming the file) for a file that cannot be read or is not a run's config."""
    try:
        config = json.loads(Path(path).read_text(encoding="utf-8"))
        settings, suite = RunSettings.from_config(config)
    except (OSError, ValueError) as err:  # JSONDecodeError is a ValueError
        raise ValueError(f"--config {path}: {one_line(err)}") from None
    return settings, suite, config


def check_rerun(path: str | Path, recorded: dict[str, Any], config: dict[str, Any]) -> None:
    """:class:`RunRefused` unless the rerun's ``config`` is the ``recorded`` one (checkpoints included), naming
    the keys that differ and what to do."""
    changed = sorted(k for k in recorded.keys() | config.keys() if recorded.get(k) != config.get(k))
    if changed:
        raise RunRefused(
            f"--config {path}: this rerun is not that run: {', '.join(changed)} differ (a retrained "
            "checkpoint changes 'checkpoints'; point --results-dir at the models it was run with)"
        )
