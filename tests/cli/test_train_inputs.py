"""``python -m robustbench_wave.train`` against careless and hostile input: every count and path is checked
before the first write, spec names cannot escape the results tree, body sizes are checked naming the file,
a run folder is locked while it is trained, and ``--overwrite`` deletes only training's files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from robustbench_wave import train
from robustbench_wave.core.runfolder import LOCK_FILE, RunLock
from robustbench_wave.models.zoo import load_spec
from robustbench_wave.training import checkpoint as ckpt
from robustbench_wave.training import engine, runner
from tests.support.training import SMALL, train_small


def _refusal(argv: list[str], capsys: pytest.CaptureFixture) -> str:
    """The one-line message a refused command ends with (parser errors go to stderr, the rest to SystemExit)."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        train.main(argv)
    assert exc.value.code not in (0, None)
    message = exc.value.code if isinstance(exc.value.code, str) else capsys.readouterr().err
    message = message.strip()
    assert "\n" not in message and "Traceback" not in message, message
    return message


def _files_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


# -- counts -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("flag", "value"),
    [("--train-subset", "0"), ("--train-subset", "-5"), ("--n-examples", "0"), ("--n-examples", "-999"),
     ("--epochs", "0"), ("--batch-size", "-1"), ("--train-seed", "-1"), ("--lr", "0"), ("--lr", "inf"),
     ("--weight-decay", "-0.1"), ("--val-fraction", "0"), ("--val-fraction", "1"), ("--val-fraction", "nan"),
     ("--train-subset", "ten")],
)  # fmt: skip
def test_nonsense_counts_are_refused_before_any_write(tmp_path, capsys, flag, value):
    out = tmp_path / "fresh" / "out"
    message = _refusal([*SMALL, "--model", "patch", "--results-dir", str(out), flag, value], capsys)
    assert flag in message and repr(value) in message and "(see --help)" in message
    assert not (tmp_path / "fresh").exists()


def test_all_means_the_whole_split_and_counts_parse():
    args = train.get_args_parser().parse_args(
        ["--train-subset", "all", "--n-examples", "ALL", "--train-seed", "0", "--train-seed", "3"]
    )
    assert args.train_subset is None and args.n_examples is None and args.train_seed == [0, 3]
    config = train.config_from_args(args)
    assert config.train_subset is None and config.test_subset is None


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"train_subset": 0}, "train_subset"), ({"test_subset": -999}, "test_subset"),
     ({"train_subset": True}, "train_subset"), ({"recipe": engine.Recipe(epochs=0)}, "epochs"),
     ({"recipe": engine.Recipe(batch_size=0)}, "batch_size"), ({"recipe": engine.Recipe(lr=-1.0)}, "lr"),
     ({"recipe": engine.Recipe(val_fraction=0.0)}, "val_fraction")],
)  # fmt: skip
def test_library_config_has_the_command_lines_rules(kwargs, field):
    with pytest.raises(ValueError, match=field):
        runner.TrainConfig(**kwargs)


def test_load_training_data_never_reads_zero_as_all():
    with pytest.raises(ValueError, match="train_subset = 0"):
        runner.load_training_data("synthetic", 0, val_fraction=0.1, train_subset=0)
    with pytest.raises(ValueError, match="test_subset = 0"):
        runner.load_training_data("synthetic", 0, val_fraction=0.1, train_subset=64, test_subset=0)
    data = runner.load_training_data("synthetic", 0, val_fraction=0.1, train_subset=64, test_subset=None)
    assert len(data.train_labels) + len(data.val_labels) == 64 and len(data.test_labels) == 1000


