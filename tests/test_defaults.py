"""One default per protocol setting, whatever the door: the checklist's sample and steps are the same from the
attack command, from ``measure_run`` and from ``run_diagnostics`` called directly (they were 32 from the
command line and 64 from Python, so a library caller silently got another protocol); the batch size has one
default; the run's dataclasses hold the inner ones without restating their fields."""

from __future__ import annotations

import ast
import dataclasses
import inspect

from robustbench_wave import attack
from robustbench_wave.analysis.diagnostics import DIAGNOSTICS_SAMPLE, DIAGNOSTICS_STEPS, run_diagnostics
from robustbench_wave.attackrun import FinalizeOptions, RunOptions, RunSettings
from robustbench_wave.attackrun.measure import measure_run
from robustbench_wave.evaluation import EvalSettings, evaluate
from robustbench_wave.evaluation.plan import DEFAULT_BATCH_SIZE
from robustbench_wave.evaluation.reaudit import reaudit_model
from tests.test_architecture import PACKAGE


def test_the_checklist_sample_and_steps_have_one_default() -> None:
    cli = attack.get_args_parser().parse_args(["--model", "patch"])
    direct = inspect.signature(run_diagnostics).parameters
    finalize = inspect.signature(measure_run).parameters
    samples = {cli.n_diagnostics, FinalizeOptions().n_diagnostics, direct["n"].default}
    samples.add(finalize["n_diagnostics"].default)
    steps = {cli.diagnostics_steps, FinalizeOptions().diagnostics_steps, direct["steps"].default}
    steps.add(finalize["diagnostics_steps"].default)
    assert samples == {DIAGNOSTICS_SAMPLE} and steps == {DIAGNOSTICS_STEPS}


def test_the_batch_size_has_one_default() -> None:
    """The attack command, the run's options, evaluate(), the checklist and the re-audit all take
    ``DEFAULT_BATCH_SIZE``; no signature or field outside training (whose recipe's batch is a training
    hyper-parameter) writes a number of its own (it was 128 in seven places)."""
    cli = attack.get_args_parser().parse_args(["--model", "patch"])
    defaults = {
        cli.batch_size,
        RunOptions().batch_size,
        inspect.signature(evaluate).parameters["batch_size"].default,
    }
    defaults.add(inspect.signature(measure_run).parameters["batch_size"].default)
    defaults.add(inspect.signature(reaudit_model).parameters["batch_size"].default)
    assert defaults == {DEFAULT_BATCH_SIZE}
    written = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] == "training":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "batch_size":
                pairs = [(node.target.id, node.value)]
            elif isinstance(node, ast.arguments):
                args = [*node.posonlyargs, *node.args]
                pairs = list(zip([a.arg for a in args[len(args) - len(node.defaults) :]], node.defaults))
                pairs += [(a.arg, d) for a, d in zip(node.kwonlyargs, node.kw_defaults) if d is not None]
            else:
                continue
            written += [
                f"{path.relative_to(PACKAGE)}:{value.lineno}"
                for name, value in pairs
                if name == "batch_size" and isinstance(value, ast.Constant) and isinstance(value.value, int)
            ]
    assert not written, f"batch_size defaults written as numbers (use DEFAULT_BATCH_SIZE): {written}"


def test_the_run_settings_hold_the_evaluation_settings_without_restating_them() -> None:
    """RunSettings carries EvalSettings whole and RunOptions carries FinalizeOptions whole: no field of the
    inner one is repeated in the outer one (FinalizeOptions restated batch_size and seed, RunSettings six
    fields of EvalSettings), so each has one default and one check."""
    names = {c: {f.name for f in dataclasses.fields(c)} for c in (RunSettings, EvalSettings, RunOptions)}
    assert not names[RunSettings] & (names[EvalSettings] - {"grad_modes"})  # grad_modes: the request
    assert not {f.name for f in dataclasses.fields(FinalizeOptions)} & names[RunOptions]
    assert RunSettings.evaluation.cross_check == "headline" and EvalSettings.cross_check == "off"
