"""Suite files: parsing, per-data-set budgets, validation messages, backend resolution."""

from __future__ import annotations

import pytest

from robustbench_wave.attacks import list_families, load_suite, parse_eps, parse_suite
from robustbench_wave.evaluation.plan import check_budgets


def _minimal(**attack: object) -> dict:
    return {
        "name": "t",
        "eps": {"default": {"Linf": [0.1], "L2": [0.5], "L0": [0.05]}},
        "attack": [{"name": "clean", "family": "clean"}, attack],
    }


def test_default_suite_has_every_required_attack_and_per_dataset_budgets() -> None:
    s = load_suite("default")
    families = {a.family for a in s.attacks}
    assert families == {"clean", "noise", "fgsm", "pgd", "apgd", "square", "transfer", "lowfreq-pgd"}
    noise = {a.params["distribution"] for a in s.attacks if a.family == "noise"}
    assert noise == {"uniform", "sign", "gaussian", "salt_pepper"}
    apgd = next(a for a in s.attacks if a.family == "apgd")
    assert apgd.params["steps"] == 100
    pgd = {a.threat: a for a in s.attacks if a.family == "pgd"}
    assert (
        set(pgd) == {"Linf", "L2"}
        and pgd["Linf"].params["restarts"] >= 2
        and pgd["Linf"].params["random_start"]
    )
    assert next(a for a in s.attacks if a.family == "square").params["n_queries"] >= 100
    assert s.threat_eps("Linf", "fashion-mnist") == (0.01, 0.03, 0.1, 0.2, 0.3)
    assert s.threat_eps("L2", "fashion-mnist") == (0.5, 1.0, 2.0)
    assert s.threat_eps("Linf", "cifar10") == tuple(k / 255 for k in (1, 2, 4, 8, 16))  # from "k/255" strings
    assert s.threat_eps("L2", "cifar10") == (0.25, 0.5, 1.0)
    # data sets without their own block fall back to [eps.default]
    assert s.eps_key("synthetic-rgb") == s.eps_key("imagefolder-pets") == s.eps_key(None) == "default"


EARLIER_FAMILIES = {"clean", "noise", "fgsm", "pgd", "apgd", "square", "transfer"}  # before lowfreq-pgd
#: Appended after the low-frequency PGD, in this order: AutoAttack's members at every threat
#: (tests/attacks/test_suite_members.py), which came later.
AUTOATTACK_COMPLEMENT = ["apgd_ce_l2", "apgd_dlr_linf", "apgd_dlr_l2", "square_l2"]


@pytest.mark.parametrize("name", ["default", "headline", "quick-look", "smoke"])
def test_lowfreq_pgd_runs_after_the_earlier_families_so_they_keep_their_records(name: str) -> None:
    """skip_broken makes every attack depend on the ones above it: a new entry is appended below the others."""
    attacks = load_suite(name).attacks
    where = [i for i, a in enumerate(attacks) if a.family == "lowfreq-pgd"]
    assert len(where) == 1
    earlier = [
        i
        for i, a in enumerate(attacks)
        if a.family in EARLIER_FAMILIES and a.name not in AUTOATTACK_COMPLEMENT
    ]
    assert all(i < where[0] for i in earlier)
    low = attacks[where[0]]
    assert low.threat == "Linf" and low.params["level"] == "auto" and low.params["basis"] == "haar"
    if name == "smoke":
        return
    assert low.name == "lowfreq_pgd_linf"
    assert [a.name for a in attacks[where[0] + 1 :]] == AUTOATTACK_COMPLEMENT  # appended below it, in order
    if name != "quick-look":  # the quick look's steps are a quarter or less
        assert low.params["steps"] == 20
        assert low.params["rel_step_size"] == 0.125  # 2.5 eps / steps at 20 steps


# Registered families the smoke suite leaves out, and why: adding an entry to a shipped suite moves its records.
NOT_IN_SMOKE = {
    "mifgsm": "the extension-point proof (tests/attacks/test_family_traits.py), added after the suites"
}


def test_smoke_suite_loads_and_covers_every_family() -> None:
    assert set(NOT_IN_SMOKE) <= set(list_families())  # an exemption never outlives its family
    assert {a.family for a in load_suite("smoke").attacks} == set(list_families()) - set(NOT_IN_SMOKE)


def test_fraction_strings_and_numbers() -> None:
    assert parse_eps("8/255") == 8 / 255 and parse_eps(0.5) == 0.5 and parse_eps(1) == 1.0
    for bad in ("eight", "1/0", -0.1, float("nan"), True):
        with pytest.raises(ValueError):
            parse_eps(bad)


