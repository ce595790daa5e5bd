"""Bad input to the command lines as a user types it, each command a process of its own: the bad-input
matrix's subprocess cases (test_bad_inputs.py runs the others in-process), and ``--out`` in a folder the
user may not write to (as root, the command runs as the unprivileged ``nobody``: root ignores permissions).

Every case must end with a non-zero exit, one line naming the culprit, no traceback, and nothing written.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.cli import test_bad_inputs as matrix
from tests.cli.test_bad_inputs import CASES, TRAIN_BASE, Case, Shared, check_case, command_flags
from tests.support import REPO
from tests.support.bad_inputs import failures, run_subprocess, unchanged
from tests.support.saved_runs import saved_run

pytestmark = pytest.mark.slow  # every test here starts processes

shared = matrix.shared  # the matrix's fixture: the trained runs each case works on a copy of
SUBPROCESS = [c for c in CASES if c.subprocess]


@pytest.mark.parametrize("case", SUBPROCESS, ids=[c.id for c in SUBPROCESS])
def test_bad_input_is_refused_in_one_line_and_writes_nothing(
    case: Case, shared: Shared, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = {"RBW_DATA_DIR": str(shared.data)}
    check_case(
        case, shared, tmp_path, monkeypatch, lambda case, argv: run_subprocess(case.cli, argv, tmp_path, env)
    )


def test_train_out_under_a_read_only_folder() -> None:
    """``--out`` below a folder the user may not write to (as root: the command runs as ``nobody``): one line
    that names the folder and says it is not writable, nothing written."""
    prefix: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: cannot make a folder read-only")
        prefix = [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]
        probe = [*prefix, sys.executable, "-c", "import robustbench_wave.core.runfolder"]
        if subprocess.run(probe, cwd="/", env={"PYTHONPATH": str(REPO)}, capture_output=True).returncode:
            pytest.skip("nobody cannot run this interpreter or import the package")
    root = Path(tempfile.mkdtemp(prefix="rbw-bad-inputs-"))  # pytest's tmp folders are closed to nobody
    read_only = root / "shared-results"
    try:
        root.chmod(0o755)
        read_only.mkdir()
        read_only.chmod(0o555)
        out = read_only / "results"
        argv = command_flags({**TRAIN_BASE, "--results-dir": str(out)}, {})
        with unchanged(root) as changes:
            outcome = run_subprocess("train", argv, root, {"HOME": str(root)}, prefix=prefix)
        problems = failures(outcome, ["--results-dir", str(read_only), "not writable"]) + changes
        assert not problems, f"train {' '.join(argv)}\n" + "\n".join(problems) + "\n" + outcome.describe()
    finally:
        if read_only.exists():
            read_only.chmod(0o755)
        shutil.rmtree(root)


def test_report_into_an_unwritable_out_is_one_line_without_traceback() -> None:
    """Run as an unprivileged user (root ignores permissions): a read-only --out folder."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to drop to an unprivileged user")
    base = Path(tempfile.mkdtemp(prefix="rbw-ro-"))
    try:
        base.chmod(0o755)
        run = saved_run(base / "run")
        for p in [run, *run.iterdir()]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        (base / "ro").mkdir(mode=0o755)
        cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-m"]
        cmd += ["robustbench_wave.report", str(run), "--out", str(base / "ro" / "x"), "--no-figures"]
        home = base / "home"
        home.mkdir(mode=0o777)
        home.chmod(0o777)
        env = {**os.environ, "HOME": str(home), "MPLCONFIGDIR": str(home), "OMP_NUM_THREADS": "1"}
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        if "Permission denied" in done.stderr and "robustbench_wave" not in done.stderr:
            pytest.skip(f"the unprivileged user cannot run the interpreter: {done.stderr[-200:]}")
        assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
        assert f"--out {base / 'ro'}" in done.stderr and "is not writable" in done.stderr
        assert not any((base / "ro").iterdir())
    finally:
        shutil.rmtree(base)
