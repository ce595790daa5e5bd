"""Attack every gallery defence twice with the attack command: a naive protocol and the adaptive one.

Each defence is attacked the way a user attacks their own model -- ``python -m robustbench_wave.attack
--model robustbench_wave.models.gallery:FACTORY --weights FILE`` -- so the table tests the harness's
automatic BPDA and EOT, not code written for the gallery. The two protocols differ only in flags
(:data:`PROTOCOLS`): ``naive`` = exact (or blocked) and single-draw gradients (``--eot off``), what an evaluation
sees that trusts the model's own gradients; ``adaptive`` = the command's defaults, every gradient mode it
offers (BPDA where it finds a step without a gradient) and EOT when it finds the model random. Both decide a
randomised model's points by one rule, the vote of K = 21 draws on common random numbers (``--eot off`` turns
EOT off in the attacks only), so the two columns differ in the attacks alone. The transfer attacks'
surrogate is the undefended CNN by default (Athalye et al.'s threat model: the attacker knows the network
behind the defence). Every run lands in ``OUT/attack/<data>/<defence>-<protocol>_<suite>_n<N>_seed<S>`` and
resumes from its chunks when the command is run again; its terminal output goes to ``OUT/logs/``, and
``OUT/runs.json`` lists the commands, logs and times.

A user's own defence (:attr:`AttackOptions.own`: ``FILE.py:FACTORY``, ``MODULE:FACTORY`` or ``timm:ARCH``
with its weights) is attacked under the same two protocols, named by its record name ``ext-FACTORY-<hash>``.
Its undefended twin (:attr:`AttackOptions.baseline`) is a second ``--model`` of the same two runs and their
transfer surrogate, so the table compares the two on the same images (a paired test) and the black-box
attacker knows the network behind the defence, as for the gallery. Without a baseline the transfer attacks
are skipped (never the gallery's CNN in its place) and the table says that nothing judges the defence.
"""

from __future__ import annotations

import json
import logging
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from robustbench_wave.core.io import atomic_write_json
from robustbench_wave.core.runfolder import check_safe_name
from robustbench_wave.data import DEFAULT_DATASET, dataset_info, load_test_images
from robustbench_wave.defenses.training import weights_path
from robustbench_wave.models.external import ExternalSpec, build_external
from robustbench_wave.models.gallery import GALLERY, UNDEFENDED, GalleryEntry
from robustbench_wave.models.intake import PROBE_SIZE

log = logging.getLogger(__name__)

NAIVE, ADAPTIVE = "naive", "adaptive"
#: The attack command's flags per protocol: the naive one trusts the model's own gradient, the exact one
#: alone (no BPDA, no EOT: the automatic EOT off, no escalation: Square-5000 and transfer would otherwise run by
#: themselves where that gradient fails, docs/escalation.md); the adaptive one is the command's defaults (``--grad-modes``
#: every mode each defence offers, ``--eot auto``). The gallery's defences have no FixedFrontEnd, so none offers
#: the blocked mode, and a request for it would be refused.
PROTOCOLS: dict[str, tuple[str, ...]] = {
    NAIVE: ("--grad-modes", "exact", "--eot", "off", "--escalation", "off"),
    ADAPTIVE: (),
}
#: ``surrogate`` value: the undefended model of each defence -- the gallery CNN with its trained weights for
#: the gallery's defences, the user's :attr:`AttackOptions.baseline` for their own (none without one).
SURROGATE_CNN = "cnn"
#: ``--surrogate`` value of the attack command that skips the transfer attacks.
NO_SURROGATE = "none"
RUNS_JSON = "runs.json"


