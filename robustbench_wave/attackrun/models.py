"""The models of an attack run: loaded once under the names records give them, checked against the data set
they are attacked on, and reloaded later (merge, finalize, re-audit) with their checkpoint and spec hashes
checked to be the ones attacked.

A zoo name loads its trained checkpoint (:func:`robustbench_wave.training.checkpoint.load_trained`); a
reference from outside the zoo builds its model (:func:`robustbench_wave.models.external.build_external`).
A model that cannot be loaded ends the command with one line naming it.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from torch import nn

from robustbench_wave.attackrun.settings import (
    AUTO_SURROGATE,
    AUTO_SURROGATE_MODEL,
    NO_SURROGATE,
    RunRefused,
    RunSettings,
)
from robustbench_wave.data import DatasetInfo, LabelledImages, load_test_images
from robustbench_wave.models.compiled import compile_model
from robustbench_wave.models.external import ExternalSpec, build_external
from robustbench_wave.models.intake import PROBE_SIZE, carry_over, prepare
from robustbench_wave.training import checkpoint

log = logging.getLogger(__name__)

#: A trained model and the metadata of its training run (checkpoint hash, run folder, clean accuracy).
Loaded = tuple[nn.Module, dict[str, Any]]


def load_models(
    names: list[str],
    dataset: str,
    results_dir: Path,
    train_seed: int,
    external: tuple[ExternalSpec, ...] = (),
    data: LabelledImages | None = None,
) -> dict[str, Loaded]:
    """Load every model once (a repeated name is loaded once), in order, under the name records give it:
    a zoo name's trained checkpoint, or the external model of that reference in ``external``."""
    specs = {e.reference: e for e in external}
    loaded = {}
    for name in dict.fromkeys(names):
        spec = specs.get(name)
        loaded[spec.slug if spec else name] = load_model(name, dataset, results_dir, train_seed, spec, data)
    return loaded


def load_model(
    name: str,
    dataset: str,
    results_dir: Path,
    train_seed: int,
    external: ExternalSpec | None = None,
    data: LabelledImages | None = None,
) -> Loaded:
    """One trained zoo model, or the ``external`` one, checked and scanned on ``data``'s first images (loaded
    when not given; :func:`~robustbench_wave.models.intake.prepare`, every door's path); a missing or corrupt
    checkpoint, or a model that does not fit the data, ends the command with one clear line."""
    try:
        probe = data if data is not None else load_test_images(dataset, PROBE_SIZE)
        if external is not None:
            return build_external(external, probe.info, probe.images)
        model, meta = checkpoint.load_trained(name, dataset, results_dir, train_seed)
        return prepare(model, probe.images, probe.info.num_classes, name), meta
    except ValueError as err:
        raise RunRefused(f"cannot load model {name!r}: {err}") from None


def model_hashes(
    models: dict[str, Loaded], surrogate_name: str, surrogate: Loaded | None, key: str = "checkpoint_sha256"
) -> dict[str, str]:
    """Every model's ``key`` from its training metadata (the checkpoint's sha256, or ``spec_sha256``), the
    surrogate's under ``surrogate:<name>``; "" where the metadata lacks it."""
    hashes = {k: v[1].get(key) or "" for k, v in models.items()}
    if surrogate is not None:
        hashes[f"surrogate:{surrogate_name}"] = surrogate[1].get(key) or ""
    return hashes


def _describe(info: DatasetInfo) -> str:
    return f"{info.name} ({info.num_classes} classes, {info.in_chans}x{info.img_size}x{info.img_size})"


def check_dataset(name: str, train_meta: dict[str, Any], info: DatasetInfo) -> None:
    """A model is attacked only on the data set it was trained on: same name, classes, size and channels
    (two data sets with the same channel count would otherwise run and give meaningless numbers)."""
    trained_on = train_meta.get("dataset_info")
    if trained_on is None or all(
        getattr(trained_on, f, None) == getattr(info, f)
        for f in ("name", "num_classes", "img_size", "in_chans")
    ):
        return
    raise RunRefused(
        f"model {name!r} was trained on {_describe(trained_on)}, not on {_describe(info)}; attack it with "
        f"--dataset {trained_on.name}"
    )


