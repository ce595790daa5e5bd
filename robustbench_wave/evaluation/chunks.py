"""Resume: finished (model, attack, gradient mode) chunks on disk, reused only for the same configuration.

A long evaluation is a sequence of chunks; each finished chunk's records (and cross-check records) are saved
with a JSON marker written last, so a killed run resumes from the last complete chunk (AutoAttack saves its
state for the same reason). The marker holds the configuration fingerprint (:func:`config_fingerprint`:
suite, budgets, data, weights, seed, modes, back-ends); a chunk made under any other configuration is
ignored, never mixed in.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch import nn

from robustbench_wave.evaluation import records as rec
from robustbench_wave.io import atomic_write_json

log = logging.getLogger(__name__)


def state_sha256(model: nn.Module) -> str:
    """Hash of the state dict (names, dtypes, shapes and bytes): identifies the weights being attacked."""
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        t = t.detach().cpu().contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def tensor_sha256(*tensors: torch.Tensor) -> str:
    """Hash of tensors (dtypes, shapes and bytes): identifies the evaluated data."""
    h = hashlib.sha256()
    for t in tensors:
        t = t.detach().cpu().contiguous()
        h.update(f"{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def config_fingerprint(config: dict[str, Any]) -> str:
    """SHA-256 of a JSON-serialisable configuration (keys sorted): equal only for the same configuration."""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "model"


Chunk = tuple[pd.DataFrame, pd.DataFrame | None, list[dict[str, Any]]]  # records, cross-check, timing


class ChunkCache:
    """Finished (model, attack, grad mode) chunks on disk, valid only for the same configuration."""

    def __init__(self, directory: str | Path, fingerprint: str) -> None:
        self.dir = Path(directory)
        self.fingerprint = fingerprint

    def _stem(self, model: str, attack: str, mode: str) -> Path:
        return self.dir / f"{_safe(model)}__{_safe(attack)}__{mode}"

    def load(self, model: str, attack: str, mode: str, need_cross: bool) -> Chunk | None:
        """The saved chunk, or None when it is missing, incomplete, stale or lacks needed cross-checks."""
        stem = self._stem(model, attack, mode)
        info_path = stem.with_suffix(".json")
        if not info_path.exists():
            return None
        info = json.loads(info_path.read_text(encoding="utf-8"))
        if info.get("fingerprint") != self.fingerprint:
            log.info("ignoring stale chunk %s (configuration changed)", info_path.name)
            return None
        if need_cross and not info.get("crosscheck"):
            return None
        records = rec.read_records(Path(f"{stem}.csv.gz"))
        xpath = Path(f"{stem}.xcheck.csv.gz")
        cross = rec.read_records(xpath) if xpath.exists() else None
        return records, cross, info.get("timing", [])

    def save(self, model: str, attack: str, mode: str, chunk: Chunk, crosscheck: bool) -> None:
        records, cross, timing = chunk
        stem = self._stem(model, attack, mode)
        rec.write_records(records, Path(f"{stem}.csv.gz"))
        if cross is not None:
            rec.write_records(cross, Path(f"{stem}.xcheck.csv.gz"))
        # the JSON is written last: its presence marks the chunk complete
        atomic_write_json(
            stem.with_suffix(".json"),
            {"fingerprint": self.fingerprint, "timing": timing, "crosscheck": crosscheck},
        )
