"""Models from outside the zoo: a Python factory or a timm architecture, with local safetensors weights.

``python -m robustbench_wave.attack --model REF`` takes, besides a zoo name:

* ``timm:NAME`` -- ``timm.create_model(NAME, pretrained=False, num_classes=..., in_chans=<the data set's>,
  img_size=...)`` (``img_size`` only where the architecture takes it), wrapped in the input normalisation of
  its ``pretrained_cfg`` (mean/std) so that the attacked model still takes [0, 1] images, as RobustBench's
  models do; nothing is downloaded;
* ``package.module:factory`` or ``path/to/file.py:factory`` -- a callable returning an ``nn.Module`` that
  maps images in [0, 1] (N, C, H, W) to logits (N, num_classes); it gets the keyword arguments
  ``num_classes`` / ``img_size`` only when the command line gives them (``--num-classes``, ``--img-size``).

Weights come from a local safetensors file only (never pickle), loaded strictly: a missing, unexpected or
wrongly shaped tensor is refused by name. Everything is checked before the command writes anything: the
import, the attribute, that it is callable and returns an ``nn.Module``, the weights, and that a probe batch of
the data set's own images gives finite logits of shape (N, num_classes). Records and run folders name the
model by a safe slug (:attr:`ExternalSpec.slug`): ``timm-NAME``, or ``ext-FACTORY-<8 hex of the reference>``.

**Gradient modes.** An external model is scanned on the probe batch for operations on its input's path whose
gradient is zero almost everywhere or missing -- rounding, quantisation, thresholds, masks from ``argmax`` /
``topk`` / ``one_hot``, integer casts, ``detach`` (:mod:`robustbench_wave.models.autobpda`). Where such an
operation cuts the gradient the model is attacked under ``exact`` (its plain forward) and ``bpda``, which gives
each one a straight-through backward without any change to the model. Values that leave torch and come back
in the same shape (a NumPy, PIL or OpenCV round trip, ``.tolist()``) are linked in ``bpda`` mode by the
identity across the round trip (:mod:`robustbench_wave.models.roundtrip`). Where no gradient reaches the
input at all (values that never come back, or come back in another shape) the log, ``meta.json``'s
``gradient_path`` and the report say so, and its robustness rests on the gradient-free and transfer attacks. Two ways to say more:

* a sub-module may define ``bpda_approximation(*inputs)``, returning a tensor shaped like its output: in
  ``bpda`` mode that output keeps its exact values and back-propagates through the approximation instead
  of the automatic rules (e.g. a smooth thermometer ``clip(l * x - k + 1, 0, 1)`` for a hard one);
* a sub-module may subclass :class:`robustbench_wave.models.frontend.FixedFrontEnd`, the way the zoo's
  wavelet tokenizer and Token Pooling do, and implement ``transform(x)`` (the exact forward) and,
  optionally, ``smooth_transform(x)`` (the differentiable approximation BPDA back-propagates through;
  default: the exact one). Such a model is attacked under every ``--grad-modes`` (exact, blocked, bpda),
  exactly like the zoo's (``models.frontend.grad_mode``), and is not scanned: its own BPDA takes precedence.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import inspect
import json
import math
import os
import sys
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from types import ModuleType
from typing import Any

import timm
import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors_bytes
from torch import nn

from robustbench_wave.core.runfolder import check_safe_name
from robustbench_wave.data import DatasetInfo, describe_images
from robustbench_wave.models.intake import one_line, prepare
from robustbench_wave.models.vit import Normalize

TIMM_PREFIX = "timm:"

#: ``--normalize`` keywords (besides ``MEAN,STD``): timm's pretrained_cfg, the data set's training-split
#: statistics, or no normalisation (the model takes [0, 1] itself).
NORMALIZE_KEYWORDS = ("cfg", "data", "none")

#: How to look up timm's architecture names (in error messages and --help).
TIMM_NAMES_HINT = "list them with: python -c \"import timm; print(timm.list_models('*vit*'))\""

Normalization = tuple[tuple[float, ...], tuple[float, ...]]


def is_external(reference: str) -> bool:
    """True for ``timm:NAME`` and ``MODULE:FACTORY`` references (zoo names and spec paths have no ':')."""
    return ":" in reference


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def parse_normalize(text: str) -> str:
    """A ``--normalize`` value in canonical form: a keyword, or ``MEAN,STD`` (each a number or per-channel
    numbers joined by '/'); ValueError says what is wrong."""
    text = text.strip()
    if text.lower() in NORMALIZE_KEYWORDS:
        return text.lower()
    mean, std = _explicit_normalization(text)
    return ",".join("/".join(repr(v) for v in values) for values in (mean, std))


def _explicit_normalization(text: str) -> Normalization:
    parts = text.split(",")
    if len(parts) != 2:
        raise ValueError(
            f"--normalize {text!r} is not {', '.join(NORMALIZE_KEYWORDS)} or MEAN,STD (e.g. 0.5,0.25 or "
            "0.485/0.456/0.406,0.229/0.224/0.225)"
        )
    try:
        mean, std = (tuple(float(v) for v in part.split("/")) for part in parts)
    except ValueError:
        raise ValueError(
            f"--normalize {text!r}: MEAN and STD must be numbers (per channel joined by '/')"
        ) from None
    if not all(math.isfinite(v) for v in mean + std) or min(std) <= 0:
        raise ValueError(f"--normalize {text!r}: values must be finite and every STD > 0")
    return mean, std


@dataclass(frozen=True)
class ExternalSpec:
    """What the command line says about one external model (``config.json`` records it whole).

    ``weights`` is an absolute path (None: a model without parameters or buffers); ``num_classes`` and
    ``img_size`` are the values given on the command line (None: not given); ``normalize`` a canonical
    ``--normalize`` value (None: the default, ``cfg`` for timm and ``none`` for a factory); ``name`` the
    record name the user chose (``--name``; None: :attr:`slug` derives one from the reference).
    """

    reference: str
    weights: str | None = None
    num_classes: int | None = None
    img_size: int | None = None
    normalize: str | None = None
    name: str | None = None

    def __post_init__(self) -> None:
        target, attr = self.target, self.attr
        if not target or (not self.is_timm and not all(p.isidentifier() for p in attr.split("."))):
            raise ValueError(
                f"--model {self.reference!r} is neither timm:NAME nor MODULE:FACTORY / path/to/file.py:FACTORY "
                "(FACTORY a Python name)"
            )
        if self.normalize is not None:
            parse_normalize(self.normalize)
        if self.name is not None:
            check_safe_name(self.name, "--name")

    @property
    def is_timm(self) -> bool:
        return self.reference.startswith(TIMM_PREFIX)

    @property
    def target(self) -> str:
        """The timm name, or the module path / file of a factory."""
        if self.is_timm:
            return self.reference[len(TIMM_PREFIX) :]
        return self.reference.rpartition(":")[0]

    @property
    def attr(self) -> str:
        """The factory's (possibly dotted) name inside its module; '' for timm."""
        return "" if self.is_timm else self.reference.rpartition(":")[2]

    @property
    def is_file(self) -> bool:
        return not self.is_timm and (self.target.endswith(".py") or os.sep in self.target)

    @property
    def canonical(self) -> str:
        """The reference with a factory file's path made absolute (the same model from any folder)."""
        if self.is_file:
            return f"{os.path.abspath(self.target)}:{self.attr}"
        return self.reference

    @property
    def slug(self) -> str:
        """The safe name of records and run folders: ``--name`` when given, else ``timm-NAME`` or
        ``ext-FACTORY-<8 hex>``."""
        if self.name is not None:
            return self.name
        if self.is_timm:
            return f"timm-{self.target}"
        return f"ext-{self.attr.rpartition('.')[2]}-{_short_hash(self.canonical)}"

    @property
    def normalize_choice(self) -> str:
        return self.normalize or ("cfg" if self.is_timm else "none")

    def to_config(self) -> dict[str, Any]:
        """Every field; ``name`` only when given (a run recorded before ``--name`` existed resumes as is)."""
        config = asdict(self)
        return config if self.name is not None else {k: v for k, v in config.items() if k != "name"}

    @classmethod
    def from_config(cls, data: Any) -> ExternalSpec:
        """The spec a run's ``config.json`` recorded; ValueError names a bad or unknown field."""
        names = {f.name for f in fields(cls)}
        if not isinstance(data, dict) or not set(data) <= names or "reference" not in data:
            raise ValueError(f"config.json's external model entry {data!r:.80} is not {sorted(names)}")
        return cls(**data)


