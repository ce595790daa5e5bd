"""The one attack registry: every family is declared once, every implementation registers itself.

A *family* (``pgd``, ``square``, ``lowfreq-pgd`` ...) says what an attack is: its :class:`AttackKind`, the
threat models it supports, its hyper-parameter schema (:class:`Param`; the shared ones in
:mod:`robustbench_wave.attacks.schemas`), whether it differentiates the target (``grad_dependent``: run once
per gradient mode) and its :class:`Trait` set (single-step, iterative, AutoAttack member, low-frequency ...).
Code that groups records by family (the checks, the export, the verdict) asks :func:`families_with` for a
trait instead of naming families, so a new family joins them by declaring its traits. An *implementation* is
one back-end's function with the runner contract ``fn(request: AttackRequest) -> RunOutput``, registered with
``@register_attack(family, backend=..., per_example_rng=...)``. The suite parser validates entries against
this table only, and the tests are parametrised over :func:`list_attacks`, so registering an attack is enough
to make it usable in a suite file and tested (timm's ``_registry`` / ``list_models`` is the model).
This module imports no other module of :mod:`robustbench_wave.attacks`: every one of them may import it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Any

import torch
from torch import nn

BACKENDS = ("builtin", "torchattacks", "foolbox", "art")
CLEAN = "clean"  # the family (and entry) every suite starts with: the unattacked forward pass
NO_THREAT = "none"  # the clean entry's threat


class AttackKind(str, Enum):
    """What an attack may know about the target; records store ``.value``."""

    CLEAN = "clean"
    NOISE = "noise"
    WHITE_BOX = "white-box"
    BLACK_BOX = "black-box"
    TRANSFER = "transfer"
    CORRUPTION = "corruption"  # common corruptions: average-case accuracy, never part of a worst case


class Trait(str, Enum):
    """What a family is, for the code that groups records by family (checks, export, verdict).

    Declared once in :func:`register_family` and read through :func:`families_with`, never by family name.
    """

    SINGLE_STEP = "single-step"  # one gradient step (FGSM): what every whole-ball iterative attack must beat
    ITERATIVE = "iterative"  # many gradient steps on the target
    WHOLE_BALL = "whole-ball"  # iterative, untargeted, free to use the whole ball (compared with single-step)
    LAST_ITERATE = "last-iterate"  # its builtin runner reports the last iterate (records ``correct_last``)
    AUTOATTACK = "autoattack"  # a member of AutoAttack's standard version (RobustBench's ``autoattack_acc``)
    LOW_FREQUENCY = "low-frequency"  # the perturbation lives in the coarsest low-frequency band


#: Traits that only an iterative family may have.
_NEEDS_ITERATIVE = (Trait.WHOLE_BALL, Trait.LAST_ITERATE)


class Threat(str, Enum):
    """Threat models (budgets in pixel units; L0 = fraction of pixel positions); records store ``.value``.

    ``corruption`` is no norm ball: its "budget" is the severity 1-5 of a common corruption (Hendrycks &
    Dietterich 2019), reported as accuracy per corruption and severity (:func:`is_average_case`).
    """

    LINF = "Linf"
    L2 = "L2"
    L0 = "L0"
    CORRUPTION = "corruption"


#: The severities of the ``corruption`` threat (its eps values).
CORRUPTION_SEVERITIES = (1, 2, 3, 4, 5)


def is_average_case(threat: str) -> bool:
    """True for threats measured as average accuracy per budget (corruptions): their rows never enter a worst
    case, never skip points others broke, and mark none broken."""
    return threat == Threat.CORRUPTION.value


@dataclass(frozen=True)
class Param:
    """One hyper-parameter: type, default (None = required), allowed values, minimum, and keyword strings
    accepted besides the type (e.g. ``level = "auto"`` for an int parameter)."""

    type: type
    default: Any = None
    choices: tuple[Any, ...] | None = None
    minimum: float | None = None
    keywords: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunOutput:
    """A runner's result: candidate points (audited later) and, for iterative attacks, last-iterate flags."""

    x_adv: torch.Tensor
    correct_last: torch.Tensor | None = None  # (B,) bool: the final iterate of every restart was still right


