"""What one evaluation will run, decided before any attack: the settings it shares and the suite's plan.

:class:`EvalSettings` holds the choices that change an evaluation's records (the rest of what :func:`evaluate`
takes is its inputs, :class:`Examples` once checked, and how fast it runs); :class:`Plan` resolves the suite for a data set once (budgets per
threat and per attack, back-ends, the attacks that cannot run and why), so the loop, the chunk fingerprint
and ``meta.json`` all read the same decisions. :func:`check_budgets` is the part of that resolution a caller can run before it has any images
(the attack command, before it writes anything).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import torch
from torch import nn

from robustbench_wave.attacks import BACKENDS, AttackEntry, AttackKind, EntryFit, Suite, Threat, fit_entry
from robustbench_wave.core.naming import check_whole, parse_enum
from robustbench_wave.evaluation.eot import EotSettings
from robustbench_wave.evaluation.metrics import EPS_TOL, middle_budget

log = logging.getLogger(__name__)
SHARED = "shared"  # chunk label of an attack run once for every gradient mode

#: Examples per forward / backward pass, wherever a caller does not choose: the attack command, the Python API,
#: :func:`evaluate`, the checklist and the re-audit. Memory only: records do not depend on it.
DEFAULT_BATCH_SIZE = 128


class CrossCheck(str, Enum):
    """Where every other back-end of a gradient attack also runs, on the points the primary one attacked.

    Its breaks count (the worst case is the union over back-ends; records name each back-end's attack
    ``attack@backend``): ``headline`` = the reference budget of each threat (the verdict's budget: the
    suite's declared one, else the middle of its grid, :meth:`Plan.reference`), ``all`` = every budget, ``off`` = only the primary back-end.
    """

    OFF = "off"
    HEADLINE = "headline"
    ALL = "all"

    @classmethod
    def parse(cls, value: bool | str | CrossCheck) -> CrossCheck:
        """``True`` = ``all`` and ``False`` = ``off`` (the switch this setting grew from)."""
        if isinstance(value, bool):
            return cls.ALL if value else cls.OFF
        return parse_enum(cls, value, "cross-check setting")


@dataclass(frozen=True)
class EvalSettings:
    """What one :func:`evaluate` call computes: every field can change its records.

    How fast and where it runs (batch size, device, progress bar, chunk cache) and what it is given beside
    the images (surrogate, example ids, provenance) are :func:`evaluate`'s keyword arguments instead, so a
    caller can tell at a glance which choices make two evaluations the same.
    """

    model_name: str = "model"  # the records' model column
    dataset: Any = None  # a DatasetInfo or its name (None: "custom"): picks the suite's eps block
    grad_modes: tuple[str, ...] | None = (
        None  # None: each mode the model offers; else exactly these (or refused)
    )
    backend: str = "auto"
    seed: int = 0
    skip_broken: bool = True
    cross_check: str = CrossCheck.OFF.value  # a CrossCheck value (True / False are read as all / off)
    eot: EotSettings = field(default_factory=EotSettings)  # EOT and K-draw votes for randomised models

    def __post_init__(self) -> None:
        object.__setattr__(self, "cross_check", CrossCheck.parse(self.cross_check).value)
        if self.grad_modes is not None:
            object.__setattr__(self, "grad_modes", tuple(self.grad_modes))
        if self.backend != "auto" and self.backend not in BACKENDS:
            raise ValueError(f"unknown backend {self.backend!r}; choose auto or one of {list(BACKENDS)}")
        check_whole(self.seed, 0, "seed")

    @property
    def dataset_name(self) -> str:
        """The data set's name as recorded ("custom" when none is given)."""
        return str(getattr(self.dataset, "name", self.dataset) if self.dataset is not None else "custom")

    @property
    def num_classes(self) -> int | None:
        """The data set's classes when known (a DatasetInfo): what targeted attacks aim at."""
        return getattr(self.dataset, "num_classes", None)


@dataclass(frozen=True, eq=False)
class Examples:
    """The checked inputs of one evaluation: float images in [0,1] and int64 labels on the CPU, and each
    image's id in the whole run (what seeds its attacks and names its records)."""

    images: torch.Tensor
    labels: torch.Tensor
    ids: torch.Tensor

    def __len__(self) -> int:
        return len(self.labels)

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(images, labels, ids), the order their digest (``data_sha256``, the chunk fingerprint) hashes."""
        return self.images, self.labels, self.ids


def check_budgets(suite: Suite, dataset: Any, shape: tuple[int, ...]) -> dict[str, list[float]]:
    """The budgets per threat the suite uses for ``dataset``, checked for images of ``shape`` (C, H, W).

    No two images in [0,1]^(C*H*W) lie further apart than its diameter sqrt(C*H*W), so a larger L2 budget
    cannot bind and is a typo (8 for 8/255); the command line calls this before it writes anything.
    """
    threat_eps = suite.resolved_eps(dataset)
    diameter = math.sqrt(math.prod(shape))
    for entry in suite.attacks:
        if entry.threat != Threat.L2.value:
            continue
        too_big = [e for e in suite.entry_eps(entry, dataset) if e > diameter]
        if too_big:
            raise ValueError(
                f"attack entry {entry.name!r} of suite {suite.name!r}: L2 budget eps = {too_big[0]:g} exceeds "
                f"sqrt(C*H*W) = {diameter:.4g}, the largest distance between {'x'.join(map(str, shape))} "
                f"images in [0,1]; lower it in {suite.source or 'the suite'}"
            )
    return threat_eps


def reference_budgets(suite: Suite, dataset: Any, threat_eps: dict[str, list[float]]) -> dict[str, float]:
    """Threat -> its reference budget: the one ``suite`` declares for ``dataset``, else the middle of the
    threat's grid (:func:`~robustbench_wave.evaluation.metrics.middle_budget`)."""
    out = {}
    for threat, grid in threat_eps.items():
        ref = suite.reference_eps(threat, dataset)
        ref = ref if ref is not None else middle_budget(grid)
        if ref is not None:
            out[threat] = ref
    return out


@dataclass(frozen=True)
class CrossPlan:
    """The other back-ends of one gradient attack and the budgets at which they run beside the primary."""

    backends: list[str]
    eps: list[float]

    @classmethod
    def make(
        cls,
        entry: AttackEntry,
        primary: str,
        entry_eps: Sequence[float],
        reference: dict[str, float],
        setting: str,
    ) -> CrossPlan | None:
        """None when nothing runs: cross-check off, no other back-end that honours the entry, or (headline)
        the entry not attacked at its threat's reference budget (``reference``: threat -> budget)."""
        setting = CrossCheck.parse(setting).value
        others = [b for b in entry.able_backends() if b != primary]
        if setting == CrossCheck.OFF.value or not entry.spec.grad_dependent or not others:
            return None
        eps = list(entry_eps)
        if setting == CrossCheck.HEADLINE.value:
            ref = reference.get(entry.threat)
            eps = [e for e in eps if ref is not None and math.isclose(e, ref, abs_tol=EPS_TOL)]
        return cls(others, eps) if eps else None


@dataclass(frozen=True)
class Plan:
    """What will run: the suite's entries with their back-ends and budgets, and what is skipped and why.

    ``skipped`` are entries no model of the evaluation runs (a transfer attack without a surrogate; meta.json's
    ``attacks``); ``not_applicable`` and ``resolved`` are this model's: entries it cannot run, and entries run
    with a setting chosen for it (:func:`~robustbench_wave.attacks.fit_entry`), both attack name -> why, in
    the model's ``meta.json`` entry (:meth:`model_notes`).
    """

    suite: Suite
    dataset: Any  # a DatasetInfo, its name or None: picks the suite's eps block
    threat_eps: dict[str, list[float]]  # the grid per threat (the worst case's columns)
    entry_eps: dict[str, Any]  # attack name -> its budgets (ascending)
    backends: dict[str, str]  # attack name -> back-end
    entries: list[AttackEntry]  # the attacks after clean that run (as they run on this model)
    skipped: dict[str, str]  # attack name -> why it does not run
    cross: dict[str, CrossPlan] = field(default_factory=dict)  # attack name -> its cross-check, if any
    not_applicable: dict[str, str] = field(default_factory=dict)  # attack name -> why this model skips it
    resolved: dict[str, str] = field(default_factory=dict)  # attack name -> what was chosen for this model

    @classmethod
    def make(
        cls,
        suite: Suite,
        dataset: Any,
        backend: str,
        has_surrogate: bool,
        images: torch.Tensor,
        cross_check: str = CrossCheck.OFF.value,
        *,
        model: nn.Module | None = None,
        model_name: str = "model",
    ) -> Plan:
        """Resolve ``suite`` for ``dataset`` (and ``model``, when given: :func:`fit_entry`); transfer attacks
        are skipped without a surrogate. Each entry skipped or resolved is logged once, naming the model."""
        threat_eps = check_budgets(suite, dataset, tuple(images.shape[1:]))
        skipped: dict[str, str] = {}
        not_applicable: dict[str, str] = {}
        resolved: dict[str, str] = {}
        num_classes = getattr(dataset, "num_classes", None)
        entries = []
        for e in suite.attacks[1:]:
            if e.kind == AttackKind.TRANSFER and not has_surrogate:
                skipped[e.name] = "no surrogate model given"
                log.warning(
                    "skipping %s: transfer attacks need a surrogate model (surrogate=... / --surrogate)",
                    e.name,
                )
                continue
            fit = EntryFit(e) if model is None else fit_entry(e, model, images.shape, num_classes)
            if fit.entry is None:
                not_applicable[e.name] = str(fit.note)
                log.warning("skipping %s on %s: %s", e.name, model_name, fit.note)
                continue
            if fit.note is not None:
                resolved[e.name] = fit.note
                log.warning("%s on %s: %s", e.name, model_name, fit.note)
            entries.append(fit.entry)
        backends = {e.name: e.resolve_backend(backend) for e in suite.attacks}
        entry_eps = {e.name: suite.entry_eps(e, dataset) for e in suite.attacks}
        reference = reference_budgets(suite, dataset, threat_eps)
        cross = {
            e.name: c
            for e in entries
            if (c := CrossPlan.make(e, backends[e.name], entry_eps[e.name], reference, cross_check))
        }
        return cls(
            suite, dataset, threat_eps, entry_eps, backends, entries, skipped, cross, not_applicable, resolved
        )

    def declared_reference(self) -> dict[str, float]:
        """The reference budgets the suite declares for this data set (meta.json's ``dataset.reference``,
        written only when there are some: :func:`robustbench_wave.evaluation.metrics.reference_eps` reads
        them, else takes the middle of the grid)."""
        return self.suite.declared_reference(self.dataset)

    def model_notes(self) -> dict[str, Any]:
        """What the model's ``meta.json`` entry says about this plan: ``{"plan": {"not_applicable": ...,
        "resolved": ...}}`` with the non-empty ones, {} when every entry runs as written (meta unchanged)."""
        notes = {k: v for k, v in (("not_applicable", self.not_applicable), ("resolved", self.resolved)) if v}
        return {"plan": notes} if notes else {}

    def chunk_modes(self, entry: AttackEntry, modes: list[str]) -> list[str]:
        """The chunks of an entry: one per gradient mode if it differentiates the target, else one shared."""
        return modes if entry.spec.grad_dependent else [SHARED]

    def n_steps(self, modes: list[str]) -> int:
        """Progress-bar length: one step per (entry, chunk, eps)."""
        return sum(len(self.entry_eps[e.name]) * len(self.chunk_modes(e, modes)) for e in self.entries)
