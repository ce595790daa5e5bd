"""Provenance of an evaluation (``meta.json``): suite, budgets, data and weight hashes, seeds, settings, timing.

Everything a reader needs to trust or repeat a run without the code that made it: which attacks ran with which
parameters and back-ends (and which were skipped, and why), on which examples, against which weights, how
long each chunk took and how many were resumed from the chunk cache.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from enum import Enum
from typing import Any

import torch
from torch import nn

from robustbench_wave.core.io import provenance
from robustbench_wave.evaluation.chunks import state_sha256, tensor_sha256
from robustbench_wave.evaluation.plan import EvalSettings, Examples, Plan
from robustbench_wave.evaluation.records import SCHEMA_VERSION
from robustbench_wave.models.autobpda import gradient_path_meta
from robustbench_wave.models.frontend import has_fixed_front_end


@dataclass
class ModelRun:
    """What one model's evaluation measured about itself (the ``models`` entry of ``meta.json``)."""

    name: str
    model: nn.Module
    modes: list[str]
    clean_correct: torch.Tensor
    surrogate: nn.Module | None
    surrogate_name: str | None
    timing: list[dict[str, Any]]
    resumed: int
    seconds: float
    extra: dict[str, Any] | None = None
    eot: dict[str, Any] | None = None  # randomness found and what was done about it (EotPlan.to_meta)

    def to_dict(self) -> dict[str, Any]:
        cc = self.clean_correct
        return {
            "grad_modes": self.modes,
            "has_fixed_front_end": has_fixed_front_end(self.model),
            **gradient_path_meta(self.model),  # what automatic BPDA found on its input path, if anything
            "param_sha256": state_sha256(self.model),
            "n_parameters": sum(p.numel() for p in self.model.parameters()),
            "clean_accuracy": float(cc.float().mean()) if len(cc) else math.nan,
            "surrogate": None
            if self.surrogate is None
            else {"name": self.surrogate_name, "param_sha256": state_sha256(self.surrogate)},
            "timing": self.timing,
            "seconds_total": round(self.seconds, 3),  # this call (short when chunks were resumed)
            "seconds_attacks": round(sum(t["seconds"] for t in self.timing), 3),  # when they were computed
            "resumed_chunks": self.resumed,
            **({"eot": self.eot} if self.eot is not None else {}),
            **(self.extra or {}),
        }


def _plain(value: Any) -> Any:
    """JSON stores plain strings: an Enum member becomes its ``.value``."""
    return value.value if isinstance(value, Enum) else value


def _attacks_meta(plan: Plan) -> dict[str, Any]:
    return {
        e.name: {
            "family": e.family,
            "kind": _plain(e.kind),
            "threat": _plain(e.threat),
            "backend": plan.backends[e.name],
            "eps": list(plan.entry_eps[e.name]),
            "params": dict(e.params),
            "grad_modes": "each" if e.spec.grad_dependent else "shared (run once, replicated to every mode)",
            "skipped": plan.skipped.get(e.name),
        }
        | ({"cross_check": dataclasses.asdict(plan.cross[e.name])} if e.name in plan.cross else {})
        for e in plan.suite.attacks
    }


def _settings(
    settings: EvalSettings, plan: Plan, device: torch.device, batch_size: int, fingerprint: str
) -> dict[str, Any]:
    return {
        "batch_size": batch_size,
        "skip_broken": settings.skip_broken,
        "backend": settings.backend,
        "cross_check": settings.cross_check,
        "eot": settings.eot.mode,
        "eot_draws": settings.eot.draws,
        "rng_block": plan.suite.rng_block,
        "device": str(device),
        "torch_num_threads": torch.get_num_threads(),
        "fingerprint": fingerprint,
    }


def build_meta(
    plan: Plan,
    settings: EvalSettings,
    data: Examples,
    model_run: ModelRun,
    *,
    device: torch.device,
    batch_size: int,
    fingerprint: str,
) -> dict[str, Any]:
    """The ``meta.json`` of one model's evaluation (:meth:`EvaluationResult.merge` joins several models).

    ``data`` are the checked images, labels and example ids; ``device`` and ``batch_size`` are how it ran; ``fingerprint``
    identifies the configuration (:mod:`chunks`).
    """
    suite, info = plan.suite, plan.dataset
    is_info = dataclasses.is_dataclass(info) and not isinstance(info, type)
    ids = data.ids
    return {
        "schema_version": SCHEMA_VERSION,
        "created_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "provenance": provenance(),
        "suite": suite.to_dict(),
        "dataset": {
            "name": settings.dataset_name,
            "eps_key": suite.eps_key(info),
            "eps": plan.threat_eps,
            "info": dataclasses.asdict(info) if is_info else None,
        }
        | ({"reference": ref} if (ref := plan.declared_reference()) else {}),
        "n_examples": len(data),
        "example_ids": {
            "first": int(ids[0]) if len(ids) else None,
            "last": int(ids[-1]) if len(ids) else None,
        },
        "data_sha256": tensor_sha256(*data.tensors()),
        "seeds": {"attack_seed": settings.seed},
        "settings": _settings(settings, plan, device, batch_size, fingerprint),
        "attacks": _attacks_meta(plan),
        "models": {model_run.name: model_run.to_dict() | plan.model_notes()},
    }