@pytest.mark.parametrize(
    ("attack", "message"),
    [
        ({"name": "x", "family": "deepfool", "threat": "Linf"}, "unknown attack family"),
        ({"name": "x", "family": "pgd", "threat": "L1"}, "unknown threat model"),
        ({"name": "x", "family": "pgd", "threat": "Linf", "eps": [8]}, "[0, 1]"),
        (
            {"name": "x", "family": "noise", "distribution": "salt_pepper", "threat": "L0", "eps": [1.5]},
            "[0, 1]",
        ),
        ({"name": "x", "family": "pgd", "threat": "Linf", "eps": [-0.1]}, ">= 0"),
        ({"name": "x", "family": "pgd", "threat": "Linf", "stepz": 3}, "unknown keys"),
        ({"name": "x", "family": "pgd", "threat": "Linf", "steps": 0}, "steps"),
        ({"name": "x", "family": "pgd", "threat": "Linf", "steps": 2.5}, "int"),
        ({"name": "x", "family": "square", "threat": "Linf", "backend": "foolbox"}, "does not implement"),
        ({"name": "x", "family": "noise", "distribution": "gaussian", "threat": "Linf"}, "budgeted in L2"),
        ({"name": "x", "family": "noise", "threat": "Linf"}, "missing required parameter 'distribution'"),
        ({"name": "x", "family": "fgsm", "threat": "L2"}, "supports threats"),
        ({"name": "x", "family": "lowfreq-pgd", "threat": "L0"}, "supports threats"),
        ({"name": "x", "family": "lowfreq-pgd", "threat": "Linf", "level": "deep"}, "int or 'auto'"),
        ({"name": "x", "family": "lowfreq-pgd", "threat": "Linf", "level": -1}, "level = -1 must be >= 0"),
        ({"name": "x", "family": "lowfreq-pgd", "threat": "Linf", "basis": "dct"}, "choose one of"),
    ],
)
def test_invalid_suites_raise_helpful_errors(attack: dict, message: str) -> None:
    with pytest.raises(ValueError, match=None) as err:
        parse_suite(_minimal(**attack))
    assert message in str(err.value)


def test_l2_budgets_above_one_are_valid_and_global_checks() -> None:
    s = parse_suite(_minimal(name="p", family="pgd", threat="L2", eps=[2.0, 0.5, 0.5]))
    assert s.attacks[1].eps == (0.5, 2.0)  # sorted, de-duplicated
    with pytest.raises(ValueError, match="used twice"):
        parse_suite({**_minimal(name="clean", family="fgsm", threat="Linf")})
    with pytest.raises(ValueError, match="no \\[\\[attack\\]\\]"):
        parse_suite({"name": "t"})
    with pytest.raises(ValueError, match=r"no .*L0"):
        parse_suite(
            {
                "eps": {"default": {"Linf": [0.1]}},
                "attack": [{"name": "n", "family": "noise", "distribution": "salt_pepper"}],
            }
        )
    with pytest.raises(ValueError, match="unknown top-level"):
        parse_suite({**_minimal(name="f", family="fgsm", threat="Linf"), "attacks": []})
    with pytest.raises(ValueError, match="no attack suite"):
        load_suite("no-such-suite")
    # a clean entry is added when missing, and the threat of a noise entry follows its distribution
    s = parse_suite(
        {
            "eps": {"default": {"L2": [0.5]}},
            "attack": [{"name": "g", "family": "noise", "distribution": "gaussian"}],
        }
    )
    assert [a.family for a in s.attacks] == ["clean", "noise"] and s.attacks[1].threat == "L2"


def test_backend_resolution_and_defaults() -> None:
    s = load_suite("default")
    by = {a.name: a for a in s.attacks}
    assert by["pgd_linf"].resolve_backend("auto") == "builtin"
    assert by["pgd_linf"].resolve_backend("foolbox") == "foolbox"
    assert by["fgsm"].resolve_backend("auto") == "torchattacks"
    assert by["apgd_ce"].resolve_backend("foolbox") == "torchattacks"  # foolbox has no APGD
    assert by["square"].resolve_backend("builtin") == "torchattacks"
    pinned = parse_suite(_minimal(name="p", family="pgd", threat="Linf", backend="torchattacks")).attacks[1]
    assert pinned.resolve_backend("builtin") == "torchattacks"
    # the suite round-trips through its dict form (what meta.json records)
    assert parse_suite(s.to_dict()).to_dict() == s.to_dict()


def test_a_missing_threat_is_named_as_a_missing_field() -> None:
    suite = _minimal(name="x", family="pgd")
    with pytest.raises(ValueError) as err:
        parse_suite(suite, source="suite.toml")
    assert str(err.value).startswith("attack entry 'x' (suite.toml [[attack]] #2) lacks the field 'threat'")
    assert "None" not in str(err.value)


@pytest.mark.parametrize("name", ["../../x", "a/b", ".hidden", "", "my suite", "a..b"])
def test_suite_names_must_be_safe_folder_names(name: str) -> None:
    """The suite's name becomes part of the attack run's folder name."""
    with pytest.raises(ValueError, match="suite name"):
        parse_suite({**_minimal(name="f", family="fgsm", threat="Linf"), "name": name})


def test_l2_budgets_are_checked_against_the_image_diameter() -> None:
    suite = parse_suite(_minimal(name="p", family="pgd", threat="L2", eps=[0.5, 40.0]))
    assert check_budgets(suite, None, (3, 32, 32))["L2"] == [0.5, 40.0]  # sqrt(3072) = 55.4
    with pytest.raises(ValueError, match=r"attack entry 'p' .*eps = 40 exceeds sqrt\(C\*H\*W\) = 32"):
        check_budgets(suite, None, (1, 32, 32))
