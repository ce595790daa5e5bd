"""``robustbench_wave.benchmark``: docs/python-api.md's example runs as written, its defaults are the attack
command's, and its numbers are the records' (checked against the metrics computed from them)."""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

import pytest

import robustbench_wave
from robustbench_wave import api, attack, attackrun
from robustbench_wave.evaluation import evaluate, metrics
from tests.support import REPO
from tests.support.escalation_queries import fewer_square_queries

DOC = REPO / "docs" / "python-api.md"
evaluate_defaults = inspect.signature(evaluate).parameters


def _example() -> str:
    text = DOC.read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", text[: text.index("## Your own loop")], flags=re.S)
    assert len(blocks) == 1, "docs/python-api.md should hold one benchmark() example before evaluate()'s"
    return blocks[0]


@pytest.mark.slow  # trains a small CNN and attacks it (~15 s)
def test_the_documented_example_runs(capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    # the checklist fails attack_convergence and escalates: its Square at 500 queries, not 5,000 (two thirds
    # of the example's time); what 5,000 queries break: tests/support/escalation_queries.py
    fewer_square_queries(monkeypatch)
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


class _Stop(Exception):
    """Raised by the stand-in for ``prepare_job``: the objects benchmark() built are caught before any load."""


def _built(monkeypatch: pytest.MonkeyPatch, *args: object, **kwargs: object) -> tuple:
    """The RunSettings, RunOptions and suite ``benchmark(*args, **kwargs)`` hands to ``attackrun.prepare_job``."""
    seen: list[tuple] = []

    def stand_in(settings, options, suite, command, echo, loaded=None):  # type: ignore[no-untyped-def]
        seen.append((settings, options, suite))
        raise _Stop

    monkeypatch.setattr(api.attackrun, "prepare_job", stand_in)
    with pytest.raises(_Stop):
        robustbench_wave.benchmark(*args, **kwargs)
    return seen[0]


def test_defaults_are_the_attack_commands(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """benchmark() builds the attack command's objects itself (no argv, no parser): every keyword left at None
    takes the field's default, the same the command's flags read, so the two cannot disagree."""
    settings, options, suite = _built(monkeypatch, "patch", out=tmp_path, progress=True)
    cli_settings, cli_options, cli_suite = attack.resolve(["--model", "patch", "--out", str(tmp_path)])
    assert settings == cli_settings and options == cli_options and suite == cli_suite
    assert settings.evaluation.cross_check == "headline"  # the command line's cross-check default
    assert options.batch_size == attackrun.RunOptions.batch_size == evaluate_defaults["batch_size"].default
    chosen = _built(
        monkeypatch, "patch", 16, "synthetic", eps=["8/255", 0.1], suite="smoke", attacks=["fgsm"], seed=3,
        cross_check="all", grad_modes=["exact", "patch=bpda"], eot="off", batch_size=7, out=tmp_path,
        progress=False, diagnostics=False,
    )  # fmt: skip
    flags = [
        "--model", "patch", "--n-examples", "16", "--dataset", "synthetic", "--eps", "Linf=8/255,0.1",
        "--suite", "smoke", "--attacks", "fgsm", "--seed", "3", "--cross-check", "all", "--grad-modes",
        "exact", "--grad-modes", "patch=bpda", "--eot", "off", "--batch-size", "7", "--out", str(tmp_path),
        "--no-progress", "--no-diagnostics",
    ]  # fmt: skip
    assert chosen == attack.resolve(flags)


def test_bad_input_is_a_value_error_with_the_commands_message(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cross-check"):
        robustbench_wave.benchmark("patch", cross_check="sometimes", out=tmp_path)
    with pytest.raises(ValueError, match="no_such_suite"):
        robustbench_wave.benchmark("patch", suite="no_such_suite", out=tmp_path)
    assert not any(tmp_path.iterdir())  # refused before anything is written


def test_a_refused_run_is_a_value_error_raised_where_it_is_refused(tmp_path: Path) -> None:
    """No SystemExit is caught and re-raised: the run's own refusal (here a zoo model never trained in
    ``results_dir``) is attackrun.RunRefused, a ValueError, and nothing is written."""
    with pytest.raises(attackrun.RunRefused, match="cannot load model 'patch'") as refused:
        robustbench_wave.benchmark(
            "patch",
            4,
            "synthetic",
            suite="smoke",
            surrogate="none",
            results_dir=tmp_path / "none",
            out=tmp_path,
        )
    assert isinstance(refused.value, ValueError) and not any(tmp_path.iterdir())


def test_progress_bars_show_when_a_person_is_watching(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """benchmark() hid the bars always (a notebook sat silent for minutes); now only when nobody watches:
    stderr not a terminal and no Jupyter kernel, or progress=False."""

    def progress(**kwargs: object) -> bool:
        return _built(monkeypatch, "patch", out=tmp_path, **kwargs)[1].progress

    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    monkeypatch.setattr(api.sys.stderr, "isatty", lambda: False, raising=False)
    assert not progress()
    monkeypatch.setattr(api.sys.stderr, "isatty", lambda: True, raising=False)
    assert progress() and not progress(progress=False)
    monkeypatch.setattr(api.sys.stderr, "isatty", lambda: False, raising=False)
    monkeypatch.setitem(sys.modules, "ipykernel", object())
    assert progress() and progress(progress=True)
