"""Every registered attack, found through the registry: it runs, respects its budget and emits the record schema.

Parametrised over :func:`robustbench_wave.attacks.list_attacks`, so registering an attack is enough to get it
tested (timm's test suite is parametrised over ``list_models()`` the same way). Hyper-parameters are the
family's defaults, with iteration counts shortened and required choices filled in by the suite parser.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from robustbench_wave.attacks import (
    GradSafe,
    RunContext,
    Trait,
    attack_mode,
    budget_tolerance,
    family_spec,
    get_runner,
    is_average_case,
    list_attacks,
    list_families,
    parse_suite,
    seeded,
)
from robustbench_wave.evaluation import EvalSettings, evaluate
from robustbench_wave.evaluation import records as rec
from tests.support.attack_models import labelled, patch_model, teacher, toy_data

BUDGETS = {"Linf": [0.03, 0.3], "L2": [0.5, 2.0], "L0": [0.02, 0.25], "corruption": [1.0, 5.0]}
# keep iterative attacks cheap (and targeted ones to two targets); everything else keeps its default
SHORT = {"steps": 2, "n_queries": 10, "n_target_classes": 2}
CASES = [
    (family, backend, threat) for family, backend in list_attacks() for threat in family_spec(family).threats
]


def _suite(family: str, backend: str, threat: str, eps: list[float] | None = None) -> Any:
    """A one-attack suite with the family's defaults; a required parameter takes the first valid choice."""
    spec = family_spec(family)
    params = {k: v for k, v in SHORT.items() if k in spec.params}
    required = [k for k, p in spec.params.items() if p.default is None]
    base = {"name": f"{family}_{threat}", "family": family, "threat": threat, "backend": backend, **params}
    budgets = {"default": {t: BUDGETS[t] if eps is None else eps for t in BUDGETS}}
    options = [{}] if not required else [{required[0]: c} for c in spec.params[required[0]].choices or ()]
    for extra in options:
        try:
            return parse_suite({"eps": budgets, "attack": [{**base, **extra}]})
        except ValueError:
            continue
    raise AssertionError(f"no valid suite entry for {family} ({backend}, {threat}) from its schema")


def test_every_family_has_an_implementation_and_its_default_backend() -> None:
    registered = {f for f, _ in list_attacks()}
    assert registered == set(list_families()) - {"clean"}  # clean is the evaluation's own forward pass
    for family, backend in list_attacks():
        spec = family_spec(family)
        assert get_runner(family, backend).backend == backend and backend in spec.backends
        assert (family, spec.default_backend) in list_attacks()


@pytest.mark.parametrize(("family", "backend", "threat"), CASES)
def test_every_implementation_honours_its_familys_defaults(family: str, backend: str, threat: str) -> None:
    """A back-end may refuse settings its library lacks (``rejects``), never the family's defaults: those
    are what a suite entry without the option runs, and what ``--backend`` / ``--cross-check`` ask of it."""
    entry = _suite(family, backend, threat).attacks[1]
    assert get_runner(family, backend).rejection(threat, entry.params) is None


@pytest.mark.parametrize(("family", "backend", "threat"), CASES)
def test_every_attack_respects_its_budget(family: str, backend: str, threat: str) -> None:
    """Called directly (no audit in between), every returned point lies in the threat model's ball ∩ [0,1]."""
    model = patch_model()
    x = toy_data(12)
    y = labelled(model, x)
    entry = _suite(family, backend, threat).attacks[1]
    runner = get_runner(family, backend)
    with attack_mode(model):
        ctx = RunContext(seed=0, surrogate=GradSafe(teacher()))
        for eps in BUDGETS[threat]:
            with seeded(0):
                x_adv = runner.fn(entry.request(GradSafe(model), x, y, torch.arange(12), eps, ctx, 1)).x_adv
            # an independent measure of the threat model (not budget.perturbation_norm)
            d = (x_adv - x).flatten(1)
            if threat == "Linf":
                norm = d.abs().max(1).values
            elif threat == "L2":
                norm = d.norm(dim=1)
            elif is_average_case(threat):  # a corruption's eps is a severity, not a ball: only the box counts
                assert x_adv.shape == x.shape and torch.isfinite(x_adv).all()
                assert x_adv.min() >= 0 and x_adv.max() <= 1 and (x_adv != x).any()
                continue
            else:
                norm = ((x_adv - x).abs().amax(1) > 0).flatten(1).float().mean(1)
            assert x_adv.shape == x.shape and torch.isfinite(x_adv).all()
            assert x_adv.min() >= 0 and x_adv.max() <= 1
            assert (norm <= eps + budget_tolerance(eps, threat)).all(), (family, backend, eps, norm.max())
            if eps == BUDGETS[threat][-1]:  # it did perturb something (Square keeps only successes)
                assert norm.max() > 0


@pytest.mark.parametrize(("family", "backend"), list_attacks())
def test_every_attack_runs_through_the_evaluation_and_emits_the_record_schema(
    family: str, backend: str
) -> None:
    threat = family_spec(family).threats[0]
    model = patch_model(seed=1)
    x = toy_data(10, seed=2)
    y = labelled(model, x)
    suite = _suite(family, backend, threat)
    result = evaluate(
        model, x, y, suite, EvalSettings(seed=0), surrogate=teacher(), batch_size=4, progress=False
    )
    r = result.records
    assert list(r.columns) == rec.COLUMNS
    assert {c: str(t) for c, t in r.dtypes.items()} == rec.DTYPES
    rows = r[r["attack"] == suite.attacks[1].name]
    spec = family_spec(family)
    assert set(rows["backend"]) == {backend} and set(rows["family"]) == {family}
    assert set(rows["kind"]) == {spec.kind.value} and set(rows["threat"]) == {threat}
    assert sorted(set(rows["eps"])) == BUDGETS[threat] and len(rows) == len(x) * len(BUDGETS[threat])
    hit = rows[rows["attacked"]]
    assert len(hit) > 0
    tol = np.array([budget_tolerance(e, threat) for e in hit["eps"]])
    assert is_average_case(threat) or (hit["norm"].to_numpy() <= hit["eps"].to_numpy() + tol).all()
    has_last = hit["correct_last"].notna()  # best-vs-last bookkeeping: our iterative engines only
    assert has_last.all() if spec.has(Trait.LAST_ITERATE) and backend == "builtin" else not has_last.any()


def test_the_run_context_is_shared_and_frozen_and_the_block_seed_is_the_requests() -> None:
    """One RunContext serves every request of an evaluation: a runner cannot change it for the next block
    (it was mutated per id block before), and each request carries its own block's seed."""
    ctx = RunContext(seed=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        ctx.seed = 4  # type: ignore[misc]
    entry = _suite("pgd", "builtin", "Linf").attacks[1]
    x, y = torch.zeros(2, 1, 4, 4), torch.zeros(2, dtype=torch.long)
    requests = [entry.request(nn.Identity(), x, y, torch.arange(2), 0.1, ctx, seed) for seed in (7, 8)]
    assert [r.block_seed for r in requests] == [7, 8] and all(r.context is ctx for r in requests)
