"""Resume: finished (model, attack, gradient mode) chunks on disk, reused only for the same configuration.

A long evaluation is a sequence of chunks; each finished chunk's records (a cross-check's rows among them) are saved
with a JSON marker written last, so a killed run resumes from the last complete chunk (AutoAttack saves its
state for the same reason). The marker holds the configuration fingerprint (:func:`config_fingerprint`:
suite, budgets, data, weights, model specs, seed, modes, back-ends, cross-check); a chunk made under any other
configuration is ignored, never mixed in. A chunk whose files cannot be read (a truncated or hand-edited
file) is treated as missing and computed again, with a warning naming the file. With ``save_adversarial`` a
chunk also keeps the points that broke examples (``<chunk>.adv.safetensors``, holding the fingerprint too);
a chunk without them is computed again when they are wanted.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import zlib
from pathlib import Path
from typing import Any

import pandas as pd
import torch
from torch import nn

from robustbench_wave.core.io import atomic_write_json
from robustbench_wave.evaluation import records as rec
from robustbench_wave.evaluation.adversarial import AdversarialSet, read_set, write_set

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


Chunk = tuple[pd.DataFrame, list[dict[str, Any]]]  # records (a cross-check's rows included), timing

#: What reading a damaged chunk file raises (truncated or non-gzip data, a bad CSV, missing columns, bad JSON).
UNREADABLE = (ValueError, OSError, EOFError, KeyError, zlib.error)


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def _read_marker(path: Path) -> dict[str, Any] | None:
    """A chunk's JSON marker, or None when it is missing or unreadable (a warning names the file)."""
    if not path.exists():
        return None
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except UNREADABLE as err:
        log.warning("recomputing chunk %s: its marker is unreadable (%s)", path, _one_line(err))
        return None
    if not isinstance(info, dict):
        log.warning("recomputing chunk %s: its marker is not a JSON object", path)
        return None
    return info


class ChunkCache:
    """Finished (model, attack, grad mode) chunks on disk, valid only for the same configuration."""

    def __init__(self, directory: str | Path, fingerprint: str) -> None:
        self.dir = Path(directory)
        self.fingerprint = fingerprint

    def _stem(self, model: str, attack: str, mode: str) -> Path:
        return self.dir / f"{_safe(model)}__{_safe(attack)}__{mode}"

    def load(self, model: str, attack: str, mode: str) -> Chunk | None:
        """The saved chunk, or None when it is missing, incomplete, stale or unreadable (the caller then
        computes it again)."""
        stem = self._stem(model, attack, mode)
        info = _read_marker(stem.with_suffix(".json"))
        if info is None:
            return None
        if info.get("fingerprint") != self.fingerprint:
            log.info("ignoring stale chunk %s (configuration changed)", stem.name)
            return None
        path = Path(f"{stem}.csv.gz")
        try:
            records = rec.read_records(path)
        except UNREADABLE as err:
            log.warning("recomputing chunk %s: a file of it is unreadable (%s)", path, _one_line(err))
            return None
        timing = info.get("timing", [])
        return records, timing if isinstance(timing, list) else []

    def load_adversarial(self, model: str, attack: str, mode: str) -> AdversarialSet | None:
        """The points a chunk kept (``save_adversarial``), or None when missing, stale or unreadable."""
        path = Path(f"{self._stem(model, attack, mode)}.adv.safetensors")
        if not path.exists():
            return None
        try:
            kept, header = read_set(path)
        except ValueError as err:
            log.warning("recomputing chunk %s: %s", path, _one_line(err))
            return None
        return kept if header.get("fingerprint") == self.fingerprint else None

    def save(
        self, model: str, attack: str, mode: str, chunk: Chunk, adversarial: AdversarialSet | None = None
    ) -> None:
        records, timing = chunk
        stem = self._stem(model, attack, mode)
        rec.write_records(records, Path(f"{stem}.csv.gz"))
        if adversarial is not None:
            write_set(adversarial, Path(f"{stem}.adv.safetensors"), {"fingerprint": self.fingerprint})
        # the JSON is written last: its presence marks the chunk complete
        atomic_write_json(stem.with_suffix(".json"), {"fingerprint": self.fingerprint, "timing": timing})
