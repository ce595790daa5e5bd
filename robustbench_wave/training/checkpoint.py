"""Checkpoints as safetensors + JSON (no pickle), written atomically, verified when read.

Layout of one training run: ``<results>/train/<dataset-slug>/<model>/seed-<s>/`` with

* ``model.safetensors`` -- final weights; ``config.json`` -- resolved model spec, data set info, recipe,
  provenance, final metrics and the weights' sha256;
* ``metrics.jsonl`` -- one JSON line per completed epoch;
* ``resume.safetensors`` + ``resume.json`` -- model, optimizer, scheduler and RNG state after the last
  completed epoch, so a killed run continues where it stopped instead of starting again.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from robustbench_wave.data import DatasetInfo, dataset_info
from robustbench_wave.io import atomic_write, atomic_write_json, sha256_file
from robustbench_wave.models.vit import build_model

log = logging.getLogger(__name__)

WEIGHTS = "model.safetensors"
CONFIG = "config.json"
METRICS = "metrics.jsonl"
RESUME_TENSORS = "resume.safetensors"
RESUME_STATE = "resume.json"


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
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    mismatched = sorted(k for k in set(own) & set(state) if own[k].shape != state[k].shape)
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
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON ({err}); delete {directory} and re-train") from None


def load_trained(
    name: str, dataset: str, results_dir: str | Path = "results", seed: int = 0
) -> tuple[nn.Module, dict[str, Any]]:
    """Rebuild a trained zoo model from its run folder, in eval mode, with its metadata.

    ``dataset`` is the data set spec used for training (e.g. ``fashion-mnist``) or its slug.
    """
    directory = run_dir(results_dir, _dataset_slug(dataset), name, seed)
    config = read_config(directory)
    if "final" not in config:
        raise ValueError(
            f"training of {name!r} (seed {seed}) in {directory} did not finish; re-run "
            f"python -m robustbench_wave.train --model {name} --dataset {dataset} to resume it"
        )
    info = DatasetInfo.from_dict(config["dataset_info"])
    model = build_model(config["model_spec"], info)
    load_weights(directory / WEIGHTS, model, config["final"]["checkpoint_sha256"])
    model.eval()
    meta = {
        "name": name,
        "seed": seed,
        "run_dir": str(directory),
        "checkpoint_sha256": config["final"]["checkpoint_sha256"],
        "clean_accuracy": config["final"]["test_accuracy"],
        "config": config,
        "dataset_info": info,
    }
    return model, meta


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
) -> None:
    """Everything needed to continue after ``epoch``: tensors in safetensors, the rest in JSON."""
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
        },
    )


def load_resume_state(
    directory: Path,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    fingerprint: str,
) -> int:
    """Restore the state saved by :func:`save_resume_state`; returns the number of completed epochs (0 if none)."""
    state_path = directory / RESUME_STATE
    if not state_path.exists() or not (directory / RESUME_TENSORS).exists():
        return 0
    try:
        state = json.loads(state_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError:
        log.warning("ignoring unreadable %s; starting %s from scratch", state_path, directory)
        return 0
    if state.get("fingerprint") != fingerprint:
        raise ValueError(
            f"{directory} holds a run with a different configuration; use another --out folder or pass --fresh "
            f"to discard it"
        )
    if sha256_file(directory / RESUME_TENSORS) != state.get("tensors_sha256"):
        log.warning("resume tensors in %s are corrupt; starting from scratch", directory)
        return 0
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
    return int(state["epoch"])


def clear_resume_state(directory: Path) -> None:
    for name in (RESUME_TENSORS, RESUME_STATE):
        (directory / name).unlink(missing_ok=True)
