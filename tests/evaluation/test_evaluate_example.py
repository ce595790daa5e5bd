"""docs/python-api.md's ``evaluate()`` example runs as written, and what it prints is what the records say:
the worst case it quotes is the records', and every adversarial example it holds in memory is audited and
breaks its example."""

from __future__ import annotations

import re

import pytest
import torch

from robustbench_wave.evaluation import metrics
from tests.support import REPO

DOC = REPO / "docs" / "python-api.md"


def _block_after(heading: str) -> str:
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index(heading) :]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)[0]


@pytest.mark.slow  # trains a small CNN and attacks it (~20 s)
def test_the_documented_evaluate_example_runs(capsys) -> None:
    scope: dict[str, object] = {}
    exec(compile(_block_after("## Your own loop: `evaluate()`"), str(DOC), "exec"), scope)  # our own docs
    result, labels, images = scope["result"], scope["labels"], scope["images"]
    broken = scope["broken"]
    rows = result.records[result.records["grad_mode"] == "exact"]
    assert result.robust_accuracy("Linf", 0.1) == metrics.robust_accuracy(result.records, "Linf", 0.1)[0]
    flags = metrics.robust_flags(rows, "Linf", 0.1)
    clean = metrics.robust_flags(rows[rows["attack"] == "clean"], "Linf", 0.1)
    assert sorted(broken.example_id.tolist()) == sorted(flags.index[clean & ~flags].tolist())
    assert len(broken.example_id) > 0
    delta = (broken.x - images[broken.example_id]).flatten(1).abs().amax(1)
    assert float(delta.max()) <= 0.1 + 1e-6 and float(broken.x.min()) >= 0 and float(broken.x.max()) <= 1
    with torch.no_grad():
        assert not (scope["model"](broken.x).argmax(1) == labels[broken.example_id]).any()
    printed = capsys.readouterr().out
    assert "of them still classified correctly: 0" in printed
    jpeg = scope["jpeg"]  # the JPEG defence: scanned in memory, BPDA across the PIL round trip
    assert "['bpda', 'exact']" in printed and set(jpeg.records["grad_mode"]) == {"exact", "bpda"}
    exact = jpeg.robust_accuracy("Linf", 0.1, grad_mode="exact")
    assert jpeg.robust_accuracy("Linf", 0.1) < exact  # the exact gradient alone would overstate it
    assert f"JPEG, worst case: {jpeg.robust_accuracy('Linf', 0.1):.1%}; unchecked" in printed
    with pytest.raises(ValueError, match="was not evaluated"):
        result.robust_accuracy("Linf", 8 / 255)
