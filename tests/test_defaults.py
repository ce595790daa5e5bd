"""One default per protocol setting, whatever the door: the checklist's sample and steps are the same from the
attack command, from ``finalize_run`` and from ``run_diagnostics`` called directly (they were 32 from the
command line and 64 from Python, so a library caller silently got another protocol)."""

from __future__ import annotations

import inspect

from robustbench_wave import attack
from robustbench_wave.analysis.diagnostics import DIAGNOSTICS_SAMPLE, DIAGNOSTICS_STEPS, run_diagnostics
from robustbench_wave.attackrun import FinalizeOptions
from robustbench_wave.attackrun.measure import finalize_run


def test_the_checklist_sample_and_steps_have_one_default() -> None:
    cli = attack.get_args_parser().parse_args(["--model", "patch"])
    direct = inspect.signature(run_diagnostics).parameters
    finalize = inspect.signature(finalize_run).parameters
    samples = {cli.n_diagnostics, FinalizeOptions().n_diagnostics, direct["n"].default}
    samples.add(finalize["n_diagnostics"].default)
    steps = {cli.diagnostics_steps, FinalizeOptions().diagnostics_steps, direct["steps"].default}
    steps.add(finalize["diagnostics_steps"].default)
    assert samples == {DIAGNOSTICS_SAMPLE} and steps == {DIAGNOSTICS_STEPS}