@dataclass(frozen=True)
class RunContext:
    """Evaluation-wide inputs a runner may need, the same for every request of one evaluation (what changes
    per batch or id block, such as the block's seed, is a field of :class:`AttackRequest`)."""

    seed: int = 0
    surrogate: nn.Module | None = None  # already wrapped and in attack mode
    num_classes: int | None = None  # the data set's class count; None = the width of the model's logits
    eot_rows: int = 0  # rows (draws x points) per batched EOT forward (attacks.draws); 0 = one draw each

    def class_count(self, model: nn.Module, x: torch.Tensor) -> int:
        """The number of classes targeted attacks may aim at: ``num_classes``, else the model's logit width.

        (The fallback costs one forward pass of one point; the targeted library attacks reseed themselves
        before their first random draw, so a randomised model's extra draw moves none of theirs.)
        """
        if self.num_classes is not None:
            return int(self.num_classes)
        with torch.no_grad():  # not inference_mode: a forward may take gradient steps
            return int(model(x[:1]).shape[1])


@dataclass(frozen=True, eq=False)
class AttackRequest:
    """Everything one runner call gets: the points, the budget and the suite entry's settings.

    Built per batch or id block by the evaluation (``AttackEntry.request``); ``params`` is a read-only copy
    of the entry's resolved hyper-parameters (defaults filled in), ``name`` the entry's name (it seeds the
    builtin attacks' streams), ``block_seed`` the seed of this id block's library attacks (the evaluation
    derives it per block: ``evaluation.execute.run_attack``).
    """

    model: nn.Module  # wrapped (``GradSafe``) and in attack mode
    images: torch.Tensor  # (B, C, H, W) in [0, 1], on the attack's device
    labels: torch.Tensor  # (B,)
    ids: torch.Tensor  # (B,) example ids: the builtin attacks' per-example seeds
    eps: float
    threat: str
    params: Mapping[str, Any]
    name: str
    family: str
    context: RunContext
    block_seed: int = 0  # seed for library attacks (torchattacks, ART) of this id block

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))


Runner = Callable[[AttackRequest], RunOutput]
# (threat, params) -> None if the implementation honours these settings, else a one-line reason it cannot
Rejects = Callable[[str, Mapping[str, Any]], str | None]


@dataclass(frozen=True)
class RunnerSpec:
    """One registered implementation of a family."""

    family: str
    backend: str
    fn: Runner
    per_example_rng: bool  # True: results depend only on each example (batch freely); False: use id blocks
    rejects: Rejects | None = None  # settings this back-end cannot honour (e.g. a loss its library lacks)

    def rejection(self, threat: str, params: Mapping[str, Any]) -> str | None:
        """Why this implementation cannot run an entry with these settings, or None if it can.

        A cross-check must skip (and a pinned back-end must refuse) such an entry rather than run a
        different attack under the same name; the runner itself raises the same reason as a ValueError.
        """
        return None if self.rejects is None else self.rejects(threat, params)


@dataclass(frozen=True)
class AttackFamily:
    """What the harness knows about an attack family (its implementations live in the registry)."""

    name: str
    kind: AttackKind
    threats: tuple[str, ...]
    grad_dependent: bool  # runs once per gradient mode (else once, shared by all modes)
    traits: frozenset[Trait] = frozenset()
    params: dict[str, Param] = field(default_factory=dict)
    default_backend: str = "builtin"

    def has(self, trait: Trait) -> bool:
        return trait in self.traits

    @property
    def backends(self) -> tuple[str, ...]:
        """The default back-end first, then the other registered ones in :data:`BACKENDS` order, cyclically.

        (The cross-check runs the others in this order, so it fixes the order of their records.)
        """
        have = {b for f, b in _RUNNERS if f == self.name}
        start = BACKENDS.index(self.default_backend)
        rotated = BACKENDS[start:] + BACKENDS[:start]
        return tuple(b for b in rotated if b in have or b == self.default_backend)


