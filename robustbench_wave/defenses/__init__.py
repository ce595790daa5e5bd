"""The gallery of defences known to be broken, end to end: train its CNNs, attack every defence twice, tabulate.

Athalye, Carlini & Wagner (2018) showed that input transformations and randomised layers look robust under
exact gradients and fall under BPDA and EOT; the harness must reproduce that on the small versions in
:mod:`robustbench_wave.models.gallery` without being told which defence is which. This package owns the
three steps of ``python -m robustbench_wave.gallery`` (and ``make defenses``): :mod:`.training` trains the
gallery's weights with the shared recipe (:mod:`robustbench_wave.training.engine`), reusing finished ones;
:mod:`.protocols` attacks each defence with the attack command (``python -m robustbench_wave.attack``) under a
naive protocol (the exact gradient, no EOT in the attacks) and the adaptive one (the harness's automatic
BPDA and EOT); :mod:`.table` builds the one table from those run folders' records and checklists. A
defence of the user's (``--defence FILE.py:FACTORY --weights W``) goes through the same two protocols in
the same runs as its undefended twin (``--baseline``), which its row is judged against on the same images.
"""

from robustbench_wave.defenses.protocols import (
    PROTOCOLS,
    AttackOptions,
    attack_gallery,
    check_own_models,
    run_name,
)
from robustbench_wave.defenses.table import build_table, write_table
from robustbench_wave.defenses.training import GALLERY_RECIPE, TrainOptions, train_gallery, weights_path

__all__ = [
    "GALLERY_RECIPE",
    "PROTOCOLS",
    "AttackOptions",
    "TrainOptions",
    "attack_gallery",
    "build_table",
    "check_own_models",
    "run_name",
    "train_gallery",
    "weights_path",
    "write_table",
]