# --------------------------------------------------------------------------------------------- building


def build_external(
    spec: ExternalSpec, info: DatasetInfo, probe: torch.Tensor
) -> tuple[nn.Module, dict[str, Any]]:
    """The model ``spec`` names with its weights, normalised to take [0, 1] images, checked on ``probe``
    (the data set's first images), in eval mode; and its metadata in the shape of a trained zoo model's
    (``checkpoint_sha256`` = the weights file's, ``spec_sha256`` = the hash of :func:`describe`).

    Construction never moves torch's global random state. Every failure is a one-line ValueError that does
    not repeat the reference (the caller names the model).
    """
    if spec.num_classes is not None and spec.num_classes != info.num_classes:
        raise ValueError(
            f"--num-classes {spec.num_classes} but {info.name} has {info.num_classes} classes; a model is "
            "attacked on the classes of the data set it classifies"
        )
    with torch.random.fork_rng(devices=[]):
        net, kwargs, source = _timm_model(spec, info) if spec.is_timm else _factory_model(spec)
    weights_sha = _load_weights(spec, net)
    norm = _normalization(spec, net, info)
    model = prepare(_wrap(net, norm).eval(), probe, info.num_classes, spec.slug, fit_hint(info))
    description = describe(spec, kwargs, norm, source)
    meta = {
        "name": spec.slug,
        "external": spec.reference,
        "run_dir": spec.weights,
        "checkpoint_sha256": weights_sha,
        "spec_sha256": hashlib.sha256(json.dumps(description, sort_keys=True).encode()).hexdigest(),
        "model_spec": description,
        "clean_accuracy": None,
        "train_seed": None,
    }
    return model, meta


