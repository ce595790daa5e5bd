"""The hyper-parameters several families share, declared once (:class:`~.registry.Param` schemas).

A family's ``params`` dict is built from these in its own key order: that order is the order of the entry's
``params`` in ``meta.json`` and of a suite's ``to_dict``, so each family keeps listing its keys explicitly;
only the definitions (type, default, bounds, choices) live here. Families whose defaults differ from the
shared one (``steps``, the low-frequency PGD's ``rel_step_size``) call the small factories.
"""

from __future__ import annotations

from robustbench_wave.attacks.pgd import LOSSES
from robustbench_wave.attacks.registry import Param


def steps(default: int) -> Param:
    """Iterations (gradient steps) per restart."""
    return Param(int, default, minimum=1)


def rel_step_size(default: float) -> Param:
    """The step size in units of eps (:func:`robustbench_wave.attacks.pgd.step_size`)."""
    return Param(float, default, minimum=0.0)


RESTARTS = Param(int, 1, minimum=1)
RANDOM_START = Param(bool, True)
EOT_ITER = Param(int, 1, minimum=1)  # forward/backward passes averaged per gradient (EOT); 1 = plain gradient
LOSS = Param(str, "ce", choices=LOSSES)  # the ascended loss: cross-entropy or DLR (Croce & Hein 2020)
RHO = Param(float, 0.75, minimum=0.0)  # APGD's step-size halving threshold
N_TARGET_CLASSES = Param(int, 9, minimum=1)  # AutoAttack's targeted members: classes tried per point

#: The PGD engine's schema (builtin PGD, transfer; the low-frequency PGD overrides ``rel_step_size``).
PGD_PARAMS = {
    "steps": steps(20),
    "rel_step_size": rel_step_size(0.1),
    "restarts": RESTARTS,
    "random_start": RANDOM_START,
}
