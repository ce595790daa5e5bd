"""Declarative attack suites (``attacks/*.toml``): which attacks, with which settings, at which budgets.

A suite file has three parts (see ``attacks/default.toml`` for a commented example):

* ``[eps.<dataset>]`` -- budgets per threat model in [0,1] pixel units, chosen by ``DatasetInfo.name``
  (``fashion-mnist``, ``cifar10``); any other data set (``imagefolder-*``, ``synthetic*``, user data) uses
  ``[eps.default]``, and a threat missing from a data set's block falls back to the default block as well.
  Values are numbers or fraction strings such as ``"8/255"`` (parsed to floats; results store numbers).
* ``[settings]`` -- ``rng_block``: library attacks whose randomness we cannot seed per example
  (torchattacks' APGD and Square, foolbox/torchattacks PGD) are called on fixed blocks of example ids, each
  with its own seed, so their results never depend on ``--batch-size``.
* ``[reference.<dataset>]`` (optional) -- the budget per threat the verdict, the checklist, the export and
  ``--cross-check headline`` speak of, chosen by data set like ``[eps.*]`` (``[reference.default]`` for the
  rest); it must be on that data set's grid. Without it a threat's reference is the lower middle of its grid
  (``evaluation.metrics.middle_budget``).
* ``[[attack]]`` entries, run in file order: ``name`` (unique), ``family`` (a family declared in
  :mod:`robustbench_wave.attacks.registry`; ``list_families()``), ``threat``,
  an optional ``backend`` and ``eps`` (overrides the data set's list), and the family's hyper-parameters.

Threat models (Croce & Hein 2020; Carlini et al. 2019): ``Linf`` and ``L2`` norms of the perturbation in
pixel units; ``L0`` is our budget for salt-and-pepper noise: the *fraction of pixel positions* (all channels
of a pixel together) that may change, so ``eps = 0.05`` lets 5% of the pixels flip to black or white;
``corruption`` (the ``corruption`` family, Hendrycks & Dietterich 2019) is no norm: its budgets are severities
1-5, and its rows are an average-case accuracy, never part of a worst case.
Validation: ``Linf`` and ``L0`` budgets must lie in [0, 1]; ``L2`` budgets must be >= 0 (an L2 budget above 1
is normal, e.g. 2.0 on 28x28 images) and are checked against sqrt(C*H*W) when the data is known
(:func:`robustbench_wave.evaluation.plan.check_budgets`). The suite's ``name`` becomes part of a run folder's
name, so it must be a safe folder name (:func:`robustbench_wave.core.runfolder.check_safe_name`).
"""

from __future__ import annotations

import copy
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import torch
from torch import nn

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]

from robustbench_wave.attacks.lowfreq import LOWFREQ_FAMILY, choose_level
from robustbench_wave.attacks.registry import (
    CLEAN,
    CORRUPTION_SEVERITIES,
    NO_THREAT,
    AttackFamily,
    AttackRequest,
    Param,
    RunContext,
    Threat,
    family_spec,
    get_runner,
    is_average_case,
    list_families,
)
from robustbench_wave.core.naming import did_you_mean
from robustbench_wave.core.runfolder import check_safe_name
from robustbench_wave.core.specs import suite_dir

SUITE_DIR = suite_dir()
THREATS = tuple(t.value for t in Threat)
DEFAULT_EPS_KEY = "default"

#: The suite an evaluation runs when none is named (the attack command, ``benchmark()``, ``evaluate``).
DEFAULT_SUITE = "default"
DEFAULT_RNG_BLOCK = 128
NOISE_THREAT = {"uniform": "Linf", "sign": "Linf", "gaussian": "L2", "salt_pepper": "L0"}


