"""Suite entries on models they were not written for (issue 21, item 1): each is resolved or skipped before any
attack runs, said once in the log and in meta.json, and the entries that do apply keep their records.

Oracles: a level chosen for a model gives the records of the same level written in the suite; a suite with
skipped entries gives the records of the suite without them.
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch
from torch import nn

from robustbench_wave.attacks import LevelChoice, choose_level, fit_entry, level_from_image, parse_suite
from robustbench_wave.data import dataset_info
from robustbench_wave.evaluation import EvalSettings, evaluate
from robustbench_wave.models.vit import build_model
from robustbench_wave.models.zoo import load_spec
from robustbench_wave.reporting.markdown import not_as_written
from robustbench_wave.reporting.runs import RunFolder
from tests.support.attack_models import labelled, patch_model, small_cnn
from tests.support.byom_models import TINY_BODY


def _suite(*entries: dict) -> object:
    return parse_suite(
        {
            "name": "fit",
            "settings": {"rng_block": 8},
            "eps": {"default": {"Linf": [0.05]}},
            "attack": [{"name": "clean", "family": "clean"}, *entries],
        }
    )


FGSM = {"name": "fgsm", "family": "fgsm", "threat": "Linf", "backend": "builtin"}
PGD = {"name": "pgd", "family": "pgd", "threat": "Linf", "steps": 3, "rel_step_size": 0.5}
PGD_DLR = {**PGD, "name": "pgd_dlr", "loss": "dlr"}
LOWFREQ = {"name": "lowfreq", "family": "lowfreq-pgd", "threat": "Linf", "steps": 3, "level": "auto"}


class Patches(nn.Module):
    """A stand-in for a tokenizer exposing timm's ``patch_size`` (16-pixel patches)."""

    patch_size = (16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


@pytest.mark.parametrize(
    ("size", "level"),
    [((32, 32), 2), ((224, 224), 4), ((28, 28), 1), ((64, 32), 2), ((27, 27), 0), ((8, 8), 0)],
)
def test_the_image_size_rule_keeps_an_8x8_band(size: tuple[int, int], level: int) -> None:
    assert level_from_image(*size) == level


def test_a_model_keeps_its_own_band_and_one_without_gets_the_image_sizes() -> None:
    wavelet = build_model(load_spec("wavelet") | {"body": dict(TINY_BODY)}, dataset_info("synthetic"))
    assert choose_level(wavelet, "auto", (32, 32)) == LevelChoice(2)  # the front-end's levels, as written
    assert choose_level(patch_model(), "auto", (8, 8)).level == 1  # 2-pixel patches, as written
    assert choose_level(patch_model(), "auto", (8, 8)).note is None
    cnn = choose_level(small_cnn(), "auto", (32, 32))
    assert cnn.level == 2 and "from the image size (the model has no wavelet front-end" in cnn.note
    untiled = choose_level(Patches(), "auto", (28, 28))
    assert untiled.level == 1 and "16x16 tokens do not tile 28x28 images" in untiled.note
    assert choose_level(small_cnn(), "auto", (9, 9)).level is None  # no band: skipped
    assert choose_level(small_cnn(), 3, (28, 28)).level is None  # a written level is never changed
    assert choose_level(small_cnn(), 2, (28, 28)) == LevelChoice(2)


def test_dlr_entries_need_three_classes() -> None:
    suite = _suite(PGD_DLR, {"name": "apgd_dlr", "family": "apgd", "threat": "Linf", "loss": "dlr"})
    for entry in suite.attacks[1:]:
        assert fit_entry(entry, small_cnn(), (1, 8, 8), 2).entry is None
        assert "at least 3 classes" in fit_entry(entry, small_cnn(), (1, 8, 8), 2).note
        assert fit_entry(entry, small_cnn(), (1, 8, 8), 3).entry == entry
        assert fit_entry(entry, small_cnn(), (1, 8, 8), None).entry == entry  # unknown: as written


def _evaluate(model: nn.Module, x: torch.Tensor, suite: object, classes: int) -> object:
    info = SimpleNamespace(name="toy", num_classes=classes)
    settings = EvalSettings(model_name="toy", dataset=info, seed=3)
    return evaluate(model, x, labelled(model, x), suite, settings, progress=False, batch_size=8)


def _rows(records: pd.DataFrame, attacks: list[str]) -> pd.DataFrame:
    return records[records["attack"].isin(attacks)].reset_index(drop=True)


def test_skipped_entries_leave_the_others_records_and_are_said_once(caplog: pytest.LogCaptureFixture) -> None:
    """On a two-class model a DLR PGD cannot run, nor a written level whose blocks do not tile 16x16 images."""
    model = nn.Sequential(nn.Flatten(), nn.Linear(256, 2)).eval()
    torch.manual_seed(0)
    model[1].weight.data.normal_(0, 0.2)
    x = torch.rand(12, 1, 16, 16)
    untiled = {**LOWFREQ, "name": "lowfreq5", "level": 5}
    with caplog.at_level(logging.WARNING):
        full = _evaluate(model, x, _suite(FGSM, PGD_DLR, PGD, untiled), 2)
    plain = _evaluate(model, x, _suite(FGSM, PGD), 2)
    pd.testing.assert_frame_equal(full.records, plain.records)
    skipped = full.meta["models"]["toy"]["plan"]["not_applicable"]
    assert set(skipped) == {"pgd_dlr", "lowfreq5"} and "32x32 blocks do not tile 16x16" in skipped["lowfreq5"]
    said = [r.getMessage() for r in caplog.records if "on toy" in r.getMessage()]
    assert sorted(said) == sorted(f"skipping {name} on toy: {why}" for name, why in skipped.items())
    assert "plan" not in plain.meta["models"]["toy"]  # a suite that runs as written: meta as before
    lines = not_as_written([RunFolder(Path("run"), full.records, full.meta)])
    assert lines == [f"- `{name}` on `toy`: skipped ({why})" for name, why in skipped.items()]


def test_a_resolved_level_gives_the_records_of_the_written_one() -> None:
    """A CNN on 32x32 images: ``level = "auto"`` becomes 2 (said in meta), as if the suite said 2."""
    model = small_cnn(n_classes=3)
    model[4] = nn.Linear(4 * 16 * 16, 3)  # 32x32 inputs: 4 channels of 16x16 after the pooling
    x = torch.rand(8, 1, 32, 32)
    auto = _evaluate(model, x, _suite(LOWFREQ), 3)
    written = _evaluate(model, x, _suite({**LOWFREQ, "level": 2}), 3)
    pd.testing.assert_frame_equal(auto.records, written.records)
    note = auto.meta["models"]["toy"]["plan"]["resolved"]["lowfreq"]
    assert note.startswith("level = 'auto' -> 2 from the image size")
    assert auto.meta["attacks"]["lowfreq"]["params"]["level"] == "auto"  # the suite as written
