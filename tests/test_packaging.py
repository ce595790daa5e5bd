"""What the wheel ships (issue 42, item 5): every package folder, and the suites and zoo specs as package data,
so that ``benchmark()`` has its default suite after ``pip install`` outside a checkout (the wheel itself:
tests/test_wheel.py)."""

from __future__ import annotations

import importlib.util
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


def test_a_checkout_without_install_and_the_environment_override(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    package, folder, env = specs.SUITES
    monkeypatch.delenv(env, raising=False)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert specs.spec_dir(package, folder, env) == REPO / folder
    monkeypatch.setenv(env, str(tmp_path))
    assert specs.spec_dir(package, folder, env) == tmp_path