@dataclass(frozen=True)
class AttackOptions:
    """What the attack step runs: which defences under which protocols, on which data, suite and budget of
    examples; ``extra_args`` go to every attack command (e.g. ``--attacks``, ``--device``, ``--batch-size``).

    ``defences`` are gallery names; ``own`` a user's defences (external references with absolute weights
    paths), each attacked in the same runs as ``baseline``, the user's undefended model, when given."""

    out: Path
    dataset: str = DEFAULT_DATASET
    suite: str = "headline"
    n_examples: int = 200
    seed: int = 0
    defences: tuple[str, ...] = tuple(GALLERY)
    protocols: dict[str, tuple[str, ...]] = field(default_factory=lambda: dict(PROTOCOLS))
    surrogate: str = SURROGATE_CNN
    extra_args: tuple[str, ...] = ()
    python: str = sys.executable
    own: tuple[ExternalSpec, ...] = ()
    baseline: ExternalSpec | None = None

    def __post_init__(self) -> None:
        unknown = [d for d in self.defences if d not in GALLERY]
        if unknown or not (self.defences or self.own):
            raise ValueError(
                f"unknown defences {unknown}; choose from {', '.join(GALLERY)} or give FILE.py:FACTORY"
            )
        if self.baseline is not None and not self.own:
            raise ValueError(
                f"--baseline {self.baseline.reference} is the undefended twin of a defence of yours; give that "
                "defence as --defence FILE.py:FACTORY --weights FILE (the gallery's are judged against its CNN)"
            )
        names = [spec.slug for spec in self.own] + list(self.defences)
        names += [self.baseline.slug] if self.baseline is not None else []
        if len(set(names)) != len(names):
            raise ValueError(
                f"--defence / --baseline: two models would share a record name ({sorted(names)})"
            )
        for protocol in self.protocols:
            check_safe_name(protocol, "protocol name")
        if self.n_examples < 1:
            raise ValueError(f"n_examples = {self.n_examples} must be >= 1")

    @property
    def baselines(self) -> dict[str, str | None]:
        """Each own defence's record name -> its baseline's record name (None without one)."""
        base = self.baseline.slug if self.baseline is not None else None
        return {spec.slug: base for spec in self.own}

    @property
    def names(self) -> list[str]:
        """Every defence of the table in order: the gallery's names, then the own ones' record names."""
        return [*self.defences, *self.baselines]


def run_name(defence: str, protocol: str, options: AttackOptions) -> str:
    """The run folder's name: defence, protocol, suite, n and attack seed."""
    suite = Path(options.suite).stem if options.suite.endswith(".toml") else options.suite
    return f"{defence}-{protocol}_{suite}_n{options.n_examples}_seed{options.seed}"


def run_dir(defence: str, protocol: str, options: AttackOptions) -> Path:
    """Where the attack command writes that run."""
    slug = dataset_info(options.dataset).slug
    return options.out / "attack" / slug / run_name(defence, protocol, options)


def attack_command(entry: GalleryEntry, protocol: str, options: AttackOptions) -> list[str]:
    """The attack command of one defence under one protocol (ValueError when its weights are not trained)."""
    info = dataset_info(options.dataset)
    command = [
        options.python, "-m", "robustbench_wave.attack",
        "--model", entry.reference, "--weights", str(_weights(entry.weights_of, options)),
        "--num-classes", str(info.num_classes), "--img-size", str(info.img_size),
        "--dataset", options.dataset, "--suite", options.suite, "--n-examples", str(options.n_examples),
        "--seed", str(options.seed), "--out", str(options.out),
        "--run-name", run_name(entry.name, protocol, options), "--no-progress",
    ]  # fmt: skip
    return command + _surrogate_args(entry, options) + [*options.protocols[protocol], *options.extra_args]


def _weights(name: str, options: AttackOptions) -> Path:
    path = weights_path(options.out, name).resolve()
    if not path.is_file():
        raise ValueError(
            f"the gallery's {name!r} weights are not trained ({path}); run python -m robustbench_wave.gallery "
            f"train --results-dir {options.out} first"
        )
    return path


def _surrogate_args(entry: GalleryEntry, options: AttackOptions) -> list[str]:
    """``--surrogate``: the undefended CNN (its weights unless it is the attacked model), or as given."""
    if options.surrogate != SURROGATE_CNN:
        return ["--surrogate", options.surrogate]
    cnn = GALLERY[UNDEFENDED]
    if entry.reference == cnn.reference:
        return ["--surrogate", cnn.reference]
    return ["--surrogate", cnn.reference, "--surrogate-weights", str(_weights(cnn.weights_of, options))]


def check_own_models(options: AttackOptions) -> None:
    """Build every own defence and the baseline as the attack command will (import, factory, strict weights,
    a probe batch of the data set's images, so classes and image size are checked) before anything is
    written. ValueError: one line naming the flag."""
    specs = [("--defence", spec) for spec in options.own]
    specs += [("--baseline", options.baseline)] if options.baseline is not None else []
    if not specs:
        return
    probe = load_test_images(options.dataset, PROBE_SIZE)
    for flag, spec in specs:
        try:
            build_external(spec, probe.info, probe.images)
        except ValueError as err:
            raise ValueError(f"{flag} {spec.reference}: {err}") from None


