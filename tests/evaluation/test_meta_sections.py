"""meta.json's typed readers (evaluation.meta_sections): a real run's meta.json reads back to what the run
did (its suite parses to the suite that ran, its EOT entry to the plan, each field the recorded value), an
absent section reads empty, and a malformed one is refused with the file and the key named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from robustbench_wave.attacks import parse_suite
from robustbench_wave.evaluation import EvalSettings, evaluate
from robustbench_wave.evaluation import meta_sections as ms
from robustbench_wave.evaluation import records as rec
from robustbench_wave.evaluation.eot import EotPlan
from robustbench_wave.evaluation.metrics import declared_reference
from robustbench_wave.reporting.runs import load_run
from tests.support.masking_models import QuadrantLinear, quadrant_data
from tests.support.saved_runs import one_line_error, saved_run

SECTIONS = (
    ms.SuiteMeta,
    ms.DatasetMeta,
    ms.ModelsMeta,
    ms.AttacksMeta,
    ms.ProvenanceMeta,
    ms.InvocationMeta,
    ms.SettingsMeta,
    ms.RecordsMeta,
)

SUITE = {
    "name": "sections",
    "description": "what the readers are checked on",
    "settings": {"rng_block": 8},
    "eps": {"default": {"Linf": [0.1, 0.2]}},
    "reference": {"default": {"Linf": 0.2}},
    "attack": [
        {"name": "clean", "family": "clean"},
        {"name": "noise_sign", "family": "noise", "distribution": "sign", "threat": "Linf"},
        {"name": "pgd_linf", "family": "pgd", "threat": "Linf", "steps": 3, "rel_step_size": 0.5},
    ],
}


@pytest.fixture(scope="module")
def real_meta(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """meta.json as an evaluation saves it (one small model, a suite declaring its reference budget)."""
    x, y = quadrant_data(16)
    settings = EvalSettings(model_name="quad", dataset="synthetic", seed=3)
    result = evaluate(QuadrantLinear().eval(), x, y, parse_suite(SUITE), settings, progress=False)
    run = tmp_path_factory.mktemp("run")
    result.save(run)
    return run, json.loads((run / rec.META_FILE).read_text())


def test_a_real_meta_json_reads_back_to_what_the_run_did(real_meta: tuple[Path, dict]) -> None:
    run, meta = real_meta
    suite = ms.SuiteMeta.from_meta(meta)
    assert suite.name == "sections" and suite.description == SUITE["description"]
    assert parse_suite(dict(suite.raw)) == parse_suite(SUITE)  # the recorded suite is the suite that ran
    dataset = ms.DatasetMeta.from_meta(meta)
    assert (
        dataset.name == "synthetic"
        and dataset.n_examples == 16
        and dataset.data_sha256 == meta["data_sha256"]
    )
    assert dataset.reference == {"Linf": 0.2} == declared_reference(meta)
    assert dict(dataset.eps) == {"Linf": [0.1, 0.2]}
    (model,) = ms.ModelsMeta.from_meta(meta).values()
    entry = meta["models"]["quad"]
    assert model.name == "quad" and model.param_sha256 == entry["param_sha256"]
    assert model.grad_modes == ("exact",) and model.clean_accuracy == entry["clean_accuracy"]
    assert EotPlan.from_meta(model.eot).to_meta() == entry["eot"]  # the typed entry is the plan's own
    attacks = ms.AttacksMeta.from_meta(meta)
    assert list(attacks) == ["clean", "noise_sign", "pgd_linf"]
    pgd = attacks.entries["pgd_linf"]
    assert (pgd.family, pgd.threat, pgd.eps, pgd.params["steps"]) == ("pgd", "Linf", (0.1, 0.2), 3)
    settings = ms.SettingsMeta.from_meta(meta)
    assert settings.attack_seed == 3 and settings.skip_broken is True and settings.fingerprint
    assert ms.RecordsMeta.from_meta(meta) == ms.RecordsMeta(
        meta["records"]["sha256"], meta["records"]["rows"]
    )
    prov = ms.ProvenanceMeta.from_meta(meta)
    assert prov.created_utc == meta["created_utc"] and prov.libraries["torch"]
    folder = load_run(run)  # the report's run folder reads the same sections
    assert folder.suite == suite and folder.models.get("quad") == model and folder.dataset == dataset


@pytest.mark.parametrize("section", SECTIONS, ids=lambda s: s.__name__)
def test_an_absent_section_reads_empty(section: type) -> None:
    assert section.from_meta({}) == section.from_meta({k: None for k in ("suite", "dataset", "models")})


@pytest.mark.parametrize(
    ("section", "meta", "key"),
    [
        (ms.SuiteMeta, {"suite": ["pgd"]}, "'suite'"),
        (ms.SuiteMeta, {"suite": {"name": 3}}, "'suite.name'"),
        (ms.DatasetMeta, {"dataset": {"reference": {"Linf": "large"}}}, "'dataset.reference.Linf'"),
        (ms.DatasetMeta, {"n_examples": 1.5}, "'n_examples'"),
        (ms.ModelsMeta, {"models": {"m": ["exact"]}}, "'models.m'"),
        (ms.ModelsMeta, {"models": {"m": {"grad_modes": "exact"}}}, "'models.m.grad_modes'"),
        (ms.ModelsMeta, {"models": {"m": {"surrogate": {"name": 7}}}}, "'models.m.surrogate.name'"),
        (ms.AttacksMeta, {"attacks": {"pgd": {"eps": [0.1, None]}}}, "'attacks.pgd.eps[1]'"),
        (ms.SettingsMeta, {"settings": {"skip_broken": "yes"}}, "'settings.skip_broken'"),
        (ms.SettingsMeta, {"seeds": {"attack_seed": True}}, "'seeds.attack_seed'"),
        (ms.InvocationMeta, {"run": {"config": "smoke"}}, "'run.config'"),
        (ms.ProvenanceMeta, {"provenance": {"libraries": ["torch"]}}, "'provenance.libraries'"),
        (ms.RecordsMeta, {"records": {"rows": "many"}}, "'records.rows'"),
    ],
)
def test_a_malformed_section_names_the_file_and_key(section: type, meta: dict, key: str) -> None:
    with pytest.raises(ValueError) as err:
        section.from_meta(meta, "runs/x/meta.json")
    one_line_error(err.value, "runs/x/meta.json", key)


def test_a_run_folder_with_a_malformed_models_entry_is_refused_when_read(tmp_path: Path) -> None:
    """The report's reader refuses it at once, naming the file and key, instead of failing in a table."""
    run = saved_run(tmp_path / "run", models={"m": {"grad_modes": "exact"}})
    with pytest.raises(ValueError) as err:
        load_run(run)
    one_line_error(err.value, run / rec.META_FILE, "'models.m.grad_modes'")
