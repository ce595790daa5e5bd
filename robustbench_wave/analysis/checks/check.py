"""What a gradient-masking check is, and the one registry that lists them.

A check is a small class (after AutoAttack's ``checks.py`` and timm's model registry): a ``name``, what it
reads (:class:`Reads`: per-example records, or the model run on a subset), its thresholds as dataclass fields
with defaults, a docstring saying what a failure means, and ``run(inputs, mode) -> CheckResult``.
Decorating the class with :func:`register_check` is all it takes for :func:`run_diagnostics
<robustbench_wave.analysis.diagnostics.run_diagnostics>` to run it, for the report to show it and for the
parametrised test to demand a firing and a passing case for it.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar, TypeVar

import pandas as pd
import torch
from torch import nn

from robustbench_wave.evaluation.eot import EotPlan


class Reads(str, Enum):
    """What a check reads: per-example records, or the model itself run on the diagnostics subset."""

    RECORDS = "records"
    MODEL = "model"


@dataclass
class CheckResult:
    """One diagnostic: ``passed`` is True / False, or None when the data cannot decide (see ``meaning``)."""

    name: str
    passed: bool | None
    numbers: dict[str, Any]
    meaning: str
    grad_mode: str | None = None

    @property
    def label(self) -> str:
        return f"{self.name}[{self.grad_mode}]" if self.grad_mode else self.name

    @property
    def result(self) -> str:
        return {True: "pass", False: "FAIL", None: "n/a"}[self.passed]


@dataclass
class CheckInputs:
    """Everything a check may read; each check takes only what its ``reads`` says.

    ``records`` are the benchmark's rows of one model (None when there are none); ``subset_records`` are
    records of a small generated suite on the subset ``x, y`` in which every attack ran on every
    clean-correct point, so a record check the benchmark's records cannot decide can fall back to them;
    ``sweep_records`` are the subset's PGD at several budgets, again without skip-broken (the evidence a
    budget-monotonicity check needs). ``histories`` collects the loss curves a check measures (plotted by
    the report). ``eot`` is the run's randomness protocol (:class:`~robustbench_wave.evaluation.eot.EotPlan`):
    checks of a randomised model judge the K-draw decisions the evaluation used, not single draws.
    """

    records: pd.DataFrame | None = None
    subset_records: pd.DataFrame | None = None
    sweep_records: pd.DataFrame | None = None
    model: nn.Module | None = None
    x: torch.Tensor | None = None
    y: torch.Tensor | None = None
    num_classes: int = 0
    eps: float = 0.1  # the reference Linf budget of the subset attacks
    steps: int = 10  # PGD steps of the subset attacks
    seed: int = 0
    histories: dict[str, list[float]] = field(default_factory=dict)
    eot: EotPlan | None = None  # what the run did about randomness (None: single draws, as before EOT)

    @property
    def votes(self) -> bool:
        """The run decided this randomised model's predictions by K-draw votes (under any --eot, K > 1)."""
        return self.eot is not None and self.eot.votes

    def subset(self) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
        """The model and the subset, for checks that run the model."""
        if self.model is None or self.x is None or self.y is None:
            raise ValueError("this check runs the model: give CheckInputs(model=..., x=..., y=...)")
        return self.model, self.x, self.y


@dataclass(frozen=True)
class Check(ABC):
    """Base of every diagnostic; subclasses are frozen dataclasses whose fields are their thresholds."""

    name: ClassVar[str]
    reads: ClassVar[Reads]
    per_mode: ClassVar[bool] = True  # run once per gradient mode (else once, with grad_mode None)

    @abstractmethod
    def run(self, inputs: CheckInputs, mode: str | None) -> CheckResult:
        """Judge one gradient mode (``None`` for checks with ``per_mode = False``)."""

    def thresholds(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class RecordCheck(Check):
    """A check computed from per-example records.

    It reads the benchmark's records first; when they are missing or cannot decide (``passed is None``, e.g.
    ``skip_broken`` hid the comparison) it is computed again on the subset records, if ``subset_fallback``.
    ``numbers["source"]`` then says which records decided.
    """

    reads: ClassVar[Reads] = Reads.RECORDS
    subset_fallback: ClassVar[bool] = True

    @abstractmethod
    def judge(self, records: pd.DataFrame, mode: str) -> CheckResult:
        """The check on one set of records (one model's rows)."""

    def fallback(self, inputs: CheckInputs) -> tuple[pd.DataFrame | None, str]:
        """The records this check falls back to (the subset's) and how ``numbers["source"]`` names them."""
        sub = inputs.subset_records
        return sub, ("" if sub is None else f"subset n={sub['example_id'].nunique()}")

    def run(self, inputs: CheckInputs, mode: str | None) -> CheckResult:
        if mode is None:
            raise ValueError(f"{self.name} is judged per gradient mode: pass the mode")
        have = inputs.records is not None and not inputs.records.empty
        if not self.subset_fallback:
            if not have:
                return CheckResult(self.name, None, {}, "not measurable: no benchmark records", mode)
            return self.judge(inputs.records, mode)
        result = self.judge(inputs.records, mode) if have else None
        if result is not None and result.passed is not None:
            result.numbers = {"source": "records", **result.numbers}
            return result
        records, source = self.fallback(inputs)
        if records is None:
            return result or CheckResult(self.name, None, {}, "not measurable: no records", mode)
        result = self.judge(records, mode)
        result.numbers = {"source": source, **result.numbers}
        return result


_REGISTRY: dict[str, type[Check]] = {}
C = TypeVar("C", bound=type[Check])


def register_check(cls: C) -> C:
    """Class decorator: add a check to the registry (run in registration order)."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"{cls.__name__} needs a class attribute name = '...' to be registered")
    if name in _REGISTRY and _REGISTRY[name] is not cls:
        raise ValueError(f"a check named {name!r} is already registered ({_REGISTRY[name].__name__})")
    doc = (cls.__doc__ or "").strip()
    if not doc or doc.startswith(f"{cls.__name__}("):  # empty, or the signature @dataclass writes
        raise ValueError(f"{cls.__name__}: say in a docstring what a failure of {name!r} means")
    _REGISTRY[name] = cls
    return cls


def list_checks() -> list[str]:
    """Names of the registered checks, in the order they run."""
    return list(_REGISTRY)


def get_check(name: str) -> type[Check]:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"no check named {name!r}; registered: {', '.join(_REGISTRY)}") from None


def default_checks(overrides: Mapping[str, Mapping[str, Any]] | None = None) -> list[Check]:
    """One instance of every registered check, at its default thresholds except ``overrides``
    (check name -> {field: value}, e.g. ``{"attack_convergence": {"more": 2}}``)."""
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(_REGISTRY))
    if unknown:
        raise ValueError(f"no checks named {unknown}; registered: {', '.join(_REGISTRY)}")
    checks = []
    for name, cls in _REGISTRY.items():
        fields = {f.name for f in dataclasses.fields(cls)}
        bad = sorted(set(overrides.get(name, {})) - fields)
        if bad:
            raise ValueError(f"check {name!r} has no thresholds {bad}; it has {sorted(fields)}")
        checks.append(cls(**overrides.get(name, {})))
    return checks
