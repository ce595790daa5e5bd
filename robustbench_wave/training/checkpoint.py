"""Checkpoints as safetensors + JSON (no pickle), written atomically, verified when read.

Layout of one training run: ``<results>/train/<dataset-slug>/<model>/seed-<s>/`` with

* ``model.safetensors`` -- final weights; ``config.json`` -- resolved model spec, data set info, recipe,
  provenance, final metrics, the weights' sha256 and the sha256 of the spec and data set info
  (:func:`spec_sha256`), so that editing ``config.json`` after training is refused as a modified
  checkpoint would be;
* ``metrics.jsonl`` -- one JSON line per completed epoch, rewritten whole from the resume state's history
  (so a kill at any point never records an epoch twice);
* ``resume.safetensors`` + ``resume.json`` -- model, optimizer, scheduler and RNG state and the per-epoch
  history after the last completed epoch, so a killed run continues where it stopped instead of starting
  again;
* ``.lock`` -- held by the run that writes the folder (:class:`robustbench_wave.core.runfolder.RunLock`).

These are the only files training writes (:data:`OWNED_FILES`); ``--overwrite`` deletes those and nothing else.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from robustbench_wave.core.io import (
    atomic_write,
    atomic_write_json,
    atomic_write_text,
    read_jsonl,
    sha256_file,
)
from robustbench_wave.core.naming import did_you_mean
from robustbench_wave.core.runfolder import check_safe_name
from robustbench_wave.data import DatasetInfo, dataset_info
from robustbench_wave.models.external import state_mismatch
from robustbench_wave.models.vit import build_model
from robustbench_wave.models.zoo import list_zoo

log = logging.getLogger(__name__)

WEIGHTS = "model.safetensors"
CONFIG = "config.json"
METRICS = "metrics.jsonl"
RESUME_TENSORS = "resume.safetensors"
RESUME_STATE = "resume.json"

#: Every file a training run writes into its folder (``--overwrite`` deletes these and nothing else).
OWNED_FILES = (WEIGHTS, CONFIG, METRICS, RESUME_TENSORS, RESUME_STATE)


def spec_sha256(model_spec: dict[str, Any], dataset_info: dict[str, Any]) -> str:
    """sha256 of the canonical JSON (sorted keys) of a run's resolved spec and data set info.

    The weights' hash alone does not cover ``config.json``: a changed ``zero_fraction`` keeps every tensor
    shape, loads silently and changes every result. Recorded next to the weights' hash when training ends.
    """
    blob = json.dumps({"model_spec": model_spec, "dataset_info": dataset_info}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def run_dir(results_dir: str | Path, dataset_slug: str, model_name: str, seed: int) -> Path:
    return Path(results_dir) / "train" / dataset_slug / model_name / f"seed-{seed}"


def save_weights(path: Path, model: nn.Module) -> str:
    """Write the model's state dict as safetensors (atomically) and return its sha256."""
    state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    atomic_write(path, lambda tmp: save_file(state, str(tmp), metadata={"format": "pt"}))
    return sha256_file(path)


def load_weights(path: Path, model: nn.Module, expected_sha256: str | None = None) -> None:
    """Load safetensors weights into ``model``; a corrupt, tampered or mismatched file raises ValueError."""
    if not path.exists():
        raise ValueError(
            f"checkpoint {path} does not exist; train the model first (python -m robustbench_wave.train)"
        )
    if expected_sha256 and sha256_file(path) != expected_sha256:
        raise ValueError(
            f"checkpoint {path} does not match the sha256 recorded in its config.json; it was modified or "
            f"truncated: re-train the model (delete {path.parent} and run robustbench_wave.train again)"
        )
    try:
        state = load_file(str(path))
    except (SafetensorError, OSError) as err:
        raise ValueError(f"checkpoint {path} is corrupt ({err}); delete {path.parent} and re-train") from None
    missing, unexpected, mismatched = state_mismatch(model.state_dict(), state)
    if missing or unexpected or mismatched:
        raise ValueError(
            f"checkpoint {path} does not fit this model (missing {missing[:5]}, unexpected {unexpected[:5]}, "
            f"shape mismatch {mismatched[:5]}); was it trained with another zoo spec or data set?"
        )
    model.load_state_dict(state)


