"""The escalation after the checklist on two gloo ranks: each rank escalates whole seeding blocks, rank 0
joins them, and the run's records are the one-process escalation's, byte for byte (it ran on rank 0 alone,
the other ranks idle, for as long as the rest of the run on 2 cores).

The checklist's saturated quadrant model (every CE attack sees a zero gradient, so its one mode fails) on 16
examples of 4 seeding blocks, at L∞ 0.1 alone; transfer from the unsaturated model. Square runs 500 queries, not
5,000, in this process and in each rank (tests/support/escalation_queries.py): what is compared is where each
point is attacked, not how hard (measured: 11 of the 16 points fall to Square at 5,000 queries, 10 at 500; the
transfer breaks the rest either way).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from robustbench_wave.analysis.diagnostics import run_diagnostics
from robustbench_wave.attackrun.run_escalation import Surrogate, after_checklist
from robustbench_wave.attacks import parse_suite
from robustbench_wave.core.distributed import DistContext
from robustbench_wave.data import LabelledImages
from robustbench_wave.evaluation import EvalSettings, evaluate
from robustbench_wave.evaluation import escalation as esc
from robustbench_wave.evaluation.records import RECORDS_FILE, read_run
from tests.evaluation.test_escalation import QUADRANT_SUITE
from tests.support import masking_models as mm
from tests.support.escalation_queries import QUERIES, fewer_square_queries

pytestmark = pytest.mark.slow  # starts processes

N, RNG_BLOCK, RANKS = 16, 4, 2


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _escalate(run: Path, report: dict[str, Any] | None, ctx: DistContext | None = None) -> list[str]:
    x, y = mm.quadrant_data(N)
    surrogate = Surrogate(mm.QuadrantLinear().eval(), "honest")
    reports = [report] if report is not None else None
    data = LabelledImages(x, y, mm.Info())
    return after_checklist(
        run, {"sat": mm.SaturatedQuadrant().eval()}, data, reports, surrogate, batch_size=5, ctx=ctx
    )


def _rank(rank: int, port: int, run: Path, report: dict[str, Any]) -> None:
    """One gloo rank: rank 0 holds the checklist's report, as the attack command's rank 0 does."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    esc.SQUARE_PARAMS["n_queries"] = QUERIES  # as the one process's (this process ends with the rank)
    dist.init_process_group("gloo", rank=rank, world_size=RANKS)
    try:
        ctx = DistContext(rank, RANKS, rank, RANKS, torch.device("cpu"), "gloo")
        assert _escalate(run, report if rank == 0 else None, ctx) == ["sat"]
    finally:
        dist.destroy_process_group()


def test_two_ranks_escalate_as_one_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fewer_square_queries(monkeypatch)
    x, y = mm.quadrant_data(N)
    model = mm.SaturatedQuadrant().eval()
    suite = parse_suite(
        {
            **QUADRANT_SUITE,
            "settings": {"rng_block": RNG_BLOCK},
            "eps": {"default": {"Linf": [0.1]}},
            "attack": QUADRANT_SUITE["attack"][:2],
        }
    )
    settings = EvalSettings(model_name="sat", dataset=mm.Info(), cross_check="off")
    one, ranked = tmp_path / "one", tmp_path / "ranked"
    evaluate(model, x, y, suite, settings, batch_size=5, progress=False).save(one)
    shutil.copytree(one, ranked)
    records, _ = read_run(one)
    report = run_diagnostics(model, x, y, records, info=mm.Info(), model_name="sat", n=8, steps=3).to_dict()
    assert esc.checklist_reason(report) is not None  # the checklist escalates it

    assert _escalate(one, report) == ["sat"]
    mp.spawn(_rank, args=(_free_port(), ranked, report), nprocs=RANKS, join=True)

    assert (ranked / RECORDS_FILE).read_bytes() == (one / RECORDS_FILE).read_bytes()
    escalated, meta = read_run(ranked)
    assert escalated["attack"].map(esc.is_escalation).sum() > 0
    note = meta["models"]["sat"][esc.META_KEY]
    assert sorted({t["shard"] for t in note["timing"]}) == [0, 1]  # both ranks escalated their blocks
    assert sorted(p.name for p in (ranked / "shards").iterdir()) == ["0-of-2", "1-of-2"]
    one_note = json.loads((one / "meta.json").read_text())["models"]["sat"][esc.META_KEY]
    assert {k: v for k, v in note.items() if k != "timing"} == {
        k: v for k, v in one_note.items() if k != "timing"
    }
