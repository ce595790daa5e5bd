"""Attacks: one registry, the suite schema, the budget audit, the PGD engine, builtin attacks, library back-ends.

Import from here (``from robustbench_wave.attacks import evaluate-facing names``), not from the modules:

* :mod:`.registry` -- families (kind, threats, hyper-parameters, :class:`Trait` set) and their registered
  implementations, each ``fn(AttackRequest) -> RunOutput`` (``@register_attack``; :func:`list_attacks`,
  :func:`family_spec`, :func:`families_with`, :func:`get_runner`); :mod:`.schemas` -- the hyper-parameter
  schemas several families share;
* :mod:`.suite` -- the ``attacks/*.toml`` schema, validated against the registry;
* :mod:`.budget` -- the audit every returned point passes before it counts;
* :mod:`.seeding` -- the one seeding rule and random-start distribution;
* :mod:`.model_state` -- eval mode / frozen parameters, gradient modes, input gradients;
* :mod:`.pgd` -- the one PGD loop with hooks; :mod:`.lowfreq` -- the low-frequency attack's hooks;
* :mod:`.builtin`, :mod:`.torchattacks_backend`, :mod:`.foolbox_backend`, :mod:`.art_backend`,
  :mod:`.fab_builtin` (FAB-T from the paper) -- the implementations (importing this package registers them all); :mod:`.corruptions` -- the common corruptions (Hendrycks & Dietterich
  2019), the ``corruption`` family.
"""

from robustbench_wave.attacks import (  # noqa: F401  (registers)
    builtin,
    corruptions,
    foolbox_backend,
    torchattacks_backend,
)

# isort: off
# ART registers runners for families torchattacks_backend declares, so it comes after the modules above
from robustbench_wave.attacks import art_backend  # noqa: F401  (registers)
from robustbench_wave.attacks import fab_builtin  # noqa: F401  (registers)

# isort: on
from robustbench_wave.attacks.budget import (
    BudgetViolation,
    audit,
    budget_tolerance,
    perturbation_norm,
    within_budget,
)
from robustbench_wave.attacks.builtin import noise_sample
from robustbench_wave.attacks.lowfreq import (
    LOWFREQ_FAMILY,
    LevelChoice,
    LowFreqPGD,
    block_mean_project,
    choose_level,
    find_wavelet_front_end,
    level_from_image,
    lowfreq_projector,
    model_wavelet,
    resolve_level,
    wavelet_ll_project,
)
from robustbench_wave.attacks.model_state import (
    GradSafe,
    as_float_images,
    attack_mode,
    input_gradient,
    input_gradient_blocked,
    margin_loss,
    mode_context,
    model_device,
    modes_for,
)
from robustbench_wave.attacks.pgd import LOSSES, PGD, PGDResult, dlr_loss, pgd_with_history
from robustbench_wave.attacks.registry import (
    BACKENDS,
    CORRUPTION_SEVERITIES,
    AttackFamily,
    AttackKind,
    AttackRequest,
    Param,
    Rejects,
    RunContext,
    RunnerSpec,
    RunOutput,
    Threat,
    Trait,
    families_with,
    family_spec,
    get_runner,
    is_average_case,
    list_attacks,
    list_families,
    register_attack,
    register_family,
)
from robustbench_wave.attacks.seeding import derive_seed, example_generators, per_example, seeded
from robustbench_wave.attacks.suite import (
    DEFAULT_SUITE,
    THREATS,
    AttackEntry,
    EntryFit,
    Suite,
    fit_entry,
    list_suites,
    load_suite,
    parse_budgets,
    parse_eps,
    parse_suite,
    parse_threat,
)

__all__ = [
    "BACKENDS",
    "CORRUPTION_SEVERITIES",
    "DEFAULT_SUITE",
    "LOSSES",
    "LOWFREQ_FAMILY",
    "PGD",
    "THREATS",
    "AttackEntry",
    "AttackFamily",
    "AttackKind",
    "AttackRequest",
    "BudgetViolation",
    "EntryFit",
    "GradSafe",
    "LevelChoice",
    "LowFreqPGD",
    "PGDResult",
    "Param",
    "Rejects",
    "RunContext",
    "RunOutput",
    "RunnerSpec",
    "Suite",
    "Threat",
    "Trait",
    "as_float_images",
    "attack_mode",
    "audit",
    "block_mean_project",
    "budget_tolerance",
    "choose_level",
    "derive_seed",
    "dlr_loss",
    "example_generators",
    "families_with",
    "family_spec",
    "find_wavelet_front_end",
    "fit_entry",
    "get_runner",
    "input_gradient",
    "input_gradient_blocked",
    "is_average_case",
    "level_from_image",
    "list_attacks",
    "list_families",
    "list_suites",
    "load_suite",
    "lowfreq_projector",
    "margin_loss",
    "mode_context",
    "model_device",
    "model_wavelet",
    "modes_for",
    "noise_sample",
    "parse_budgets",
    "parse_eps",
    "parse_suite",
    "parse_threat",
    "per_example",
    "perturbation_norm",
    "pgd_with_history",
    "register_attack",
    "register_family",
    "resolve_level",
    "seeded",
    "wavelet_ll_project",
    "within_budget",
]
