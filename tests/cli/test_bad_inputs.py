"""Bad input to the three command lines, as a careless or hostile user would give it.

Every case must end with a non-zero exit, ONE line that names the offending value, path or field, no
traceback, and no file created, changed or deleted anywhere: not under ``--out``, not in the case's tmp tree
(a snapshot of every path, size, sha256 and mode before and after), not in the shared trained runs. Each case
works on its own copy of a tiny trained results tree (``patch`` and ``wavelet`` on ``synthetic``), of one
finished attack run and of one run of two unmerged ``--shard`` jobs, so a case that does write cannot spoil
another. A few cases run as real subprocesses, as a user types them (test_bad_inputs_subprocess.py); the
others call ``main(argv)`` in-process. Controls check that the unspoilt invocations the cases start from do
succeed, so each case fails only for its one bad input. (The one tolerated change: the holder record inside
an existing ``.lock`` file, see :func:`tests.support.bad_inputs.diff_snapshots`.)
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import timm
import torch
from safetensors.torch import save_file

from robustbench_wave import attack, train
from robustbench_wave.core.runfolder import RunLock
from robustbench_wave.data import load_split
from tests.support.bad_inputs import (
    Case,
    Env,
    Flags,
    Outcome,
    failures,
    run_in_process,
    unchanged,
)

TRAIN_BASE: Flags = {
    "--model": "patch",
    "--dataset": "synthetic",
    "--train-subset": "64",
    "--n-examples": "32",
    "--epochs": "1",
    "--batch-size": "32",
    "--device": "cpu",
    "--no-progress": None,
    "--results-dir": "{results}",
}
ATTACK_BASE: Flags = {
    "--model": "patch",
    "--surrogate": "none",
    "--suite": "smoke",
    "--attacks": "fgsm",
    "--n-examples": "16",
    "--batch-size": "16",
    "--no-diagnostics": None,
    "--dataset": "synthetic",
    "--device": "cpu",
    "--no-progress": None,
    "--results-dir": "{results}",
    "--out": "{results}",
}
REPORT_BASE: Flags = {"--quiet": None, "--no-figures": None}
MERGE_BASE: Flags = {"--no-diagnostics": None, "--quiet": None, "--no-figures": None}

#: (flags, positional arguments) of the working invocation each command line's cases start from.
BASES: dict[str, tuple[Flags, tuple[str, ...]]] = {
    "train": (TRAIN_BASE, ()),
    "attack": (ATTACK_BASE, ()),
    "report": (REPORT_BASE, ("{run}",)),
    "merge": (MERGE_BASE, ("merge", "{sharded}")),
}

#: The trained runs and the attack run of a case live this deep under its root, so that a path escaping
#: the results tree by a few ``..`` still lands inside the snapshot.
RESULTS_UNDER = ("deep", "er", "results")


@dataclass(frozen=True)
class Shared:
    """The session's tree: trained runs, one finished attack run, an image-folder data set and its cache."""

    root: Path
    results: Path
    run: Path
    sharded: Path
    gratings: Path
    data: Path


def _make_gratings(folder: Path) -> None:
    """A 10-class image folder of 32x32 gray PNGs: the channels, size and classes of ``synthetic``."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        for c in range(10):
            (folder / split / f"c{c}").mkdir(parents=True)
            for i in range(2):
                pixels = rng.integers(0, 256, size=(32, 32), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / split / f"c{c}" / f"{i}.png")


def command_flags(base: Flags, env_fields: dict[str, str]) -> list[str]:
    """The arguments ``base`` gives, its ``{field}`` templates filled from ``env_fields``."""
    args: list[str] = []
    for flag, value in base.items():
        args += [flag] if value is None else [flag, value.format(**env_fields)]
    return args


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Shared:
    root = tmp_path_factory.mktemp("bad_inputs_shared")
    results = root / "results"
    fields = {"results": str(results)}
    assert train.main([*command_flags(TRAIN_BASE, fields), "--model", "wavelet"]) == 0
    assert attack.main(command_flags(ATTACK_BASE, fields)) == 0
    (run,) = sorted((results / "attack" / "synthetic").iterdir())
    sharded_flags = command_flags({**ATTACK_BASE, "--n-examples": "32", "--run-name": "sharded"}, fields)
    for shard in ("0/2", "1/2"):  # two seeding blocks of 16
        assert attack.main([*sharded_flags, "--shard", shard]) == 0
    gratings, data = root / "gratings", root / "data"
    _make_gratings(gratings)
    for split in ("train", "test"):  # decode once, so that attacking it later writes no cache
        load_split(f"imagefolder:{gratings}", split, root=data)
    return Shared(root, results, run, results / "attack" / "synthetic" / "sharded", gratings, data)


def case_env(shared: Shared, root: Path) -> Env:
    """A case's own copy of the shared results tree under ``root``, and its folders."""
    results = root.joinpath(*RESULTS_UNDER)
    shutil.copytree(shared.results, results, symlinks=True)
    inside = {
        name: results / getattr(shared, name).relative_to(shared.results) for name in ("run", "sharded")
    }
    return Env(root, results, inside["run"], inside["sharded"], shared.results, shared.gratings)


