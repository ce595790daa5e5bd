"""Published results and the Markdown that quotes them: a number the page writes must be one its file holds."""

from __future__ import annotations

import json

import pytest

from tools.published import (
    MAX_FILE_BYTES,
    SOURCE_FILE,
    check_markdown,
    check_published,
    publish,
    render_includes,
    render_pages,
)

TABLE = "model  clean       Linf 0.03\npatch  86.5 ± 2.1  13.4 ± 2.1\nwavelet  86.0 ± 2.2  62.6 ± 3.0\n"


@pytest.fixture
def run_dir(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "table.txt").write_text(TABLE)
    (run / "verdict.json").write_text(json.dumps({"difference": 0.4921, "p_value": 6e-5}))
    (run / "records.csv.gz").write_bytes(b"not a summary")
    meta = {
        "run": {"command": "python -m robustbench_wave.attack --model wavelet"},
        "created_utc": "2026-12-01",
    }
    (run / "meta.json").write_text(json.dumps(meta))
    return run


def test_publish_copies_the_summaries_only_and_says_where_they_came_from(run_dir, tmp_path):
    dest = publish(run_dir, tmp_path / "published" / "demo")
    assert sorted(p.name for p in dest.iterdir()) == [SOURCE_FILE, "table.txt", "verdict.json"]
    source = json.loads((dest / SOURCE_FILE).read_text())
    assert source["command"] == "python -m robustbench_wave.attack --model wavelet"
    assert source["files"]["table.txt"] == __import__("hashlib").sha256(TABLE.encode()).hexdigest()
    assert (dest / "table.txt").read_text() == TABLE


def test_publish_refuses_a_folder_without_summaries_and_a_file_too_big(tmp_path):
    with pytest.raises(ValueError, match="none of the summary files"):
        publish(tmp_path, tmp_path / "out")
    big = tmp_path / "summary.csv"
    big.write_bytes(b"0" * (MAX_FILE_BYTES + 1))
    with pytest.raises(ValueError, match="keep records"):
        publish(big, tmp_path / "out")


def test_publish_refuses_a_source_with_no_runnable_command(run_dir, tmp_path):
    (run_dir / "meta.json").write_text(json.dumps({"run": {}}))
    with pytest.raises(ValueError, match="names no command"):
        publish(run_dir, tmp_path / "out")
    with pytest.raises(ValueError, match="not a command a reader can run"):
        publish(run_dir, tmp_path / "out", command="PLACEHOLDER")
    assert not (tmp_path / "out").exists()
    publish(run_dir, tmp_path / "out", command="make demo")


def test_the_published_check_catches_edited_extra_and_missing_files_and_a_placeholder_command(
    run_dir, tmp_path
):
    root = tmp_path / "published"
    dest = publish(run_dir, root / "demo")
    assert check_published(root) == []
    (dest / "table.txt").write_text(TABLE.replace("62.6", "62.7"))
    (dest / "notes.txt").write_text("hand-written")
    (dest / "verdict.json").unlink()
    source = json.loads((dest / SOURCE_FILE).read_text())
    (dest / SOURCE_FILE).write_text(json.dumps(source | {"command": "PLACEHOLDER"}))
    found = {p.section: p.what for p in check_published(root)}
    assert sorted(found) == ["-", "notes.txt", "table.txt", "verdict.json"]
    assert "'PLACEHOLDER' is not a command a reader can run" in found["-"]
    assert found["table.txt"] == "differs from the sha256 source.json recorded"
    assert found["notes.txt"].startswith("a file source.json does not list")
    assert found["verdict.json"] == "listed in source.json but missing"


def _page(body: str, path: str = "pub/table.txt") -> str:
    return f"# Title\n\n## Results\n\n<!-- include: {path} -->\nstale\n<!-- /include -->\n\n{body}\n"