_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass(frozen=True)
class AttackEntry:
    """One ``[[attack]]`` of a suite with its hyper-parameters resolved (defaults filled in)."""

    name: str
    family: str
    threat: str
    params: dict[str, Any]
    backend: str | None = None  # pinned by the suite; None = follow the evaluation's backend choice
    eps: tuple[float, ...] | None = None  # overrides the data set's list for this threat

    @property
    def spec(self) -> AttackFamily:
        return family_spec(self.family)

    @property
    def kind(self) -> str:
        """The family's kind as the plain string records store."""
        return self.spec.kind.value

    def resolve_backend(self, requested: str = "auto") -> str:
        """The backend for this entry: the suite's pin, else ``requested`` if supported, else the default."""
        if self.backend is not None:
            return self.backend
        able = self.able_backends()
        if requested != "auto" and requested in able:
            return requested
        return able[0]

    def able_backends(self) -> list[str]:
        """The family's back-ends that honour this entry's settings (e.g. not torchattacks for a DLR PGD),
        default first: the only ones it may run on or be cross-checked against."""
        return [b for b in self.spec.backends if self.rejection(b) is None]

    def rejection(self, backend: str) -> str | None:
        """Why ``backend`` cannot run this entry as written, or None (clean has no runner: nothing to refuse)."""
        if self.family == CLEAN:
            return None
        return get_runner(self.family, backend).rejection(self.threat, self.params)

    def request(
        self,
        model: nn.Module,
        images: torch.Tensor,
        labels: torch.Tensor,
        ids: torch.Tensor,
        eps: float,
        context: RunContext,
        block_seed: int = 0,
    ) -> AttackRequest:
        """The runner call for this entry on these points at budget ``eps`` (``block_seed``: the seed of
        their id block's library attacks)."""
        return AttackRequest(
            model,
            images,
            labels,
            ids,
            eps,
            self.threat,
            self.params,
            self.name,
            self.family,
            context,
            block_seed,
        )

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "family": self.family, "threat": self.threat, **self.params}
        if self.backend is not None:
            d["backend"] = self.backend
        if self.eps is not None:
            d["eps"] = list(self.eps)
        return d


@dataclass(frozen=True)
class EntryFit:
    """One entry as it runs on one model: ``entry`` (a setting resolved for that model) or None (skipped),
    and ``note`` saying what was resolved or why it is skipped (None: it runs as written)."""

    entry: AttackEntry | None
    note: str | None = None


def fit_entry(
    entry: AttackEntry, model: nn.Module, image_shape: Sequence[int], num_classes: int | None = None
) -> EntryFit:
    """Whether ``entry`` can run on ``model`` for images of ``image_shape`` (..., H, W) and ``num_classes``
    classes (None: unknown, not checked), decided before any attack so a run never stops half-way on a
    model the suite was not written for.

    * A DLR loss (``loss = "dlr"``) needs at least three classes (:func:`~robustbench_wave.attacks.pgd.
      dlr_loss`): skipped below.
    * The low-frequency attack's ``level = "auto"`` is the model's own band (wavelet front-end, patch
      tokenizer) when it tiles the images, else the image-size rule (:func:`~robustbench_wave.attacks.
      lowfreq.choose_level`); skipped when no band fits. An explicit level that does not tile is skipped.
    """
    if entry.params.get("loss") == "dlr" and num_classes is not None and num_classes < 3:
        return EntryFit(None, f"the DLR loss needs at least 3 classes, the data set has {num_classes}")
    if entry.family == LOWFREQ_FAMILY:
        choice = choose_level(model, entry.params["level"], (int(image_shape[-2]), int(image_shape[-1])))
        if choice.level is None:
            return EntryFit(None, choice.note)
        if choice.note is not None:
            return EntryFit(replace(entry, params={**entry.params, "level": choice.level}), choice.note)
    return EntryFit(entry)


