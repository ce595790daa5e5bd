"""Re-checking a finished run's saved adversarial examples (``report reaudit RUN``): the run's models and
test images reloaded the way the attack command loaded them, their hashes checked to be the ones attacked,
then every saved point re-audited against the records
(:func:`robustbench_wave.evaluation.reaudit.reaudit_model`).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from robustbench_wave.attackrun.models import reload_models
from robustbench_wave.attackrun.run_job import run_data_sha256
from robustbench_wave.core.distributed import resolve_device
from robustbench_wave.data import load_test_images
from robustbench_wave.evaluation import records as rec
from robustbench_wave.evaluation.chunks import state_sha256
from robustbench_wave.evaluation.eot import EotPlan
from robustbench_wave.evaluation.plan import DEFAULT_BATCH_SIZE
from robustbench_wave.evaluation.reaudit import problems as reaudit_problems
from robustbench_wave.evaluation.reaudit import reaudit_model
from robustbench_wave.evaluation.result import load_adversarial
from robustbench_wave.models.compiled import compile_model
from robustbench_wave.reporting.runs import load_run


def reaudit_run(
    run_dir: Path, results_dir: Path, device: str = "auto", batch_size: int | None = None
) -> tuple[pd.DataFrame, list[str]]:
    """(the re-audit table of every model, the problems found): the run checked complete, its models and
    test images reloaded and checked to be the ones attacked, then :func:`evaluation.reaudit.reaudit_model`."""
    run = load_run(run_dir)
    kept = load_adversarial(run_dir, run.meta)
    if not kept:
        raise ValueError(
            f"{run_dir} holds no saved adversarial examples ({rec.META_FILE} lists none); re-run the attack "
            "command with --save-adversarial"
        )
    config = dict(run.invocation.config) or rec.read_meta(run_dir / rec.CONFIG_FILE)
    models = reload_models(config, results_dir, "since the run was attacked; cannot re-audit")
    data = load_test_images(config["dataset"], config["n_examples"])
    if run_data_sha256(data) != run.dataset.data_sha256:
        raise ValueError(f"the {config['dataset']} test images differ from the attacked ones (data_sha256)")
    dev = resolve_device(device)
    batch = batch_size or run.settings.batch_size or DEFAULT_BATCH_SIZE
    tables, problems, plans = [], [], {}
    for name, adv in kept.items():
        model = compile_model(models[name][0], config.get("compile", "off")).to(dev)
        recorded = run.models.entries[name]
        if state_sha256(model) != recorded.param_sha256:
            problems.append(f"{name}: the reloaded weights differ from the attacked ones (param_sha256)")
        rows = run.records[run.records["model"] == name]
        ids = range(len(data))
        plans[name] = EotPlan.from_meta(recorded.eot) if recorded.eot else None
        tables.append(
            reaudit_model(
                model, data.images, data.labels, ids, adv, rows, batch_size=batch, device=dev,
                eot=plans[name], seed=int(config.get("seed", 0)),
            )
        )  # fmt: skip
    table = pd.concat(tables, ignore_index=True)
    return table, problems + reaudit_problems(table, {k: v for k, v in plans.items() if v is not None})
