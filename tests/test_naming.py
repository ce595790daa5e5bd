"""A misspelt name is answered with the names it was probably meant to be, by every door that takes one."""

from __future__ import annotations

import pytest

from robustbench_wave.attacks import load_suite
from robustbench_wave.core.naming import close_matches, did_you_mean
from robustbench_wave.data import load_split
from robustbench_wave.models.zoo import load_spec
from robustbench_wave.training.checkpoint import load_trained


def test_close_matches_rank_the_nearest_first_and_ignore_case() -> None:
    assert close_matches("wavlet", ["patch", "wavelet", "wavelet-dense"])[0] == "wavelet"
    assert close_matches("PATCH", ["patch", "wavelet"]) == ["patch"]
    assert close_matches("resnet50", ["patch", "wavelet"]) == []


def test_did_you_mean_is_empty_without_a_match() -> None:
    assert did_you_mean("zzz", ["patch"]) == ""
    assert did_you_mean("smok", ["smoke", "default"]) == "; did you mean 'smoke'?"


def test_a_misspelt_zoo_model_is_not_sent_to_training(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"'wavlet' is no zoo model; did you mean 'wavelet'") as err:
        load_trained("wavlet", "synthetic", tmp_path)
    assert "python -m robustbench_wave.train" not in str(err.value)
    with pytest.raises(ValueError, match=r"unknown model 'wavlet'; did you mean 'wavelet'"):
        load_spec("wavlet")


def test_an_untrained_zoo_model_is_still_sent_to_training(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"python -m robustbench_wave\.train"):
        load_trained("wavelet", "synthetic", tmp_path)


def test_misspelt_suites_and_data_sets_get_suggestions() -> None:
    with pytest.raises(ValueError, match=r"no attack suite 'smok'; did you mean 'smoke'\?"):
        load_suite("smok")
    with pytest.raises(
        ValueError, match=r"unknown data set spec 'fashion-mnst'; did you mean 'fashion-mnist'\?"
    ):
        load_split("fashion-mnst", "test")


def test_every_enum_setting_is_parsed_by_one_helper_that_suggests() -> None:
    """The five enum settings (gradient mode, EOT, cross-check, compile mode, projection) share one parser."""
    from robustbench_wave.evaluation.eot import EotMode
    from robustbench_wave.evaluation.plan import CrossCheck
    from robustbench_wave.models.compiled import CompileMode
    from robustbench_wave.models.frontend import GradMode
    from robustbench_wave.models.tokenizers import ProjectionKind

    assert GradMode.parse("bpda") is GradMode.BPDA and GradMode.parse(GradMode.EXACT) is GradMode.EXACT
    with pytest.raises(
        ValueError, match=r"unknown gradient mode 'bdpa'; did you mean 'bpda'\? \(choose one of"
    ):
        GradMode.parse("bdpa")
    for enum, what in (
        (EotMode, "EOT setting"),
        (CrossCheck, "cross-check setting"),
        (CompileMode, "compile mode"),
    ):
        with pytest.raises(ValueError, match=f"unknown {what} 'zzz' \\(choose one of: "):
            enum.parse("zzz")
    with pytest.raises(ValueError, match=r"unknown projection 'Dense'; did you mean 'dense'\?"):
        ProjectionKind.parse("Dense")
