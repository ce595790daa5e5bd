"""The gradient-masking checklist: one class per check, all in one registry.

The checks follow the published checklists -- Carlini et al. 2019 ("On Evaluating Adversarial
Robustness"), Athalye, Carlini & Wagner 2018 ("Obfuscated Gradients Give a False Sense of Security") and
Croce & Hein 2020 (AutoAttack). :mod:`.record_checks` judges per-example records, :mod:`.model_checks`
runs the model on a subset; :mod:`.check` defines :class:`Check` and the registry. To add a check, write one
class in either module (or a new one imported here)::

    @register_check
    @dataclass(frozen=True)
    class MyCheck(RecordCheck):          # or Check with reads = Reads.MODEL and run(inputs, mode)
        \"\"\"What it compares, and what a failure means.\"\"\"
        name: ClassVar[str] = "my_check"
        tol: float = 0.02                 # thresholds are dataclass fields with defaults
        def judge(self, records, mode) -> CheckResult: ...

and give it a firing and a passing case in ``tests/support/masking_models.CHECK_CASES``.
"""

# isort: off  (registration order is the order the checks run and are reported in)
from . import model_checks as model_checks
from . import record_checks as record_checks

# isort: on
from .check import (
    Check,
    CheckInputs,
    CheckResult,
    Reads,
    RecordCheck,
    default_checks,
    get_check,
    list_checks,
    register_check,
)
from .model_checks import loss_convergence

__all__ = [
    "Check",
    "CheckInputs",
    "CheckResult",
    "Reads",
    "RecordCheck",
    "default_checks",
    "get_check",
    "list_checks",
    "loss_convergence",
    "register_check",
]
