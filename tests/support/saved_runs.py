"""A saved attack run of known records, for the tests of reading, reporting and merging run folders.

The records are :func:`tests.support.masking_models.synthetic_records` of one model ``m`` (N examples, the
baseline spec); the meta holds what the report reads; ``CONFIG`` is the run configuration a folder's
``config.json`` is compared with.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from robustbench_wave.evaluation.result import EvaluationResult
from tests.support.masking_models import baseline_spec, synthetic_records

N = 100
CONFIG = {"suite": "smoke", "n_examples": N, "models": ["m"]}


def run_records() -> pd.DataFrame:
    """The records of the run: model ``m`` on N examples."""
    return synthetic_records("m", baseline_spec(), n=N)


def run_meta(**extra) -> dict:
    """meta.json of the run (``extra`` adds or replaces entries)."""
    info = {"name": "synthetic", "info": {"num_classes": 4}}
    return {"dataset": info, "n_examples": N, "models": {"m": {"timing": []}}, **extra}


def saved_run(folder: Path, **extra) -> Path:
    """The run saved into ``folder`` (records.csv.gz and meta.json, as the attack command writes them)."""
    EvaluationResult(run_records(), run_meta(**extra)).save(folder)
    return folder


def one_line_error(err: BaseException, *names: object) -> str:
    """The text of ``err``, checked to be one line naming every one of ``names``."""
    text = str(err)
    assert "\n" not in text.strip()
    for name in names:
        assert str(name) in text
    return text