def own_attack_command(defence: ExternalSpec, protocol: str, options: AttackOptions) -> list[str]:
    """The attack command of one own defence under one protocol: the defence and its baseline (when given)
    as two ``--model``s of one run, the baseline its transfer surrogate; the protocol's flags as they are
    (the naive ``--grad-modes exact`` is offered by every model)."""
    models = [defence] + ([options.baseline] if options.baseline is not None else [])
    command = [options.python, "-m", "robustbench_wave.attack"]
    for spec in models:
        command += ["--model", spec.canonical]
        command += ["--weights", spec.weights] if spec.weights is not None else []
    command += [
        "--dataset", options.dataset, "--suite", options.suite, "--n-examples", str(options.n_examples),
        "--seed", str(options.seed), "--out", str(options.out),
        "--run-name", run_name(defence.slug, protocol, options), "--no-progress",
    ]  # fmt: skip
    flags = list(options.protocols[protocol])
    return command + _own_surrogate_args(options) + [*flags, *options.extra_args]


def _own_surrogate_args(options: AttackOptions) -> list[str]:
    """``--surrogate``: the baseline (a ``--model`` of the run, so its ``--weights`` serve), none without one,
    or as given."""
    if options.surrogate != SURROGATE_CNN:
        return ["--surrogate", options.surrogate]
    if options.baseline is None:
        return ["--surrogate", NO_SURROGATE]
    return ["--surrogate", options.baseline.canonical]


def log_path(defence: str, protocol: str, options: AttackOptions) -> Path:
    """Where one attack command's terminal output goes (``OUT/logs/<run name>.log``)."""
    return options.out / "logs" / f"{run_name(defence, protocol, options)}.log"


def attack_gallery(options: AttackOptions, checked: bool = False) -> list[dict[str, Any]]:
    """Run every (defence, protocol) attack command in turn, each one's output into its log file; returns
    (and writes to ``OUT/runs.json``) each run's defence, protocol, folder, command, log and seconds. A
    failing command stops the step with its command line and the end of its log (the runs before it are
    kept, and it resumes from its chunks). ``checked``: the caller already ran :func:`check_own_models`."""
    commands = [
        (name, protocol, attack_command(GALLERY[name], protocol, options))
        for name in options.defences
        for protocol in options.protocols
    ]  # every weights file is checked before the first attack
    if not checked:  # every own model is built (the command line did it before training)
        check_own_models(options)
    if options.own and options.baseline is None:
        log.warning(
            "gallery: no --baseline: your defences are attacked without a transfer surrogate and the table "
            "cannot judge them broken or not (it compares a defence with its undefended model)"
        )
    commands += [
        (spec.slug, protocol, own_attack_command(spec, protocol, options))
        for spec in options.own
        for protocol in options.protocols
    ]
    earlier = read_runs(options.out)
    done: list[dict[str, Any]] = []
    for name, protocol, command in commands:
        log_file = log_path(name, protocol, options)
        log.info("gallery: attacking %s (%s), log %s: %s", name, protocol, log_file, shlex.join(command))
        log_file.parent.mkdir(parents=True, exist_ok=True)
        start = time.perf_counter()
        with log_file.open("w", encoding="utf-8") as out:
            returncode = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=False).returncode
        seconds = round(time.perf_counter() - start, 1)
        if returncode != 0:
            tail = log_file.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-5:]
            raise RuntimeError(
                f"the attack of {name} ({protocol}) exited with {returncode}: {shlex.join(command)}; its log "
                f"{log_file} ends: " + " | ".join(tail)
            )
        done.append(
            {"defence": name, "protocol": protocol, "run": str(run_dir(name, protocol, options)),
             "command": shlex.join(command), "log": str(log_file), "seconds": seconds}
            | ({"baseline": options.baselines[name]} if name in options.baselines else {})
        )  # fmt: skip
        atomic_write_json(options.out / RUNS_JSON, merge_runs(earlier, done))
        log.info("gallery: %s (%s) done in %.0f s", name, protocol, seconds)
    return done


def read_runs(out: Path) -> list[dict[str, Any]]:
    """The runs ``OUT/runs.json`` lists (none when it is absent); ValueError when it is not a list of runs."""
    path = out / RUNS_JSON
    if not path.is_file():
        return []
    try:
        runs = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not JSON ({err}); remove it (the run folders are kept)") from None
    if not isinstance(runs, list) or not all(isinstance(r, dict) and "run" in r for r in runs):
        raise ValueError(f"{path} is not a list of gallery runs; remove it (the run folders are kept)")
    return runs


def merge_runs(earlier: list[dict[str, Any]], done: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``runs.json`` after an attack step: the runs of earlier steps (``gallery attack --defence sap`` after
    the others) kept in their order, each replaced by this step's entry for the same run folder, then this
    step's new runs."""
    latest = {r["run"]: r for r in done}
    kept = [latest.pop(r["run"], r) for r in earlier]
    return kept + [r for r in done if r["run"] in latest]