def describe(
    spec: ExternalSpec, kwargs: Mapping[str, Any], norm: Normalization | None, source: str | None
) -> dict[str, Any]:
    """What built the model besides its weights: the canonical reference, the arguments the factory or
    ``timm.create_model`` got, the normalisation, and the factory's source file hash (timm: its version)."""
    source_key = "timm_version" if spec.is_timm else "source_sha256"
    return {
        "reference": spec.canonical,
        "kind": "timm" if spec.is_timm else "factory",
        "kwargs": dict(kwargs),
        "normalize": None if norm is None else {"mean": list(norm[0]), "std": list(norm[1])},
        source_key: source,
    }


class _NoImgSize(Exception):
    """The architecture's constructor takes no ``img_size`` (timm's CNNs)."""


def _timm_model(spec: ExternalSpec, info: DatasetInfo) -> tuple[nn.Module, dict[str, Any], str]:
    """``timm.create_model`` for the data set; ``img_size`` passed where the architecture takes it."""
    name = spec.target
    if not timm.is_model(name):
        raise ValueError(f"timm {timm.__version__} has no architecture {name!r}; {TIMM_NAMES_HINT}")
    kwargs: dict[str, Any] = {"num_classes": info.num_classes, "in_chans": info.in_chans}
    sized = {**kwargs, "img_size": spec.img_size or info.img_size}
    try:
        return _create_timm(spec, sized), sized, timm.__version__
    except _NoImgSize:
        if spec.img_size is not None:
            raise ValueError(
                "its architecture takes no img_size argument (it adapts to the image size); drop --img-size"
            ) from None
    return _create_timm(spec, kwargs), kwargs, timm.__version__