@dataclass(frozen=True)
class Suite:
    """A validated attack suite."""

    name: str
    attacks: tuple[AttackEntry, ...]
    eps: dict[str, dict[str, tuple[float, ...]]]  # dataset key -> threat -> ascending budgets
    description: str = ""
    rng_block: int = DEFAULT_RNG_BLOCK
    source: str = ""
    reference: dict[str, dict[str, float]] = field(default_factory=dict)  # dataset key -> threat -> budget

    def eps_key(self, dataset: Any = None) -> str:
        """The ``[eps.*]`` block used for ``dataset`` (a DatasetInfo, a name/spec string, or None)."""
        for cand in _dataset_keys(dataset):
            if cand in self.eps:
                return cand
        return DEFAULT_EPS_KEY

    def threat_eps(self, threat: str, dataset: Any = None) -> tuple[float, ...]:
        key = self.eps_key(dataset)
        for block in (key, DEFAULT_EPS_KEY):
            if threat in self.eps.get(block, {}):
                return self.eps[block][threat]
        raise ValueError(
            f"suite {self.name!r} has no {threat} budgets for data set {key!r}: add {threat} = [...] to "
            f"[eps.{key}] or [eps.{DEFAULT_EPS_KEY}] in {self.source or 'the suite file'}"
        )

    def entry_eps(self, entry: AttackEntry, dataset: Any = None) -> tuple[float, ...]:
        if entry.family == CLEAN:
            return (0.0,)
        return entry.eps if entry.eps is not None else self.threat_eps(entry.threat, dataset)

    def resolved_eps(self, dataset: Any = None) -> dict[str, list[float]]:
        """Every threat's eps list actually used for ``dataset`` (recorded in meta.json)."""
        out: dict[str, list[float]] = {}
        for entry in self.attacks:
            if entry.family != CLEAN:
                out.setdefault(entry.threat, [])
                out[entry.threat] = sorted(set(out[entry.threat]) | set(self.entry_eps(entry, dataset)))
        return out

    def reference_eps(self, threat: str, dataset: Any = None) -> float | None:
        """The reference budget the suite declares for ``threat`` on ``dataset``: its ``[reference.*]`` block,
        else ``[reference.default]`` where the data set's budgets of the threat are ``[eps.default]``'s too;
        None when it declares none (then the middle of the grid is the rule)."""
        key = self.eps_key(dataset)
        if threat in self.reference.get(key, {}):
            return self.reference[key][threat]
        if threat not in self.eps.get(key, {}):
            return self.reference.get(DEFAULT_EPS_KEY, {}).get(threat)
        return None

    def declared_reference(self, dataset: Any = None) -> dict[str, float]:
        """Threat -> :meth:`reference_eps` for every threat with one (meta.json's ``dataset.reference``)."""
        threats = dict.fromkeys(t for block in self.reference.values() for t in block)
        return {t: e for t in threats if (e := self.reference_eps(t, dataset)) is not None}

    def to_dict(self) -> dict[str, Any]:
        out = {
            "name": self.name,
            "description": self.description,
            "source": self.source,
            "settings": {"rng_block": self.rng_block},
            "eps": {k: {t: list(v) for t, v in d.items()} for k, d in self.eps.items()},
            "attack": [a.to_dict() for a in self.attacks],
        }
        if (
            self.reference
        ):  # only when declared: the dict (config.json, chunk fingerprints) is otherwise as before
            out["reference"] = {k: dict(d) for k, d in self.reference.items()}
        return out

    def with_budgets(
        self, budgets: Mapping[str, Sequence[float]], reference: Mapping[str, float] | None = None
    ) -> Suite:
        """The suite at the user's budgets (``--eps``): for each threat named, exactly ``budgets[threat]`` on
        every data set (replacing the grids and every entry's own ``eps``); the entries of threats not named do
        not run, since no budget was asked for them. The reference of a threat is ``reference[threat]`` (on
        its budgets) or its largest budget. ValueError for a threat no entry of the suite attacks, a budget
        outside its threat's range or a reference off the budgets."""
        attacked = {a.threat for a in self.attacks if a.family != CLEAN}
        unknown = [t for t in budgets if t not in attacked]
        if unknown:
            raise ValueError(
                f"--eps: suite {self.name!r} has no attack of threat {unknown}; its threats: {sorted(attacked)}"
            )
        grid = {t: _eps_list(list(v), t, f"--eps {t}") for t, v in budgets.items()}
        for t, values in grid.items():
            if not is_average_case(t) and values[0] <= 0:
                raise ValueError(f"--eps {t}: budgets must be > 0 (eps = 0 is the clean input, always run)")
        chosen = {t: max(v) for t, v in grid.items()}
        for t, e in (reference or {}).items():
            if t not in grid or not any(math.isclose(e, g, abs_tol=1e-9) for g in grid[t]):
                raise ValueError(
                    f"--reference-eps {t}={e:g} is not among the --eps budgets {grid.get(t, [])}"
                )
            chosen[t] = next(g for g in grid[t] if math.isclose(e, g, abs_tol=1e-9))
        keep = tuple(replace(a, eps=None) for a in self.attacks if a.family == CLEAN or a.threat in grid)
        return replace(self, attacks=keep, eps={DEFAULT_EPS_KEY: grid}, reference={DEFAULT_EPS_KEY: chosen})

    def select(self, names: list[str]) -> Suite:
        """A copy with only the named attacks (plus clean), e.g. to rerun one attack."""
        unknown = sorted(set(names) - {a.name for a in self.attacks})
        if unknown:
            raise ValueError(
                f"suite {self.name!r} has no attacks {unknown}; it has {[a.name for a in self.attacks]}"
            )
        keep = tuple(a for a in self.attacks if a.name in names or a.family == CLEAN)
        return replace(self, attacks=keep)


