"""``python -m tools.docs publish`` and ``python -m tools.docs render`` as a user types them (in process)."""

from __future__ import annotations

import json
import re

import pytest

from robustbench_wave import report
from tools import docs


@pytest.fixture
def run_dir(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "table.txt").write_text("model clean\nwavelet 86.0 ± 2.2\n")
    (run / "meta.json").write_text(json.dumps({"run": {"command": "python -m robustbench_wave.attack"}}))
    return run


def test_publish_then_docs_renders_and_checks_the_page(run_dir, tmp_path, capsys):
    into = tmp_path / "results" / "published"
    assert docs.main(["publish", str(run_dir), "--name", "demo", "--into", str(into)]) == 0
    assert (
        json.loads((into / "demo" / "source.json").read_text())["command"]
        == "python -m robustbench_wave.attack"
    )
    page = tmp_path / "README.md"
    include = "<!-- include: results/published/demo/table.txt -->\n<!-- /include -->\n"
    cite = '<!-- cite: results/published/demo/\n86.0% = table.txt~"wavelet"\n-->\n'
    page.write_text(f"# T\n\n{include}\n{cite}The wavelet ViT keeps 86.0%.\n")
    assert docs.main(["render", "--root", str(tmp_path), str(page), "--check"]) == 1  # include block empty
    assert docs.main(["render", "--root", str(tmp_path), str(page)]) == 0
    assert "wavelet 86.0 ± 2.2" in page.read_text()
    assert docs.main(["render", "--root", str(tmp_path), str(page), "--check"]) == 0
    (into / "demo" / "table.txt").write_text("model clean\nwavelet 86.1 ± 2.2\n")  # the cell changes
    assert docs.main(["render", "--root", str(tmp_path), str(page), "--check"]) == 1
    err = capsys.readouterr().err
    assert f"{page} [T]: '86.0%' is not what it cites: table.txt~\"wavelet\" gives 86.1" in err


def test_publish_refuses_a_name_that_is_no_folder_name(run_dir):
    with pytest.raises(SystemExit, match=re.escape("--name '../x' cannot name a folder")):
        docs.main(["publish", str(run_dir), "--name", "../x"])


def test_docs_refuses_a_missing_page(tmp_path):
    with pytest.raises(SystemExit, match="no such page"):
        docs.main(["render", "--root", str(tmp_path), str(tmp_path / "NOPE.md")])


def test_the_doc_commands_are_the_repositorys_not_the_report_commands(capsys):
    """publish and render are tools.docs's subcommands; the user's report command no longer offers them."""
    with pytest.raises(SystemExit):
        docs.main(["--help"])
    out = capsys.readouterr().out
    assert "publish" in out and "render" in out
    with pytest.raises(SystemExit):
        report.main(["--help"])
    out = capsys.readouterr().out
    assert "claims" in out and "publish" not in out and "render" not in out
