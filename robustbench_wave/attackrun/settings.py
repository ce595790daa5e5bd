"""What makes two attack invocations the same run: :class:`RunSettings`, the suite and gradient modes chosen,
the models from outside the zoo, and the names that become folders.

Every function here only reads and checks; a bad choice is a one-line ValueError naming the flag it came
from (the attack command turns it into its exit message).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from robustbench_wave import runfolder
from robustbench_wave.attacks import Suite, load_suite
from robustbench_wave.evaluation import EvalSettings
from robustbench_wave.evaluation.eot import DEFAULT_DRAWS, EotMode, EotSettings
from robustbench_wave.models.compiled import CompileMode
from robustbench_wave.models.external import ExternalSpec, is_external, parse_normalize
from robustbench_wave.models.frontend import MODE_NAMES

#: ``--surrogate`` value that skips the transfer attack.
NO_SURROGATE = "none"

#: ``--surrogate`` value (the default) that takes :data:`AUTO_SURROGATE_MODEL` when it is trained for the data
#: set and training seed, else :data:`NO_SURROGATE` (:func:`robustbench_wave.attackrun.models.choose_surrogate`).
AUTO_SURROGATE = "auto"

#: The zoo model ``--surrogate auto`` takes when it is trained: the undefended reference of the zoo.
AUTO_SURROGATE_MODEL = "patch"

#: Where an attack run writes what a user reads on the terminal (results, not log messages).
Echo = Callable[[str], None]


@dataclass(frozen=True)
class RunSettings:
    """The choices that make two invocations the same run.

    Batch size, device, threads and progress bars only change how fast a run goes, so they are not part
    of it; a run folder whose ``config.json`` holds other settings is refused unless overwritten.
    """

    models: list[str]
    dataset: str
    n_examples: int
    seed: int
    train_seed: int
    backend: str
    grad_modes: str
    surrogate: str
    skip_broken: bool
    cross_check: str  # a CrossCheck value
    compile: str = CompileMode.OFF.value
    save_adversarial: bool = False
    external: tuple[ExternalSpec, ...] = ()  # the models (and surrogate) from outside the zoo
    eot: str = EotMode.AUTO.value  # EOT for randomised models: auto | on | off (evaluation.eot)
    eot_draws: int = DEFAULT_DRAWS  # K draws per prediction when EOT applies

    @property
    def has_surrogate(self) -> bool:
        return self.surrogate.lower() != NO_SURROGATE

    def external_spec(self, reference: str) -> ExternalSpec | None:
        return next((e for e in self.external if e.reference == reference), None)

    def key(self, reference: str) -> str:
        """The name records, tables and folders give a ``--model`` / ``--surrogate`` (a zoo name itself)."""
        spec = self.external_spec(reference)
        return spec.slug if spec is not None else reference

    def to_config(
        self, suite: Suite, hashes: dict[str, str], specs: dict[str, str] | None = None
    ) -> dict[str, Any]:
        """The ``config.json`` of the run: these settings, the suite, the checkpoint and spec hashes."""
        optional = {"compile": self.compile} if self.compile != CompileMode.OFF.value else {}
        if self.save_adversarial:  # only when on: the config of a run without it is what it was
            optional["save_adversarial"] = True
        if self.external:  # likewise: reference, weights file, num_classes, img_size, normalisation
            optional["external"] = {e.reference: e.to_config() for e in self.external}
        optional |= {"eot": self.eot} if self.eot != EotMode.AUTO.value else {}  # likewise, when not default
        optional |= {"eot_draws": self.eot_draws} if self.eot_draws != DEFAULT_DRAWS else {}
        return {
            "models": self.models,
            "suite": {k: v for k, v in suite.to_dict().items() if k not in ("description", "source")},
            "dataset": self.dataset,
            "n_examples": self.n_examples,
            "seed": self.seed,
            "train_seed": self.train_seed,
            "backend": self.backend,
            "grad_modes": self.grad_modes,
            "surrogate": self.surrogate,
            "skip_broken": self.skip_broken,
            "cross_check": self.cross_check,
            "checkpoints": hashes,
            "specs": specs or {},
        } | optional

    def eval_settings(self, model_name: str, dataset: Any, modes: Sequence[str]) -> EvalSettings:
        """What :func:`~robustbench_wave.evaluation.evaluate` computes for one model of this run."""
        return EvalSettings(
            model_name=model_name,
            dataset=dataset,
            grad_modes=tuple(modes),
            backend=self.backend,
            seed=self.seed,
            skip_broken=self.skip_broken,
            cross_check=self.cross_check,
            eot=EotSettings(self.eot, self.eot_draws),
        )


def select_suite(suite: str, attacks: str | None) -> Suite:
    """Load a suite by name or path and keep only the comma-separated ``attacks`` (clean always stays)."""
    loaded = load_suite(suite)
    if attacks is None:
        return loaded
    names = [a.strip() for a in attacks.split(",") if a.strip()]
    if not names:
        raise ValueError(
            f"--attacks {attacks!r} names no attack; give comma-separated entries of suite {loaded.name!r}: "
            f"{[a.name for a in loaded.attacks]}"
        )
    return loaded.select(names)


def parse_grad_modes(text: str) -> list[str]:
    """The comma-separated gradient modes, each one of ``MODE_NAMES`` (the three modes and the scoped ones,
    e.g. ``bpda-assignment``)."""
    modes = [m.strip() for m in text.split(",") if m.strip()]
    if not modes:
        raise ValueError(f"--grad-modes {text!r} names no gradient mode; choose from {list(MODE_NAMES)}")
    bad = sorted(set(modes) - set(MODE_NAMES))
    if bad:
        raise ValueError(f"unknown --grad-modes {bad}; choose from {list(MODE_NAMES)}")
    return modes


def default_run_name(models: list[str], suite_name: str, n: int, seed: int, train_seed: int) -> str:
    """Folder name of a run: its models, suite, number of examples and seeds."""
    return f"{'+'.join(models)}_{suite_name}_n{n}_seed{seed}_train{train_seed}"


def check_names(settings: RunSettings, out: Path, run_name: str | None) -> None:
    """``--out`` is a writable place and every name that becomes a folder (the models' record names, the
    surrogate's, ``--run-name``) is a safe one; ValueError naming the flag otherwise."""
    runfolder.check_writable_root(out)
    for name in settings.models:
        runfolder.check_safe_name(settings.key(name), _name_of("--model", name, settings))
    if settings.has_surrogate:
        key = settings.key(settings.surrogate)
        runfolder.check_safe_name(key, _name_of("--surrogate", settings.surrogate, settings))
    if run_name is not None:
        runfolder.check_safe_name(run_name, "--run-name")


def _name_of(flag: str, reference: str, settings: RunSettings) -> str:
    """What a name check calls a model: the flag, or the record name an external reference becomes."""
    return flag if settings.external_spec(reference) is None else f"the record name of {flag} {reference}:"


@dataclass(frozen=True)
class ExternalFlags:
    """The attack command's flags about models from outside the zoo, as given."""

    models: list[str]
    surrogate: str
    weights: dict[str, str] | None = None  # --model reference -> its --weights file
    surrogate_weights: str | None = None
    num_classes: int | None = None
    img_size: int | None = None
    normalize: str | None = None


def external_specs(flags: ExternalFlags) -> tuple[ExternalSpec, ...]:
    """The ``--model``s (and ``--surrogate``) from outside the zoo with their weights and shared flags;
    flags that only external models take are refused without one (ValueError)."""
    refs = [r for r in dict.fromkeys(flags.models) if is_external(r)]
    surrogate_weights = None
    if is_external(flags.surrogate) and flags.surrogate not in refs:
        refs.append(flags.surrogate)
        surrogate_weights = flags.surrogate_weights
    elif flags.surrogate_weights is not None:
        what = "is a --model: its --weights are used" if flags.surrogate in refs else "is not external"
        raise ValueError(f"--surrogate {flags.surrogate} {what}; drop --surrogate-weights")
    shared = (
        ("--num-classes", flags.num_classes),
        ("--img-size", flags.img_size),
        ("--normalize", flags.normalize),
    )
    given = [flag for flag, value in shared if value is not None]
    if given and not refs:
        raise ValueError(f"{', '.join(given)} only apply to external models (timm:ARCH, MODULE:FACTORY)")
    weights = flags.weights or {}
    specs = tuple(
        ExternalSpec(
            ref,
            _absolute(weights.get(ref, surrogate_weights if ref == flags.surrogate else None)),
            flags.num_classes,
            flags.img_size,
            flags.normalize,
        )
        for ref in refs
    )
    slugs = [s.slug for s in specs] + [m for m in flags.models if not is_external(m)]
    if len(set(slugs)) != len(slugs):
        raise ValueError(f"--model: two models would share a name in records ({sorted(slugs)}); drop one")
    return specs


def _absolute(path: str | None) -> str | None:
    return None if path is None else os.path.abspath(path)


# ------------------------------------------------------------- the attack command's parsing of these flags


class WeightsOf(argparse.Action):
    """``--weights FILE`` belongs to the external ``--model`` given just before it: {reference: FILE}."""

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, _: Any = None
    ) -> None:
        models = getattr(namespace, "model", None) or []
        if not models or not is_external(models[-1]):
            parser.error(f"--weights {values} must follow the timm: or FACTORY --model it belongs to")
        owned = dict(getattr(namespace, self.dest) or {})
        if owned.get(models[-1], values) != values:
            parser.error(f"--model {models[-1]} has two --weights; attack each file in its own run")
        setattr(namespace, self.dest, owned | {models[-1]: values})


def normalize_arg(text: str) -> str:
    """``--normalize``'s argument type: :func:`parse_normalize`, its error worded for argparse."""
    try:
        return parse_normalize(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix(f"--normalize {text!r}: ")) from None
