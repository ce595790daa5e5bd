"""A smaller query budget for the escalation's Square, for tests of what an escalation does, not how strong it is.

The escalation runs Square at AutoAttack's 5,000 queries (``escalation.SQUARE_PARAMS``); on any point it cannot
break, that is 5,000 iterations of its loop per budget, whatever the batch (seconds per budget and model, the
bulk of an escalating test). Tests of when a model is escalated, which rows, notes, marks, resumed chunks and
ranks it writes, give it :data:`QUERIES` instead (its attack names keep ``square_5000``). The 5,000 itself is
pinned by ``tests/evaluation/test_escalation.py::
test_the_escalation_suite_is_square_5000_at_every_norm_threat_and_transfer_where_the_suite_has_none``, and what
those 5,000 queries break, against the closed-form robust accuracy, by its
``test_a_lost_gradient_escalates_and_square_5000_breaks_count``, which keeps them.
"""

from __future__ import annotations

import pytest

from robustbench_wave.evaluation import escalation as esc

QUERIES = 500


def fewer_square_queries(monkeypatch: pytest.MonkeyPatch, queries: int = QUERIES) -> None:
    """Square of every escalation in this process (for this test) at ``queries`` queries."""
    assert esc.SQUARE_PARAMS["n_queries"] == 5000  # what the tests that keep the budget pin
    monkeypatch.setitem(esc.SQUARE_PARAMS, "n_queries", queries)