def test_an_include_block_is_the_file_and_a_stale_one_is_reported(run_dir, tmp_path):
    publish(run_dir, tmp_path / "pub")
    page = _page("Nothing quoted.")
    assert [p.what for p in check_markdown(page, tmp_path)] == [
        "include block of pub/table.txt differs from the file"
    ]
    rendered = render_includes(page, tmp_path)
    assert f"```text\n{TABLE}```" in rendered
    assert check_markdown(rendered, tmp_path) == []


def test_a_sections_cite_lines_back_its_own_numbers_only(run_dir, tmp_path):
    publish(run_dir, tmp_path / "pub")
    cited = '<!-- cite: pub/\n62.6% = table.txt~"wavelet"#3\n+49.2 = verdict.json.difference %\n-->\n'
    page = render_includes(_page(f"{cited}It keeps 62.6%, +49.2 points over patch."), tmp_path)
    assert check_markdown(page, tmp_path) == []
    problems = check_markdown(page + "\n## Elsewhere\n\nThe same 62.6% again.\n", tmp_path)
    assert [p.section for p in problems] == ["Elsewhere"]
    assert "'62.6%' looks measured and names no cell" in problems[0].what


def test_render_pages_rewrites_in_place_and_check_changes_nothing(run_dir, tmp_path):
    publish(run_dir, tmp_path / "pub")
    page = tmp_path / "PAGE.md"
    page.write_text(_page("Nothing quoted."))
    assert render_pages([page], tmp_path, check=True) != []
    assert "stale" in page.read_text()
    assert render_pages([page], tmp_path) == []
    assert TABLE in page.read_text()


def test_an_unpublished_section_is_listed_and_not_checked(tmp_path):
    from tools.published import unpublished_sections

    page = "# T\n\n## Old\n\n<!-- unpublished: measured 2026-11-30 on another machine -->\nIt kept 62.6%.\n"
    assert check_markdown(page, tmp_path) == []
    assert unpublished_sections(page) == [("Old", "measured 2026-11-30 on another machine")]
    assert check_markdown(
        page.replace("<!-- unpublished: measured 2026-11-30 on another machine -->", ""), tmp_path
    )


def test_confidence_levels_and_the_scales_end_are_not_measurements(tmp_path):
    page = (
        "# T\n\n## S\n\nA 95% Wilson interval, a 90% interval, a 95% confidence level, from chance to 100%.\n"
    )
    assert check_markdown(page, tmp_path) == []
    assert check_markdown(page + "It kept 95%.\n", tmp_path) != []


def test_publish_keeps_the_headline_block_of_table_txt_on_its_own(tmp_path):
    from robustbench_wave.reporting.tables import WORST_CASE_HEADING
    from tools.published import WORST_CASE_FILE

    run = tmp_path / "run"
    run.mkdir()
    (run / "table.txt").write_text(f"the long table\n\n{WORST_CASE_HEADING}\npatch/exact 15.9 ± 2.3\n")
    dest = publish(run, tmp_path / "pub", command="make demo")
    assert WORST_CASE_FILE in json.loads((dest / SOURCE_FILE).read_text())["files"]
    assert (dest / WORST_CASE_FILE).read_text() == f"{WORST_CASE_HEADING}\npatch/exact 15.9 ± 2.3\n"


def test_markers_shown_in_code_are_not_markers(tmp_path):
    from tools.published import unpublished_sections

    page = (
        "# T\n\n## S\n\n<!-- unpublished: rerun it (`python -m tools.docs publish`) -->\nIt kept 62.6%.\n\n"
        "## How\n\nWrite `<!-- unpublished: REASON -->` or\n\n```\n<!-- cite: x/\n1 = a.csv[k=v].c\n-->\n```\n\n"
        "It kept 62.6%.\n"
    )
    assert unpublished_sections(page) == [("S", "rerun it (`python -m tools.docs publish`)")]
    problems = check_markdown(page, tmp_path)
    assert [(p.section, p.what.split("'")[1]) for p in problems] == [("How", "62.6%")]