def _create_timm(spec: ExternalSpec, kwargs: dict[str, Any]) -> nn.Module:
    try:
        return timm.create_model(spec.target, pretrained=False, **kwargs)
    except TypeError as err:
        if "img_size" in kwargs and "img_size" in str(err):
            raise _NoImgSize from None
        raise ValueError(f"timm.create_model failed: {one_line(err)}") from None
    except Exception as err:  # any failure of the architecture's constructor is the user's
        raise ValueError(f"timm.create_model failed: {one_line(err)}") from None


def _factory_model(spec: ExternalSpec) -> tuple[nn.Module, dict[str, Any], str | None]:
    """Import the factory, check it takes the arguments the command line gives, call it."""
    module, source = _import(spec)
    factory: Any = module
    for part in spec.attr.split("."):
        if not hasattr(factory, part):
            raise ValueError(f"{spec.target} has no attribute {spec.attr!r}")
        factory = getattr(factory, part)
    if not callable(factory):
        raise ValueError(f"{spec.attr} is a {type(factory).__name__}, not callable")
    kwargs = {
        k: v for k, v in (("num_classes", spec.num_classes), ("img_size", spec.img_size)) if v is not None
    }
    _check_signature(spec, factory, kwargs)
    try:
        net = factory(**kwargs)
    except Exception as err:  # user code: any failure becomes one line
        raise ValueError(f"calling {spec.attr}() raised {one_line(err)}") from None
    if not isinstance(net, nn.Module):
        raise ValueError(f"{spec.attr}() returned a {type(net).__name__}, not a torch.nn.Module")
    return net, kwargs, source


def _check_signature(spec: ExternalSpec, factory: Callable[..., Any], kwargs: dict[str, Any]) -> None:
    """Refuse flags the factory cannot take, and required parameters the command line cannot give."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a builtin without a signature: the call decides
        return
    params = signature.parameters
    open_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    for key in kwargs:
        named = key in params and params[key].kind in (
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            inspect.Parameter.KEYWORD_ONLY,
        )
        if not (named or open_kwargs):
            flag = "--" + key.replace("_", "-")
            raise ValueError(
                f"{spec.attr}{signature} takes no {key}; drop {flag} or give the factory a {key} parameter"
            )
    try:
        signature.bind(**kwargs)
    except TypeError as err:
        raise ValueError(
            f"{spec.attr}{signature} cannot be called with {kwargs or 'no arguments'} "
            f"({err}); give its other parameters defaults"
        ) from None


@contextlib.contextmanager
def _no_bytecode() -> Iterator[None]:
    """Import without writing ``__pycache__`` next to the user's code (a refused run writes nothing)."""
    previous = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    try:
        yield
    finally:
        sys.dont_write_bytecode = previous


def _import(spec: ExternalSpec) -> tuple[ModuleType, str | None]:
    """The factory's module (a file is executed under a private module name) and its source's sha256."""
    path = Path(spec.target)
    if spec.is_file and not path.is_file():
        raise ValueError(f"no Python file {path}")
    try:
        with _no_bytecode():
            module = _exec_file(path) if spec.is_file else importlib.import_module(spec.target)
    except ModuleNotFoundError as err:
        raise ValueError(
            f"cannot import {spec.target!r} ({err}); put its folder on PYTHONPATH "
            "or give path/to/file.py:FACTORY"
        ) from None
    except Exception as err:  # user code: any failure becomes one line
        raise ValueError(f"importing {spec.target} raised {one_line(err)}") from None
    file = getattr(module, "__file__", None)
    return module, (_sha256_bytes(Path(file).read_bytes()) if file and Path(file).is_file() else None)


def _exec_file(path: Path) -> ModuleType:
    name = f"rbw_external_{_short_hash(os.path.abspath(path))}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise ImportError(f"{path} is not a Python module")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module  # dataclasses and typing look their module up here
    try:
        module_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ----------------------------------------------------------------------------------------------- weights


def state_mismatch(
    own: Mapping[str, torch.Tensor], state: Mapping[str, torch.Tensor]
) -> tuple[list[str], list[str], list[str]]:
    """Keys ``state`` lacks, keys it has that ``own`` lacks, and shared keys whose shapes differ."""
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    mismatched = sorted(k for k in set(own) & set(state) if own[k].shape != state[k].shape)
    return missing, unexpected, mismatched


