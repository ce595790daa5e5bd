"""The built wheel (issue 42, item 5): every spec inside the package, found there outside any checkout. It starts
pip and Python processes, so this module is marked slow (tests/test_markers.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from robustbench_wave.core import specs

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]


def test_the_built_wheel_holds_every_spec_and_resolves_them_outside_the_checkout(tmp_path: Path) -> None:
    """The wheel itself (built offline with the environment's setuptools): every TOML of both folders inside the
    package, and :func:`spec_dir` run from the unpacked wheel (no checkout beside it) finds them there."""
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "-q",
        "--no-deps",
        "--no-build-isolation",
        "-w",
        str(tmp_path),
    ]
    source = tmp_path / "source"  # a copy: setuptools writes build/ and *.egg-info beside the sources
    for name in ("robustbench_wave", "attacks", "models"):
        shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, source / name)
    subprocess.run([*cmd, str(source)], check=True, capture_output=True, cwd=tmp_path)
    (wheel,) = tmp_path.glob("*.whl")
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    for package, folder, _ in (specs.SUITES, specs.ZOO):
        inside = {p.relative_to(REPO / folder) for p in (REPO / folder).rglob("*.toml")}
        assert inside == {
            p.relative_to(site.joinpath(*package.split(".")))
            for p in site.rglob(f"{package.split('.')[-1]}/**/*.toml")
        }
    probe = "from robustbench_wave.core.specs import suite_dir, zoo_dir; print(suite_dir()); print(zoo_dir())"
    env = {k: v for k, v in os.environ.items() if k not in ("RBW_SUITE_DIR", "RBW_ZOO_DIR", "PYTHONPATH")}
    done = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(site)!r}); {probe}"],
        capture_output=True, text=True, cwd=tmp_path, env=env, check=True,
    )  # fmt: skip
    assert done.stdout.split() == [
        str(site / "robustbench_wave" / "suites"),
        str(site / "robustbench_wave" / "zoo_specs"),
    ]
