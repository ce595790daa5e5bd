"""Saved adversarial examples (``--save-adversarial``): the points that made the worst case, as safetensors.

Which point is kept: the running worst case (:class:`~robustbench_wave.evaluation.state.RobustState`) holds
one robust flag per (grad mode, threat, eps, example). When an attack's audited point breaks an example whose
flag at that attack's budget was still set, that point is saved under (grad mode, threat, eps): it is the
point whose record first made the example non-robust there (a cross-check's ``name@backend`` included, when
it found the break). Flags fall for every larger budget too, so an example is saved once per budget at which
a new break was found, never copied to larger ones: the point that breaks example ``i`` at budget ``e`` is the
one saved for ``i`` at the largest saved budget ``<= e`` (:meth:`AdversarialSet.worst_case`). Examples never
broken (and clean errors, which no attack touched) have no saved point: the clean image is the data set's.

One file per model, ``RUN/adversarial/<model>.safetensors``: per (grad mode, threat, eps) the tensors
``<mode>/<threat>/<eps>/x`` (float32, N x C x H x W, exactly the points the records' predictions were made
on), ``.../example_id`` (int64) and ``.../source`` (int64, an index into the metadata's ``sources``: the
attack, back-end, family and kind that produced each point). Groups and examples are in a canonical order
(sorted keys, ascending ids), so a sharded or resumed run writes the file a single process writes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from robustbench_wave.core.io import atomic_write_bytes

#: The run sub-folder holding one file per model.
ADVERSARIAL_DIR = "adversarial"
#: The key of ``meta.json`` that lists the files (with their sha256) and the rule.
META_KEY = "adversarial"
FORMAT_VERSION = 1
#: The one safetensors metadata key (a JSON string): one key keeps the header's bytes deterministic.
_HEADER = "robustbench_wave"
RULE = (
    "per (grad_mode, threat, eps): the audited point whose record first made the example non-robust at that "
    "budget; the point that breaks an example at eps is the one saved at the largest saved eps' <= eps; "
    "examples never broken have none"
)

Key = tuple[str, str, float]  # (grad mode, threat, eps)


def file_name(model: str) -> str:
    """``<model>.safetensors`` (model names are safe folder names: ``runfolder.check_safe_name``)."""
    return f"{model}.safetensors"


@dataclass
class Group:
    """The points of one (grad mode, threat, eps), ascending by example id."""

    example_id: torch.Tensor  # (n,) int64
    x: torch.Tensor  # (n, C, H, W) float32
    source: list[str]  # attack name (records' ``attack``) per point


@dataclass
class AdversarialSet:
    """One model's saved points, filled while the evaluation runs (:meth:`add`) or read from a file."""

    model: str
    sources: dict[str, dict[str, str]] = field(default_factory=dict)  # attack -> backend, family, kind
    _parts: dict[Key, list[tuple[torch.Tensor, torch.Tensor, list[str]]]] = field(
        default_factory=dict, repr=False
    )

    def add(
        self, key: Key, example_id: torch.Tensor, x: torch.Tensor, attack: str, info: dict[str, str]
    ) -> None:
        """Points of ``attack`` (``info``: its backend, family, kind) that broke these examples at ``key``."""
        if not len(example_id):
            return
        if self.sources.setdefault(attack, dict(info)) != dict(info):
            raise ValueError(f"attack {attack!r} of {self.model} was recorded with two descriptions")
        k = (str(key[0]), str(key[1]), float(key[2]))
        ids = example_id.long().cpu()
        self._parts.setdefault(k, []).append((ids, x.detach().float().cpu(), [attack] * len(ids)))

    def update(self, other: AdversarialSet) -> None:
        """Add every point of ``other`` (e.g. a resumed chunk's, or another shard's)."""
        for attack, info in other.sources.items():
            if self.sources.setdefault(attack, info) != info:
                raise ValueError(f"attack {attack!r} of {self.model} was recorded with two descriptions")
        for key, parts in other._parts.items():
            self._parts.setdefault(key, []).extend(parts)

    def keys(self) -> list[Key]:
        return sorted(self._parts)

    def group(self, key: Key) -> Group:
        """The points of ``key`` in canonical order; a ValueError when an example appears twice."""
        parts = self._parts.get(key, [])
        if not parts:
            return Group(torch.zeros(0, dtype=torch.long), torch.zeros(0), [])
        ids = torch.cat([p[0] for p in parts])
        x = torch.cat([p[1] for p in parts])
        source = [s for p in parts for s in p[2]]
        order = torch.argsort(ids, stable=True)
        ids = ids[order]
        if len(ids) > 1 and bool((ids[1:] == ids[:-1]).any()):
            dup = ids[1:][ids[1:] == ids[:-1]][:5].tolist()
            raise ValueError(f"{self.model} {key}: example ids {dup} saved twice (shards overlap?)")
        return Group(ids, x[order], [source[i] for i in order.tolist()])

    def __len__(self) -> int:
        return sum(len(p[0]) for parts in self._parts.values() for p in parts)

    def worst_case(self, mode: str, threat: str, eps: float) -> Group:
        """Per example broken at (mode, threat, eps): the point saved at the largest saved budget ``<= eps``."""
        chosen: dict[int, tuple[torch.Tensor, str]] = {}
        for m, t, e in self.keys():  # ascending eps within (mode, threat): later budgets overwrite
            if (m, t) == (mode, threat) and e <= eps + 1e-9:
                g = self.group((m, t, e))
                for i, ex in enumerate(g.example_id.tolist()):
                    chosen[ex] = (g.x[i], g.source[i])
        ids = sorted(chosen)
        if not ids:
            return Group(torch.zeros(0, dtype=torch.long), torch.zeros(0), [])
        return Group(
            torch.tensor(ids, dtype=torch.long),
            torch.stack([chosen[i][0] for i in ids]),
            [chosen[i][1] for i in ids],
        )

    # -------------------------------------------------------------------------------------- (de)serialise

    def to_bytes(self, extra: dict[str, Any] | None = None) -> bytes:
        """The safetensors file; ``extra`` joins the JSON header (e.g. a chunk's fingerprint)."""
        names = sorted(self.sources)
        tensors: dict[str, torch.Tensor] = {}
        groups = []
        for key in self.keys():
            g = self.group(key)
            prefix = tensor_prefix(key)
            tensors[f"{prefix}/x"] = g.x.contiguous()
            tensors[f"{prefix}/example_id"] = g.example_id.contiguous()
            tensors[f"{prefix}/source"] = torch.tensor([names.index(s) for s in g.source], dtype=torch.long)
            groups.append({"grad_mode": key[0], "threat": key[1], "eps": key[2], "prefix": prefix})
        header = {
            "format": FORMAT_VERSION,
            "model": self.model,
            "rule": RULE,
            "groups": groups,
            "sources": [{"attack": n, **self.sources[n]} for n in names],
            **(extra or {}),
        }
        return st_save(tensors, metadata={_HEADER: json.dumps(header, sort_keys=True)})

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> tuple[AdversarialSet, dict[str, Any]]:
        """(the set, its JSON header); a damaged or foreign file is a one-line ValueError naming ``where``."""
        try:
            tensors = st_load(data)
            header = json.loads(_read_header(data)[_HEADER])
            out = cls(str(header["model"]))
            sources = [dict(s) for s in header["sources"]]
            for s in sources:
                out.sources[s.pop("attack")] = s
            names = list(out.sources)
            for g in header["groups"]:
                p = g["prefix"]
                src = tensors[f"{p}/source"].tolist()
                key = (str(g["grad_mode"]), str(g["threat"]), float(g["eps"]))
                ids, x = tensors[f"{p}/example_id"], tensors[f"{p}/x"]
                if len(ids) != len(x) or len(ids) != len(src):
                    raise ValueError(f"group {p} holds {len(ids)} ids, {len(x)} points, {len(src)} sources")
                out._parts[key] = [(ids, x, [names[i] for i in src])]
        except (SafetensorError, ValueError, KeyError, TypeError, IndexError, json.JSONDecodeError) as err:
            why = " ".join(str(err).split()) or type(err).__name__
            raise ValueError(f"{where} is not a readable adversarial-examples file ({why})") from None
        return out, header


