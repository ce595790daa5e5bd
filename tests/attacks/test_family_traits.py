"""Family traits and shared parameter schemas: what checks, export and verdict read instead of family names.

The extension point, proved: MI-FGSM (registered in ``attacks/torchattacks_backend.py`` with its traits only)
and a throw-away family registered inside a test run through the evaluation, pass the budget audit, and
enter ``iterative_beats_single_step`` and the export's attack list, while nothing in ``analysis/`` or
``reporting/`` names them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch
from torch import nn

from robustbench_wave.analysis.checks import get_check
from robustbench_wave.attacks import (
    AttackKind,
    AttackRequest,
    BudgetViolation,
    GradSafe,
    Param,
    RunContext,
    RunOutput,
    Suite,
    Threat,
    Trait,
    budget_tolerance,
    families_with,
    family_spec,
    get_runner,
    list_attacks,
    list_families,
    parse_suite,
    register_attack,
    register_family,
    schemas,
)
from robustbench_wave.attacks import registry as registry_module
from robustbench_wave.evaluation import EvalSettings, evaluate
from robustbench_wave.reporting.export import model_info
from robustbench_wave.reporting.runs import RunFolder
from tests.support.attack_models import labelled, patch_model, toy_data

# The families of the shipped suites, and the sets the tuples in analysis/ and reporting/ named before the
# traits (record_checks' ("pgd", "apgd") and ("fgsm",), export's AutoAttack set, verdict's LOWFREQ_FAMILY,
# the families that record correct_last): a trait may gain new families, never move an old one.
SHIPPED = {"clean", "noise", "fgsm", "pgd", "transfer", "lowfreq-pgd", "corruption"}
SHIPPED |= {"apgd", "apgd-t", "fab-t", "square"}  # torchattacks_backend.py
BEFORE = {
    Trait.SINGLE_STEP: {"fgsm"},
    Trait.WHOLE_BALL: {"pgd", "apgd"},
    Trait.LAST_ITERATE: {"pgd", "lowfreq-pgd"},
    Trait.AUTOATTACK: {"apgd", "apgd-t", "fab-t", "square"},
    Trait.LOW_FREQUENCY: {"lowfreq-pgd"},
}
# Key order of each family's params: the order of an entry's params in meta.json and Suite.to_dict.
PARAM_ORDER = {
    "noise": ["distribution", "draws"],
    "fgsm": ["eot_iter"],
    "pgd": ["steps", "rel_step_size", "restarts", "random_start", "loss", "eot_iter"],
    "transfer": ["steps", "rel_step_size", "restarts", "random_start"],
    "lowfreq-pgd": [
        "steps",
        "rel_step_size",
        "restarts",
        "random_start",
        "loss",
        "eot_iter",
        "level",
        "basis",
    ],
    "apgd": ["steps", "restarts", "loss", "rho", "eot_iter"],
    "apgd-t": ["steps", "restarts", "n_target_classes", "rho", "eot_iter"],
    "fab-t": ["steps", "restarts", "n_target_classes", "alpha_max", "eta", "beta"],
}


@pytest.fixture
def scratch_registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Families registered inside a test are gone after it."""
    monkeypatch.setattr(registry_module, "_FAMILIES", dict(registry_module._FAMILIES))
    monkeypatch.setattr(registry_module, "_RUNNERS", dict(registry_module._RUNNERS))
    yield


@pytest.mark.parametrize("trait", list(BEFORE), ids=lambda t: t.value)
def test_the_shipped_families_keep_the_sets_the_hard_coded_names_gave(trait: Trait) -> None:
    assert set(list_families()) >= SHIPPED
    assert set(families_with(trait)) & SHIPPED == BEFORE[trait]


def test_every_whole_ball_or_last_iterate_family_is_iterative() -> None:
    iterative = set(families_with(Trait.ITERATIVE))
    assert set(families_with(Trait.WHOLE_BALL)) <= iterative
    assert set(families_with(Trait.LAST_ITERATE)) <= iterative
    assert not set(families_with(Trait.SINGLE_STEP)) & iterative
    assert all(family_spec(f).grad_dependent for f in iterative | set(families_with(Trait.SINGLE_STEP)))


