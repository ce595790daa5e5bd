"""The model zoo: declarative TOML specs in the repository's ``models/`` folder.

A spec names a tokenizer, its arguments and a shared body (``models/bodies.toml``), so that every zoo model
uses the same transformer and differs only where the comparison wants it to.  ``--model`` accepts a zoo
name or the path of a TOML file with the same fields.  A spec is checked when it is read: its ``name``
becomes a run folder, so it must be a safe folder name (:func:`robustbench_wave.core.runfolder.check_safe_name`),
and the body sizes must make a transformer, so that a bad spec ends with one line naming the file and field
instead of a traceback from deep inside timm.  An optional top-level ``normalize_input = true|false``
overrides the tokenizer's default (whether the model standardises its [0, 1] inputs with the data set's
mean/std), for ablations; a spec without it resolves exactly as before (so its sha256 does not move).
An optional ``init_from = "<zoo model>"`` makes training fine-tune from that model's finished run (same data
set, same seed) instead of a random initialisation -- how Token Pooling is trained in its paper. A spec
with ``extends = "<zoo model or TOML path>"`` starts from that spec's fields and overrides the ones it gives
(tables merged key by key), so a grid of variants (``models/tokenpool-pareto/``) states only what differs.
"""

from __future__ import annotations

import copy
import math
import os
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python < 3.11
    import tomli as tomllib  # type: ignore[no-redef]

from robustbench_wave.core.naming import did_you_mean
from robustbench_wave.core.runfolder import check_safe_name
from robustbench_wave.core.specs import zoo_dir
from robustbench_wave.models.tokenizers import list_tokenizers

ZOO_DIR = zoo_dir()
BODIES_FILE = "bodies.toml"

#: Body sizes that must be whole numbers >= 1 (``attn_dim`` only when given).
BODY_COUNTS = ("embed_dim", "depth", "num_heads")


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


def spec_path(name_or_path: str | os.PathLike, zoo_dir: Path = ZOO_DIR) -> Path:
    """The TOML file behind a zoo name (``models/<name>.toml``) or a path given as such."""
    path = Path(name_or_path)
    return path if path.suffix == ".toml" else zoo_dir / f"{name_or_path}.toml"


def load_spec(name_or_path: str | os.PathLike, zoo_dir: Path = ZOO_DIR) -> dict[str, Any]:
    """Resolve a zoo name (or a TOML path) into a full spec with ``name``, ``tokenizer``, ``tokenizer_args``,
    ``body`` (a dict of ``VisionTransformer`` sizes) and optional extra tables (e.g. ``tokenpool``)."""
    path = spec_path(name_or_path, zoo_dir)
    if not path.exists():
        known = ", ".join(list_zoo(zoo_dir)) or "(none found)"
        hint = did_you_mean(str(name_or_path), list_zoo(zoo_dir))
        raise ValueError(f"unknown model {str(name_or_path)!r}{hint} (zoo models in {zoo_dir}: {known})")
    spec = _with_base(_read_toml(path), path, zoo_dir)
    spec.setdefault("name", path.stem)
    spec.setdefault("tokenizer_args", {})
    check_safe_name(spec["name"], f"{path}: name")
    if spec.get("tokenizer") not in list_tokenizers():
        raise ValueError(
            f"{path}: 'tokenizer' must be one of {list_tokenizers()}, got {spec.get('tokenizer')!r}"
        )
    if not isinstance(spec["tokenizer_args"], dict):
        raise ValueError(f"{path}: 'tokenizer_args' must be a table, got {spec['tokenizer_args']!r}")
    check_normalize_input(spec, str(path))
    check_init_from(spec, str(path))
    body = spec.get("body", "tiny")
    if isinstance(body, str):
        bodies = load_bodies(zoo_dir)
        if body not in bodies:
            raise ValueError(
                f"{path}: unknown body {body!r}; bodies in {zoo_dir / BODIES_FILE}: {sorted(bodies)}"
            )
        spec["body_name"] = body
        spec["body"] = copy.deepcopy(bodies[body])
        check_body(spec["body"], f"{path}: body {body!r} ({zoo_dir / BODIES_FILE})")
    elif isinstance(body, dict):
        check_body(body, f"{path}: body")
    else:
        raise ValueError(f"{path}: 'body' must be a body name or a table of sizes, got {body!r}")
    return spec


