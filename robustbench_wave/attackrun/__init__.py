"""Attack runs: one run folder from its settings to its report, below the command lines that start it.

``python -m robustbench_wave.attack`` parses flags into :class:`RunSettings` (what makes two invocations the
same run) and :class:`RunOptions` (how it runs and where it writes), whose fields give the flags their
defaults; ``robustbench_wave.benchmark`` builds the same two directly. Both then call this package, which
refuses a run it cannot honour with :class:`RunRefused` (a ValueError) before any attack:

* :mod:`.settings`: the settings, the suite and gradient modes chosen, models from outside the zoo, the
  names that become folders;
* :mod:`.models`: the models loaded once under their record names, checked against the data set, and
  reloaded later (merge, finalize, re-audit) with their checkpoint and spec hashes checked;
* :mod:`.folder`: ``OUT/attack/<data set>/<run>``, its ``config.json`` and overwrite rules (a folder holding
  another configuration is refused unless ``--overwrite``, which first removes what that configuration made
  and nothing else), the run lock, and the one builder of ``meta.json``'s ``run`` entry;
* :mod:`.job`: one invocation resolved before anything is written (:func:`prepare_job`);
* :mod:`.run_job`: every model through :func:`robustbench_wave.evaluation.evaluate`, on the whole run, on
  torchrun's ranks (rank 0 gathers and merges) or as one ``--shard i/n`` job whose
  :class:`~robustbench_wave.evaluation.sharding.ShardJob` ``report merge`` reads;
* :mod:`.measure`: the attacks the finished run's last step runs beyond its suite (the checklist's subset
  attacks, the energy PGD), their ``diagnostics.csv/json`` and ``energy.csv``, then report.md
  (:func:`measure_run`);
* :mod:`.finalize`: diagnostics, escalation after the checklist, verdict, report.md and marked tables of the
  finished run (:func:`finalize_run`);
* :mod:`.invocation`: the attack command's flags as a run's settings (:func:`settings_from_args`), or a run's
  config.json read back for ``attack --config RUN/config.json`` and the rerun checked to be that run
  (:func:`read_config_flag`, :func:`check_rerun`);
* :mod:`.merge` and :mod:`.run_reaudit`: what ``python -m robustbench_wave.report merge RUN`` and ``reaudit
  RUN`` do with a finished run.

The package sits above ``reporting`` (it writes tables and reports) and below the command lines; the
report command reaches it here, never through the attack command.
"""

from robustbench_wave.attackrun.finalize import (
    FinalizeOptions,
    ShardFinalize,
    finalize_merged_run,
    finalize_run,
)
from robustbench_wave.attackrun.folder import (
    CHUNKS_DIR,
    LOCK_HINT,
    RUN_FILES,
    RUN_FOLDERS,
    prepare_run_dir,
    run_folder,
    run_meta,
)
from robustbench_wave.attackrun.invocation import (
    check_rerun,
    read_config,
    read_config_flag,
    settings_from_args,
)
from robustbench_wave.attackrun.job import Job, RunOptions, check_run, gradient_path_lines, prepare_job
from robustbench_wave.attackrun.measure import measure_run
from robustbench_wave.attackrun.merge import finish_merged_run, write_merged_run
from robustbench_wave.attackrun.models import (
    Loaded,
    check_dataset,
    choose_surrogate,
    load_model,
    load_models,
    model_hashes,
    reload_models,
)
from robustbench_wave.attackrun.run_job import (
    attack_models,
    check_shards,
    choose_shard,
    rank_shard,
    run_data_sha256,
    run_job,
)
from robustbench_wave.attackrun.run_reaudit import reaudit_run
from robustbench_wave.attackrun.settings import (
    AUTO_SURROGATE,
    AUTO_SURROGATE_MODEL,
    BASELINE_HELP,
    DEFAULT_DATASET,
    ESCALATION_CHOICES,
    ESCALATION_HELP,
    NO_SURROGATE,
    RUN_EVALUATION,
    ExternalFlags,
    GradModeRequest,
    OwnedByModel,
    RunRefused,
    RunSettings,
    add_external_flags,
    add_request_flags,
    baseline_reference,
    check_grad_mode_models,
    check_names,
    default_run_name,
    external_specs,
    normalize_arg,
    parse_grad_modes,
    resolve_model_modes,
    select_suite,
    suite_at_budgets,
)

__all__ = [
    "AUTO_SURROGATE",
    "AUTO_SURROGATE_MODEL",
    "BASELINE_HELP",
    "CHUNKS_DIR",
    "DEFAULT_DATASET",
    "ESCALATION_CHOICES",
    "ESCALATION_HELP",
    "LOCK_HINT",
    "NO_SURROGATE",
    "RUN_EVALUATION",
    "RUN_FILES",
    "RUN_FOLDERS",
    "ExternalFlags",
    "FinalizeOptions",
    "GradModeRequest",
    "Job",
    "Loaded",
    "OwnedByModel",
    "RunOptions",
    "RunRefused",
    "RunSettings",
    "ShardFinalize",
    "add_external_flags",
    "add_request_flags",
    "attack_models",
    "baseline_reference",
    "check_dataset",
    "check_grad_mode_models",
    "check_names",
    "check_rerun",
    "check_run",
    "check_shards",
    "choose_shard",
    "choose_surrogate",
    "default_run_name",
    "external_specs",
    "finalize_merged_run",
    "finalize_run",
    "finish_merged_run",
    "gradient_path_lines",
    "load_model",
    "load_models",
    "measure_run",
    "model_hashes",
    "normalize_arg",
    "parse_grad_modes",
    "prepare_job",
    "prepare_run_dir",
    "rank_shard",
    "read_config",
    "read_config_flag",
    "reaudit_run",
    "reload_models",
    "resolve_model_modes",
    "run_data_sha256",
    "run_folder",
    "run_job",
    "run_meta",
    "select_suite",
    "settings_from_args",
    "suite_at_budgets",
    "write_merged_run",
]