def load_run_models(
    settings: RunSettings, results_dir: Path, data: LabelledImages, loaded: dict[str, Loaded] | None = None
) -> tuple[dict[str, Loaded], Loaded | None]:
    """The models (``loaded`` when given: already in memory) and the surrogate, each checked to be trained on
    (external: to fit) ``data``'s data set, compiled as the settings say (a surrogate that is also a model is
    the same compiled module)."""
    external = settings.external
    models = _prepared(loaded, data) if loaded is not None else load_models(
        settings.models, settings.dataset, results_dir, settings.train_seed, external, data
    )  # fmt: skip
    surrogate, sur_key = None, settings.key(settings.surrogate)
    if settings.has_surrogate:
        surrogate = models.get(sur_key) or load_model(
            settings.surrogate, settings.dataset, results_dir, settings.train_seed,
            settings.external_spec(settings.surrogate), data,
        )  # fmt: skip
        check_dataset(sur_key, surrogate[1], data.info)
    for name, (_, meta) in models.items():
        check_dataset(name, meta, data.info)
    models = {
        name: (carry_over(m, compile_model(m, settings.compile)), meta) for name, (m, meta) in models.items()
    }
    if surrogate is not None and sur_key in models:
        surrogate = models[sur_key]
    return models, surrogate


def _prepared(loaded: dict[str, Loaded], data: LabelledImages) -> dict[str, Loaded]:
    """Models handed over in memory (``benchmark(module)``), checked and scanned as a loaded one is."""
    prepared = {}
    for name, (model, meta) in loaded.items():
        try:
            prepared[name] = (prepare(model, data.images, data.info.num_classes, name), meta)
        except ValueError as err:
            raise RunRefused(f"cannot attack model {name!r}: {err}") from None
    return prepared


def reload_models(config: dict[str, Any], results_dir: Path, why: str) -> dict[str, Loaded]:
    """A finished run's models (its ``config.json``), their checkpoints and specs checked to be the ones
    attacked; :class:`RunRefused` naming the changed ones, ending with ``why``."""
    try:
        external = tuple(ExternalSpec.from_config(e) for e in (config.get("external") or {}).values())
    except ValueError as err:
        raise RunRefused(str(err)) from None
    models = load_models(config["models"], config["dataset"], results_dir, config["train_seed"], external)
    changed = [
        k
        for field, key in (("checkpoints", "checkpoint_sha256"), ("specs", "spec_sha256"))
        for k, v in model_hashes(models, "", None, key).items()
        if field in config and config[field].get(k) != v
    ]
    if changed:
        raise RunRefused(f"the checkpoints of {sorted(set(changed))} changed {why}")
    return models


def choose_surrogate(
    settings: RunSettings, results_dir: Path, info: DatasetInfo
) -> tuple[RunSettings, str | None]:
    """``--surrogate auto``: the settings with the run's baseline (``--baseline``, a model of the run) when
    one is given, else the zoo's :data:`AUTO_SURROGATE_MODEL` (same training seed) when a finished training
    run of it exists for ``info``'s data set in ``results_dir``, else ``none``, and the sentence saying which
    and why (logged once; None when the surrogate was named). ``config.json`` stores the chosen name, so a
    run made with ``--surrogate patch`` is the same configuration."""
    if settings.surrogate != AUTO_SURROGATE:
        return settings, None
    if settings.baseline is not None:
        note = f"--surrogate auto: {settings.key(settings.baseline)} (the run's --baseline)"
        log.info("%s", note)
        return dataclasses.replace(settings, surrogate=settings.baseline), note
    name = AUTO_SURROGATE_MODEL
    folder = checkpoint.run_dir(results_dir, info.slug, name, settings.train_seed)
    try:  # a config.json that cannot be read is an error here too, as it would be when named
        finished = (folder / checkpoint.CONFIG).exists() and "final" in checkpoint.read_config(folder)
    except ValueError as err:
        raise RunRefused(f"--surrogate auto: cannot read the training run of {name}: {err}") from None
    if finished:
        chosen, note = name, f"--surrogate auto: {name} (its finished training run in {folder})"
    else:
        chosen = NO_SURROGATE
        note = (
            f"--surrogate auto: none (no finished training run of {name} in {folder}); the transfer attacks "
            f"are skipped: train {name}, or name a --surrogate, to run them"
        )
    log.info("%s", note)
    return dataclasses.replace(settings, surrogate=chosen), note
