"""The model zoo: declarative TOML specs in the repository's ``models/`` folder.

A spec names a tokenizer, its arguments and a shared body (``models/bodies.toml``), so that every zoo model
uses the same transformer and differs only where the comparison wants it to.  ``--model`` accepts a zoo
name or the path of a TOML file with the same fields.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]

from robustbench_wave.models.tokenizers import list_tokenizers

ZOO_DIR = Path(os.environ.get("RBW_ZOO_DIR", Path(__file__).resolve().parents[2] / "models"))
BODIES_FILE = "bodies.toml"


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as err:
        raise ValueError(f"{path} is not valid TOML: {err}") from None


def list_zoo(zoo_dir: Path = ZOO_DIR) -> list[str]:
    """Names of the zoo models (one ``models/<name>.toml`` each)."""
    return sorted(p.stem for p in zoo_dir.glob("*.toml") if p.name != BODIES_FILE)


def load_bodies(zoo_dir: Path = ZOO_DIR) -> dict[str, dict[str, Any]]:
    path = zoo_dir / BODIES_FILE
    return _read_toml(path) if path.exists() else {}


def load_spec(name_or_path: str | os.PathLike, zoo_dir: Path = ZOO_DIR) -> dict[str, Any]:
    """Resolve a zoo name (or a TOML path) into a full spec with ``name``, ``tokenizer``, ``tokenizer_args``,
    ``body`` (a dict of ``VisionTransformer`` sizes) and optional extra tables (e.g. ``tokenpool``)."""
    path = Path(name_or_path)
    if path.suffix != ".toml":
        path = zoo_dir / f"{name_or_path}.toml"
    if not path.exists():
        known = ", ".join(list_zoo(zoo_dir)) or "(none found)"
        raise ValueError(f"unknown model {str(name_or_path)!r}; zoo models in {zoo_dir}: {known}")
    spec = _read_toml(path)
    spec.setdefault("name", path.stem)
    spec.setdefault("tokenizer_args", {})
    if spec.get("tokenizer") not in list_tokenizers():
        raise ValueError(
            f"{path}: 'tokenizer' must be one of {list_tokenizers()}, got {spec.get('tokenizer')!r}"
        )
    body = spec.get("body", "tiny")
    if isinstance(body, str):
        bodies = load_bodies(zoo_dir)
        if body not in bodies:
            raise ValueError(
                f"{path}: unknown body {body!r}; bodies in {zoo_dir / BODIES_FILE}: {sorted(bodies)}"
            )
        spec["body_name"] = body
        spec["body"] = copy.deepcopy(bodies[body])
    return spec
