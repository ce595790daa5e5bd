"""The gallery's attack step with its attack commands run in the test's own process.

``attack_gallery`` starts ``python -m robustbench_wave.attack`` once per defence and protocol, its output into
the run's log file; each start costs seconds of imports (torch, timm, torchvision) before the first attack.
Tests about what those runs record and tabulate, not about the process, call :func:`attack_in_process`: each
command is checked to be that module under this interpreter and its ``main`` runs here, its output into the
same log file, its exit status (a ``SystemExit`` included) the returned one. The first ``real`` commands still
go to the gallery's own ``subprocess.run`` (``tests/defenses/test_gallery_end_to_end.py`` starts one, so the
real launch stays covered).
"""

from __future__ import annotations

import contextlib
import sys
import traceback
from types import SimpleNamespace
from typing import Any

import pytest

from robustbench_wave import attack
from robustbench_wave.defenses import protocols

LAUNCH = [sys.executable, "-m", "robustbench_wave.attack"]


def _exit_status(err: SystemExit) -> int:
    """What the interpreter returns for ``err`` (a message is printed to stderr, as ``python`` prints it)."""
    if err.code is None or isinstance(err.code, int):
        return err.code or 0
    print(err.code, file=sys.stderr)
    return 1


def attack_in_process(monkeypatch: pytest.MonkeyPatch, real: int = 0) -> list[list[str]]:
    """Run the gallery's attack commands here (after the first ``real`` ones, which start their process as
    the gallery does); returns the list the commands are appended to, in order, as the gallery gave them."""
    commands: list[list[str]] = []
    library = protocols.subprocess  # the module the gallery starts its processes with

    def run(command: list[str], *, stdout: Any = None, stderr: Any = None, **kwargs: Any) -> Any:
        commands.append(list(command))
        if len(commands) <= real:
            return library.run(command, stdout=stdout, stderr=stderr, **kwargs)
        assert command[: len(LAUNCH)] == LAUNCH, command  # what a process would have started
        err = stdout if stderr == library.STDOUT else stderr
        with contextlib.redirect_stdout(stdout or sys.stdout), contextlib.redirect_stderr(err or sys.stderr):
            try:
                status = attack.main(command[len(LAUNCH) :])
            except SystemExit as exit_:
                status = _exit_status(exit_)
            except Exception:  # as an uncaught exception ends the process: traceback, status 1
                traceback.print_exc()
                status = 1
        return library.CompletedProcess(command, status)

    monkeypatch.setattr(protocols, "subprocess", SimpleNamespace(run=run, STDOUT=library.STDOUT))
    return commands