_FAMILIES: dict[str, AttackFamily] = {}
_RUNNERS: dict[tuple[str, str], RunnerSpec] = {}


def register_family(
    name: str,
    *,
    kind: AttackKind,
    threats: tuple[Threat, ...] | tuple[str, ...],
    grad_dependent: bool,
    traits: tuple[Trait, ...] = (),
    params: dict[str, Param] | None = None,
    default_backend: str = "builtin",
) -> AttackFamily:
    """Declare a family once (in the module of its first implementation)."""
    if name in _FAMILIES:
        raise ValueError(f"attack family {name!r} is declared twice")
    if default_backend not in BACKENDS:
        raise ValueError(f"family {name!r}: default backend {default_backend!r} is not one of {BACKENDS}")
    family = AttackFamily(
        name,
        AttackKind(kind),
        tuple(t if t == NO_THREAT else Threat(t).value for t in threats),
        grad_dependent,
        _check_traits(name, traits, grad_dependent),
        dict(params or {}),
        default_backend,
    )
    _FAMILIES[name] = family
    return family


def _check_traits(name: str, traits: tuple[Trait, ...], grad_dependent: bool) -> frozenset[Trait]:
    """The traits as a set, refused when they contradict each other (a ValueError says which)."""
    out = frozenset(Trait(t) for t in traits)
    gradient = out & {Trait.SINGLE_STEP, Trait.ITERATIVE}
    if len(gradient) > 1:
        raise ValueError(f"family {name!r}: a family is single-step or iterative, not both")
    if gradient and not grad_dependent:
        raise ValueError(f"family {name!r}: a {next(iter(gradient)).value} attack differentiates the target")
    for trait in _NEEDS_ITERATIVE:
        if trait in out and Trait.ITERATIVE not in out:
            raise ValueError(f"family {name!r}: trait {trait.value!r} needs trait 'iterative'")
    if {Trait.WHOLE_BALL, Trait.LOW_FREQUENCY} <= out:
        raise ValueError(f"family {name!r}: a low-frequency attack does not use the whole ball")
    return out


def register_attack(
    family: str, *, backend: str, per_example_rng: bool, rejects: Rejects | None = None
) -> Callable[[Runner], Runner]:
    """Decorator: register ``fn`` as ``backend``'s implementation of the declared ``family``.

    ``rejects(threat, params)`` names the settings of the family this back-end cannot honour (see
    :meth:`RunnerSpec.rejection`); omitted, it honours all of them.
    """
    if family not in _FAMILIES:
        raise ValueError(f"declare attack family {family!r} with register_family(...) before its runners")
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {BACKENDS}")

    def wrap(fn: Runner) -> Runner:
        if (family, backend) in _RUNNERS:
            raise ValueError(f"{backend!r} implementation of {family!r} is registered twice")
        _RUNNERS[(family, backend)] = RunnerSpec(family, backend, fn, per_example_rng, rejects)
        return fn

    return wrap


def family_spec(name: str) -> AttackFamily:
    """The declared family ``name``; a ValueError lists the known ones."""
    try:
        return _FAMILIES[name]
    except KeyError:
        raise ValueError(f"unknown attack family {name!r}; known families: {', '.join(_FAMILIES)}") from None


def list_families() -> list[str]:
    return list(_FAMILIES)


def families_with(trait: Trait) -> tuple[str, ...]:
    """The declared families with ``trait``, in declaration order (what checks, export and verdict read)."""
    return tuple(f.name for f in _FAMILIES.values() if trait in f.traits)


def list_attacks() -> list[tuple[str, str]]:
    """Every registered implementation as (family, backend), families in declaration order."""
    return [(f, b) for f in _FAMILIES for b in family_spec(f).backends if (f, b) in _RUNNERS]


def get_runner(family: str, backend: str) -> RunnerSpec:
    try:
        return _RUNNERS[(family, backend)]
    except KeyError:
        have = sorted(b for f, b in _RUNNERS if f == family)
        raise ValueError(
            f"no {backend!r} implementation of attack family {family!r}; available: {have}"
        ) from None
