"""The README's code blocks as a newcomer runs them: every ``python -m robustbench_wave.X`` line parses with
the command's own parser in the current vocabulary (no deprecated spelling, no unknown flag), and the Python
block runs as it is, in a folder where ``make quick``'s models exist (trained here, small) -- on the synthetic
stand-in of Fashion-MNIST where that is not installed (:mod:`tests.support.datasets`)."""

from __future__ import annotations

import functools
import logging
import re
import runpy
import shlex
from pathlib import Path

import pytest

from robustbench_wave import attack, attackrun, report, train
from tests.support.datasets import FASHION_MNIST, GRAY

README = Path(__file__).resolve().parents[2] / "README.md"
PARSERS = {
    "train": lambda argv: train.get_args_parser().parse_args(argv),
    "attack": lambda argv: attack.get_args_parser().parse_args(argv),
    "report": lambda argv: report.get_args_parser().parse_args(report.with_command(argv)),
}


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)


def readme_commands() -> list[tuple[str, list[str]]]:
    """(command, argv) of every ``python -m robustbench_wave.X`` line of the README's bash blocks."""
    out = []
    for block in _blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:2] == ["python", "-m"] and words[2].startswith("robustbench_wave."):
                out.append((words[2].removeprefix("robustbench_wave."), words[3:]))
    return out


def test_the_readme_shows_each_command_line():
    assert {name for name, _ in readme_commands()} == set(PARSERS)


@pytest.mark.parametrize("command", readme_commands(), ids=lambda c: " ".join([c[0], *c[1]])[:60])
def test_every_readme_command_parses_in_the_current_vocabulary(command, caplog):
    name, argv = command
    with caplog.at_level(logging.WARNING):
        PARSERS[name](argv)
    assert [r.getMessage() for r in caplog.records if "deprecated" in r.getMessage()] == []


@pytest.mark.slow
def test_the_readme_python_block_runs_as_it_is(tmp_path, monkeypatch, capsys):
    (block,) = _blocks("python")
    assert f'dataset="{FASHION_MNIST}"' in block
    block = block.replace(f'dataset="{FASHION_MNIST}"', f'dataset="{GRAY}"')  # the same where installed
    monkeypatch.chdir(tmp_path)
    # The block's checklist on 4 points at 2 steps (what --n-diagnostics 4 --diagnostics-steps 2 give the
    # command), not benchmark()'s 32 x 10: half of the block's time, and nothing asserted here depends on it.
    # benchmark()'s default-sized checklist: tests/cli/test_python_api.py::test_the_documented_example_runs.
    small = functools.partial(attackrun.FinalizeOptions, n_diagnostics=4, diagnostics_steps=2)
    monkeypatch.setattr(attackrun, "FinalizeOptions", small)
    tiny = ["--train-subset", "512", "--epochs", "1", "--n-examples", "256", "--no-progress"]
    assert train.main(["--model", "wavelet", "--dataset", GRAY, "--results-dir", "results/quick", *tiny]) == 0
    script = tmp_path / "snippet.py"
    script.write_text(block)
    namespace = runpy.run_path(str(script))
    result = namespace["result"]
    assert result.model == "wavelet" and 0.0 <= result.robust_accuracy <= result.clean_accuracy <= 1.0
    assert result.table in capsys.readouterr().out
