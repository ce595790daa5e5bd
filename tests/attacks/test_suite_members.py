"""Every published suite attacks each norm threat with AutoAttack's three kinds of attack, so none can lose
them again: APGD on the cross-entropy, APGD on a margin loss (the DLR loss, or the targeted APGD-T), and a
gradient-free attack. L2 once had 20-step PGD alone, and on an undefended CNN its worst case read 5 points above
an independent 100-step PGD with a margin loss (benchmarks/bench_strength.py measures the gap)."""

from __future__ import annotations

from pathlib import Path

import pytest

from robustbench_wave.attacks import AttackKind, Suite, family_spec, load_suite, parse_suite

SUITES = Path(__file__).resolve().parents[2] / "attacks"
NORM_THREATS = ("Linf", "L2")
#: The suites whose numbers are published (read each file's header): the demo's, `make headline`'s, `make
#: quick`'s and `make cifar10`'s.
PUBLISHED = ("default", "headline", "quick-look", "autoattack")
#: Suites that need not have the members, and why (a new suite file must be listed in one of the two).
EXEMPT = {
    "smoke": "tests and CI only: every family once with minimal steps, never reported",
    "corruptions": "average-case accuracy under common corruptions: no L∞ or L2 threat",
}
#: Suites allowed fewer than AutoAttack's 100 APGD iterations: `make quick`'s, labelled a quick look.
FEW_STEPS = {"quick-look"}
AUTOATTACK_STEPS = 100


def missing_members(suite: Suite) -> list[str]:
    """What ``suite`` lacks per norm threat: 'Linf: apgd-ce', 'L2: gradient-free', ... (empty: complete)."""
    missing = []
    for threat in NORM_THREATS:
        entries = [e for e in suite.attacks if e.threat == threat]
        kinds = {
            "apgd-ce": [e for e in entries if e.family == "apgd" and e.params["loss"] == "ce"],
            "apgd-margin": [
                e
                for e in entries
                if e.family == "apgd-t" or (e.family == "apgd" and e.params["loss"] == "dlr")
            ],
            "gradient-free": [e for e in entries if family_spec(e.family).kind == AttackKind.BLACK_BOX],
        }
        missing += [f"{threat}: {kind}" for kind, found in kinds.items() if not found]
    return missing


def apgd_steps(suite: Suite) -> dict[str, int]:
    """Each APGD entry's iterations (APGD-CE, APGD-DLR and APGD-T alike)."""
    return {e.name: e.params["steps"] for e in suite.attacks if e.family in ("apgd", "apgd-t")}


def test_every_suite_file_is_published_or_exempt_with_a_reason() -> None:
    names = {p.stem for p in SUITES.glob("*.toml")}
    assert names == set(PUBLISHED) | set(EXEMPT), "list a new suite in PUBLISHED or in EXEMPT with its reason"
    assert not set(PUBLISHED) & set(EXEMPT)


@pytest.mark.parametrize("name", PUBLISHED)
def test_every_published_suite_has_apgd_ce_apgd_margin_and_a_gradient_free_attack_at_linf_and_l2(
    name: str,
) -> None:
    suite = load_suite(name)
    assert missing_members(suite) == []
    if name not in FEW_STEPS:  # AutoAttack's iterations, not a shortened APGD
        assert set(apgd_steps(suite).values()) == {AUTOATTACK_STEPS}, apgd_steps(suite)


def _suite(*attacks: dict) -> Suite:
    return parse_suite(
        {
            "name": "planted",
            "eps": {"default": {"Linf": [0.1], "L2": [0.5]}},
            "attack": [{"name": "clean", "family": "clean"}, *attacks],
        }
    )


def test_the_check_names_each_missing_member_of_a_planted_suite() -> None:
    """The old headline's L2 (PGD alone) and an L∞ whose margin member is the targeted APGD-T."""
    suite = _suite(
        {"name": "pgd_l2", "family": "pgd", "threat": "L2"},
        {"name": "apgd_ce", "family": "apgd", "threat": "Linf", "loss": "ce"},
        {"name": "apgd_t", "family": "apgd-t", "threat": "Linf"},
        {"name": "square", "family": "square", "threat": "Linf"},
        {"name": "apgd_dlr_l2", "family": "apgd", "threat": "L2", "loss": "dlr"},  # margin, but no CE
        {
            "name": "noise",
            "family": "noise",
            "threat": "L2",
            "distribution": "gaussian",
        },  # random: not Square
    )
    assert missing_members(suite) == ["L2: apgd-ce", "L2: gradient-free"]
    assert apgd_steps(suite) == {"apgd_ce": 100, "apgd_t": 100, "apgd_dlr_l2": 100}  # the families' defaults


def test_a_cross_entropy_apgd_is_no_margin_member() -> None:
    suite = _suite(
        {"name": "apgd_ce", "family": "apgd", "threat": "Linf", "loss": "ce"},
        {"name": "square", "family": "square", "threat": "Linf"},
        {"name": "apgd_ce_l2", "family": "apgd", "threat": "L2"},  # loss defaults to ce
        {"name": "square_l2", "family": "square", "threat": "L2"},
    )
    assert missing_members(suite) == ["Linf: apgd-margin", "L2: apgd-margin"]