# --------------------------------------------------------------------------------------------- setups
# Each takes the case's Env and an ExitStack (for locks held while the command runs); paths are templates
# formatted with Env.fields().

Setup = Callable[[Env, contextlib.ExitStack], None]


def _write(template: str, text: str) -> Setup:
    """Write ``text`` to the file at ``template`` (a new file, or one spoilt on purpose)."""

    def setup(env: Env, stack: contextlib.ExitStack) -> None:
        path = Path(env.format(template))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")

    return setup


def _both(*setups: Setup) -> Setup:
    def setup(env: Env, stack: contextlib.ExitStack) -> None:
        for one in setups:
            one(env, stack)

    return setup


def _lock(template: str) -> Setup:
    """Hold the run-folder lock on ``template`` while the case runs, as a second run would."""
    return lambda env, stack: stack.enter_context(RunLock(Path(env.format(template))))


def _delete(template: str) -> Setup:
    return lambda env, stack: Path(env.format(template)).unlink()


def _rewrite_bytes(template: str, change: Callable[[bytes], bytes]) -> Setup:
    def setup(env: Env, stack: contextlib.ExitStack) -> None:
        path = Path(env.format(template))
        path.write_bytes(change(path.read_bytes()))

    return setup


def _half(data: bytes) -> bytes:
    return data[: len(data) // 2]


def _rewrite_records(template: str, change: Callable[[pd.DataFrame], pd.DataFrame]) -> Setup:
    """Records read, changed and gzipped again: a well-formed file with other content."""
    return _rewrite_bytes(
        template,
        lambda data: gzip.compress(
            change(pd.read_csv(io.BytesIO(data), compression="gzip")).to_csv(index=False).encode()
        ),
    )


def _edit_json(template: str, edit: Callable[[dict], None]) -> Setup:
    def setup(env: Env, stack: contextlib.ExitStack) -> None:
        path = Path(env.format(template))
        config = json.loads(path.read_text(encoding="utf-8"))
        edit(config)
        path.write_text(json.dumps(config, indent=2), encoding="utf-8")

    return setup


def _copy(src: str, dst: str) -> Setup:
    return lambda env, stack: shutil.copytree(env.format(src), env.format(dst))


def _drop_checkpoint_sha(config: dict) -> None:
    del config["final"]["checkpoint_sha256"]


def _zero_fraction_0(config: dict) -> None:
    assert config["model_spec"]["tokenizer_args"]["zero_fraction"] == 0.8
    config["model_spec"]["tokenizer_args"]["zero_fraction"] = 0.0


def _seed_7(config: dict) -> None:
    config["seed"] = 7


def _gpu_present() -> str | None:
    return "a CUDA device is present here" if torch.cuda.is_available() else None


TRAINED = "{results}/train/synthetic"
RECORDS = "{run}/records.csv.gz"
NOTADIR = _write("{root}/notadir.txt", "a file, not a folder\n")
SPEC = 'name = "{name}"\ndescription = "d"\ntokenizer = "{tok}"\n{body}\n[tokenizer_args]\npatch_size = 4\n'
TINY_BODY = 'body = "tiny"\n'


def _spec(file: str, name: str, tok: str = "patch", body: str = TINY_BODY) -> Setup:
    return _write(f"{{root}}/specs/{file}", SPEC.format(name=name, tok=tok, body=body))


WAVELET_SPEC = (
    'name = "{name}"\ndescription = "d"\ntokenizer = "wavelet"\nbody = "tiny"\n\n[tokenizer_args]\n'
    'wavelet = "db1"\nlevels = {levels}\nzero_fraction = {zero_fraction}\n'
)


def _patch_args(file: str, args: str) -> Setup:
    """A patch spec with other tokenizer arguments (checked when the model is built)."""
    text = SPEC.format(name=file.removesuffix(".toml"), tok="patch", body=TINY_BODY)
    return _write(f"{{root}}/specs/{file}", text.replace("patch_size = 4", args))


def _wavelet_spec(file: str, levels: int = 2, zero_fraction: float = 0.8) -> Setup:
    text = WAVELET_SPEC.format(name=file.removesuffix(".toml"), levels=levels, zero_fraction=zero_fraction)
    return _write(f"{{root}}/specs/{file}", text)


def _body(**sizes: int) -> str:
    return "body = {" + ", ".join(f"{k} = {v}" for k, v in sizes.items()) + ", mlp_ratio = 2.0}\n"


#: Someone else's files where a spec named ../../../../x would put its run (results/train/synthetic/../../../..).
DECOY = "{root}/deep/x/seed-0"
ESCAPE = _both(
    _spec("escape.toml", "../../../../x"),
    _write(f"{DECOY}/model.safetensors", "not ours\n"),
    _write(f"{DECOY}/config.json", '{"mine": true}\n'),
    _write(f"{DECOY}/thesis.tex", "years of work\n"),
)
SUITE = 'name = "{name}"\n\n[eps.default]\n{eps}\n\n[[attack]]\nname = "clean"\nfamily = "clean"\n\n{entry}'
FGSM_ONE = '[[attack]]\nname = "fgsm_one"\nfamily = "fgsm"\n'
PGD_L2 = '[[attack]]\nname = "pgd_two"\nfamily = "pgd"\nthreat = "L2"\nsteps = 2\nrel_step_size = 0.5\n'


def _suite(file: str, eps: str, entry: str, name: str | None = None) -> Setup:
    text = SUITE.format(name=name or file.removesuffix(".toml"), eps=eps, entry=entry)
    return _write(f"{{root}}/suites/{file}", text)


# A user's model file for the external-model cases (``--model FILE.py:FACTORY``), and weights for it.
EXT = "{root}/ext/user_models.py"
EXT_CODE = """
import torch
from torch import nn

def linear(num_classes=10, img_size=32):
    return nn.Sequential(nn.AvgPool2d(4), nn.Flatten(), nn.Linear((img_size // 4) ** 2, num_classes))

def five_classes():
    return linear(num_classes=5)

def no_arguments():
    return linear()

def not_a_model():
    return 42

def broken():
    raise RuntimeError("no model\\ntoday")

class NaNs(nn.Module):
    def forward(self, x):
        return torch.full((len(x), 10), float("nan"))

def nans():
    return NaNs()

NOT_CALLABLE = 3
"""
EXT_FILE = _write(EXT, EXT_CODE)
WEIGHTS = "{root}/ext/linear.safetensors"


def _tensors(template: str, shapes: dict[str, tuple[int, ...]]) -> Setup:
    """A safetensors file of zero tensors of these names and shapes."""

    def setup(env: Env, stack: contextlib.ExitStack) -> None:
        path = Path(env.format(template))
        path.parent.mkdir(parents=True, exist_ok=True)
        save_file({k: torch.zeros(shape) for k, shape in shapes.items()}, str(path))

    return setup


LINEAR_WEIGHTS = _tensors(WEIGHTS, {"2.weight": (10, 64), "2.bias": (10,)})


def _ext(attr: str, **flags: str | None) -> Flags:
    """Flags attacking ``EXT``'s ``attr`` with the weights of the linear model (after ``--model``)."""
    return {"--model": f"{EXT}:{attr}", "--weights": WEIGHTS, **flags}


class _Mkdir:
    """Unpickling this runs ``os.mkdir(path)``: a weights file that must never be unpickled."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Callable[..., None], tuple[str]]:
        return (os.mkdir, (self.path,))


def _evil_pickle(template: str, victim: str) -> Setup:
    def setup(env: Env, stack: contextlib.ExitStack) -> None:
        path = Path(env.format(template))
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"2.weight": _Mkdir(env.format(victim))}, path)

    return setup


def _timm_weights(template: str, arch: str, **kwargs: int) -> Setup:
    def setup(env: Env, stack: contextlib.ExitStack) -> None:
        path = Path(env.format(template))
        path.parent.mkdir(parents=True, exist_ok=True)
        net = timm.create_model(arch, pretrained=False, **kwargs)
        save_file({k: v.contiguous() for k, v in net.state_dict().items()}, str(path))

    return setup


# ---------------------------------------------------------------------------------------------- cases

CASES = [
    # ---- train: counts and numbers (before any work)
    Case("t-epochs-0", "train", ("--epochs",), {"--epochs": "0"}, subprocess=True),
    Case("t-batch-size-negative", "train", ("--batch-size", "-1"), {"--batch-size": "-1"}),
    Case("t-train-subset-0", "train", ("--train-subset",), {"--train-subset": "0"}),
    Case("t-test-subset-negative", "train", ("--n-examples", "-999"), {"--n-examples": "-999"}),
    Case("t-test-subset-0", "train", ("--n-examples",), {"--n-examples": "0"}),
    Case("t-seed-negative", "train", ("--train-seed", "-1"), {"--train-seed": "-1"}),
    Case("t-lr-0", "train", ("--lr",), {"--lr": "0"}),
    Case("t-lr-nan", "train", ("--lr", "nan"), {"--lr": "nan"}),
    Case("t-weight-decay-negative", "train", ("--weight-decay", "-0.5"), {"--weight-decay": "-0.5"}),
    Case("t-val-fraction-1.5", "train", ("--val-fraction", "1.5"), {"--val-fraction": "1.5"}),
    # ---- train: names, specs, data, folders, devices
    Case("t-unknown-model", "train", ("nosuchmodel",), {"--model": "nosuchmodel"}),
    Case("t-unknown-dataset", "train", ("nosuchdata",), {"--dataset": "nosuchdata"}),
    Case("t-imagefolder-missing", "train", ("nowhere",), {"--dataset": "imagefolder:{root}/nowhere"}),
    Case(
        "t-spec-name-escapes",  # with --overwrite: must neither write nor delete the decoy files
        "train",
        ("../../../../x",),
        {"--model": "{root}/specs/escape.toml", "--overwrite": None},
        setup=ESCAPE,
        subprocess=True,
    ),
    Case(
        "t-spec-embed-dim-0",
        "train",
        ("embed_dim", "zero-width.toml"),
        {"--model": "{root}/specs/zero-width.toml"},
        setup=_spec("zero-width.toml", "zero-width", body=_body(embed_dim=0, depth=1, num_heads=1)),
    ),
    Case(
        "t-spec-heads-do-not-divide-width",
        "train",
        ("num_heads", "odd-heads.toml"),
        {"--model": "{root}/specs/odd-heads.toml"},
        setup=_spec("odd-heads.toml", "odd-heads", body=_body(embed_dim=64, depth=1, num_heads=5)),
    ),
    Case(
        "t-spec-unknown-tokenizer",
        "train",
        ("nosuch-tokenizer", "odd.toml"),
        {"--model": "{root}/specs/odd.toml"},
        setup=_spec("odd.toml", "odd", tok="nosuch-tokenizer"),
    ),
    # a spec is checked whole (tokenizer arguments included) before its run folder exists; the message
    # names the file and the field (models/zoo.py's contract)
    Case(
        "t-spec-patch-size-0",
        "train",
        ("patch_size", "p0.toml"),
        {"--model": "{root}/specs/p0.toml"},
        setup=_patch_args("p0.toml", "patch_size = 0"),
    ),
    Case(
        "t-spec-patch-size-does-not-divide-image",
        "train",
        ("patch_size", "p5.toml"),
        {"--model": "{root}/specs/p5.toml"},
        setup=_patch_args("p5.toml", "patch_size = 5"),
    ),
    Case(
        "t-spec-unknown-tokenizer-argument",
        "train",
        ("patchsize", "pa.toml"),
        {"--model": "{root}/specs/pa.toml"},
        setup=_patch_args("pa.toml", "patchsize = 4"),
    ),
    Case(
        "t-spec-zero-fraction-1.5",
        "train",
        ("zero_fraction", "w1.toml"),
        {"--model": "{root}/specs/w1.toml"},
        setup=_wavelet_spec("w1.toml", zero_fraction=1.5),
    ),
    Case(
        "t-spec-wavelet-levels-too-deep",
        "train",
        ("levels", "w10.toml"),
        {"--model": "{root}/specs/w10.toml"},
        setup=_wavelet_spec("w10.toml", levels=10),
    ),
    Case(
        "t-spec-wavelet-misspelt-argument",  # the tokenizer class takes **kwargs: a typo must not vanish
        "train",
        ("zero_fractoin", "wt.toml"),
        {"--model": "{root}/specs/wt.toml"},
        setup=_write(
            "{root}/specs/wt.toml",
            WAVELET_SPEC.format(name="wt", levels=2, zero_fraction=0.8).replace(
                "zero_fraction", "zero_fractoin"
            ),
        ),
    ),
    Case(
        "t-spec-not-toml",
        "train",
        ("broken.toml",),
        {"--model": "{root}/specs/broken.toml"},
        setup=_write("{root}/specs/broken.toml", 'name = "broken\ntokenizer = patch\n'),
    ),
    Case(
        "t-out-is-a-file",
        "train",
        ("--results-dir", "notadir.txt"),
        {"--results-dir": "{root}/notadir.txt"},
        setup=NOTADIR,
    ),
    Case(
        "t-out-below-a-file",
        "train",
        ("notadir.txt",),
        {"--results-dir": "{root}/notadir.txt/results"},
        setup=NOTADIR,
    ),
    Case(
        "t-data-dir-is-a-file",  # an image folder is decoded into a cache under --data-dir
        "train",
        ("notadir.txt",),
        {"--dataset": "imagefolder:{gratings}", "--data-dir": "{root}/notadir.txt"},
        setup=NOTADIR,
    ),
    Case("t-device-cuda-without-gpu", "train", ("cuda",), {"--device": "cuda"}, skip=_gpu_present),
    Case("t-bf16-on-cpu", "train", ("--bf16",), {"--bf16": None}),
    Case(
        "t-fresh-then-cuda-without-gpu",  # the run --overwrite would discard must survive the refusal
        "train",
        ("cuda",),
        {"--device": "cuda", "--overwrite": None},
        skip=_gpu_present,
    ),
    Case(
        "t-fresh-on-a-locked-run",
        "train",
        ("patch/seed-0",),
        {"--overwrite": None},
        setup=_lock(f"{TRAINED}/patch/seed-0"),
    ),
    # ---- attack: counts
    Case("a-n-examples-0", "attack", ("--n-examples",), {"--n-examples": "0"}),
    Case("a-batch-size-0", "attack", ("--batch-size",), {"--batch-size": "0"}),
    Case(
        "a-n-diagnostics-negative",
        "attack",
        ("--n-diagnostics", "-1"),
        {"--n-diagnostics": "-1"},
        drop=("--no-diagnostics",),
    ),
    Case(
        "a-n-diagnostics-0",
        "attack",
        ("--n-diagnostics",),
        {"--n-diagnostics": "0"},
        drop=("--no-diagnostics",),
    ),
    Case(
        "a-diagnostics-steps-0",
        "attack",
        ("--diagnostics-steps",),
        {"--diagnostics-steps": "0"},
        drop=("--no-diagnostics",),
    ),
    Case("a-train-seed-negative", "attack", ("--train-seed", "-1"), {"--train-seed": "-1"}),
    Case("a-threads-negative", "attack", ("--threads", "-2"), {"--threads": "-2"}),
    Case("a-shard-3-of-2", "attack", ("3/2",), {"--shard": "3/2"}),
    Case("a-shard-not-a-fraction", "attack", ("one/two",), {"--shard": "one/two"}),
    # ---- attack: names that become folders, unknown names
    Case("a-run-name-dotdot", "attack", ("../../x",), {"--run-name": "../../x"}, subprocess=True),
    Case("a-run-name-slash", "attack", ("a/b",), {"--run-name": "a/b"}),
    Case(
        "a-suite-name-escapes",  # the default run name is made of the suite's name
        "attack",
        ("../../evil",),
        {"--suite": "{root}/suites/evil.toml", "--attacks": "fgsm_one"},
        setup=_suite("evil.toml", "Linf = [0.03]", FGSM_ONE + 'threat = "Linf"\n', name="../../evil"),
    ),
    Case(
        "a-model-name-escapes",  # a trained run is there, and the default run name is made of model names
        "attack",
        ("../../../train/synthetic/patch",),
        {"--model": "../../../train/synthetic/patch"},
        setup=_copy(f"{TRAINED}/patch", "{root}/deep/er/train/synthetic/patch"),
    ),
    Case(
        "a-surrogate-name-escapes",
        "attack",
        ("../../../train/synthetic/patch",),
        {"--surrogate": "../../../train/synthetic/patch"},
        setup=_copy(f"{TRAINED}/patch", "{root}/deep/er/train/synthetic/patch"),
    ),
    Case("a-unknown-model", "attack", ("nosuchmodel",), {"--model": "nosuchmodel"}),
    Case("a-model-not-trained", "attack", ("wavelet-dense",), {"--model": "wavelet-dense"}),
    Case("a-unknown-surrogate", "attack", ("nosuchmodel",), {"--surrogate": "nosuchmodel"}),
    Case("a-unknown-dataset", "attack", ("nosuchdata",), {"--dataset": "nosuchdata"}),
    Case("a-results-dir-missing", "attack", ("nowhere",), {"--results-dir": "{root}/nowhere"}),
    Case("a-unknown-attack", "attack", ("nosuch_attack",), {"--attacks": "nosuch_attack"}),
    Case("a-grad-modes-bogus", "attack", ("bogus",), {"--grad-modes": "bogus"}),
    Case(  # an empty selection must not silently mean "all modes" (as --test-subset 0 meant "all images")
        "a-grad-modes-empty",
        "attack",
        ("--grad-modes",),
        {"--grad-modes": ",", "--model": "wavelet", "--run-name": "no-modes"},
    ),
    Case(  # nor "clean only"
        "a-attacks-empty",
        "attack",
        ("--attacks",),
        {"--attacks": ",", "--run-name": "no-attacks"},
    ),
    Case("a-unknown-suite", "attack", ("no-such-suite",), {"--suite": "no-such-suite"}),
    # ---- attack: suites
    Case(
        "a-suite-entry-without-threat",  # names the field as a field, not "unknown threat model None"
        "attack",
        ("fgsm_one", "'threat'"),
        {"--suite": "{root}/suites/suite-a.toml"},
        drop=("--attacks",),
        setup=_suite("suite-a.toml", "Linf = [0.03]", FGSM_ONE),
    ),
    Case(
        "a-suite-l2-beyond-the-image-diameter",
        "attack",
        ("L2", "100"),
        {"--suite": "{root}/suites/suite-b.toml"},
        drop=("--attacks",),
        setup=_suite("suite-b.toml", "L2 = [100.0]", PGD_L2),
    ),
    Case(
        "a-suite-linf-eps-8",
        "attack",
        ("Linf", "8"),
        {"--suite": "{root}/suites/suite-c.toml"},
        drop=("--attacks",),
        setup=_suite("suite-c.toml", "Linf = [8]", FGSM_ONE + 'threat = "Linf"\n'),
    ),
    Case(
        "a-suite-not-toml",
        "attack",
        ("suite-d.toml",),
        {"--suite": "{root}/suites/suite-d.toml"},
        setup=_write("{root}/suites/suite-d.toml", "name = [unclosed\n"),
    ),
    # ---- attack: folders and devices
    Case(
        "a-device-cuda-without-gpu",  # a new run folder: nothing may be left that blocks the corrected rerun
        "attack",
        ("cuda",),
        {"--device": "cuda", "--run-name": "on-cuda"},
        skip=_gpu_present,
    ),
    Case(
        "a-overwrite-with-a-bad-suite",  # the run it would replace must survive the refusal
        "attack",
        ("L2", "100"),
        {"--suite": "{root}/suites/suite-b.toml", "--run-name": "{run_name}", "--overwrite": None},
        drop=("--attacks",),
        setup=_suite("suite-b.toml", "L2 = [100.0]", PGD_L2),
    ),
    Case(
        "a-out-is-a-file", "attack", ("--out", "notadir.txt"), {"--out": "{root}/notadir.txt"}, setup=NOTADIR
    ),
    Case(
        "a-chunks-path-is-a-file",  # a foreign file where the run keeps its chunks
        "attack",
        ("chunks",),
        {"--run-name": "fresh"},
        setup=_write("{results}/attack/synthetic/fresh/chunks", "not a folder\n"),
    ),
    Case("a-run-folder-locked", "attack", ("{run_name}",), setup=_lock("{run}")),
    Case(
        "a-other-configuration-in-the-folder",
        "attack",
        ("{run_name}",),
        {"--seed": "1", "--run-name": "{run_name}"},
    ),
    # ---- attack: integrity and provenance of the trained runs
    Case(
        "a-config-without-checkpoint-sha256",
        "attack",
        ("checkpoint_sha256", "config.json"),
        setup=_edit_json(f"{TRAINED}/patch/seed-0/config.json", _drop_checkpoint_sha),
    ),
    Case(
        "a-config-spec-edited",
        "attack",
        ("wavelet", "config.json"),
        {"--model": "wavelet"},
        setup=_edit_json(f"{TRAINED}/wavelet/seed-0/config.json", _zero_fraction_0),
    ),
    Case(
        "a-checkpoint-of-another-dataset",
        "attack",
        ("synthetic", "gratings"),
        {"--dataset": "imagefolder:{gratings}"},
        setup=_copy(f"{TRAINED}/patch", "{results}/train/imagefolder-gratings/patch"),
    ),
    Case(
        "a-checkpoint-truncated",
        "attack",
        ("model.safetensors",),
        setup=_rewrite_bytes(f"{TRAINED}/patch/seed-0/model.safetensors", _half),
    ),
    # ---- attack: models from outside the zoo (--model MODULE:FACTORY / FILE.py:FACTORY / timm:ARCH)
    Case(
        "a-ext-module-not-importable", "attack", ("no_such_module_xyz",), {"--model": "no_such_module_xyz:f"}
    ),
    Case("a-ext-file-missing", "attack", ("nowhere.py",), {"--model": "{root}/ext/nowhere.py:linear"}),
    Case("a-ext-not-a-reference", "attack", ("linear-net",), {"--model": f"{EXT}:linear-net"}),
    Case("a-ext-attribute-missing", "attack", ("nosuch",), _ext("nosuch"), setup=EXT_FILE),
    Case("a-ext-not-callable", "attack", ("NOT_CALLABLE", "callable"), _ext("NOT_CALLABLE"), setup=EXT_FILE),
    Case(
        "a-ext-returns-no-module", "attack", ("not_a_model", "nn.Module"), _ext("not_a_model"), setup=EXT_FILE
    ),
    Case("a-ext-factory-raises", "attack", ("broken", "RuntimeError"), _ext("broken"), setup=EXT_FILE),
    Case(
        "a-ext-import-raises",  # a multi-line error of the user's module is still one line
        "attack",
        ("user_models.py", "ImportError"),
        _ext("linear"),
        setup=_write(EXT, 'raise ImportError("first line\\nsecond line")\n'),
    ),
    Case(
        "a-ext-syntax-error",
        "attack",
        ("user_models.py", "SyntaxError"),
        _ext("linear"),
        setup=_write(EXT, "def ("),
    ),
    Case(
        "a-ext-wrong-output-shape",
        "attack",
        ("(8, 5)", "(8, 10)"),
        _ext("five_classes"),
        setup=_both(EXT_FILE, _tensors(WEIGHTS, {"2.weight": (5, 64), "2.bias": (5,)})),
    ),
    Case("a-ext-non-finite-logits", "attack", ("non-finite",), {"--model": f"{EXT}:nans"}, setup=EXT_FILE),
    Case(
        "a-ext-num-classes-not-the-datasets",
        "attack",
        ("--num-classes", "10"),
        _ext("linear", **{"--num-classes": "5"}),
        setup=_both(EXT_FILE, LINEAR_WEIGHTS),
    ),
    Case(
        "a-ext-factory-takes-no-img-size",
        "attack",
        ("--img-size", "no_arguments"),
        _ext("no_arguments", **{"--img-size": "32"}),
        setup=_both(EXT_FILE, LINEAR_WEIGHTS),
    ),
    Case(
        "a-ext-image-size-the-model-cannot-take",
        "attack",
        ("cannot take", "1x32x32"),
        _ext("linear", **{"--img-size": "16"}),
        setup=_both(EXT_FILE, _tensors(WEIGHTS, {"2.weight": (10, 16), "2.bias": (10,)})),
    ),
    Case("a-ext-without-weights", "attack", ("--weights",), {"--model": f"{EXT}:linear"}, setup=EXT_FILE),
    Case(
        "a-ext-weights-missing",
        "attack",
        ("nowhere.safetensors",),
        _ext("linear", **{"--weights": "{root}/ext/nowhere.safetensors"}),
        setup=EXT_FILE,
    ),
    Case(
        "a-ext-weights-not-safetensors",
        "attack",
        ("junk.safetensors", "safetensors"),
        _ext("linear", **{"--weights": "{root}/ext/junk.safetensors"}),
        setup=_both(EXT_FILE, _write("{root}/ext/junk.safetensors", "not tensors\n")),
    ),
    Case(
        "a-ext-weights-pickled",  # refused unread: unpickling it would create {root}/pwned
        "attack",
        ("evil.pt", "safetensors"),
        _ext("linear", **{"--weights": "{root}/ext/evil.pt"}),
        setup=_both(EXT_FILE, _evil_pickle("{root}/ext/evil.pt", "{root}/pwned")),
        subprocess=True,
    ),
    Case(
        "a-ext-weights-of-another-model",
        "attack",
        ("fc.weight", "2.weight"),
        _ext("linear"),
        setup=_both(EXT_FILE, _tensors(WEIGHTS, {"fc.weight": (10, 64), "2.bias": (10,)})),
    ),
    Case(
        "a-ext-weights-wrong-shape",
        "attack",
        ("2.weight", "(10, 63)"),
        _ext("linear"),
        setup=_both(EXT_FILE, _tensors(WEIGHTS, {"2.weight": (10, 63), "2.bias": (10,)})),
    ),
    Case("a-weights-after-a-zoo-model", "attack", ("--weights",), {"--weights": WEIGHTS}),
    Case(
        "a-ext-normalize-malformed",
        "attack",
        ("--normalize", "1,2,3"),
        _ext("linear", **{"--normalize": "1,2,3"}),
        setup=_both(EXT_FILE, LINEAR_WEIGHTS),
    ),
    Case("a-normalize-without-external-model", "attack", ("--normalize",), {"--normalize": "none"}),
    Case(
        "a-surrogate-weights-for-a-zoo-surrogate",
        "attack",
        ("--surrogate-weights",),
        {"--surrogate": "patch", "--surrogate-weights": WEIGHTS},
    ),
    Case(
        "a-timm-unknown-architecture",
        "attack",
        ("no_such_arch", "list_models"),
        {"--model": "timm:no_such_arch"},
    ),
    Case(
        "a-timm-takes-no-img-size",
        "attack",
        ("--img-size",),
        {"--model": "timm:test_resnet", "--img-size": "32"},
    ),
    Case(
        "a-timm-normalisation-of-other-channels",  # an RGB mean/std on gray images
        "attack",
        ("--normalize", "3 channels"),
        {"--model": "timm:test_efficientnet", "--weights": "{root}/ext/effnet.safetensors"},
        setup=_timm_weights("{root}/ext/effnet.safetensors", "test_efficientnet", num_classes=10, in_chans=1),
    ),
    # ---- report
    Case(
        "r-missing-folder", "report", ("no-such-run",), positional=("{results}/attack/synthetic/no-such-run",)
    ),
    Case(
        "r-second-run-missing",
        "report",
        ("no-such-run",),
        positional=("{run}", "{results}/attack/synthetic/no-such-run"),
    ),
    Case("r-run-is-a-file", "report", ("notadir.txt",), positional=("{root}/notadir.txt",), setup=NOTADIR),
    Case("r-records-missing", "report", ("records.csv.gz",), setup=_delete(RECORDS)),
    Case("r-records-truncated", "report", ("records.csv.gz",), setup=_rewrite_bytes(RECORDS, _half)),
    Case(
        "r-records-not-gzip",
        "report",
        ("records.csv.gz",),
        setup=_rewrite_bytes(RECORDS, gzip.decompress),
        subprocess=True,
    ),
    Case(
        "r-records-column-dropped",
        "report",
        (("loss_final", "records.csv.gz"),),
        setup=_rewrite_records(RECORDS, lambda f: f.drop(columns=["loss_final"])),
    ),
    Case(
        "r-records-rows-deleted",
        "report",
        ("records.csv.gz",),
        setup=_rewrite_records(RECORDS, lambda f: f.iloc[: len(f) // 2]),
    ),
    Case("r-meta-missing", "report", ("meta.json",), setup=_delete("{run}/meta.json")),
    Case(
        "r-meta-invalid-json",
        "report",
        ("meta.json",),
        setup=_write("{run}/meta.json", '{"models": {"patch": '),
    ),
    Case(
        "r-config-differs-from-meta",  # what a killed --overwrite run leaves: new config.json, old records
        "report",
        ("config.json",),
        setup=_edit_json("{run}/config.json", _seed_7),
    ),
    Case("r-config-not-json", "report", ("config.json",), setup=_write("{run}/config.json", "{")),
    Case(
        "r-out-is-a-file-not-md",
        "report",
        ("notes.txt",),
        {"--out": "{root}/notes.txt"},
        setup=_write("{root}/notes.txt", "my notes\n"),
    ),
    Case(
        "r-out-below-a-file",
        "report",
        ("notadir.txt",),
        {"--out": "{root}/notadir.txt/report.md"},
        setup=NOTADIR,
    ),
    Case("r-baseline-unknown", "report", ("nosuchmodel",), {"--baseline": "nosuchmodel"}),
    Case("r-run-folder-locked", "report", ("{run_name}",), setup=_lock("{run}")),
    # ---- report merge
    Case("m-no-shards", "merge", ("{run_name}",), positional=("merge", "{run}")),
    Case(
        "m-missing-folder",
        "merge",
        ("no-such-run",),
        positional=("merge", "{results}/attack/synthetic/no-such-run"),
    ),
    Case("m-run-folder-locked", "merge", ("{sharded_name}",), setup=_lock("{sharded}")),
    Case(
        "m-shard-records-truncated",
        "merge",
        ("1-of-2", "records.csv.gz"),
        setup=_rewrite_bytes("{sharded}/shards/1-of-2/records.csv.gz", _half),
    ),
    Case(
        "m-shard-of-another-configuration",  # its config.json is not the one its records were made under
        "merge",
        ("1-of-2", "config.json"),
        setup=_edit_json("{sharded}/shards/1-of-2/config.json", _seed_7),
    ),
    Case(
        "m-shard-meta-invalid-json",
        "merge",
        ("1-of-2", "meta.json"),
        setup=_write("{sharded}/shards/1-of-2/meta.json", "{"),
    ),
]


def test_the_harness_catches_what_it_must(tmp_path: Path) -> None:
    """The judge itself: a success, a traceback, two lines or an unnamed culprit fail; so does any change."""
    good = Outcome("error: --epochs '0' is not a count", "error: --epochs '0' is not a count", "")
    assert failures(good, ["--epochs"]) == []
    assert failures(good, [("--lr", "--epochs")]) == []
    assert failures(good, ["--lr"]) == ["the message does not name '--lr'"]
    assert "the command succeeded (exit 0)" in failures(Outcome(0, "", ""), [])
    assert "the message has 2 lines, not one" in failures(Outcome(1, "usage: x\nerror: y", ""), [])
    crash = Outcome(KeyError("x"), "", "", escaped=KeyError("x"))
    assert "a traceback reached the user" in failures(crash, [])
    assert "a traceback reached the user" in failures(Outcome(1, "boom", "Traceback (most recent..."), [])
    (tmp_path / "run").mkdir()
    for name in ("config.json", ".lock", "mode.txt", "gone.txt"):
        (tmp_path / "run" / name).write_text("a")
    with unchanged(tmp_path) as changes:
        (tmp_path / "run" / "config.json").write_text("b")  # same size, other bytes
        (tmp_path / "run" / ".lock").write_text("pid 2")  # a lock's holder record: tolerated
        (tmp_path / "run" / "mode.txt").chmod(0o600)
        (tmp_path / "run" / "gone.txt").unlink()
        (tmp_path / "new").mkdir()
    assert [c.split(": ")[1].split(" ")[:2] for c in changes] == [
        ["created", "new"],
        ["deleted", "run/gone.txt"],
        ["changed", "run/config.json"],
        ["changed", "run/mode.txt"],
    ]


def test_the_matrix_is_wide_enough() -> None:
    assert len({c.id for c in CASES}) == len(CASES) >= 36
    assert {c.cli for c in CASES} == set(BASES)
    assert sum(c.subprocess for c in CASES) >= 4


#: What runs one case's command line: ``(case, argv) -> Outcome``.
Runner = Callable[[Case, list[str]], Outcome]


def check_case(
    case: Case, shared: Shared, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run: Runner
) -> None:
    """Run ``case`` by ``run`` on its own copy of the shared tree: a clean one-line refusal naming the case's
    tokens, and nothing created, changed or deleted in the copy or the shared tree."""
    if case.skip is not None and (reason := case.skip()):
        pytest.skip(reason)
    env = case_env(shared, tmp_path)
    monkeypatch.chdir(tmp_path)  # a relative path written by mistake lands in the snapshot
    monkeypatch.setenv("RBW_DATA_DIR", str(shared.data))
    flags, positional = BASES[case.cli]
    argv = case.argv(flags, positional, env)
    with contextlib.ExitStack() as stack:
        if case.setup is not None:
            case.setup(env, stack)
        with unchanged(tmp_path, shared.root) as changes:
            outcome = run(case, argv)
    problems = failures(outcome, case.formatted_tokens(env)) + changes
    assert not problems, f"{case.cli} {' '.join(argv)}\n" + "\n".join(problems) + "\n" + outcome.describe()


IN_PROCESS = [c for c in CASES if not c.subprocess]


@pytest.mark.parametrize("case", IN_PROCESS, ids=[c.id for c in IN_PROCESS])
def test_bad_input_is_refused_in_one_line_and_writes_nothing(
    case: Case, shared: Shared, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    check_case(case, shared, tmp_path, monkeypatch, lambda case, argv: run_in_process(case.cli, argv, capsys))


@pytest.mark.parametrize("cli", sorted(BASES))
def test_the_cases_start_from_invocations_that_work(
    cli: str, shared: Shared, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without its one bad input, a case's command line succeeds: each case fails for its input alone."""
    env = case_env(shared, tmp_path)
    monkeypatch.chdir(tmp_path)
    flags, positional = BASES[cli]
    outcome = run_in_process(cli, Case("control", cli, ()).argv(flags, positional, env), capsys)
    assert outcome.code in (0, None) and outcome.escaped is None, outcome.describe()
