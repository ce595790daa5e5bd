"""Evaluation: attack a model with a suite and keep one record per (model, gradient mode, attack, eps, example).

Stages, one module each: :mod:`pipeline` (the public :func:`evaluate`: the model checked and scanned as at
every door, its suite, its escalation), :mod:`evaluator` (:func:`~.evaluator.evaluate_suite`, the loop over
the suite's chunks),
:mod:`plan` (the run's settings and the suite resolved for a data set), :mod:`execute` (one attack at one
budget: batching, seeding, predictions), :mod:`state` (the running per-example worst case that lets later
attacks skip broken points), :mod:`chunks` (resume from finished chunks), :mod:`records` (the record schema
and its one builder), :mod:`meta` (provenance), :mod:`result` (:class:`EvaluationResult`),
:mod:`adversarial` (the saved adversarial examples) and :mod:`reaudit` (re-checking them). Every number
computed from records -- worst case, Wilson intervals, the reference budget -- lives in :mod:`metrics`. The
layer sits on ``attacks`` and ``models`` and below ``analysis`` and ``reporting``: it never imports them.
"""

from robustbench_wave.evaluation.evaluator import ALL_MODES, resolve_grad_modes
from robustbench_wave.evaluation.pipeline import evaluate
from robustbench_wave.evaluation.plan import EvalSettings
from robustbench_wave.evaluation.result import EvaluationResult

__all__ = ["ALL_MODES", "EvalSettings", "EvaluationResult", "evaluate", "resolve_grad_modes"]
