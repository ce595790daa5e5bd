"""Family traits and shared parameter schemas: what checks, export and verdict read instead of family names."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from robustbench_wave.attacks import (
    AttackKind,
    Threat,
    Trait,
    families_with,
    family_spec,
    list_families,
    parse_suite,
    register_family,
    schemas,
)
from robustbench_wave.attacks import registry as registry_module

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