def _dataset_keys(dataset: Any) -> list[str]:
    if dataset is None:
        return []
    if isinstance(dataset, str):
        raw = [dataset]
    else:
        raw = [getattr(dataset, "name", ""), getattr(dataset, "slug", "")]
    return [str(r).strip().lower().replace("_", "-") for r in raw if r]


def parse_eps(value: Any, *, where: str = "eps") -> float:
    """A budget from a number or a fraction string (``"8/255"``); rejects non-finite or negative values."""
    if isinstance(value, bool):
        raise ValueError(f'{where}: {value!r} is not a number; write e.g. 0.03 or "8/255"')
    if isinstance(value, int | float):
        out = float(value)
    elif isinstance(value, str):
        try:
            out = float(Fraction(value.replace(" ", "")))
        except (ValueError, ZeroDivisionError):
            raise ValueError(
                f'{where}: cannot parse {value!r}; write a number or a fraction such as "8/255"'
            ) from None
    else:
        raise ValueError(f'{where}: {value!r} is not a number; write e.g. 0.03 or "8/255"')
    if not math.isfinite(out) or out < 0:
        raise ValueError(f"{where}: budget {value!r} must be a finite number >= 0")
    return out


def _eps_list(values: Any, threat: str, where: str) -> tuple[float, ...]:
    if not isinstance(values, list) or not values:
        raise ValueError(f"{where}: expected a non-empty list of budgets, got {values!r}")
    out = sorted({parse_eps(v, where=where) for v in values})
    if is_average_case(threat):
        bad = [v for v in out if v not in CORRUPTION_SEVERITIES]
        if bad:
            raise ValueError(
                f"{where}: corruption budgets are severities {list(CORRUPTION_SEVERITIES)}; got {bad[0]:g}"
            )
    if threat in ("Linf", "L0"):
        bad = [v for v in out if v > 1.0]
        if bad:
            unit = "pixel units (images live in [0,1])" if threat == "Linf" else "a fraction of the pixels"
            raise ValueError(
                f"{where}: {threat} budgets must lie in [0, 1] ({unit}); got {bad}. Did you mean {bad[0]}/255?"
            )
    return tuple(out)


def parse_threat(value: Any, where: str) -> str:
    """A threat model's name as the suites write it (``linf`` -> ``Linf``); ValueError naming ``where``."""
    if isinstance(value, str):
        for t in (*THREATS, NO_THREAT):
            if value.lower() == t.lower():
                return t
    raise ValueError(f"{where}: unknown threat model {value!r}; choose one of {', '.join(THREATS)}")


def _check_param(name: str, p: Param, value: Any, where: str) -> Any:
    if isinstance(value, str) and value in p.keywords:
        return value
    if p.type is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, p.type) or (p.type is int and isinstance(value, bool)):
        also = "".join(f" or {k!r}" for k in p.keywords)
        raise ValueError(f"{where}: {name} = {value!r} must be of type {p.type.__name__}{also}")
    if p.choices is not None and value not in p.choices:
        raise ValueError(f"{where}: {name} = {value!r}; choose one of {list(p.choices)}")
    if p.minimum is not None and value < p.minimum:
        raise ValueError(f"{where}: {name} = {value!r} must be >= {p.minimum}")
    if p.type is float and not math.isfinite(value):
        raise ValueError(f"{where}: {name} = {value!r} must be finite")
    return value


