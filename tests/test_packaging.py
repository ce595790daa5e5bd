"""What the wheel ships (issue 42, item 5): every package folder, and the suites and zoo specs as package data,
so that ``benchmark()`` has its default suite after ``pip install`` outside a checkout."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib

from robustbench_wave.attacks import list_suites
from robustbench_wave.core import specs
from robustbench_wave.models.zoo import list_zoo

REPO = Path(__file__).resolve().parents[1]


def _setuptools() -> dict:
    with open(REPO / "pyproject.toml", "rb") as fh:
        return tomllib.load(fh)["tool"]["setuptools"]


def test_the_wheel_lists_every_package_folder_and_both_spec_folders() -> None:
    """The explicit package list (needed for the mapped spec folders) misses no subpackage added later."""
    found = {
        ".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "robustbench_wave").rglob("__init__.py")
    }
    mapped = {name for name, _, _ in (specs.SUITES, specs.ZOO)}
    assert set(_setuptools()["packages"]) == found | mapped


def test_the_spec_packages_map_onto_the_repository_folders_and_ship_their_toml() -> None:
    config = _setuptools()
    for package, folder, _ in (specs.SUITES, specs.ZOO):
        assert config["package-dir"][package] == folder
        shipped = {p for pattern in config["package-data"][package] for p in (REPO / folder).glob(pattern)}
        assert set((REPO / folder).rglob("*.toml")) <= shipped, f"{folder}/ has TOML the wheel leaves out"


def test_a_checkout_finds_its_own_folders(monkeypatch: pytest.MonkeyPatch) -> None:
    """In the checkout (editable install or none) the specs are the repository's folders."""
    for package, folder, env in (specs.SUITES, specs.ZOO):
        monkeypatch.delenv(env, raising=False)
        assert specs.spec_dir(package, folder, env) == REPO / folder
    assert "default" in list_suites() and {"patch", "wavelet"} <= set(list_zoo())


@pytest.mark.slow
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


def test_a_checkout_without_install_and_the_environment_override(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    package, folder, env = specs.SUITES
    monkeypatch.delenv(env, raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert specs.spec_dir(package, folder, env) == REPO / folder
    monkeypatch.setenv(env, str(tmp_path))
    assert specs.spec_dir(package, folder, env) == tmp_path
