"""``robustbench_wave.benchmark``: docs/python-api.md's example runs as written, its defaults are the attack
command's, and its numbers are the records' (checked against the metrics computed from them)."""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

import pytest

import robustbench_wave
from robustbench_wave import api, attack
from robustbench_wave.evaluation import metrics
from tests.support import REPO

DOC = REPO / "docs" / "python-api.md"


def _example() -> str:
    text = DOC.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text[: text.index("## Your own loop")], flags=re.S)
    assert len(blocks) == 1, "docs/python-api.md should hold one benchmark() example before evaluate()'s"
    return blocks[0]


@pytest.mark.slow  # trains a small CNN and attacks it (~30 s)
def test_the_documented_example_runs(capsys) -> None:
    scope: dict[str, object] = {}
    exec(compile(_example(), str(DOC), "exec"), scope)  # the repository's own documentation
    result = scope["result"]
    assert isinstance(result, api.BenchmarkResult) and result.run_dir is None  # temporary folder removed
    assert result.model == "small_cnn" and result.eps == 0.1
    printed = capsys.readouterr().out
    assert (
        "Robust accuracy on synthetic (n = 48); suite smoke" in printed
        and result.verdict["headline"] in printed
    )
    rows = result.records[result.records["model"] == "small_cnn"]
    assert result.robust_accuracy == metrics.robust_accuracy(rows, "Linf", 0.1)[0] < result.clean_accuracy
    assert result.clean_accuracy > 0.5  # the trained CNN has learned the task
    assert {"deterministic", "large_eps_to_chance"} <= set(result.checklist["check"])


def test_defaults_are_the_attack_commands() -> None:
    """Every keyword left at None is not passed, so the command's parser supplies its default."""
    params = inspect.signature(api.benchmark).parameters
    passed_as_flags = set(api._FLAGS) | {"grad_modes"}
    assert all(params[k].default is None for k in passed_as_flags)
    settings, options, suite, modes = attack.resolve(
        api._argv("patch", {**{k: None for k in params}, "diagnostics": True})
    )
    cli_settings, cli_options, cli_suite, cli_modes = attack.resolve(["--model", "patch"])
    assert settings == cli_settings and suite.name == cli_suite.name and modes == cli_modes
    assert settings.cross_check == "headline"  # the command line's cross-check default
    assert options.finalize == cli_options.finalize and options.results_dir == cli_options.results_dir


def test_bad_input_is_a_value_error_with_the_commands_message(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="--cross-check"):
        robustbench_wave.benchmark("patch", cross_check="sometimes", out=tmp_path)
    with pytest.raises(ValueError, match="no_such_suite"):
        robustbench_wave.benchmark("patch", suite="no_such_suite", out=tmp_path)
    assert not any(tmp_path.iterdir())  # refused before anything is written


def test_progress_bars_show_when_a_person_is_watching(monkeypatch) -> None:
    """benchmark() passed --no-progress always (a notebook sat silent for minutes); now only when nobody
    watches: stderr not a terminal and no Jupyter kernel, or progress=False."""
    params = {k: None for k in inspect.signature(api.benchmark).parameters}
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    monkeypatch.setattr(api.sys.stderr, "isatty", lambda: False, raising=False)
    assert "--no-progress" in api._argv("m", params)
    monkeypatch.setattr(api.sys.stderr, "isatty", lambda: True, raising=False)
    assert "--no-progress" not in api._argv("m", params)
    assert "--no-progress" in api._argv("m", {**params, "progress": False})
    monkeypatch.setattr(api.sys.stderr, "isatty", lambda: False, raising=False)
    monkeypatch.setitem(sys.modules, "ipykernel", object())
    assert "--no-progress" not in api._argv("m", params)
    assert "--no-progress" not in api._argv("m", {**params, "progress": True})