def _parse_entry(raw: Any, index: int, source: str = "") -> AttackEntry:
    where = f"[[attack]] #{index + 1}"
    if not isinstance(raw, dict):
        raise ValueError(f"{where}: expected a table with name, family, threat, ...")
    raw = dict(raw)
    name = raw.pop("name", None)
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ValueError(
            f"{where}: every attack needs a name of letters, digits, '_', '-' or '.' (got {name!r})"
        )
    where = f"attack {name!r}"
    family = raw.pop("family", None)
    if family not in list_families():
        raise ValueError(
            f"{where}: unknown attack family {family!r}; known families: {', '.join(list_families())}"
        )
    spec = family_spec(family)
    raw.pop("description", None)
    if family == CLEAN:
        threat = NO_THREAT
        raw.pop("threat", None)
    else:
        if "threat" not in raw and family == "noise" and raw.get("distribution") in NOISE_THREAT:
            raw["threat"] = NOISE_THREAT[raw["distribution"]]
        if "threat" not in raw and spec.threats == (Threat.CORRUPTION.value,):
            raw["threat"] = Threat.CORRUPTION.value
        if "threat" not in raw:
            raise ValueError(
                f"attack entry {name!r} ({source or 'suite'} [[attack]] #{index + 1}) lacks the field 'threat'; "
                f"add threat = one of {', '.join(THREATS)}"
            )
        threat = parse_threat(raw.pop("threat"), where)
        if threat not in spec.threats:
            raise ValueError(
                f"{where}: family {family!r} supports threats {list(spec.threats)}, not {threat!r}"
            )
    backend = raw.pop("backend", None)
    if backend is not None and backend not in spec.backends:
        raise ValueError(
            f"{where}: backend {backend!r} does not implement {family!r}; use one of {list(spec.backends)}"
        )
    eps = raw.pop("eps", None)
    eps_t = _eps_list(eps, threat, f"{where}: eps") if eps is not None else None
    params: dict[str, Any] = {}
    for key, p in spec.params.items():
        if key in raw:
            params[key] = _check_param(key, p, raw.pop(key), where)
        elif p.default is None:
            raise ValueError(f"{where}: missing required parameter {key!r}")
        else:
            params[key] = p.default
    if raw:
        allowed = ["name", "family", "threat", "backend", "eps", "description", *spec.params]
        raise ValueError(f"{where}: unknown keys {sorted(raw)} for family {family!r}; allowed: {allowed}")
    if family == "noise" and NOISE_THREAT[params["distribution"]] != threat:
        dist = params["distribution"]
        raise ValueError(f"{where}: {dist} noise is budgeted in {NOISE_THREAT[dist]}, not {threat}")
    entry = AttackEntry(name, family, threat, params, backend, eps_t)
    _check_backends(entry, where)
    return entry


def _check_backends(entry: AttackEntry, where: str) -> None:
    """A pinned back-end must honour the entry's settings, and some back-end must (checked at load time, so
    a run never starts an attack its back-end would refuse, or run a different one under the same name)."""
    if entry.backend is not None and (reason := entry.rejection(entry.backend)) is not None:
        raise ValueError(f"{where}: {reason}")
    if not entry.able_backends():
        reasons = "; ".join(f"{b}: {entry.rejection(b)}" for b in entry.spec.backends)
        raise ValueError(f"{where}: no back-end can run these settings ({reasons})")


def parse_suite(data: dict[str, Any], *, source: str = "", default_name: str = "suite") -> Suite:
    """Validate a suite given as a dict (parsed TOML); every problem raises ValueError saying what to fix."""
    data = copy.deepcopy(data)
    source = str(data.pop("source", "")) or source  # present when re-parsing Suite.to_dict() (meta.json)
    name = check_safe_name(str(data.pop("name", default_name)), f"suite name (in {source or 'the suite'})")
    description = str(data.pop("description", ""))
    settings = data.pop("settings", {}) or {}
    if not isinstance(settings, dict):
        raise ValueError(f"suite {name!r}: [settings] must be a table")
    settings = dict(settings)
    rng_block = settings.pop("rng_block", DEFAULT_RNG_BLOCK)
    if isinstance(rng_block, bool) or not isinstance(rng_block, int) or rng_block < 1:
        raise ValueError(f"suite {name!r}: settings.rng_block must be a positive integer, got {rng_block!r}")
    if settings:
        raise ValueError(f"suite {name!r}: unknown settings {sorted(settings)}; allowed: ['rng_block']")
    raw_eps = data.pop("eps", {}) or {}
    if not isinstance(raw_eps, dict):
        raise ValueError(f"suite {name!r}: [eps.<dataset>] must be tables of threat = [budgets]")
    eps: dict[str, dict[str, tuple[float, ...]]] = {}
    for key, block in raw_eps.items():
        if not isinstance(block, dict):
            raise ValueError(f"suite {name!r}: [eps.{key}] must be a table such as Linf = [0.01, 0.03]")
        eps[key.lower()] = {
            parse_threat(t, f"[eps.{key}]"): _eps_list(v, parse_threat(t, f"[eps.{key}]"), f"[eps.{key}] {t}")
            for t, v in block.items()
        }
    raw_reference = data.pop("reference", {}) or {}
    raw_attacks = data.pop("attack", None)
    if data:
        raise ValueError(
            f"suite {name!r}: unknown top-level keys {sorted(data)}; "
            "allowed: name, description, settings, eps, reference, attack, source"
        )
    if not isinstance(raw_attacks, list) or not raw_attacks:
        raise ValueError(f'suite {name!r}: no [[attack]] entries; add at least one (e.g. family = "clean")')
    attacks = [_parse_entry(a, i, source) for i, a in enumerate(raw_attacks)]
    seen: set[str] = set()
    for a in attacks:
        if a.name in seen:
            raise ValueError(f"suite {name!r}: attack name {a.name!r} is used twice; names must be unique")
        seen.add(a.name)
    if not any(a.family == CLEAN for a in attacks):
        attacks.insert(0, AttackEntry(CLEAN, CLEAN, NO_THREAT, {}))
    elif attacks[0].family != CLEAN or sum(a.family == CLEAN for a in attacks) > 1:
        raise ValueError(
            f"suite {name!r}: put exactly one clean entry first (it defines who can be attacked)"
        )
    # every threat must have budgets somewhere (checked again per data set at evaluation time)
    for a in attacks:
        if a.family != CLEAN and a.eps is None and not any(a.threat in b for b in eps.values()):
            raise ValueError(
                f"suite {name!r}: attack {a.name!r} uses threat {a.threat} but no [eps.*] block lists {a.threat} "
                f"budgets; add {a.threat} = [...] to [eps.{DEFAULT_EPS_KEY}]"
            )
    suite = Suite(name, tuple(attacks), eps, description, rng_block, source)
    return replace(suite, reference=_parse_reference(suite, raw_reference))