def read_config(directory: Path) -> dict[str, Any]:
    path = directory / CONFIG
    if not path.exists():
        raise ValueError(
            f"no trained model in {directory} (missing {CONFIG}); run python -m robustbench_wave.train"
        )
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{path} is not valid JSON ({err}); delete {directory} and re-train") from None
    if not isinstance(config, dict):
        raise ValueError(f"{path} is not a JSON object; delete {directory} and re-train")
    return config


def _field(config: dict[str, Any], path: Path, dotted: str, kind: type | tuple[type, ...]) -> Any:
    """``config[a][b]`` for ``dotted`` = ``"a.b"``; a one-line ValueError naming the file and field else."""
    value: Any = config
    for part in dotted.split("."):
        if not isinstance(value, dict) or part not in value:
            raise ValueError(
                f"{path}: field {dotted!r} is missing; the file was edited or damaged: re-train the model "
                "(python -m robustbench_wave.train --overwrite)"
            )
        value = value[part]
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(
            f"{path}: field {dotted!r} has the wrong type ({value!r:.60}); re-train with --overwrite"
        )
    return value


def load_trained(
    name: str, dataset: str, results_dir: str | Path = "results", seed: int = 0
) -> tuple[nn.Module, dict[str, Any]]:
    """Rebuild a trained zoo model from its run folder, in eval mode, with its metadata.

    ``dataset`` is the data set spec used for training (e.g. ``fashion-mnist``) or its slug. The weights
    must match their recorded sha256 and the spec and data set info theirs (``meta["spec_sha256"]``).
    """
    check_safe_name(name, "model name")
    directory = run_dir(results_dir, _dataset_slug(dataset), name, seed)
    if not (directory / CONFIG).exists() and name not in list_zoo():
        raise ValueError(
            f"no trained model {name!r} in {directory}, and {name!r} is no zoo model"
            f"{did_you_mean(name, list_zoo())} (zoo models: {', '.join(list_zoo())})"
        )
    config, path = read_config(directory), directory / CONFIG
    if "final" not in config:
        raise ValueError(
            f"training of {name!r} (seed {seed}) in {directory} did not finish; re-run "
            f"python -m robustbench_wave.train --model {name} --dataset {dataset} to resume it"
        )
    weights_sha = _field(config, path, "final.checkpoint_sha256", str)
    clean_accuracy = _field(config, path, "final.test_accuracy", (int, float))
    model_spec = _field(config, path, "model_spec", dict)
    spec_sha = verify_spec(config, path)
    info = _dataset_info(config, path)
    try:
        model = build_model(model_spec, info)
    except (KeyError, TypeError) as err:
        raise ValueError(
            f"{path}: field 'model_spec' does not describe a model ({err!r}); re-train"
        ) from None
    load_weights(directory / WEIGHTS, model, weights_sha)
    model.eval()
    meta = {
        "name": name,
        "seed": seed,
        "run_dir": str(directory),
        "checkpoint_sha256": weights_sha,
        "spec_sha256": spec_sha,
        "model_spec": model_spec,
        "clean_accuracy": clean_accuracy,
        "config": config,
        "dataset_info": info,
    }
    return model, meta


def verify_spec(config: dict[str, Any], path: Path) -> str:
    """The sha256 of ``config``'s spec and data set info, refused when it differs from the one recorded at
    training (the file was edited); a run trained before specs were hashed is accepted with a warning."""
    actual = spec_sha256(_field(config, path, "model_spec", dict), _field(config, path, "dataset_info", dict))
    recorded = _field(config, path, "final", dict).get("spec_sha256")
    if recorded is None:
        log.warning(
            "%s records no spec_sha256 (trained before specs were hashed): its model_spec and dataset_info "
            "cannot be verified; re-train with --overwrite to record it",
            path,
        )
    elif recorded != actual:
        raise ValueError(
            f"{path}: model_spec/dataset_info do not match final.spec_sha256 recorded at training (the file "
            "was edited after training); restore it or re-train the model with --overwrite"
        )
    return actual


def _dataset_info(config: dict[str, Any], path: Path) -> DatasetInfo:
    fields = _field(config, path, "dataset_info", dict)
    try:
        return DatasetInfo.from_dict(fields)
    except (KeyError, TypeError, ValueError) as err:
        raise ValueError(
            f"{path}: field 'dataset_info' is incomplete ({err!r}); re-train with --overwrite"
        ) from None


