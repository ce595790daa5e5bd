"""What makes two attack invocations the same run: :class:`RunSettings`, the suite and gradient modes chosen,
the models from outside the zoo, and the names that become folders.

Every function here only reads and checks; a bad choice is a one-line ValueError naming the flag it came
from (the attack command turns it into its exit message).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torch import nn

from robustbench_wave.attacks import Suite, list_suites, load_suite, parse_budgets, parse_suite
from robustbench_wave.core import runfolder
from robustbench_wave.core.naming import check_whole
from robustbench_wave.data import DEFAULT_DATASET
from robustbench_wave.evaluation import EvalSettings, resolve_grad_modes
from robustbench_wave.evaluation.eot import EotSettings
from robustbench_wave.evaluation.plan import CrossCheck
from robustbench_wave.evaluation.records import CONFIG_FILE
from robustbench_wave.models.compiled import CompileMode, compile_mode_from_env
from robustbench_wave.models.external import ExternalSpec, is_external, parse_normalize
from robustbench_wave.models.frontend import MODE_NAMES

#: ``--surrogate`` value that skips the transfer attack.
NO_SURROGATE = "none"

#: ``--surrogate`` value (the default) that takes the run's ``--baseline`` when one is given, else
#: :data:`AUTO_SURROGATE_MODEL` when it is trained for the data set and training seed, else :data:`NO_SURROGATE`
#: (:func:`robustbench_wave.attackrun.models.choose_surrogate`).
AUTO_SURROGATE = "auto"

#: The zoo model ``--surrogate auto`` takes when it is trained: the undefended reference of the zoo.
AUTO_SURROGATE_MODEL = "patch"

#: ``--escalation`` values: ``auto`` (the default) escalates where the gradient is lost, unhandled or masked
#: (:mod:`robustbench_wave.attackrun.run_escalation`); ``off`` reproduces an evaluation without it (its cells
#: stay marked).
ESCALATION_CHOICES = ("auto", "off")

#: The attack command's help of ``--baseline`` and ``--escalation``.
BASELINE_HELP = (
    "the run's undefended model, one of the --model values (e.g. the plain CNN beside its defended version): "
    "the transfer surrogate of --surrogate auto (so also of an escalation, docs/escalation.md) and the "
    "verdict's baseline. Default: none (zoo runs: the zoo patch, as before)"
)
ESCALATION_HELP = (
    "auto (the default): where a model's gradient is lost or unhandled (the scan) or every gradient mode "
    "fails the checklist, also run Square with 5,000 queries at every threat and budget and a transfer attack "
    "from the --baseline (docs/escalation.md); off: do not (a naive evaluation; its cells stay marked with a "
    "dagger)"
)

#: Where an attack run writes what a user reads on the terminal (results, not log messages).
Echo = Callable[[str], None]


class RunRefused(ValueError):
    """A run refused before any attack: a model that cannot be loaded as asked (missing or changed checkpoint,
    another data set), test images that cannot be loaded, a gradient mode a model does not offer, a busy run
    folder or one holding another configuration. The attack command ends with its one line; after a merge,
    a model that can no longer be loaded leaves the run reported from its records alone."""


#: ``config.json``'s ``grad_modes`` when none are asked for (each model's offered modes): the text it has
#: always had, so the configuration of a run with the default modes is what it was.
DEFAULT_GRAD_MODES = ",".join(m for m in MODE_NAMES if m in ("exact", "blocked", "bpda"))

#: Separates the parts of a gradient-mode request's text (``exact;wavelet=exact,blocked,bpda``).
PART_SEP = ";"


@dataclass(frozen=True)
class GradModeRequest:
    """``--grad-modes`` as asked: ``every`` for each model (None: each model's own offered modes) and
    ``per_model`` (a model as named by ``--model`` or by its record name -> its modes, replacing ``every``
    for it). Honoured whole or refused before any attack (:func:`resolve_model_modes`)."""

    every: tuple[str, ...] | None = None
    per_model: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def modes_for(self, reference: str, key: str) -> tuple[str, ...] | None:
        """The modes asked for the model of ``--model reference`` (record name ``key``); None: its offered."""
        given = dict(self.per_model)
        return given.get(reference, given.get(key, self.every))

    def to_text(self) -> str:
        """The request as config.json's one line (:meth:`RunSettings.to_config`; :func:`parse_grad_modes`
        reads it back): "" for none, else the modes for every model, then ``MODEL=MODES`` per model, joined by
        ';' (one model's list alone: today's text)."""
        parts = [",".join(self.every)] if self.every is not None else []
        return PART_SEP.join(parts + [f"{name}={','.join(modes)}" for name, modes in self.per_model])


#: What every model of a run is evaluated with when nothing else is chosen: :class:`EvalSettings`' own defaults,
#: except the data set and the cross-check, which runs at each threat's reference budget (``headline``).
RUN_EVALUATION = EvalSettings(dataset=DEFAULT_DATASET, cross_check=CrossCheck.HEADLINE.value)


#: The keys every run's ``config.json`` holds (:meth:`RunSettings.to_config`), and those it holds only when
#: a setting is not its default.
CONFIG_KEYS = frozenset(
    {"models", "suite", "dataset", "n_examples", "seed", "train_seed", "backend", "grad_modes", "surrogate",
     "skip_broken", "cross_check", "checkpoints", "specs"}
)  # fmt: skip
OPTIONAL_CONFIG_KEYS = frozenset(
    {"compile", "save_adversarial", "external", "eot", "eot_draws", "baseline", "escalation"}
)


@dataclass(frozen=True)
class RunSettings:
    """The choices that make two invocations the same run, each with its default and its check here: the
    attack command reads its flags' defaults from these fields and ``robustbench_wave.benchmark`` builds this
    class directly, so the two cannot disagree.

    ``evaluation`` is what each model's :func:`~robustbench_wave.evaluation.evaluate` gets (data set, back-end,
    seed, skip-broken, cross-check, EOT), less the model's record name and gradient modes, which
    :meth:`eval_settings` fills in per model; ``grad_modes`` is the request those modes are resolved from.
    Batch size, device, threads and progress bars only change how fast a run goes, so they are not part
    of it (:class:`~robustbench_wave.attackrun.RunOptions`); a run folder whose ``config.json`` holds other
    settings is refused unless overwritten.
    """

    models: list[str]
    evaluation: EvalSettings = (
        RUN_EVALUATION  # its dataset: the data set spec as given (e.g. imagefolder:PATH)
    )
    n_examples: int = 1000
    train_seed: int = 0
    grad_modes: GradModeRequest = GradModeRequest()  # as asked; each model's modes: resolve_model_modes
    surrogate: str = AUTO_SURROGATE
    compile: str = field(default_factory=lambda: compile_mode_from_env().value)  # $RBW_COMPILE, else off
    save_adversarial: bool = False
    external: tuple[ExternalSpec, ...] = ()  # the models (and surrogate) from outside the zoo
    baseline: str | None = None  # the run's undefended model (one of models): surrogate auto, the verdict
    escalation: str = ESCALATION_CHOICES[0]  # auto | off

    def __post_init__(self) -> None:
        if not self.models:
            raise ValueError("no model to attack; name at least one")
        if self.evaluation.grad_modes is not None or self.evaluation.model_name != EvalSettings.model_name:
            raise ValueError(
                "a run's evaluation settings name no model and no gradient modes (RunSettings.grad_modes)"
            )
        check_whole(self.n_examples, 1, "n_examples")
        check_whole(self.train_seed, 0, "train_seed")
        object.__setattr__(self, "compile", CompileMode.parse(self.compile).value)
        if self.escalation not in ESCALATION_CHOICES:
            raise ValueError(
                f"unknown escalation {self.escalation!r}; choose one of {list(ESCALATION_CHOICES)}"
            )

    @property
    def dataset(self) -> str:
        """The data set spec the run attacks (``--dataset``)."""
        return str(self.evaluation.dataset)

    @property
    def escalates(self) -> bool:
        return self.escalation == ESCALATION_CHOICES[0]

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
        """The ``config.json`` of the run: these settings, the suite, the checkpoint and spec hashes (the
        gradient-mode request as one line here, and only here: :meth:`GradModeRequest.to_text`)."""
        ev = self.evaluation
        optional = {"compile": self.compile} if self.compile != CompileMode.OFF.value else {}
        if self.save_adversarial:  # only when on: the config of a run without it is what it was
            optional["save_adversarial"] = True
        if self.external:  # likewise: reference, weights file, num_classes, img_size, normalisation
            optional["external"] = {e.reference: e.to_config() for e in self.external}
        optional |= (
            {"eot": ev.eot.mode} if ev.eot.mode != EotSettings.mode else {}
        )  # likewise, when not default
        optional |= {"eot_draws": ev.eot.draws} if ev.eot.draws != EotSettings.draws else {}
        optional |= {"baseline": self.key(self.baseline)} if self.baseline is not None else {}
        optional |= {"escalation": self.escalation} if not self.escalates else {}
        return {
            "models": self.models,
            "suite": {k: v for k, v in suite.to_dict().items() if k not in ("description", "source")},
            "dataset": self.dataset,
            "n_examples": self.n_examples,
            "seed": ev.seed,
            "train_seed": self.train_seed,
            "backend": ev.backend,
            "grad_modes": self.grad_modes.to_text() or DEFAULT_GRAD_MODES,
            "surrogate": self.surrogate,
            "skip_broken": ev.skip_broken,
            "cross_check": ev.cross_check,
            "checkpoints": hashes,
            "specs": specs or {},
        } | optional

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> tuple[RunSettings, Suite]:
        """The settings and suite a run's ``config.json`` records (:meth:`to_config`'s inverse: ``to_config`` of
        the result, with the same checkpoints, is ``config`` again); ValueError (one line) for a file that is
        not such a config. ``attack --config RUN/config.json`` reruns a run from it."""
        if not isinstance(config, Mapping) or not set(config) >= CONFIG_KEYS:
            missing = (
                sorted(CONFIG_KEYS - set(config)) if isinstance(config, Mapping) else sorted(CONFIG_KEYS)
            )
            raise ValueError(f"not a run's config.json: it lacks {missing}")
        unknown = sorted(set(config) - CONFIG_KEYS - OPTIONAL_CONFIG_KEYS)
        if unknown:
            raise ValueError(f"config.json has keys no run writes: {unknown}")
        eot = EotSettings(
            config.get("eot", EotSettings.mode), int(config.get("eot_draws", EotSettings.draws))
        )
        evaluation = dataclasses.replace(
            RUN_EVALUATION, dataset=config["dataset"], backend=config["backend"], seed=int(config["seed"]),
            skip_broken=bool(config["skip_broken"]), cross_check=config["cross_check"], eot=eot,
        )  # fmt: skip
        text = str(config["grad_modes"])
        settings = cls(
            list(config["models"]),
            evaluation,
            n_examples=int(config["n_examples"]),
            train_seed=int(config["train_seed"]),
            grad_modes=GradModeRequest() if text == DEFAULT_GRAD_MODES else parse_grad_modes(text),
            surrogate=str(config["surrogate"]),
            compile=str(config.get("compile", CompileMode.OFF.value)),
            save_adversarial=bool(config.get("save_adversarial", False)),
            external=tuple(ExternalSpec.from_config(e) for e in config.get("external", {}).values()),
            baseline=config.get("baseline"),
            escalation=str(config.get("escalation", ESCALATION_CHOICES[0])),
        )
        return baseline_reference(settings), _recorded_suite(config["suite"])

    def eval_settings(self, model_name: str, dataset: Any, modes: Sequence[str] | None) -> EvalSettings:
        """What :func:`~robustbench_wave.evaluation.evaluate` computes for one model of this run (``dataset``:
        its loaded ``DatasetInfo``; ``modes``: the model's resolved gradient modes, :func:`resolve_model_modes`)."""
        return dataclasses.replace(
            self.evaluation,
            model_name=model_name,
            dataset=dataset,
            grad_modes=None if modes is None else tuple(modes),
        )


def _recorded_suite(data: Mapping[str, Any]) -> Suite:
    """The suite a config.json records (its entries at its budgets); a shipped suite's name brings back its
    description and source file, which config.json leaves out, so a rerun's meta.json is the run's."""
    suite = parse_suite(data, source=CONFIG_FILE)
    if suite.name not in list_suites():
        return suite
    shipped = load_suite(suite.name)
    return dataclasses.replace(suite, description=shipped.description, source=shipped.source)


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


def parse_grad_modes(text: str | Sequence[str]) -> GradModeRequest:
    """``--grad-modes`` as a :class:`GradModeRequest`: each part (``text``, or each of the flag's occurrences,
    split at ';') is a comma list of ``MODE_NAMES`` for every model, or ``MODEL=MODES`` for one model (a part
    repeated adds to its list). ValueError for an unknown mode or a part naming none."""
    parts = [p.strip() for t in ([text] if isinstance(text, str) else text) for p in t.split(PART_SEP)]
    every: list[str] | None = None
    per_model: dict[str, list[str]] = {}
    for part in (p for p in parts if p):
        name, _, modes_text = part.rpartition("=")  # a mode has no '=': a model name may
        modes = [m.strip() for m in modes_text.split(",") if m.strip()]
        if not modes or (name == "" and "=" in part):
            raise ValueError(
                f"--grad-modes {part!r} names no gradient mode; give MODES or MODEL=MODES, MODES from "
                f"{list(MODE_NAMES)}"
            )
        bad = sorted(set(modes) - set(MODE_NAMES))
        if bad:
            raise ValueError(f"unknown --grad-modes {bad}; choose from {list(MODE_NAMES)}")
        if name:
            per_model[name.strip()] = list(dict.fromkeys([*per_model.get(name.strip(), []), *modes]))
        else:
            every = list(dict.fromkeys([*(every or []), *modes]))
    if every is None and not per_model and not isinstance(text, str):
        raise ValueError(f"--grad-modes names no gradient mode; choose from {list(MODE_NAMES)}")
    return GradModeRequest(
        None if every is None else tuple(every), tuple((n, tuple(m)) for n, m in per_model.items())
    )


def check_grad_mode_models(settings: RunSettings) -> None:
    """Every model a ``MODEL=MODES`` part of ``settings.grad_modes`` names is a ``--model`` (as given or by its
    record name)."""
    known = {*settings.models, *(settings.key(m) for m in settings.models)}
    unknown = [name for name, _ in settings.grad_modes.per_model if name not in known]
    if unknown:
        raise ValueError(
            f"--grad-modes names model(s) {unknown} that are not attacked; the --model(s): "
            f"{sorted(dict.fromkeys(settings.key(m) for m in settings.models))}"
        )


def resolve_model_modes(settings: RunSettings, models: dict[str, nn.Module]) -> dict[str, list[str]]:
    """Record name -> the gradient modes its model is attacked under: those ``settings.grad_modes`` asks for
    it, refused (ValueError
    naming the modes the model offers) when it does not offer one; each model's offered modes when none are
    asked. ``models``: the loaded models by record name."""
    out = {}
    for reference in settings.models:
        key = settings.key(reference)
        asked = settings.grad_modes.modes_for(reference, key)
        try:
            out[key] = resolve_grad_modes(models[key], asked)
        except ValueError as err:
            raise ValueError(f"--grad-modes {','.join(asked or ())} on --model {reference}: {err}") from None
    return out


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
    if settings.baseline is not None and settings.baseline not in settings.models:
        raise ValueError(
            f"--baseline {settings.baseline} is not a --model of this run; give one of {settings.models} "
            "(the baseline is attacked like every model, and is the transfer surrogate of --surrogate auto)"
        )


def baseline_reference(settings: RunSettings) -> RunSettings:
    """``--baseline`` may name a model by its record name (``--name``, ``ext-FACTORY-<hash>``) as well as by
    its ``--model`` reference: the settings keep the reference."""
    by_key = {settings.key(m): m for m in settings.models}
    if settings.baseline is None or settings.baseline in settings.models or settings.baseline not in by_key:
        return settings
    return dataclasses.replace(settings, baseline=by_key[settings.baseline])


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
    names: dict[str, str] | None = None  # --model reference -> its --name (the record name)


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
    weights, names = flags.weights or {}, flags.names or {}
    specs = tuple(
        ExternalSpec(
            ref,
            _absolute(weights.get(ref, surrogate_weights if ref == flags.surrogate else None)),
            flags.num_classes,
            flags.img_size,
            flags.normalize,
            names.get(ref),
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


class OwnedByModel(argparse.Action):
    """A flag that belongs to the external model given just before it (``--weights FILE``, ``--name NAME``
    after ``--model``; the gallery's ``--weights`` after ``--defence``: ``owner``, the owning list's dest, and
    ``kinds``, how its external references are written): {reference: value}, one value per model."""

    def __init__(
        self, *args: Any, owner: str = "model", kinds: str = "timm: or FACTORY", **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.owner, self.kinds = owner, kinds

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, _: Any = None
    ) -> None:
        flag, models = self.option_strings[0], getattr(namespace, self.owner, None) or []
        if not models or not is_external(models[-1]):
            parser.error(f"{flag} {values} must follow the {self.kinds} --{self.owner} it belongs to")
        owned = dict(getattr(namespace, self.dest) or {})
        if owned.get(models[-1], values) != values:
            parser.error(f"--{self.owner} {models[-1]} has two {flag}; give it one")
        setattr(namespace, self.dest, owned | {models[-1]: values})


def normalize_arg(text: str) -> str:
    """``--normalize``'s argument type: :func:`parse_normalize`, its error worded for argparse."""
    try:
        return parse_normalize(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err).removeprefix(f"--normalize {text!r}: ")) from None


def add_external_flags(parser: argparse.ArgumentParser) -> None:
    """The attack command's flags about models from outside the zoo: ``--weights`` and ``--name`` (each
    belongs to the ``--model`` just before it) and ``--normalize``."""
    parser.add_argument(
        "--weights",
        action=OwnedByModel,
        default=None,
        metavar="FILE",
        help="safetensors weights of the timm: or FACTORY --model just before it, loaded strictly (every "
        "tensor, exact shapes; never pickle); their sha256 joins config.json, so changed weights are a new "
        "configuration. Needed unless the model has no parameters or buffers",
    )
    parser.add_argument(
        "--name",
        action=OwnedByModel,
        default=None,
        metavar="NAME",
        help="the record name of the timm: or FACTORY --model just before it, used in records, tables, the "
        "report and the run folder's name (default timm-ARCH / ext-FACTORY-<8 hex>); letters, digits, '.', "
        "'_' and '-'",
    )
    parser.add_argument(
        "--normalize",
        type=normalize_arg,
        default=None,
        metavar="MEAN,STD",
        help="external models: input standardisation put in front of the model, so attacks still see [0,1] "
        "images: 'cfg' = timm's pretrained_cfg mean/std (the default for timm:), 'data' = the data set's "
        "training statistics, 'none' (the default for a factory), or MEAN,STD (per channel joined by '/', "
        "e.g. 0.485/0.456/0.406,0.229/0.224/0.225)",
    )


def add_request_flags(parser: argparse.ArgumentParser) -> None:
    """The attack command's flags of what is asked of the suite: ``--grad-modes``, ``--eps``, ``--reference-eps``
    (as everywhere, a list is the repeated flag or a comma list: the parts are split by the parsers here)."""
    parser.add_argument(
        "--grad-modes",
        action="append",
        default=None,
        metavar="[MODEL=]MODES",
        help="gradient rules to attack under (exact, blocked, bpda; or bpda-assignment: BPDA through Token Pooling's "
        "cluster assignment alone, every other front-end exact), a comma list or the flag repeated. MODES alone "
        "applies to every model; MODEL=MODES to one model (named as by --model or by its record name), e.g. "
        "--grad-modes wavelet=exact,blocked,bpda. A mode a model does not offer is refused before any attack, "
        "naming the modes it offers. Default (no flag, or a model no MODEL= part names when no MODES alone is "
        "given): every mode each model offers: exact, blocked and bpda through a fixed front-end; exact and bpda "
        "where automatic BPDA finds operations that cut the input gradient; exact only for the rest",
    )
    parser.add_argument(
        "--eps",
        action="append",
        default=None,
        metavar="THREAT=EPS",
        help="attack at these budgets instead of the suite's grid, e.g. --eps Linf=8/255 --eps L2=0.5 (fractions "
        "accepted; several budgets of a threat: repeat it, or Linf=2/255,4/255). Only the threats named are run: "
        "the suite's attacks of other threats are left out, so that tables, verdict and export speak only of budgets "
        "you chose (name every threat you want). Refused: a threat "
        "the suite (after --attacks) has no attack for, L-inf and L0 budgets outside (0, 1], non-positive ones. "
        "The reference budget (verdict, checklist, export, --cross-check headline) is each threat's largest, or "
        "--reference-eps. Default: the suite's grid and its declared reference (else the grid's middle)",
    )
    parser.add_argument(
        "--reference-eps",
        action="append",
        default=None,
        metavar="THREAT=EPS",
        help="with --eps: the budget of a threat the verdict, checklist and export speak of (one of its --eps "
        "budgets; default its largest)",
    )


def suite_at_budgets(suite: Suite, eps: Sequence[str] | None, reference_eps: Sequence[str] | None) -> Suite:
    """The suite at the ``--eps`` budgets (and ``--reference-eps``): :meth:`Suite.with_budgets`; as written
    without them. ValueError naming the flag on bad input."""
    if eps is None:
        if reference_eps is not None:
            raise ValueError("--reference-eps chooses among --eps budgets: give --eps too")
        return suite
    reference = parse_budgets(reference_eps, "--reference-eps") if reference_eps is not None else {}
    if any(len(v) > 1 for v in reference.values()):
        raise ValueError("--reference-eps: give one budget per threat")
    return suite.with_budgets(parse_budgets(eps), {t: v[0] for t, v in reference.items()})