def _parse_reference(suite: Suite, raw: Any) -> dict[str, dict[str, float]]:
    """``[reference.<dataset>]`` blocks: threat = one budget, on the grid that data set's block gives it."""
    if not isinstance(raw, dict):
        raise ValueError(f"suite {suite.name!r}: [reference.<dataset>] must be tables of threat = budget")
    out: dict[str, dict[str, float]] = {}
    for key, block in raw.items():
        where = f"suite {suite.name!r} [reference.{key}]"
        if not isinstance(block, dict):
            raise ValueError(f'{where} must be a table such as Linf = "8/255"')
        grid = suite.resolved_eps(key.lower())
        out[key.lower()] = {}
        for t, value in block.items():
            threat = parse_threat(t, where)
            eps = parse_eps(value, where=f"{where} {t}")
            match = [g for g in grid.get(threat, []) if math.isclose(g, eps, abs_tol=1e-9)]
            if not match:
                raise ValueError(
                    f"{where} {t} = {value!r} is not on its grid {grid.get(threat, [])}: a reference budget "
                    "must be one that is attacked"
                )
            out[key.lower()][threat] = match[0]
    return out


def parse_budgets(parts: Sequence[str], flag: str = "--eps") -> dict[str, tuple[float, ...]]:
    """``THREAT=BUDGET`` items (``Linf=8/255``, fractions allowed; a part may be a comma list) as threat ->
    budgets; a bare budget after one continues its threat (``Linf=2/255,4/255``). ValueError for an unknown
    threat or a bad budget."""
    out: dict[str, list[float]] = {}
    threat = None
    if not any(p.strip(", ") for p in parts):
        raise ValueError(f"{flag} names no budget; write THREAT=BUDGET, e.g. {flag} Linf=8/255")
    for part in (p.strip() for text in parts for p in text.split(",") if p.strip()):
        text = part
        if "=" in part:
            name, _, text = part.partition("=")
            threat = parse_threat(name.strip(), flag)
        if threat is None:
            raise ValueError(f"{flag} {part!r}: write THREAT=BUDGET, e.g. {flag} Linf=8/255 {flag} L2=0.5")
        out.setdefault(threat, []).append(parse_eps(text.strip(), where=f"{flag} {threat}"))
    return {t: tuple(v) for t, v in out.items()}


def list_suites(suite_dir: Path = SUITE_DIR) -> list[str]:
    return sorted(p.stem for p in Path(suite_dir).glob("*.toml"))


def load_suite(name_or_path: str | os.PathLike | Suite, suite_dir: Path = SUITE_DIR) -> Suite:
    """A suite by name (``attacks/<name>.toml``) or by path to a TOML file."""
    if isinstance(name_or_path, Suite):
        return name_or_path
    path = Path(name_or_path)
    if not (path.suffix == ".toml" and path.exists()):
        path = Path(suite_dir) / f"{name_or_path}.toml"
    if not path.exists():
        raise ValueError(
            f"no attack suite {str(name_or_path)!r}{did_you_mean(str(name_or_path), list_suites(suite_dir))} "
            f"(give a TOML path or one of {list_suites(suite_dir)}: the files in {suite_dir})"
        )
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{path} is not valid TOML: {err}") from None
    return parse_suite(data, source=str(path), default_name=path.stem)