# -- specs and paths ----------------------------------------------------------------------------------------
def _spec_file(folder: Path, body: str, name: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "custom.toml"
    head = f'name = "{name}"\n' if name is not None else ""
    path.write_text(f'{head}tokenizer = "patch"\n{body}\n[tokenizer_args]\npatch_size = 4\n')
    return path


def test_spec_name_that_escapes_the_results_tree_is_refused(tmp_path, capsys):
    spec = _spec_file(tmp_path / "specs", 'body = "tiny"', name="../../../../x")
    with pytest.raises(ValueError, match=r"custom\.toml: name '\.\./\.\./\.\./\.\./x' cannot name a folder"):
        load_spec(spec)
    out = tmp_path / "a" / "b" / "out"
    message = _refusal([*SMALL, "--model", str(spec), "--results-dir", str(out), "--overwrite"], capsys)
    assert "custom.toml" in message and "name" in message
    assert _files_under(tmp_path) == ["specs", "specs/custom.toml"]  # nothing inside --out, nothing outside
    with pytest.raises(ValueError, match="cannot name a folder"):
        ckpt.load_trained("../x", "synthetic", tmp_path)


@pytest.mark.parametrize(
    ("body", "field"),
    [("embed_dim = 0", "embed_dim = 0"), ("depth = -1", "depth = -1"), ("num_heads = 0", "num_heads = 0"),
     ("embed_dim = 2.5", "embed_dim = 2.5"), ("mlp_ratio = 0.0", "mlp_ratio = 0.0"),
     ("embed_dim = 66\nnum_heads = 4", "embed_dim = 66 is not divisible by num_heads = 4"),
     ("embed_dim = 66\nnum_heads = 4\nattn_dim = 30", "attn_dim = 30 is not divisible by num_heads = 4")],
)  # fmt: skip
def test_body_sizes_are_checked_naming_the_file_and_field(tmp_path, body, field):
    sizes = dict(line.split(" = ") for line in body.splitlines())
    full = {"embed_dim": "64", "depth": "2", "num_heads": "4", "mlp_ratio": "2.0", **sizes}
    spec = _spec_file(tmp_path, "[body]\n" + "\n".join(f"{k} = {v}" for k, v in full.items()))
    with pytest.raises(ValueError, match=rf"custom\.toml: body: {field}") as exc:
        load_spec(spec)
    assert "\n" not in str(exc.value)


def test_a_body_with_its_own_attention_width_is_accepted(tmp_path):
    spec = _spec_file(tmp_path, "[body]\nembed_dim = 66\ndepth = 1\nnum_heads = 4\nattn_dim = 32")
    assert load_spec(spec)["body"]["attn_dim"] == 32


# -- validate everything before the first write --------------------------------------------------------
def _bad_inputs(tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    spec = _spec_file(tmp_path / "specs", "[body]\nembed_dim = 0\ndepth = 2\nnum_heads = 4")
    a_file = tmp_path / "a-file"
    a_file.write_text("keep me\n")
    cases = {
        "unknown model": (["--model", "nope"], "unknown model 'nope'"),
        "bad spec": (["--model", str(spec)], "embed_dim = 0"),
        "bad data set": (["--dataset", "mnist3"], "mnist3"),
        "bf16 on cpu": (["--device", "cpu", "--bf16"], "--bf16"),
        "unknown device": (["--device", "tpu"], "tpu"),
        "out is a file": (["--results-dir", str(a_file)], "a-file"),
        "out under a file": (["--results-dir", str(a_file / "out")], "a-file"),
        "split below one batch": (["--train-subset", "20"], "fewer images (18) than one batch (32)"),
        "empty validation split": (["--train-subset", "4", "--batch-size", "2", "--val-fraction", "0.1"],
                                   "validation split is empty"),
    }  # fmt: skip
    if not torch.cuda.is_available():
        cases["cuda without a GPU"] = (["--device", "cuda"], "--device cuda")
    return cases


@pytest.mark.parametrize(
    "case",
    ["unknown model", "bad spec", "bad data set", "bf16 on cpu", "unknown device", "out is a file",
     "out under a file", "split below one batch", "empty validation split", "cuda without a GPU"],
)  # fmt: skip
def test_bad_input_is_refused_before_anything_is_written(tmp_path, capsys, case):
    cases = _bad_inputs(tmp_path)
    if case not in cases:
        pytest.skip("this machine has a GPU")
    extra, expected = cases[case]
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    out = tmp_path / "fresh" / "out"
    message = _refusal([*SMALL, "--model", "patch", "--results-dir", str(out), *extra], capsys)
    assert expected in message
    assert not (tmp_path / "fresh").exists()
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before


# -- lock, --overwrite ------------------------------------------------------------------------------------------
def test_a_second_training_into_a_locked_folder_stops_naming_it(tmp_path):
    directory = ckpt.run_dir(tmp_path, "synthetic", "patch", 0)
    with RunLock(directory), pytest.raises(SystemExit, match="is in use by another run") as exc:
        train_small(tmp_path, "--model", "patch")
    assert str(directory) in str(exc.value.code)
    assert sorted(p.name for p in directory.iterdir()) == [LOCK_FILE]  # nothing written next to the holder
    assert train_small(tmp_path, "--model", "patch") == 0  # the lock ends with its holder


def test_fresh_deletes_only_what_training_wrote(tmp_path):
    train_small(tmp_path, "--model", "patch")
    directory = ckpt.run_dir(tmp_path, "synthetic", "patch", 0)
    (directory / "notes").mkdir()
    (directory / "notes" / "mine.txt").write_text("mine\n")
    (directory / "README.txt").write_text("mine too\n")
    (directory / f".{ckpt.METRICS}.abc123.tmp").write_text("left by a kill\n")
    stale = json.loads((directory / ckpt.CONFIG).read_text())
    stale["final"]["test_accuracy"] = -1.0
    (directory / ckpt.CONFIG).write_text(json.dumps(stale))
    assert train_small(tmp_path, "--model", "patch", "--overwrite") == 0
    assert (directory / "notes" / "mine.txt").read_text() == "mine\n"
    assert (directory / "README.txt").read_text() == "mine too\n"
    assert not (directory / f".{ckpt.METRICS}.abc123.tmp").exists()
    assert json.loads((directory / ckpt.CONFIG).read_text())["final"]["test_accuracy"] >= 0  # retrained


# -- --help -----------------------------------------------------------------------------------------------
def test_help_shows_defaults_only_for_options_with_values(capsys):
    with pytest.raises(SystemExit):
        train.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "(default: True)" not in text and "(default: False)" not in text and "(default: None)" not in text
    assert "(default: 4)" in text  # --epochs still shows its default
    assert "or 'all': the whole split" in text