def load_weights_strict(path: Path, model: nn.Module) -> str:
    """Load a safetensors file into ``model`` (every tensor, exactly); returns the file's sha256 (of the very
    bytes loaded). Pickled checkpoints are never read."""
    if not path.is_file():
        raise ValueError(f"weights file {path} does not exist")
    data = path.read_bytes()
    try:
        state = load_safetensors_bytes(data)
    except (SafetensorError, OSError, ValueError) as err:
        raise ValueError(
            f"weights file {path} is not a safetensors file ({one_line(err)}); save the weights with "
            "safetensors.torch.save_file(model.state_dict(), PATH) (pickled .pt files are not read)"
        ) from None
    own = model.state_dict()
    missing, unexpected, mismatched = state_mismatch(own, state)
    if missing or unexpected or mismatched:
        shapes = [f"{k} {tuple(state[k].shape)} vs {tuple(own[k].shape)}" for k in mismatched[:5]]
        raise ValueError(
            f"weights file {path} does not fit the model: missing keys {missing[:5]}, unexpected keys "
            f"{unexpected[:5]}, shape mismatch {shapes} ({len(missing)}/{len(unexpected)}/{len(mismatched)} "
            "in all)"
        )
    model.load_state_dict(state)
    return _sha256_bytes(data)


def _load_weights(spec: ExternalSpec, net: nn.Module) -> str | None:
    if spec.weights is not None:
        return load_weights_strict(Path(spec.weights), net)
    n = len(net.state_dict())
    if n:
        raise ValueError(
            f"it has {n} weight tensors but no --weights file, so its numbers would "
            "come from a random initialisation; save trained weights with "
            "safetensors.torch.save_file(model.state_dict(), FILE) and pass --weights FILE after it"
        )
    return None


# ------------------------------------------------------------------------------------- normalisation, probe


def _normalization(spec: ExternalSpec, net: nn.Module, info: DatasetInfo) -> Normalization | None:
    """The mean/std the model's input is standardised with, one value per channel of the data set."""
    choice = spec.normalize_choice
    if choice == "none":
        return None
    if choice == "data":
        mean, std = tuple(info.mean), tuple(info.std)
    elif choice == "cfg":
        cfg = getattr(net, "pretrained_cfg", None) or {}
        if not isinstance(cfg, Mapping) or cfg.get("mean") is None or cfg.get("std") is None:
            raise ValueError(
                "it has no pretrained_cfg mean/std to normalise with; pass --normalize MEAN,STD, data or none"
            )
        mean, std = tuple(float(v) for v in cfg["mean"]), tuple(float(v) for v in cfg["std"])
    else:
        mean, std = _explicit_normalization(choice)
    return _per_channel(spec, mean, info), _per_channel(spec, std, info)


def _per_channel(spec: ExternalSpec, values: tuple[float, ...], info: DatasetInfo) -> tuple[float, ...]:
    """``values`` for the data set's channels: as they are, or one value repeated (all values equal)."""
    if len(values) == info.in_chans:
        return values
    if len(set(values)) == 1:
        return values[:1] * info.in_chans
    raise ValueError(
        f"normalisation {list(values)} has {len(values)} channels but {info.name} "
        f"has {info.in_chans}; pass --normalize MEAN,STD (e.g. 0.5,0.5), data or none"
    )


def _wrap(net: nn.Module, norm: Normalization | None) -> nn.Module:
    """RobustBench's convention: the normalisation is the model's first layer, attacks see [0, 1] inputs."""
    if norm is None:
        return net
    return nn.Sequential(OrderedDict(normalize=Normalize(*norm), net=net))


def fit_hint(info: DatasetInfo) -> str:
    """What to do when a model cannot take the data set's images (for :func:`~.intake.check_outputs`)."""
    return (
        f". {describe_images(info)}; build the model for that size (a factory that takes img_size gets "
        f"{info.img_size}, or --img-size {info.img_size}), or choose the --dataset whose images it takes"
    )