def tensor_prefix(key: Key) -> str:
    """``<mode>/<threat>/<eps>`` (eps as Python's shortest round-trip repr)."""
    mode, threat, eps = key
    return f"{mode}/{threat}/{eps!r}" if math.isfinite(eps) else f"{mode}/{threat}/{eps}"


def _read_header(data: bytes) -> dict[str, str]:
    """The safetensors ``__metadata__`` (the first 8 bytes give the JSON header's length)."""
    size = int.from_bytes(data[:8], "little")
    meta = json.loads(data[8 : 8 + size]).get("__metadata__") or {}
    if _HEADER not in meta:
        raise ValueError("it was not written by robustbench_wave")
    return meta


def write_set(adv: AdversarialSet, path: Path, extra: dict[str, Any] | None = None) -> Path:
    return atomic_write_bytes(path, adv.to_bytes(extra))


def read_set(path: Path) -> tuple[AdversarialSet, dict[str, Any]]:
    if not path.exists():
        raise ValueError(f"{path} is missing")
    return AdversarialSet.from_bytes(path.read_bytes(), str(path))


def merge_sets(model: str, sets: Iterable[AdversarialSet]) -> AdversarialSet:
    """One model's points from several shards (each example in one shard)."""
    out = AdversarialSet(model)
    for s in sets:
        out.update(s)
    return out