def _dataset_slug(dataset: str) -> str:
    """Accept a data set spec (``fashion-mnist``, ``imagefolder:PATH``) or the slug of its result folder."""
    try:
        return dataset_info(dataset).slug
    except ValueError:
        return dataset


# -- resumable training state -------------------------------------------------------------------------
def save_resume_state(
    directory: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    epoch: int,
    fingerprint: str,
    history: list[dict[str, Any]],
) -> None:
    """Everything needed to continue after ``epoch``: tensors in safetensors, the rest (with the metrics
    ``history`` of epochs 1..epoch, from which ``metrics.jsonl`` is written) in JSON."""
    tensors: dict[str, torch.Tensor] = {
        f"model.{k}": v.detach().contiguous().cpu() for k, v in model.state_dict().items()
    }
    opt_state = optimizer.state_dict()
    scalars: dict[str, Any] = {}
    for idx, param_state in opt_state["state"].items():
        for key, value in param_state.items():
            if torch.is_tensor(value):
                tensors[f"optim.{idx}.{key}"] = value.detach().contiguous().cpu()
            else:
                scalars[f"{idx}.{key}"] = value
    tensors["rng.torch"] = torch.get_rng_state()
    atomic_write(directory / RESUME_TENSORS, lambda tmp: save_file(tensors, str(tmp)))
    atomic_write_json(
        directory / RESUME_STATE,
        {
            "epoch": epoch,
            "fingerprint": fingerprint,
            "param_groups": opt_state["param_groups"],
            "optim_scalars": scalars,
            "scheduler": scheduler.state_dict(),
            "tensors_sha256": sha256_file(directory / RESUME_TENSORS),
            "history": history,
        },
    )


def load_resume_state(
    directory: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    fingerprint: str,
) -> tuple[int, list[dict[str, Any]]]:
    """Restore the state saved by :func:`save_resume_state`; returns the number of completed epochs (0 if
    none) and their metrics history."""
    state_path = directory / RESUME_STATE
    if not state_path.exists() or not (directory / RESUME_TENSORS).exists():
        return 0, []
    try:
        state = json.loads(state_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        log.warning("ignoring unreadable %s; starting %s from scratch", state_path, directory)
        return 0, []
    if state.get("fingerprint") != fingerprint:
        raise ValueError(
            f"{directory} holds a run with a different configuration; use another --results-dir or pass --overwrite "
            f"to discard it"
        )
    if sha256_file(directory / RESUME_TENSORS) != state.get("tensors_sha256"):
        log.warning("resume tensors in %s are corrupt; starting from scratch", directory)
        return 0, []
    tensors = load_file(str(directory / RESUME_TENSORS))
    model.load_state_dict({k[len("model.") :]: v for k, v in tensors.items() if k.startswith("model.")})
    opt_state: dict[str, Any] = {"state": {}, "param_groups": state["param_groups"]}
    for key, value in tensors.items():
        if key.startswith("optim."):
            _, idx, name = key.split(".", 2)
            opt_state["state"].setdefault(int(idx), {})[name] = value
    for key, value in state["optim_scalars"].items():
        idx, name = key.split(".", 1)
        opt_state["state"].setdefault(int(idx), {})[name] = value
    optimizer.load_state_dict(opt_state)
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(tensors["rng.torch"])
    epoch = int(state["epoch"])
    return epoch, _resumed_history(directory, state, epoch)


def _resumed_history(directory: Path, state: dict[str, Any], epoch: int) -> list[dict[str, Any]]:
    """The history saved with the state; a state saved before histories were kept falls back on the first
    ``epoch`` lines of ``metrics.jsonl`` (what this code did then)."""
    if "history" in state:
        return list(state["history"])
    return read_jsonl(directory / METRICS)[:epoch]


def write_metrics(directory: Path, history: list[dict[str, Any]]) -> None:
    """``metrics.jsonl`` as exactly ``history`` (one line per epoch), replaced whole and atomically; no
    file while there is no epoch."""
    if not history:
        (directory / METRICS).unlink(missing_ok=True)
        return
    atomic_write_text(directory / METRICS, "".join(json.dumps(row, sort_keys=True) + "\n" for row in history))


def clear_resume_state(directory: Path) -> None:
    for name in (RESUME_TENSORS, RESUME_STATE):
        (directory / name).unlink(missing_ok=True)