def _with_base(
    spec: dict[str, Any], path: Path, zoo_dir: Path, seen: tuple[Path, ...] = ()
) -> dict[str, Any]:
    """``spec`` merged over the spec it ``extends`` (recursively; a zoo name, or a TOML path relative to
    ``path``'s folder). The base's ``name`` is not inherited: every spec is its own run folder."""
    base_ref = spec.pop("extends", None)
    if base_ref is None:
        return spec
    if not isinstance(base_ref, str):
        raise ValueError(f"{path}: extends = {base_ref!r} must be a zoo model name or a TOML path")
    base_path = spec_path(base_ref, zoo_dir)
    if base_path.suffix == ".toml" and not base_path.is_absolute() and str(base_ref).endswith(".toml"):
        base_path = path.parent / base_path
    if not base_path.exists():
        raise ValueError(f"{path}: extends {base_ref!r}, which is not a zoo model or TOML file")
    if base_path.resolve() in seen or base_path.resolve() == path.resolve():
        raise ValueError(f"{path}: extends {base_ref!r} in a cycle")
    base = _with_base(_read_toml(base_path), base_path, zoo_dir, (*seen, path.resolve()))
    base.pop("name", None)
    return _merged(base, spec)


def _merged(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """``override`` over ``base``: tables merge key by key, every other value replaces the base's."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        both_tables = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = _merged(out[key], value) if both_tables else copy.deepcopy(value)
    return out


def check_normalize_input(spec: dict[str, Any], where: str) -> None:
    """``normalize_input``, when a spec sets it, must be a TOML boolean (a string "false" would be truthy)."""
    value = spec.get("normalize_input")
    if "normalize_input" in spec and not isinstance(value, bool):
        raise ValueError(
            f"{where}: normalize_input = {value!r} must be true or false (whether the model standardises its "
            f"[0, 1] inputs with the data set's mean/std); leave it out for the tokenizer's default"
        )


def check_init_from(spec: dict[str, Any], where: str) -> None:
    """``init_from``, when a spec sets it, names another model (a safe run-folder name, not the spec itself)."""
    if "init_from" not in spec:
        return
    base = spec["init_from"]
    if not isinstance(base, str):
        raise ValueError(f'{where}: init_from = {base!r} must be the name of a zoo model, e.g. "patch"')
    check_safe_name(base, f"{where}: init_from")
    if base == spec["name"]:
        raise ValueError(f"{where}: init_from = {base!r} names the spec itself; name the unpooled model")


def input_normalized(spec: dict[str, Any], default: bool) -> bool:
    """Whether a model built from ``spec`` standardises its inputs: the spec's ``normalize_input`` if set,
    else ``default`` (the tokenizer's)."""
    check_normalize_input(spec, f"model spec {spec.get('name', '(unnamed)')!r}")
    return bool(spec.get("normalize_input", default))


def check_body(body: dict[str, Any], where: str) -> None:
    """Sizes that make a transformer: counts >= 1, ``mlp_ratio`` > 0, and an attention width (``attn_dim``
    when given, else ``embed_dim``) that the heads divide. A size left out takes ``rbw_vit``'s default."""
    given = [k for k in BODY_COUNTS if k in body] + (["attn_dim"] if body.get("attn_dim") is not None else [])
    for key in given:
        value = body[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{where}: {key} = {value!r} must be a whole number >= 1")
    if "mlp_ratio" in body:
        ratio = body["mlp_ratio"]
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 < ratio < math.inf:
            raise ValueError(f"{where}: mlp_ratio = {ratio!r} must be a number > 0")
    width_key = "attn_dim" if body.get("attn_dim") is not None else "embed_dim"
    if width_key in body and "num_heads" in body and body[width_key] % body["num_heads"]:
        raise ValueError(
            f"{where}: {width_key} = {body[width_key]} is not divisible by num_heads = {body['num_heads']}"
        )