@pytest.mark.parametrize(
    ("traits", "grad_dependent", "message"),
    [
        ((Trait.SINGLE_STEP, Trait.ITERATIVE), True, "single-step or iterative"),
        ((Trait.ITERATIVE,), False, "differentiates the target"),
        ((Trait.WHOLE_BALL,), True, "needs trait 'iterative'"),
        ((Trait.LAST_ITERATE,), True, "needs trait 'iterative'"),
        ((Trait.ITERATIVE, Trait.WHOLE_BALL, Trait.LOW_FREQUENCY), True, "does not use the whole ball"),
    ],
)
def test_contradicting_traits_are_refused_and_register_nothing(
    scratch_registry: None, traits: tuple[Trait, ...], grad_dependent: bool, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        register_family(
            "scratch",
            kind=AttackKind.WHITE_BOX,
            threats=(Threat.LINF,),
            grad_dependent=grad_dependent,
            traits=traits,
        )
    assert "scratch" not in list_families()


def test_a_trait_query_follows_registration(scratch_registry: None) -> None:
    register_family(
        "scratch",
        kind=AttackKind.WHITE_BOX,
        threats=(Threat.LINF,),
        grad_dependent=True,
        traits=(Trait.ITERATIVE, Trait.WHOLE_BALL, Trait.AUTOATTACK),
    )
    assert "scratch" in families_with(Trait.WHOLE_BALL) and "scratch" in families_with(Trait.AUTOATTACK)
    assert family_spec("scratch").has(Trait.ITERATIVE) and not family_spec("scratch").has(Trait.SINGLE_STEP)


@pytest.mark.parametrize("family", list(PARAM_ORDER))
def test_families_keep_their_parameter_order(family: str) -> None:
    assert list(family_spec(family).params) == PARAM_ORDER[family]


def test_the_shared_schemas_are_one_definition() -> None:
    for key, shared in {
        "restarts": schemas.RESTARTS,
        "eot_iter": schemas.EOT_ITER,
        "rho": schemas.RHO,
    }.items():
        users = [f for f in list_families() if key in family_spec(f).params]
        assert len(users) >= 2
        assert all(family_spec(f).params[key] == shared for f in users), key
    assert family_spec("pgd").params["loss"] == family_spec("apgd").params["loss"] == schemas.LOSS
    assert family_spec("apgd").params["steps"] == family_spec("fab-t").params["steps"] == schemas.steps(100)
    assert family_spec("lowfreq-pgd").params["rel_step_size"] == schemas.rel_step_size(0.125)


@pytest.mark.parametrize(
    ("family", "key", "value", "message"),
    [
        ("apgd", "steps", 0, "must be >= 1"),
        ("apgd-t", "rho", -0.5, "must be >= 0.0"),
        ("pgd", "loss", "hinge", "choose one of \\['ce', 'dlr'\\]"),
        ("apgd", "loss", "hinge", "choose one of \\['ce', 'dlr'\\]"),
        ("fgsm", "eot_iter", 1.5, "must be of type int"),
        ("fab-t", "n_target_classes", 0, "must be >= 1"),
    ],
)
def test_shared_parameters_validate_as_before(family: str, key: str, value: object, message: str) -> None:
    raw = {"name": "a", "family": family, "threat": "Linf", key: value}
    with pytest.raises(ValueError, match=message):
        parse_suite({"eps": {"default": {"Linf": [0.1]}}, "attack": [raw]})


# ------------------------------------------------------------------------------- the extension point
def _fgsm_and(entry: dict[str, Any]) -> Suite:
    attacks = [
        {"name": "fgsm", "family": "fgsm", "threat": "Linf"},
        {"name": "new", "threat": "Linf", **entry},
    ]
    return parse_suite({"eps": {"default": {"Linf": [0.05, 0.1]}}, "attack": attacks})


def _records(suite: Suite) -> tuple[pd.DataFrame, dict[str, Any]]:
    model = patch_model(seed=1)
    x = toy_data(24, seed=2)
    y = labelled(model, x)
    result = evaluate(
        model,
        x,
        y,
        suite,
        EvalSettings(model_name="m", dataset="synthetic", skip_broken=False),
        progress=False,
    )
    return result.records, result.meta


def _joins_the_check_and_the_export(records: pd.DataFrame, meta: dict[str, Any], family: str) -> None:
    """Its rows make iterative_beats_single_step measurable (FGSM is the only other attack), and the export
    names it among the attacks behind the number."""
    check = get_check("iterative_beats_single_step")()
    assert check.judge(records, "exact").passed is not None
    assert check.judge(records[records["family"] != family], "exact").passed is None  # FGSM alone: n/a
    info = model_info([RunFolder(Path("in-memory"), records, meta)], "m", "Linf")
    assert info is not None and re.search(r"\bnew\b", info["footnote"])
    assert {"name": "new", "family": family} in [
        {k: a[k] for k in ("name", "family")} for a in info["robustbench_wave"]["attacks"]
    ]


def test_mifgsm_runs_is_audited_and_joins_the_checks_and_the_export() -> None:
    """MI-FGSM (Dong et al. 2018) was registered with its traits only: nothing in analysis/ or reporting/
    names it, yet its records are compared with FGSM and exported."""
    assert family_spec("mifgsm").has(Trait.WHOLE_BALL) and "mifgsm" in families_with(Trait.ITERATIVE)
    records, meta = _records(_fgsm_and({"family": "mifgsm"}))
    rows = records[records["attack"] == "new"]
    assert set(rows["backend"]) == {"torchattacks"} and rows["attacked"].all()
    assert (rows["norm"] <= rows["eps"] + budget_tolerance(0.1, "Linf")).all()  # the audit's measure
    assert (~rows["correct"]).any()
    _joins_the_check_and_the_export(records, meta, "mifgsm")


def test_mifgsm_takes_a_zero_gradient_as_a_zero_step() -> None:
    """torchattacks' MIFGSM divides by the gradient's mean magnitude: a blocked gradient would be NaN."""
    model = nn.Sequential(nn.Flatten(), nn.Linear(64, 3))
    with torch.no_grad():
        model[1].weight.zero_()
    x = toy_data(4)
    entry = _fgsm_and({"family": "mifgsm"}).attacks[2]
    request = entry.request(
        GradSafe(model), x, torch.zeros(4, dtype=torch.long), torch.arange(4), 0.1, RunContext()
    )
    assert torch.equal(get_runner("mifgsm", "torchattacks").fn(request).x_adv, x)


def _iterated_fgsm(request: AttackRequest) -> RunOutput:
    """A throw-away iterative attack (basic iterative method, Kurakin et al. 2017) for the tests below."""
    x, eps = request.images, request.eps
    x_adv = x.clone()
    for _ in range(request.params["steps"]):
        x_adv.requires_grad_(True)
        with torch.enable_grad():
            loss = nn.functional.cross_entropy(request.model(x_adv), request.labels)
            (grad,) = torch.autograd.grad(loss, x_adv)
        x_adv = (x + (x_adv.detach() + eps / 4 * grad.sign() - x).clamp(-eps, eps)).clamp(0, 1)
    return RunOutput((x + request.params["overshoot"] * (x_adv - x)).clamp(0, 1))  # overshoot > 1: rogue


def _register_scratch(name: str) -> None:
    register_family(
        name,
        kind=AttackKind.WHITE_BOX,
        threats=(Threat.LINF,),
        grad_dependent=True,
        traits=(Trait.ITERATIVE, Trait.WHOLE_BALL),
        params={"steps": schemas.steps(8), "overshoot": Param(float, 1.0)},
    )
    register_attack(name, backend="builtin", per_example_rng=True)(_iterated_fgsm)


def test_a_family_registered_in_a_test_joins_the_checks_and_the_export(scratch_registry: None) -> None:
    _register_scratch("scratch-bim")
    records, meta = _records(_fgsm_and({"family": "scratch-bim"}))
    _joins_the_check_and_the_export(records, meta, "scratch-bim")


def test_a_family_registered_in_a_test_is_audited(scratch_registry: None) -> None:
    _register_scratch("scratch-bim")
    with pytest.raises(BudgetViolation, match="'new \\(builtin\\)' exceeded its Linf budget"):
        _records(_fgsm_and({"family": "scratch-bim", "overshoot": 3.0}))


def test_the_throw_away_family_is_gone_after_its_test() -> None:
    assert "scratch-bim" not in list_families() and ("scratch-bim", "builtin") not in list_attacks()
